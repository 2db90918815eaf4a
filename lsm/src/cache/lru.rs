//! A least-recently-used map bounded by a total charge (bytes for blocks, 1 per table).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// An LRU map. `get` refreshes an entry; `insert` evicts the least recently used entries until
/// the new one fits.
#[derive(Debug)]
pub struct Lru<K, V> {
    map: HashMap<K, Slot<V>>,
    order: BTreeMap<u64, K>,
    tick: u64,
    usage: usize,
    capacity: usize,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    tick: u64,
    charge: usize,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    /// An empty map holding at most `capacity` charge.
    pub fn new(capacity: usize) -> Self {
        Lru { map: HashMap::new(), order: BTreeMap::new(), tick: 0, usage: 0, capacity }
    }

    /// The value for `k`, marking it most recently used.
    pub fn get(&mut self, k: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let slot = self.map.get_mut(k)?;
        self.order.remove(&slot.tick);
        slot.tick = tick;
        self.order.insert(tick, k.clone());
        Some(slot.value.clone())
    }

    /// Inserts (or replaces) `k`; entries bigger than the whole capacity are not kept.
    pub fn insert(&mut self, k: K, v: V, charge: usize) {
        self.remove(&k);
        if charge > self.capacity {
            return;
        }
        while self.usage + charge > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            if let Some(s) = self.map.remove(&oldest) {
                self.usage -= s.charge;
            }
        }
        self.tick += 1;
        self.order.insert(self.tick, k.clone());
        self.map.insert(k, Slot { value: v, tick: self.tick, charge });
        self.usage += charge;
    }

    /// Removes `k`.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let s = self.map.remove(k)?;
        self.order.remove(&s.tick);
        self.usage -= s.charge;
        Some(s.value)
    }

    /// Total charge held.
    pub fn usage(&self) -> usize {
        self.usage
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
    fn evicts_least_recently_used_by_charge() {
        let mut l = Lru::new(10);
        l.insert("a", 1, 4);
        l.insert("b", 2, 4);
        assert_eq!(l.get(&"a"), Some(1)); // a is now newer than b
        l.insert("c", 3, 4); // evicts b
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
    }
}
