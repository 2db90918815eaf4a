//! Range tombstones: `delete_range(start..end)` as one record, honoured by reads and compaction.
//!
//! A tombstone `[start, end) @ seq` hides every version of every key in the range whose sequence
//! number is below `seq`. Tables keep theirs in a `lsm.range_del` meta block and fragment them
//! once, when the table is opened ([`Fragments`]: non-overlapping pieces, each with the
//! sequence numbers covering it). A memtable keeps its tombstones beside the skip list and
//! fragments each one as it is inserted ([`FragmentMap`], O(log n) per insert that splits
//! nothing). A cursor asks each source with tombstones ([`Tombstones`]) for the newest tombstone
//! covering a key, remembering per source the key interval its last answer holds for, so
//! walking keys costs a comparison per key and source, and neither building a cursor nor a
//! point read costs anything proportional to the number of tombstones: a stream trimmed on
//! every XADD leaves one tombstone per write, and reads must not slow down as they pile up.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

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
    /// Bytes the fragments hold.
    pub fn memory(&self) -> usize {
        self.bounds.iter().map(|b| b.capacity() + 24).sum::<usize>()
            + self.seqs.iter().map(|s| s.capacity() * 8 + 24).sum::<usize>()
    }

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

    /// The newest tombstone covering `key` with sequence number `<= upper`, and the interval of
    /// keys around `key` with the same answer.
    pub fn region(&self, key: &[u8], upper: u64) -> Region {
        let i = self.bounds.partition_point(|b| b.as_slice() <= key);
        let lo = i.checked_sub(1).map(|j| self.bounds[j].clone());
        let hi = self.bounds.get(i).cloned();
        let seq =
            i.checked_sub(1).and_then(|j| self.seqs.get(j)).and_then(|ss| ss.iter().copied().find(|&s| s <= upper));
        Region { lo, hi, seq }
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

/// What a source of tombstones says about a key interval: every key in `[lo, hi)` (`None`: no
/// bound on that side) is covered by tombstone `seq` at newest (`None`: by none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// First key of the interval (`None`: from the smallest key).
    pub lo: Option<Vec<u8>>,
    /// First key after the interval (`None`: to the end).
    pub hi: Option<Vec<u8>>,
    /// The newest tombstone covering the interval, among those the question could see.
    pub seq: Option<u64>,
}

impl Region {
    /// True if `key` lies in the interval.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.lo.as_deref().is_none_or(|lo| lo <= key) && self.hi.as_deref().is_none_or(|hi| key < hi)
    }
}

/// One piece of a [`FragmentMap`]: up to `end`, covered by `seqs` (newest first).
#[derive(Debug, Clone)]
struct Piece {
    end: Vec<u8>,
    seqs: Vec<u64>,
}

/// Tombstones fragmented as they arrive: non-overlapping pieces keyed by their first key. An
/// insert splits at most the two pieces its ends fall in and adds its sequence number to the
/// pieces it covers; a lookup is one ordered-map search. Splitting never changes the answer for
/// a reader that cannot see the tombstone being inserted, so a reader may keep an answer's
/// [`Region`] while tombstones newer than it are added.
#[derive(Debug, Default)]
pub struct FragmentMap {
    pieces: BTreeMap<Vec<u8>, Piece>,
}

