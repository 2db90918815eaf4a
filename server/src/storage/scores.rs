//! The score index of sorted sets: one record per member, keyed by its score so that byte
//! order is score order, and the bounds of the live records a sorted set keeps in its
//! metadata.
//!
//! ```text
//! score index  'Z' | db u16 BE | uid u64 BE | score (8) | member ->  (empty)
//! ```
//! Scores are encoded so byte order is numeric order ([`encode_score`]). Pops from either end
//! move the set's [`ScoreBounds`] inwards, so later reads start past what the pops deleted
//! instead of stepping over their tombstones.

use std::ops::Bound;

use bytes::{BufMut, Bytes, BytesMut};

use super::collection::{prefix_end, Header};
use super::elements::key_tail;
use super::{KeyType, Meta, RawRange, View};

/// The prefix every score-index record of `uid` in `pdb` starts with.
fn score_prefix(pdb: u16, uid: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(19);
    k.push(b'Z');
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// Encodes a score so byte order is numeric order (-inf < … < -0.0 = 0.0 < … < +inf).
pub fn encode_score(score: f64) -> [u8; 8] {
    // -0.0 and 0.0 are the same score in Redis.
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let ordered = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
    ordered.to_be_bytes()
}

/// The inverse of [`encode_score`].
pub fn decode_score(bytes: &[u8]) -> f64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    let ordered = u64::from_be_bytes(b);
    let bits = if ordered >> 63 == 1 { ordered & !(1 << 63) } else { !ordered };
    f64::from_bits(bits)
}

/// A sorted set's live score index lies within `[low, high)` (keys after the score-index
/// prefix: score (8) | member; empty = unbounded). Pops move the bounds inwards, so the next
/// pop seeks past what earlier pops deleted instead of stepping over their tombstones; adds
/// outside the bounds widen them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScoreBounds {
    /// No live entry sorts below this.
    pub low: Vec<u8>,
    /// No live entry sorts at or above this.
    pub high: Vec<u8>,
}

impl ScoreBounds {
    /// The bounds kept in a sorted set's metadata body (after its two header words).
    pub fn of(meta: &Meta) -> ScoreBounds {
        let Some(rest) = meta.body.get(16..) else { return ScoreBounds::default() };
        let Some(len) = rest.get(..4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize) else {
            return ScoreBounds::default();
        };
        match (rest.get(4..4 + len), rest.get(4 + len..)) {
            (Some(low), Some(high)) => ScoreBounds { low: low.to_vec(), high: high.to_vec() },
            _ => ScoreBounds::default(),
        }
    }

    /// `meta`'s body with `header` and these bounds.
    pub fn body(&self, header: &Header) -> Bytes {
        let head = header.body(KeyType::ZSet);
        let mut b = BytesMut::with_capacity(head.len() + 4 + self.low.len() + self.high.len());
        b.put_slice(&head);
        if !self.low.is_empty() || !self.high.is_empty() {
            b.put_u32_le(self.low.len() as u32);
            b.put_slice(&self.low);
            b.put_slice(&self.high);
        }
        b.freeze()
    }

    /// Widens the bounds to include the entry of `member` at `score`.
    pub fn include(&mut self, score: f64, member: &[u8]) {
        let k = score_suffix(score, member);
        if !self.low.is_empty() && k < self.low {
            self.low = k.clone();
        }
        if !self.high.is_empty() && k >= self.high {
            self.high = k;
            self.high.push(0);
        }
    }

    /// Everything up to and including `member` at `score` was popped from the low end.
    pub fn popped_low(&mut self, score: f64, member: &[u8]) {
        self.low = score_suffix(score, member);
        self.low.push(0);
    }

    /// Everything from `member` at `score` up was popped from the high end.
    pub fn popped_high(&mut self, score: f64, member: &[u8]) {
        self.high = score_suffix(score, member);
    }
}

