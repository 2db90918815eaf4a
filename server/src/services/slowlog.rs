//! The slow log (`SLOWLOG`), the latency monitor (`LATENCY`), and the redaction of secrets
//! from the commands they — and `MONITOR` — show.
//!
//! - Slow log: a command (not EXEC, which logs its queued commands instead) that ran for at
//!   least `slowlog-log-slower-than` microseconds (negative: never) is kept, newest first, up to
//!   `slowlog-max-len` entries: id, unix time, microseconds, its arguments (at most 32, the last
//!   then saying how many more; each cut at 128 bytes, saying how many more), the client's
//!   address and name — Redis's format and limits.
//! - Latency monitor: with `latency-monitor-threshold` N > 0, every event that took N ms or
//!   more is sampled — `command` and `fast-command` (commands by their `fast` flag) and
//!   `expire-cycle` — keeping the latest 160 samples (one per second) and the maximum per event.
//! - Redaction: passwords and secrets are shown as `(redacted)`, as Redis redacts them: AUTH's
//!   arguments, HELLO's `AUTH` pair, every argument of ACL SETUSER after the subcommand, and the
//!   values of the sensitive parameters in CONFIG SET.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

/// Arguments kept per entry (the last one then counts the others).
const MAX_ARGS: usize = 32;
/// Bytes kept per argument.
const MAX_ARG_BYTES: usize = 128;
/// Samples kept per latency event.
const LATENCY_SAMPLES: usize = 160;
/// Parameters whose values CONFIG SET never shows.
const SENSITIVE_PARAMS: &[&str] = &["masterauth", "requirepass", "tls-key-file-pass", "tls-client-key-file-pass"];

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `args` as logs may show them: secrets replaced by `(redacted)`.
pub fn redacted(args: &[Bytes]) -> Vec<Bytes> {
    let mut out = args.to_vec();
    let hidden = || Bytes::from_static(b"(redacted)");
    let is = |i: usize, word: &str| args.get(i).is_some_and(|a| a.eq_ignore_ascii_case(word.as_bytes()));
    if is(0, "auth") {
        out[1..].iter_mut().take(2).for_each(|a| *a = hidden());
    } else if is(0, "hello") {
        let mut j = 2;
        while j < args.len() {
            if is(j, "auth") && j + 2 < args.len() {
                out[j + 1] = hidden();
                out[j + 2] = hidden();
                j += 2;
            } else if is(j, "setname") {
                j += 1;
            }
            j += 1;
        }
    } else if is(0, "acl") && is(1, "setuser") {
        out[2..].iter_mut().for_each(|a| *a = hidden());
    } else if is(0, "config") && is(1, "set") {
        for pair in (2..args.len()).step_by(2) {
            if SENSITIVE_PARAMS.iter().any(|p| is(pair, p)) && pair + 1 < args.len() {
                out[pair + 1] = hidden();
            }
        }
    }
    out
}

/// One slow-log entry.
#[derive(Debug, Clone)]
pub struct SlowEntry {
    /// Increasing from 0 since the server started.
    pub id: u64,
    /// Unix time (seconds) when it was logged.
    pub time: u64,
    /// How long the command ran, in microseconds.
    pub micros: u64,
    /// Its arguments, redacted and trimmed.
    pub args: Vec<Bytes>,
    /// `ip:port` of the client.
    pub addr: String,
    /// The client's name.
    pub name: String,
}

/// The slow log and its settings.
#[derive(Debug)]
pub struct SlowLog {
    entries: Mutex<VecDeque<SlowEntry>>,
    next_id: AtomicU64,
    slower_than: AtomicI64,
    max_len: AtomicU64,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            entries: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(0),
            slower_than: AtomicI64::new(10_000),
            max_len: AtomicU64::new(128),
        }
    }
}

impl SlowLog {
    /// `slowlog-log-slower-than` (µs; negative: off) and `slowlog-max-len`.
    pub fn configure(&self, slower_than: i64, max_len: u64) {
        self.slower_than.store(slower_than, Ordering::Relaxed);
        self.max_len.store(max_len, Ordering::Relaxed);
        let mut entries = lock(&self.entries);
        entries.truncate(max_len as usize);
    }

    /// True if a command that ran `micros` is logged.
    pub fn wants(&self, micros: u64) -> bool {
        let limit = self.slower_than.load(Ordering::Relaxed);
        limit >= 0 && micros >= limit as u64
    }

    /// Logs a command that ran `micros` (the caller checked [`SlowLog::wants`]).
    pub fn push(&self, args: &[Bytes], micros: u64, addr: &str, name: &str) {
        let shown = redacted(args);
        let mut kept: Vec<Bytes> = Vec::with_capacity(shown.len().min(MAX_ARGS));
        for (i, a) in shown.iter().enumerate() {
            if shown.len() > MAX_ARGS && i == MAX_ARGS - 1 {
                kept.push(Bytes::from(format!("... ({} more arguments)", shown.len() - MAX_ARGS + 1)));
                break;
            }
            if a.len() > MAX_ARG_BYTES {
                let mut cut = a[..MAX_ARG_BYTES].to_vec();
                cut.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
                kept.push(Bytes::from(cut));
            } else {
                kept.push(a.clone());
            }
        }
        let entry = SlowEntry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            time: crate::storage::now_ms() / 1000,
            micros,
            args: kept,
            addr: addr.to_string(),
            name: name.to_string(),
        };
        let max = self.max_len.load(Ordering::Relaxed) as usize;
        let mut entries = lock(&self.entries);
        entries.push_front(entry);
        entries.truncate(max);
    }

    /// The newest `count` entries (all if None).
    pub fn newest(&self, count: Option<usize>) -> Vec<SlowEntry> {
        let entries = lock(&self.entries);
        entries.iter().take(count.unwrap_or(usize::MAX)).cloned().collect()
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// True if nothing is logged.
    pub fn is_empty(&self) -> bool {
        lock(&self.entries).is_empty()
    }

    /// `SLOWLOG RESET`.
    pub fn reset(&self) {
        lock(&self.entries).clear();
    }
}

