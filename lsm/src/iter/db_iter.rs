//! The user-facing cursor: one entry per user key, as of a sequence number, without tombstones.
//!
//! The logic follows LevelDB's `DBIter`: moving forward, the inner cursor sits on the entry being
//! returned; moving backward, it sits just before all entries of the returned key, whose value is
//! kept in `saved_key` / `saved_value`.
//!
//! A cursor may carry bounds ([`DbIterator::set_bounds`], set by [`crate::Range`]): skipping
//! deleted entries stops at them, so a range whose keys are all deleted costs the entries inside
//! it, never a walk to the next live key of the whole database. Every internal entry examined
//! is counted in the engine's read counters (`Stats::iter_entries`, `Stats::iter_tombstones`).
//!
//! **Old versions cost at most a seek.** A key overwritten many times since the last flush
//! has all its versions next to each other in the memtable (newest first), and a cursor
//! stepping forward from the version it returns would otherwise pass every older one: a range
//! read over a hot counter, a bitmap segment rewritten by each SETBIT or a collection's
//! metadata would cost more with every write. As RocksDB's `max_sequential_skip_in_iterations`
//! does, once [`MAX_SEQUENTIAL_SKIPS`] entries of one user key have been passed over (fewer
//! when they are large: each [`SKIP_BYTES`] of an entry counts as one more, since large
//! versions lie in a table block each and every step loads one), the cursor seeks past the
//! rest of them instead (to the key's oldest possible internal key), and
//! past versions newer than its snapshot the same way (to the key's newest visible version).
//! Moving backward, once that many entries of one key have been collected, the key's newest
//! visible version is found with a forward seek and the cursor seeks back to before the key.
//! The seeks are counted in `Stats::iter_reseeks`.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{InternalIterator, MergingIterator};
use crate::cache::ReadCounters;
use crate::db::SuperVersion;
use crate::key::{self, ValueKind};
use crate::range_del::Tombstones;
use crate::snapshot::Snapshot;
use crate::{Error, Result};

/// Entries of one user key a cursor steps over before it seeks past the rest (see the module
/// docs; RocksDB's `max_sequential_skip_in_iterations` defaults to the same 8).
pub const MAX_SEQUENTIAL_SKIPS: usize = 8;

/// Bytes of an entry that count as one more step over it (see [`MAX_SEQUENTIAL_SKIPS`]).
pub const SKIP_BYTES: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// A cursor over the database as of one sequence number.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
/// db.put(b"a", b"1").unwrap();
/// db.put(b"b", b"2").unwrap();
/// let mut it = db.iter(&lsm::ReadOptions::default());
/// it.seek(b"a").unwrap();
/// assert_eq!((it.key(), it.value()), (&b"a"[..], &b"1"[..]));
/// it.next().unwrap();
/// assert_eq!(it.key(), b"b");
/// ```
pub struct DbIterator {
    iter: MergingIterator,
    seq: u64,
    /// Range tombstones visible at `seq`.
    tombstones: Tombstones,
    direction: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    /// The user key of the run of entries being stepped over (versions newer than the
    /// snapshot going forward; any entries going backward).
    run_key: Vec<u8>,
    status: Option<Error>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Since the last forward seek, whose target was below it, the upper bound has stayed put:
    /// every entry the merge stepped over since is below it.
    bounded_walk: bool,
    /// The upper bound such a walk ended under, kept when the bounds change: a seek at or
    /// past it moves only the sources behind the target ([`MergingIterator::seek_ahead`]), so
    /// a read of many ranges in key order (a GEOSEARCH's boxes, a sorted set's score spans)
    /// does not re-seek every source for each range.
    fence: Bound<Vec<u8>>,
    /// Entries examined, tombstones among them and seeks past old versions, not yet added to
    /// `counters`.
    entries_seen: u64,
    deleted_seen: u64,
    reseeks: u64,
    counters: Option<Arc<ReadCounters>>,
    // Keep the memtables and table files this cursor reads alive, and the snapshot registered.
    _sv: Option<Arc<SuperVersion>>,
    _snapshot: Option<Snapshot>,
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator").field("seq", &self.seq).field("valid", &self.valid).finish()
    }
}

