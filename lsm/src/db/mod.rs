//! The database: open/recover, reads, writes, iterators, flush and close.

mod commit;
mod compact;
mod flush;
mod open;
mod read;
mod read_only;
mod replication;
mod stats;
mod tuning;
mod weak;
mod write;

pub use weak::{WeakDb, WeakSnapshot};

pub(crate) use flush::{build_table as build_table_file, finish_table_file};
pub(crate) use open::lock_dir;
pub use replication::WalTail;
pub use stats::{LevelStats, Stats};

use std::fs::File;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use bytes::Bytes;

use crate::batch::WriteBatch;
use crate::cache::{ReadCounters, TableCache};
use crate::iter::{DbIterator, Range};
use crate::manifest::{Version, VersionSet};
use crate::memtable::Memtable;
use crate::options::{Options, ReadOptions, SyncMode, WriteOptions};
use crate::snapshot::{Snapshot, SnapshotList};
use crate::sstable::Fetch;
use crate::wal::LogWriter;
use crate::{Error, Result};
pub use commit::{Commit, Committed, WriteTicket};

/// What readers need, swapped atomically as memtables rotate and flushes land: the active
/// memtable, the frozen ones (newest first) and the table version.
#[derive(Debug)]
pub(crate) struct SuperVersion {
    pub(crate) mem: Arc<Memtable>,
    pub(crate) imm: Vec<Arc<Memtable>>,
    pub(crate) version: Arc<Version>,
}

/// State only the write leader touches (and `flush`/`close`, which take the same lock).
#[derive(Debug)]
struct WalState {
    log: LogWriter,
    last_seq: u64,
    /// The active memtable, the super version's `mem`: it changes only under this lock (a
    /// rotation, a replica starting a new history), so the write leader applies its group here
    /// without loading the super version.
    mem: Arc<Memtable>,
}

/// Which WAL is active and how much of it is written (see [`ActiveWal::written`]).
#[derive(Debug)]
struct ActiveWal {
    number: AtomicU64,
    size: AtomicU64,
}

impl ActiveWal {
    /// Records a new active WAL (number first: a reader comparing numbers around its read of
    /// the size never takes the old WAL's size for the new one's... and vice versa harmlessly).
    fn switch(&self, number: u64, size: u64) {
        self.number.store(number, Ordering::Release);
        self.size.store(size, Ordering::Release);
    }

    /// Bytes written to WAL `number` if it is the active one (None: it is complete, read it all).
    fn written(&self, number: u64) -> Option<u64> {
        let before = self.number.load(Ordering::Acquire);
        let size = self.size.load(Ordering::Acquire);
        let after = self.number.load(Ordering::Acquire);
        (before == after && before == number).then_some(size)
    }
}

/// Background-work coordination.
#[derive(Debug, Default)]
struct BgState {
    shutdown: bool,
    /// No new compaction starts (while a checkpoint is installed).
    paused: bool,
    /// Bumped whenever a flush or compaction changes the tree, so idle compaction threads
    /// re-check for work without missing a wake-up.
    work_gen: u64,
}

/// Counters kept by the engine.
#[derive(Debug, Default)]
struct Counters {
    stall_micros: AtomicU64,
    flushes: AtomicU64,
    bytes_flushed: AtomicU64,
    compactions: AtomicU64,
    compaction_bytes_read: AtomicU64,
    compaction_bytes_written: AtomicU64,
}

