//! Transactions (EXEC) and WATCH on the storage layer.
//!
//! While EXEC runs its queued commands, the thread has a transaction buffer: every batch a
//! command writes goes into one engine `WriteBatch` instead of the engine, and every read the
//! commands make sees the buffer over the engine (point reads check it first, ranges are merged),
//! so later commands see earlier ones' writes. EXEC then commits the buffer as one batch: other
//! clients see all of the transaction or none of it, and so does recovery after a crash.
//!
//! WATCH keeps, per watched key, the flags of the clients watching it; every committed batch
//! that writes a watched key's metadata (or range-deletes over it) sets them.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lsm::key::ValueKind;

/// Writes buffered by the running transaction.
#[derive(Debug, Default)]
struct Txn {
    batch: lsm::WriteBatch,
    /// Key -> value (None: deleted).
    writes: BTreeMap<Vec<u8>, Option<Bytes>>,
    /// Ranges deleted (`[start, end)`), applied before `writes` made after them.
    range_dels: Vec<(Vec<u8>, Vec<u8>)>,
}

thread_local! {
    static TXN: RefCell<Option<Txn>> = const { RefCell::new(None) };
    /// Set while a multi-key read runs: all its reads see one state of the database.
    static SNAPSHOT: RefCell<Option<lsm::ReadOptions>> = const { RefCell::new(None) };
}

/// Runs `f` with every storage read on this thread at one snapshot of `engine` (a command that
/// reads several keys then sees them as of one moment, as Redis's single thread would).
pub fn with_snapshot<R>(engine: &lsm::Db, f: impl FnOnce() -> R) -> R {
    if active() {
        return f(); // EXEC already holds the keys' locks
    }
    let snap = engine.snapshot();
    SNAPSHOT.with(|s| *s.borrow_mut() = Some(lsm::ReadOptions::new().snapshot(&snap)));
    let out = f();
    SNAPSHOT.with(|s| *s.borrow_mut() = None);
    out
}

/// A point read through the snapshot of [`with_snapshot`], if one is set.
pub(super) fn snapshot_get(engine: &lsm::Db, key: &[u8]) -> lsm::Result<Option<Bytes>> {
    SNAPSHOT.with(|s| match s.borrow().as_ref() {
        Some(opts) => engine.get_with(key, opts),
        None => engine.get(key),
    })
}

/// Starts buffering this thread's writes.
pub fn begin() {
    TXN.with(|t| *t.borrow_mut() = Some(Txn::default()));
}

/// Stops buffering and returns the buffered batch.
pub fn finish() -> lsm::WriteBatch {
    TXN.with(|t| t.borrow_mut().take().map(|t| t.batch).unwrap_or_default())
}

/// True while this thread runs a transaction.
pub fn active() -> bool {
    TXN.with(|t| t.borrow().is_some())
}

/// Buffers `batch` if a transaction runs here; gives it back otherwise.
pub(super) fn buffer(batch: lsm::WriteBatch) -> Option<lsm::WriteBatch> {
    TXN.with(|t| {
        let mut t = t.borrow_mut();
        let Some(txn) = t.as_mut() else { return Some(batch) };
        for entry in batch.iter().flatten() {
            match entry.kind {
                ValueKind::Put => {
                    txn.writes.insert(entry.key.to_vec(), Some(Bytes::copy_from_slice(entry.value)));
                }
                ValueKind::Delete => {
                    txn.writes.insert(entry.key.to_vec(), None);
                }
                ValueKind::RangeDelete => {
                    let (start, end) = (entry.key.to_vec(), entry.value.to_vec());
                    let doomed: Vec<Vec<u8>> =
                        txn.writes.range(start.clone()..end.clone()).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        txn.writes.insert(k, None);
                    }
                    txn.range_dels.push((start, end));
                }
            }
        }
        txn.batch.extend_from(&batch);
        None
    })
}

/// The buffered state of `key`: `Some(Some(v))` written, `Some(None)` deleted, `None` untouched.
pub(super) fn lookup(key: &[u8]) -> Option<Option<Bytes>> {
    TXN.with(|t| {
        let t = t.borrow();
        let txn = t.as_ref()?;
        if let Some(v) = txn.writes.get(key) {
            return Some(v.clone());
        }
        txn.range_dels.iter().any(|(a, b)| key >= &a[..] && key < &b[..]).then_some(None)
    })
}

/// A range over the engine, merged with the running transaction's writes when there is one.
// The engine variant is the common one; boxing it would cost an allocation per range.
#[allow(clippy::large_enum_variant)]
pub enum RawRange {
    /// No transaction: the engine's own iterator.
    Engine(lsm::Range),
    /// Inside a transaction: the merged entries.
    Merged(std::vec::IntoIter<(Bytes, Bytes)>),
}

