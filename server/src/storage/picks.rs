//! Random members of sets, hashes and sorted sets without reading the whole collection.
//!
//! Every member of those collections has a *pick record*, keyed by a seeded 64-bit hash of
//! the member:
//!
//! ```text
//! pick record  'R' | db u16 BE | uid u64 BE | hash u64 BE | member  ->  value
//! ```
//!
//! The pick record is the member's only record (a set's valued empty, a sorted set's with the
//! score, a hash's with the field's value after a compact hash's insertion ordinal, see
//! `field_order.rs`): membership is a point read of it, a listing walks them in hash order,
//! and an add or a removal writes one record ([`members_in_picks`]).
//!
//! The hash space of a collection of `n` members is cut into `B = ⌈n / 8⌉` equal *buckets*
//! (bucket `⌊h · B / 2^64⌋` for hash `h`), so a bucket holds at most 8 members on average.
//! One pick:
//!
//! 1. choose a bucket uniformly at random and read it (one short range read);
//! 2. it holds `k` members: accept it with probability `k / CAP` (`CAP = 32`), else go to 1;
//! 3. return one of its `k` members chosen uniformly.
//!
//! A member in a bucket of `k` is returned by one round with probability
//! `(1/B) · (k/CAP) · (1/k) = 1 / (B · CAP)`, the same for every member, so the pick is exactly
//! uniform as long as no bucket holds more than `CAP` members. The hash is seeded with a secret
//! kept in the database (clients cannot aim members at one bucket), so bucket sizes are
//! binomial with mean at most 8: the chance that a given bucket exceeds 32 is below 4e-10 (a
//! Chernoff bound, `e^-8 · (8e/33)^33`; a set of a million members has 125,000 buckets, so
//! the chance that any of them does is below 5e-5). Such a bucket is accepted with probability 1, so only
//! its own members would be picked slightly less often. A round is accepted with probability
//! `(n/B)/CAP`, about 1/4, so a pick costs about four short range reads (≈ 28 records: a round
//! stops at the member it takes) whatever `n` is. Collections under 64 members, and requests
//! for more than `n/32` members, read every pick record once instead (exact). Buckets of mean
//! 16 with `CAP = 64` cost a third more per pick (measured: SPOP draining a 63K-member set,
//! 29 against 22 µs of CPU); mean 4 with `CAP = 22`, or 16 with 48, cost the same as 8 with 32.
//!
//! Removed members leave tombstones in the buckets that later reads step over; the collection
//! is rewritten under a fresh incarnation once removals outnumber twice its members (see
//! [`super::View::rebuild_into`]), so a bucket never holds more than a few times its live
//! members, and the engine's deletion-triggered compaction removes the rest.

use std::collections::HashSet;
use std::ops::Bound;

use bytes::Bytes;
use rand::Rng;

use super::collection::prefix_end;
use super::{Header, KeyType, Meta, View};

/// Collections smaller than this are sampled by reading all their pick records.
const SMALL: u64 = 64;
/// Members per bucket on average (at most; the bucket count is rounded up).
const MEAN: u64 = 8;
/// The acceptance denominator.
const CAP: usize = 32;
/// Rounds before a pick gives up on buckets and reads everything (only a damaged index gets
/// there: a round succeeds with probability ≥ 1/5, as buckets average 7–8 members).
const MAX_ROUNDS: usize = 1000;

/// The seeded hash that places `member` in the pick index.
pub(super) fn member_hash(seed: u64, member: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(member, seed)
}

