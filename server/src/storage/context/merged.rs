//! Reads through a transaction's buffer: ranges of the engine with the buffered writes merged
//! in ([`RawRange`], [`MergedRange`]), and the buffer's writes over one range for a caller that
//! reads with its own engine cursor ([`Overlay`]).
//!
//! **Parked ranges.** A pop from one end of a sorted set reads the first entry of a range and moves
//! the set's live bound past it (see `scores.rs`), and a run of pops from one end of a list reads
//! its elements the same way (`View::end_elements`), as does an XREADGROUP of a stream's new
//! entries (`View::elements_resuming`); the next such read of the same transaction or write
//! group reads the same range from just past that entry. Opening an engine range seeks every
//! memtable and table (~3 µs, most of a pop's CPU inside a write group), so a range opened with
//! [`super::ExecContext::resuming_range`] is left in the transaction's buffer when dropped
//! ([`Parked`]) and the next such read goes on from where it stood. That is exact whatever the
//! buffer holds, because a parked range is taken up again only when every engine key it stepped
//! over lies outside the range asked for now (before its start, reading from the front; after its
//! end from the back) and its other bound is the one asked for; the entries it goes on to are laid
//! under the buffer as in any merged range, and those still outside the new bound are skipped. Its
//! engine reads are those of when it was opened, which are the engine's latest state for the keys
//! of the transaction: their stripes are held, so no other client commits to them; the writers that
//! hold no stripe (a replica applying its primary's batches, a full sync) move the storage's epoch,
//! and a range parked under another epoch is dropped. It is taken up only in the mode it was opened
//! in (memory-only reads or not).

use std::cell::RefCell;
use std::ops::Bound;

use bytes::Bytes;

use super::TxnBuffer;

/// A transaction's buffered writes over one key range, to lay over an engine cursor's reads.
#[derive(Debug)]
pub(in crate::storage) struct Overlay {
    /// Keys written in the range, sorted (true: put, false: deleted).
    pub(in crate::storage) writes: Vec<(Vec<u8>, bool)>,
    /// Ranges deleted that meet the range.
    pub(super) range_dels: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Overlay {
    /// True if the buffer writes nothing in the range.
    pub(in crate::storage) fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.range_dels.is_empty()
    }

    /// Whether the engine's entry for `key` is hidden (rewritten or deleted) by the buffer.
    pub(in crate::storage) fn hides(&self, key: &[u8]) -> bool {
        self.writes.binary_search_by(|(k, _)| k[..].cmp(key)).is_ok()
            || self.range_dels.iter().any(|(a, b)| key >= &a[..] && key < &b[..])
    }
}

/// The engine's entries of a range with a transaction's buffered writes laid over them, read
/// lazily from either end: a command that takes the first few entries of a large range inside
/// a transaction (ZPOPMIN, LPOP of a list …) pays for those entries only. The buffer is read
/// where it lies, one step at a time, never copied (a write group of pops from one key would
/// otherwise copy every earlier pop's writes again for each pop: ZPOPMIN P16 +15 %). Each step
/// sees the buffer as it is then; commands buffer their writes once they have read.
pub struct MergedRange<'a> {
    /// Always there but while the range is parked on drop.
    pub(super) engine: Option<lsm::Range>,
    /// The running transaction's buffer (its writes hide the engine's entries).
    pub(super) txn: &'a RefCell<Option<TxnBuffer>>,
    /// The buffer's writes not yet handed out lie between these bounds.
    pub(super) low: Bound<Vec<u8>>,
    pub(super) high: Bound<Vec<u8>>,
    /// An engine entry read from the front (or back) but not handed out yet.
    pub(super) front: Option<(Bytes, Bytes)>,
    pub(super) back: Option<(Bytes, Bytes)>,
    /// For a range opened to be parked: the epoch and mode it reads under (see the module docs).
    pub(super) park: Option<(u64, bool)>,
    /// A parked range taken up: its engine entries outside `low..high` are skipped.
    pub(super) resumed: bool,
}

/// An engine range left open by a read from one end inside a transaction (see the module
/// docs).
pub(in crate::storage) struct Parked {
    engine: lsm::Range,
    /// The storage's epoch and the memory-only mode it was opened under.
    epoch: u64,
    memory_only: bool,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked").field("engine", &self.engine).finish_non_exhaustive()
    }
}

