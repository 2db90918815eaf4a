//! Keyspace counts: per physical database, the number of keys, of keys with a TTL, and the
//! sum of their expiry times, kept exact on every commit so `DBSIZE` and `INFO keyspace` are
//! O(1) instead of a scan.
//!
//! A key counts from the commit that writes its metadata record to the commit that deletes it
//! (DEL, overwrite by another type is not a delete, FLUSHDB, the expiry cycle), as in Redis,
//! where `DBSIZE` includes keys whose TTL has passed until they are reclaimed. Every commit
//! compares, for each metadata record it writes, the record before (read under the key's lock)
//! with the record after. The compaction filter never drops metadata records, so nothing
//! changes the keyspace behind the counts' back.
//!
//! On a clean shutdown the counts are stored in a file beside the data ([`COUNTS_FILE`]), with
//! the engine's last sequence number; at startup they are loaded from it if that number still
//! matches, and the file is deleted at once, so after a crash (no file) they are recounted with
//! one scan of the metadata records. A file, not a record: the engine's sequence numbers belong
//! to replication (a replica's must be exactly its primary's), so nothing but commands writes.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::{meta_key, meta_states, Befores, Meta, Storage, DATABASES};

/// Where older versions left the counts at a clean shutdown (now only deleted if found).
const LEGACY_COUNTS_KEY: &[u8] = b"S:counts";

/// The file in the data directory where clean shutdown leaves the counts:
/// `last sequence u64 BE | xxh3-64 of the rest u64 BE | encoded counts`.
pub const COUNTS_FILE: &str = "KEYSPACE-COUNTS";

/// Writes the counts file (see [`COUNTS_FILE`]) for the engine as it is now.
pub(super) fn save(engine: &lsm::Db, counts: &KeyspaceCounts) -> lsm::Result<()> {
    let body = counts.encode();
    let mut raw = engine.latest_sequence().to_be_bytes().to_vec();
    raw.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&body).to_be_bytes());
    raw.extend_from_slice(&body);
    let path = engine.path().join(COUNTS_FILE);
    let tmp = engine.path().join(format!("{COUNTS_FILE}.tmp"));
    std::fs::write(&tmp, raw)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The counts a clean shutdown left, if they describe the engine as it is (same last
/// sequence, intact); the file is deleted either way, so a crash from now on means a recount.
pub(super) fn take_saved(engine: &lsm::Db) -> lsm::Result<Option<KeyspaceCounts>> {
    if engine.get(LEGACY_COUNTS_KEY)?.is_some() {
        engine.delete(LEGACY_COUNTS_KEY)?;
    }
    let path = engine.path().join(COUNTS_FILE);
    let raw = match std::fs::read(&path) {
        Ok(raw) => raw,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    std::fs::remove_file(&path)?;
    std::fs::File::open(engine.path())?.sync_all()?;
    if raw.len() < 16 {
        return Ok(None);
    }
    let word = |at: usize| raw[at..at + 8].try_into().map(u64::from_be_bytes).unwrap_or_default();
    let body = &raw[16..];
    if word(0) != engine.latest_sequence() || word(8) != xxhash_rust::xxh3::xxh3_64(body) {
        return Ok(None);
    }
    Ok(KeyspaceCounts::decode(body))
}

/// One database's counts.
#[derive(Debug, Default)]
struct DbCounts {
    keys: AtomicU64,
    expires: AtomicU64,
    /// Sum over keys with a TTL of `expire_at_ms - base_ms`.
    ttl_sum: AtomicI64,
}

/// Every physical database's counts.
#[derive(Debug)]
pub struct KeyspaceCounts {
    dbs: Box<[DbCounts]>,
    /// Expiry times are summed relative to this (ms since the epoch), so sums stay small.
    base_ms: u64,
}

/// The change one commit makes to one database.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// Reset the database to zero first (a FLUSHDB/FLUSHALL range delete).
    pub cleared: bool,
    /// Keys added minus keys removed.
    pub keys: i64,
    /// Keys with a TTL added minus removed.
    pub expires: i64,
    /// Change in the sum of expiry times (absolute ms).
    pub ttl_sum: i64,
}

impl Delta {
    /// Accounts for a metadata record going from `before` to `after`, each given by its expiry
    /// time (None: absent; 0: no TTL).
    pub fn record(&mut self, before: Option<u64>, after: Option<u64>) {
        let ttl = |m: Option<u64>| m.unwrap_or(0);
        self.keys += i64::from(after.is_some()) - i64::from(before.is_some());
        self.expires += i64::from(ttl(after) != 0) - i64::from(ttl(before) != 0);
        self.ttl_sum += ttl(after) as i64 - ttl(before) as i64;
    }

    /// The change that undoes this one (for a change that does not clear the database).
    pub fn reversed(&self) -> Delta {
        Delta { cleared: false, keys: -self.keys, expires: -self.expires, ttl_sum: -self.ttl_sum }
    }
}

/// One database's counts at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Keys.
    pub keys: u64,
    /// Keys with a TTL.
    pub expires: u64,
    /// Average remaining TTL of the keys with one, in ms (0 if none), as INFO's `avg_ttl`.
    pub avg_ttl_ms: u64,
}