pub(crate) struct DbInner {
    dir: PathBuf,
    /// The options in force: those given to `open`, as changed since by [`Db::set_options`].
    options: RwLock<Arc<Options>>,
    versions: Mutex<VersionSet>,
    /// The current super version: point lookups borrow it (no lock, no shared reference
    /// count written), cursors take a reference; `sv_change` serializes changes.
    sv: ArcSwap<SuperVersion>,
    sv_change: Mutex<()>,
    /// The current super version's frozen memtables and L0 tables, counted when it is set:
    /// the write leader checks them every group without loading the super version.
    imm_count: AtomicUsize,
    /// What the current super version's frozen memtables hold, summed when it is set: the
    /// write leader reports it with the active memtable's to the block cache every group.
    imm_bytes: AtomicUsize,
    l0_files: AtomicUsize,
    queue: Mutex<write::WriteQueue>,
    queue_cv: Condvar,
    /// The commit thread sleeps here while nothing is queued.
    commit_cv: Condvar,
    /// Deferred async batches wait for [`Db::start_deferred_commits`] to wake the commit thread.
    commit_deferred: AtomicBool,
    /// Write groups committed so far (followers watch it while they spin).
    groups_done: AtomicU64,
    /// The queue's `done_through`, readable without the queue's lock: async writers whose batch
    /// is committed learn it here (the lock is taken only to wait, or to read a failure).
    committed_through: AtomicU64,
    /// True while the queue holds failures not yet read by their writers.
    unread_failures: AtomicBool,
    /// Write groups that failed since open (counted before `committed_through` passes them).
    failed_groups: AtomicU64,
    /// The last id handed to an async waiter.
    next_waiter: AtomicU64,
    wal: Mutex<WalState>,
    /// The active WAL's file, for the everysec syncer.
    wal_file: Mutex<Arc<File>>,
    /// The active WAL's number and bytes written, so WAL tailers read only what was written
    /// (the file is preallocated).
    active_wal: ActiveWal,
    bg: Mutex<BgState>,
    bg_cv: Condvar,
    visible_seq: AtomicU64,
    /// The current [`SyncMode`] (changeable at runtime).
    sync_mode: std::sync::atomic::AtomicU8,
    snapshots: Arc<SnapshotList>,
    poisoned: Mutex<Option<read_only::BackgroundError>>,
    is_poisoned: AtomicBool,
    /// When a retryable background error was last retried (rate limit of the automatic retry).
    last_resume: Mutex<Option<std::time::Instant>>,
    closed: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    lock_file: Mutex<Option<File>>,
    counters: Counters,
    read_counters: Arc<ReadCounters>,
    tables: Arc<TableCache>,
    retained_wals: Mutex<std::collections::VecDeque<replication::RetainedWal>>,
    /// `WalTail`s asleep waiting for writes; writers notify `tail_cv` only when there are some.
    tailers: AtomicUsize,
    tail_mu: Mutex<()>,
    tail_cv: Condvar,
}

impl std::fmt::Debug for DbInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbInner").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (engine state stays
/// consistent because every critical section either completes or returns an error first).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open database. Cheap to clone; all clones share one engine, which closes when the last
/// clone is dropped or [`Db::close`] is called.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = lsm::Db::open(dir.path(), lsm::Options::default())?;
/// db.put(b"hello", b"world")?;
/// assert_eq!(db.get(b"hello")?.as_deref(), Some(&b"world"[..]));
/// db.delete(b"hello")?;
/// assert_eq!(db.get(b"hello")?, None);
/// # Ok::<(), lsm::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Db {
    inner: Arc<DbInner>,
    _handle: Arc<CloseOnDrop>,
}

#[derive(Debug)]
struct CloseOnDrop(Arc<DbInner>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            tracing::warn!(target: "lsm::db", error = %e, "error while closing database");
        }
    }
}

