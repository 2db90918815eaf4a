//! The read-only state a failed background write leaves: which failures can be retried (a full
//! disk), how writes are refused meanwhile, and how the database resumes.

use std::sync::atomic::Ordering;

use super::{lock, DbInner};
use crate::{Error, Result};

/// A failure that made the database read-only.
#[derive(Debug, Clone)]
pub(super) struct BackgroundError {
    pub(super) message: String,
    /// Nothing was left half-written: [`crate::Db::resume`] may clear it (a full disk).
    pub(super) retryable: bool,
}

impl DbInner {
    pub(super) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Fails if the database is closed or read-only after a background error. Callable with
    /// any lock held (it takes none but the error's own).
    pub(super) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.is_poisoned.load(Ordering::Acquire) {
            let why = lock(&self.poisoned).as_ref().map(|b| b.message.clone()).unwrap_or_default();
            return Err(Error::Poisoned(why));
        }
        Ok(())
    }

    /// [`DbInner::check_writable`] for a new write, which first retries a retryable background
    /// error (a full disk may have been cleared up), at most once a second. Takes the WAL lock:
    /// never call it with that lock held.
    pub(super) fn check_writable_or_resume(&self) -> Result<()> {
        if self.is_poisoned.load(Ordering::Acquire) && self.auto_resume_due() {
            let _ = self.resume();
        }
        self.check_writable()
    }

    fn auto_resume_due(&self) -> bool {
        let retryable = lock(&self.poisoned).as_ref().is_some_and(|b| b.retryable);
        let mut last = lock(&self.last_resume);
        let due = retryable && last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1));
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }

    /// Records a failure that leaves the WAL, manifest or tables in an unknown state: every later
    /// write is refused until the database is reopened (and recovery sorts out what is durable).
    pub(super) fn poison(&self, e: Error) -> Error {
        self.poison_as(e, false)
    }

    /// Records a failure that left nothing half-written (a full disk while a table was built
    /// and then removed, or while a mapped WAL tried to grow): writes are refused until
    /// [`DbInner::resume`] succeeds, which [`DbInner::check_writable`] tries once a second.
    pub(super) fn poison_retryable(&self, e: Error) -> Error {
        let retryable = matches!(&e, Error::Io(io) if io.raw_os_error() == Some(libc::ENOSPC) || io.raw_os_error() == Some(libc::EDQUOT));
        self.poison_as(e, retryable)
    }

    fn poison_as(&self, e: Error, retryable: bool) -> Error {
        tracing::error!(target: "lsm::db", error = %e, retryable, "write path failed; database is now read-only");
        let mut p = lock(&self.poisoned);
        match p.as_mut() {
            None => *p = Some(BackgroundError { message: e.to_string(), retryable }),
            // A retryable error never turns a fatal one into a retryable one.
            Some(b) => b.retryable &= retryable,
        }
        self.is_poisoned.store(true, Ordering::Release);
        self.bg_cv.notify_all();
        e
    }

    /// Clears a retryable background error (see [`Db::resume`]).
    pub(super) fn resume(&self) -> Result<()> {
        if !self.is_poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut w = lock(&self.wal);
        let mut p = lock(&self.poisoned);
        match p.as_ref() {
            None => return Ok(()),
            Some(b) if !b.retryable => return Err(Error::Poisoned(b.message.clone())),
            Some(_) => {}
        }
        w.log.restore_after_failure()?;
        let was = p.take().map(|b| b.message).unwrap_or_default();
        self.is_poisoned.store(false, Ordering::Release);
        drop(p);
        drop(w);
        tracing::info!(target: "lsm::db", error = %was, "resumed after a retryable background error");
        // Flush and compaction retry what failed.
        self.signal_work();
        Ok(())
    }
}