fn score_suffix(score: f64, member: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + member.len());
    k.extend_from_slice(&encode_score(score));
    k.extend_from_slice(member);
    k
}

impl<'a> View<'a> {
    /// Adds a score-index record for `member` at `score` to `batch`.
    pub fn put_score(&self, batch: &mut lsm::WriteBatch, uid: u64, score: f64, member: &[u8]) {
        batch.put(self.score_key(uid, score, member), b"");
    }

    /// Adds removing the score-index record of `member` at `score` to `batch`.
    pub fn delete_score(&self, batch: &mut lsm::WriteBatch, uid: u64, score: f64, member: &[u8]) {
        batch.delete(self.score_key(uid, score, member));
    }

    fn score_key(&self, uid: u64, score: f64, member: &[u8]) -> Vec<u8> {
        super::record_key(b'Z', self.pdb(), uid, &[&encode_score(score), member])
    }

    /// The score index of sorted set `meta` in (score, member) order, as a double-ended
    /// iterator of `(score, member)` starting at score `min` (inclusive) when given. Reads
    /// start and end at the set's [`ScoreBounds`], past what pops deleted.
    pub fn scores(&self, meta: &Meta, min: Option<f64>) -> ScoreIter<'a> {
        let live = LiveIndex::of(self.pdb(), meta);
        let (start, end) = live.span(min, None);
        ScoreIter { range: self.raw_range(Bound::Included(start), Bound::Excluded(end)), skip: live.prefix.len() }
    }

    /// [`View::scores`] of every member, for pops from the low end (`next`) or the high end
    /// (`next_back`): inside a transaction or a write group each pop after the first goes on
    /// from where the one before stood instead of seeking the engine again (the pop moves the
    /// live bounds past what it took, see [`ScoreBounds`]).
    pub fn scores_to_pop(&self, meta: &Meta) -> ScoreIter<'a> {
        let live = LiveIndex::of(self.pdb(), meta);
        let (start, end) = live.span(None, None);
        ScoreIter { range: self.resuming_range(Bound::Included(start), Bound::Excluded(end)), skip: live.prefix.len() }
    }

    /// Calls `visit` with `(score, member)` of each member of the sorted set `meta` whose
    /// score lies in one of `ranges` (`[min, max)` each, visited in the order given, each in
    /// score order) until it returns false, the member borrowed from the engine's buffer. One
    /// engine cursor serves every range (a geo search reads up to nine): ranges in score order
    /// that do not overlap cost one seek and another only where a member lies between them
    /// (see `View::walk_ranges`), other ranges a seek each, none a cursor of its own.
    pub fn scores_in(
        &self,
        meta: &Meta,
        ranges: &[(f64, f64)],
        visit: impl FnMut(f64, &[u8]) -> bool,
    ) -> lsm::Result<()> {
        let live = LiveIndex::of(self.pdb(), meta);
        let spans = ranges.iter().map(|&(min, max)| live.span(Some(min), Some(max))).filter(|(start, end)| start < end);
        self.walk_spans(spans, live.prefix.len(), visit)
    }

    /// [`View::scores_in`] of every member from score `min` on (from the lowest without one),
    /// in score order: ZRANGE by rank or by score.
    pub fn each_score(&self, meta: &Meta, min: Option<f64>, visit: impl FnMut(f64, &[u8]) -> bool) -> lsm::Result<()> {
        let live = LiveIndex::of(self.pdb(), meta);
        self.walk_spans(std::iter::once(live.span(min, None)), live.prefix.len(), visit)
    }

    fn walk_spans(
        &self,
        spans: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
        skip: usize,
        mut visit: impl FnMut(f64, &[u8]) -> bool,
    ) -> lsm::Result<()> {
        self.walk_ranges(spans, |key, _| {
            visit(decode_score(&key[skip..skip + 8]), key.get(skip + 8..).unwrap_or_default())
        })
    }
}

