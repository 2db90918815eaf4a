//! What the keyspace counts know of recently written keys, so the next write of the same key
//! counts without an engine read.
//!
//! Every commit compares, for each metadata record it writes, the record before with the
//! record after (see `counts.rs`); the "before" is a point read of the engine, often the
//! largest part of a small write (an MSET of ten keys: ten reads). Counting needs only whether
//! the record exists and its expiry, so this keeps that state — absent, or present with its
//! `expire_at_ms` — for the metadata records commits wrote last: a bounded map, sharded by a
//! hash of the record's key.
//!
//! An entry is the engine's state of its record whenever a command holding the key's lock
//! reads it, because every writer of metadata records keeps to these rules:
//! - a write records the states it writes while it holds the keys' locks, once every state
//!   before is known: a commit that waits for its write just before it makes it, a queued
//!   write (pipelined SETs from a connection's own task, whose commit is awaited after the
//!   stripes are released) once it is queued; a write that fails or is refused clears every
//!   entry;
//! - each entry carries the engine's count of failed write groups
//!   ([`lsm::Db::failed_write_groups`]) from before its write, and is used only while that
//!   count has not moved: a queued write that then fails is counted before the next holder of
//!   its stripes can see it done, so its entries are never taken for the engine's state (any
//!   failure anywhere retires every entry; failures are rare and the engine is read-only after
//!   one);
//! - anything that replaces more than single records (a range delete of whole databases, a full
//!   sync, a rewind) clears every entry.
//!
//! Keys are held by their 128-bit hash, not their bytes (see [`Fingerprint`]).
//! A shard that fills up is emptied (the next writes of its keys read the engine again).
//! Its table is open-addressed over fixed slots, so a commit can prefetch the slots of all its
//! keys before it looks any of them up ([`MetaStates::prefetch`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Shards: enough that threads rarely meet on one lock.
const SHARDS: usize = 64;
/// Entries per shard before it is emptied (64 × 2048 = 131,072 keys).
const PER_SHARD: usize = 2048;
/// Slots per shard: twice the entries, so a probe finds its key or a free slot within a few
/// (64 × 4096 slots of 32 bytes: 8 MiB, touched as it fills).
const SLOTS: usize = 2 * PER_SHARD;

/// The state of a metadata record: `None` if there is none, else its `expire_at_ms` (0: no
/// TTL).
pub(super) type State = Option<u64>;

/// A metadata record's key, by its 128-bit xxh3: two keys share one with probability 2^-128,
/// so a table of 131,072 of them never takes one key for another in practice (storing the keys
/// would cost an allocation per entry). Never 0, which marks a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Fingerprint(u128);

impl Fingerprint {
    pub(super) fn of(key: &[u8]) -> Fingerprint {
        Fingerprint(xxhash_rust::xxh3::xxh3_128(key).max(1))
    }

    /// The slot a probe for it starts at (the low bits; the shard is chosen by the high ones).
    fn home(self) -> usize {
        self.0 as usize & (SLOTS - 1)
    }
}

/// `State` in a slot: `u64::MAX` for none (no expiry lies that far).
const ABSENT: u64 = u64::MAX;

/// One entry: the fingerprint's halves (0, 0: free), the state and the failure count it was
/// recorded under. Atomics only so that a slot can be prefetched without the lock: every read
/// and write of one is made holding its shard's lock.
#[repr(transparent)]
struct Slot([AtomicU64; 4]);

impl Slot {
    fn fingerprint(&self) -> u128 {
        (u128::from(self.0[1].load(Ordering::Relaxed)) << 64) | u128::from(self.0[0].load(Ordering::Relaxed))
    }
}

/// One shard: an open-addressed table of `SLOTS` slots (linear probing) and, under its lock,
/// how many it holds.
struct Shard {
    len: Mutex<usize>,
    slots: Box<[Slot]>,
}

impl Shard {
    /// The slot holding `key`, or the free slot where it would go (`len` < `SLOTS`, so there is
    /// one). The caller holds the lock.
    fn find(&self, key: Fingerprint) -> &Slot {
        let mut i = key.home();
        loop {
            let slot = &self.slots[i];
            let fp = slot.fingerprint();
            if fp == key.0 || fp == 0 {
                return slot;
            }
            i = (i + 1) & (SLOTS - 1);
        }
    }
}

/// Recently written metadata records' states (see the module docs).
pub(super) struct MetaStates {
    shards: Box<[Shard]>,
}

impl std::fmt::Debug for MetaStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStates").field("shards", &self.shards.len()).finish_non_exhaustive()
    }
}

impl Default for MetaStates {
    fn default() -> Self {
        let shard = || Shard { len: Mutex::new(0), slots: free_slots(SLOTS) };
        MetaStates { shards: (0..SHARDS).map(|_| shard()).collect() }
    }
}

