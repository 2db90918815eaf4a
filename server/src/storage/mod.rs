//! Redis keys on the `lsm` engine.
//!
//! ```text
//! metadata      'M' | db u16 BE | user key                 ->  type u8 | expire_at_ms u64 LE | uid u64 LE | body
//! expiry index  'X' | expire_at_ms u64 BE | db u16 BE | key ->  (empty)
//! db map        "S:dbmap"                                  ->  (logical u16 BE, physical u16 BE)*
//! layout        "S:layout"                                 ->  version u8 (4) | pick seed u64 LE   (layout.rs)
//! ```
//! A string's value is the body, or segments once it grows long by partial writes (see
//! `strings.rs`). Collections keep their elements under the key's incarnation id (`collection.rs`), so
//! deleting or overwriting one is a single metadata write. An expired key is never returned:
//! reads treat it as absent (lazy expiry), the active cycle deletes keys whose time has come
//! (found through the expiry index), and compaction drops expired records it meets.
//!
//! The `db` in records is a *physical* database. Commands name *logical* databases; a table maps
//! one onto the other so `SWAPDB` is a swap of two table entries (persisted), not a copy.
//! A key with a TTL always has an index entry at or before its expiry: a write that sets a TTL
//! writes one, unless the key's stored TTL is no later (its entry already covers the new one:
//! INCR keeping a TTL, EXPIRE pushing it later). Entries are never updated in place: the active
//! cycle, reaching an entry whose key now expires later, indexes the key again at its TTL, and
//! drops an entry whose key no longer has one.
//!
//! Every read and write a command makes goes through its [`ExecContext`] (transaction buffer,
//! snapshot, held key stripes); every commit keeps the [`KeyspaceCounts`] exact.

mod blind_writes;
mod collection;
mod compaction_filter;
mod context;
mod counts;
mod databases;
mod digest;
mod elements;
mod expiry;
mod field_order;
mod key_locks;
mod layout;
mod meta;
mod meta_states;
mod pick_cache;
mod picks;
mod queued_writes;
mod random_key;
mod rebuild;
mod replicated;
mod scores;
mod strings;
mod values;
mod watch;

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};

use bytes::Bytes;

use crate::services::notifications;

pub use blind_writes::{BlindWrite, CountChanges};
pub(crate) use collection::prefix_end;
pub use collection::{Header, View, LIST_START};
pub use compaction_filter::ShaleFilter;
pub(crate) use context::KeyHasher;
pub use context::{ExecContext, RawRange, Savepoint, Suspended, MEMORY_ONLY_STEPS};
pub use counts::{KeyspaceCounts, Snapshot as CountsSnapshot};
pub use elements::ElementIter;
pub use field_order::{next_ordinal, with_order, ListpackLimits};
pub use key_locks::{KeyLocks, LockGuard};
use layout::layout;
#[cfg(test)]
use layout::{record as layout_record, LAYOUT_KEY, LAYOUT_VERSION};
pub use meta::{KeyType, Meta};
pub use queued_writes::{Befores, QueuedWrite, Unsettled};
pub use scores::{decode_score, encode_score, ScoreBounds, ScoreIter};
pub use strings::{Chunk, StringEdit, HLL_SEGMENT, INLINE_MAX, SEGMENT};
pub use watch::{Watched, Watches};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

const DB_MAP_KEY: &[u8] = b"S:dbmap";
const DATABASES: usize = 1 << 16;

/// The metadata record key of `key` in physical database `pdb`.
fn meta_key(pdb: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + key.len());
    k.push(b'M');
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The metadata record keys of several keys, in one buffer (no allocation per key).
#[derive(Debug, Default)]
struct MetaKeys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl MetaKeys {
    fn push(&mut self, pdb: u16, key: &[u8]) {
        self.bytes.push(b'M');
        self.bytes.extend_from_slice(&pdb.to_be_bytes());
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| &self.bytes[start..end])
    }
}

/// Whether metadata with TTL `expire_at` (0: none), written over stored metadata whose TTL is
/// `indexed_at` (0: none), needs an expiry index entry of its own. A key with a TTL always has an
/// index entry at or before its expiry, so an unchanged or later TTL is already covered: the
/// active cycle, reaching the earlier entry, indexes the key again at its TTL then
/// ([`Storage::expire_cycle`]). Keys whose TTL slides forward on every write (sessions, rate
/// limiters: INCR then EXPIRE) then write their metadata only, not one new index record each.
fn needs_index_entry(expire_at: u64, indexed_at: u64) -> bool {
    expire_at != 0 && (indexed_at == 0 || expire_at < indexed_at)
}

