//! The keys a transaction buffer wrote and their states: hashed for point reads and writes,
//! put in order only where range reads ask.
//!
//! A write group's commands mostly read and write single records: an RPUSH reads its list's
//! metadata and writes it back with one new element, so a group of 800 of them (50 clients
//! pipelining 16 each) made three searches of an ordered map per command, each comparing long
//! keys that share their prefix (12 % of RPUSH -P 16's CPU). Here those are hash probes.
//!
//! A range read (a pop's walk of its collection's front, a range deletion) first *covers* its
//! range: the keys in it move into an ordered map, and from then on every key written in a
//! covered range goes there, every other key stays hashed. A group of LPOPs orders the
//! tombstones of the list's elements, which its pops read past, while the list's metadata,
//! read and rewritten by every pop, stays a hash probe (with one map for both, the buffer took
//! 17 % of LPOP -P 16's server samples, 11 % now). Past [`MAX_COVERED`] ranges every key is
//! ordered.

use std::collections::{btree_map, BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;

use super::merged::is_empty;

/// A buffered key's state: the value written, or `None` for deleted.
pub(super) type State = Option<Bytes>;

/// Ranges covered one by one before every key is ordered: each new one scans the hashed keys.
const MAX_COVERED: usize = 8;

/// Hashes a key with xxh3 (the std hasher costs three times as much on 30-byte keys); its
/// state starts at 0, or at a seed ([`KeyHasher::seeded`]) where clients choose the keys.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl KeyHasher {
    /// A hasher whose state starts at `seed`.
    pub(crate) fn seeded(seed: u64) -> KeyHasher {
        KeyHasher(seed)
    }
}

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

type Bounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// A covered range's bounds.
type Covered = (Bound<Box<[u8]>>, Bound<Box<[u8]>>);

/// See the module docs. A key is in exactly one of the two maps: `ordered` if it lies in a
/// covered range, `map` otherwise.
#[derive(Debug)]
pub(super) struct Writes {
    /// Keys outside every covered range.
    map: HashMap<Arc<[u8]>, State, BuildHasherDefault<KeyHasher>>,
    /// Keys inside the covered ranges.
    ordered: BTreeMap<Arc<[u8]>, State>,
    /// The ranges covered, by their bounds; `None` once every key is ordered.
    covered: Option<Vec<Covered>>,
}

impl Default for Writes {
    fn default() -> Self {
        Writes { map: HashMap::default(), ordered: BTreeMap::new(), covered: Some(Vec::new()) }
    }
}

impl Writes {
    /// Whether `key` belongs in `ordered`.
    fn is_ordered(&self, key: &[u8]) -> bool {
        match &self.covered {
            None => true,
            Some(ranges) => ranges.iter().any(|(low, high)| contains((as_ref(low), as_ref(high)), key)),
        }
    }

    /// Whether every key in `bounds` belongs in `ordered`.
    fn covers(&self, bounds: Bounds<'_>) -> bool {
        match &self.covered {
            None => true,
            Some(ranges) => ranges
                .iter()
                .any(|(low, high)| starts_no_later(as_ref(low), bounds.0) && ends_no_earlier(as_ref(high), bounds.1)),
        }
    }

    /// Orders the keys in `bounds`, now and when written later (see the module docs).
    pub(super) fn cover(&mut self, bounds: Bounds<'_>) {
        if self.covers(bounds) {
            return;
        }
        let Some(ranges) = self.covered.as_mut() else { return };
        if ranges.len() >= MAX_COVERED || (bounds.0 == Bound::Unbounded && bounds.1 == Bound::Unbounded) {
            self.covered = None;
            self.ordered.extend(self.map.drain());
            return;
        }
        ranges.push((owned(bounds.0), owned(bounds.1)));
        let inside: Vec<Arc<[u8]>> = self.map.keys().filter(|k| contains(bounds, k)).cloned().collect();
        for key in inside {
            if let Some(state) = self.map.remove(&key) {
                self.ordered.insert(key, state);
            }
        }
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&State> {
        if self.is_ordered(key) {
            self.ordered.get(key)
        } else {
            self.map.get(key)
        }
    }

    pub(super) fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s state; returns the one it replaces.
    pub(super) fn insert(&mut self, key: &[u8], state: State) -> Option<State> {
        if self.is_ordered(key) {
            // One search (a probe first would make it two for a new key, the common case).
            return self.ordered.insert(Arc::from(key), state);
        }
        if let Some(slot) = self.map.get_mut(key) {
            return Some(std::mem::replace(slot, state));
        }
        self.map.insert(Arc::from(key), state);
        None
    }

    /// Forgets `key` (a rollback of its first write).
    pub(super) fn remove(&mut self, key: &[u8]) {
        if self.is_ordered(key) {
            self.ordered.remove(key);
        } else {
            self.map.remove(key);
        }
    }

    /// The keys in `bounds` with their states, in key order, from either end: a walk of the
    /// ordered map if [`Writes::cover`] covered `bounds`, else (a reader that could not cover
    /// them) a sorted copy of what both maps hold there.
    pub(super) fn range<'a>(&'a self, bounds: Bounds<'_>) -> Ranged<'a> {
        if is_empty(bounds) {
            return Ranged::Collected(Vec::new().into_iter());
        }
        let ordered = self.ordered.range::<[u8], _>(bounds);
        if self.covers(bounds) {
            return Ranged::Ordered(ordered);
        }
        let mut all: Vec<_> = ordered.chain(self.map.iter().filter(|(k, _)| contains(bounds, k))).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Ranged::Collected(all.into_iter())
    }

    /// Every key with its state, in key order.
    pub(super) fn sorted(&self) -> Vec<(&Arc<[u8]>, &State)> {
        let mut hashed: Vec<_> = self.map.iter().collect();
        hashed.sort_unstable_by(|a, b| a.0.cmp(b.0));
        if self.ordered.is_empty() {
            return hashed;
        }
        // The two sorted runs merged (the maps hold no key in common).
        let mut out = Vec::with_capacity(hashed.len() + self.ordered.len());
        let (mut hashed, mut ordered) = (hashed.into_iter().peekable(), self.ordered.iter().peekable());
        loop {
            let from_hashed = match (hashed.peek(), ordered.peek()) {
                (Some(h), Some(o)) => h.0 < o.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return out,
            };
            out.extend(if from_hashed { hashed.next() } else { ordered.next() });
        }
    }
}

/// The buffered keys of a range (see [`Writes::range`]).
pub(super) enum Ranged<'a> {
    Ordered(btree_map::Range<'a, Arc<[u8]>, State>),
    Collected(std::vec::IntoIter<(&'a Arc<[u8]>, &'a State)>),
}

impl<'a> Iterator for Ranged<'a> {
    type Item = (&'a Arc<[u8]>, &'a State);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Ranged::Ordered(r) => r.next(),
            Ranged::Collected(r) => r.next(),
        }
    }
}

