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
//! A collection that picks hit again and again (SPOP draining a set) is read into memory once
//! its picks have cost about as much as reading it, and later picks index into that copy (see
//! `pick_cache.rs`).
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
use super::{Header, KeyType, Meta, Storage, View};

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
    super::record_key(b'R', pdb, uid, &[&member_hash(seed, member).to_be_bytes(), member])
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
    /// Bucket reads made, a whole reading counted as `count / MEAN` of them (what the pick
    /// cache weighs reading the collection in against, see `pick_cache.rs`).
    rounds: u64,
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
        self.rounds += self.count / MEAN;
        self.read(self.prefix.clone(), prefix_end(&self.prefix))
    }

    /// Every member, copied into one buffer that the handles share (what the pick cache keeps:
    /// one allocation, not one per member).
    fn all_packed(&mut self) -> lsm::Result<Vec<Bytes>> {
        let skip = self.prefix.len() + 8;
        let (mut buf, mut ends) = (Vec::new(), Vec::new());
        self.walk(self.prefix.clone(), prefix_end(&self.prefix), |k| {
            buf.extend_from_slice(&k[skip.min(k.len())..]);
            ends.push(buf.len());
            true
        })?;
        let buf = Bytes::from(buf);
        let mut start = 0;
        Ok(ends
            .into_iter()
            .map(|end| {
                let m = buf.slice(start..end);
                start = end;
                m
            })
            .collect())
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
            self.rounds += 1;
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
    pub fn members(&self, uid: u64, from: Bound<&[u8]>) -> super::elements::ElementIter<'a> {
        let prefix = pick_prefix(self.pdb(), uid);
        let seed = self.storage.pick_seed();
        let start = match from {
            Bound::Included(m) => Bound::Included(pick_key(self.pdb(), uid, seed, m)),
            Bound::Excluded(m) => Bound::Excluded(pick_key(self.pdb(), uid, seed, m)),
            Bound::Unbounded => Bound::Included(prefix.clone()),
        };
        let skip = prefix.len() + 8;
        super::elements::ElementIter::new(self.raw_range(start, Bound::Excluded(prefix_end(&prefix))), skip)
    }

    /// Calls `each(member, record value)` for each of the `count` members of `uid`, in pick
    /// order: what [`View::members`] yields, but borrowed from the engine's buffers rather than
    /// copied into a `Bytes` per key and value (SMEMBERS, HGETALL, … frame them straight into
    /// their replies), through [`View::walk_ranges`].
    pub fn each_member(&self, uid: u64, count: u64, mut each: impl FnMut(&[u8], &[u8])) -> lsm::Result<()> {
        let prefix = pick_prefix(self.pdb(), uid);
        let skip = prefix.len() + 8;
        if !self.cx.may_step(usize::try_from(count).unwrap_or(usize::MAX)) {
            return Err(lsm::Error::WouldBlock);
        }
        let end = prefix_end(&prefix);
        self.walk_ranges([(prefix, end)], |key, value| {
            each(key.get(skip..).unwrap_or_default(), value);
            true
        })
    }

    fn sampler(&self, meta: &Meta) -> Sampler<'_, '_> {
        Sampler {
            view: self,
            prefix: pick_prefix(self.pdb(), meta.uid),
            count: Header::of(meta).count,
            cursor: None,
            rounds: 0,
        }
    }

    /// One member of the collection `meta` (the value of `key`), uniformly at random (`None`
    /// if it is empty). `held`: the caller holds the key's stripe.
    pub fn random_member(&self, key: &[u8], meta: &Meta, held: bool) -> lsm::Result<Option<Bytes>> {
        self.random_member_with(key, meta, held, &mut rand::rng())
    }

    /// `n` distinct members chosen uniformly (every member when `n` ≥ the count), in random
    /// order.
    pub fn random_distinct(&self, key: &[u8], meta: &Meta, n: usize, held: bool) -> lsm::Result<Vec<Bytes>> {
        self.random_distinct_with(key, meta, n, held, &mut rand::rng())
    }

    /// `n` members chosen uniformly and independently (repeats allowed).
    pub fn random_with_repeats(&self, key: &[u8], meta: &Meta, n: usize, held: bool) -> lsm::Result<Vec<Bytes>> {
        self.random_with_repeats_with(key, meta, n, held, &mut rand::rng())
    }

    /// SPOP's pick: one member (`n` None) or `n` distinct ones, chosen as
    /// [`View::random_member`] and [`View::random_distinct`] do, from a collection whose key's
    /// stripe the caller holds and whose picked members' pick records it then deletes.
    pub fn pop_random(&self, key: &[u8], meta: &Meta, n: Option<usize>) -> lsm::Result<Vec<Bytes>> {
        let rng = &mut rand::rng();
        if self.cx.reads_latest_or_buffers() {
            self.count_picks(key, meta, 0, true)?;
            let failures = self.storage.engine.failed_write_groups();
            let pick = |len: usize| match n {
                None => vec![rng.random_range(0..len)],
                Some(n) => rand::seq::index::sample(&mut *rng, len, n.min(len)).into_vec(),
            };
            if let Some(picked) =
                self.storage.pick_cache.pop((self.pdb(), meta.uid), Header::of(meta).count, failures, pick)
            {
                return Ok(picked);
            }
        }
        // From the pick index. Its rounds count toward a reading, made by the next pop: one made
        // now would hold the members this pop deletes.
        let mut s = self.sampler(meta);
        let picked = match n {
            None => s.pick(rng)?.into_iter().collect(),
            Some(n) => s.distinct(n, rng)?,
        };
        if self.cx.reads_latest_or_buffers() {
            self.storage.pick_cache.count_rounds((self.pdb(), meta.uid), Header::of(meta).count, s.rounds);
        }
        Ok(picked)
    }

    /// `f` of the members of `meta` if the pick cache holds them and this command reads the
    /// engine's latest state.
    fn cached<R>(&self, meta: &Meta, f: impl FnOnce(&[Bytes]) -> R) -> Option<R> {
        if !self.cx.reads_latest_or_buffers() {
            return None;
        }
        let failures = self.storage.engine.failed_write_groups();
        self.storage.pick_cache.with((self.pdb(), meta.uid), Header::of(meta).count, failures, f)
    }

    /// Counts `rounds` more bucket reads from `meta`, and reads every member into the pick
    /// cache once those paid for it (see `pick_cache.rs`): under the key's stripe (taken here
    /// unless `held`), outside memory-only mode, transactions and snapshots.
    fn count_picks(&self, key: &[u8], meta: &Meta, rounds: u64, held: bool) -> lsm::Result<()> {
        let count = Header::of(meta).count;
        let id = (self.pdb(), meta.uid);
        if count < SMALL
            || !self.cx.reads_latest_or_buffers()
            || !self.storage.pick_cache.count_rounds(id, count, rounds)
        {
            return Ok(());
        }
        // Reading every member is far too long for a connection's thread: a memory-only attempt
        // is voided, and the command runs again on an executor thread, which reads.
        if self.cx.void_memory_only() {
            return Err(lsm::Error::WouldBlock);
        }
        // In a transaction, only a collection it has not written yet: the engine's state is
        // then what the command sees.
        let prefix = pick_prefix(self.pdb(), meta.uid);
        if self.buffered_in(&prefix, &prefix_end(&prefix)).is_some_and(|o| !o.is_empty()) {
            return Ok(());
        }
        self.storage.pick_cache.reading(id);
        // Inside a transaction (EXEC, a script) the command's keys are held already, and a
        // script must never wait for a stripe.
        let db = self.storage.logical(self.pdb());
        let _guard = (!held && !self.cx.in_transaction()).then(|| self.storage.lock(self.cx, db, [key]));
        if self.storage.logical(self.pdb()) != db {
            return Ok(()); // a SWAPDB moved the database while this waited for the stripe
        }
        let epoch = self.storage.pick_cache.epoch();
        let failures = self.storage.engine.failed_write_groups();
        let members = self.sampler(meta).all_packed()?;
        if members.len() as u64 == count {
            self.storage.pick_cache.keep(id, super::meta_key(self.pdb(), key), members, failures, epoch);
        }
        Ok(())
    }

    fn random_member_with<R: Rng>(
        &self,
        key: &[u8],
        meta: &Meta,
        held: bool,
        rng: &mut R,
    ) -> lsm::Result<Option<Bytes>> {
        let from_cache = |all: &[Bytes], rng: &mut R| Some(all[rng.random_range(0..all.len())].clone());
        self.pick_with(key, meta, held, rng, from_cache, |s, rng| s.pick(rng))
    }

    fn random_distinct_with<R: Rng>(
        &self,
        key: &[u8],
        meta: &Meta,
        n: usize,
        held: bool,
        rng: &mut R,
    ) -> lsm::Result<Vec<Bytes>> {
        let from_cache = |all: &[Bytes], rng: &mut R| {
            rand::seq::index::sample(rng, all.len(), n.min(all.len())).into_iter().map(|i| all[i].clone()).collect()
        };
        self.pick_with(key, meta, held, rng, from_cache, |s, rng| s.distinct(n, rng))
    }

    fn random_with_repeats_with<R: Rng>(
        &self,
        key: &[u8],
        meta: &Meta,
        n: usize,
        held: bool,
        rng: &mut R,
    ) -> lsm::Result<Vec<Bytes>> {
        let from_cache =
            |all: &[Bytes], rng: &mut R| (0..n).map(|_| all[rng.random_range(0..all.len())].clone()).collect();
        self.pick_with(key, meta, held, rng, from_cache, |s, rng| s.with_repeats(n, rng))
    }

    /// A read-only pick: `from_cache` of the cached members if the pick cache holds them, else
    /// `from_index` from the pick index, whose bucket reads then count toward reading the
    /// collection in (see [`View::count_picks`]).
    fn pick_with<R: Rng, T>(
        &self,
        key: &[u8],
        meta: &Meta,
        held: bool,
        rng: &mut R,
        from_cache: impl FnOnce(&[Bytes], &mut R) -> T,
        from_index: impl FnOnce(&mut Sampler<'_, '_>, &mut R) -> lsm::Result<T>,
    ) -> lsm::Result<T> {
        if let Some(picked) = self.cached(meta, |all| from_cache(all, &mut *rng)) {
            return Ok(picked);
        }
        let mut s = self.sampler(meta);
        let picked = from_index(&mut s, rng)?;
        self.count_picks(key, meta, s.rounds, held)?;
        Ok(picked)
    }
}

