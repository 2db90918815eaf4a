//! The memtable's point index: the newest skip-list node of each user key, found by hash.
//!
//! A point lookup in the skip list descends about `log2(n)` levels, a cache miss each: with a
//! few hundred thousand entries that is about a microsecond, the largest single cost of a
//! read-modify-write on a hot collection (measured: SADD of one set, pipelined, spent a fifth
//! of the server's CPU in the descent). The index finds a key's newest node — which holds the
//! key's latest versions, newest first — with one or two cache misses, for lookups and for the
//! writer, which puts a new version of a key the memtable holds on that node's chain without a
//! descent:
//!
//! ```text
//! slots: [AtomicUsize; n]   (n: a quarter more than the keys the memtable is expected to hold)
//! slot of key = first slot, from (hash(user key) >> 32) * n >> 32 on (linear probing, at most
//!               MAX_PROBES, past the last slot on from the first),
//!               that is empty or points at a node of that user key
//! slot value  = 0 (empty) | node address | tag << 48 | 1  (tagged)  |  node address (untagged)
//! ```
//!
//! A slot carries 16 bits of its key's hash (bits 16–31, which the slot's position does not
//! use) beside the pointer, so a probe passes over another key's slot without reading that
//! key's node: with the table half full an insert or lookup visits about two slots, and
//! without the tag each of them was a cache miss into a skip-list node (measured: a third of
//! the time of a batch of 200K inserts went into those reads). A node's address is 8-aligned,
//! so bit 0 marks a tagged slot; a pointer that does not fit in 48 bits (only on a machine
//! that maps user memory that high) is stored untagged and always read.
//!
//! A slot points at a node of the memtable's skip list. Nodes are never removed while the
//! memtable lives (see [`super::skiplist`]), so the pointer stays valid as long as the
//! index does. The writer makes a node in the list first and then points the key's slot at
//! it (a newer node of the key replaces an older one; slots are never emptied), all before the
//! write's sequence number is published; a reader that loaded the published sequence number
//! therefore finds every visible key's slot filled. The writer asks the index, under the list's
//! writer lock, before each insert. What a probe can tell:
//! - the slot's node is the key's newest: its first version answers a lookup at the latest
//!   sequence number; an older snapshot may need an older version, found in the list;
//! - an empty slot comes first: no version of the key is in the memtable (a node, once
//!   made, fills a slot on the key's probe path that never empties again);
//! - [`MAX_PROBES`] slots hold other keys: the key may have found no slot (the table was that
//!   full around its hash), and the lookup descends the list.
//!
//! Memory: 8 bytes per slot: an eighth of the write buffer in a memtable sized for the smallest
//! entries (the first), ~4.8 MB at 64 MiB in one sized after entries of 16-byte keys and
//! 100-byte values (~144 bytes each).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::skiplist::Node;
use crate::key;
use crate::pages::Pages;

/// Slots a probe visits before it gives up (the key then lives in the list alone).
const MAX_PROBES: usize = 32;

/// Write-buffer bytes per slot in a memtable with no predecessor to size it after: about what
/// an entry of a short key and a short value takes. Smaller entries can fill the index; keys
/// that find no slot are looked up in the list, which costs speed, not answers.
const BYTES_PER_SLOT: usize = 64;

/// What the index knows about a user key (see the module docs).
pub(super) enum Probe {
    /// The key's newest node in the memtable's list (holding its latest versions).
    Found(Node),
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

/// A slot's value for the node at address `p` of a key with hash tag `tag`.
fn encode(p: usize, tag: usize) -> usize {
    if p & !POINTER_BITS == 0 && p & TAGGED == 0 {
        p | (tag << 48) | TAGGED
    } else {
        p
    }
}

/// The address of the node a non-empty slot value points at.
fn decode(slot: usize) -> usize {
    if slot & TAGGED != 0 {
        slot & POINTER_BITS & !TAGGED
    } else {
        slot
    }
}

/// Whether a non-empty slot value may belong to a key with hash tag `tag` (false: it
/// certainly does not, no need to read its node).
fn may_match(slot: usize, tag: usize) -> bool {
    slot & TAGGED == 0 || slot >> 48 == tag
}

/// The newest version of each user key (see the module docs).
pub(super) struct PointIndex {
    slots: Pages<AtomicUsize>,
}

impl std::fmt::Debug for PointIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointIndex").field("slots", &self.slots.len()).finish()
    }
}

