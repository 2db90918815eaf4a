//! Async writes: `Db`'s calls that queue a batch without blocking, and their futures —
//! [`Commit`] for the writer, [`Committed`] for anyone waiting to see a write. Polling takes
//! the write queue's lock only while the batch is not yet known to be committed (see
//! [`DbInner::poll_commit`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::{Db, DbInner};
use crate::{Result, WriteBatch, WriteOptions};

/// Async writes.
impl Db {
    /// Queues `batch` for commit and returns at once — never blocking, so an async runtime's
    /// thread may call it. The returned [`Commit`] resolves once the batch is committed (its
    /// writes visible to every reader) with the result a blocking [`Db::write`] would have
    /// given; the engine's commit thread commits it with the next group, so the caller needs
    /// no thread of its own. The batch is taken out of `batch` once queued. Fails at once
    /// (nothing queued, `batch` left as it was) with
    /// [`Error::WouldBlock`](crate::Error::WouldBlock) while the database is read-only after a
    /// failure: a blocking [`Db::write`] of it may then resume the database.
    pub fn write_async(&self, batch: &mut WriteBatch, opts: &WriteOptions) -> Result<Commit> {
        let (ticket, waiter) = self.inner.submit(batch, opts, false)?;
        Ok(Commit::new(Arc::clone(&self.inner), ticket, waiter))
    }

    /// [`Db::write_async`] without waking the commit thread if it sleeps: the batch waits for
    /// the next [`Db::start_deferred_commits`] (or the next batch that does wake it, or a queue
    /// of 64 batches). An event loop queues the writes of one pass over its ready tasks this way
    /// and starts their commit once, before it waits for more work: one wake-up of the commit
    /// thread per pass instead of one per write.
    pub fn write_async_deferred(&self, batch: &mut WriteBatch, opts: &WriteOptions) -> Result<Commit> {
        let (ticket, waiter) = self.inner.submit(batch, opts, true)?;
        Ok(Commit::new(Arc::clone(&self.inner), ticket, waiter))
    }

    /// Wakes the commit thread for batches queued by [`Db::write_async_deferred`] (cheap when
    /// there are none: one atomic load).
    pub fn start_deferred_commits(&self) {
        self.inner.start_deferred_commits()
    }

    /// A future that resolves once the async write `ticket` is committed or failed (its writes,
    /// if any, visible) — for a reader that must see it and may not block. Its result stays for
    /// its [`Commit`].
    pub fn committed(&self, ticket: WriteTicket) -> Committed {
        Committed::new(Arc::clone(&self.inner), ticket)
    }

    /// Write groups (of any writers) that failed since the database opened. A reader that
    /// learnt that a write is committed or failed ([`Db::is_committed`], [`Db::wait_committed`],
    /// a finished [`Commit`] or [`Committed`]) sees every failure up to that write counted here,
    /// so a state noted when a write was queued, with this count, is known to be the
    /// database's if the count has not moved since.
    pub fn failed_write_groups(&self) -> u64 {
        self.inner.failed_groups.load(Ordering::Acquire)
    }

    /// True while the database is read-only after a failure: [`Db::write_async`] refuses
    /// writes until a blocking write resumes it (or it is reopened).
    pub fn is_read_only(&self) -> bool {
        self.inner.is_poisoned.load(Ordering::Acquire)
    }

    /// True once the async write `ticket` is committed or failed (its writes, if any, visible).
    pub fn is_committed(&self, ticket: WriteTicket) -> bool {
        self.inner.is_committed(ticket.0)
    }

    /// Waits (blocking) until the async write `ticket` is committed or failed — for a reader
    /// that must see it. Its result stays for its [`Commit`].
    pub fn wait_committed(&self, ticket: WriteTicket) {
        self.inner.wait_committed(ticket.0)
    }
}

/// Identifies an async write ([`Db::write_async`](crate::Db::write_async)); later writes have
/// larger tickets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteTicket(pub(super) u64);

/// An async write from [`Db::write_async`](crate::Db::write_async): resolves once its batch is
/// committed. Polling never blocks; dropping it does not cancel the write.
#[derive(Debug)]
pub struct Commit {
    inner: Arc<DbInner>,
    ticket: WriteTicket,
    waiter: u64,
    done: bool,
}

/// From [`Db::committed`](crate::Db::committed): resolves once an async write is committed or
/// failed.
#[derive(Debug)]
pub struct Committed {
    inner: Arc<DbInner>,
    ticket: WriteTicket,
    waiter: u64,
    /// A poll left this waiter's waker with the queue.
    registered: bool,
}

impl Committed {
    pub(super) fn new(inner: Arc<DbInner>, ticket: WriteTicket) -> Self {
        let waiter = inner.new_waiter();
        Committed { inner, ticket, waiter, registered: false }
    }
}

impl std::future::Future for Committed {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let polled = self.inner.poll_committed(self.ticket.0, self.waiter, cx);
        self.registered |= polled.is_pending();
        polled
    }
}

impl Drop for Committed {
    fn drop(&mut self) {
        if self.registered {
            self.inner.drop_waiter(self.waiter, None);
        }
    }
}

impl Commit {
    pub(super) fn new(inner: Arc<DbInner>, ticket: u64, waiter: u64) -> Self {
        Commit { inner, ticket: WriteTicket(ticket), waiter, done: false }
    }

    /// The write's ticket (see [`Db::is_committed`](crate::Db::is_committed)).
    pub fn ticket(&self) -> WriteTicket {
        self.ticket
    }
}

impl std::future::Future for Commit {
    type Output = Result<()>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        this.inner.poll_commit(this.ticket.0, this.waiter, &mut this.done, cx)
    }
}

impl Drop for Commit {
    fn drop(&mut self) {
        if !self.done {
            self.inner.drop_waiter(self.waiter, Some(self.ticket.0));
        }
    }
}