impl KeyspaceCounts {
    /// All zero.
    pub fn new() -> Self {
        KeyspaceCounts { dbs: (0..DATABASES).map(|_| DbCounts::default()).collect(), base_ms: super::now_ms() }
    }

    /// Applies a committed change to physical database `pdb`.
    pub fn apply(&self, pdb: u16, d: &Delta) {
        let c = &self.dbs[usize::from(pdb)];
        if d.cleared {
            c.keys.store(0, Ordering::Release);
            c.expires.store(0, Ordering::Release);
            c.ttl_sum.store(0, Ordering::Release);
        }
        c.keys.fetch_add(d.keys as u64, Ordering::AcqRel);
        c.expires.fetch_add(d.expires as u64, Ordering::AcqRel);
        // Relative to the base: each key with a TTL contributes `expire_at - base`.
        let rel = d.ttl_sum - d.expires * self.base_ms as i64;
        c.ttl_sum.fetch_add(rel, Ordering::AcqRel);
    }

    /// The counts of physical database `pdb`.
    pub fn get(&self, pdb: u16, now_ms: u64) -> Snapshot {
        let c = &self.dbs[usize::from(pdb)];
        let (keys, expires) = (c.keys.load(Ordering::Acquire), c.expires.load(Ordering::Acquire));
        let avg_ttl_ms = if expires == 0 {
            0
        } else {
            let avg_at = self.base_ms as i128 + i128::from(c.ttl_sum.load(Ordering::Acquire)) / i128::from(expires);
            (avg_at - i128::from(now_ms)).max(0) as u64
        };
        Snapshot { keys, expires, avg_ttl_ms }
    }

    /// The record clean shutdown stores: `base u64 | (pdb u16 | keys u64 | expires u64 | sum i64)*`
    /// (big-endian) for every non-empty database.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.base_ms.to_be_bytes().to_vec();
        for (pdb, c) in self.dbs.iter().enumerate() {
            let keys = c.keys.load(Ordering::Acquire);
            if keys == 0 {
                continue;
            }
            out.extend_from_slice(&(pdb as u16).to_be_bytes());
            out.extend_from_slice(&keys.to_be_bytes());
            out.extend_from_slice(&c.expires.load(Ordering::Acquire).to_be_bytes());
            out.extend_from_slice(&c.ttl_sum.load(Ordering::Acquire).to_be_bytes());
        }
        out
    }

    /// Counts from a record of [`KeyspaceCounts::encode`]; None if it is damaged.
    pub fn decode(raw: &[u8]) -> Option<Self> {
        let counts = KeyspaceCounts::new();
        counts.load(raw)?;
        Some(counts)
    }

    /// Replaces every count with those of `other` (a replica that loaded its primary's data).
    pub fn assign(&self, other: &KeyspaceCounts) {
        let _ = self.load(&other.encode());
    }

    /// Replaces every count with those of a record of [`KeyspaceCounts::encode`]; None (and
    /// nothing changed) if it is damaged.
    fn load(&self, raw: &[u8]) -> Option<()> {
        let counts = self;
        let old_base = u64::from_be_bytes(raw.get(..8)?.try_into().ok()?);
        let rest = &raw[8..];
        if !rest.len().is_multiple_of(26) {
            return None;
        }
        for c in counts.dbs.iter() {
            c.keys.store(0, Ordering::Relaxed);
            c.expires.store(0, Ordering::Relaxed);
            c.ttl_sum.store(0, Ordering::Relaxed);
        }
        for rec in rest.chunks_exact(26) {
            let pdb = u16::from_be_bytes([rec[0], rec[1]]);
            let word = |at: usize| rec[at..at + 8].try_into().map(u64::from_be_bytes).unwrap_or_default();
            let c = &counts.dbs[usize::from(pdb)];
            let expires = word(10);
            c.keys.store(word(2), Ordering::Relaxed);
            c.expires.store(expires, Ordering::Relaxed);
            // Re-base the sum: each key's `at - old_base` becomes `at - new_base`.
            let shift = (i128::from(old_base) - i128::from(counts.base_ms)) * i128::from(expires);
            let sum = i128::from(word(18) as i64) + shift;
            c.ttl_sum.store(sum.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64, Ordering::Relaxed);
        }
        Some(())
    }

    /// Counts every metadata record of `engine` (startup after a crash).
    pub fn recount(engine: &lsm::Db) -> lsm::Result<Self> {
        let counts = KeyspaceCounts::new();
        let mut deltas: Vec<Delta> = vec![Delta::default(); DATABASES];
        // A walk of every key: it leaves the block cache to the reads that follow.
        let bulk = lsm::ReadOptions { fill_cache: false, ..lsm::ReadOptions::new() };
        for kv in engine.range_with(meta_key(0, b"").to_vec()..b"N".to_vec(), &bulk) {
            let (k, v) = kv?;
            if k.len() < 3 {
                continue;
            }
            let pdb = u16::from_be_bytes([k[1], k[2]]);
            let at = super::Meta::expiry_of(&v)
                .ok_or_else(|| lsm::Error::InvalidArgument("damaged metadata record".into()))?;
            deltas[usize::from(pdb)].record(None, Some(at));
        }
        for (pdb, d) in deltas.iter().enumerate() {
            if d.keys != 0 {
                counts.apply(pdb as u16, d);
            }
        }
        Ok(counts)
    }
}

