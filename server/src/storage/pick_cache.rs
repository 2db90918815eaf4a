//! The members of collections that random picks hit often, held in memory.
//!
//! A pick from the pick index (see `picks/mod.rs`) costs about four short range reads, however
//! large the collection: SPOP draining a 100,000-member set spent ~10 µs of CPU per pop there.
//! A collection picked from again and again gets its members read once into a vector here, and
//! every later pick is an index into it: exactly uniform (an index drawn uniformly), and a pop
//! is a `swap_remove`.
//!
//! **When a collection is cached.** Reading every member costs about what `count / 8` bucket
//! reads cost, so a collection is read in only once the bucket reads made for its picks since
//! its last reading (or the server's start) have cost that much: the reading at most doubles
//! what the picks cost anyway (the ski-rental rule), and a collection picked from once or
//! twice is never read whole. A command running on a connection's thread (memory-only mode)
//! that finds a reading due is run again on an executor thread, which reads. Collections
//! under `SMALL` members are read whole by every pick anyway and are not cached; nor are those
//! whose entry would pass [`MAX_ENTRY_BYTES`]. The whole cache holds at most [`CACHE_BYTES`]:
//! the entries used least recently go first. A SPOP that rewrites its set under a fresh
//! incarnation (see `rebuild.rs`) drops the old incarnation's entry, and the new one is read in
//! once its own picks pay for it.
//!
//! **Why an entry is the engine's state.** An entry holds the members of one incarnation
//! `(physical db, uid)`:
//! - it is read in only by a command holding the key's stripe (after the stripe's queued
//!   writes settled), outside memory-only mode and snapshots, and with nothing buffered for
//!   the collection's pick records if it runs in a transaction or a write group: so at the
//!   engine's latest state, which is also what the command sees;
//! - every write looks at its batch: a commit before its write is visible
//!   ([`PickCache::written`]), a transaction or write group when it buffers one
//!   ([`PickCache::buffered`]). A write of an incarnation's pick records drops its entry, so
//!   does a write of its key's metadata that deletes the key or names another incarnation
//!   (DEL, RENAME, a rewrite under a fresh incarnation: nothing would ask for the entry
//!   again), and a range delete (FLUSHDB, FLUSHALL) drops them all. Writers of a key's records hold its
//!   stripe, so none runs while an entry is read in; the writers that hold no stripe (a
//!   replica applying its primary's batches, a full sync, a rewind) move an epoch, and an
//!   entry read in across a move is not kept;
//! - a pop (SPOP, holding the stripe) removes its members from the entry and notes them as
//!   *popped*: the pick record deletes it then writes are expected, and their commit consumes
//!   them. Until then the entry answers only pops (the popping command's transaction, or a
//!   later command under the same stripe, sees the pops too); read-only picks, which hold no
//!   stripe, leave it alone;
//! - an entry is used only while the engine's count of failed write groups is what it was
//!   when the entry was read in (a failed commit may have lost a pop), and only if it holds
//!   as many members as the collection's metadata counts as the command sees it (a pop whose
//!   buffered write was thrown away, or a rolled-back attempt, leaves one member fewer).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

/// Bytes the cache holds at most (members and their handles).
pub const CACHE_BYTES: usize = 64 << 20;
/// Bytes one entry may take: a larger collection is sampled from its pick index only.
pub const MAX_ENTRY_BYTES: usize = CACHE_BYTES / 4;
/// What one member's handle costs beside its bytes.
const PER_MEMBER: usize = std::mem::size_of::<Bytes>();
/// Collections whose pick counts are remembered before the counts are forgotten.
const MAX_COUNTED: usize = 4096;

/// An incarnation: physical database and uid.
pub(super) type Id = (u16, u64);

/// The members of one incarnation (see the module docs).
#[derive(Debug)]
struct Members {
    members: Vec<Bytes>,
    /// The collection's metadata record key (`'M' | db | key`).
    meta_key: Vec<u8>,
    /// Members popped whose removal no commit has written yet: a pick record delete of one of
    /// them is expected, any other write of the incarnation's pick records drops the entry. (A
    /// set: a write group of SPOPs looks up each delete here, once when it is buffered and
    /// once when it commits.)
    popped: HashSet<Bytes>,
    /// The engine's failed write groups when the entry was made.
    failures: u64,
    bytes: usize,
    used: u64,
}

