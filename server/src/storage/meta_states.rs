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
//! Keys are held by a 128-bit hash, not their bytes (see [`Fingerprint`]).
//!
//! The table is set-associative: a key's hash picks one bucket of [`WAYS`] slots, a single
//! cache line, so a lookup reads one line (which a commit prefetches for all its keys before
//! it looks any of them up, [`MetaStates::prefetch`]), and a key that finds its bucket full
//! replaces one of the bucket's entries (chosen by other bits of its hash). The table stays
//! full under churn, holding the latest writes of as many keys as it has slots, with no
//! probing chains to keep and nothing emptied wholesale. The failure count is kept per shard:
//! its entries were all recorded under it (see [`MetaStates::record`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Shards: enough that threads rarely meet on one lock.
const SHARDS: usize = 64;
/// Slots per bucket: a bucket of 16-byte slots is one 64-byte cache line.
const WAYS: usize = 4;
/// Buckets per shard: 64 × 2048 × 4 = 524,288 keys in 8 MiB, touched as it fills.
const BUCKETS: usize = 2048;

/// The state of a metadata record: `None` if there is none, else its `expire_at_ms` (0: no
/// TTL).
pub(super) type State = Option<u64>;

/// A metadata record's key, by its 128-bit xxh3: the top bits choose its shard and bucket, the
/// low 64 are what a slot keeps (never 0, which marks a free slot). Two keys of one bucket
/// share all of them with probability 2^-64 per pair, so the table never takes one key for
/// another in practice (storing the keys would cost an allocation per entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Fingerprint(u128);

impl Fingerprint {
    pub(super) fn of(key: &[u8]) -> Fingerprint {
        let h = xxhash_rust::xxh3::xxh3_128(key);
        Fingerprint(if h as u64 == 0 { h | 1 } else { h })
    }

    /// What a slot holds for it.
    fn tag(self) -> u64 {
        self.0 as u64
    }

    fn shard(self) -> usize {
        (self.0 >> 122) as usize % SHARDS
    }

    fn bucket(self) -> usize {
        (self.0 >> 64) as usize % BUCKETS
    }

    /// The way it replaces in a full bucket.
    fn victim(self) -> usize {
        (self.0 >> 96) as usize % WAYS
    }
}

/// `State` in a slot: `u64::MAX` for none (no expiry lies that far).
const ABSENT: u64 = u64::MAX;

/// One cache line of [`WAYS`] slots, each a tag (0: free) and a state. Atomics only so that a
/// bucket can be prefetched without the lock: every read and write of one is made holding its
/// shard's lock.
#[repr(C, align(64))]
struct Bucket([AtomicU64; 2 * WAYS]);

/// One shard: its buckets and, under its lock, the failure count its entries were recorded
/// under and how many slots are taken.
struct Shard {
    lock: Mutex<ShardState>,
    buckets: Box<[Bucket]>,
}

#[derive(Debug, Default)]
struct ShardState {
    failures: u64,
    taken: usize,
}

impl Shard {
    /// Frees every slot (the caller holds the lock, `state`).
    fn empty(&self, state: &mut ShardState) {
        if state.taken > 0 {
            for word in self.buckets.iter().flat_map(|b| b.0.iter().step_by(2)) {
                word.store(0, Ordering::Relaxed);
            }
            state.taken = 0;
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
        let shard = || Shard { lock: Mutex::default(), buckets: free_buckets(BUCKETS) };
        MetaStates { shards: (0..SHARDS).map(|_| shard()).collect() }
    }
}

/// `n` free buckets, from a zeroed allocation: pages the kernel hands out zeroed and makes
/// resident only when written, so an idle server does not hold the whole table.
fn free_buckets(n: usize) -> Box<[Bucket]> {
    let layout = std::alloc::Layout::array::<Bucket>(n).expect("the table's size fits in isize");
    // SAFETY: the layout is not empty (`n` > 0, a bucket is 64 bytes); all-zero bytes are a
    // valid bucket (atomics at 0: free slots); the pointer comes from the global allocator with
    // the layout of `[Bucket; n]`, which is what the box frees it with.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<Bucket>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n))
    }
}