/// The prefix of every pick record of incarnation `uid` in `pdb`.
pub(super) fn pick_prefix(pdb: u16, uid: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(19);
    k.push(b'R');
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// The pick record key of `member`.
pub(super) fn pick_key(pdb: u16, uid: u64, seed: u64, member: &[u8]) -> Vec<u8> {
    let mut k = pick_prefix(pdb, uid);
    k.extend_from_slice(&member_hash(seed, member).to_be_bytes());
    k.extend_from_slice(member);
    k
}

/// Whether the members of a collection of `kind` live in their pick records, with no element
/// records: a set's (value empty), a sorted set's (value: the score, see `scores.rs`) and a
/// hash's (value: the field's value, after a compact hash's insertion ordinal, see
/// `field_order.rs`).
pub fn members_in_picks(kind: KeyType) -> bool {
    matches!(kind, KeyType::Set | KeyType::ZSet | KeyType::Hash)
}

/// Picks from one collection.
struct Sampler<'v, 'a> {
    view: &'v View<'a>,
    prefix: Vec<u8>,
    count: u64,
    /// One engine cursor reused by every bucket read (none inside a transaction).
    cursor: Option<lsm::DbIterator>,
}

impl Sampler<'_, '_> {
    /// Calls `visit` with the pick-record key of each member whose record lies in
    /// `[start, end)`, in a fixed order, until it returns false.
    fn walk(&mut self, start: Vec<u8>, end: Vec<u8>, mut visit: impl FnMut(&[u8]) -> bool) -> lsm::Result<()> {
        // Inside a transaction (a combined write group too) its buffered writes lie over the
        // engine's records: deleted pick records are hidden, added ones join.
        let overlay = self.view.buffered_in(&start, &end);
        let it = self.cursor.get_or_insert_with(|| self.view.engine_cursor());
        it.set_bounds(Bound::Included(start.clone()), Bound::Excluded(end));
        it.seek(&start)?;
        while it.valid() {
            if !overlay.as_ref().is_some_and(|o| o.hides(it.key())) && !visit(it.key()) {
                return Ok(());
            }
            it.next()?;
        }
        it.status()?;
        if let Some(o) = overlay {
            for (k, _) in o.writes.iter().filter(|(_, put)| *put) {
                if !visit(k) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The member a pick-record key names (`skip`: the length of the prefix and hash).
    fn member(key: &[u8], skip: usize) -> Bytes {
        Bytes::copy_from_slice(&key[skip.min(key.len())..])
    }

    /// The members whose pick records lie in `[start, end)`.
    fn read(&mut self, start: Vec<u8>, end: Vec<u8>) -> lsm::Result<Vec<Bytes>> {
        let (skip, mut out) = (self.prefix.len() + 8, Vec::new());
        self.walk(start, end, |k| {
            out.push(Self::member(k, skip));
            true
        })?;
        Ok(out)
    }

    /// The `j`-th member (from 0) of those whose pick records lie in `[start, end)`, if there
    /// are more than `j`: nothing is copied but that member.
    fn nth(&mut self, start: Vec<u8>, end: Vec<u8>, j: usize) -> lsm::Result<Option<Bytes>> {
        let (skip, mut seen, mut found) = (self.prefix.len() + 8, 0, None);
        self.walk(start, end, |k| {
            if seen == j {
                found = Some(Self::member(k, skip));
                return false;
            }
            seen += 1;
            true
        })?;
        Ok(found)
    }

    fn all(&mut self) -> lsm::Result<Vec<Bytes>> {
        self.read(self.prefix.clone(), prefix_end(&self.prefix))
    }

    /// One member, uniformly (see the module docs); `None` only if the index is empty.
    ///
    /// A round draws `j` uniformly from `0..CAP` and takes the bucket's `j`-th member if it
    /// has one: with `k` members that happens with probability `k / CAP`, and then `j` is
    /// uniform over `0..k` — the module's acceptance rule and uniform choice in one draw, read
    /// without copying the members passed over.
    fn one(&mut self, rng: &mut impl Rng) -> lsm::Result<Option<Bytes>> {
        let buckets = self.count.div_ceil(MEAN).max(1);
        for _ in 0..MAX_ROUNDS {
            let bucket = rng.random_range(0..buckets);
            let start = self.bucket_start(bucket, buckets);
            let end =
                if bucket + 1 < buckets { self.bucket_start(bucket + 1, buckets) } else { prefix_end(&self.prefix) };
            if let Some(member) = self.nth(start, end, rng.random_range(0..CAP))? {
                return Ok(Some(member));
            }
        }
        tracing::warn!(target: "shale::storage", count = self.count, "random pick found no bucket; reading every pick record");
        let all = self.all()?;
        Ok((!all.is_empty()).then(|| all[rng.random_range(0..all.len())].clone()))
    }

    /// The first pick-record key of `bucket` of `buckets`: hashes `h` with
    /// `⌊h · buckets / 2^64⌋ = bucket` start at `⌈bucket · 2^64 / buckets⌉`.
    fn bucket_start(&self, bucket: u64, buckets: u64) -> Vec<u8> {
        let first = ((u128::from(bucket) << 64).div_ceil(u128::from(buckets))) as u64;
        let mut k = self.prefix.clone();
        k.extend_from_slice(&first.to_be_bytes());
        k
    }

    /// Whether reading every record is cheaper than `n` bucket picks.
    fn read_all_for(&self, n: usize) -> bool {
        self.count < SMALL || (n as u64).saturating_mul(CAP as u64) >= self.count
    }
}

impl<'a> View<'a> {
    /// The value of `member` of the set or sorted set incarnation `uid` (see
    /// [`members_in_picks`]).
    pub fn member(&self, uid: u64, member: &[u8]) -> lsm::Result<Option<Bytes>> {
        self.raw_get(&pick_key(self.pdb(), uid, self.storage.pick_seed(), member))
    }

    /// Adds a member of a set or sorted set with `value` (a new one, or a new value) to `batch`.
    pub fn add_member(&self, batch: &mut lsm::WriteBatch, uid: u64, member: &[u8], value: &[u8]) {
        batch.put(pick_key(self.pdb(), uid, self.storage.pick_seed(), member), value);
    }

    /// Adds removing `member` of a set or sorted set to `batch`.
    pub fn remove_member(&self, batch: &mut lsm::WriteBatch, uid: u64, member: &[u8]) {
        batch.delete(pick_key(self.pdb(), uid, self.storage.pick_seed(), member));
    }

    /// The `(member, value)` pairs of the set or sorted set incarnation `uid` in pick order
    /// (the order of their seeded hashes: no order a client can rely on, like Redis's hash
    /// tables), from `from` on.
    pub fn members(&self, uid: u64, from: Bound<&[u8]>) -> super::collection::ElementIter<'a> {
        let prefix = pick_prefix(self.pdb(), uid);
        let seed = self.storage.pick_seed();
        let start = match from {
            Bound::Included(m) => Bound::Included(pick_key(self.pdb(), uid, seed, m)),
            Bound::Excluded(m) => Bound::Excluded(pick_key(self.pdb(), uid, seed, m)),
            Bound::Unbounded => Bound::Included(prefix.clone()),
        };
        let skip = prefix.len() + 8;
        super::collection::ElementIter::new(self.raw_range(start, Bound::Excluded(prefix_end(&prefix))), skip)
    }

    fn sampler(&self, meta: &Meta) -> Sampler<'_, '_> {
        Sampler { view: self, prefix: pick_prefix(self.pdb(), meta.uid), count: Header::of(meta).count, cursor: None }
    }

    /// One member of the collection `meta`, uniformly at random (`None` if it is empty).
    pub fn random_member(&self, meta: &Meta) -> lsm::Result<Option<Bytes>> {
        self.random_member_with(meta, &mut rand::rng())
    }

    /// `n` distinct members chosen uniformly (every member when `n` ≥ the count), in random
    /// order.
    pub fn random_distinct(&self, meta: &Meta, n: usize) -> lsm::Result<Vec<Bytes>> {
        self.random_distinct_with(meta, n, &mut rand::rng())
    }

    /// `n` members chosen uniformly and independently (repeats allowed).
    pub fn random_with_repeats(&self, meta: &Meta, n: usize) -> lsm::Result<Vec<Bytes>> {
        self.random_with_repeats_with(meta, n, &mut rand::rng())
    }

    fn random_member_with(&self, meta: &Meta, rng: &mut impl Rng) -> lsm::Result<Option<Bytes>> {
        let mut s = self.sampler(meta);
        if s.read_all_for(1) {
            let all = s.all()?;
            return Ok((!all.is_empty()).then(|| all[rng.random_range(0..all.len())].clone()));
        }
        s.one(rng)
    }

    fn random_distinct_with(&self, meta: &Meta, n: usize, rng: &mut impl Rng) -> lsm::Result<Vec<Bytes>> {
        let mut s = self.sampler(meta);
        if s.read_all_for(n) {
            let all = s.all()?;
            let n = n.min(all.len());
            return Ok(rand::seq::index::sample(rng, all.len(), n).into_iter().map(|i| all[i].clone()).collect());
        }
        // n < count / CAP here, so a repeat is rare, and rejecting repeats keeps the subset uniform.
        let mut seen = HashSet::with_capacity(n);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(m) = s.one(rng)? else { break };
            if seen.insert(m.clone()) {
                out.push(m);
            }
        }
        Ok(out)
    }

    fn random_with_repeats_with(&self, meta: &Meta, n: usize, rng: &mut impl Rng) -> lsm::Result<Vec<Bytes>> {
        let mut s = self.sampler(meta);
        if s.read_all_for(n) {
            let all = s.all()?;
            if all.is_empty() {
                return Ok(Vec::new());
            }
            return Ok((0..n).map(|_| all[rng.random_range(0..all.len())].clone()).collect());
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match s.one(rng)? {
                Some(m) => out.push(m),
                None => break,
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::storage::{ExecContext, KeyType, Storage};

    /// A storage whose pick seed is fixed, holding a set of `n` members `m0…`.
    fn set_of(dir: &std::path::Path, n: usize) -> (Storage, ExecContext, Meta) {
        let db = lsm::Db::open(dir, lsm::Options::default()).unwrap();
        db.put(super::super::LAYOUT_KEY, super::super::layout_record(super::super::LAYOUT_VERSION, 42)).unwrap();
        let s = Storage::new(db).unwrap();
        let cx = ExecContext::new();
        let meta = {
            let v = s.view(&cx, 0);
            let mut b = lsm::WriteBatch::new();
            let mut meta = v.create(&mut b, b"s", KeyType::Set);
            for i in 0..n {
                v.add_member(&mut b, meta.uid, format!("m{i}").as_bytes(), b"");
            }
            meta.body = Header { count: n as u64, ..Header::default() }.body(KeyType::Set);
            v.put_meta(&mut b, b"s", &meta);
            s.write(&cx, b).unwrap();
            meta
        };
        (s, cx, meta)
    }

    fn index(m: &[u8]) -> usize {
        std::str::from_utf8(&m[1..]).unwrap().parse().unwrap()
    }

    /// Pearson's chi-square of `counts` against a uniform expectation.
    fn chi_square(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let expected = total as f64 / counts.len() as f64;
        counts.iter().map(|&c| (c as f64 - expected).powi(2) / expected).sum()
    }

    /// The chi-square value no uniform sampler exceeds but with probability ~1e-6
    /// (k - 1 degrees of freedom: mean k - 1, standard deviation sqrt(2(k - 1))).
    fn limit(k: usize) -> f64 {
        let dof = (k - 1) as f64;
        dof + 5.0 * (2.0 * dof).sqrt()
    }

    #[test]
    fn single_picks_are_uniform_over_buckets() {
        let dir = tempfile::tempdir().unwrap();
        let n = 1000;
        let (s, cx, meta) = set_of(dir.path(), n);
        let v = s.view(&cx, 0);
        let mut rng = StdRng::seed_from_u64(7);
        let mut counts = vec![0u64; n];
        for _ in 0..100_000 {
            counts[index(&v.random_member_with(&meta, &mut rng).unwrap().unwrap())] += 1;
        }
        let chi = chi_square(&counts);
        assert!(chi < limit(n), "chi-square {chi:.0} over {} for single picks", limit(n));
        assert!(counts.iter().all(|&c| c > 0), "every member is picked");
    }

    #[test]
    fn counted_picks_are_uniform_distinct_or_repeated_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let n = 2000;
        let (s, cx, meta) = set_of(dir.path(), n);
        let v = s.view(&cx, 0);
        let mut rng = StdRng::seed_from_u64(11);
        // 20 of 2000: bucket picks with repeats rejected.
        let mut counts = vec![0u64; n];
        for _ in 0..5000 {
            let picks = v.random_distinct_with(&meta, 20, &mut rng).unwrap();
            let distinct: HashSet<_> = picks.iter().collect();
            assert_eq!((picks.len(), distinct.len()), (20, 20));
            for m in picks {
                counts[index(&m)] += 1;
            }
        }
        assert!(chi_square(&counts) < limit(n), "distinct picks: chi-square {:.0}", chi_square(&counts));
        // Repeats allowed: bucket picks, and reading everything for a large count.
        for count in [20, 5000] {
            let mut counts = vec![0u64; n];
            for _ in 0..(100_000 / count) {
                let picks = v.random_with_repeats_with(&meta, count, &mut rng).unwrap();
                assert_eq!(picks.len(), count);
                for m in picks {
                    counts[index(&m)] += 1;
                }
            }
            assert!(chi_square(&counts) < limit(n), "repeated picks of {count}: chi-square {:.0}", chi_square(&counts));
        }
        // More than the set holds: all of it, once each.
        let all = v.random_distinct_with(&meta, n + 5, &mut rng).unwrap();
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), n);
    }

    #[test]
    fn picks_inside_a_transaction_see_its_buffered_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (s, cx, meta) = set_of(dir.path(), 2000);
        cx.begin_transaction();
        let v = s.view(&cx, 0);
        let mut b = lsm::WriteBatch::new();
        for i in 0..1000 {
            v.remove_member(&mut b, meta.uid, format!("m{i}").as_bytes());
        }
        for i in 2000..2100 {
            v.add_member(&mut b, meta.uid, format!("m{i}").as_bytes(), b"");
        }
        s.write(&cx, b).unwrap();
        assert!(cx.in_transaction(), "the writes are buffered, not committed");
        let meta = Meta { body: Header { count: 1100, ..Header::default() }.body(KeyType::Set), ..meta };
        let live: HashSet<usize> = (1000..2100).collect();
        let mut added = 0;
        for _ in 0..500 {
            let i = index(&v.random_member(&meta).unwrap().unwrap());
            assert!(live.contains(&i), "picked m{i}, which the transaction removed");
            added += usize::from(i >= 2000);
        }
        assert!(added > 0, "members the transaction added are picked too");
        let all: HashSet<usize> = v.random_distinct(&meta, 5000).unwrap().iter().map(|m| index(m)).collect();
        assert_eq!(all, live);
        cx.finish_transaction();
    }

    #[test]
    fn small_sets_and_empty_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (s, cx, meta) = set_of(dir.path(), 10);
        let v = s.view(&cx, 0);
        let mut rng = StdRng::seed_from_u64(3);
        let mut counts = vec![0u64; 10];
        for _ in 0..20_000 {
            counts[index(&v.random_member_with(&meta, &mut rng).unwrap().unwrap())] += 1;
        }
        assert!(chi_square(&counts) < limit(10));
        let empty = Meta { uid: meta.uid + 1000, ..meta.clone() };
        let empty = Meta { body: Header::default().body(KeyType::Set), ..empty };
        assert_eq!(v.random_member_with(&empty, &mut rng).unwrap(), None);
        assert!(v.random_with_repeats_with(&empty, 5, &mut rng).unwrap().is_empty());
    }

    /// The test above has the power to catch a biased sampler: "the member after a random
    /// point of the hash ring" favours members after wide gaps, and fails it by far.
    #[test]
    fn the_chi_square_check_catches_a_gap_biased_sampler() {
        let n = 1000;
        let mut ring: Vec<u64> = (0..n).map(|i| member_hash(42, format!("m{i}").as_bytes())).collect();
        ring.sort_unstable();
        let mut rng = StdRng::seed_from_u64(5);
        let mut counts = vec![0u64; n];
        for _ in 0..100_000 {
            let point: u64 = rng.random();
            let i = ring.partition_point(|&h| h < point) % n;
            counts[i] += 1;
        }
        assert!(chi_square(&counts) > 10.0 * limit(n), "chi-square {:.0}", chi_square(&counts));
    }
}
