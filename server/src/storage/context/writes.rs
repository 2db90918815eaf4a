//! The keys a transaction buffer wrote and their states: hashed for point reads and writes,
//! put in order only once a range read asks.
//!
//! A write group's commands mostly read and write single records: an RPUSH reads its list's
//! metadata and writes it back with one new element, so a group of 800 of them (50 clients
//! pipelining 16 each) made three searches of an ordered map per command, each comparing long
//! keys that share their prefix (12 % of RPUSH -P 16's CPU). Here those are hash probes.
//! The first range read (a pop's walk of its collection's front, a range deletion) moves the
//! keys into an ordered map, and the buffer keeps that one from then on: a group that reads
//! ranges costs what it did before keys were hashed, plus one move. A buffer never ordered
//! sorts its keys once, when it becomes the batch.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;

/// A buffered key's state: the value written, or `None` for deleted.
pub(super) type State = Option<Bytes>;

/// Hashes a key with xxh3 (the std hasher costs three times as much on 30-byte keys).
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0 ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// Every key until a range read asks for order; empty after (see `ordered`).
    map: HashMap<Arc<[u8]>, State, BuildHasherDefault<KeyHasher>>,
    /// Every key once a range read asked for them in order; from the next write on, the only
    /// copy (a group that reads ranges reads and writes this one map, as it did before keys
    /// were hashed, instead of keeping both up to date).
    ordered: OnceCell<BTreeMap<Arc<[u8]>, State>>,
}

impl Writes {
    pub(super) fn get(&self, key: &[u8]) -> Option<&State> {
        match self.ordered.get() {
            Some(ordered) => ordered.get(key),
            None => self.map.get(key),
        }
    }

    pub(super) fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// The ordered map if a range read built it, as the one copy from now on.
    fn ordered_mut(&mut self) -> Option<&mut BTreeMap<Arc<[u8]>, State>> {
        let ordered = self.ordered.get_mut()?;
        if !self.map.is_empty() {
            self.map = HashMap::default();
        }
        Some(ordered)
    }

    /// Sets `key`'s state; returns the one it replaces.
    pub(super) fn insert(&mut self, key: &[u8], state: State) -> Option<State> {
        if let Some(ordered) = self.ordered_mut() {
            // One search (a probe first would make it two for a new key, the common case).
            return ordered.insert(Arc::from(key), state);
        }
        if let Some(slot) = self.map.get_mut(key) {
            return Some(std::mem::replace(slot, state));
        }
        self.map.insert(Arc::from(key), state);
        None
    }

    /// Forgets `key` (a rollback of its first write).
    pub(super) fn remove(&mut self, key: &[u8]) {
        match self.ordered_mut() {
            Some(ordered) => ordered.remove(key),
            None => self.map.remove(key),
        };
    }

    /// The keys in `bounds` with their states, in key order, from either end.
    pub(super) fn range<'a>(
        &'a self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
    ) -> impl DoubleEndedIterator<Item = (&'a Arc<[u8]>, &'a State)> + 'a {
        let ordered = self.ordered.get_or_init(|| self.map.iter().map(|(k, v)| (Arc::clone(k), v.clone())).collect());
        ordered.range::<[u8], _>(bounds)
    }

    /// Every key with its state, in key order.
    pub(super) fn sorted(&self) -> Vec<(&Arc<[u8]>, &State)> {
        if let Some(ordered) = self.ordered.get() {
            return ordered.iter().collect();
        }
        let mut all: Vec<_> = self.map.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random inserts, removals and range reads (ordered or not yet) agree with a BTreeMap.
    #[test]
    fn writes_answer_as_an_ordered_map_does() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..200 {
            let (mut writes, mut model) = (Writes::default(), BTreeMap::<Vec<u8>, State>::new());
            for _ in 0..rng.random_range(0..120) {
                let key = format!("k{:03}", rng.random_range(0..60)).into_bytes();
                match rng.random_range(0..10) {
                    0 => {
                        writes.remove(&key);
                        model.remove(&key);
                    }
                    1 => {
                        let (a, b) =
                            (format!("k{:03}", rng.random_range(0..60)), format!("k{:03}", rng.random_range(0..60)));
                        let bounds = (Bound::Included(a.as_bytes()), Bound::Excluded(b.as_bytes()));
                        if a <= b {
                            let got: Vec<_> = writes.range(bounds).map(|(k, v)| (k.to_vec(), v.clone())).collect();
                            let want: Vec<_> =
                                model.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), v.clone())).collect();
                            assert_eq!(got, want, "round {round}");
                            let back: Vec<_> = writes.range(bounds).rev().map(|(k, _)| k.to_vec()).collect();
                            assert_eq!(back, want.iter().rev().map(|(k, _)| k.clone()).collect::<Vec<_>>());
                        }
                    }
                    n => {
                        let state = (n % 3 != 0).then(|| Bytes::from(format!("v{n}")));
                        assert_eq!(writes.insert(&key, state.clone()), model.insert(key.clone(), state));
                    }
                }
                assert_eq!(writes.get(b"k007"), model.get(&b"k007"[..]));
                assert_eq!(writes.contains_key(b"k011"), model.contains_key(&b"k011"[..]));
            }
            let sorted: Vec<_> = writes.sorted().into_iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
            assert_eq!(sorted, model.into_iter().collect::<Vec<_>>(), "round {round}");
        }
    }
}
