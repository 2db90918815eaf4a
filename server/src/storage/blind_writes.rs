//! Pipelined plain SETs queued from a connection's own (async) task: the stripes are taken
//! without waiting, the keyspace counts kept from memory, the batch queued with the engine's
//! async commit and the stripes released at once, marked with the write (see `key_locks`).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{counts, Storage};

/// What [`Storage::try_write_blind_async`] did.
#[derive(Debug)]
pub enum BlindWrite {
    /// Queued (and counted): await the commit; revert the count changes if it failed.
    Queued(lsm::Commit, CountChanges),
    /// An earlier async write under the same stripes is not visible yet: await it, try again.
    WaitFor(lsm::WriteTicket),
    /// Another command holds one of the stripes right now: try again shortly.
    Busy,
    /// Needs blocking (counts that need the disk, a read-only engine): run
    /// [`Storage::write_blind`] on an executor thread.
    HandOff,
}

/// What a queued write changed in the keyspace counts (taken back if its commit fails).
#[derive(Debug, Default)]
pub struct CountChanges(pub(super) Vec<(u16, counts::Delta)>);

impl Storage {
    /// [`Storage::write_blind`] for a connection's own (async) thread: never waits. If the
    /// keys' stripes are free, every earlier write under them is visible, the keyspace counts
    /// can be kept from memory and the engine is writable, the batch is taken out of `batch`
    /// and queued with the engine, its count changes applied, and the stripes released at once
    /// (marked with the write, so the next holder waits for it to be visible); the caller
    /// awaits the returned commit and, if it failed, reverts the returned count changes.
    /// Otherwise nothing happened, and the answer says what to do: await an earlier write
    /// under the same stripes (or a busy stripe) and try again, or run
    /// [`Storage::write_blind`] where blocking is allowed.
    pub fn try_write_blind_async(
        &self,
        db: u32,
        keys: &[Bytes],
        batch: &mut lsm::WriteBatch,
    ) -> lsm::Result<BlindWrite> {
        let Some(mut guard) = self.locks.try_lock_pairs(keys.iter().map(|k| (db, &k[..]))) else {
            return Ok(BlindWrite::Busy);
        };
        if let Err(ticket) = guard.try_settle(&self.engine) {
            return Ok(BlindWrite::WaitFor(ticket));
        }
        let deltas = match self.count_changes(batch, true, true, None) {
            Err(lsm::Error::WouldBlock) => return Ok(BlindWrite::HandOff),
            other => other?,
        };
        // Point writes only: `affected` needs no reads for them (it would, for range deletes).
        let watchers = self.watches.affected(batch, |_| true);
        let opts = lsm::WriteOptions::default();
        let queued = if self.defer_commits.load(Ordering::Relaxed) {
            self.engine.write_async_deferred(batch, &opts)
        } else {
            self.engine.write_async(batch, &opts)
        };
        // The recorded states of a write that fails later are retired by the engine's failure
        // count (see `meta_states.rs`).
        let commit = match self.meta_states.after_write(queued) {
            Ok(commit) => commit,
            // Read-only after a failure: a blocking write reports it, or resumes the engine.
            Err(lsm::Error::WouldBlock) => return Ok(BlindWrite::HandOff),
            Err(e) => return Err(e),
        };
        guard.queued(commit.ticket());
        drop(guard);
        self.changes.fetch_add(keys.len() as u64, Ordering::Relaxed);
        // Counted now, not when the commit is seen: the write commits even if nobody awaits it
        // (a connection dropped at shutdown); a failed commit is taken back (`revert_counts`).
        for (pdb, d) in &deltas {
            self.counts.apply(*pdb, d);
        }
        // Set before the write is visible: a transaction that locks these keys next waits for
        // the write, then sees its flag (at worst a spurious failure if the write fails).
        for f in watchers {
            f.store(true, Ordering::Release);
        }
        Ok(BlindWrite::Queued(commit, CountChanges(deltas)))
    }

    /// Takes back the count changes of a write from [`Storage::try_write_blind_async`] whose
    /// commit failed.
    pub fn revert_counts(&self, changes: &CountChanges) {
        for (pdb, d) in &changes.0 {
            self.counts.apply(*pdb, &d.reversed());
        }
    }
}
