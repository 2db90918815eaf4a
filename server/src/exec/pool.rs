//! The executor threads: where commands run, off the async runtime.
//!
//! A fixed set of core threads (`executor-threads`, default one per core) takes jobs from one
//! queue. Jobs may block (an engine read that faults a page in, a write that leads a group
//! commit or waits in a write stall, a key-lock wait), so a monitor watches for starvation: when
//! jobs are queued and none has finished for [`STARVED_AFTER`], every thread is stuck, and it
//! starts a helper thread (up to [`MAX_HELPERS`]) that serves the queue until the core threads
//! finish jobs again (or it has been idle for [`HELPER_IDLE`]). Stalled writers therefore cannot
//! starve readers of cached keys, and a steady load runs on the core threads alone (no thread
//! per request, no oversubscription): helpers that outlived a hiccup would otherwise stay busy
//! under load, and a dozen threads contending for two cores and one hot key's lock spend more
//! time switching than working (measured: a third fewer XADDs per second on one stream).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// A job queued for an executor thread.
type Job = Box<dyn FnOnce() + Send>;

/// The job queue: a mutex-protected deque and a condition variable. An idle thread sleeps at
/// once (no spinning or yielding: on a small machine the CPU is better left to the runtime and
/// the other executors).
#[derive(Default)]
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// Threads asleep in [`Queue::pop`], counted under the `jobs` lock: a push wakes one only
    /// if there is one (a condvar's notify is a system call even when nobody sleeps).
    sleepers: AtomicUsize,
    len: AtomicUsize,
    closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("len", &self.len).finish_non_exhaustive()
    }
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Job>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, job: Job) -> Result<(), ()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(());
        }
        let mut jobs = self.lock();
        jobs.push_back(job);
        self.len.fetch_add(1, Ordering::Release);
        let sleepers = self.sleepers.load(Ordering::Relaxed);
        drop(jobs);
        if sleepers > 0 {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// The next job; waits at most `timeout` (None: until one comes or the queue closes).
    fn pop(&self, timeout: Option<Duration>) -> Option<Job> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut jobs = self.lock();
        loop {
            if let Some(job) = jobs.pop_front() {
                self.len.fetch_sub(1, Ordering::Release);
                return Some(job);
            }
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            let left = match deadline {
                None => None,
                Some(d) => Some(d.checked_duration_since(std::time::Instant::now())?),
            };
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            jobs = match left {
                None => self.ready.wait(jobs).unwrap_or_else(|e| e.into_inner()),
                Some(left) => self.ready.wait_timeout(jobs, left).unwrap_or_else(|e| e.into_inner()).0,
            };
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _guard = self.lock();
        self.ready.notify_all();
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Closes the queue when the last [`Executor`] handle goes.
#[derive(Debug)]
struct Sender(Arc<Shared>);

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.rx.close();
    }
}

/// How long queued jobs may see no job finish before a helper thread starts.
pub const STARVED_AFTER: Duration = Duration::from_millis(10);
/// Most helper threads alive at once.
pub const MAX_HELPERS: usize = 64;
/// A helper thread exits after this long without a job.
pub const HELPER_IDLE: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Shared {
    rx: Queue,
    /// Jobs finished since start: the monitor's sign of progress.
    finished: AtomicU64,
    /// Jobs the core threads finished since start.
    core_finished: AtomicU64,
    /// The core threads finished a job during the monitor's last period: helpers leave.
    cores_moving: AtomicBool,
    helpers: AtomicUsize,
    helpers_started: AtomicU64,
    /// Core threads.
    threads: usize,
}

/// The executor pool (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Executor {
    tx: Arc<Sender>,
    shared: Arc<Shared>,
}

/// The job panicked (its panic was caught and logged by the thread that ran it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobPanicked;

impl Executor {
    /// Starts `threads` core threads (0: one per core) and the starvation monitor. They run
    /// until the last `Executor` handle is dropped.
    pub fn start(threads: usize) -> std::io::Result<Executor> {
        let threads = if threads == 0 { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { threads };
        let shared = Arc::new(Shared {
            rx: Queue::default(),
            finished: AtomicU64::new(0),
            core_finished: AtomicU64::new(0),
            cores_moving: AtomicBool::new(true),
            helpers: AtomicUsize::new(0),
            helpers_started: AtomicU64::new(0),
            threads,
        });
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new().name(format!("shale-exec-{i}")).spawn(move || core_loop(&shared))?;
        }
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new().name("shale-exec-monitor".into()).spawn(move || monitor(weak))?;
        Ok(Executor { tx: Arc::new(Sender(Arc::clone(&shared))), shared })
    }

    /// Runs `job` on an executor thread; the future resolves with its result without blocking
    /// the caller's thread. A panic in `job` resolves to `Err(JobPanicked)`.
    pub fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> impl Future<Output = Result<R, JobPanicked>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let queued = self.tx.0.rx.push(Box::new(move || {
            let _ = tx.send(job());
        }));
        async move {
            if queued.is_err() {
                return Err(JobPanicked);
            }
            rx.await.map_err(|_| JobPanicked)
        }
    }

    /// Core threads.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Helper threads alive now.
    pub fn helpers(&self) -> usize {
        self.shared.helpers.load(Ordering::Relaxed)
    }

    /// Helper threads started since the pool started (how often every core thread was stuck).
    pub fn helpers_started(&self) -> u64 {
        self.shared.helpers_started.load(Ordering::Relaxed)
    }

    /// Jobs waiting for a thread.
    pub fn queued(&self) -> usize {
        self.shared.rx.len()
    }
}