impl Db {
    /// Opens (or creates) the database in directory `path`, replaying its WALs.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let inner = open::open(path.as_ref(), opts)?;
        Ok(Db { _handle: Arc::new(CloseOnDrop(Arc::clone(&inner))), inner })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.get_with(key, &ReadOptions::default())
    }

    /// The value of `key` with explicit read options (e.g. at a snapshot).
    pub fn get_with(&self, key: impl AsRef<[u8]>, opts: &ReadOptions) -> Result<Option<Bytes>> {
        self.inner.get_with(key.as_ref(), opts)
    }

    /// The values of `keys` (in their order), all read at one point in time: the snapshot in
    /// `opts`, else the latest write when the call starts (RocksDB's `MultiGet`). Cheaper than
    /// one [`Db::get_with`] per key: one view of the sources for the batch, keys looked up in
    /// key order. The first failed lookup fails the whole call.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K], opts: &ReadOptions) -> Result<Vec<Option<Bytes>>> {
        let keys: Vec<&[u8]> = keys.iter().map(AsRef::as_ref).collect();
        self.inner.multi_get(&keys, opts)
    }

    /// Starts loading into the CPU's cache what [`Db::get`]s of `keys` will read first (the
    /// memtables' filter lines, point-index slots, nodes and newest versions; the open tables'
    /// filter lines), in stages across the keys, so that the lookups that follow wait on
    /// memory once rather than once per key and stage: a hint that reads nothing the caller
    /// sees, never blocks and never faults.
    pub fn prefetch_gets(&self, keys: &[&[u8]]) {
        self.inner.prefetch_gets(keys);
    }

    /// A handle that reads this database without keeping it open: for a compaction filter that
    /// must look other keys up (holding a `Db` there would keep the database open forever).
    pub fn downgrade(&self) -> WeakDb {
        WeakDb(Arc::downgrade(&self.inner))
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(b, &WriteOptions::default())
    }

    /// Deletes every key in `[start, end)` with one record: O(1) whatever the range holds.
    /// Reads and iterators stop seeing the keys at once; compaction reclaims their space.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(start, end);
        self.write(b, &WriteOptions::default())
    }

    /// Deletes `key` (a no-op if absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b, &WriteOptions::default())
    }

    /// Applies `batch` atomically: after a crash either all of it or none of it is present.
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.inner.write(batch, opts)
    }

    /// Applies a batch a primary wrote with sequence numbers from `seq` on (replication). The
    /// sequence must be above every sequence this database has used.
    pub fn write_replicated(&self, seq: u64, batch: WriteBatch) -> Result<()> {
        self.inner.write_with_sequence(batch, &WriteOptions::default(), Some(seq))
    }

    /// The batches written from sequence number `seq` on, read from the WAL: the first batch
    /// returned is the one containing `seq`. Keep WALs around with [`Options::wal_ttl`] or
    /// [`Options::wal_size_limit`]; once the WAL holding `seq` is deleted this (or a later read
    /// from the tail) fails with [`Error::WalGone`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    /// db.put(b"a", b"1").unwrap();
    /// let mut tail = db.updates_since(1).unwrap();
    /// let (seq, batch) = tail.try_next().unwrap().unwrap();
    /// assert_eq!((seq, batch.len()), (1, 1));
    /// db.put(b"b", b"2").unwrap();
    /// let (seq, _) = tail.next_timeout(std::time::Duration::from_secs(1)).unwrap().unwrap();
    /// assert_eq!(seq, 2);
    /// ```
    pub fn updates_since(&self, seq: u64) -> Result<WalTail> {
        self.inner.updates_since(seq)
    }

    /// Writes an openable copy of the database as of now into the new directory `dir` (tables
    /// hard-linked, a fresh manifest) and returns the sequence number it reflects: every write
    /// up to it and none after. Writers wait while the memtable is flushed.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<u64> {
        self.inner.checkpoint(dir.as_ref())
    }

    /// Replaces this database's contents with the checkpoint in `dir` (made by
    /// [`Db::checkpoint`], here or elsewhere) and returns its sequence number: afterwards the
    /// database holds exactly the checkpoint's data, and the next write gets the sequence
    /// number after it. The tables are hard-linked (copied across file systems); `dir` is left
    /// as it was. Writers wait meanwhile; every WAL is deleted (the old history is gone, so
    /// [`Db::updates_since`] never ships it). This is how a replica loads a full sync.
    ///
    /// Iterators opened before keep seeing the old contents; every read issued afterwards
    /// (through an older [`Snapshot`] too) sees the new ones.
    pub fn install_checkpoint(&self, dir: impl AsRef<Path>) -> Result<u64> {
        self.inner.install_checkpoint(dir.as_ref())
    }

    /// Drops every write after sequence `seq`, so the database holds exactly what it held
    /// then and the next write gets `seq + 1` — how a node that took writes its new primary
    /// never saw rejoins it without a full sync. Possible while those writes are in the WAL,
    /// the memtables or L0 tables (which keep every version of a key); once a compaction into
    /// L1 or deeper has merged them with older data this fails with
    /// [`Error::InvalidArgument`] and nothing changes. Writers wait meanwhile; the WALs are
    /// replaced, so [`Db::updates_since`] never ships the dropped writes.
    pub fn rewind_to(&self, seq: u64) -> Result<()> {
        self.inner.rewind(seq)
    }

    /// A consistent read view as of now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner.visible_seq.load(Ordering::Acquire), &self.inner.snapshots)
    }

    /// The oldest sequence number still in a WAL, so readable with [`Db::updates_since`]
    /// (None: the WALs hold no write). Reads the first record of the oldest WALs.
    pub fn oldest_wal_sequence(&self) -> Result<Option<u64>> {
        self.inner.oldest_wal_sequence()
    }

    /// Sequence number of the latest acknowledged write.
    pub fn latest_sequence(&self) -> u64 {
        self.inner.visible_seq.load(Ordering::Acquire)
    }

    /// A cursor over the whole database (unpositioned: call a `seek*` first).
    pub fn iter(&self, opts: &ReadOptions) -> DbIterator {
        if let Err(e) = self.inner.check_open() {
            return DbIterator::failed(e);
        }
        let (seq, sv) = self.inner.read_view(opts);
        read::new_iterator(
            sv,
            seq,
            opts.snapshot.clone(),
            Fetch::from_options(opts),
            Arc::clone(&self.inner.read_counters),
        )
    }

    /// The entries with keys in `range`, in key order from either end.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    /// for k in ["a", "b", "c", "d"] { db.put(k, k).unwrap(); }
    /// let keys: Vec<_> = db.range(&b"b"[..]..&b"d"[..]).map(|kv| kv.unwrap().0).collect();
    /// assert_eq!(keys, ["b", "c"]);
    /// let last = db.range::<&[u8], _>(..).next_back().unwrap().unwrap();
    /// assert_eq!(last.0, "d");
    /// ```
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Range {
        self.range_with(range, &ReadOptions::default())
    }

    /// [`Db::range`] with explicit read options.
    pub fn range_with<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R, opts: &ReadOptions) -> Range {
        let own = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (lower, upper) = (own(range.start_bound()), own(range.end_bound()));
        let open = self.inner.check_open();
        let (seq, sv) = self.inner.read_view(opts);
        let snapshot = opts.snapshot.clone();
        let fetch = Fetch::from_options(opts);
        let counters = Arc::clone(&self.inner.read_counters);
        let make = Box::new(move || match &open {
            Ok(()) => read::new_iterator(Arc::clone(&sv), seq, snapshot.clone(), fetch, Arc::clone(&counters)),
            Err(e) => DbIterator::failed(e.duplicate()),
        });
        Range::new(make, lower, upper)
    }

    /// The entries whose keys start with `prefix`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Range {
        let p = prefix.as_ref().to_vec();
        match prefix_successor(&p) {
            Some(end) => self.range(p..end),
            None => self.range(p..),
        }
    }

    /// The WAL sync policy in force.
    pub fn sync_mode(&self) -> SyncMode {
        self.inner.sync_mode()
    }

    /// Freezes the active memtable and waits until every frozen memtable is in a table.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Freezes the active memtable if it holds at least `min_bytes` and returns at once: the
    /// flush thread writes it to an L0 table in the background (RocksDB's `Flush` with
    /// `wait = false`). True if a memtable was frozen. Used after deleting much of what the
    /// memtable holds, so that its memory is returned without waiting for it to fill.
    pub fn flush_in_background(&self, min_bytes: usize) -> Result<bool> {
        self.inner.flush_in_background(min_bytes)
    }

    /// Number of tables in `level` (0 = newest).
    pub fn num_files_at_level(&self, level: usize) -> usize {
        lock(&self.inner.versions).current().levels.get(level).map_or(0, Vec::len)
    }

    /// Every live table, L0 first (newest first), then each level in key order.
    pub fn live_files(&self) -> Vec<LiveFile> {
        let v = self.inner.super_version().version.clone();
        v.files()
            .map(|(level, f)| LiveFile {
                level,
                number: f.number,
                size: f.size,
                smallest_key: crate::key::user_key(&f.smallest).to_vec(),
                largest_key: crate::key::user_key(&f.largest).to_vec(),
                smallest_seq: f.smallest_seq,
                largest_seq: f.largest_seq,
                entries: f.num_entries,
            })
            .collect()
    }

    /// The engine's counters and level shape.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// A named property: `lsm.stats` (human-readable summary), `lsm.levelstats`,
    /// `lsm.num-files-at-level<N>`, `lsm.estimate-live-data-size`, `lsm.num-immutable-mem-table`,
    /// `lsm.estimate-table-readers-mem` (bytes the open tables' indexes and filters hold).
    pub fn property(&self, name: &str) -> Option<String> {
        self.inner.property(name)
    }

    /// Clears a retryable background error, such as a full disk that made a WAL or table write
    /// fail with nothing half-written: writes are accepted again and flushes and compactions
    /// retry. Fails with [`Error::Poisoned`] if the error was not retryable (a failed fsync or
    /// manifest write: reopen the database, recovery decides what is durable). Writes also try
    /// this by themselves, at most once a second, so a database recovers when space returns.
    pub fn resume(&self) -> Result<()> {
        self.inner.resume()
    }

    /// Closes the database for every clone: stops background work, writes and syncs the WAL,
    /// releases the directory lock. Later calls on any clone return [`Error::Closed`].
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }
}