impl Members {
    /// The entry answers for a collection of `count` members while the engine has seen
    /// `failures` failed write groups.
    fn answers(&self, count: u64, failures: u64) -> bool {
        // Empty (every member popped, the commit not seen yet): nothing to pick from.
        self.failures == failures && self.members.len() as u64 == count && count > 0
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Id, Members>,
    /// The entry of each cached collection's metadata record key.
    owners: HashMap<Vec<u8>, Id>,
    /// Pick rounds made from each collection not cached (see the module docs).
    counted: HashMap<Id, u64>,
    bytes: usize,
    clock: u64,
}

/// The cache (see the module docs).
#[derive(Debug, Default)]
pub(super) struct PickCache {
    inner: Mutex<Inner>,
    /// Moved by every write that holds no stripe and by [`PickCache::clear`].
    epoch: AtomicU64,
    /// The cache holds an entry: writes look at their batches only then.
    live: AtomicBool,
}

impl PickCache {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current epoch, read before an entry is read in.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Counts `rounds` pick rounds from `id`, a collection of `count` members; true once they
    /// paid for reading it whole (and it is small enough to keep).
    pub(super) fn count_rounds(&self, id: Id, count: u64, rounds: u64) -> bool {
        if count.saturating_mul(PER_MEMBER as u64) > MAX_ENTRY_BYTES as u64 {
            return false;
        }
        let mut inner = self.inner();
        if inner.entries.contains_key(&id) {
            return false;
        }
        if inner.counted.len() >= MAX_COUNTED && !inner.counted.contains_key(&id) {
            inner.counted.clear();
        }
        let n = inner.counted.entry(id).or_default();
        *n += rounds;
        // A round reads ~8 records (an accepted one about half of that); reading every member
        // reads `count` records.
        n.saturating_mul(8) >= count
    }

    /// The members of `id` are being read in: the rounds that paid for it are spent (whether
    /// or not the entry is then kept).
    pub(super) fn reading(&self, id: Id) {
        self.inner().counted.remove(&id);
    }

    /// Runs `f` on the members of `id` if they are cached, with no pop pending, for a
    /// collection of `count` members while the engine has seen `failures` failed write groups.
    pub(super) fn with<R>(&self, id: Id, count: u64, failures: u64, f: impl FnOnce(&[Bytes]) -> R) -> Option<R> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        let mut inner = self.inner();
        if !inner.entries.get(&id)?.popped.is_empty() {
            // The pops are this command's own (in its transaction) or not committed yet.
            return None;
        }
        let entry = self.answering(&mut inner, id, count, failures)?;
        Some(f(&entry.members))
    }