fn run_job(shared: &Shared, job: Job) {
    // The jobs of this server catch their own panics per command; this keeps the thread alive
    // if anything else panics.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
        tracing::error!(target: "shale::exec", "an executor job panicked");
    }
    shared.finished.fetch_add(1, Ordering::Release);
}

fn core_loop(shared: &Shared) {
    while let Some(job) = shared.rx.pop(None) {
        run_job(shared, job);
        shared.core_finished.fetch_add(1, Ordering::Release);
    }
}

/// A helper serves the queue while the core threads are stuck: it leaves once they finish jobs
/// again, or after [`HELPER_IDLE`] without a job.
fn helper_loop(shared: &Shared) {
    while let Some(job) = shared.rx.pop(Some(HELPER_IDLE)) {
        run_job(shared, job);
        if shared.cores_moving.load(Ordering::Acquire) {
            break;
        }
    }
    shared.helpers.fetch_sub(1, Ordering::AcqRel);
    tracing::debug!(target: "shale::exec", "helper thread no longer needed; exiting");
}

/// Starts a helper whenever jobs wait and none has finished for [`STARVED_AFTER`].
fn monitor(shared: std::sync::Weak<Shared>) {
    let (mut last, mut last_core) = (0, 0);
    loop {
        std::thread::sleep(STARVED_AFTER);
        let Some(shared) = shared.upgrade() else { return };
        // Only the monitor's own handle left: the pool is gone.
        if Arc::strong_count(&shared) == 1 && shared.rx.is_empty() && shared.helpers.load(Ordering::Acquire) == 0 {
            return;
        }
        let finished = shared.finished.load(Ordering::Acquire);
        let starved = finished == last && !shared.rx.is_empty();
        last = finished;
        let core_finished = shared.core_finished.load(Ordering::Acquire);
        shared.cores_moving.store(core_finished != last_core, Ordering::Release);
        last_core = core_finished;
        if starved && shared.helpers.load(Ordering::Acquire) < MAX_HELPERS {
            shared.helpers.fetch_add(1, Ordering::AcqRel);
            shared.helpers_started.fetch_add(1, Ordering::Relaxed);
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new().name("shale-exec-helper".into()).spawn(move || helper_loop(&s));
            match spawned {
                Ok(_) => {
                    tracing::debug!(target: "shale::exec", queued = shared.rx.len(), "every executor thread is busy; started a helper")
                }
                Err(e) => {
                    shared.helpers.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(target: "shale::exec", error = %e, "cannot start a helper thread");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Executor {
        /// Runs `job` and waits for it on this thread.
        fn run_blocking<R: Send + 'static>(&self, job: impl FnOnce() -> R + Send + 'static) -> Result<R, JobPanicked> {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            self.tx
                .0
                .rx
                .push(Box::new(move || {
                    let _ = tx.send(job());
                }))
                .map_err(|_| JobPanicked)?;
            rx.recv().map_err(|_| JobPanicked)
        }
    }

    #[test]
    fn jobs_run_and_panics_are_reported_not_fatal() {
        let pool = Executor::start(1).unwrap();
        assert_eq!(pool.run_blocking(|| 2 + 2), Ok(4));
        assert_eq!(pool.run_blocking(|| -> u32 { panic!("boom") }), Err(JobPanicked));
        assert_eq!(pool.run_blocking(|| "still serving"), Ok("still serving"));
    }

    #[test]
    fn stuck_core_threads_get_helpers_so_queued_jobs_still_run() {
        let pool = Executor::start(2).unwrap();
        let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
        // Both core threads block (as writers in a write stall would).
        for _ in 0..2 {
            let rx = release_rx.clone();
            drop(pool.run(move || rx.recv())); // queued at once; the job needs no one to wait for it
        }
        // A job queued behind them still runs, on a helper.
        let started = std::time::Instant::now();
        assert_eq!(pool.run_blocking(|| 7), Ok(7));
        assert!(pool.helpers_started() >= 1, "a helper was started");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(release_tx);
    }

    #[test]
    fn helpers_leave_once_the_core_threads_move_again() {
        let pool = Executor::start(1).unwrap();
        let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
        drop(pool.run(move || release_rx.recv()));
        assert_eq!(pool.run_blocking(|| 1), Ok(1));
        assert!(pool.helpers() >= 1, "the stuck core thread got a helper");
        drop(release_tx);
        // A steady stream of jobs: the core thread runs them again, and the helper leaves long
        // before it could have been idle for HELPER_IDLE (it leaves within a monitor period or
        // two; half of HELPER_IDLE is a generous bound that still tells the rules apart).
        let deadline = std::time::Instant::now() + HELPER_IDLE / 2;
        while pool.helpers() > 0 {
            assert!(std::time::Instant::now() < deadline, "helpers stayed: {}", pool.helpers());
            assert_eq!(pool.run_blocking(|| 2), Ok(2));
        }
    }
}
