//! The memtable's point index: the newest version of each user key, found by hash.
//!
//! A point lookup in the skip list descends about `log2(n)` levels, a cache miss each: with a
//! few hundred thousand entries that is about a microsecond, the largest single cost of a
//! read-modify-write on a hot collection (measured: SADD of one set, pipelined, spent a fifth
//! of the server's CPU in the descent). The index answers the common lookup — the newest
//! version of a key, read at the latest sequence number — with one or two cache misses:
//!
//! ```text
//! slots: [AtomicUsize; 2^k]   (k: about one slot per 64 bytes of write buffer)
//! slot of key = first slot, from hash(user key) on (linear probing, at most MAX_PROBES),
//!               that is empty or points at a record of that user key
//! slot value  = 0 (empty) | record pointer | tag << 48 | 1  (tagged)  |  record pointer (untagged)
//! ```
//!
//! A slot carries 16 bits of its key's hash (bits 16–31, which the slot's position does not
//! use) beside the pointer, so a probe passes over another key's slot without reading that
//! key's record: with the table half full an insert or lookup visits about two slots, and
//! without the tag each of them was a cache miss into a skip-list node (measured: a third of
//! the time of a batch of 200K inserts went into those reads). A record pointer is 8-aligned,
//! so bit 0 marks a tagged slot; a pointer that does not fit in 48 bits (only on a machine
//! that maps user memory that high) is stored untagged and always read.
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

use std::sync::atomic::{AtomicUsize, Ordering};

use super::Record;
use crate::key;
use crate::pages::Pages;

/// Slots a probe visits before it gives up (the key then lives in the list alone).
const MAX_PROBES: usize = 32;

/// Write-buffer bytes per slot: an entry takes at least 72 bytes of node, so the table stays
/// under about 90 % full.
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

/// Bit 0 of a slot: the slot is tagged (its top 16 bits are a hash tag, see the module docs).
const TAGGED: usize = 1;
/// Where a tagged slot keeps its pointer.
const POINTER_BITS: usize = (1 << 48) - 1;

/// The tag of a key's hash: bits the slot position does not use.
fn tag_of(hash: u64) -> usize {
    ((hash >> 16) & 0xffff) as usize
}

/// A slot's value for `record` of a key with hash tag `tag`.
fn encode(record: *const Record, tag: usize) -> usize {
    let p = record as usize;
    if p & !POINTER_BITS == 0 && p & TAGGED == 0 {
        p | (tag << 48) | TAGGED
    } else {
        p
    }
}

/// The record a non-empty slot value points at.
fn decode(slot: usize) -> *const Record {
    if slot & TAGGED != 0 {
        (slot & POINTER_BITS & !TAGGED) as *const Record
    } else {
        slot as *const Record
    }
}

/// Whether a non-empty slot value may belong to a key with hash tag `tag` (false: it
/// certainly does not, no need to read its record).
fn may_match(slot: usize, tag: usize) -> bool {
    slot & TAGGED == 0 || slot >> 48 == tag
}

/// The newest version of each user key (see the module docs).
pub(super) struct PointIndex {
    slots: Pages<AtomicUsize>,
    mask: usize,
}

impl std::fmt::Debug for PointIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointIndex").field("slots", &self.slots.len()).finish()
    }
}

impl PointIndex {
    /// An index of `n` slots (a power of two, see [`PointIndex::slots_for`]).
    pub(super) fn with_slots(n: usize) -> PointIndex {
        assert!(n.is_power_of_two(), "{n} slots");
        PointIndex { slots: Pages::zeroed(n, false), mask: n - 1 }
    }

    /// Slots for a memtable of `capacity` bytes of the smallest entries.
    pub(super) fn slots_for(capacity: usize) -> usize {
        Self::slots_for_keys(capacity / BYTES_PER_SLOT)
    }