    /// The entry of `id`, marked used, if it answers (see [`PickCache::with`]); one that does
    /// not is dropped.
    fn answering<'i>(&self, inner: &'i mut Inner, id: Id, count: u64, failures: u64) -> Option<&'i mut Members> {
        if !inner.entries.get(&id)?.answers(count, failures) {
            self.remove(inner, id);
            return None;
        }
        inner.clock += 1;
        let clock = inner.clock;
        let entry = inner.entries.get_mut(&id)?;
        entry.used = clock;
        Some(entry)
    }

    /// Pops the members at the indexes `pick` chooses (given how many there are) from the
    /// cached members of `id` (see [`PickCache::with`] for `count` and `failures`) and
    /// returns them; their pick record deletes are then expected. The caller holds the key's
    /// stripe and writes those deletes.
    pub(super) fn pop(
        &self,
        id: Id,
        count: u64,
        failures: u64,
        pick: impl FnOnce(usize) -> Vec<usize>,
    ) -> Option<Vec<Bytes>> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        let mut inner = self.inner();
        let entry = self.answering(&mut inner, id, count, failures)?;
        let mut picked = pick(entry.members.len());
        let out: Vec<Bytes> = picked.iter().map(|&i| entry.members[i].clone()).collect();
        // From the highest index down, each removal moves only an element not picked.
        picked.sort_unstable_by(|a, b| b.cmp(a));
        for i in picked {
            entry.members.swap_remove(i);
        }
        entry.popped.extend(out.iter().cloned());
        Some(out)
    }

    /// Keeps `members`, read in at the engine's latest state under the key's stripe, as the
    /// members of `id`, the collection whose metadata record is `meta_key`; the epoch was
    /// `epoch` before the reading began.
    pub(super) fn keep(&self, id: Id, meta_key: Vec<u8>, members: Vec<Bytes>, failures: u64, epoch: u64) {
        let bytes = members.iter().map(|m| m.len() + PER_MEMBER).sum::<usize>();
        if bytes > MAX_ENTRY_BYTES {
            return;
        }
        let mut inner = self.inner();
        if self.epoch() != epoch {
            return;
        }
        self.remove(&mut inner, id);
        if let Some(other) = inner.owners.get(&meta_key).copied() {
            self.remove(&mut inner, other);
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.bytes += bytes;
        inner.owners.insert(meta_key.clone(), id);
        inner.entries.insert(id, Members { members, meta_key, popped: HashSet::new(), failures, bytes, used });
        if inner.bytes > CACHE_BYTES {
            // The least recently used first, down to three quarters of the budget.
            let mut by_use: Vec<(u64, Id)> = inner.entries.iter().map(|(id, e)| (e.used, *id)).collect();
            by_use.sort_unstable();
            for (_, old) in by_use {
                if inner.bytes <= CACHE_BYTES / 4 * 3 {
                    break;
                }
                self.remove(&mut inner, old);
            }
        }
        self.live.store(!inner.entries.is_empty(), Ordering::Release);
    }

    fn remove(&self, inner: &mut Inner, id: Id) {
        if let Some(entry) = inner.entries.remove(&id) {
            inner.bytes -= entry.bytes;
            inner.owners.remove(&entry.meta_key);
        }
        self.live.store(!inner.entries.is_empty(), Ordering::Release);
    }

    /// A commit of `batch`, before its write is visible: drops the entries of the
    /// incarnations whose pick records it writes (all of them for a range delete), except for
    /// the expected deletes of popped members, which it consumes, and of the collections whose
    /// metadata it deletes or points at another incarnation (DEL, a rewrite under a fresh
    /// incarnation, RENAME): no later pick asks for those.
    pub(super) fn written(&self, batch: &lsm::WriteBatch) {
        self.look_at(batch, true);
    }

    /// A writer that holds no stripes (a replica applying its primary's batch) moves the epoch
    /// before its write and again once it is visible: nothing read in across it is kept.
    pub(super) fn move_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// `batch` buffered by a transaction (or a write group): as [`PickCache::written`], but
    /// the expected deletes stay expected until the commit.
    pub(super) fn buffered(&self, batch: &lsm::WriteBatch) {
        self.look_at(batch, false);
    }

    fn look_at(&self, batch: &lsm::WriteBatch, commit: bool) {
        if !self.live.load(Ordering::Acquire) {
            return;
        }
        let mut inner: Option<std::sync::MutexGuard<'_, Inner>> = None;
        for entry in batch.iter().flatten() {
            if entry.kind == lsm::key::ValueKind::RangeDelete {
                drop(inner);
                self.clear();
                return;
            }
            if entry.key.first() == Some(&b'M') {
                let inner = inner.get_or_insert_with(|| self.inner());
                let Some(id) = inner.owners.get(entry.key).copied() else { continue };
                let same = entry.kind == lsm::key::ValueKind::Put && meta_uid(entry.value) == Some(id.1);
                if !same {
                    self.remove(inner, id);
                }
                continue;
            }
            let Some(id) = pick_record_id(entry.key) else { continue };
            let inner = inner.get_or_insert_with(|| self.inner());
            let Some(cached) = inner.entries.get_mut(&id) else { continue };
            let member = &entry.key[PICK_KEY_HEAD..];
            let expected = cached.popped.contains(member);
            match (entry.kind, expected) {
                (lsm::key::ValueKind::Delete, true) => {
                    if commit {
                        cached.popped.remove(member);
                        if cached.popped.is_empty() && cached.members.is_empty() {
                            self.remove(inner, id);
                        }
                    }
                }
                _ => self.remove(inner, id),
            }
        }
    }

    /// Forgets everything (the keyspace was replaced, or a range delete).
    pub(super) fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let mut inner = self.inner();
        inner.entries.clear();
        inner.owners.clear();
        inner.counted.clear();
        inner.bytes = 0;
        self.live.store(false, Ordering::Release);
    }

    /// Bytes held, for `INFO memory`.
    pub(super) fn bytes(&self) -> usize {
        self.inner().bytes
    }
}

/// A pick record's key up to the member: `'R' | db u16 | uid u64 | hash u64`.
const PICK_KEY_HEAD: usize = 19;

/// The incarnation a metadata record's value names (`type u8 | expire_at_ms u64 | uid u64 | …`).
fn meta_uid(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(9..17)?.try_into().ok()?))
}