impl DoubleEndedIterator for Ranged<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Ranged::Ordered(r) => r.next_back(),
            Ranged::Collected(r) => r.next_back(),
        }
    }
}

fn as_ref(b: &Bound<Box<[u8]>>) -> Bound<&[u8]> {
    b.as_ref().map(|k| &k[..])
}

fn owned(b: Bound<&[u8]>) -> Bound<Box<[u8]>> {
    b.map(Box::from)
}

/// Whether `key` lies within `(low, high)`.
fn contains((low, high): Bounds<'_>, key: &[u8]) -> bool {
    let above = match low {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    };
    above
        && match high {
            Bound::Included(h) => key <= h,
            Bound::Excluded(h) => key < h,
            Bound::Unbounded => true,
        }
}

/// Whether a range starting at `a` starts no later than one starting at `b` (false if unsure).
fn starts_no_later(a: Bound<&[u8]>, b: Bound<&[u8]>) -> bool {
    match (a, b) {
        (Bound::Unbounded, _) => true,
        (_, Bound::Unbounded) => false,
        (Bound::Excluded(x), Bound::Included(y)) => x < y,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => x <= y,
    }
}

/// Whether a range ending at `a` ends no earlier than one ending at `b` (false if unsure).
fn ends_no_earlier(a: Bound<&[u8]>, b: Bound<&[u8]>) -> bool {
    match (a, b) {
        (Bound::Unbounded, _) => true,
        (_, Bound::Unbounded) => false,
        (Bound::Excluded(x), Bound::Included(y)) => x > y,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => x >= y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A covered range must hold every key of the range it is said to cover: checked against
    /// every key of a small alphabet for every pair of bounds.
    #[test]
    fn cover_checks_hold_for_every_pair_of_bounds() {
        let keys: Vec<Vec<u8>> = ["", "a", "a\0", "b", "c"].iter().map(|k| k.as_bytes().to_vec()).collect();
        let bounds = |k: &[u8]| [Bound::Included(k.to_vec()), Bound::Excluded(k.to_vec())];
        let mut all: Vec<Bound<Vec<u8>>> = keys.iter().flat_map(|k| bounds(k)).collect();
        all.push(Bound::Unbounded);
        let probe: Vec<Vec<u8>> =
            ["", "a", "a\0", "a\0\0", "ab", "b", "b\0", "c", "d"].iter().map(|k| k.as_bytes().to_vec()).collect();
        fn r(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
            b.as_ref().map(Vec::as_slice)
        }
        for a in &all {
            for b in &all {
                let from = |x: &Bound<Vec<u8>>, k: &[u8]| contains((r(x), Bound::Unbounded), k);
                let to = |x: &Bound<Vec<u8>>, k: &[u8]| contains((Bound::Unbounded, r(x)), k);
                if starts_no_later(r(a), r(b)) {
                    assert!(probe.iter().all(|k| !from(b, k) || from(a, k)), "{a:?} {b:?}");
                }
                if ends_no_earlier(r(a), r(b)) {
                    assert!(probe.iter().all(|k| !to(b, k) || to(a, k)), "{a:?} {b:?}");
                }
            }
        }
    }

    /// Random inserts, removals and range reads (of covered ranges or not, with few or more
    /// than `MAX_COVERED` ranges covered) agree with a BTreeMap.
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
                            if rng.random_range(0..3) > 0 {
                                writes.cover(bounds);
                            }
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
                if rng.random_range(0..50) == 0 {
                    writes.cover((Bound::Excluded(b"k040"), Bound::Unbounded));
                }
                assert_eq!(writes.get(b"k007"), model.get(&b"k007"[..]));
                assert_eq!(writes.get(b"k045"), model.get(&b"k045"[..]));
                assert_eq!(writes.contains_key(b"k011"), model.contains_key(&b"k011"[..]));
            }
            let sorted: Vec<_> = writes.sorted().into_iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
            assert_eq!(sorted, model.into_iter().collect::<Vec<_>>(), "round {round}");
        }
    }
}