/// A live table, as [`Db::live_files`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFile {
    /// Level (0 = newest, overlapping).
    pub level: usize,
    /// File number (`NNNNNN.sst`).
    pub number: u64,
    /// Bytes on disk.
    pub size: u64,
    /// Smallest user key.
    pub smallest_key: Vec<u8>,
    /// Largest user key.
    pub largest_key: Vec<u8>,
    /// Smallest sequence number.
    pub smallest_seq: u64,
    /// Largest sequence number.
    pub largest_seq: u64,
    /// Entries (all versions and tombstones).
    pub entries: u64,
}

/// The smallest key greater than every key starting with `p`, if one exists.
fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let i = p.iter().rposition(|&b| b != 0xff)?;
    let mut end = p[..=i].to_vec();
    end[i] += 1;
    Some(end)
}

impl DbInner {
    /// The options in force.
    fn opts(&self) -> Arc<Options> {
        Arc::clone(&self.options.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(super) fn sync_mode(&self) -> SyncMode {
        match self.sync_mode.load(Ordering::Acquire) {
            0 => SyncMode::Always,
            1 => SyncMode::EverySec,
            _ => SyncMode::Never,
        }
    }

    fn super_version(&self) -> Arc<SuperVersion> {
        self.sv.load_full()
    }

    /// The current super version, borrowed for one short read.
    fn borrow_super_version(&self) -> arc_swap::Guard<Arc<SuperVersion>> {
        self.sv.load()
    }

    fn set_super_version(&self, f: impl FnOnce(&SuperVersion) -> SuperVersion) {
        let _change = self.sv_change.lock().unwrap_or_else(|e| e.into_inner());
        let next = f(&self.sv.load());
        self.imm_count.store(next.imm.len(), Ordering::Release);
        self.imm_bytes.store(next.imm.iter().map(|m| m.memory_usage()).sum(), Ordering::SeqCst);
        self.l0_files.store(next.version.num_files(0), Ordering::Release);
        self.report_memtables(&next.mem);
        self.sv.store(Arc::new(next));
    }

    /// Tells the block cache what the memtables hold, `active` being the active one (see
    /// [`crate::Options::charge_memtables`]; cheap unless they crossed a MiB boundary).
    ///
    /// The write leader and the flush thread both report. One that read the frozen
    /// memtables' bytes just before the other changed them reports again, so a stale sum
    /// (a flushed memtable still charged, say) never outlasts the report that replaced it.
    fn report_memtables(&self, active: &Memtable) {
        loop {
            let frozen = self.imm_bytes.load(Ordering::SeqCst);
            self.tables.block_cache().set_memtables_memory(active.memory_usage() + frozen);
            if self.imm_bytes.load(Ordering::SeqCst) == frozen {
                return;
            }
        }
    }

    fn shutdown(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        // Async writes already queued are committed first (no new ones are accepted).
        self.stop_committer();
        self.wait_committed(self.last_ticket());
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        lock(&self.bg).shutdown = true;
        self.bg_cv.notify_all();
        self.queue_cv.notify_all();
        self.stop_committer();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let _ = t.join();
        }
        let result = {
            let mut w = lock(&self.wal);
            w.log.write_pending().and_then(|_| w.log.sync()).and_then(|_| w.log.finish()).map_err(Error::from)
        };
        lock(&self.lock_file).take();
        tracing::debug!(target: "lsm::db", dir = %self.dir.display(), "closed");
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successor_cases() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