impl Sampler<'_, '_> {
    /// One member from the pick index (`None`: the collection is empty).
    fn pick(&mut self, rng: &mut impl Rng) -> lsm::Result<Option<Bytes>> {
        if self.read_all_for(1) {
            let all = self.all()?;
            return Ok((!all.is_empty()).then(|| all[rng.random_range(0..all.len())].clone()));
        }
        self.one(rng)
    }

    /// `n` distinct members from the pick index.
    fn distinct(&mut self, n: usize, rng: &mut impl Rng) -> lsm::Result<Vec<Bytes>> {
        if self.read_all_for(n) {
            let all = self.all()?;
            let n = n.min(all.len());
            return Ok(rand::seq::index::sample(rng, all.len(), n).into_iter().map(|i| all[i].clone()).collect());
        }
        // n < count / CAP here, so a repeat is rare, and rejecting repeats keeps the subset uniform.
        let mut seen = HashSet::with_capacity(n);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(m) = self.one(rng)? else { break };
            if seen.insert(m.clone()) {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// `n` members from the pick index, repeats allowed.
    fn with_repeats(&mut self, n: usize, rng: &mut impl Rng) -> lsm::Result<Vec<Bytes>> {
        if self.read_all_for(n) {
            let all = self.all()?;
            if all.is_empty() {
                return Ok(Vec::new());
            }
            return Ok((0..n).map(|_| all[rng.random_range(0..all.len())].clone()).collect());
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match self.one(rng)? {
                Some(m) => out.push(m),
                None => break,
            }
        }
        Ok(out)
    }
}

impl Storage {
    /// Bytes the pick cache holds (`INFO memory`).
    pub fn pick_cache_bytes(&self) -> usize {
        self.pick_cache.bytes()
    }
}

#[cfg(test)]
mod tests;
