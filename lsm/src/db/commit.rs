//! The futures of async writes: [`Commit`] for the writer, [`Committed`] for anyone waiting to
//! see a write. Polling takes the write queue's lock only while the batch is not yet known to
//! be committed (see [`DbInner::poll_commit`]).

use std::sync::Arc;
use std::task::{Context, Poll};

use super::DbInner;
use crate::Result;

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