impl PointIndex {
    /// An index of `n` slots (see [`PointIndex::slots_for`]; fewer than 2^32).
    pub(super) fn with_slots(n: usize) -> PointIndex {
        assert!(n > 0 && n < 1 << 32, "{n} slots");
        PointIndex { slots: Pages::zeroed(n, false) }
    }

    /// Slots for a memtable of `capacity` bytes of the smallest entries.
    pub(super) fn slots_for(capacity: usize) -> usize {
        Self::slots_for_keys(capacity / BYTES_PER_SLOT)
    }

    /// Slots for `keys` user keys: as many, in whole cache lines (callers ask for a quarter
    /// more keys than they expect, so the index is at most 80 % full when they all arrive).
    /// Any count works: a probe starts at a slot chosen by multiplying, not masking, so the
    /// index need not be a power of two, which would have made it up to twice that.
    pub(super) fn slots_for_keys(keys: usize) -> usize {
        keys.next_multiple_of(8).clamp(1024, (1 << 32) - 8)
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

    /// The node the first slot a probe of `hash` reads points at, if that slot may be the
    /// key's (by its tag): for a prefetch, which reads the node only once its slot is loaded.
    #[inline]
    pub(super) fn first_node(&self, hash: u64) -> Option<Node> {
        let slot = self.slots[self.first_slot(hash)].load(Ordering::Acquire);
        // SAFETY: as in `note`: a non-empty slot points at a node of the memtable's list.
        (slot != 0 && may_match(slot, tag_of(hash))).then(|| unsafe { Node::from_addr(decode(slot)) })
    }

    /// Slot `i` of a probe that runs past the end continues from the start.
    #[inline]
    fn wrap(&self, i: usize) -> usize {
        if i >= self.slots.len() {
            i - self.slots.len()
        } else {
            i
        }
    }

    fn first_slot(&self, hash: u64) -> usize {
        // The bloom filter takes the low half of the hash for its line: mix in the high half.
        // The high half of the hash, scaled to the slot count (the bloom filter picks its line
        // with the low half, the tag is bits 16-31).
        (((hash >> 32) * self.slots.len() as u64) >> 32) as usize
    }

    /// Makes `record` (a node just made in the skip list for `user_key`, whose hash is `hash`)
    /// its key's newest node unless a newer one is already recorded (a node holds a run of its
    /// key's versions; a newer run starts a newer node). The node must live as long as the
    /// index: it is a node of the memtable's list.
    pub(super) fn note(&self, hash: u64, user_key: &[u8], record: Node) {
        let tag = tag_of(hash);
        let new = encode(record.addr(), tag);
        let seq = seq_of(record);
        let start = self.first_slot(hash);
        for i in 0..MAX_PROBES {
            let slot = &self.slots[self.wrap(start + i)];
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
                let held = unsafe { Node::from_addr(decode(current)) };
                if held.user_key() != user_key {
                    break; // another key's slot: probe on
                }
                if seq_of(held) >= seq {
                    return; // as new or newer already
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
    pub(super) fn probe(&self, hash: u64, user_key: &[u8]) -> Probe {
        let tag = tag_of(hash);
        let start = self.first_slot(hash);
        for i in 0..MAX_PROBES {
            let slot = self.slots[self.wrap(start + i)].load(Ordering::Acquire);
            if slot == 0 {
                return Probe::Absent;
            }
            if !may_match(slot, tag) {
                continue;
            }
            // SAFETY: as in `note`.
            let record = unsafe { Node::from_addr(decode(slot)) };
            if record.user_key() == user_key {
                return Probe::Found(record);
            }
        }
        Probe::Unknown
    }
}

/// The sequence number of a node's key (its oldest version's).
fn seq_of(node: Node) -> u64 {
    key::trailer(node.key()) >> 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_keeps_its_pointer_and_tag_or_stays_untagged() {
        let low = 0x7f12_3456_7890usize;
        let slot = encode(low, 0xbeef);
        assert_eq!(decode(slot), low);
        assert!(may_match(slot, 0xbeef));
        assert!(!may_match(slot, 0xbeee), "another tag is passed over");
        assert_eq!(decode(encode(low, 0)), low, "tag 0 is a tag like any other");
        assert!(!may_match(encode(low, 0), 1));
        // A pointer above 48 bits is stored as it is and always read.
        let high = 0x1_0000_0000_0008usize;
        let slot = encode(high, 0xbeef);
        assert_eq!((slot, decode(slot)), (high, high));
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