impl FragmentMap {
    /// Adds `t` (an empty range adds nothing).
    pub fn insert(&mut self, t: &RangeTombstone) {
        let (s, e, q) = (t.start.as_slice(), t.end.as_slice(), t.seq);
        if s >= e {
            return;
        }
        let with_q = |seqs: &[u64]| {
            let mut v = seqs.to_vec();
            let at = v.partition_point(|&x| x > q);
            if v.get(at) != Some(&q) {
                v.insert(at, q);
            }
            v
        };
        // The pieces overlapping [s, e): the one starting before s if it reaches past s, then
        // every piece starting in [s, e).
        let mut starts: Vec<Vec<u8>> = Vec::new();
        if let Some((k, p)) = self.pieces.range::<[u8], _>((Bound::Unbounded, Bound::Excluded(s))).next_back() {
            if p.end.as_slice() > s {
                starts.push(k.clone());
            }
        }
        starts.extend(self.pieces.range::<[u8], _>((Bound::Included(s), Bound::Excluded(e))).map(|(k, _)| k.clone()));
        let mut added: Vec<(Vec<u8>, Piece)> = Vec::with_capacity(2 * starts.len() + 1);
        let mut cursor = s.to_vec();
        for k in starts {
            let p = self.pieces.remove(&k).expect("a piece just found");
            if k.as_slice() < s {
                added.push((k.clone(), Piece { end: s.to_vec(), seqs: p.seqs.clone() }));
            }
            let from = if k.as_slice() < s { s.to_vec() } else { k };
            if cursor < from {
                added.push((cursor, Piece { end: from.clone(), seqs: vec![q] }));
            }
            let to = if p.end.as_slice() < e { p.end.clone() } else { e.to_vec() };
            added.push((from, Piece { end: to.clone(), seqs: with_q(&p.seqs) }));
            if p.end.as_slice() > e {
                added.push((e.to_vec(), Piece { end: p.end, seqs: p.seqs }));
            }
            cursor = to;
        }
        if cursor.as_slice() < e {
            added.push((cursor, Piece { end: e.to_vec(), seqs: vec![q] }));
        }
        self.pieces.extend(added);
    }

    /// The newest tombstone covering `key` with sequence number `<= upper`.
    pub fn max_covering(&self, key: &[u8], upper: u64) -> Option<u64> {
        let (_, p) = self.pieces.range::<[u8], _>((Bound::Unbounded, Bound::Included(key))).next_back()?;
        if key < p.end.as_slice() {
            p.seqs.iter().copied().find(|&s| s <= upper)
        } else {
            None
        }
    }

    /// [`Self::max_covering`] with the interval of keys around `key` that has the same answer.
    pub fn region(&self, key: &[u8], upper: u64) -> Region {
        let before = self.pieces.range::<[u8], _>((Bound::Unbounded, Bound::Included(key))).next_back();
        if let Some((k, p)) = before {
            if key < p.end.as_slice() {
                let seq = p.seqs.iter().copied().find(|&s| s <= upper);
                return Region { lo: Some(k.clone()), hi: Some(p.end.clone()), seq };
            }
        }
        let next = self.pieces.range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded)).next();
        Region { lo: before.map(|(_, p)| p.end.clone()), hi: next.map(|(k, _)| k.clone()), seq: None }
    }
}

/// A source of range tombstones a cursor reads: a memtable or a table.
pub trait TombstoneSource: Send + Sync {
    /// The newest tombstone covering `key` with sequence number `<= upper`, and the interval of
    /// keys around `key` with the same answer.
    fn tombstone_region(&self, key: &[u8], upper: u64) -> Region;
}

/// The range tombstones a cursor at sequence number `upper` must honour, asked source by
/// source, each source's last answer kept for the keys it holds for.
#[derive(Default)]
pub struct Tombstones {
    upper: u64,
    sources: Vec<(Arc<dyn TombstoneSource>, Option<Region>)>,
}

impl std::fmt::Debug for Tombstones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tombstones").field("upper", &self.upper).field("sources", &self.sources.len()).finish()
    }
}

impl Tombstones {
    /// The tombstones of `sources` visible at `upper`.
    pub fn new(sources: Vec<Arc<dyn TombstoneSource>>, upper: u64) -> Self {
        Tombstones { upper, sources: sources.into_iter().map(|s| (s, None)).collect() }
    }

    /// The newest visible tombstone covering `key`.
    pub fn max_covering(&mut self, key: &[u8]) -> Option<u64> {
        let mut newest = None;
        for (source, last) in &mut self.sources {
            let region = match last {
                Some(r) if r.contains(key) => r,
                _ => last.insert(source.tombstone_region(key, self.upper)),
            };
            newest = newest.max(region.seq);
        }
        newest
    }

