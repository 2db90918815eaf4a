//! The per-command execution context: state that one command (or one EXEC) carries while it
//! runs, passed explicitly to every storage call that needs it, never kept in thread-locals.
//!
//! - **Transaction buffer** (EXEC): every batch a queued command writes goes into one engine
//!   `WriteBatch` instead of the engine, and every read sees the buffer over the engine (point
//!   reads check it first, ranges are merged), so later commands see earlier ones' writes. EXEC
//!   then commits the buffer as one batch: other clients see all of the transaction or none of
//!   it, and so does recovery after a crash.
//! - **Read snapshot**: a command that reads several keys sees them all as of one moment, as
//!   Redis's single thread would.
//! - **Held stripes**: EXEC locks the stripes of all its keys up front; the queued commands'
//!   own locking of those stripes is then a no-op.
//!
//! - **Keyspace events**: what the command changed, as `notify-keyspace-events` names it,
//!   recorded while it runs and published by the gate once its writes are committed (see
//!   [`crate::services::notifications`]).
//! - **Memory-only mode**: a command tried on the connection's own (async) thread reads with
//!   the engine's `cache_only` option; a read that would need the disk fails and is recorded,
//!   and the command is then run again on an executor thread, its first reply discarded.
//!
//! The context belongs to the session and is reset after every top-level command, including
//! one that panicked: a failed command leaves no buffer, snapshot or lock behind (the stripe
//! guards themselves are RAII and drop during unwinding).

use std::cell::{Cell, RefCell};
use std::ops::Bound;

use bytes::Bytes;
use lsm::key::ValueKind;

use crate::services::notifications::KeyEvent;

mod events;
mod memory_only;
mod merged;
mod writes;

pub(crate) use writes::KeyHasher;

pub(super) use merged::Overlay;
use merged::RangeSource;
pub use merged::{MergedRange, RawRange};

/// Writes buffered by the running transaction: the final state of every key written, and the
/// ranges deleted.
#[derive(Debug, Default)]
pub(super) struct TxnBuffer {
    /// Key -> value (None: deleted), see `writes.rs`.
    writes: writes::Writes,
    /// Ranges deleted (`[start, end)`); a key written after a range deletion that covers it
    /// is in `writes`, one written before it is marked deleted there.
    range_dels: Vec<(Vec<u8>, Vec<u8>)>,
    /// Once a savepoint was taken: each write's key and what `writes` held for it before
    /// (`None`: nothing), newest last, so going back to a savepoint undoes only the writes
    /// since it instead of every savepoint copying the whole buffer.
    undo: Option<Vec<Undo>>,
    /// The engine range the last pop left open (see `merged.rs`).
    parked: Option<merged::Parked>,
    /// The key the next pop from a list's end reads if it goes on from the last one (see
    /// [`ExecContext::pop_follows`]).
    next_pop: Option<Vec<u8>>,
}

/// A key written since a savepoint and what the buffer held for it before (`None`: nothing).
type Undo = (Vec<u8>, Option<Option<Bytes>>);

impl TxnBuffer {
    /// Records `key`'s new state, and its old one while savepoints are kept.
    fn record(&mut self, key: &[u8], value: Option<Bytes>) {
        let before = self.writes.insert(key, value);
        if let Some(undo) = self.undo.as_mut() {
            undo.push((key.to_vec(), before));
        }
    }

    /// The batch that commits the buffer: the range deletions, then each key's final state.
    /// Earlier writes of a key are left out: the batch commits atomically, so nobody could see
    /// them (fifty pops of one list combined into a group write its metadata once, not fifty
    /// times, to the WAL and the memtable).
    fn into_batch(self) -> lsm::WriteBatch {
        self.to_batch()
    }

    /// [`TxnBuffer::into_batch`], leaving the buffer as it is.
    fn to_batch(&self) -> lsm::WriteBatch {
        let mut batch = lsm::WriteBatch::new();
        for (start, end) in &self.range_dels {
            batch.delete_range(start, end);
        }
        for (key, value) in self.writes.sorted() {
            match value {
                Some(v) => batch.put(key, v),
                None => batch.delete(key),
            };
        }
        batch
    }
}

/// A transaction's state to go back to (see [`ExecContext::savepoint`]): where its undo log
/// and range deletions stood (`None`: no transaction ran), and how many events were recorded.
#[derive(Debug)]
pub struct Savepoint {
    txn: Option<(usize, usize)>,
    events: usize,
}

/// A transaction buffer between two contexts (see [`ExecContext::suspend_transaction`]).
#[derive(Debug)]
pub struct Suspended(TxnBuffer);