impl Parked {
    /// The engine range, if it can go on to read `start..end` under `epoch` and `memory_only`.
    pub(super) fn goes_on(
        self,
        start: &Bound<Vec<u8>>,
        end: &Bound<Vec<u8>>,
        epoch: u64,
        memory_only: bool,
    ) -> Option<lsm::Range> {
        if self.epoch != epoch || self.memory_only != memory_only {
            return None;
        }
        let (lower, upper) = self.engine.bounds();
        let (start, end) = (start.as_ref().map(Vec::as_slice), end.as_ref().map(Vec::as_slice));
        let fits = match (self.engine.front_key(), self.engine.back_key()) {
            (Some(at), None) => upper == end && before(at, start),
            (None, Some(at)) => lower == start && after(at, end),
            _ => false,
        };
        fits.then_some(self.engine)
    }
}

/// Whether `key` lies before a range starting at `start`.
fn before(key: &[u8], start: Bound<&[u8]>) -> bool {
    match start {
        Bound::Included(s) => key < s,
        Bound::Excluded(s) => key <= s,
        Bound::Unbounded => false,
    }
}

/// Whether `key` lies after a range ending at `end`.
fn after(key: &[u8], end: Bound<&[u8]>) -> bool {
    match end {
        Bound::Included(e) => key > e,
        Bound::Excluded(e) => key >= e,
        Bound::Unbounded => false,
    }
}

impl Drop for MergedRange<'_> {
    /// Parks a range opened for it that was read from one end only (see the module docs).
    fn drop(&mut self) {
        let Some((epoch, memory_only)) = self.park else { return };
        let Some(engine) = self.engine.take() else { return };
        if engine.front_key().is_none() && engine.back_key().is_none() {
            return;
        }
        let Ok(mut txn) = self.txn.try_borrow_mut() else { return };
        if let Some(txn) = txn.as_mut() {
            txn.parked = Some(Parked { engine, epoch, memory_only });
        }
    }
}

impl std::fmt::Debug for MergedRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergedRange").finish_non_exhaustive()
    }
}

/// Whether no key lies between `bounds` (`BTreeMap::range` panics on some of those).
pub(super) fn is_empty((low, high): (Bound<&[u8]>, Bound<&[u8]>)) -> bool {
    match (low, high) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// Which end of a range a step reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Front,
    Back,
}

impl MergedRange<'_> {
    /// Whether an engine `key` lies outside the range still to be read (only an engine range
    /// taken up again holds such keys: between where it stood and the start asked for, read
    /// from either end). `low` and `high` move only past keys handed out, and an engine entry
    /// comes out of an end only after everything the buffer handed out from that end.
    fn outside(&self, key: &[u8]) -> bool {
        before(key, self.low.as_ref().map(Vec::as_slice)) || after(key, self.high.as_ref().map(Vec::as_slice))
    }

    /// Whether the engine's entry for `key` is what the transaction sees.
    fn engine_visible(&self, key: &[u8]) -> bool {
        let t = self.txn.borrow();
        let Some(txn) = t.as_ref() else { return true };
        !txn.writes.contains_key(key) && !txn.range_dels.iter().any(|(a, b)| key >= &a[..] && key < &b[..])
    }

    /// The next visible engine entry from `end` (the other end's pending one once the engine
    /// range is used up).
    fn engine_entry(&mut self, end: End) -> Option<lsm::Result<(Bytes, Bytes)>> {
        loop {
            let pending = match end {
                End::Front => self.front.take(),
                End::Back => self.back.take(),
            };
            let kv = match pending {
                Some(kv) => kv,
                None => {
                    let engine = self.engine.as_mut()?;
                    let next = match end {
                        End::Front => engine.next(),
                        End::Back => engine.next_back(),
                    };
                    match next {
                        Some(Ok(kv)) if self.resumed && self.outside(&kv.0) => continue,
                        Some(Ok(kv)) => kv,
                        Some(Err(e)) => return Some(Err(e)),
                        None => match end {
                            End::Front => self.back.take()?,
                            End::Back => self.front.take()?,
                        },
                    }
                }
            };
            if self.engine_visible(&kv.0) {
                return Some(Ok(kv));
            }
        }
    }

    /// The buffer's next write from `end`, taken if it comes before `engine` (the engine's
    /// next entry from that end; a key is never in both, see `engine_visible`).
    fn take_buffered(&mut self, end: End, engine: Option<&(Bytes, Bytes)>) -> Option<(Vec<u8>, Option<Bytes>)> {
        let taken = {
            let t = self.txn.borrow();
            let txn = t.as_ref()?;
            let bounds = (self.low.as_ref().map(Vec::as_slice), self.high.as_ref().map(Vec::as_slice));
            if is_empty(bounds) {
                return None;
            }
            let mut writes = txn.writes.range(bounds);
            let (k, v) = match end {
                End::Front => writes.next()?,
                End::Back => writes.next_back()?,
            };
            let first = engine.is_none_or(|(e, _)| match end {
                End::Front => k[..] < e[..],
                End::Back => k[..] > e[..],
            });
            first.then(|| (k.to_vec(), v.clone()))?
        };
        match end {
            End::Front => self.low = Bound::Excluded(taken.0.clone()),
            End::Back => self.high = Bound::Excluded(taken.0.clone()),
        }
        Some(taken)
    }

    fn step(&mut self, end: End) -> Option<lsm::Result<(Bytes, Bytes)>> {
        loop {
            let engine = match self.engine_entry(end) {
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(kv)) => Some(kv),
                None => None,
            };
            let Some((k, v)) = self.take_buffered(end, engine.as_ref()) else { return engine.map(Ok) };
            // The engine's entry waits for the next step from this end.
            match end {
                End::Front => self.front = engine,
                End::Back => self.back = engine,
            }
            if let Some(v) = v {
                return Some(Ok((Bytes::from(k), v)));
            }
        }
    }
}