impl Default for KeyspaceCounts {
    fn default() -> Self {
        KeyspaceCounts::new()
    }
}

impl Storage {
    /// What `batch` changes in the keyspace counts: for each metadata record it writes, its
    /// state before (recorded by an earlier write, or read from the engine; from memory only
    /// if `memory_only`, failing with `WouldBlock` where that is not enough) against its final
    /// state in the batch. With `record`, for a batch about to be written, the final states
    /// are recorded for the next write (see `meta_states.rs`: if the write then fails or is
    /// refused, the caller clears them). States in `known` are taken as the states before.
    pub(super) fn count_changes(
        &self,
        batch: &lsm::WriteBatch,
        memory_only: bool,
        record: bool,
        known: Option<&Befores>,
    ) -> lsm::Result<Vec<(u16, Delta)>> {
        use lsm::key::ValueKind;
        // Every metadata write in batch order (a range delete of whole databases drops those
        // before it), then only the last write of each key: sorted, with no SipHash and no map
        // growth per batch (a batch is mostly a pipeline's worth of writes).
        let mut finals: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        let mut cleared: Vec<(u16, u16)> = Vec::new();
        for entry in batch.iter() {
            let entry = entry?;
            match entry.kind {
                ValueKind::Put | ValueKind::Delete if entry.key.len() >= 3 && entry.key[0] == b'M' => {
                    finals.push((entry.key, (entry.kind == ValueKind::Put).then_some(entry.value)));
                }
                ValueKind::RangeDelete => {
                    let (start, end) = (entry.key, entry.value);
                    let Some(databases) = cleared_databases(start, end) else { continue };
                    finals.retain(|(k, _)| !(*k >= start && *k < end));
                    cleared.push(databases);
                }
                _ => {}
            }
        }
        if finals.is_empty() && cleared.is_empty() {
            return Ok(Vec::new());
        }
        if finals.len() > 1 {
            // Stable: a key's writes stay in batch order, and the last of each run is kept.
            finals.sort_by(|a, b| a.0.cmp(b.0));
            finals.dedup_by(|later, earlier| {
                if later.0 == earlier.0 {
                    earlier.1 = later.1;
                    true
                } else {
                    false
                }
            });
        }
        let is_cleared = |pdb: u16| cleared.iter().any(|&(a, b)| pdb >= a && pdb <= b);
        // Sorted by database: almost always one, all 65536 after a FLUSHALL.
        let mut deltas: Vec<(u16, Delta)> = Vec::new();
        fn delta_of(deltas: &mut Vec<(u16, Delta)>, pdb: u16) -> &mut Delta {
            let i = match deltas.binary_search_by_key(&pdb, |(p, _)| *p) {
                Ok(i) => i,
                Err(i) => {
                    deltas.insert(i, (pdb, Delta::default()));
                    i
                }
            };
            &mut deltas[i].1
        }
        for &(a, b) in &cleared {
            for pdb in a..=b {
                delta_of(&mut deltas, pdb).cleared = true;
            }
        }
        let damaged = || lsm::Error::InvalidArgument("damaged metadata record".into());
        let failures = self.engine.failed_write_groups();
        let mut written = Vec::with_capacity(if record { finals.len() } else { 0 });
        // The fingerprints first, with their slots' loads started, then the lookups there, then
        // the engine's loads started for the keys they do not know, then those reads: a
        // pipeline's batch waits on memory once a stage, not once per key.
        let finals: Vec<_> = finals
            .into_iter()
            .map(|(key, after)| {
                let fingerprint = meta_states::Fingerprint::of(key);
                self.meta_states.prefetch(fingerprint);
                (key, after, fingerprint)
            })
            .collect();
        let knowns: Vec<Option<meta_states::State>> = finals
            .iter()
            .map(|&(key, _, fingerprint)| {
                let pdb = u16::from_be_bytes([key[1], key[2]]);
                if is_cleared(pdb) {
                    Some(None)
                } else if let Some(state) = known.and_then(|k| k.get(fingerprint)) {
                    Some(state)
                } else {
                    self.meta_states.get(fingerprint, failures)
                }
            })
            .collect();
        let unknown: Vec<&[u8]> =
            finals.iter().zip(&knowns).filter(|(_, k)| k.is_none()).map(|((key, ..), _)| *key).collect();
        if unknown.len() > 1 {
            self.engine.prefetch_gets(&unknown);
        }
        for ((key, after, fingerprint), known) in finals.into_iter().zip(knowns) {
            let pdb = u16::from_be_bytes([key[1], key[2]]);
            let before = match known {
                Some(state) => state,
                None => self.read_state(key, memory_only)?,
            };
            let after = match after {
                Some(raw) => Some(Meta::expiry_of(raw).ok_or_else(damaged)?),
                None => None,
            };
            delta_of(&mut deltas, pdb).record(before, after);
            if record {
                written.push((fingerprint, after));
            }
        }
        if record {
            if !cleared.is_empty() {
                self.meta_states.clear();
            }
            for (fingerprint, after) in written {
                self.meta_states.record(fingerprint, after, failures);
            }
        }
        Ok(deltas)
    }

