//! Per-command statistics, as `INFO commandstats`, `errorstats` and `latencystats` report them.
//!
//! One entry per command and subcommand of the ACL universe (`config|get` apart from
//! `config|set`, as Redis 7 counts them), indexed by its universe id, so recording a call is a
//! few relaxed atomic adds: calls, microseconds, calls refused before running (`rejected_calls`:
//! arity, ACL, MULTI state …) and calls that answered an error (`failed_calls`). The table is
//! striped per thread (`lsm::stripe`): a thread always counts into its own copy, so threads
//! running the same command do not fight over one cache line (that cost 5-7 % of GET
//! throughput); INFO sums the copies. With
//! `latency-tracking yes` (the default) each call's duration also goes into a lock-free
//! log-linear histogram (16 sub-buckets per power of two: values within ~6 %), allocated on the
//! command's first call; percentiles (INFO) and `LATENCY HISTOGRAM`'s cumulative levels are read
//! from it as Redis reads its HdrHistogram. Error
//! replies are counted by their first word (`ERR`, `WRONGTYPE` …), at most 128 kinds, as in
//! Redis.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lsm::stripe::Striped;

use crate::commands::meta;

/// Distinct error kinds kept (Redis's `ERROR_STATS_NUMBER`).
const MAX_ERROR_KINDS: usize = 128;
/// Sub-buckets per power of two.
const SUB: u64 = 16;
/// Durations are recorded up to a second (ns), as Redis's histograms.
const MAX_NS: u64 = 1_000_000_000;
/// Buckets needed for 0..=MAX_NS.
const BUCKETS: usize = bucket(MAX_NS) + 1;

/// The bucket of a duration of `ns` nanoseconds.
const fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let power = 63 - ns.leading_zeros() as u64; // >= 4
    let shift = power - 4;
    (SUB * (power - 3) + ((ns >> shift) & (SUB - 1))) as usize
}

/// The largest duration (ns) that falls in bucket `b`.
fn bucket_high(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let power = b / SUB + 3;
    let shift = power - 4;
    ((SUB + b % SUB) << shift) + (1 << shift) - 1
}

/// A command's counters (one copy).
#[derive(Debug, Default)]
struct Entry {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    histogram: OnceLock<Box<[AtomicU64]>>,
}

/// Every command's counters and the error counts.
#[derive(Debug)]
pub struct CommandStats {
    /// Per thread stripe, one entry per universe id.
    entries: Striped<Box<[Entry]>>,
    errors: Mutex<BTreeMap<String, u64>>,
    total_errors: AtomicU64,
    latency_tracking: AtomicBool,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            entries: Striped::from_fn(|| (0..meta::universe().len()).map(|_| Entry::default()).collect()),
            errors: Mutex::new(BTreeMap::new()),
            total_errors: AtomicU64::new(0),
            latency_tracking: AtomicBool::new(true),
        }
    }
}

impl CommandStats {
    /// `latency-tracking yes|no`.
    pub fn set_latency_tracking(&self, on: bool) {
        self.latency_tracking.store(on, Ordering::Relaxed);
    }

    /// The calling thread's copy of command `id`'s counters.
    fn entry(&self, id: usize) -> Option<&Entry> {
        self.entries.local().get(id)
    }