/// Where a sorted set's live score-index records lie: its prefix, and the keys its
/// [`ScoreBounds`] start and end at.
struct LiveIndex {
    prefix: Vec<u8>,
    low: Vec<u8>,
    high: Vec<u8>,
}

impl LiveIndex {
    fn of(pdb: u16, meta: &Meta) -> LiveIndex {
        let prefix = score_prefix(pdb, meta.uid);
        let bounds = ScoreBounds::of(meta);
        let low = [&prefix[..], &bounds.low].concat();
        let high = if bounds.high.is_empty() { prefix_end(&prefix) } else { [&prefix[..], &bounds.high].concat() };
        LiveIndex { prefix, low, high }
    }

    /// The keys of scores in `[min, max)` (unbounded where not given), within the live records.
    fn span(&self, min: Option<f64>, max: Option<f64>) -> (Vec<u8>, Vec<u8>) {
        let at = |score: f64| [&self.prefix[..], &encode_score(score)].concat();
        let start = match min.map(at) {
            Some(key) if key > self.low => key,
            _ => self.low.clone(),
        };
        let end = match max.map(at) {
            Some(key) if key < self.high => key,
            _ => self.high.clone(),
        };
        (start, end)
    }
}

/// `(score, member)` pairs of one sorted set.
pub struct ScoreIter<'a> {
    range: RawRange<'a>,
    skip: usize,
}

impl std::fmt::Debug for ScoreIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScoreIter").finish_non_exhaustive()
    }
}

impl ScoreIter<'_> {
    fn decode(&self, k: Bytes) -> (f64, Bytes) {
        (decode_score(&k[self.skip..self.skip + 8]), key_tail(&k, self.skip + 8))
    }
}

impl Iterator for ScoreIter<'_> {
    type Item = lsm::Result<(f64, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let kv = self.range.next()?;
        Some(kv.map(|(k, _)| self.decode(k)))
    }
}

impl DoubleEndedIterator for ScoreIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let kv = self.range.next_back()?;
        Some(kv.map(|(k, _)| self.decode(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_sort_numerically_as_bytes() {
        let scores = [f64::NEG_INFINITY, -1e300, -2.5, -1.0, -1e-300, 0.0, 1e-300, 1.0, 2.5, 1e300, f64::INFINITY];
        let encoded: Vec<[u8; 8]> = scores.iter().map(|&s| encode_score(s)).collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for s in scores {
            assert_eq!(decode_score(&encode_score(s)), s);
        }
        assert_eq!(encode_score(-0.0), encode_score(0.0), "-0 and 0 are one score");
    }

    #[test]
    fn score_bounds_round_trip_and_move() {
        let zset = |body| Meta { kind: KeyType::ZSet, expire_at_ms: 0, uid: 1, body };
        let h = Header { count: 5, removed: 2, ..Header::default() };
        assert_eq!(ScoreBounds::of(&zset(h.body(KeyType::ZSet))), ScoreBounds::default());
        let mut b = ScoreBounds::default();
        b.include(1.0, b"a");
        assert_eq!(b, ScoreBounds::default(), "unbounded stays unbounded");
        b.popped_low(2.0, b"m");
        b.popped_high(9.0, b"z");
        let meta = zset(b.body(&h));
        assert_eq!((ScoreBounds::of(&meta), Header::of(&meta)), (b.clone(), h));
        // The header can change without losing the bounds.
        let h2 = Header { count: 4, ..h };
        assert_eq!(ScoreBounds::of(&zset(h2.body_for(&meta))), b);
        let (low, high) = (b.low.clone(), b.high.clone());
        b.include(5.0, b"x");
        assert_eq!((&b.low, &b.high), (&low, &high), "inside the bounds: unchanged");
        b.include(1.0, b"a");
        b.include(10.0, b"a");
        assert!(b.low < low && b.high > high);
        assert!(score_suffix(10.0, b"a") < b.high);
    }
}