impl Suspended {
    /// The buffered batch.
    pub fn into_batch(self) -> lsm::WriteBatch {
        self.0.into_batch()
    }
}

/// How many records the range reads of one memory-only attempt (a read, or a group of
/// read-modify-writes) may step over: about a millisecond of a connection's thread.
pub const MEMORY_ONLY_STEPS: usize = 4096;

/// One command's execution state (see the module docs).
#[derive(Debug, Default)]
pub struct ExecContext {
    txn: RefCell<Option<TxnBuffer>>,
    snapshot: RefCell<Option<lsm::ReadOptions>>,
    held: RefCell<Vec<usize>>,
    /// Reads must not block: memory only (see the module docs).
    memory_only: Cell<bool>,
    /// A memory-only read could not be answered from memory since the mode was set.
    missed: Cell<bool>,
    /// Records memory-only range reads may still step over before the command is voided.
    memory_steps: Cell<usize>,
    /// The notification classes in force for this command (0: record nothing).
    notify_flags: Cell<u32>,
    /// The running command's lookups are reads (a read-only command's, or a write's of its
    /// sources, see `as_read`): their misses are `keymiss` events, and the rows they find in
    /// tables are kept in the engine's row cache (see [`ExecContext::get`]).
    reading: Cell<bool>,
    /// Keyspace events recorded and not yet published.
    events: RefCell<Vec<KeyEvent>>,
    /// Expiry index entries of keys this command found expired (lazy expiry: the gate
    /// deletes them once the command is done, see [`crate::storage::Storage::expire_seen`]).
    expired_seen: RefCell<Vec<Bytes>>,
    /// The client whose commands run in this context (0: the server's own work), for
    /// `CLIENT TRACKING NOLOOP`. Kept across commands.
    origin: Cell<u64>,
    /// The time lookups judge expiry by while a script runs (0: the clock's), see
    /// [`ExecContext::now_ms`].
    frozen_ms: Cell<u64>,
}

impl ExecContext {
    /// A fresh context (no transaction, snapshot or held stripes): what code outside a client
    /// command uses, such as a blocked client's retried pop.
    pub fn new() -> Self {
        ExecContext::default()
    }

    /// The context of client `id`'s commands.
    pub fn for_client(id: u64) -> Self {
        let cx = ExecContext::default();
        cx.origin.set(id);
        cx
    }

    /// The client whose commands run here (0: none).
    pub fn origin(&self) -> u64 {
        self.origin.get()
    }

    /// Drops whatever the last command left: called after every top-level command, so nothing
    /// outlives the command that set it (also after a panic).
    pub fn reset(&self) {
        self.txn.borrow_mut().take();
        self.snapshot.borrow_mut().take();
        self.held.borrow_mut().clear();
        self.memory_only.set(false);
        self.events.borrow_mut().clear();
        self.expired_seen.borrow_mut().clear();
        self.notify_flags.set(0);
        self.reading.set(false);
        self.frozen_ms.set(0);
    }

    /// The time lookups judge expiry by: while a script runs, the time it started (as Redis
    /// 7.0 does, so that no key expires in the middle of a script: two reads of one key in a
    /// script agree), else the clock's.
    pub fn now_ms(&self) -> u64 {
        match self.frozen_ms.get() {
            0 => super::now_ms(),
            frozen => frozen,
        }
    }

    /// Freezes [`ExecContext::now_ms`] at `ms` (a script starts), or lets it follow the
    /// clock again (`0`: the script ended).
    pub fn freeze_time(&self, ms: u64) {
        self.frozen_ms.set(ms);
    }

    /// True if the context holds nothing.
    #[cfg(test)]
    pub fn is_clear(&self) -> bool {
        self.txn.borrow().is_none() && self.snapshot.borrow().is_none() && self.held.borrow().is_empty()
    }

    /// The read options of this command's engine reads (its snapshot, memory-only mode).
    fn read_options(&self) -> Option<lsm::ReadOptions> {
        let snapshot = self.snapshot.borrow();
        match (snapshot.as_ref(), self.memory_only.get()) {
            (None, false) => None,
            (Some(opts), false) => Some(opts.clone()),
            (opts, true) => Some(opts.cloned().unwrap_or_default().cache_only(true)),
        }
    }

