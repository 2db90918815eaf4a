//! The write path: group commit, memtable rotation and write stalls.
//!
//! Writers queue their batches. The writer at the head of the queue becomes the leader: it
//! takes a group of queued batches, assigns consecutive sequence numbers, writes them to the WAL
//! with one `write` (and one fsync if any of them asked for it), inserts them into the memtable,
//! publishes the new sequence number and wakes the group. Followers wait: first briefly without
//! sleeping (a group usually commits in microseconds, much less than a sleep/wake round trip),
//! then on a condition variable, which the leader signals only when someone sleeps on it.
//! Writing blocks the calling thread (a group commit, an fsync, a write stall). Async callers
//! use [`DbInner::submit`] (`Db::write_async`) instead: the batch joins the same queue, the
//! caller gets a future, and the commit thread (`lsm-commit`, asleep while nothing is queued)
//! leads whenever no blocking writer does, waking each future once its group is committed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::MutexGuard;
use std::task::{Context, Poll, Waker};

use super::{lock, DbInner, WalState};
use crate::batch::WriteBatch;
use crate::filename;
use crate::memtable::Memtable;
use crate::options::{SyncMode, WriteOptions};
use crate::wal::LogWriter;
use crate::{Error, Result};

/// Rounds a follower waits without sleeping before it blocks on the condition variable.
const SPIN_ROUNDS: u32 = 64;

/// A group never grows past this many bytes (unless its first batch alone is bigger).
const MAX_GROUP_BYTES: usize = 1 << 20;

#[derive(Debug)]
struct Pending {
    ticket: u64,
    batch: WriteBatch,
    sync: bool,
    /// A replicated batch keeps the primary's sequence numbers; it is committed in a group of
    /// its own.
    forced_seq: Option<u64>,
}

/// Deferred batches queued before the commit thread is woken all the same.
const DEFERRED_MAX: usize = 64;

/// Writers waiting for their batch to be committed.
#[derive(Debug, Default)]
pub(super) struct WriteQueue {
    next_ticket: u64,
    pending: VecDeque<Pending>,
    leader_active: bool,
    /// Every ticket up to this one is committed (or failed, see `errors`).
    done_through: u64,
    /// Writers asleep on the condition variable.
    sleepers: usize,
    errors: HashMap<u64, Error>,
    /// Async waiters (`Commit`, `Committed`): ticket awaited, waiter id, waker.
    wakers: Vec<(u64, u64, Waker)>,
    /// The commit thread sleeps on `commit_cv` (async batches queued must wake it).
    committer_idle: bool,
    /// The database is closing: the commit thread exits once the queue is empty.
    closing: bool,
}

impl WriteQueue {
    fn take_group(&mut self) -> Vec<Pending> {
        let mut group = Vec::new();
        let mut bytes = 0;
        let first_size = self.pending.front().map_or(0, |p| p.batch.size_in_bytes());
        // A small first batch does not wait behind a megabyte of others (LevelDB's rule).
        let limit = if first_size <= 128 << 10 { first_size + (128 << 10) } else { MAX_GROUP_BYTES };
        while let Some(p) = self.pending.front() {
            let size = p.batch.size_in_bytes();
            if !group.is_empty() && (bytes + size > limit || p.forced_seq.is_some()) {
                break;
            }
            let alone = p.forced_seq.is_some();
            bytes += size;
            group.extend(self.pending.pop_front());
            if alone {
                break;
            }
        }
        group
    }
}

/// Keeps `cx`'s waker for `waiter`, which awaits `ticket`.
fn register(q: &mut WriteQueue, ticket: u64, waiter: u64, cx: &Context<'_>) {
    match q.wakers.iter_mut().find(|(_, w, _)| *w == waiter) {
        Some((_, _, waker)) => waker.clone_from(cx.waker()),
        None => q.wakers.push((ticket, waiter, cx.waker().clone())),
    }
}

