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

impl Memtable {
    /// Inserts every update of `batch`, numbered from the batch's sequence number.
    ///
    /// The updates go in windows of [`APPLY_WINDOW`]: the bloom-filter line and point-index
    /// slot of every key of a window are prefetched before the first is inserted, so a batch of
    /// random keys waits on memory for those once per window instead of twice per key; and the
    /// places in the list of the window's keys that the point index does not know (new keys,
    /// which need a node) are searched for all at once (the list's `search_places`), so their
    /// searches wait on memory together rather than one after another.
    pub fn apply(&self, batch: &WriteBatch) -> Result<()> {
        let mut entries = batch.iter();
        let mut seq = batch.sequence();
        let mut window = [(ValueKind::Put, &[][..], &[][..], 0u64); APPLY_WINDOW];
        loop {
            let (mut n, mut failed) = (0, None);
            while n < APPLY_WINDOW {
                let e = match entries.next() {
                    None => break,
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
                window[n] = (e.kind, e.key, e.value, hash);
                n += 1;
            }
            let placed = self.place_new_keys(&window[..n], seq);
            for (i, &(kind, key, value, hash)) in window[..n].iter().enumerate() {
                let place = placed.as_ref().and_then(|(searched, places)| places.get(searched[i]));
                self.insert_hashed(seq, kind, key, value, hash, place);
                seq += 1;
            }
            if let Some(e) = failed {
                return Err(e);
            }
            if n < APPLY_WINDOW {
                return Ok(());
            }
        }
    }

    /// Searches for the places in the list of the keys of `window` (updates numbered from
    /// `seq`) that will need a node, all at once ([`SkipList::search_places`]): keys the point
    /// index does not know, if there are two or more and not every one of them goes right at
    /// the writer's splice (a run of keys, which is linked there without a search). Returns
    /// `(searched, places)`, `window[i]`'s place being `places[searched[i]]` (`searched[i]` out
    /// of range for a key not searched for); `None` if nothing was searched for.
    fn place_new_keys(
        &self,
        window: &[(ValueKind, &[u8], &[u8], u64)],
        seq: u64,
    ) -> Option<([usize; APPLY_WINDOW], [Place; APPLY_WINDOW])> {
        if window.len() < 2 {
            // (A batch of one update, as most single commands write: nothing to overlap with.)
            return None;
        }
        let mut ikeys = [[0u8; PLACED_KEY]; APPLY_WINDOW];
        let mut searched = [usize::MAX; APPLY_WINDOW];
        let mut k = 0;
        for (i, &(kind, key, _, hash)) in window.iter().enumerate() {
            let len = key.len() + key::TRAILER_LEN;
            if kind == ValueKind::RangeDelete || len > PLACED_KEY || self.knows(key, hash) {
                continue;
            }
            ikeys[i][..key.len()].copy_from_slice(key);
            ikeys[i][key.len()..len].copy_from_slice(&key::pack_trailer(seq + i as u64, kind).to_le_bytes());
            searched[i] = k;
            k += 1;
        }
        if k < 2 {
            // One search has nothing to overlap with: it is made when the key is linked.
            return None;
        }
        let mut targets = [&[][..]; APPLY_WINDOW];
        for (i, &(_, key, _, _)) in window.iter().enumerate() {
            if let Some(t) = targets.get_mut(searched[i]) {
                *t = &ikeys[i][..key.len() + key::TRAILER_LEN];
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