impl DbIterator {
    pub(crate) fn new(
        iter: MergingIterator,
        seq: u64,
        tombstones: Tombstones,
        sv: Arc<SuperVersion>,
        snapshot: Option<Snapshot>,
        counters: Arc<ReadCounters>,
    ) -> Self {
        DbIterator {
            iter,
            seq,
            tombstones,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            run_key: Vec::new(),
            status: None,
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            bounded_walk: false,
            fence: Bound::Unbounded,
            entries_seen: 0,
            deleted_seen: 0,
            reseeks: 0,
            counters: Some(counters),
            _sv: Some(sv),
            _snapshot: snapshot,
        }
    }

    /// A cursor that could not be built; every positioning call returns `err`.
    pub(crate) fn failed(err: Error) -> Self {
        DbIterator {
            iter: MergingIterator::new(Vec::new()),
            seq: 0,
            tombstones: Tombstones::default(),
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            run_key: Vec::new(),
            status: Some(err),
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            bounded_walk: false,
            fence: Bound::Unbounded,
            entries_seen: 0,
            deleted_seen: 0,
            reseeks: 0,
            counters: None,
            _sv: None,
            _snapshot: None,
        }
    }

    /// Restricts the keys this cursor stops on to `lower..upper`: positioning and stepping
    /// past either bound leaves the cursor invalid instead of searching on for a live key, and
    /// a position asked for outside them is taken at the bound (`seek` below the lower bound
    /// seeks to it, `seek_to_last` is `seek_for_prev` of the upper bound, …).
    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        self.lower = lower;
        // The merge drops sources that pass the upper bound (see `MergingIterator`).
        self.iter.set_upper_bound(upper.clone());
        let old = std::mem::replace(&mut self.upper, upper);
        let walked = self.bounded_walk && self.direction == Direction::Forward && self.status.is_none();
        self.fence = if walked { old } else { Bound::Unbounded };
        self.bounded_walk = false;
    }

    /// True when a forward seek to the user key `target` may take the merge's `seek_ahead`.
    fn past_fence(&self, target: &[u8]) -> bool {
        self.direction == Direction::Forward
            && match &self.fence {
                Bound::Excluded(f) => target >= f.as_slice(),
                Bound::Included(f) => target > f.as_slice(),
                Bound::Unbounded => false,
            }
    }

    /// Forgets what a forward walk knew (any backward positioning).
    fn leave_walk(&mut self) {
        self.bounded_walk = false;
        self.fence = Bound::Unbounded;
    }

    fn below_upper(&self, k: &[u8]) -> bool {
        match &self.upper {
            Bound::Included(u) => key::compare_bytes(k, u).is_le(),
            Bound::Excluded(u) => key::compare_bytes(k, u).is_lt(),
            Bound::Unbounded => true,
        }
    }

    fn above_lower(&self, k: &[u8]) -> bool {
        match &self.lower {
            Bound::Included(l) => key::compare_bytes(k, l).is_ge(),
            Bound::Excluded(l) => key::compare_bytes(k, l).is_gt(),
            Bound::Unbounded => true,
        }
    }

    /// True when positioned on an entry.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current key. Panics if not [`valid`](Self::valid).
    pub fn key(&self) -> &[u8] {
        assert!(self.valid, "DbIterator::key on an invalid cursor");
        match self.direction {
            Direction::Forward => key::user_key(self.iter.key()),
            Direction::Reverse => &self.saved_key,
        }
    }

    /// The current value. Panics if not [`valid`](Self::valid).
    pub fn value(&self) -> &[u8] {
        assert!(self.valid, "DbIterator::value on an invalid cursor");
        match self.direction {
            Direction::Forward => self.iter.value(),
            Direction::Reverse => &self.saved_value,
        }
    }

    /// The current value as `Bytes`, sharing the memtable entry or table block it lives in when
    /// it can (no copy). Panics if not [`valid`](Self::valid).
    pub fn value_bytes(&self) -> bytes::Bytes {
        assert!(self.valid, "DbIterator::value_bytes on an invalid cursor");
        match self.direction {
            Direction::Forward => self.iter.value_bytes(),
            Direction::Reverse => bytes::Bytes::copy_from_slice(&self.saved_value),
        }
    }

    /// The error that stopped this cursor, if any.
    pub fn status(&self) -> Result<()> {
        self.status.as_ref().map_or(Ok(()), |e| Err(e.duplicate()))
    }

    /// Runs a positioning step; the first error sticks (the cursor stays failed).
    fn run(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        if let Some(e) = &self.status {
            return Err(e.duplicate());
        }
        let r = f(self);
        if let Err(e) = &r {
            self.valid = false;
            self.status = Some(e.duplicate());
        }
        r
    }

    /// Positions at the first key (the first at or past the lower bound).
    pub fn seek_to_first(&mut self) -> Result<()> {
        if !matches!(self.lower, Bound::Unbounded) {
            return self.seek(&[]);
        }
        self.run(|s| {
            s.direction = Direction::Forward;
            s.saved_key.clear();
            s.fence = Bound::Unbounded;
            s.bounded_walk = true;
            s.iter.seek_to_first()?;
            s.find_next_user_entry(false)
        })
    }

    /// Positions at the last key (the last below the upper bound).
    pub fn seek_to_last(&mut self) -> Result<()> {
        if let Bound::Included(u) | Bound::Excluded(u) = &self.upper {
            let u = u.clone();
            return self.seek_for_prev(&u);
        }
        self.run(|s| {
            s.direction = Direction::Reverse;
            s.saved_value.clear();
            s.leave_walk();
            s.iter.seek_to_last()?;
            s.find_prev_user_entry()
        })
    }

    /// Positions at the first key `>= target` (and within the lower bound).
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.run(|s| {
            // A target below the lower bound starts at the bound (past it, if excluded).
            let (ikey, past) = match &s.lower {
                Bound::Included(l) if target < l.as_slice() => (key::seek_key(l, s.seq), false),
                Bound::Excluded(l) if target <= l.as_slice() => (key::seek_key(l, s.seq), true),
                _ => (key::seek_key(target, s.seq), false),
            };
            let ahead = s.past_fence(key::user_key(&ikey));
            s.direction = Direction::Forward;
            s.saved_key.clear();
            if past {
                if let Bound::Excluded(l) = &s.lower {
                    s.saved_key.extend_from_slice(l);
                }
            }
            s.fence = Bound::Unbounded;
            s.bounded_walk = s.below_upper(key::user_key(&ikey));
            if ahead {
                s.iter.seek_ahead(&ikey)?;
            } else {
                s.iter.seek(&ikey)?;
            }
            s.find_next_user_entry(past)
        })
    }

    /// Positions at the last key `<= target` (and within the upper bound).
    pub fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.run(|s| {
            s.direction = Direction::Reverse;
            s.saved_value.clear();
            s.leave_walk();
            // The last internal key for a user key is its oldest version: sequence 0, kind
            // Delete; the one before all of an excluded bound's entries is its newest possible.
            let ikey = match &s.upper {
                Bound::Excluded(u) if target >= u.as_slice() => {
                    key::make_internal_key(u, key::MAX_SEQUENCE, ValueKind::MAX)
                }
                Bound::Included(u) if target > u.as_slice() => key::make_internal_key(u, 0, ValueKind::Delete),
                _ => key::make_internal_key(target, 0, ValueKind::Delete),
            };
            s.iter.seek_for_prev(&ikey)?;
            s.find_prev_user_entry()
        })
    }

    /// Moves to the next key.
    #[allow(clippy::should_implement_trait)] // a cursor step, not an `Iterator`; see `Db::range`
    pub fn next(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        self.run(|s| {
            if s.direction == Direction::Reverse {
                s.direction = Direction::Forward;
                s.leave_walk();
                // The inner cursor is just before the entries of `saved_key`: step into them; the
                // skipping below then passes them.
                if s.iter.valid() {
                    s.iter.next()?;
                } else {
                    s.iter.seek_to_first()?;
                }
            } else {
                s.saved_key.clear();
                s.saved_key.extend_from_slice(key::user_key(s.iter.key()));
                s.iter.next()?;
            }
            s.find_next_user_entry(true)
        })
    }

    /// Moves to the previous key.
    pub fn prev(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        self.run(|s| {
            s.leave_walk();
            if s.direction == Direction::Forward {
                // Step back past every entry of the current key (newer versions than the
                // snapshot's lie before it: past a few of them, seek).
                s.saved_key.clear();
                s.saved_key.extend_from_slice(key::user_key(s.iter.key()));
                let mut stepped = 0;
                loop {
                    stepped += s.step_cost();
                    if stepped > MAX_SEQUENTIAL_SKIPS {
                        s.reseeks += 1;
                        s.iter.seek_for_prev(&key::make_internal_key(
                            &s.saved_key,
                            key::MAX_SEQUENCE,
                            ValueKind::MAX,
                        ))?;
                    } else {
                        s.iter.prev()?;
                    }
                    if !s.iter.valid() {
                        s.valid = false;
                        s.saved_key.clear();
                        s.saved_value.clear();
                        return Ok(());
                    }
                    if key::compare_bytes(key::user_key(s.iter.key()), &s.saved_key).is_lt() {
                        break;
                    }
                }
                s.direction = Direction::Reverse;
            }
            s.find_prev_user_entry()
        })
    }

    /// A Put covered by a visible range tombstone reads as a Delete.
    fn effective_kind(tombstones: &mut Tombstones, kind: ValueKind, user_key: &[u8], seq: u64) -> ValueKind {
        if kind == ValueKind::Put && tombstones.covers(user_key, seq) {
            ValueKind::Delete
        } else {
            kind
        }
    }

    /// Forward: stops on the newest visible Put of a key not hidden by a newer tombstone or
    /// (when `skipping`) equal to `saved_key`. Past [`MAX_SEQUENTIAL_SKIPS`] entries of one key
    /// in a row (older versions of `saved_key`, or versions newer than the snapshot) it seeks
    /// past the rest of them.
    fn find_next_user_entry(&mut self, mut skipping: bool) -> Result<()> {
        // Older versions of `saved_key` passed over in a row, and newer versions of `run_key`.
        let (mut passed, mut newer) = (0, 0);
        while self.iter.valid() {
            let p = parsed(&self.iter)?;
            if !self.below_upper(p.user_key) {
                break;
            }
            self.entries_seen += 1;
            if p.seq > self.seq {
                passed = 0;
                newer = continue_run(&mut self.run_key, newer, p.user_key) + self.step_cost();
                if newer > MAX_SEQUENTIAL_SKIPS {
                    // To the key's newest version the snapshot sees.
                    self.reseek(&key::seek_key(&self.run_key, self.seq))?;
                    newer = 0;
                    continue;
                }
            } else {
                newer = 0;
                match Self::effective_kind(&mut self.tombstones, p.kind, p.user_key, p.seq) {
                    ValueKind::Delete => {
                        self.deleted_seen += 1;
                        if !(skipping && key::compare_bytes(p.user_key, &self.saved_key).is_eq()) {
                            self.saved_key.clear();
                            self.saved_key.extend_from_slice(p.user_key);
                            passed = 0;
                        }
                        skipping = true;
                        passed += self.step_cost();
                    }
                    ValueKind::Put => {
                        if !(skipping && key::compare_bytes(p.user_key, &self.saved_key).is_le()) {
                            self.valid = true;
                            self.saved_key.clear();
                            return Ok(());
                        }
                        passed += self.step_cost();
                    }
                    ValueKind::RangeDelete => {}
                }
                if passed > MAX_SEQUENTIAL_SKIPS {
                    // Past the key's oldest possible version.
                    self.reseek(&key::make_internal_key(&self.saved_key, 0, ValueKind::Delete))?;
                    passed = 0;
                    continue;
                }
            }
            self.iter.next()?;
        }
        self.saved_key.clear();
        self.valid = false;
        Ok(())
    }

    /// What stepping over the inner cursor's entry counts toward [`MAX_SEQUENTIAL_SKIPS`].
    #[inline]
    fn step_cost(&self) -> usize {
        1 + (self.iter.key().len() + self.iter.value().len()) / SKIP_BYTES
    }

    /// Moves the inner cursor forward to `target`, past entries not worth stepping over.
    fn reseek(&mut self, target: &[u8]) -> Result<()> {
        self.reseeks += 1;
        self.iter.seek(target)
    }

    /// Backward: collects the newest visible version of the key before the inner cursor.
    /// Past [`MAX_SEQUENTIAL_SKIPS`] entries of one key it finds that version with a forward
    /// seek instead, and seeks back to before the key.
    fn find_prev_user_entry(&mut self) -> Result<()> {
        let mut value_kind = ValueKind::Delete;
        // Entries of `run_key` stepped over in a row.
        let mut run = 0;
        while self.iter.valid() {
            let p = parsed(&self.iter)?;
            if p.seq <= self.seq && p.kind != ValueKind::RangeDelete {
                if value_kind != ValueKind::Delete && key::compare_bytes(p.user_key, &self.saved_key).is_lt() {
                    break; // the entries of `saved_key` are done; its newest version is saved
                }
                if !self.above_lower(p.user_key) {
                    break;
                }
                self.entries_seen += 1;
                value_kind = Self::effective_kind(&mut self.tombstones, p.kind, p.user_key, p.seq);
                if value_kind == ValueKind::Delete {
                    self.deleted_seen += 1;
                    self.saved_key.clear();
                    self.saved_value.clear();
                } else {
                    self.saved_key.clear();
                    self.saved_key.extend_from_slice(p.user_key);
                    self.saved_value.clear();
                    self.saved_value.extend_from_slice(self.iter.value());
                }
            }
            run = continue_run(&mut self.run_key, run, p.user_key) + self.step_cost();
            if run > MAX_SEQUENTIAL_SKIPS {
                // Versions newer than the snapshot of a key below the one saved end the walk
                // just as its first visible version would; so does a key below the bounds.
                if (value_kind != ValueKind::Delete && self.run_key < self.saved_key)
                    || !self.above_lower(&self.run_key)
                {
                    break;
                }
                value_kind = self.newest_visible_of_run_key()?;
                run = 0;
                continue;
            }
            self.iter.prev()?;
        }
        if value_kind == ValueKind::Delete {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.direction = Direction::Forward;
        } else {
            self.valid = true;
        }
        Ok(())
    }

    /// Backward, amid many entries of `run_key`: saves the key's newest visible version (a
    /// forward seek finds it) and leaves the inner cursor just before the key's entries.
    /// Returns that version's kind (Delete when the key is deleted or has none visible).
    fn newest_visible_of_run_key(&mut self) -> Result<ValueKind> {
        self.reseeks += 1;
        self.iter.seek(&key::seek_key(&self.run_key, self.seq))?;
        let mut kind = ValueKind::Delete;
        // Every entry from the seek on was written at or before the snapshot.
        while self.iter.valid() {
            let p = parsed(&self.iter)?;
            if p.user_key != self.run_key.as_slice() {
                break;
            }
            if p.kind != ValueKind::RangeDelete {
                self.entries_seen += 1;
                kind = Self::effective_kind(&mut self.tombstones, p.kind, p.user_key, p.seq);
                break;
            }
            self.iter.next()?;
        }
        self.saved_key.clear();
        self.saved_value.clear();
        if kind == ValueKind::Delete {
            self.deleted_seen += 1;
        } else {
            self.saved_key.extend_from_slice(&self.run_key);
            self.saved_value.extend_from_slice(self.iter.value());
        }
        self.iter.seek_for_prev(&key::make_internal_key(&self.run_key, key::MAX_SEQUENCE, ValueKind::MAX))?;
        Ok(kind)
    }
}

/// A run of entries of one user key so far (`run`, counted in steps, of `run_key`), as an
/// entry of `user_key` comes: the same run, or a new one (0) that `run_key` now names.
#[inline]
fn continue_run(run_key: &mut Vec<u8>, run: usize, user_key: &[u8]) -> usize {
    if run > 0 && key::compare_bytes(user_key, run_key).is_eq() {
        return run;
    }
    run_key.clear();
    run_key.extend_from_slice(user_key);
    0
}

/// The inner cursor's current key, parsed.
#[inline]
fn parsed(iter: &MergingIterator) -> Result<key::ParsedKey<'_>> {
    key::parse(iter.key()).ok_or_else(|| Error::InvalidArgument("malformed internal key in iterator".into()))
}

impl Drop for DbIterator {
    fn drop(&mut self) {
        if let Some(c) = &self.counters {
            c.local().iter_entries.fetch_add(self.entries_seen, Ordering::Relaxed);
            c.local().iter_tombstones.fetch_add(self.deleted_seen, Ordering::Relaxed);
            c.local().iter_reseeks.fetch_add(self.reseeks, Ordering::Relaxed);
        }
    }
}