/// One latency event's samples.
#[derive(Debug, Default, Clone)]
pub struct LatencyEvent {
    /// (unix time in seconds, milliseconds), oldest first; one per second.
    pub samples: VecDeque<(u64, u64)>,
    /// The largest sample ever recorded (since the last reset).
    pub max: u64,
}

/// The latency monitor.
#[derive(Debug, Default)]
pub struct LatencyMonitor {
    threshold_ms: AtomicU64,
    events: Mutex<HashMap<&'static str, LatencyEvent>>,
}

impl LatencyMonitor {
    /// `latency-monitor-threshold` (ms; 0: off).
    pub fn set_threshold(&self, ms: u64) {
        self.threshold_ms.store(ms, Ordering::Relaxed);
    }

    /// Records that `event` took `ms` milliseconds, if that reaches the threshold. Samples in
    /// the same second keep the largest.
    pub fn sample(&self, event: &'static str, ms: u64) {
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        if threshold == 0 || ms < threshold {
            return;
        }
        let now = crate::storage::now_ms() / 1000;
        let mut events = lock(&self.events);
        let e = events.entry(event).or_default();
        match e.samples.back_mut() {
            Some((t, v)) if *t == now => *v = (*v).max(ms),
            _ => {
                e.samples.push_back((now, ms));
                if e.samples.len() > LATENCY_SAMPLES {
                    e.samples.pop_front();
                }
            }
        }
        e.max = e.max.max(ms);
    }

    /// Every event with samples, by name.
    pub fn events(&self) -> Vec<(&'static str, LatencyEvent)> {
        let mut all: Vec<_> = lock(&self.events).iter().map(|(k, v)| (*k, v.clone())).collect();
        all.sort_by_key(|(k, _)| *k);
        all
    }

    /// One event's samples.
    pub fn event(&self, name: &str) -> Option<LatencyEvent> {
        lock(&self.events).iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
    }

    /// Forgets the named events (all if `names` is empty); how many had samples.
    pub fn reset(&self, names: &[String]) -> usize {
        let mut events = lock(&self.events);
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        let before = events.len();
        events.retain(|k, _| !names.iter().any(|n| n.eq_ignore_ascii_case(k)));
        before - events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[&str]) -> Vec<Bytes> {
        args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect()
    }

    fn shown(args: &[&str]) -> Vec<String> {
        redacted(&words(args)).iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect()
    }

    #[test]
    fn secrets_are_redacted_as_redis_redacts_them() {
        assert_eq!(shown(&["auth", "pw"]), ["auth", "(redacted)"]);
        assert_eq!(shown(&["AUTH", "user", "pw"]), ["AUTH", "(redacted)", "(redacted)"]);
        assert_eq!(
            shown(&["hello", "3", "AUTH", "u", "p", "SETNAME", "n"]),
            ["hello", "3", "AUTH", "(redacted)", "(redacted)", "SETNAME", "n"]
        );
        assert_eq!(
            shown(&["acl", "setuser", "bob", ">pw", "+get"]),
            ["acl", "setuser", "(redacted)", "(redacted)", "(redacted)"]
        );
        assert_eq!(
            shown(&["config", "set", "masterauth", "x", "maxclients", "10", "requirepass", "y"]),
            ["config", "set", "masterauth", "(redacted)", "maxclients", "10", "requirepass", "(redacted)"]
        );
        assert_eq!(shown(&["set", "auth", "pw"]), ["set", "auth", "pw"]);
    }

    #[test]
    fn entries_are_trimmed_and_kept_newest_first_up_to_the_limit() {
        let log = SlowLog::default();
        log.configure(0, 3);
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        let mut args = vec!["sadd".to_string(), "k".to_string()];
        args.extend(many);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        log.push(&words(&args), 5, "127.0.0.1:1", "");
        let long = "A".repeat(130);
        log.push(&words(&["set", "k", &long]), 6, "127.0.0.1:1", "me");
        let e = log.newest(None);
        assert_eq!((e[0].id, e[1].id), (1, 0));
        assert_eq!(e[0].args[2].len(), 128 + "... (2 more bytes)".len());
        assert_eq!(e[1].args.len(), 32);
        assert_eq!(e[1].args[31], Bytes::from("... (11 more arguments)"));
        for _ in 0..5 {
            log.push(&words(&["ping"]), 1, "a", "");
        }
        assert_eq!(log.len(), 3);
        log.configure(-1, 3);
        assert!(!log.wants(u64::MAX));
    }

    #[test]
    fn latency_samples_reach_the_threshold_and_keep_the_maximum() {
        let m = LatencyMonitor::default();
        m.sample("command", 500);
        assert!(m.events().is_empty(), "off by default");
        m.set_threshold(100);
        m.sample("command", 50);
        m.sample("command", 150);
        m.sample("command", 120);
        m.sample("fast-command", 101);
        let e = m.event("command").unwrap();
        assert_eq!((e.samples.len(), e.samples[0].1, e.max), (1, 150, 150), "one sample per second, the largest");
        assert_eq!(m.reset(&["COMMAND".into()]), 1);
        assert_eq!(m.events().len(), 1);
        assert_eq!(m.reset(&[]), 1);
    }
}
