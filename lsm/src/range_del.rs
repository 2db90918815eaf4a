//! Range tombstones: `delete_range(start..end)` as one record, honoured by reads and compaction.
//!
//! A tombstone `[start, end) @ seq` hides every version of every key in the range whose sequence
//! number is below `seq`. Memtables keep their tombstones in a list beside the skip list; tables
//! keep theirs in a `lsm.range_del` meta block. Readers fragment all visible tombstones into
//! non-overlapping pieces ([`Fragments`]) and ask, per key, for the newest covering tombstone.

/// One range tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTombstone {
    /// First user key deleted.
    pub start: Vec<u8>,
    /// First user key not deleted (exclusive end).
    pub end: Vec<u8>,
    /// Sequence number of the deletion.
    pub seq: u64,
}

impl RangeTombstone {
    /// True if `key` lies in `[start, end)`.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && key < self.end.as_slice()
    }
}

/// Tombstones cut into non-overlapping fragments, each with the sequence numbers of every
/// tombstone covering it (descending).
#[derive(Debug, Clone, Default)]
pub struct Fragments {
    /// Fragment `i` is `[bounds[i], bounds[i + 1])`.
    bounds: Vec<Vec<u8>>,
    seqs: Vec<Vec<u64>>,
}

impl Fragments {
    /// Fragments the tombstones with `seq <= max_seq`.
    pub fn new<'a>(tombstones: impl IntoIterator<Item = &'a RangeTombstone>, max_seq: u64) -> Self {
        let ts: Vec<&RangeTombstone> = tombstones.into_iter().filter(|t| t.seq <= max_seq && t.start < t.end).collect();
        if ts.is_empty() {
            return Fragments::default();
        }
        let mut bounds: Vec<Vec<u8>> = ts.iter().flat_map(|t| [t.start.clone(), t.end.clone()]).collect();
        bounds.sort();
        bounds.dedup();
        let mut seqs = vec![Vec::new(); bounds.len().saturating_sub(1)];
        for t in ts {
            let first = bounds.partition_point(|b| b.as_slice() < t.start.as_slice());
            for (i, s) in seqs.iter_mut().enumerate().skip(first) {
                if bounds[i].as_slice() >= t.end.as_slice() {
                    break;
                }
                s.push(t.seq);
            }
        }
        for s in &mut seqs {
            s.sort_unstable_by(|a, b| b.cmp(a));
            s.dedup();
        }
        Fragments { bounds, seqs }
    }

    /// True when there are no tombstones.
    pub fn is_empty(&self) -> bool {
        self.seqs.iter().all(Vec::is_empty)
    }

    /// The newest tombstone covering `key` with sequence number `<= upper`.
    pub fn max_covering(&self, key: &[u8], upper: u64) -> Option<u64> {
        if self.seqs.is_empty() {
            return None;
        }
        // Fragment i holds bounds[i] <= key < bounds[i + 1].
        let i = self.bounds.partition_point(|b| b.as_slice() <= key).checked_sub(1)?;
        self.seqs.get(i)?.iter().copied().find(|&s| s <= upper)
    }

    /// True if a tombstone with `seq < t <= upper` covers `key`: a version of `key` at `seq`
    /// is deleted for readers at `upper`.
    pub fn covers(&self, key: &[u8], seq: u64, upper: u64) -> bool {
        self.max_covering(key, upper).is_some_and(|t| t > seq)
    }

    /// The fragments as tombstones, one per (fragment, sequence number).
    pub fn tombstones(&self) -> impl Iterator<Item = RangeTombstone> + '_ {
        self.seqs.iter().enumerate().flat_map(move |(i, ss)| {
            ss.iter().map(move |&seq| RangeTombstone {
                start: self.bounds[i].clone(),
                end: self.bounds[i + 1].clone(),
                seq,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(a: &str, b: &str, seq: u64) -> RangeTombstone {
        RangeTombstone { start: a.into(), end: b.into(), seq }
    }

    #[test]
    fn overlapping_tombstones_fragment_and_answer_by_sequence() {
        let ts = [t("b", "f", 10), t("d", "h", 20), t("x", "z", 5), t("q", "q", 99)];
        let f = Fragments::new(&ts, u64::MAX);
        assert_eq!(f.max_covering(b"a", 100), None);
        assert_eq!(f.max_covering(b"b", 100), Some(10));
        assert_eq!(f.max_covering(b"d", 100), Some(20));
        assert_eq!(f.max_covering(b"e", 15), Some(10), "only tombstones visible at 15");
        assert_eq!(f.max_covering(b"f", 100), Some(20), "end of one is inside the other");
        assert_eq!(f.max_covering(b"h", 100), None, "end is exclusive");
        assert_eq!(f.max_covering(b"q", 100), None, "empty range deletes nothing");
        assert_eq!(f.max_covering(b"y", 100), Some(5));
        assert!(f.covers(b"e", 15, 100));
        assert!(!f.covers(b"e", 25, 100), "a newer write is not deleted");
        assert!(!f.covers(b"e", 15, 12), "a tombstone newer than the reader is invisible");
        let pieces: Vec<_> = f.tombstones().collect();
        assert!(pieces.contains(&t("d", "f", 20)) && pieces.contains(&t("d", "f", 10)));
        assert!(pieces.contains(&t("b", "d", 10)) && pieces.contains(&t("f", "h", 20)));
        // Readers below every tombstone see none of them.
        assert!(Fragments::new(&ts, 4).is_empty());
    }
}