impl MetaStates {
    fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, ShardState> {
        shard.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bucket(&self, key: Fingerprint) -> (&Shard, &Bucket) {
        let shard = &self.shards[key.shard()];
        (shard, &shard.buckets[key.bucket()])
    }

    /// Starts loading the bucket a lookup of `key` reads into the CPU's cache: the table is
    /// larger than the caches, so a commit that looks up several keys issues the loads together
    /// and then finds them cached.
    pub(super) fn prefetch(&self, key: Fingerprint) {
        lsm::prefetch(self.bucket(key).1 .0.as_ptr());
    }

    /// The recorded state of the metadata record `key`, if there is one recorded while the
    /// engine had seen `failures` failed write groups, as it has now.
    pub(super) fn get(&self, key: Fingerprint, failures: u64) -> Option<State> {
        let (shard, bucket) = self.bucket(key);
        let state = Self::lock(shard);
        if state.failures != failures {
            return None;
        }
        let way = (0..WAYS).find(|&w| bucket.0[2 * w].load(Ordering::Relaxed) == key.tag())?;
        let recorded = bucket.0[2 * way + 1].load(Ordering::Relaxed);
        Some((recorded != ABSENT).then_some(recorded))
    }

    /// Records `state` as what the engine holds for `key` once the write the caller is making
    /// or queueing is applied; the engine had seen `failures` failed write groups before it
    /// (the caller holds the key's lock). A state recorded under an older count than the
    /// shard's is dropped (its write came before a failure); a newer count empties the shard
    /// first (its entries came before one).
    pub(super) fn record(&self, key: Fingerprint, state: State, failures: u64) {
        let (shard, bucket) = self.bucket(key);
        let mut held = Self::lock(shard);
        if failures < held.failures {
            return;
        }
        if failures > held.failures {
            shard.empty(&mut held);
            held.failures = failures;
        }
        let tags = || (0..WAYS).map(|w| bucket.0[2 * w].load(Ordering::Relaxed));
        let way = match tags().position(|t| t == key.tag()) {
            Some(w) => w,
            None => {
                let free = tags().position(|t| t == 0);
                if free.is_some() {
                    held.taken += 1;
                }
                free.unwrap_or(key.victim())
            }
        };
        bucket.0[2 * way].store(key.tag(), Ordering::Relaxed);
        bucket.0[2 * way + 1].store(state.unwrap_or(ABSENT), Ordering::Relaxed);
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
            shard.empty(&mut Self::lock(shard));
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
        assert_eq!(states.get(gone, 1), None, "recorded before the failure");
        // A state from before the failure, recorded late, is not taken.
        states.record(k, Some(5), 0);
        assert_eq!(states.get(k, 1), Some(Some(77)));
        // Far more keys than fit: every bucket keeps at most its ways, the newest always.
        let n = SHARDS * BUCKETS * WAYS * 2;
        for i in 0..n {
            let key = Fingerprint::of(format!("M{i}").as_bytes());
            states.record(key, Some(i as u64), 1);
            assert_eq!(states.get(key, 1), Some(Some(i as u64)), "the newest is kept");
        }
        let taken: usize = states.shards.iter().map(|s| s.lock.lock().unwrap().taken).sum();
        let slots = SHARDS * BUCKETS * WAYS;
        // Two keys a slot on average: a bucket stays short of full only if it drew fewer than
        // its ways (~4 %).
        assert!(taken <= slots && taken > slots / 10 * 9, "{taken} of {slots} slots taken");
        // Of the last half, most are still there (a replacement takes a random way).
        let kept = (n / 2..n).filter(|&i| states.get(Fingerprint::of(format!("M{i}").as_bytes()), 1).is_some()).count();
        assert!(kept > n / 4, "{kept} of {} kept", n / 2);
        states.clear();
        let last = Fingerprint::of(format!("M{}", n - 1).as_bytes());
        assert_eq!(states.get(last, 1), None);
        assert!(states.shards.iter().all(|s| s.lock.lock().unwrap().taken == 0));
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