    /// Notes that a read found a key whose TTL has passed (`index_entry`: its expiry index
    /// entry). A memory-only attempt is voided instead: deleting the key is a write, done where
    /// writing may block.
    pub(crate) fn saw_expired(&self, index_entry: Bytes) {
        if self.memory_only.get() {
            self.missed.set(true);
        } else {
            self.expired_seen.borrow_mut().push(index_entry);
        }
    }

    /// The expired keys reads found since the last call (see [`ExecContext::saw_expired`]).
    pub fn take_expired_seen(&self) -> Vec<Bytes> {
        std::mem::take(&mut *self.expired_seen.borrow_mut())
    }

    /// Makes every later read through this context see one snapshot of `engine`, until
    /// [`ExecContext::end_snapshot`] or [`ExecContext::reset`]. False (and nothing changes)
    /// inside a transaction, whose keys are locked anyway, or if a snapshot is already set.
    pub fn begin_snapshot(&self, engine: &lsm::Db) -> bool {
        if self.in_transaction() || self.snapshot.borrow().is_some() {
            return false;
        }
        *self.snapshot.borrow_mut() = Some(lsm::ReadOptions::new().snapshot(&engine.snapshot()));
        true
    }

    /// Ends [`ExecContext::begin_snapshot`].
    pub fn end_snapshot(&self) {
        self.snapshot.borrow_mut().take();
    }

    /// Starts buffering writes (EXEC).
    pub fn begin_transaction(&self) {
        *self.txn.borrow_mut() = Some(TxnBuffer::default());
    }

    /// Stops buffering in this context and hands the buffer over, for another context to go
    /// on with ([`ExecContext::resume_transaction`]): commands of several clients combined into
    /// one write group share one buffer (`exec::combine`).
    pub fn suspend_transaction(&self) -> Option<Suspended> {
        self.txn.borrow_mut().take().map(Suspended)
    }

    /// Buffers into `suspended` (a buffer another context started), or a fresh one.
    pub fn resume_transaction(&self, suspended: Option<Suspended>) {
        *self.txn.borrow_mut() = Some(suspended.map(|s| s.0).unwrap_or_default());
    }

    /// What the transaction has buffered and the events recorded so far, to go back to with
    /// [`ExecContext::rollback`] if the next command's outcome is void (a command run in
    /// memory-only mode inside a write group that turns out to need the disk).
    pub fn savepoint(&self) -> Savepoint {
        let mut txn = self.txn.borrow_mut();
        let at = txn.as_mut().map(|t| (t.undo.get_or_insert_with(Vec::new).len(), t.range_dels.len()));
        Savepoint { txn: at, events: self.events.borrow().len() }
    }

    /// Goes back to `savepoint`: the buffered writes and events since are dropped.
    pub fn rollback(&self, savepoint: Savepoint) {
        let mut txn = self.txn.borrow_mut();
        match (savepoint.txn, txn.as_mut()) {
            (Some((undo_len, range_dels)), Some(t)) => {
                let undo = t.undo.get_or_insert_with(Vec::new);
                while undo.len() > undo_len {
                    let Some((key, before)) = undo.pop() else { break };
                    match before {
                        Some(v) => {
                            t.writes.insert(&key, v);
                        }
                        None => t.writes.remove(&key),
                    }
                }
                t.range_dels.truncate(range_dels);
            }
            // A transaction that began after the savepoint: none of it was there.
            (None, _) => *txn = None,
            // The buffer was handed off or committed since: its writes cannot be taken back.
            // No command does that (savepoints are taken between the commands of a write
            // group, which never end its transaction); the group's caller catches this and
            // answers every command of the group with an error, committing nothing.
            (Some(_), None) => panic!("a transaction buffer was taken away after its savepoint"),
        }
        self.events.borrow_mut().truncate(savepoint.events);
    }

    /// Stops buffering and returns the buffered batch.
    pub fn finish_transaction(&self) -> lsm::WriteBatch {
        self.txn.borrow_mut().take().map(TxnBuffer::into_batch).unwrap_or_default()
    }

    /// `f` applied to the batch the running transaction would commit now (None: no
    /// transaction).
    pub(super) fn with_buffered<R>(&self, f: impl FnOnce(&lsm::WriteBatch) -> R) -> Option<R> {
        let txn = self.txn.borrow();
        let t = txn.as_ref()?;
        Some(f(&t.to_batch()))
    }

    /// True if reads see the engine's latest state (under the transaction's buffered writes,
    /// if one runs), not a snapshot: what the pick cache answers for (see `pick_cache.rs`).
    pub(super) fn reads_latest_or_buffers(&self) -> bool {
        self.snapshot.borrow().is_none()
    }

