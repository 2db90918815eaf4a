//! Reading a collection's element records: [`ElementIter`], the `(field, value)` pairs of an
//! engine range with the key prefix cut off, and the one-cursor walk over ordered ranges that
//! `View::walk_ranges` runs (a geo search's cells, a random pick's buckets).

use std::ops::Bound;

use bytes::Bytes;

use super::RawRange;

/// `(field, value)` pairs of one collection.
pub struct ElementIter<'a> {
    pub(super) range: RawRange<'a>,
    pub(super) skip: usize,
    /// A hash's field records: values are decoded (`field_order.rs`).
    pub(super) hash_fields: bool,
}

impl std::fmt::Debug for ElementIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElementIter").finish_non_exhaustive()
    }
}

/// [`View::walk_ranges`](super::View::walk_ranges) over ranges in key order that do not overlap, with one bound around
/// them all: the cursor seeks to the first range's start and then only where a key it meets
/// lies in a gap before a later range, so ranges past the last key (or with no key between
/// them) cost nothing. A forward seek from where the cursor stands moves only the sources
/// behind the target (see `MergingIterator::seek`).
pub(super) fn walk_in_order(
    it: &mut lsm::DbIterator,
    ranges: &[(Vec<u8>, Vec<u8>)],
    mut step: impl FnMut() -> bool,
    mut visit: impl FnMut(&[u8], &[u8]) -> bool,
) -> lsm::Result<()> {
    let (Some((first, _)), Some((_, last))) = (ranges.first(), ranges.last()) else {
        return Ok(());
    };
    it.set_bounds(Bound::Included(first.clone()), Bound::Excluded(last.clone()));
    it.seek(first)?;
    let mut at = 0;
    while it.valid() {
        while ranges.get(at).is_some_and(|(_, end)| it.key() >= end.as_slice()) {
            at += 1;
        }
        let Some((start, _)) = ranges.get(at) else { break };
        if it.key() < start.as_slice() {
            it.seek(start)?;
            continue;
        }
        if !step() {
            return Err(lsm::Error::WouldBlock);
        }
        if !visit(it.key(), it.value()) {
            break;
        }
        it.next()?;
    }
    it.status()
}

/// The part of a key from `from` on, as `Bytes`. Keys from an engine range are fresh copies:
/// slicing one turns it into a shared buffer (an allocation and atomic counts) only to drop
/// its prefix, so a short tail is copied instead; a long one is still sliced.
pub(super) fn key_tail(k: &Bytes, from: usize) -> Bytes {
    let tail = k.get(from..).unwrap_or_default();
    if tail.len() <= 256 {
        Bytes::copy_from_slice(tail)
    } else {
        k.slice(from..)
    }
}

impl<'a> ElementIter<'a> {
    /// The records of `range`, whose keys hold the field from byte `skip` on.
    pub(super) fn new(range: RawRange<'a>, skip: usize) -> Self {
        ElementIter { range, skip, hash_fields: false }
    }

    /// The field part of an element key.
    fn field(&self, k: &Bytes) -> Bytes {
        key_tail(k, self.skip)
    }

    /// A record's `(field, value)`.
    fn pair(&self, (k, v): (Bytes, Bytes)) -> (Bytes, Bytes) {
        let value = if self.hash_fields { super::field_order::decode_field(&v).1 } else { v };
        (self.field(&k), value)
    }
}

impl Iterator for ElementIter<'_> {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.range.next()?.map(|kv| self.pair(kv)))
    }
}

impl DoubleEndedIterator for ElementIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        Some(self.range.next_back()?.map(|kv| self.pair(kv)))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// One walk over ordered, disjoint ranges visits exactly the keys inside them, in
        /// order, and stops where the visitor says.
        #[test]
        fn walk_in_order_visits_the_keys_inside_the_ranges(
            keys in proptest::collection::btree_set(0u8..64, 0..40),
            cuts in proptest::collection::btree_set(0u8..66, 2..12),
            stop_after in 0usize..50,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
            // Half the keys in a table, half in the memtable: the walk merges both.
            let (low, high): (Vec<u8>, Vec<u8>) = keys.iter().partition(|&&k| k < 32);
            for (i, part) in [low, high].into_iter().enumerate() {
                for k in part {
                    db.put([k], [k, k]).unwrap();
                }
                if i == 0 {
                    db.flush().unwrap();
                }
            }
            // Every other gap between the cut points is a range; so ranges touch or leave gaps.
            let cuts: Vec<u8> = cuts.into_iter().collect();
            let ranges: Vec<(Vec<u8>, Vec<u8>)> =
                cuts.windows(2).step_by(2).map(|w| (vec![w[0]], vec![w[1]])).collect();
            let inside = |k: u8| ranges.iter().any(|(s, e)| [k].as_slice() >= s.as_slice() && [k].as_slice() < e.as_slice());
            let want: Vec<u8> = keys.iter().copied().filter(|&k| inside(k)).take(stop_after + 1).collect();
            let mut got = Vec::new();
            let mut it = db.iter(&lsm::ReadOptions::default());
            walk_in_order(&mut it, &ranges, || true, |k, v| {
                assert_eq!(v, [k[0], k[0]]);
                got.push(k[0]);
                got.len() <= stop_after
            })
            .unwrap();
            prop_assert_eq!(got, want);
        }
    }
}
