//! A cache bounded by a total charge (bytes for blocks, 1 per table), evicting by CLOCK: a hit
//! only sets the entry's reference bit, and eviction sweeps the entries in insertion order,
//! giving referenced ones a second chance. That approximates LRU with O(1) work per hit (no
//! reordering under the lock), which matters on the read path where every lookup is a hit.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use hashbrown::HashTable;

/// FxHash-style hashing for the integer keys caches use (file numbers, block offsets): a
/// multiply and a rotate per word instead of SipHash's rounds.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

fn hash_of<K: Hash>(k: &K) -> u64 {
    let mut h = FastHasher::default();
    k.hash(&mut h);
    h.finish()
}

/// A CLOCK-evicting map. `get` marks an entry used; `insert` evicts until the new one fits.
///
/// Entries live in a dense slot array (freed slots are reused) and the hash table holds only
/// their 4-byte slot numbers. A hash table that keeps the entries in its buckets costs far
/// more than the entries under a cache's churn: every eviction leaves a deleted bucket, and
/// hashbrown, finding its free buckets used up while more than half its capacity is live,
/// doubles instead of cleaning up, so a shard's table settles at 2.3-4.6 buckets per entry
/// (measured: the row cache's sixteen tables of 88-byte buckets took 23 MB for 13 MB of
/// charged rows). Here that factor multiplies 5 bytes (the slot number and hashbrown's
/// control byte); the tests measure what the structure takes.
#[derive(Debug)]
pub struct Lru<K, V> {
    /// Slot numbers, found by the hash of the slot's key.
    index: HashTable<u32>,
    slots: Vec<Option<Slot<K, V>>>,
    /// Slots free for reuse.
    free: Vec<u32>,
    /// The clock: slots in insertion order with the generation their entry was inserted at
    /// (an entry removed or replaced since leaves a stale position, skipped when the hand
    /// reaches it).
    ring: VecDeque<(u32, u64)>,
    generation: u64,
    usage: usize,
    capacity: usize,
}

#[derive(Debug)]
struct Slot<K, V> {
    key: K,
    value: V,
    generation: u64,
    charge: usize,
    referenced: bool,
}

impl<K: Hash + Eq, V: Clone> Lru<K, V> {
    /// An empty map holding at most `capacity` charge.
    pub fn new(capacity: usize) -> Self {
        Lru {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            ring: VecDeque::new(),
            generation: 0,
            usage: 0,
            capacity,
        }
    }

    /// The slot holding `k`.
    fn find(&self, k: &K) -> Option<usize> {
        let slots = &self.slots;
        let found = self.index.find(hash_of(k), |&i| slots[i as usize].as_ref().is_some_and(|s| s.key == *k));
        found.map(|&i| i as usize)
    }

    /// The value for `k`, marking it recently used.
    pub fn get(&mut self, k: &K) -> Option<V> {
        self.get_with(k, V::clone)
    }

    /// What `f` makes of the value for `k` (without cloning it), marking it recently used.
    pub fn get_with<R>(&mut self, k: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let i = self.find(k)?;
        let slot = self.slots[i].as_mut()?;
        // Written only when it changes: hits on a hot entry leave its cache line clean.
        if !slot.referenced {
            slot.referenced = true;
        }
        Some(f(&slot.value))
    }