    /// True if a visible tombstone newer than `seq` covers `key`: the version of `key` written
    /// at `seq` is deleted.
    pub fn covers(&mut self, key: &[u8], seq: u64) -> bool {
        !self.sources.is_empty() && self.max_covering(key).is_some_and(|t| t > seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

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

    /// Brute force: the newest of `ts` covering `key` at `upper`.
    fn naive(ts: &[RangeTombstone], key: &[u8], upper: u64) -> Option<u64> {
        ts.iter().filter(|t| t.seq <= upper && t.contains(key)).map(|t| t.seq).max()
    }

    /// A small key space so that ranges overlap, nest and touch.
    fn random_tombstones(rng: &mut impl rand::Rng, n: usize) -> Vec<RangeTombstone> {
        (1..=n as u64)
            .map(|seq| {
                let (a, b) = (rng.random_range(0..40u8), rng.random_range(0..40u8));
                RangeTombstone { start: vec![b'a' + a.min(b)], end: vec![b'a' + a.max(b)], seq }
            })
            .collect()
    }

    #[test]
    fn fragment_map_answers_as_the_tombstones_do() {
        let mut rng = rand::rng();
        for _ in 0..200 {
            let n = rng.random_range(0..30);
            let ts = random_tombstones(&mut rng, n);
            let mut map = FragmentMap::default();
            for t in &ts {
                map.insert(t);
            }
            let fragments = Fragments::new(&ts, u64::MAX);
            for k in 0..45u8 {
                let key = [b'a' + k];
                for upper in [0, 3, 10, 20, u64::MAX] {
                    let want = naive(&ts, &key, upper);
                    assert_eq!(map.max_covering(&key, upper), want, "{ts:?} key {key:?} upper {upper}");
                    for r in [map.region(&key, upper), fragments.region(&key, upper)] {
                        assert!(r.contains(&key), "{r:?} holds {key:?}");
                        assert_eq!(r.seq, want, "{ts:?} key {key:?} upper {upper}");
                        // The answer holds over the whole region.
                        for k2 in 0..45u8 {
                            let key2 = [b'a' + k2];
                            if r.contains(&key2) {
                                assert_eq!(naive(&ts, &key2, upper), want, "{r:?} at {key2:?} in {ts:?}");
                            }
                        }
                    }
                }
            }
            // Pieces never overlap.
            let mut end: &[u8] = b"";
            for (start, p) in &map.pieces {
                assert!(start.as_slice() >= end && start < &p.end, "{:?}", map.pieces);
                end = &p.end;
            }
        }
    }

    struct Live(std::sync::RwLock<FragmentMap>);

    impl TombstoneSource for Live {
        fn tombstone_region(&self, key: &[u8], upper: u64) -> Region {
            self.0.read().unwrap().region(key, upper)
        }
    }

    #[test]
    fn a_cursor_keeps_its_answers_while_newer_tombstones_arrive() {
        let mut rng = rand::rng();
        for _ in 0..100 {
            let ts = random_tombstones(&mut rng, 40);
            let (old, new) = ts.split_at(20);
            let live = Arc::new(Live(std::sync::RwLock::new(FragmentMap::default())));
            for t in old {
                live.0.write().unwrap().insert(t);
            }
            let table = Arc::new(Fragments::new(&ts[..10], u64::MAX));
            struct Frozen(Arc<Fragments>);
            impl TombstoneSource for Frozen {
                fn tombstone_region(&self, key: &[u8], upper: u64) -> Region {
                    self.0.region(key, upper)
                }
            }
            let upper = 20;
            let mut cursor = Tombstones::new(vec![live.clone(), Arc::new(Frozen(table))], upper);
            let mut newer = new.iter();
            for _ in 0..100 {
                let key = [b'a' + rng.random_range(0..45u8)];
                assert_eq!(cursor.max_covering(&key), naive(old, &key, upper), "key {key:?}");
                assert_eq!(cursor.covers(&key, 5), naive(old, &key, upper).is_some_and(|t| t > 5));
                if let Some(t) = newer.next() {
                    live.0.write().unwrap().insert(t);
                }
            }
        }
    }
}