/// Adds `meta` for `key` in `pdb` to `batch`, written over stored metadata expiring at
/// `indexed_at` (0: none), with an expiry index entry if [`needs_index_entry`] says so.
fn put_meta_record(batch: &mut lsm::WriteBatch, pdb: u16, key: &[u8], meta: &Meta, indexed_at: u64) {
    batch.put(meta_key(pdb, key), meta.encode());
    if needs_index_entry(meta.expire_at_ms, indexed_at) {
        batch.put(expiry_key(meta.expire_at_ms, pdb, key), b"");
    }
}

/// The expiry index entry of `key` in `pdb`, expiring at `at`.
fn expiry_key(at: u64, pdb: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(11 + key.len());
    k.push(b'X');
    k.extend_from_slice(&at.to_be_bytes());
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The prefix of the element records (`E`) or score index (`Z`) of incarnation `uid` in `pdb`.
fn element_prefix(tag: u8, pdb: u16, uid: u64) -> Vec<u8> {
    record_key(tag, pdb, uid, &[])
}

/// The key of a record of incarnation `uid` in `pdb` under `tag` (`E`, `R`, `Z`): the prefix,
/// then `parts`, allocated once at its final length (one command's keys are built a few at a
/// time, and growing each from its prefix reallocated it: 1 % of ZPOPMIN's CPU).
fn record_key(tag: u8, pdb: u16, uid: u64, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(11 + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(tag);
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    for part in parts {
        k.extend_from_slice(part);
    }
    k
}

/// The first key after every metadata record of `pdb`.
fn meta_end(pdb: u16) -> Vec<u8> {
    match pdb.checked_add(1) {
        Some(next) => meta_key(next, b""),
        None => b"N".to_vec(),
    }
}

/// The keyspace over one engine.
#[derive(Debug)]
pub struct Storage {
    engine: lsm::Db,
    locks: KeyLocks,
    /// Logical database -> physical database.
    map: Vec<AtomicU16>,
    /// Physical database -> logical database.
    inverse: Vec<AtomicU16>,
    /// Clients watching keys (WATCH).
    pub watches: Watches,
    /// Clients caching keys (`CLIENT TRACKING`), told when a commit writes them.
    pub tracking: crate::services::tracking::Tracking,
    /// Keys per database (DBSIZE, INFO keyspace).
    counts: KeyspaceCounts,
    /// Next incarnation id. Starts above the engine's last sequence: every id ever used went
    /// into a batch together with at least one record, so ids handed out before a restart are
    /// all below it.
    next_uid: AtomicU64,
    /// Secret seed of the pick index's member hash (see `picks/mod.rs`); replaced only when a
    /// replica loads its primary's data.
    pick_seed: AtomicU64,
    /// Writes committed since start (a command's batch, EXEC's batch, each queued SET): what
    /// `INFO persistence` reports changes since the last save from.
    changes: AtomicU64,
    /// Queued SETs leave the engine's commit thread asleep until the runtime's hooks start
    /// their commit ([`Storage::defer_async_commits`]).
    defer_commits: AtomicBool,
    /// The states of recently written metadata records, for the counts of the next write.
    meta_states: meta_states::MetaStates,
    /// Members of collections random picks hit often (see `pick_cache.rs`).
    pick_cache: pick_cache::PickCache,
}

/// Key lock stripes: enough that the keys of 50 clients' 16-command pipelines rarely share
/// one (a shared stripe makes a queued SET batch wait for another's commit).
const KEY_STRIPES: usize = 16384;

/// One page of a SCAN-style walk of a database.
#[derive(Debug, Default)]
pub struct ScanPage {
    /// Live keys seen, in key order, with their metadata.
    pub keys: Vec<(Bytes, Meta)>,
    /// Where the next page starts (None: the walk is complete).
    pub next: Option<Bytes>,
}

impl Storage {
    /// Keys stored in `engine`. Fails if the stored database map is unreadable.
    pub fn new(engine: lsm::Db) -> lsm::Result<Self> {
        let map: Vec<AtomicU16> = (0..DATABASES).map(|i| AtomicU16::new(i as u16)).collect();
        let inverse: Vec<AtomicU16> = (0..DATABASES).map(|i| AtomicU16::new(i as u16)).collect();
        let counts = match counts::take_saved(&engine)? {
            Some(counts) => counts,
            None => {
                let started = std::time::Instant::now();
                let counts = KeyspaceCounts::recount(&engine)?;
                tracing::info!(target: "shale::storage", ms = started.elapsed().as_millis() as u64, "counted the keyspace (no counts file from a clean shutdown)");
                counts
            }
        };
        let pick_seed = AtomicU64::new(layout(&engine, true)?);
        let next_uid = AtomicU64::new(engine.latest_sequence() + 1);
        let storage = Storage {
            engine,
            locks: KeyLocks::new(KEY_STRIPES),
            map,
            inverse,
            watches: Watches::default(),
            tracking: Default::default(),
            counts,
            next_uid,
            pick_seed,
            changes: AtomicU64::new(0),
            defer_commits: AtomicBool::new(false),
            meta_states: Default::default(),
            pick_cache: Default::default(),
        };
        storage.load_map(storage.engine.get(DB_MAP_KEY)?.as_deref())?;
        Ok(storage)
    }

    /// Stores what a clean restart reuses (the keyspace counts, in a file beside the data:
    /// never a write to the engine, whose sequence numbers replication owns). Call once, after
    /// the last command has run and before the engine closes.
    pub fn close(&self) -> lsm::Result<()> {
        counts::save(&self.engine, &self.counts)
    }

    /// The engine underneath.
    pub fn engine(&self) -> &lsm::Db {
        &self.engine
    }

    /// Locks `keys` of `db` for a read-modify-write (in a fixed order, so never deadlocks).
    pub fn lock<'a>(&'a self, cx: &ExecContext, db: u32, keys: impl IntoIterator<Item = &'a [u8]>) -> LockGuard<'a> {
        self.lock_pairs(cx, keys.into_iter().map(|k| (db, k)))
    }

    /// Locks keys of several databases (see [`Storage::lock`]).
    pub fn lock_pairs<'a>(
        &'a self,
        cx: &ExecContext,
        keys: impl IntoIterator<Item = (u32, &'a [u8])>,
    ) -> LockGuard<'a> {
        let mut guard = self.locks.lock_pairs(cx, keys);
        guard.settle(&self.engine);
        guard
    }

    /// Locks every stripe not already held by `cx`: no other read-modify-write runs until the
    /// guard drops (FLUSHDB, FLUSHALL, SWAPDB, and an EXEC that runs one of them).
    pub fn lock_all(&self, cx: &ExecContext) -> LockGuard<'_> {
        let mut guard = self.locks.lock_all(cx);
        guard.settle(&self.engine);
        guard
    }

    /// Locks the stripes of `keys` that `cx` does not hold yet, without waiting (`None` if one
    /// is busy), and marks them held by `cx` (a script's keys: those it did not declare, and
    /// the declared ones while it holds the VM, which must never wait for a stripe).
    pub fn try_lock_unheld<'a, 'k>(
        &'a self,
        cx: &ExecContext,
        keys: impl IntoIterator<Item = (u32, &'k [u8])>,
    ) -> Option<LockGuard<'a>> {
        let mut guard = self.locks.try_lock_unheld(cx, keys)?;
        guard.settle(&self.engine);
        cx.hold(guard.stripes());
        Some(guard)
    }

    /// True if `cx` holds every key stripe (FLUSHALL inside a script may run).
    pub fn holds_all(&self, cx: &ExecContext) -> bool {
        self.locks.holds_all(cx)
    }

    /// Marks the stripes of `guard` as held by `cx` for a whole EXEC: the queued commands'
    /// own locking of them is then a no-op until [`Storage::end_exec`].
    pub fn hold_for_exec(&self, cx: &ExecContext, guard: &LockGuard<'_>) {
        cx.hold(guard.stripes());
    }

    /// Ends [`Storage::hold_for_exec`] (before its guard is dropped).
    pub fn end_exec(&self, cx: &ExecContext) {
        cx.release();
    }

    /// Commits a batch of blind writes (pipelined plain SETs) to `keys` of `db`, under their
    /// locks, so no read-modify-write of those keys interleaves with it.
    pub fn write_blind(&self, cx: &ExecContext, db: u32, keys: &[Bytes], batch: lsm::WriteBatch) -> lsm::Result<()> {
        let _guard = self.lock(cx, db, keys.iter().map(|k| &k[..]));
        self.write(cx, batch)
    }

    /// From now on, SETs queued from connections' tasks ([`Storage::try_write_blind_async`])
    /// do not wake the engine's commit thread each: the caller promises to call
    /// `lsm::Db::start_deferred_commits` whenever a runtime worker ends a pass over its ready
    /// tasks (the runtime's park and poll hooks do, see `main.rs`).
    pub fn defer_async_commits(&self) {
        self.defer_commits.store(true, Ordering::Relaxed);
    }

    /// The secret seed of the pick index.
    fn pick_seed(&self) -> u64 {
        self.pick_seed.load(Ordering::Relaxed)
    }

    fn phys(&self, db: u32) -> u16 {
        self.map[db as usize % DATABASES].load(Ordering::Acquire)
    }

    /// The live (not expired) metadata of `key`.
    pub fn get(&self, cx: &ExecContext, db: u32, key: &[u8]) -> lsm::Result<Option<Meta>> {
        self.get_physical(cx, self.phys(db), key, cx.now_ms())
    }

    /// Starts loading into the CPU's cache what reading the metadata records of `keys` (in
    /// `db`) will read first (see [`lsm::Db::prefetch_gets`]): a pipeline's reads started this
    /// way wait on memory together, not one after another.
    pub fn prefetch_metas<'a>(&self, db: u32, keys: impl Iterator<Item = &'a [u8]>) {
        let pdb = self.phys(db);
        let mut metas = MetaKeys::default();
        keys.for_each(|key| metas.push(pdb, key));
        self.engine.prefetch_gets(&metas.iter().collect::<Vec<_>>());
    }

    fn get_physical(&self, cx: &ExecContext, pdb: u16, key: &[u8], now: u64) -> lsm::Result<Option<Meta>> {
        // Short keys are built on the stack: this is every read's path.
        let mut buf = [0u8; 128];
        let raw = if key.len() + 3 <= buf.len() {
            buf[0] = b'M';
            buf[1..3].copy_from_slice(&pdb.to_be_bytes());
            buf[3..3 + key.len()].copy_from_slice(key);
            cx.get(&self.engine, &buf[..3 + key.len()])?
        } else {
            cx.get(&self.engine, &meta_key(pdb, key))?
        };
        let meta = match raw {
            Some(raw) => {
                let meta = decode(raw)?;
                if meta.is_expired(now) {
                    cx.saw_expired(Bytes::from(expiry_key(meta.expire_at_ms, pdb, key)));
                    None
                } else {
                    Some(meta)
                }
            }
            None => None,
        };
        if meta.is_none() && cx.notifies(notifications::KEY_MISS) {
            cx.note_miss(self.logical(pdb), key);
        }
        Ok(meta)
    }

    /// The logical database physical database `pdb` currently backs.
    fn logical(&self, pdb: u16) -> u32 {
        u32::from(self.inverse[usize::from(pdb)].load(Ordering::Acquire))
    }

    /// Adds writing `meta` for `key` to `batch` (and its expiry index entry).
    pub fn put_into(&self, batch: &mut lsm::WriteBatch, db: u32, key: &[u8], meta: &Meta) {
        self.rewrite_into(batch, db, key, meta, 0);
    }

    /// Adds writing `meta` over `key`'s stored metadata, which the caller read under the key's
    /// lock and which expires at `indexed_at` (0: no TTL), to `batch`. Its expiry index entry
    /// is written only if the stored one does not already cover it (see [`needs_index_entry`]):
    /// an INCR that keeps a TTL, or an EXPIRE that pushes one later, writes metadata only.
    pub fn rewrite_into(&self, batch: &mut lsm::WriteBatch, db: u32, key: &[u8], meta: &Meta, indexed_at: u64) {
        put_meta_record(batch, self.phys(db), key, meta, indexed_at);
    }

    /// Adds deleting `key` to `batch`.
    pub fn delete_into(&self, batch: &mut lsm::WriteBatch, db: u32, key: &[u8]) {
        batch.delete(meta_key(self.phys(db), key));
    }

    /// Applies `batch` atomically (one command = one batch; inside EXEC it joins the
    /// transaction's batch). Watchers of the keys it writes are told.
    pub fn write(&self, cx: &ExecContext, batch: lsm::WriteBatch) -> lsm::Result<()> {
        let created = if cx.notifies(notifications::NEW) { self.created_keys(cx, &batch)? } else { Vec::new() };
        if cx.in_transaction() {
            self.pick_cache.buffered(&batch);
        }
        if let Some(batch) = cx.buffer(batch) {
            self.commit_from(batch, cx.origin())?;
        }
        for (db, key) in created {
            cx.notify(notifications::NEW, "new", db, &key);
        }
        Ok(())
    }

    /// The keys (logical database, key) whose metadata `batch` writes and that do not exist
    /// now (or have expired): the keys it creates (keyspace event `new`).
    fn created_keys(&self, cx: &ExecContext, batch: &lsm::WriteBatch) -> lsm::Result<Vec<(u32, Vec<u8>)>> {
        let mut created: Vec<(u32, Vec<u8>)> = Vec::new();
        for entry in batch.iter() {
            let entry = entry?;
            if entry.kind != lsm::key::ValueKind::Put || entry.key.len() < 3 || entry.key[0] != b'M' {
                continue;
            }
            let pdb = u16::from_be_bytes([entry.key[1], entry.key[2]]);
            let (db, key) = (self.logical(pdb), &entry.key[3..]);
            if !created.iter().any(|(d, k)| *d == db && k == key)
                && self.get_physical(cx, pdb, key, cx.now_ms())?.is_none()
            {
                created.push((db, key.to_vec()));
            }
        }
        Ok(created)
    }

    /// Commits `batch` to the engine now (EXEC's own commit goes here). The caller holds the
    /// locks of every key whose metadata it writes, so the keyspace counts stay exact.
    pub fn commit(&self, batch: lsm::WriteBatch) -> lsm::Result<()> {
        self.commit_from(batch, 0)
    }

    /// [`Storage::commit`] of a batch client `origin` wrote (0: the server itself), for
    /// `CLIENT TRACKING NOLOOP`.
    pub fn commit_from(&self, batch: lsm::WriteBatch, origin: u64) -> lsm::Result<()> {
        // An unreadable record counts as existing: a spurious WATCH failure, never a missed one.
        let watchers = self.watches.affected(&batch, |mk| !matches!(self.engine.get(mk), Ok(None)));
        let touched = self.tracking.touched(&batch);
        let deltas = self.count_changes(&batch, false, true, None)?;
        self.pick_cache.written(&batch);
        self.meta_states.after_write(self.engine.write(batch, &lsm::WriteOptions::default()))?;
        // Clients caching these keys hear of it once the write is visible.
        self.tracking.invalidate(touched, origin);
        self.changes.fetch_add(1, Ordering::Relaxed);
        for (pdb, d) in &deltas {
            self.counts.apply(*pdb, d);
        }
        // Only once the write is visible: a watcher that re-reads after this sees it.
        for f in watchers {
            f.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Writes committed since start (see the field).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// A fresh incarnation id for a new collection.
    pub fn new_uid(&self) -> u64 {
        self.next_uid.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds copies of every record of incarnation `uid` in `from` (a collection's `E`, `Z` and
    /// `R` records: the pick seed is the server's, so member keys stay valid) to `batch`, as incarnation `new_uid` of database `to`. Strings have
    /// none. Used by COPY and MOVE.
    pub fn copy_elements_into(
        &self,
        cx: &ExecContext,
        batch: &mut lsm::WriteBatch,
        from: u32,
        uid: u64,
        to: u32,
        new_uid: u64,
    ) -> lsm::Result<()> {
        let (src, dst) = (self.phys(from), self.phys(to));
        for tag in [b'E', b'Z', b'R'] {
            let prefix = element_prefix(tag, src, uid);
            let end = collection::prefix_end(&prefix);
            for kv in cx.range(&self.engine, std::ops::Bound::Included(prefix.clone()), std::ops::Bound::Excluded(end))
            {
                let (k, v) = kv?;
                let mut key = element_prefix(tag, dst, new_uid);
                key.extend_from_slice(&k[prefix.len()..]);
                batch.put(key, v);
            }
        }
        Ok(())
    }

    /// Sets a string, replacing whatever `key` held.
    pub fn set_string(
        &self,
        cx: &ExecContext,
        db: u32,
        key: &[u8],
        value: Bytes,
        expire_at_ms: u64,
    ) -> lsm::Result<()> {
        self.rewrite_string(cx, db, key, value, (expire_at_ms, 0))
    }

    /// Sets a string over `key`'s stored value, read under the key's lock: the pair is the new
    /// TTL and the stored one (0: none; see [`Storage::rewrite_into`]).
    pub fn rewrite_string(
        &self,
        cx: &ExecContext,
        db: u32,
        key: &[u8],
        value: Bytes,
        (expire_at_ms, indexed_at): (u64, u64),
    ) -> lsm::Result<()> {
        let mut b = lsm::WriteBatch::new();
        self.rewrite_into(&mut b, db, key, &Meta::string(value, expire_at_ms), indexed_at);
        self.write(cx, b)
    }
}

fn decode(raw: Bytes) -> lsm::Result<Meta> {
    Meta::decode(raw).ok_or_else(|| lsm::Error::InvalidArgument("damaged metadata record".into()))
}

#[cfg(test)]
mod tests;