/// The incarnation a pick record belongs to (`'R' | db u16 | uid u64 | …`).
fn pick_record_id(key: &[u8]) -> Option<Id> {
    if key.len() < PICK_KEY_HEAD || key[0] != b'R' {
        return None;
    }
    Some((u16::from_be_bytes([key[1], key[2]]), u64::from_be_bytes(key[3..11].try_into().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(format!("m{i}"))).collect()
    }

    fn pick_key(pdb: u16, uid: u64, member: &[u8]) -> Vec<u8> {
        let mut k = vec![b'R'];
        k.extend_from_slice(&pdb.to_be_bytes());
        k.extend_from_slice(&uid.to_be_bytes());
        k.extend_from_slice(&7u64.to_be_bytes());
        k.extend_from_slice(member);
        k
    }

    #[test]
    fn an_entry_is_used_while_count_and_failures_match_and_dropped_by_writes_to_its_incarnation() {
        let cache = PickCache::default();
        let epoch = cache.epoch();
        cache.keep((0, 9), b"M\0\0s".to_vec(), members(100), 0, epoch);
        assert_eq!(cache.with((0, 9), 100, 0, |m| m.len()), Some(100));
        // Another incarnation's write leaves it; a write of one of its pick records drops it.
        let mut other = lsm::WriteBatch::new();
        other.put(pick_key(0, 10, b"x"), b"");
        other.put(b"M\0\0k", b"meta");
        cache.written(&other);
        assert_eq!(cache.with((0, 9), 100, 0, |m| m.len()), Some(100));
        let mut mine = lsm::WriteBatch::new();
        mine.delete(pick_key(0, 9, b"m3"));
        cache.written(&mine);
        assert_eq!(cache.with((0, 9), 100, 0, |m| m.len()), None);
        // A count or failure count that does not match drops the entry.
        cache.keep((0, 9), b"M\0\0s".to_vec(), members(100), 0, cache.epoch());
        assert_eq!(cache.with((0, 9), 99, 0, |m| m.len()), None);
        assert_eq!(cache.with((0, 9), 100, 0, |m| m.len()), None, "dropped, not kept for later");
        cache.keep((0, 9), b"M\0\0s".to_vec(), members(100), 0, cache.epoch());
        assert_eq!(cache.with((0, 9), 100, 1, |m| m.len()), None);
        // A range delete drops everything.
        cache.keep((1, 1), b"M\0\x01s".to_vec(), members(70), 0, cache.epoch());
        let mut flush = lsm::WriteBatch::new();
        flush.delete_range(b"M\x00\x01", b"M\x00\x02");
        cache.written(&flush);
        assert_eq!(cache.with((1, 1), 70, 0, |m| m.len()), None);
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn pops_wait_for_their_own_deletes_and_any_other_write_drops_the_entry() {
        let cache = PickCache::default();
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
        let popped = cache.pop((0, 1), 80, 0, |n| vec![5, n - 1]).expect("cached");
        assert_eq!(popped, vec![Bytes::from("m5"), Bytes::from("m79")]);
        assert_eq!(cache.with((0, 1), 78, 0, |_| ()), None, "read-only picks wait for the commit");
        // A transaction buffering the pops' deletes: still pending. Its commit consumes them.
        let mut pops = lsm::WriteBatch::new();
        pops.delete(pick_key(0, 1, b"m5"));
        pops.delete(pick_key(0, 1, b"m79"));
        cache.buffered(&pops);
        assert_eq!(cache.with((0, 1), 78, 0, |_| ()), None);
        assert_eq!(cache.pop((0, 1), 78, 0, |_| vec![0]), Some(vec![Bytes::from("m0")]), "later pops go on");
        let mut last = lsm::WriteBatch::new();
        last.delete(pick_key(0, 1, b"m0"));
        cache.written(&pops);
        cache.written(&last);
        let left = cache.with((0, 1), 77, 0, |m| m.to_vec()).expect("all pops committed");
        assert!(!left.iter().any(|m| ["m0", "m5", "m79"].contains(&std::str::from_utf8(m).unwrap())));
        // Any other write of the incarnation drops it, buffered or committed, a delete of a
        // member not popped too.
        for (commit, kind) in [(false, 0), (true, 0), (true, 1)] {
            cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
            let mut other = lsm::WriteBatch::new();
            if kind == 0 {
                other.put(pick_key(0, 1, b"new"), b"");
            } else {
                other.delete(pick_key(0, 1, b"m3"));
            }
            if commit {
                cache.written(&other);
            } else {
                cache.buffered(&other);
            }
            assert_eq!(cache.with((0, 1), 80, 0, |_| ()), None, "commit {commit}, kind {kind}");
        }
        // A pop whose write never came (a thrown-away transaction) leaves a count that no
        // longer matches: the next pop drops the entry.
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
        cache.pop((0, 1), 80, 0, |_| vec![1]).unwrap();
        assert_eq!(cache.pop((0, 1), 80, 0, |_| vec![1]), None);
        assert_eq!(cache.bytes(), 0);
        // Popping the last member: nothing is left to pick from, and the commit leaves nothing
        // behind.
        cache.keep((0, 2), b"M\0\0t".to_vec(), members(1), 0, cache.epoch());
        cache.pop((0, 2), 1, 0, |_| vec![0]).unwrap();
        assert_eq!(cache.pop((0, 2), 0, 0, |_| vec![0]), None);
        let mut gone = lsm::WriteBatch::new();
        gone.delete(pick_key(0, 2, b"m0"));
        cache.written(&gone);
        assert_eq!(cache.bytes(), 0);
    }

    /// A metadata value naming incarnation `uid`.
    fn meta_of(uid: u64) -> Vec<u8> {
        let mut v = vec![2u8];
        v.extend_from_slice(&0u64.to_le_bytes());
        v.extend_from_slice(&uid.to_le_bytes());
        v
    }

    #[test]
    fn a_collection_deleted_or_moved_to_another_incarnation_leaves_no_entry_behind() {
        let cache = PickCache::default();
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
        // A count update of the same incarnation (what every pop writes) keeps it.
        let mut same = lsm::WriteBatch::new();
        same.put(b"M\0\0s", meta_of(1));
        cache.written(&same);
        assert!(cache.with((0, 1), 80, 0, |_| ()).is_some());
        // A rewrite under a fresh incarnation, a DEL: dropped.
        let mut rewritten = lsm::WriteBatch::new();
        rewritten.put(b"M\0\0s", meta_of(2));
        cache.written(&rewritten);
        assert_eq!(cache.bytes(), 0);
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
        let mut deleted = lsm::WriteBatch::new();
        deleted.delete(b"M\0\0s");
        cache.buffered(&deleted);
        assert_eq!(cache.bytes(), 0);
        // Reading in another incarnation of the same key replaces the old one's entry.
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
        cache.keep((0, 3), b"M\0\0s".to_vec(), members(90), 0, cache.epoch());
        assert!(cache.with((0, 1), 80, 0, |_| ()).is_none());
        assert!(cache.with((0, 3), 90, 0, |_| ()).is_some());
    }

    #[test]
    fn what_was_read_in_across_an_unlocked_write_is_not_kept() {
        let cache = PickCache::default();
        let epoch = cache.epoch();
        cache.move_epoch();
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, epoch);
        assert_eq!(cache.with((0, 1), 80, 0, |_| ()), None);
        cache.keep((0, 1), b"M\0\0s".to_vec(), members(80), 0, cache.epoch());
        assert!(cache.with((0, 1), 80, 0, |_| ()).is_some());
        cache.clear();
        assert_eq!(cache.with((0, 1), 80, 0, |_| ()), None);
    }

    #[test]
    fn rounds_pay_for_a_reading_and_the_budget_evicts_the_least_recently_used() {
        let cache = PickCache::default();
        let rounds = (0..).take_while(|_| !cache.count_rounds((0, 1), 10_000, 1)).count() + 1;
        assert_eq!(rounds, 1250);
        assert!(!cache.count_rounds((0, 2), (MAX_ENTRY_BYTES / PER_MEMBER) as u64 + 1, 1 << 40), "too large to keep");
        // Entries of a quarter of the budget less a little: the fourth evicts the least used.
        let big = |tag: u8| (0..(MAX_ENTRY_BYTES / (PER_MEMBER + 64)) - 8).map(move |_| Bytes::from(vec![tag; 64]));
        for uid in 0..4 {
            cache.keep((0, uid), format!("M\0\0{uid}").into_bytes(), big(uid as u8).collect(), 0, cache.epoch());
        }
        let n = big(0).count() as u64;
        assert!(cache.with((0, 0), n, 0, |_| ()).is_some());
        cache.keep((0, 4), b"M\0\0four".to_vec(), big(4).collect(), 0, cache.epoch());
        assert!(cache.bytes() <= CACHE_BYTES);
        assert!(cache.with((0, 1), n, 0, |_| ()).is_none(), "the least recently used went first");
        assert!(cache.with((0, 0), n, 0, |_| ()).is_some(), "a recently used one stayed");
        assert!(cache.with((0, 4), n, 0, |_| ()).is_some());
    }
}
