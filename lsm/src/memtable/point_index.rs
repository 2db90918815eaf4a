//! The memtable's point index: the newest version of each user key, found by hash.
//!
//! A point lookup in the skip list descends about `log2(n)` levels, a cache miss each: with a
//! few hundred thousand entries that is about a microsecond, the largest single cost of a
//! read-modify-write on a hot collection (measured: SADD of one set, pipelined, spent a fifth
//! of the server's CPU in the descent). The index answers the common lookup — the newest
//! version of a key, read at the latest sequence number — with one or two cache misses:
//!
//! ```text
//! slots: [AtomicPtr<Record>; 2^k]   (k: about one slot per 64 bytes of write buffer)
//! slot of key = first slot, from hash(user key) on (linear probing, at most MAX_PROBES),
//!               that is empty or points at a record of that user key
//! ```
//!
//! A slot points at a record inside a skip-list node. Nodes are never removed while the
//! memtable lives (see [`super::no_removals`]), so the pointer stays valid as long as the
//! index does. The writer inserts the record into the list first and then points the key's
//! slot at it (a newer version replaces an older one; slots are never emptied), all before the
//! write's sequence number is published; a reader that loaded the published sequence number
//! therefore finds every visible version's slot filled. What a probe can tell:
//! - the slot's record is the key's newest version: if a lookup's sequence number is at or past
//!   it, that is the answer; otherwise the lookup needs an older version and descends the list;
//! - an empty slot comes first: no version of the key is in the memtable (a version, once
//!   inserted, fills a slot on the key's probe path that never empties again);
//! - [`MAX_PROBES`] slots hold other keys: the key may have found no slot (the table was that
//!   full around its hash), and the lookup descends the list.
//!
//! Memory: 8 bytes per slot, about an eighth of the write buffer (2 MiB for 16 MiB).

use std::sync::atomic::{AtomicPtr, Ordering};

use super::Record;
use crate::key;

/// Slots a probe visits before it gives up (the key then lives in the list alone).
const MAX_PROBES: usize = 32;

/// Write-buffer bytes per slot: an entry takes at least 80 bytes of node, so the table stays
/// under about 80 % full.
const BYTES_PER_SLOT: usize = 64;

/// What the index knows about a user key (see the module docs).
pub(super) enum Probe<'a> {
    /// The key's newest version in the memtable.
    Newest(&'a Record),
    /// No version of the key is in the memtable.
    Absent,
    /// The index cannot tell: ask the list.
    Unknown,
}

/// The newest version of each user key (see the module docs).
pub(super) struct PointIndex {
    slots: Box<[AtomicPtr<Record>]>,
    mask: usize,
}

impl std::fmt::Debug for PointIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointIndex").field("slots", &self.slots.len()).finish()
    }
}

impl PointIndex {
    /// An index sized for a memtable of `capacity` bytes.
    pub(super) fn new(capacity: usize) -> PointIndex {
        let n = Self::slots_for(capacity);
        PointIndex { slots: (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(), mask: n - 1 }
    }

    fn slots_for(capacity: usize) -> usize {
        (capacity / BYTES_PER_SLOT).next_power_of_two().max(1024)
    }

    /// Bytes the slots of an index for a memtable of `capacity` bytes take.
    pub(super) fn memory_for(capacity: usize) -> usize {
        Self::slots_for(capacity) * std::mem::size_of::<AtomicPtr<Record>>()
    }

    /// Bytes the slots take.
    pub(super) fn memory(&self) -> usize {
        self.slots.len() * std::mem::size_of::<AtomicPtr<Record>>()
    }

    fn first_slot(&self, hash: u64) -> usize {
        // The bloom filter takes the low half of the hash for its line: mix in the high half.
        ((hash >> 32) ^ hash.rotate_left(7)) as usize & self.mask
    }

    /// Makes `record` (just inserted into the skip list, whose user key is `user_key` and hash
    /// `hash`) its key's newest version unless a newer one is already recorded. The record
    /// must live as long as the index: it is a node of the memtable's list.
    pub(super) fn note(&self, hash: u64, user_key: &[u8], record: &Record) {
        let new = std::ptr::from_ref(record).cast_mut();
        let seq = record.seq();
        let start = self.first_slot(hash);
        for i in 0..MAX_PROBES {
            let slot = &self.slots[(start + i) & self.mask];
            let mut current = slot.load(Ordering::Acquire);
            loop {
                if current.is_null() {
                    match slot.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => return,
                        Err(now) => {
                            current = now;
                            continue;
                        }
                    }
                }
                // SAFETY: a non-null slot points at a node of the memtable's list, which
                // outlives the index (see the module docs).
                let held = unsafe { &*current };
                if held.user_key() != user_key {
                    break; // another key's slot: probe on
                }
                if held.seq() >= seq {
                    return; // as new or newer already (the same write applied twice)
                }
                match slot.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return,
                    Err(now) => current = now,
                }
            }
        }
        // No slot near the hash: lookups of this key find MAX_PROBES other keys and ask the list.
    }

    /// What the index knows about `user_key` (hash `hash`).
    pub(super) fn probe(&self, hash: u64, user_key: &[u8]) -> Probe<'_> {
        let start = self.first_slot(hash);
        for i in 0..MAX_PROBES {
            let p = self.slots[(start + i) & self.mask].load(Ordering::Acquire);
            if p.is_null() {
                return Probe::Absent;
            }
            // SAFETY: as in `note`.
            let record = unsafe { &*p };
            if record.user_key() == user_key {
                return Probe::Newest(record);
            }
        }
        Probe::Unknown
    }
}

impl Record {
    fn user_key(&self) -> &[u8] {
        key::user_key(self.key.as_bytes())
    }

    fn seq(&self) -> u64 {
        key::parse(self.key.as_bytes()).map_or(0, |p| p.seq)
    }
}