    /// True while a transaction buffers writes.
    pub fn in_transaction(&self) -> bool {
        self.txn.borrow().is_some()
    }

    /// Marks `stripes` as held for the running EXEC.
    pub(super) fn hold(&self, stripes: &[usize]) {
        let mut held = self.held.borrow_mut();
        held.extend_from_slice(stripes);
        held.sort_unstable();
        held.dedup();
    }

    /// Ends [`ExecContext::hold`].
    pub(super) fn release(&self) {
        self.held.borrow_mut().clear();
    }

    /// How many stripes this context holds.
    pub(super) fn held_count(&self) -> usize {
        self.held.borrow().len()
    }

    /// Removes the stripes this context already holds from `idx`.
    pub(super) fn skip_held(&self, idx: &mut Vec<usize>) {
        let held = self.held.borrow();
        if !held.is_empty() {
            // `held` is sorted (see `hold`): EXEC may hold every stripe.
            idx.retain(|i| held.binary_search(i).is_err());
        }
    }

    /// A point read as this command sees it: the transaction's writes, else the snapshot, else
    /// the latest state. Only a read (a read-only command's, or a write's of its sources) keeps
    /// the row it finds in the engine's row cache: a write reads the keys it is about to
    /// write, whose rows would never answer again (`lsm::ReadOptions::fill_row_cache`).
    pub(super) fn get(&self, engine: &lsm::Db, key: &[u8]) -> lsm::Result<Option<Bytes>> {
        if let Some(v) = self.buffered(key) {
            return Ok(v);
        }
        let fill_rows = self.reading.get();
        if !self.memory_only.get() {
            if let Some(opts) = self.snapshot.borrow().as_ref() {
                return engine.get_with(key, opts);
            }
            if fill_rows {
                return engine.get(key);
            }
            return engine.get_with(key, &lsm::ReadOptions::new().fill_row_cache(false));
        }
        self.noted(engine.get_with(key, &self.read_options().unwrap_or_default().fill_row_cache(fill_rows)))
    }

    /// Buffers `batch` if a transaction runs; gives it back otherwise.
    pub(super) fn buffer(&self, batch: lsm::WriteBatch) -> Option<lsm::WriteBatch> {
        let mut t = self.txn.borrow_mut();
        let Some(txn) = t.as_mut() else { return Some(batch) };
        for entry in batch.iter().flatten() {
            match entry.kind {
                ValueKind::Put => txn.record(entry.key, Some(Bytes::copy_from_slice(entry.value))),
                ValueKind::Delete => txn.record(entry.key, None),
                ValueKind::RangeDelete => {
                    let (start, end) = (entry.key.to_vec(), entry.value.to_vec());
                    let bounds = (Bound::Included(&start[..]), Bound::Excluded(&end[..]));
                    txn.writes.cover(bounds);
                    let doomed: Vec<Vec<u8>> = txn.writes.range(bounds).map(|(k, _)| k.to_vec()).collect();
                    for k in doomed {
                        txn.record(&k, None);
                    }
                    txn.range_dels.push((start, end));
                }
            }
        }
        None
    }

    /// The buffered state of `key`: `Some(Some(v))` written, `Some(None)` deleted, `None` untouched.
    fn buffered(&self, key: &[u8]) -> Option<Option<Bytes>> {
        let t = self.txn.borrow();
        let txn = t.as_ref()?;
        if let Some(v) = txn.writes.get(key) {
            return Some(v.clone());
        }
        txn.range_dels.iter().any(|(a, b)| key >= &a[..] && key < &b[..]).then_some(None)
    }

    /// A cursor over the engine at this command's snapshot for many short seeks, also inside a
    /// transaction: its caller lays [`ExecContext::buffered_in`] over what it reads.
    pub(super) fn engine_cursor(&self, engine: &lsm::Db) -> lsm::DbIterator {
        self.void_memory_only();
        engine.iter(&self.read_options().unwrap_or_default())
    }

    /// What the running transaction buffered in `[start, end)`: `None` outside one.
    pub(super) fn buffered_in(&self, start: &[u8], end: &[u8]) -> Option<Overlay> {
        let bounds = (Bound::Included(start), Bound::Excluded(end));
        if let Ok(mut t) = self.txn.try_borrow_mut() {
            t.as_mut()?.writes.cover(bounds);
        }
        let t = self.txn.borrow();
        let txn = t.as_ref()?;
        let writes = txn.writes.range(bounds);
        Some(Overlay {
            writes: writes.map(|(k, v)| (k.to_vec(), v.is_some())).collect(),
            range_dels: txn.range_dels.iter().filter(|(a, b)| &a[..] < end && &b[..] > start).cloned().collect(),
        })
    }