    /// The state (absent, or its `expire_at_ms`) of the metadata record `key` (whose
    /// fingerprint is `fingerprint`) before the write being counted: recorded by an earlier
    /// write while the engine had seen `failures` failed write groups, or read from the engine
    /// (from memory only if `memory_only`, failing with `WouldBlock` where that is not enough).
    pub(super) fn state_before(
        &self,
        key: &[u8],
        fingerprint: meta_states::Fingerprint,
        failures: u64,
        memory_only: bool,
    ) -> lsm::Result<Option<u64>> {
        match self.meta_states.get(fingerprint, failures) {
            Some(known) => Ok(known),
            None => self.read_state(key, memory_only),
        }
    }

    /// The state of the metadata record `key` in the engine (see [`Storage::state_before`]).
    fn read_state(&self, key: &[u8], memory_only: bool) -> lsm::Result<Option<u64>> {
        // The key is about to be written: its row would never answer again (see
        // `lsm::ReadOptions::fill_row_cache`).
        let read = lsm::ReadOptions::new().cache_only(memory_only).fill_row_cache(false);
        match self.engine.get_with(key, &read)? {
            Some(raw) => Ok(Some(
                Meta::expiry_of(&raw).ok_or_else(|| lsm::Error::InvalidArgument("damaged metadata record".into()))?,
            )),
            None => Ok(None),
        }
    }
}

/// The physical databases (first, last) whose metadata a range delete `[start, end)` wipes;
/// None if it misses the metadata key space. The server range-deletes whole databases only
/// (FLUSHDB: `[M|pdb, M|pdb+1)`, FLUSHALL: `[M, N)`).
fn cleared_databases(start: &[u8], end: &[u8]) -> Option<(u16, u16)> {
    if end <= &b"M"[..] || start >= &b"N"[..] {
        return None;
    }
    let pdb = |k: &[u8]| u16::from_be_bytes([k[1], k[2]]);
    let first = if start.len() >= 3 && start[0] == b'M' { pdb(start) } else { 0 };
    let last = if end >= &b"N"[..] || end.len() < 3 {
        u16::MAX
    } else if end.len() == 3 {
        pdb(end).checked_sub(1)?
    } else {
        pdb(end)
    };
    Some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_apply_and_the_record_round_trips_across_a_new_base() {
        let counts = KeyspaceCounts::new();
        let now = super::super::now_ms();
        let mut d = Delta::default();
        let (plain, ttl) = (0, now + 10_000);
        d.record(None, Some(plain));
        d.record(None, Some(ttl));
        d.record(Some(plain), Some(plain)); // an overwrite changes nothing
        counts.apply(7, &d);
        let got = counts.get(7, now);
        assert_eq!((got.keys, got.expires), (2, 1));
        assert!((9_000..=10_000).contains(&got.avg_ttl_ms), "{got:?}");
        let mut del = Delta::default();
        del.record(Some(ttl), None);
        counts.apply(7, &del);
        assert_eq!(counts.get(7, now), Snapshot { keys: 1, expires: 0, avg_ttl_ms: 0 });
        counts.apply(7, &d);
        let back = KeyspaceCounts::decode(&counts.encode()).unwrap();
        assert_eq!(back.get(7, now).keys, 3);
        assert_eq!(back.get(7, now).expires, 1);
        assert!((9_000..=10_000).contains(&back.get(7, now).avg_ttl_ms));
        counts.apply(7, &Delta { cleared: true, ..Delta::default() });
        assert_eq!(counts.get(7, now).keys, 0);
        assert!(KeyspaceCounts::decode(b"short").is_none());
    }
}