impl DbInner {
    pub(super) fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.write_with_sequence(batch, opts, None)
    }

    pub(super) fn write_with_sequence(
        &self,
        batch: WriteBatch,
        opts: &WriteOptions,
        forced_seq: Option<u64>,
    ) -> Result<()> {
        let ticket = self.enqueue(batch, opts, forced_seq)?;
        self.wait_blocking(ticket)
    }

    /// Queues `batch` without waiting for it or committing anything: the commit thread (or
    /// any blocking writer that leads meanwhile) commits it with the next group. Never blocks
    /// beyond the queue lock. Refused with [`Error::WouldBlock`] while the database is
    /// read-only after a failure (a blocking write is the one that tries to resume).
    pub(super) fn submit(&self, batch: &mut WriteBatch, opts: &WriteOptions, defer: bool) -> Result<(u64, u64)> {
        if self.is_poisoned.load(Ordering::Acquire) {
            return Err(Error::WouldBlock);
        }
        self.check_open()?;
        let sync = opts.sync || self.sync_mode() == SyncMode::Always;
        let mut q = lock(&self.queue);
        if q.closing {
            return Err(Error::Closed);
        }
        q.next_ticket += 1;
        let ticket = q.next_ticket;
        q.pending.push_back(Pending { ticket, batch: std::mem::take(batch), sync, forced_seq: None });
        let wake = if defer && q.committer_idle && q.pending.len() < DEFERRED_MAX {
            self.commit_deferred.store(true, Ordering::Release);
            false
        } else {
            std::mem::replace(&mut q.committer_idle, false)
        };
        // Woken after the lock is released, so the commit thread does not wake only to wait
        // for it (it sleeps in `commit_cv.wait`, which released the lock: no wake-up is lost).
        drop(q);
        if wake {
            self.commit_cv.notify_one();
        }
        Ok((ticket, self.new_waiter()))
    }

    /// Wakes the commit thread if deferred batches wait for it.
    pub(super) fn start_deferred_commits(&self) {
        if !self.commit_deferred.load(Ordering::Acquire) || !self.commit_deferred.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut q = lock(&self.queue);
        let wake = !q.pending.is_empty() && std::mem::replace(&mut q.committer_idle, false);
        drop(q);
        if wake {
            self.commit_cv.notify_one();
        }
    }

    /// The result of `ticket`, whose group is done, for its writer (taken out of the queue).
    fn take_result(&self, q: &mut WriteQueue, ticket: u64) -> Result<()> {
        let Some(e) = q.errors.remove(&ticket) else { return Ok(()) };
        if q.errors.is_empty() {
            self.unread_failures.store(false, Ordering::Release);
        }
        Err(e)
    }

    /// True if `ticket` is committed and succeeded, learnt without the queue's lock (`false`
    /// says nothing: the batch may be pending, or it failed).
    fn known_good(&self, ticket: u64) -> bool {
        // A failure is recorded before `committed_through` passes its ticket.
        self.committed_through.load(Ordering::Acquire) >= ticket && !self.unread_failures.load(Ordering::Acquire)
    }

    /// A fresh id for an async waiter.
    pub(super) fn new_waiter(&self) -> u64 {
        self.next_waiter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Polls the async write `ticket` for its writer: its result once its group is committed
    /// (`done` is then set), else `waiter`'s waker is kept.
    pub(super) fn poll_commit(
        &self,
        ticket: u64,
        waiter: u64,
        done: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if self.known_good(ticket) {
            *done = true;
            return Poll::Ready(Ok(()));
        }
        let mut q = lock(&self.queue);
        if q.done_through >= ticket {
            *done = true;
            return Poll::Ready(self.take_result(&mut q, ticket));
        }
        register(&mut q, ticket, waiter, cx);
        Poll::Pending
    }

    /// Polls for `ticket` being committed or failed (its result stays for its writer).
    pub(super) fn poll_committed(&self, ticket: u64, waiter: u64, cx: &mut Context<'_>) -> Poll<()> {
        if self.committed_through.load(Ordering::Acquire) >= ticket {
            return Poll::Ready(());
        }
        let mut q = lock(&self.queue);
        if q.done_through >= ticket {
            return Poll::Ready(());
        }
        register(&mut q, ticket, waiter, cx);
        Poll::Pending
    }

    /// Forgets an abandoned waiter; for the writer's own (`ticket`'s result unread), also the
    /// result. The batch is committed all the same.
    pub(super) fn drop_waiter(&self, waiter: u64, abandoned_result: Option<u64>) {
        let mut q = lock(&self.queue);
        q.wakers.retain(|(_, w, _)| *w != waiter);
        if let Some(ticket) = abandoned_result.filter(|&t| q.done_through >= t) {
            let _ = self.take_result(&mut q, ticket);
        }
    }

    /// True once the batch with `ticket` is committed (or failed): its writes are visible.
    pub(super) fn is_committed(&self, ticket: u64) -> bool {
        self.committed_through.load(Ordering::Acquire) >= ticket
    }

    /// Waits until the batch with `ticket` is committed or failed, leading groups meanwhile if
    /// nobody does (its result stays for its own writer).
    pub(super) fn wait_committed(&self, ticket: u64) {
        let mut q = lock(&self.queue);
        while q.done_through < ticket {
            if !q.leader_active && !q.pending.is_empty() {
                q = self.lead_group(q);
                continue;
            }
            q.sleepers += 1;
            q = self.queue_cv.wait(q).unwrap_or_else(|e| e.into_inner());
            q.sleepers -= 1;
        }
    }

    /// The commit thread: commits queued batches whenever nobody else leads, so async writers
    /// ([`DbInner::submit`]) never need a thread of their own. Exits when the database closes,
    /// after the queue is empty.
    pub(super) fn commit_loop(&self) {
        let mut q = lock(&self.queue);
        loop {
            if !q.pending.is_empty() {
                if !q.leader_active {
                    q = self.lead_group(q);
                } else {
                    // Another writer leads; it wakes sleepers when its group is done.
                    q.sleepers += 1;
                    q = self.queue_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.sleepers -= 1;
                }
                continue;
            }
            if q.closing {
                return;
            }
            q.committer_idle = true;
            q = self.commit_cv.wait(q).unwrap_or_else(|e| e.into_inner());
            q.committer_idle = false;
        }
    }

    /// Tells the commit thread to finish the queue and exit.
    pub(super) fn stop_committer(&self) {
        lock(&self.queue).closing = true;
        self.commit_cv.notify_all();
    }

    /// The ticket of the last batch queued so far.
    pub(super) fn last_ticket(&self) -> u64 {
        lock(&self.queue).next_ticket
    }

    /// Queues a batch; returns its ticket.
    pub(super) fn enqueue(&self, batch: WriteBatch, opts: &WriteOptions, forced_seq: Option<u64>) -> Result<u64> {
        self.check_writable_or_resume()?;
        let sync = opts.sync || self.sync_mode() == SyncMode::Always;
        let mut q = lock(&self.queue);
        q.next_ticket += 1;
        let ticket = q.next_ticket;
        q.pending.push_back(Pending { ticket, batch, sync, forced_seq });
        Ok(ticket)
    }

    /// Moves `ticket` along as far as it can go without waiting: its result if its group is
    /// committed, after leading groups itself whenever nobody leads (any writer may commit the
    /// groups ahead of its own, so the queue never waits on a writer that is not running).
    /// `None` means a group is in flight.
    pub(super) fn progress<'a>(
        &'a self,
        mut q: MutexGuard<'a, WriteQueue>,
        ticket: u64,
    ) -> (MutexGuard<'a, WriteQueue>, Option<Result<()>>) {
        loop {
            if q.done_through >= ticket {
                let result = self.take_result(&mut q, ticket);
                return (q, Some(result));
            }
            if q.leader_active || q.pending.is_empty() {
                return (q, None);
            }
            q = self.lead_group(q);
        }
    }

    /// Commits the group at the head of the queue (the caller saw no leader active).
    fn lead_group<'a>(&'a self, mut q: MutexGuard<'a, WriteQueue>) -> MutexGuard<'a, WriteQueue> {
        q.leader_active = true;
        let mut group = q.take_group();
        drop(q);
        let result = self.write_group(&mut group);
        q = lock(&self.queue);
        if let Err(e) = result {
            for p in &group {
                q.errors.insert(p.ticket, e.duplicate());
            }
            self.unread_failures.store(true, Ordering::Release);
            self.failed_groups.fetch_add(1, Ordering::Release);
        }
        q.done_through = group.last().map_or(q.done_through, |p| p.ticket);
        self.committed_through.store(q.done_through, Ordering::Release);
        q.leader_active = false;
        self.groups_done.fetch_add(1, Ordering::Release);
        let sleepers = q.sleepers > 0;
        let done = q.done_through;
        let ready: Vec<Waker> = q.wakers.extract_if(.., |(t, _, _)| *t <= done).map(|(_, _, w)| w).collect();
        if !sleepers && ready.is_empty() {
            return q;
        }
        // Wake-ups (a futex call each, at times) go out after the lock is released, so writers
        // queueing meanwhile do not wait for them.
        drop(q);
        if sleepers {
            self.queue_cv.notify_all();
        }
        for w in ready {
            w.wake();
        }
        lock(&self.queue)
    }

    /// Waits for `ticket` on this thread: spin, then yield, then sleep.
    pub(super) fn wait_blocking(&self, ticket: u64) -> Result<()> {
        let mut q = lock(&self.queue);
        loop {
            let (guard, done) = self.progress(q, ticket);
            q = guard;
            if let Some(result) = done {
                return result;
            }
            let generation = self.groups_done.load(Ordering::Acquire);
            drop(q);
            for i in 0..SPIN_ROUNDS {
                if self.groups_done.load(Ordering::Acquire) != generation {
                    break;
                }
                if i < SPIN_ROUNDS / 4 {
                    for _ in 0..32 {
                        std::hint::spin_loop();
                    }
                } else {
                    std::thread::yield_now();
                }
            }
            q = lock(&self.queue);
            if self.groups_done.load(Ordering::Acquire) != generation || !q.leader_active {
                continue;
            }
            q.sleepers += 1;
            q = self.queue_cv.wait(q).unwrap_or_else(|e| e.into_inner());
            q.sleepers -= 1;
        }
    }

    /// The leader's work for one group.
    fn write_group(&self, group: &mut [Pending]) -> Result<()> {
        let mut w = lock(&self.wal);
        self.make_room(&mut w, false)?;
        let mut seq = w.last_seq;
        if let Some(forced) = group.first().and_then(|p| p.forced_seq) {
            if forced <= seq {
                return Err(Error::InvalidArgument(format!(
                    "replicated batch at sequence {forced} is not after the last sequence {seq}"
                )));
            }
            seq = forced - 1;
        }
        // Sequence numbers are checked before anything is framed: a group that would pass the
        // largest sequence number is refused whole, and nothing reaches the WAL.
        let total: u64 = group.iter().map(|p| u64::from(p.batch.len())).sum();
        if seq.checked_add(total).is_none_or(|end| end > crate::key::MAX_SEQUENCE) {
            return Err(Error::InvalidArgument(format!(
                "sequence numbers exhausted: {total} more after {seq} would pass {}",
                crate::key::MAX_SEQUENCE
            )));
        }
        let mut sync = false;
        for p in group.iter_mut() {
            sync |= p.sync;
            if p.batch.is_empty() {
                continue;
            }
            p.batch.set_sequence(seq + 1);
            seq += u64::from(p.batch.len());
            w.log.add_record(p.batch.as_bytes());
        }
        // Only a fault injector (tests) reads the WAL's path: no allocation per group otherwise.
        let faults = self.opts().faults.clone();
        let wal_path =
            if faults.is_some() { filename::wal_path(&self.dir, w.log.number()) } else { std::path::PathBuf::new() };
        if let Err(e) = crate::fault::check(&faults, crate::fault::IoOp::WalWrite, &wal_path) {
            w.log.discard_pending();
            return Err(self.poison_retryable(e.into()));
        }
        if let Err(e) = w.log.write_pending() {
            // A mapped WAL reserves its space before copying: a full disk leaves nothing behind,
            // so the error can be retried once space is back. A failed fsync never can.
            return Err(if w.log.may_hold_partial_records() {
                self.poison(e.into())
            } else {
                self.poison_retryable(e.into())
            });
        }
        self.active_wal.size.store(w.log.size(), Ordering::Release);
        if sync {
            let synced =
                crate::fault::check(&faults, crate::fault::IoOp::WalSync, &wal_path).and_then(|()| w.log.sync());
            if let Err(e) = synced {
                return Err(self.poison(e.into()));
            }
        }
        // The group's updates go in together: its batches' random keys wait on memory at once.
        let batches: Vec<&WriteBatch> = group.iter().map(|p| &p.batch).collect();
        w.mem.apply_all(&batches)?;
        self.report_memtables(&w.mem);
        w.last_seq = seq;
        self.visible_seq.store(seq, Ordering::Release);
        self.notify_tailers();
        Ok(())
    }

    /// Makes sure the active memtable has room, rotating it (and stalling while too many frozen
    /// memtables wait for flushing). With `force`, rotates any non-empty memtable.
    pub(super) fn make_room(&self, w: &mut WalState, force: bool) -> Result<()> {
        let mut stalled_since: Option<Instant> = None;
        let mut slowed_down = false;
        let result = loop {
            // Read each round: `Db::set_options` may raise a trigger while writers wait.
            let opts = self.opts();
            let compacting = !opts.disable_auto_compactions;
            if let Err(e) = self.check_writable() {
                break Err(e);
            }
            let (mem_size, mem_empty) = (w.mem.memory_usage(), w.mem.is_empty());
            let (imm_count, l0) = (self.imm_count.load(Ordering::Acquire), self.l0_files.load(Ordering::Acquire));
            if compacting
                && l0 >= opts.level0_slowdown_writes_trigger
                && l0 < opts.level0_stop_writes_trigger
                && !slowed_down
            {
                // Too many L0 tables: give compaction a millisecond of head start, once per group.
                slowed_down = true;
                stalled_since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            if compacting && l0 >= opts.level0_stop_writes_trigger {
                if stalled_since.is_none() {
                    stalled_since = Some(Instant::now());
                    tracing::warn!(target: "lsm::write", l0, "write stop: too many L0 tables, waiting for compaction");
                }
                let bg = lock(&self.bg);
                if bg.shutdown {
                    break Err(Error::Closed);
                }
                if self.super_version().version.num_files(0) >= opts.level0_stop_writes_trigger {
                    let _ = self.bg_cv.wait_timeout(bg, Duration::from_millis(100));
                }
                continue;
            }
            if mem_empty || (!force && mem_size < opts.write_buffer_size) {
                break Ok(());
            }
            if imm_count + 1 >= opts.max_write_buffer_number {
                if stalled_since.is_none() {
                    stalled_since = Some(Instant::now());
                    tracing::debug!(target: "lsm::write", imm_count, "write stall: waiting for a memtable flush");
                }
                let bg = lock(&self.bg);
                if bg.shutdown {
                    break Err(Error::Closed);
                }
                if self.super_version().imm.len() == imm_count && !self.is_poisoned.load(Ordering::Acquire) {
                    let _ = self.bg_cv.wait_timeout(bg, Duration::from_millis(100));
                }
                continue;
            }
            if let Err(e) = self.rotate(w) {
                break Err(self.poison_retryable(e));
            }
            break Ok(());
        };
        if let Some(t) = stalled_since {
            self.counters.stall_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        result
    }

    /// Freezes the active memtable and starts a new one with a new WAL.
    fn rotate(&self, w: &mut WalState) -> Result<()> {
        // The old WAL is complete before the new one exists (WAL tailers rely on it).
        if let Err(e) = w.log.write_pending() {
            return Err(if w.log.may_hold_partial_records() { self.poison(e.into()) } else { e.into() });
        }
        if self.sync_mode() != SyncMode::Never {
            let old = filename::wal_path(&self.dir, w.log.number());
            let synced =
                crate::fault::check(&self.opts().faults, crate::fault::IoOp::WalSync, &old).and_then(|()| w.log.sync());
            if let Err(e) = synced {
                return Err(self.poison(e.into())); // a failed fsync is never retried
            }
        }
        let number = lock(&self.versions).new_file_number();
        crate::fault::check(
            &self.opts().faults,
            crate::fault::IoOp::WalCreate,
            &filename::wal_path(&self.dir, number),
        )?;
        let log = LogWriter::create_mapped(
            &filename::wal_path(&self.dir, number),
            number,
            super::open::wal_capacity(&self.opts()),
        )?;
        *lock(&self.wal_file) = log.file();
        w.log = log;
        self.active_wal.switch(number, 0);
        // Its lookups are sized for entries like the frozen memtable's.
        w.mem = Arc::new(Memtable::with_budget_after(number, self.opts().write_buffer_size, w.mem.entry_bytes()));
        self.set_super_version(|sv| {
            let mut imm = Vec::with_capacity(sv.imm.len() + 1);
            imm.push(Arc::clone(&sv.mem));
            imm.extend(sv.imm.iter().cloned());
            super::SuperVersion { mem: Arc::clone(&w.mem), imm, version: Arc::clone(&sv.version) }
        });
        tracing::debug!(target: "lsm::wal", wal = number, "memtable frozen, new WAL started");
        self.signal_work();
        Ok(())
    }

    /// Freezes the active memtable if it holds at least `min_bytes`, leaving it to the flush
    /// thread. True if it froze one.
    pub(super) fn flush_in_background(&self, min_bytes: usize) -> Result<bool> {
        self.check_writable()?;
        let mut w = lock(&self.wal);
        let sv = self.super_version();
        if sv.mem.is_empty() || sv.mem.approximate_size() < min_bytes {
            return Ok(false);
        }
        // The memtable make_room freezes (the WAL lock is held: no other takes its place first).
        w.mem.mark_dropped();
        self.make_room(&mut w, true)?;
        Ok(true)
    }

    pub(super) fn flush(&self) -> Result<()> {
        self.check_writable()?;
        {
            let mut w = lock(&self.wal);
            self.make_room(&mut w, true)?;
        }
        let mut bg = lock(&self.bg);
        loop {
            self.check_writable()?;
            if bg.shutdown {
                return Err(Error::Closed);
            }
            if self.super_version().imm.is_empty() {
                return Ok(());
            }
            bg = self.bg_cv.wait_timeout(bg, Duration::from_millis(100)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}