    /// A cursor over the engine as this command sees it, for many short seeks; `None` inside a
    /// transaction (whose buffered writes only [`ExecContext::range`] merges in). In
    /// memory-only mode it reads memory only: the caller passes the outcome of its walk through
    /// [`ExecContext::noted_walk`], so a block memory does not hold voids the command.
    pub(super) fn cursor(&self, engine: &lsm::Db) -> Option<lsm::DbIterator> {
        if self.txn.borrow().is_some() {
            return None;
        }
        Some(engine.iter(&self.read_options().unwrap_or_default()))
    }

    /// Notes the outcome of a walk with a [`ExecContext::cursor`].
    pub(super) fn noted_walk<T>(&self, walk: lsm::Result<T>) -> lsm::Result<T> {
        self.noted(walk)
    }

    /// `engine.range(start..end)` as this command sees it. In memory-only mode it reads memory
    /// only, and a read that needs the disk voids the command (the range notes it).
    pub(super) fn range(&self, engine: &lsm::Db, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> RawRange<'_> {
        let inner = self.engine_range(engine, &start, &end);
        if self.txn.borrow().is_none() {
            return RawRange {
                source: RangeSource::Engine(inner),
                memory_only: self.memory_only.get().then_some(self),
            };
        }
        self.merged(inner, start, end, None, false)
    }

    /// [`ExecContext::range`] for a read from one end that the next read of the same range,
    /// from just past what this one took, may go on from: inside a transaction the engine
    /// range is parked in its buffer when dropped and taken up again by such a read (see
    /// `merged.rs`). `epoch` is the storage's epoch of writes that hold no stripe.
    pub(super) fn resuming_range(
        &self,
        engine: &lsm::Db,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        epoch: u64,
    ) -> RawRange<'_> {
        let memory_only = self.memory_only.get();
        let parked = match self.txn.borrow_mut().as_mut() {
            Some(txn) if self.snapshot.borrow().is_none() => Some(txn.parked.take()),
            _ => None,
        };
        let Some(parked) = parked else { return self.range(engine, start, end) };
        match parked.and_then(|p| p.goes_on(&start, &end, epoch, memory_only)) {
            Some(inner) => self.merged(inner, start, end, Some((epoch, memory_only)), true),
            None => {
                let inner = self.engine_range(engine, &start, &end);
                self.merged(inner, start, end, Some((epoch, memory_only)), false)
            }
        }
    }

    /// Whether a pop that reads `key` from one end of a list goes on from the transaction's
    /// last such pop (which would read `key` next), recording `next` as the key the pop after
    /// this one reads if it goes on from it. Such a pop reads with a
    /// [`ExecContext::resuming_range`] (one seek, ~3 µs, for the run, then a step each); a
    /// first one with a point read (~1.2 µs once the list is in tables). False outside a
    /// transaction.
    pub(super) fn pop_follows(&self, key: &[u8], next: Vec<u8>) -> bool {
        let mut txn = self.txn.borrow_mut();
        let Some(txn) = txn.as_mut() else { return false };
        txn.next_pop.replace(next).is_some_and(|k| k == key)
    }

    /// The engine's range as this command reads it (its snapshot, memory-only mode).
    fn engine_range(&self, engine: &lsm::Db, start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> lsm::Range {
        match self.read_options() {
            Some(opts) => engine.range_with((start.clone(), end.clone()), &opts),
            None => engine.range((start.clone(), end.clone())),
        }
    }

    /// `inner` with the transaction's buffer laid over it (`park`, `resumed`: see `merged.rs`).
    fn merged(
        &self,
        inner: lsm::Range,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        park: Option<(u64, bool)>,
        resumed: bool,
    ) -> RawRange<'_> {
        // The buffer's keys in the range are read in order from now on (see `writes.rs`).
        if let Ok(mut t) = self.txn.try_borrow_mut() {
            if let Some(txn) = t.as_mut() {
                txn.writes.cover((start.as_ref().map(Vec::as_slice), end.as_ref().map(Vec::as_slice)));
            }
        }
        let merged = MergedRange {
            engine: Some(inner),
            txn: &self.txn,
            low: start,
            high: end,
            front: None,
            back: None,
            park,
            resumed,
        };
        RawRange { source: RangeSource::Merged(Box::new(merged)), memory_only: self.memory_only.get().then_some(self) }
    }
}

#[cfg(test)]
mod tests;
