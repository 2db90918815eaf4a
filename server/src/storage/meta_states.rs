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
//! - a commit that waits for its write ([`super::Storage::commit_from`], a replica's apply)
//!   records the states it wrote once the engine took the write, while it still holds the
//!   keys' locks, and forgets them if the write failed;
//! - a queued write (pipelined SETs from a connection's own task, whose commit is awaited after
//!   the stripes are released) forgets its keys' entries under their stripes, before queueing;
//! - anything that replaces more than single records (a range delete of whole databases, a full
//!   sync, a rewind) clears every entry.
//!
//! A shard that fills up is emptied (the next writes of its keys read the engine again).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// Shards: enough that executor threads rarely meet on one lock.
const SHARDS: usize = 64;
/// Entries per shard before it is emptied (64 × 2048 = 131,072 keys, about 9 MiB when full
/// with 20-byte keys).
const PER_SHARD: usize = 2048;

/// The state of a metadata record: `None` if there is none, else its `expire_at_ms` (0: no
/// TTL).
pub(super) type State = Option<u64>;

/// One shard: keys hashed with xxh3 (SipHash would cost more than the rest of a lookup).
type Shard = HashMap<Box<[u8]>, State, BuildHasherDefault<KeyHasher>>;

/// Recently written metadata records' states (see the module docs).
pub(super) struct MetaStates {
    shards: Box<[Mutex<Shard>]>,
}

/// xxh3 of a key's bytes (what `Hash` for a byte slice writes: its length, then its bytes).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }
}

impl std::fmt::Debug for MetaStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStates").field("shards", &self.shards.len()).finish_non_exhaustive()
    }
}

impl Default for MetaStates {
    fn default() -> Self {
        MetaStates { shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect() }
    }
}

impl MetaStates {
    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        // The high bits: the map inside uses the low ones of its own hash of the key.
        let i = (xxhash_rust::xxh3::xxh3_64(key) >> 58) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The recorded state of the metadata record `key`, if there is one.
    pub(super) fn get(&self, key: &[u8]) -> Option<State> {
        self.shard(key).get(key).copied()
    }

    /// Records `state` as what the engine now holds for `key` (the caller holds its lock).
    pub(super) fn record(&self, key: &[u8], state: State) {
        let mut shard = self.shard(key);
        if let Some(known) = shard.get_mut(key) {
            *known = state;
            return;
        }
        if shard.len() >= PER_SHARD {
            shard.clear();
        }
        shard.insert(key.into(), state);
    }

    /// Forgets what is known of `key` (the caller holds its lock).
    pub(super) fn forget(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }

    /// Forgets everything.
    pub(super) fn clear(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_recorded_replaced_forgotten_and_bounded() {
        let states = MetaStates::default();
        assert_eq!(states.get(b"Mk"), None);
        states.record(b"Mk", Some(0));
        states.record(b"Mgone", None);
        assert_eq!((states.get(b"Mk"), states.get(b"Mgone")), (Some(Some(0)), Some(None)));
        states.record(b"Mk", Some(77));
        assert_eq!(states.get(b"Mk"), Some(Some(77)));
        states.forget(b"Mk");
        assert_eq!(states.get(b"Mk"), None);
        // Far more keys than fit: every shard stays within its bound.
        for i in 0..(SHARDS * PER_SHARD * 2) {
            states.record(format!("M{i}").as_bytes(), Some(i as u64));
        }
        assert!(states.shards.iter().all(|s| s.lock().unwrap().len() <= PER_SHARD));
        let last = SHARDS * PER_SHARD * 2 - 1;
        assert_eq!(states.get(format!("M{last}").as_bytes()), Some(Some(last as u64)), "the newest entry is kept");
        states.clear();
        assert_eq!(states.get(format!("M{last}").as_bytes()), None);
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
        let known = |key: &[u8]| s.meta_states.get(&meta_key(0, key));
        // A commit records what it wrote; the next write of the key counts from it.
        s.set_string(&cx, 0, b"a", Bytes::from_static(b"1"), 0).unwrap();
        assert_eq!(known(b"a"), Some(Some(0)));
        s.set_string(&cx, 0, b"a", Bytes::from_static(b"2"), 4_000_000_000_000).unwrap();
        assert_eq!(known(b"a"), Some(Some(4_000_000_000_000)));
        assert_exact(&s);
        // A queued write forgets its keys before it is queued.
        let mut batch = lsm::WriteBatch::new();
        s.put_into(&mut batch, 0, b"a", &Meta::string(Bytes::from_static(b"3"), 0));
        s.put_into(&mut batch, 0, b"b", &Meta::string(Bytes::from_static(b"3"), 0));
        let keys = [Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let BlindWrite::Queued(commit, _) = s.try_write_blind_async(0, &keys, &mut batch).unwrap() else {
            panic!("the stripes are free and the states in memory")
        };
        assert_eq!((known(b"a"), known(b"b")), (None, None));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(commit).unwrap();
        assert_exact(&s);
        s.set_string(&cx, 0, b"b", Bytes::from_static(b"4"), 0).unwrap();
        assert_eq!(s.dbsize(0), 2);
        // A failed commit forgets what it meant to write, and counts nothing.
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