impl Iterator for MergedRange<'_> {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(End::Front)
    }
}

impl DoubleEndedIterator for MergedRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(End::Back)
    }
}

/// A range over the engine, merged with the running transaction's writes when there is one.
/// A memory-only command's range notes a read that needed the disk (the engine's
/// `WouldBlock`), which voids the command however it handles the error; so does a range that
/// returns more records than a memory-only attempt may ([`super::MEMORY_ONLY_STEPS`]).
pub struct RawRange<'a> {
    pub(in crate::storage) source: RangeSource<'a>,
    /// The command's context, while it runs memory-only.
    pub(in crate::storage) memory_only: Option<&'a super::ExecContext>,
}

/// Where a [`RawRange`] reads.
// The engine variant is the common one; boxing it would cost an allocation per range.
#[allow(clippy::large_enum_variant)]
pub(in crate::storage) enum RangeSource<'a> {
    /// No transaction: the engine's own iterator.
    Engine(lsm::Range),
    /// Inside a transaction: the engine's entries under the transaction's writes.
    Merged(Box<MergedRange<'a>>),
}

impl std::fmt::Debug for RawRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawRange")
    }
}

impl RawRange<'_> {
    fn noted(&self, item: Option<lsm::Result<(Bytes, Bytes)>>) -> Option<lsm::Result<(Bytes, Bytes)>> {
        let Some(cx) = self.memory_only else { return item };
        match &item {
            Some(Err(lsm::Error::WouldBlock)) => cx.missed.set(true),
            Some(Ok(_)) if !cx.step() => return Some(Err(lsm::Error::WouldBlock)),
            _ => {}
        }
        item
    }
}

impl Iterator for RawRange<'_> {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match &mut self.source {
            RangeSource::Engine(r) => r.next(),
            RangeSource::Merged(m) => m.next(),
        };
        self.noted(item)
    }
}

impl DoubleEndedIterator for RawRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let item = match &mut self.source {
            RangeSource::Engine(r) => r.next_back(),
            RangeSource::Merged(m) => m.next_back(),
        };
        self.noted(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_bounds_are_told_apart_from_ranges_btreemap_accepts() {
        use Bound::{Excluded as X, Included as I, Unbounded as U};
        let (a, b): (&[u8], &[u8]) = (b"a", b"b");
        assert!(!is_empty((I(a), I(a))), "one key");
        assert!(is_empty((I(a), X(a))));
        assert!(is_empty((X(a), X(a))), "BTreeMap::range panics on this one");
        assert!(is_empty((X(b), I(a))));
        assert!(!is_empty((X(a), X(b))));
        assert!(!is_empty((U, X(a))) && !is_empty((X(b), U)));
    }
}