    /// Every copy of command `id`'s counters.
    fn copies(&self, id: usize) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter_map(move |stripe| stripe.get(id))
    }

    /// A call of command `id` (a universe id) that ran for `took`; `error` is its
    /// error reply.
    pub fn called(&self, id: usize, took: Duration, error: Option<&str>) {
        self.record(id, took, error, true);
    }

    /// A call of command `id` that failed with an error already counted in the error
    /// statistics (a script's error that a command it called returned): a failed call, but
    /// no second error.
    pub fn called_failed_counted(&self, id: usize, took: Duration) {
        self.record(id, took, Some(""), false);
    }

    fn record(&self, id: usize, took: Duration, error: Option<&str>, count_error: bool) {
        let Some(e) = self.entry(id) else { return };
        e.calls.fetch_add(1, Ordering::Relaxed);
        e.usec.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        if let Some(msg) = error {
            e.failed.fetch_add(1, Ordering::Relaxed);
            if count_error {
                self.error(msg);
            }
        }
        if self.latency_tracking.load(Ordering::Relaxed) {
            let h = e.histogram.get_or_init(|| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect());
            let ns = (took.as_nanos() as u64).min(MAX_NS);
            h[bucket(ns)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A call of command `id` already counted whose outcome turned out to be `error` (a
    /// batched SET whose commit failed).
    pub fn failed(&self, id: usize, error: &str) {
        if let Some(e) = self.entry(id) {
            e.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.error(error);
    }

    /// A call refused before it ran with `error` (`id`: its command, if known).
    pub fn rejected(&self, id: Option<usize>, error: &str) {
        if let Some(e) = id.and_then(|id| self.entry(id)) {
            e.rejected.fetch_add(1, Ordering::Relaxed);
        }
        self.error(error);
    }

    /// An error reply (counted by its first word).
    pub fn error(&self, msg: &str) {
        self.total_errors.fetch_add(1, Ordering::Relaxed);
        let kind = msg.split(' ').next().unwrap_or("ERR");
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        let room = errors.len() < MAX_ERROR_KINDS;
        match errors.get_mut(kind) {
            Some(n) => *n += 1,
            None if room => {
                errors.insert(kind.to_string(), 1);
            }
            None => {}
        }
    }

    /// Error replies sent (INFO `total_error_replies`).
    pub fn total_errors(&self) -> u64 {
        self.total_errors.load(Ordering::Relaxed)
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset(&self) {
        for e in self.entries.iter().flat_map(|stripe| stripe.iter()) {
            for c in [&e.calls, &e.usec, &e.rejected, &e.failed] {
                c.store(0, Ordering::Relaxed);
            }
            if let Some(h) = e.histogram.get() {
                h.iter().for_each(|b| b.store(0, Ordering::Relaxed));
            }
        }
        self.errors.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.total_errors.store(0, Ordering::Relaxed);
    }

    /// INFO `commandstats` fields: `cmdstat_<name>` for every command called or refused.
    pub fn commandstats(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for cmd in meta::universe() {
            let sum = |f: fn(&Entry) -> &AtomicU64| -> u64 {
                self.copies(cmd.id).map(|e| f(e).load(Ordering::Relaxed)).sum()
            };
            let (calls, usec) = (sum(|e| &e.calls), sum(|e| &e.usec));
            let (rejected, failed) = (sum(|e| &e.rejected), sum(|e| &e.failed));
            if calls == 0 && rejected == 0 && failed == 0 {
                continue;
            }
            let per_call = if calls == 0 { 0.0 } else { usec as f64 / calls as f64 };
            out.push((
                format!("cmdstat_{}", cmd.name),
                format!(
                    "calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}"
                ),
            ));
        }
        out
    }

    /// INFO `errorstats` fields: `errorstat_<KIND>:count=<n>`.
    pub fn errorstats(&self) -> Vec<(String, String)> {
        let errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        errors.iter().map(|(kind, n)| (format!("errorstat_{kind}"), format!("count={n}"))).collect()
    }

    /// INFO `latencystats` fields: `latency_percentiles_usec_<name>` at each of `percentiles`.
    pub fn latencystats(&self, percentiles: &[f64]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for cmd in meta::universe() {
            let Some(counts) = self.counts(cmd.id) else { continue };
            let total: u64 = counts.iter().sum();
            let values: Vec<String> = percentiles
                .iter()
                .map(|&p| format!("p{}={:.3}", trim_float(p), value_at(&counts, total, p) as f64 / 1000.0))
                .collect();
            out.push((format!("latency_percentiles_usec_{}", cmd.name), values.join(",")));
        }
        out
    }
}

impl CommandStats {
    /// The merged latency histogram of command `id` (None: never timed).
    fn counts(&self, id: usize) -> Option<Vec<u64>> {
        let mut counts = vec![0u64; BUCKETS];
        let mut any = false;
        for h in self.copies(id).filter_map(|e| e.histogram.get()) {
            any = true;
            for (c, b) in counts.iter_mut().zip(h.iter()) {
                *c += b.load(Ordering::Relaxed);
            }
        }
        any.then_some(counts).filter(|c| c.iter().any(|&n| n > 0))
    }

    /// `LATENCY HISTOGRAM` of command `id`: its calls and the cumulative distribution of their
    /// durations at Redis's reporting levels (see [`cumulative`]). None if it has no samples.
    pub fn histogram(&self, id: usize) -> Option<(u64, Vec<(u64, u64)>)> {
        let counts = self.counts(id)?;
        Some((counts.iter().sum(), cumulative(&counts)))
    }
}

/// Redis's `LATENCY HISTOGRAM` levels: its HdrHistogram (2 significant digits, nanoseconds)
/// walked in powers of two from 1024 ns; each level reports, in whole microseconds, the highest
/// value equivalent to 1024·2^k at that precision (1, 2, 4, 8, 16, 33, 66, 132, 264 … µs) with
/// the number of samples up to it, and only levels where that number grew are listed.
fn cumulative(counts: &[u64]) -> Vec<(u64, u64)> {
    let total: u64 = counts.iter().sum();
    let mut out = Vec::new();
    let (mut seen, mut b, mut previous) = (0u64, 0usize, 0u64);
    let mut level: u64 = 1024;
    while seen < total && level <= 2 * MAX_NS {
        // HdrHistogram with 2 significant digits keeps 128 values per half power of two.
        let magnitude = 63 - u64::from(level.leading_zeros());
        let highest = level + (1u64 << magnitude.saturating_sub(7)) - 1;
        while b < counts.len() && bucket_high(b) <= highest {
            seen += counts[b];
            b += 1;
        }
        if seen > previous {
            out.push((highest / 1000, seen));
            previous = seen;
        }
        level *= 2;
    }
    out
}

/// The duration (ns) at percentile `p` of the histogram `counts` holding `total` values.
fn value_at(counts: &[u64], total: u64, p: f64) -> u64 {
    let want = ((p.clamp(0.0, 100.0) / 100.0 * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, &n) in counts.iter().enumerate() {
        seen += n;
        if seen >= want {
            return bucket_high(b);
        }
    }
    bucket_high(counts.len() - 1)
}

/// `99.9` as `99.9`, `50` as `50` (Redis prints percentiles this way).
pub fn trim_float(p: f64) -> String {
    let s = format!("{p:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// When a command started, for [`Stamp::elapsed`]: read from the CPU's time-stamp counter
/// where it is invariant (x86-64 with `constant_tsc` and `nonstop_tsc`: ~10 ns, against ~25-70
/// ns for the system clock, which made timing every command cost 4-6 % of GET throughput),
/// else from the system's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Stamp(u64);

/// How stamps are read and turned into durations.
struct Clock {
    /// The time-stamp counter is usable; stamps are its ticks (else ns since `base`).
    tsc: bool,
    /// Nanoseconds per tick.
    ns_per_tick: f64,
    base: std::time::Instant,
}

static CLOCK: std::sync::LazyLock<Clock> = std::sync::LazyLock::new(|| {
    let base = std::time::Instant::now();
    if !invariant_tsc() {
        return Clock { tsc: false, ns_per_tick: 1.0, base };
    }
    // One millisecond of calibration against the system clock (error well under 0.1 %).
    let (t0, c0) = (std::time::Instant::now(), read_tsc());
    while t0.elapsed() < std::time::Duration::from_millis(1) {
        std::hint::spin_loop();
    }
    let (ns, ticks) = (t0.elapsed().as_nanos() as f64, read_tsc().wrapping_sub(c0) as f64);
    if ticks <= 0.0 {
        return Clock { tsc: false, ns_per_tick: 1.0, base };
    }
    Clock { tsc: true, ns_per_tick: ns / ticks, base }
});

#[cfg(target_arch = "x86_64")]
fn read_tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64; it only reads the counter.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_tsc() -> u64 {
    0
}

/// True where the time-stamp counter ticks at one rate across cores and power states.
fn invariant_tsc() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
            info.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
                l.split_whitespace().any(|f| f == "constant_tsc") && l.split_whitespace().any(|f| f == "nonstop_tsc")
            })
        })
}

impl Stamp {
    /// Now.
    #[inline]
    pub fn now() -> Stamp {
        let clock = &*CLOCK;
        if clock.tsc {
            Stamp(read_tsc())
        } else {
            Stamp(clock.base.elapsed().as_nanos() as u64)
        }
    }

    /// The time since this stamp.
    #[inline]
    pub fn elapsed(self) -> Duration {
        let clock = &*CLOCK;
        let now = Stamp::now().0;
        Duration::from_nanos((now.saturating_sub(self.0) as f64 * clock.ns_per_tick) as u64)
    }

    /// The stamp `d` before this one (the clock's start at the earliest).
    pub fn earlier_by(self, d: Duration) -> Stamp {
        let ticks = (d.as_nanos() as f64 / CLOCK.ns_per_tick) as u64;
        Stamp(self.0.saturating_sub(ticks))
    }

    /// Calibrates the clock now (at startup) rather than on the first command.
    pub fn calibrate() {
        std::sync::LazyLock::force(&CLOCK);
    }
}

/// Parses `latency-tracking-info-percentiles` ("50 99 99.9"), with Redis's errors.
pub fn parse_percentiles(value: &str) -> Result<Vec<f64>, &'static str> {
    value
        .split_whitespace()
        .map(|w| match w.parse::<f64>() {
            Ok(p) if p.is_nan() => Err("Invalid latency-tracking-info-percentiles parameters"),
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
            Ok(_) => Err("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"),
            Err(_) => Err("Invalid latency-tracking-info-percentiles parameters"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_duration_in_order_within_six_percent() {
        let mut last = 0;
        for ns in (0..5000).chain((5000..MAX_NS).step_by(99_991)) {
            let b = bucket(ns);
            assert!(b >= last && b < BUCKETS, "{ns}");
            last = b;
            let high = bucket_high(b);
            assert!(high >= ns, "{ns} above its bucket's top {high}");
            assert!((high - ns) as f64 <= ns as f64 * 0.0625 + 1.0, "{ns} vs {high}");
        }
    }

    #[test]
    fn latency_histogram_reports_redis_levels_cumulatively() {
        let stats = CommandStats::default();
        let set = meta::acl_command("set").unwrap().id;
        assert_eq!(stats.histogram(set), None, "no samples, no histogram");
        for (ns, times) in [(500u64, 10u64), (1_500, 5), (40_000, 1)] {
            for _ in 0..times {
                stats.called(set, Duration::from_nanos(ns), None);
            }
        }
        // Levels 1024 ns (1 µs), 2048 (2 µs) … 65536 ns (66 µs); unchanged levels are left out.
        assert_eq!(stats.histogram(set), Some((16, vec![(1, 10), (2, 15), (66, 16)])));
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let stats = CommandStats::default();
        let get = meta::acl_command("get").unwrap().id;
        // From threads that count into different copies.
        std::thread::scope(|scope| {
            for start in 1..=4u64 {
                let stats = &stats;
                scope.spawn(move || {
                    for us in (start..=100).step_by(4) {
                        stats.called(get, Duration::from_micros(us), None);
                    }
                });
            }
        });
        stats.called(get, Duration::from_micros(7), Some("WRONGTYPE Operation against a key"));
        let lines = stats.latencystats(&[50.0, 99.0, 99.9]);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].0, "latency_percentiles_usec_get");
        let values: Vec<f64> = lines[0].1.split(',').map(|kv| kv.split_once('=').unwrap().1.parse().unwrap()).collect();
        assert!((50.0..=54.0).contains(&values[0]), "{values:?}");
        assert!((99.0..=105.0).contains(&values[1]), "{values:?}");
        assert!(lines[0].1.starts_with("p50=") && lines[0].1.contains(",p99.9="), "{}", lines[0].1);
        let cmd = stats.commandstats();
        assert_eq!(cmd.len(), 1);
        assert!(cmd[0].1.starts_with("calls=101,usec=5057,usec_per_call=50.07,"), "{}", cmd[0].1);
        assert!(cmd[0].1.ends_with("rejected_calls=0,failed_calls=1"), "{}", cmd[0].1);
        stats.rejected(Some(get), "ERR wrong number of arguments for 'get' command");
        stats.rejected(None, "ERR unknown command 'x'");
        assert_eq!(
            stats.errorstats(),
            [("errorstat_ERR".into(), "count=2".into()), ("errorstat_WRONGTYPE".into(), "count=1".into())]
        );
        assert_eq!(stats.total_errors(), 3);
        stats.reset();
        assert!(
            stats.commandstats().is_empty() && stats.errorstats().is_empty() && stats.latencystats(&[50.0]).is_empty()
        );
    }

    #[test]
    fn stamps_measure_time_like_the_system_clock() {
        let (stamp, t) = (Stamp::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (ours, system) = (stamp.elapsed().as_secs_f64(), t.elapsed().as_secs_f64());
        assert!((ours - system).abs() < system * 0.05, "{ours} vs {system}");
    }

    #[test]
    fn percentile_settings_parse_as_redis_accepts_them() {
        assert_eq!(parse_percentiles("50 99 99.9"), Ok(vec![50.0, 99.0, 99.9]));
        assert_eq!(parse_percentiles(""), Ok(vec![]));
        assert!(parse_percentiles("50 101").unwrap_err().contains("between [0.0,100.0]"));
        assert!(parse_percentiles("x").unwrap_err().starts_with("Invalid"));
    }
}
