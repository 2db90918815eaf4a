//! Timing and counting one benchmark across threads.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::error::Result;

/// The measured outcome of one benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Benchmark name.
    pub name: String,
    /// Operations done (all threads).
    pub ops: u64,
    /// Key and value bytes processed.
    pub bytes: u64,
    /// For reads: keys found.
    pub found: Option<u64>,
    /// For the mixed benchmarks: how many of the operations were writes.
    pub writes: u64,
    /// Sum of the threads' busy time.
    pub thread_seconds: f64,
    /// Wall-clock time.
    pub wall_seconds: f64,
    /// Latency percentiles in microseconds (with --histogram).
    pub percentiles: Option<Percentiles>,
    /// Bytes of the database directory afterwards.
    pub file_size: u64,
    /// Extra text (e.g. a throughput unit for table benchmarks).
    pub note: Option<String>,
    /// The process's memory when the benchmark ended.
    pub memory: Option<crate::memory::Memory>,
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Outcome {
    /// Microseconds per operation per thread, as db_bench reports it.
    pub fn micros_per_op(&self) -> f64 {
        if self.ops == 0 {
            return 0.0;
        }
        self.thread_seconds * 1e6 / self.ops as f64
    }

    /// Operations per second (wall clock).
    pub fn ops_per_sec(&self) -> f64 {
        if self.wall_seconds == 0.0 {
            return 0.0;
        }
        self.ops as f64 / self.wall_seconds
    }

    /// MB/s of key and value bytes (wall clock).
    pub fn mb_per_sec(&self) -> f64 {
        if self.wall_seconds == 0.0 {
            return 0.0;
        }
        self.bytes as f64 / 1048576.0 / self.wall_seconds
    }
}

/// Counts one thread's operations.
#[derive(Debug)]
pub struct Recorder {
    ops: u64,
    bytes: u64,
    found: u64,
    writes: u64,
    started: Instant,
    last: Instant,
    hist: Option<Histogram<u64>>,
    progress: ProgressBar,
    unreported: u64,
}

impl Recorder {
    fn new(histogram: bool, progress: ProgressBar) -> Self {
        let now = Instant::now();
        let hist =
            histogram.then(|| Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"));
        Recorder { ops: 0, bytes: 0, found: 0, writes: 0, started: now, last: now, hist, progress, unreported: 0 }
    }

    /// One operation finished, having processed `bytes`.
    #[inline]
    pub fn done(&mut self, bytes: usize) {
        self.ops += 1;
        self.bytes += bytes as u64;
        if let Some(h) = self.hist.as_mut() {
            let now = Instant::now();
            let _ = h.record((now - self.last).as_nanos().max(1) as u64);
            self.last = now;
        }
        self.unreported += 1;
        if self.unreported == 1024 {
            self.progress.inc(self.unreported);
            self.unreported = 0;
        }
    }

    /// A read found its key.
    #[inline]
    pub fn found(&mut self) {
        self.found += 1;
    }

    /// One of the operations (of a mixed benchmark) was a write.
    #[inline]
    pub fn wrote(&mut self) {
        self.writes += 1;
    }
}

/// db_bench's `--benchmark_write_rate_limit`: writers, all threads together, go no faster than
/// `bytes_per_sec` (0: no limit).
#[derive(Debug)]
pub struct WriteRate {
    bytes_per_sec: u64,
    started: Instant,
    sent: std::sync::atomic::AtomicU64,
}

impl WriteRate {
    /// A limit starting now.
    pub fn new(bytes_per_sec: u64) -> Self {
        WriteRate { bytes_per_sec, started: Instant::now(), sent: std::sync::atomic::AtomicU64::new(0) }
    }

    /// Accounts `bytes` about to be written, first sleeping as long as the writes so far are
    /// ahead of the rate.
    pub fn admit(&self, bytes: usize) {
        if self.bytes_per_sec == 0 {
            return;
        }
        let sent = self.sent.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        let due = Duration::from_secs_f64(sent as f64 / self.bytes_per_sec as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

/// Runs `work` on `threads` threads, each with its own recorder and thread index.
pub fn run_threads<F>(
    name: &str,
    threads: usize,
    total_ops: u64,
    histogram: bool,
    count_found: bool,
    work: F,
) -> Result<Outcome>
where
    F: Fn(usize, &mut Recorder) -> lsm::Result<()> + Sync,
{
    let progress = if std::io::stderr().is_terminal() && total_ops > 0 {
        let p = ProgressBar::new(total_ops);
        p.set_style(
            ProgressStyle::with_template("{msg:>18} [{bar:40}] {pos}/{len} ({per_sec}, {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        p.set_message(name.to_string());
        p
    } else {
        ProgressBar::hidden()
    };
    let wall = Instant::now();
    let results: Vec<lsm::Result<(Recorder, Duration)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, progress) = (&work, progress.clone());
                s.spawn(move || {
                    let mut r = Recorder::new(histogram, progress);
                    work(t, &mut r)?;
                    let busy = r.started.elapsed();
                    Ok((r, busy))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(lsm::Error::InvalidArgument("benchmark thread panicked".into()))))
            .collect()
    });
    let wall_seconds = wall.elapsed().as_secs_f64();
    progress.finish_and_clear();
    let mut out = Outcome {
        name: name.to_string(),
        ops: 0,
        bytes: 0,
        found: count_found.then_some(0),
        writes: 0,
        thread_seconds: 0.0,
        wall_seconds,
        percentiles: None,
        file_size: 0,
        note: None,
        memory: None,
    };
    let mut merged: Option<Histogram<u64>> = None;
    for r in results {
        let (r, busy) = r?;
        out.ops += r.ops;
        out.bytes += r.bytes;
        out.writes += r.writes;
        out.thread_seconds += busy.as_secs_f64();
        if let Some(f) = out.found.as_mut() {
            *f += r.found;
        }
        if let Some(h) = r.hist {
            match merged.as_mut() {
                Some(m) => {
                    let _ = m.add(&h);
                }
                None => merged = Some(h),
            }
        }
    }
    out.percentiles = merged.map(|h| Percentiles {
        p50: h.value_at_quantile(0.50) as f64 / 1000.0,
        p95: h.value_at_quantile(0.95) as f64 / 1000.0,
        p99: h.value_at_quantile(0.99) as f64 / 1000.0,
        p999: h.value_at_quantile(0.999) as f64 / 1000.0,
        max: h.max() as f64 / 1000.0,
    });
    Ok(out)
}
