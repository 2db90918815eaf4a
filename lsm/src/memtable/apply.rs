//! Applying a write batch to a memtable: its updates in windows, whose lookups are prefetched
//! and whose new keys are searched for in the list together (see [`Memtable::apply`]).

use super::skiplist::{self, Place};
use super::{bloom, Memtable, Probe};
use crate::key::{self, ValueKind};
use crate::{Result, WriteBatch};

/// Updates [`Memtable::apply`] prefetches for, and searches for, at a time.
pub(super) const APPLY_WINDOW: usize = skiplist::MAX_SEARCHES;

/// Internal keys up to this long are searched for together by [`Memtable::apply`] (longer
/// ones on their own, when they are inserted).
const PLACED_KEY: usize = 64;

/// One update of a window: what it writes, its key's hash and its sequence number.
#[derive(Debug, Clone, Copy)]
struct Update<'a> {
    kind: ValueKind,
    key: &'a [u8],
    value: &'a [u8],
    hash: u64,
    seq: u64,
}

impl Memtable {
    /// Inserts every update of `batch`, numbered from the batch's sequence number.
    pub fn apply(&self, batch: &WriteBatch) -> Result<()> {
        self.apply_all(std::slice::from_ref(batch))
    }

    /// Inserts every update of each of `batches` in turn, each numbered from its batch's
    /// sequence number — a commit group's batches, as [`Memtable::apply`] of each would.
    ///
    /// The updates go in windows of [`APPLY_WINDOW`], which run on across the batches (a
    /// group of single-update batches, as fifty clients' SETs make, windows as one batch of
    /// them would): the bloom-filter line and point-index slot of every key of a window are
    /// prefetched before the first is inserted, so random keys wait on memory for those once
    /// per window instead of twice per key; and the places in the list of the window's keys
    /// that the point index does not know (new keys, which need a node) are searched for all
    /// at once (the list's `search_places`), so their searches wait on memory together rather
    /// than one after another. A damaged batch stops it there: the updates before its damage
    /// are in, those after are not.
    pub fn apply_all<B: std::borrow::Borrow<WriteBatch>>(&self, batches: &[B]) -> Result<()> {
        let mut batches = batches.iter().map(|b| b.borrow());
        let (mut entries, mut seq) = match batches.next() {
            Some(b) => (b.iter(), b.sequence()),
            None => return Ok(()),
        };
        let mut window = [Update { kind: ValueKind::Put, key: &[], value: &[], hash: 0, seq: 0 }; APPLY_WINDOW];
        loop {
            let (mut n, mut failed, mut ended) = (0, None, false);
            while n < APPLY_WINDOW {
                let e = match entries.next() {
                    None => match batches.next() {
                        Some(b) => {
                            (entries, seq) = (b.iter(), b.sequence());
                            continue;
                        }
                        None => {
                            ended = true;
                            break;
                        }
                    },
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        // The updates before a damaged one go in, as one at a time would.
                        failed = Some(e);
                        break;
                    }
                };
                let hash = bloom::hash_key(e.key);
                if let Some(l) = &self.lookups {
                    l.bloom.prefetch(hash);
                    l.index.prefetch(hash);
                }
                window[n] = Update { kind: e.kind, key: e.key, value: e.value, hash, seq };
                seq += 1;
                n += 1;
            }
            let placed = self.place_new_keys(&window[..n]);
            for (i, u) in window[..n].iter().enumerate() {
                let place = placed.as_ref().and_then(|(searched, places)| places.get(searched[i]));
                self.insert_hashed(u.seq, u.kind, u.key, u.value, u.hash, place);
            }
            if let Some(e) = failed {
                return Err(e);
            }
            if ended {
                return Ok(());
            }
        }
    }

    /// Searches for the places in the list of the keys of `window` that will need a node, all
    /// at once ([`SkipList::search_places`]): keys the point index does not know, if there are
    /// two or more and not every one of them goes right at the writer's splice (a run of keys,
    /// which is linked there without a search). Returns
    /// `(searched, places)`, `window[i]`'s place being `places[searched[i]]` (`searched[i]` out
    /// of range for a key not searched for); `None` if nothing was searched for.
    fn place_new_keys(&self, window: &[Update<'_>]) -> Option<([usize; APPLY_WINDOW], [Place; APPLY_WINDOW])> {
        if window.len() < 2 {
            // (A batch of one update, as most single commands write: nothing to overlap with.)
            return None;
        }
        let mut ikeys = [[0u8; PLACED_KEY]; APPLY_WINDOW];
        let mut searched = [usize::MAX; APPLY_WINDOW];
        let mut k = 0;
        for (i, u) in window.iter().enumerate() {
            let len = u.key.len() + key::TRAILER_LEN;
            if u.kind == ValueKind::RangeDelete || len > PLACED_KEY || self.knows(u.key, u.hash) {
                continue;
            }
            ikeys[i][..u.key.len()].copy_from_slice(u.key);
            ikeys[i][u.key.len()..len].copy_from_slice(&key::pack_trailer(u.seq, u.kind).to_le_bytes());
            searched[i] = k;
            k += 1;
        }
        if k < 2 {
            // One search has nothing to overlap with: it is made when the key is linked.
            return None;
        }
        let mut targets = [&[][..]; APPLY_WINDOW];
        for (i, u) in window.iter().enumerate() {
            if let Some(t) = targets.get_mut(searched[i]) {
                *t = &ikeys[i][..u.key.len() + key::TRAILER_LEN];
            }
        }
        let mut at_splice = [false; APPLY_WINDOW];
        self.map.at_splice(&targets[..k], &mut at_splice[..k]);
        if at_splice[..k].iter().all(|&a| a) {
            return None;
        }
        let mut places = [Place::default(); APPLY_WINDOW];
        self.map.search_places(&targets[..k], &mut places[..k]);
        Some((searched, places))
    }

    /// True if the point index knows a node of `user_key` (whose hash is `hash`): a new
    /// version of it joins that node's chain, with no search of the list.
    fn knows(&self, user_key: &[u8], hash: u64) -> bool {
        self.lookups
            .as_ref()
            .is_some_and(|l| l.bloom.may_contain(hash) && matches!(l.index.probe(hash, user_key), Probe::Found(_)))
    }
}

#[cfg(test)]
mod tests;