    /// Changes the capacity, evicting (in the usual order) down to it.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict_for(0, &mut |_| false);
        self.compact_if_sparse();
    }

    /// Evicts until `charge` more fits (or nothing is left). An entry is spared once (its
    /// second chance) if it was marked used by `get` or `used` says so.
    fn evict_for(&mut self, charge: usize, used: &mut dyn FnMut(&V) -> bool) {
        while self.usage + charge > self.capacity {
            let Some((i, generation)) = self.ring.pop_front() else { break };
            let Some(slot) = self.slots[i as usize].as_mut().filter(|s| s.generation == generation) else {
                continue;
            };
            if slot.referenced | used(&slot.value) {
                slot.referenced = false;
                self.ring.push_back((i, generation));
            } else {
                self.remove_slot(i as usize);
            }
        }
    }

    /// Inserts (or replaces) `k`; entries bigger than the whole capacity are not kept.
    pub fn insert(&mut self, k: K, v: V, charge: usize) {
        self.insert_sparing(k, v, charge, |_| false)
    }

    /// [`Lru::insert`], where an entry the clock reaches is also spared once if `used` says
    /// it was used since (marks kept outside the map, see `TableCache`).
    pub fn insert_sparing(&mut self, k: K, v: V, charge: usize, mut used: impl FnMut(&V) -> bool) {
        self.remove(&k);
        if charge > self.capacity {
            return;
        }
        self.evict_for(charge, &mut used);
        self.generation += 1;
        let slot = Slot { key: k, value: v, generation: self.generation, charge, referenced: false };
        let hash = hash_of(&slot.key);
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                let Ok(i) = u32::try_from(self.slots.len()) else { return };
                self.slots.push(Some(slot));
                i
            }
        };
        let slots = &self.slots;
        self.index.insert_unique(hash, i, |&j| slots[j as usize].as_ref().map_or(0, |s| hash_of(&s.key)));
        self.ring.push_back((i, self.generation));
        self.usage += charge;
        // Stale positions are dropped lazily; keep the ring from growing without bound.
        if self.ring.len() > 2 * self.index.len() + 64 {
            let slots = &self.slots;
            self.ring.retain(|&(i, g)| slots[i as usize].as_ref().is_some_and(|s| s.generation == g));
        }
    }

    /// Empties slot `i` (which holds an entry): out of the index, onto the free list.
    fn remove_slot(&mut self, i: usize) -> Option<V> {
        let slot = self.slots[i].take()?;
        if let Ok(entry) = self.index.find_entry(hash_of(&slot.key), |&j| j as usize == i) {
            entry.remove();
        }
        self.free.push(i as u32);
        self.usage -= slot.charge;
        Some(slot.value)
    }

    /// Removes `k`.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.find(k)?;
        self.remove_slot(i)
    }

    /// Removes every entry whose key fails `keep` (the ring forgets them lazily).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let doomed: Vec<usize> = (self.slots.iter().enumerate())
            .filter_map(|(i, s)| s.as_ref().filter(|s| !keep(&s.key)).map(|_| i))
            .collect();
        for i in doomed {
            self.remove_slot(i);
        }
        self.compact_if_sparse();
    }

    /// Renumbers the entries into a slot array of their size once at most half the slots
    /// are live (after a table's entries went, or a smaller capacity), so the structure
    /// shrinks with the entries instead of keeping its largest size.
    fn compact_if_sparse(&mut self) {
        let live = self.index.len();
        if self.slots.len() <= 64 || live * 2 > self.slots.len() {
            return;
        }
        let mut renumbered = vec![u32::MAX; self.slots.len()];
        let mut slots = Vec::with_capacity(live + live / 4);
        for (i, slot) in self.slots.drain(..).enumerate() {
            if let Some(slot) = slot {
                renumbered[i] = slots.len() as u32;
                slots.push(Some(slot));
            }
        }
        self.slots = slots;
        self.free = Vec::new();
        self.ring.retain_mut(|(i, _)| {
            *i = renumbered[*i as usize];
            *i != u32::MAX
        });
        self.ring.shrink_to_fit();
        let slots = &self.slots;
        let rehash = |&j: &u32| slots[j as usize].as_ref().map_or(0, |s| hash_of(&s.key));
        let mut index = HashTable::with_capacity(live);
        for i in 0..slots.len() as u32 {
            index.insert_unique(rehash(&i), i, rehash);
        }
        self.index = index;
    }

    /// Total charge held.
    pub fn usage(&self) -> usize {
        self.usage
    }

    /// Bytes the structure itself takes (slots, hash table, clock and free list, by their
    /// capacities), besides what the values point to.
    #[cfg(test)]
    fn memory(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<Slot<K, V>>>()
            // A bucket per 7/8 of capacity: the slot number and a control byte.
            + self.index.capacity() * 8 / 7 * (std::mem::size_of::<u32>() + 1)
            + self.ring.capacity() * std::mem::size_of::<(u32, u64)>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().flatten().map(|s| (&s.key, &s.value))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_unreferenced_entries_first_by_charge() {
        let mut l = Lru::new(10);
        l.insert("a", 1, 4);
        l.insert("b", 2, 4);
        assert_eq!(l.get(&"a"), Some(1)); // a is referenced, b is not
        l.insert("c", 3, 4); // the hand passes a (second chance) and evicts b
        assert_eq!(l.get(&"b"), None);
        assert_eq!(l.get(&"a"), Some(1));
        assert_eq!(l.get(&"c"), Some(3));
        assert_eq!(l.usage(), 8);
        l.insert("huge", 9, 11);
        assert_eq!(l.get(&"huge"), None, "bigger than the capacity: not cached");
        l.insert("a", 5, 2);
        assert_eq!((l.get(&"a"), l.usage(), l.len()), (Some(5), 6, 2));
        assert_eq!(l.remove(&"c"), Some(3));
        assert_eq!(l.usage(), 2);
        l.insert("b", 7, 3);
        l.retain(|k| *k != "a");
        assert_eq!((l.get(&"a"), l.get(&"b"), l.usage(), l.len()), (None, Some(7), 3, 1));
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn a_scan_of_new_entries_does_not_push_out_a_hot_one_and_usage_stays_bounded() {
        let mut l = Lru::new(100);
        l.insert(0u32, 0u32, 10);
        for i in 1..1000u32 {
            assert_eq!(l.get(&0), Some(0), "the hot entry survives round {i}");
            l.insert(i, i, 10);
            assert!(l.usage() <= 100);
            if i > 3 {
                l.remove(&(i - 3));
            }
        }
        assert!(l.ring.len() <= 2 * l.len() + 64, "stale positions are cleaned up");
    }

    #[test]
    fn the_structure_stays_near_its_entries_under_churn_and_shrinks_after_a_bulk_removal() {
        // Entries of the row cache's shape: 16-byte keys, a 48-byte value.
        type Row = [u64; 6];
        let mut l: Lru<(u64, u64), Row> = Lru::new(4000);
        // A full cache of 4000 entries, then a million more through it: churn.
        for i in 0..1_000_000u64 {
            l.insert((i % 7, i), [i; 6], 1);
            if i % 3 == 0 {
                assert!(l.get(&(i % 7, i)).is_some());
            }
        }
        assert_eq!(l.len(), 4000);
        let per_entry = l.memory() / l.len();
        // The slot (88 bytes) plus the index, the clock and the free list.
        assert!(per_entry <= 160, "{per_entry} bytes an entry under churn");
        // A table's entries go (1 key in 7): nothing to shrink yet.
        l.retain(|k| k.0 != 3);
        let before = l.memory();
        // All but one table's: the structure follows.
        l.retain(|k| k.0 == 5);
        assert!(l.len() < 700 && l.memory() < before / 3, "{} bytes for {} entries", l.memory(), l.len());
        for (k, v) in l.iter() {
            assert_eq!(v[0], k.1);
        }
        // Every entry is still found, and the clock still evicts in order.
        let keys: Vec<_> = l.iter().map(|(k, _)| *k).collect();
        for k in &keys {
            assert_eq!(l.get(k).map(|v| v[0]), Some(k.1));
        }
        for i in 0..10_000u64 {
            l.insert((9, i), [i; 6], 1);
        }
        assert_eq!(l.len(), 4000);
        assert_eq!(l.usage(), 4000);
        assert!(keys.iter().all(|k| l.get(k).is_none()), "the old entries were evicted first");
    }

    #[test]
    fn shrinking_the_capacity_evicts_down_to_it() {
        let mut l = Lru::new(100);
        for i in 0..10 {
            l.insert(i, i, 10);
        }
        assert_eq!(l.get(&3), Some(3));
        l.set_capacity(35);
        assert!(l.usage() <= 35 && l.len() == 3, "{} bytes in {} entries", l.usage(), l.len());
        assert_eq!(l.get(&3), Some(3), "the referenced entry got its second chance");
        l.insert(20, 20, 10);
        assert!(l.usage() <= 35);
    }
}

#[cfg(test)]
mod model_tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32, usize),
        Get(u16),
        Remove(u16),
        /// Drops the keys whose low bits equal this (a table's entries).
        Retain(u16),
        SetCapacity(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..1024, any::<u32>(), 1usize..6).prop_map(|(k, v, c)| Op::Insert(k, v, c)),
            3 => (0u16..1024).prop_map(Op::Get),
            1 => (0u16..1024).prop_map(Op::Remove),
            1 => (0u16..4).prop_map(Op::Retain),
            1 => (0usize..3000).prop_map(Op::SetCapacity),
        ]
    }

    proptest! {
        /// Against a map of what was last inserted: the cache never answers with a value that
        /// is not the key's latest, a removed key is gone, usage is the sum of the charges of
        /// what it holds and stays within the capacity, and `iter`/`len` agree with `get`.
        #[test]
        fn the_cache_holds_a_subset_of_the_latest_values_within_its_capacity(ops in proptest::collection::vec(op(), 1..3000)) {
            // Small charges, so that a cache holds up to a thousand entries and a removal
            // of a table's or a smaller capacity leaves the slot array sparse (rebuilt).
            let mut lru: Lru<(u64, u64), u32> = Lru::new(3000);
            let mut latest: HashMap<u16, (u32, usize)> = HashMap::new();
            let mut capacity = 3000;
            let key = |k: u16| (u64::from(k & 3), u64::from(k));
            for op in ops {
                match op {
                    Op::Insert(k, v, c) => {
                        lru.insert(key(k), v, c);
                        latest.insert(k, (v, c));
                    }
                    Op::Get(k) => {
                        if let Some(v) = lru.get(&key(k)) {
                            prop_assert_eq!(Some(v), latest.get(&k).map(|e| e.0));
                        }
                    }
                    Op::Remove(k) => {
                        lru.remove(&key(k));
                        latest.remove(&k);
                        prop_assert_eq!(lru.get(&key(k)), None);
                    }
                    Op::Retain(table) => {
                        lru.retain(|k| k.0 != u64::from(table));
                        latest.retain(|k, _| k & 3 != table);
                    }
                    Op::SetCapacity(c) => {
                        lru.set_capacity(c);
                        capacity = c;
                    }
                }
                let held: Vec<((u64, u64), u32)> = lru.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(held.len(), lru.len());
                let mut charged = 0;
                for (k, v) in held {
                    let (value, charge) = latest[&(k.1 as u16)];
                    prop_assert_eq!(v, value);
                    charged += charge;
                }
                prop_assert_eq!(lru.usage(), charged);
                prop_assert!(lru.usage() <= capacity);
            }
        }
    }
}