    /// Slots for `keys` user keys: the next power of two, so the index is between half full
    /// and full when they all arrive (callers ask for a quarter more keys than they expect).
    pub(super) fn slots_for_keys(keys: usize) -> usize {
        keys.next_power_of_two().max(1024)
    }

    /// Bytes the slots of an index for a memtable of `capacity` bytes take.
    pub(super) fn memory_for(capacity: usize) -> usize {
        Self::slots_for(capacity) * std::mem::size_of::<AtomicUsize>()
    }

    /// Bytes the slots take.
    pub(super) fn memory(&self) -> usize {
        self.slots.len() * std::mem::size_of::<AtomicUsize>()
    }

    /// Makes the slots' pages resident now: [`PointIndex::note`] reads a slot before it writes
    /// it (see [`crate::pages::Pages::populate`]).
    pub(super) fn populate(&self) -> bool {
        self.slots.populate()
    }

    /// Starts loading the first slot a probe of `hash` reads into the CPU's cache.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        crate::prefetch(self.slots[self.first_slot(hash)].as_ptr());
    }

    fn first_slot(&self, hash: u64) -> usize {
        // The bloom filter takes the low half of the hash for its line: mix in the high half.
        ((hash >> 32) ^ hash.rotate_left(7)) as usize & self.mask
    }

    /// Makes `record` (just inserted into the skip list, whose user key is `user_key` and hash
    /// `hash`) its key's newest version unless a newer one is already recorded. The record
    /// must live as long as the index: it is a node of the memtable's list.
    pub(super) fn note(&self, hash: u64, user_key: &[u8], record: &Record) {
        let tag = tag_of(hash);
        let new = encode(std::ptr::from_ref(record), tag);
        let seq = record.seq();
        let start = self.first_slot(hash);
        for i in 0..MAX_PROBES {
            let slot = &self.slots[(start + i) & self.mask];
            let mut current = slot.load(Ordering::Acquire);
            loop {
                if current == 0 {
                    match slot.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => return,
                        Err(now) => {
                            current = now;
                            continue;
                        }
                    }
                }
                if !may_match(current, tag) {
                    break; // another key's slot: probe on
                }
                // SAFETY: a non-empty slot points at a node of the memtable's list, which
                // outlives the index (see the module docs).
                let held = unsafe { &*decode(current) };
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
        let tag = tag_of(hash);
        let start = self.first_slot(hash);
        for i in 0..MAX_PROBES {
            let slot = self.slots[(start + i) & self.mask].load(Ordering::Acquire);
            if slot == 0 {
                return Probe::Absent;
            }
            if !may_match(slot, tag) {
                continue;
            }
            // SAFETY: as in `note`.
            let record = unsafe { &*decode(slot) };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_keeps_its_pointer_and_tag_or_stays_untagged() {
        let low = 0x7f12_3456_7890usize as *const Record;
        let slot = encode(low, 0xbeef);
        assert_eq!(decode(slot), low);
        assert!(may_match(slot, 0xbeef));
        assert!(!may_match(slot, 0xbeee), "another tag is passed over");
        assert_eq!(decode(encode(low, 0)), low, "tag 0 is a tag like any other");
        assert!(!may_match(encode(low, 0), 1));
        // A pointer above 48 bits is stored as it is and always read.
        let high = 0x1_0000_0000_0008usize as *const Record;
        let slot = encode(high, 0xbeef);
        assert_eq!((slot, decode(slot)), (high as usize, high));
        assert!(may_match(slot, 0) && may_match(slot, 0xbeef));
    }

    #[test]
    fn the_tag_uses_hash_bits_the_slot_position_does_not() {
        let index = PointIndex::with_slots(PointIndex::slots_for(64 << 20));
        let hash = 0x0123_4567_89ab_cdefu64;
        let other = hash ^ 0xffff_0000; // only bits 16–31 differ
        assert_eq!(index.first_slot(hash), index.first_slot(other));
        assert_ne!(tag_of(hash), tag_of(other));
    }
}
