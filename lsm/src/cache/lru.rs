//! A cache bounded by a total charge (bytes for blocks, 1 per table), evicting by CLOCK: a hit
//! only sets the entry's reference bit, and eviction sweeps the entries in insertion order,
//! giving referenced ones a second chance. That approximates LRU with O(1) work per hit (no
//! reordering under the lock), which matters on the read path where every lookup is a hit.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};

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

/// A CLOCK-evicting map. `get` marks an entry used; `insert` evicts until the new one fits.
#[derive(Debug)]
pub struct Lru<K, V> {
    map: FastMap<K, Slot<V>>,
    /// The clock: keys in insertion order with the generation they were inserted at (an entry
    /// removed or replaced since leaves a stale position, skipped when the hand reaches it).
    ring: VecDeque<(K, u64)>,
    generation: u64,
    usage: usize,
    capacity: usize,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    charge: usize,
    generation: u64,
    referenced: bool,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    /// An empty map holding at most `capacity` charge.
    pub fn new(capacity: usize) -> Self {
        Lru { map: FastMap::default(), ring: VecDeque::new(), generation: 0, usage: 0, capacity }
    }

    /// The value for `k`, marking it recently used.
    pub fn get(&mut self, k: &K) -> Option<V> {
        self.get_with(k, V::clone)
    }

    /// What `f` makes of the value for `k` (without cloning it), marking it recently used.
    pub fn get_with<R>(&mut self, k: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let slot = self.map.get_mut(k)?;
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
    }

    /// Evicts until `charge` more fits (or nothing is left). An entry is spared once (its
    /// second chance) if it was marked used by `get` or `used` says so.
    fn evict_for(&mut self, charge: usize, used: &mut dyn FnMut(&V) -> bool) {
        while self.usage + charge > self.capacity {
            let Some((old, generation)) = self.ring.pop_front() else { break };
            let Some(slot) = self.map.get_mut(&old).filter(|s| s.generation == generation) else { continue };
            let spared = slot.referenced | used(&slot.value);
            if spared {
                slot.referenced = false;
                self.ring.push_back((old, generation));
            } else if let Some(s) = self.map.remove(&old) {
                self.usage -= s.charge;
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
        self.ring.push_back((k.clone(), self.generation));
        self.map.insert(k, Slot { value: v, charge, generation: self.generation, referenced: false });
        self.usage += charge;
        // Stale positions are dropped lazily; keep the ring from growing without bound.
        if self.ring.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.ring.retain(|(key, g)| map.get(key).is_some_and(|s| s.generation == *g));
        }
    }

    /// Removes `k`.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let s = self.map.remove(k)?;
        self.usage -= s.charge;
        Some(s.value)
    }

    /// Removes every entry whose key fails `keep` (the ring forgets them lazily).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let mut freed = 0;
        self.map.retain(|k, s| {
            let kept = keep(k);
            if !kept {
                freed += s.charge;
            }
            kept
        });
        self.usage -= freed;
    }

    /// Total charge held.
    pub fn usage(&self) -> usize {
        self.usage
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, s)| (k, &s.value))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
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