/// `n` free slots, from a zeroed allocation: pages the kernel hands out zeroed and makes
/// resident only when written, so an idle server does not hold the whole table.
fn free_slots(n: usize) -> Box<[Slot]> {
    let layout = std::alloc::Layout::array::<Slot>(n).expect("the table's size fits in isize");
    // SAFETY: the layout is not empty (`n` > 0, a slot is 32 bytes); all-zero bytes are a valid
    // slot (four atomics at 0: free); the pointer comes from the global allocator with the
    // layout of `[Slot; n]`, which is what the box frees it with.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<Slot>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n))
    }
}

impl MetaStates {
    fn shard(&self, key: Fingerprint) -> &Shard {
        &self.shards[(key.0 >> 122) as usize % SHARDS]
    }

    fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, usize> {
        shard.len.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts loading the slot a lookup of `key` reads first into the CPU's cache: the table is
    /// larger than the caches, so a commit that looks up several keys issues the loads together
    /// and then finds them cached.
    pub(super) fn prefetch(&self, key: Fingerprint) {
        lsm::prefetch(self.shard(key).slots[key.home()].0.as_ptr());
    }

    /// The recorded state of the metadata record `key`, if there is one recorded while the
    /// engine had seen `failures` failed write groups, as it has now.
    pub(super) fn get(&self, key: Fingerprint, failures: u64) -> Option<State> {
        let shard = self.shard(key);
        let _len = Self::lock(shard);
        let slot = shard.find(key);
        if slot.fingerprint() != key.0 || slot.0[3].load(Ordering::Relaxed) != failures {
            return None;
        }
        let state = slot.0[2].load(Ordering::Relaxed);
        Some((state != ABSENT).then_some(state))
    }

    /// Records `state` as what the engine holds for `key` once the write the caller is making
    /// or queueing is applied; the engine had seen `failures` failed write groups before it
    /// (the caller holds the key's lock).
    pub(super) fn record(&self, key: Fingerprint, state: State, failures: u64) {
        let shard = self.shard(key);
        let mut len = Self::lock(shard);
        let mut slot = shard.find(key);
        if slot.fingerprint() != key.0 {
            if *len >= PER_SHARD {
                Self::empty(shard, &mut len);
                slot = shard.find(key);
            }
            *len += 1;
            slot.0[0].store(key.0 as u64, Ordering::Relaxed);
            slot.0[1].store((key.0 >> 64) as u64, Ordering::Relaxed);
        }
        slot.0[2].store(state.unwrap_or(ABSENT), Ordering::Relaxed);
        slot.0[3].store(failures, Ordering::Relaxed);
    }

    fn empty(shard: &Shard, len: &mut usize) {
        for slot in shard.slots.iter() {
            slot.0[0].store(0, Ordering::Relaxed);
            slot.0[1].store(0, Ordering::Relaxed);
        }
        *len = 0;
    }

    /// `result`, of a write whose states were recorded: if it failed or was refused, they are
    /// not the engine's, and every entry is cleared.
    pub(super) fn after_write<T>(&self, result: lsm::Result<T>) -> lsm::Result<T> {
        if result.is_err() {
            self.clear();
        }
        result
    }

    /// Forgets everything.
    pub(super) fn clear(&self) {
        for shard in self.shards.iter() {
            let mut len = Self::lock(shard);
            if *len > 0 {
                Self::empty(shard, &mut len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_recorded_replaced_retired_and_bounded() {
        let states = MetaStates::default();
        let (k, gone) = (Fingerprint::of(b"Mk"), Fingerprint::of(b"Mgone"));
        assert_eq!(states.get(k, 0), None);
        states.record(k, Some(0), 0);
        states.record(gone, None, 0);
        assert_eq!((states.get(k, 0), states.get(gone, 0)), (Some(Some(0)), Some(None)));
        assert_eq!(states.get(k, 1), None, "a failure since retires the entry");
        states.record(k, Some(77), 1);
        assert_eq!(states.get(k, 1), Some(Some(77)));
        // Far more keys than fit: every shard stays within its bound.
        let n = SHARDS * PER_SHARD * 2;
        for i in 0..n {
            states.record(Fingerprint::of(format!("M{i}").as_bytes()), Some(i as u64), 0);
        }
        assert!(states.shards.iter().all(|s| *s.len.lock().unwrap() <= PER_SHARD));
        let last = Fingerprint::of(format!("M{}", n - 1).as_bytes());
        assert_eq!(states.get(last, 0), Some(Some(n as u64 - 1)), "the newest is kept");
        states.clear();
        assert_eq!(states.get(last, 0), None);
    }
}

/// The rules of the module docs, on a real keyspace: after every kind of write, the counts
/// equal a recount of the records.
#[cfg(test)]
mod rules {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use bytes::Bytes;

    use super::super::{meta_key, BlindWrite, ExecContext, KeyspaceCounts, Meta, Storage};
    use super::Fingerprint;

    /// Fails every WAL write while set (a full disk).
    #[derive(Debug, Default)]
    struct DiskFull(AtomicBool);

    impl lsm::fault::FaultInjector for DiskFull {
        fn check(&self, op: lsm::fault::IoOp, _: &std::path::Path) -> std::io::Result<()> {
            match op == lsm::fault::IoOp::WalWrite && self.0.load(Ordering::Relaxed) {
                true => Err(std::io::Error::from_raw_os_error(28)),
                false => Ok(()),
            }
        }
    }

    fn assert_exact(s: &Storage) {
        let recount = KeyspaceCounts::recount(s.engine()).unwrap();
        assert_eq!(s.counts.get(0, 0), recount.get(0, 0));
    }

    #[test]
    fn counts_stay_exact_through_recorded_queued_failed_and_flushed_writes() {
        let dir = tempfile::tempdir().unwrap();
        let disk_full = Arc::new(DiskFull::default());
        let opts = lsm::Options::default().fault_injector(Arc::clone(&disk_full) as Arc<dyn lsm::fault::FaultInjector>);
        let s = Storage::new(lsm::Db::open(dir.path(), opts).unwrap()).unwrap();
        let cx = ExecContext::new();
        let known =
            |key: &[u8]| s.meta_states.get(Fingerprint::of(&meta_key(0, key)), s.engine().failed_write_groups());
        // A commit records what it wrote; the next write of the key counts from it.
        s.set_string(&cx, 0, b"a", Bytes::from_static(b"1"), 0).unwrap();
        assert_eq!(known(b"a"), Some(Some(0)));
        s.set_string(&cx, 0, b"a", Bytes::from_static(b"2"), 4_000_000_000_000).unwrap();
        assert_eq!(known(b"a"), Some(Some(4_000_000_000_000)));
        assert_exact(&s);
        // A queued write records its keys as it is queued.
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let queue = |value: &'static [u8], expire_at_ms: u64| {
            let mut batch = lsm::WriteBatch::new();
            s.put_into(&mut batch, 0, b"a", &Meta::string(Bytes::from_static(value), expire_at_ms));
            s.put_into(&mut batch, 0, b"b", &Meta::string(Bytes::from_static(value), expire_at_ms));
            let keys = [Bytes::from_static(b"a"), Bytes::from_static(b"b")];
            match s.try_write_blind_async(0, &keys, &mut batch).unwrap() {
                BlindWrite::Queued(commit, changes) => (commit, changes),
                _ => panic!("the stripes are free and the states in memory"),
            }
        };
        let (commit, _) = queue(b"3", 0);
        assert_eq!((known(b"a"), known(b"b")), (Some(Some(0)), Some(Some(0))));
        runtime.block_on(commit).unwrap();
        assert_exact(&s);
        // A queued write that fails: its entries are not taken for the engine's state.
        disk_full.0.store(true, Ordering::Relaxed);
        let (commit, changes) = queue(b"x", 5_000_000_000_000);
        assert!(runtime.block_on(commit).is_err());
        s.revert_counts(&changes);
        assert_eq!((known(b"a"), known(b"b")), (None, None));
        disk_full.0.store(false, Ordering::Relaxed);
        s.engine().resume().unwrap();
        assert_exact(&s);
        s.set_string(&cx, 0, b"b", Bytes::from_static(b"4"), 0).unwrap();
        assert_eq!(s.dbsize(0), 2);
        // A failed commit retires what it meant to write, and counts nothing.
        disk_full.0.store(true, Ordering::Relaxed);
        assert!(s.set_string(&cx, 0, b"c", Bytes::from_static(b"5"), 0).is_err());
        assert!(s.set_string(&cx, 0, b"b", Bytes::from_static(b"5"), 9_000_000_000_000).is_err());
        assert_eq!((known(b"c"), known(b"b")), (None, None));
        disk_full.0.store(false, Ordering::Relaxed);
        s.engine().resume().unwrap();
        s.set_string(&cx, 0, b"c", Bytes::from_static(b"6"), 0).unwrap();
        assert_eq!(s.dbsize(0), 3);
        assert_exact(&s);
        // A flush forgets everything.
        s.flushdb(&cx, 0).unwrap();
        assert_eq!(known(b"c"), None);
        s.set_string(&cx, 0, b"a", Bytes::from_static(b"7"), 0).unwrap();
        assert_eq!(s.dbsize(0), 1);
        assert_exact(&s);
    }
}