impl std::fmt::Debug for RawRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawRange")
    }
}

impl Iterator for RawRange {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RawRange::Engine(r) => r.next(),
            RawRange::Merged(v) => v.next().map(Ok),
        }
    }
}

impl DoubleEndedIterator for RawRange {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            RawRange::Engine(r) => r.next_back(),
            RawRange::Merged(v) => v.next_back().map(Ok),
        }
    }
}

/// `engine.range(start..end)`, seen through the running transaction.
pub(super) fn range(engine: &lsm::Db, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> RawRange {
    let inner = SNAPSHOT.with(|s| match s.borrow().as_ref() {
        Some(opts) => engine.range_with((start.clone(), end.clone()), opts),
        None => engine.range((start.clone(), end.clone())),
    });
    TXN.with(|t| {
        let t = t.borrow();
        let Some(txn) = t.as_ref() else { return RawRange::Engine(inner) };
        let mut merged: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        for kv in inner.flatten() {
            if !txn.range_dels.iter().any(|(a, b)| kv.0[..] >= a[..] && kv.0[..] < b[..]) {
                merged.insert(kv.0, kv.1);
            }
        }
        for (k, v) in txn.writes.range::<Vec<u8>, _>((start, end)) {
            match v {
                Some(v) => merged.insert(Bytes::copy_from_slice(k), v.clone()),
                None => merged.remove(&k[..]),
            };
        }
        RawRange::Merged(merged.into_iter().collect::<Vec<_>>().into_iter())
    })
}

/// One watched key of one client.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Physical database.
    pub pdb: u16,
    /// The key.
    pub key: Bytes,
    /// Whether it existed (unexpired) when watched, and its expiry then.
    pub live_until: Option<u64>,
}

/// (physical db, key) -> the flags of the clients watching it.
type WatchMap = HashMap<(u16, Bytes), Vec<Arc<AtomicBool>>>;

/// Who watches which keys.
#[derive(Debug, Default)]
pub struct Watches {
    keys: Mutex<WatchMap>,
    count: AtomicUsize,
}

impl Watches {
    /// Registers `flag` (set when the key changes) on `key` of `pdb`.
    pub fn watch(&self, pdb: u16, key: Bytes, flag: &Arc<AtomicBool>) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.entry((pdb, key)).or_default().push(Arc::clone(flag));
        self.count.store(keys.len(), Ordering::Release);
    }

    /// Removes `flag` from every key in `watched`.
    pub fn unwatch(&self, watched: &[Watched], flag: &Arc<AtomicBool>) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        for w in watched {
            let slot = (w.pdb, w.key.clone());
            if let Some(flags) = keys.get_mut(&slot) {
                flags.retain(|f| !Arc::ptr_eq(f, flag));
                if flags.is_empty() {
                    keys.remove(&slot);
                }
            }
        }
        self.count.store(keys.len(), Ordering::Release);
    }

    /// Flags the watchers of every metadata key `batch` writes or range-deletes.
    pub fn touch_batch(&self, batch: &lsm::WriteBatch) {
        for f in self.affected(batch) {
            f.store(true, Ordering::Release);
        }
    }

    /// The flags of the clients watching a key `batch` writes. Writers take them before
    /// committing and set them once the batch is visible (a client that WATCHes meanwhile waits
    /// for the writer's key lock, so it reads the new value and needs no flag).
    pub fn affected(&self, batch: &lsm::WriteBatch) -> Vec<Arc<AtomicBool>> {
        let mut out = Vec::new();
        if self.count.load(Ordering::Acquire) == 0 {
            return out;
        }
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut set = |flags: &Vec<Arc<AtomicBool>>| out.extend(flags.iter().cloned());
        for entry in batch.iter().flatten() {
            match entry.kind {
                ValueKind::RangeDelete => {
                    for ((pdb, key), flags) in keys.iter() {
                        let mk = super::meta_key(*pdb, key);
                        if mk[..] >= *entry.key && mk[..] < *entry.value {
                            set(flags);
                        }
                    }
                }
                _ if entry.key.first() == Some(&b'M') && entry.key.len() >= 3 => {
                    let pdb = u16::from_be_bytes([entry.key[1], entry.key[2]]);
                    if let Some(flags) = keys.get(&(pdb, Bytes::copy_from_slice(&entry.key[3..]))) {
                        set(flags);
                    }
                }
                _ => {}
            }
        }
        drop(keys);
        out
    }

    /// Flags the watchers of every key of the physical databases `pdbs` (SWAPDB).
    pub fn touch_databases(&self, pdbs: &[u16]) {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        for ((pdb, _), flags) in keys.iter() {
            if pdbs.contains(pdb) {
                flags.iter().for_each(|f| f.store(true, Ordering::Release));
            }
        }
    }
}
