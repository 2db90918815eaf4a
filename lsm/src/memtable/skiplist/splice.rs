//! The writer's splice: where the last node went in, so that the next node near it is linked
//! without a search from the top of the list.

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::{Node, SkipList, Writer, LINK, MAX_HEIGHT};
use crate::key;

/// Levels of the writer's splice tried before a search from the top (see
/// [`SkipList::seek_splice`]).
const SPLICE_REACH: usize = 2;

/// The place of the last node inserted, kept by the writer so that the next insert near it
/// needs no descent of the list (RocksDB's `InlineSkipList` keeps one for the same reason).
///
/// At every level `i` below [`MAX_HEIGHT`], `prev[i]` is the last node of that level before a
/// point `P` of the key order (`None`: the head) and `next[i]` the first at or after it
/// (`None`: the end): `next[i]` is `prev[i]`'s link `i`, as only the writer links nodes and it
/// moves the splice with every node it links. For a key `K` the lowest level whose pair
/// brackets `K` (`prev < K <= next`) has no node between `P` and `K`, and neither has any
/// level above it (a subset of its nodes): those pairs are `K`'s too, and a search for `K`
/// starts from that level's `prev` instead of from the top of the head. A key right after the
/// last one (a sequential load, an RPUSH) or right before it (an LPUSH), which the splice
/// follows by putting `P` after or before the node just linked, brackets at level 0 and is
/// linked without a search.
#[derive(Debug)]
pub(super) struct Splice {
    pub(super) prev: [Option<Node>; MAX_HEIGHT],
    pub(super) next: [Option<Node>; MAX_HEIGHT],
    /// The last node linked: the splice's point is after it (keys ascending) or before it.
    pub(super) last: Option<Node>,
    /// Nodes whose keys a search compared (a measure of the work, for tests).
    #[cfg(test)]
    pub(super) visited: u64,
}

impl Default for Splice {
    fn default() -> Self {
        Splice {
            prev: [None; MAX_HEIGHT],
            next: [None; MAX_HEIGHT],
            last: None,
            #[cfg(test)]
            visited: 0,
        }
    }
}

impl SkipList {
    /// Moves the writer's splice to `ikey` (see [`Splice`]): from the lowest level whose pair
    /// already brackets it, down. Afterwards `w.splice.next[0]` is the first node at or after
    /// `ikey`.
    pub(super) fn seek_splice(&self, w: &mut Writer, ikey: &[u8]) {
        use std::cmp::Ordering::Less;
        let height = self.height.load(Ordering::Relaxed);
        let sp = &mut w.splice;
        // The lowest level that brackets `ikey`, if one of the lowest two does; a node found on
        // the wrong side of it is on the wrong side at every level it is the splice's node of,
        // so those are skipped unasked. A key farther away is searched for from the top, as
        // walking up the splice's pairs and down again would cost more than a plain descent.
        let reach = height.min(SPLICE_REACH);
        let mut level = 0;
        while level < reach {
            if let Some(p) = sp.prev[level].filter(|p| key::compare(p.key(), ikey) != Less) {
                while level < height && sp.prev[level] == Some(p) {
                    level += 1;
                }
                continue;
            }
            if let Some(n) = sp.next[level].filter(|n| key::compare(n.key(), ikey) == Less) {
                while level < height && sp.next[level] == Some(n) {
                    level += 1;
                }
                continue;
            }
            break;
        }
        if level >= reach {
            level = height;
        }
        let mut x = if level < height { sp.prev[level] } else { None };
        while level > 0 {
            level -= 1;
            let mut next = NonNull::new(self.link_of(x.as_ref(), level).load(Ordering::Acquire)).map(Node);
            while let Some(n) = next {
                crate::prefetch(n.link(level).load(Ordering::Relaxed));
                #[cfg(test)]
                {
                    sp.visited += 1;
                }
                if key::compare(n.key(), ikey) != Less {
                    break;
                }
                x = Some(n);
                next = NonNull::new(n.link(level).load(Ordering::Acquire)).map(Node);
            }
            sp.prev[level] = x;
            sp.next[level] = next;
        }
    }
}

/// Most keys [`SkipList::search_places`] searches for at once.
pub(in crate::memtable) const MAX_SEARCHES: usize = 16;

/// Where a key of a batch goes, found by [`SkipList::search_places`] before any key of the
/// batch is linked: at each level, the last node before it then (`None`: the head).
#[derive(Debug, Clone, Copy)]
pub(in crate::memtable) struct Place {
    prev: [Option<Node>; MAX_HEIGHT],
}

impl Default for Place {
    fn default() -> Self {
        Place { prev: [None; MAX_HEIGHT] }
    }
}

impl SkipList {
    /// Searches for every key of `targets` (internal keys) at once, leaving in `places[i]`
    /// where `targets[i]` goes ([`Place`]). The searches advance in turns, one node each,
    /// and each loads the node it compares next before the others take their turns: a search
    /// of a large list waits on memory at almost every node it visits, and this way the misses
    /// of all of them overlap instead of following one another. Takes no lock, as a reader's
    /// search; what is linked afterwards is found by [`SkipList::seek_place`]. At most
    /// [`MAX_SEARCHES`] keys.
    pub(in crate::memtable) fn search_places(&self, targets: &[&[u8]], places: &mut [Place]) {
        use std::cmp::Ordering::Less;
        /// One search: the last node before the target at `level` so far, and the node after
        /// it (loaded and prefetched in the search's previous turn), still to be compared.
        #[derive(Clone, Copy)]
        struct Search {
            x: Option<Node>,
            level: usize,
            pending: Option<Node>,
            done: bool,
        }
        let height = self.height.load(Ordering::Acquire);
        // A node's key follows its address and its links come before it, often in the cache
        // line before: both lines are loaded ahead, the key to compare and the link followed
        // next if the search passes the node.
        let load = |x: Option<&Node>, level: usize| {
            let p = self.link_of(x, level).load(Ordering::Acquire);
            crate::prefetch(p);
            crate::prefetch(p.wrapping_sub(LINK * (level + 1)));
            NonNull::new(p).map(Node)
        };
        let mut searches = [Search { x: None, level: height - 1, pending: None, done: false }; MAX_SEARCHES];
        let n = targets.len().min(places.len());
        assert!(n <= MAX_SEARCHES, "at most {MAX_SEARCHES} searches at once");
        for (s, place) in searches[..n].iter_mut().zip(places.iter_mut()) {
            *place = Place::default();
            s.pending = load(None, s.level);
        }
        let mut active = n;
        while active > 0 {
            for (i, s) in searches[..n].iter_mut().enumerate() {
                if s.done {
                    continue;
                }
                match s.pending {
                    Some(next) if key::compare(next.key(), targets[i]) == Less => {
                        s.x = Some(next);
                        s.pending = load(Some(&next), s.level);
                    }
                    _ => {
                        places[i].prev[s.level] = s.x;
                        if s.level == 0 {
                            s.done = true;
                            active -= 1;
                        } else {
                            s.level -= 1;
                            s.pending = load(s.x.as_ref(), s.level);
                        }
                    }
                }
            }
        }
    }

    /// Marks in `at_splice` which keys of `targets` (internal keys) fall between the writer's
    /// splice's nodes at level 0, as it is now: [`SkipList::seek_splice`] links those with a
    /// comparison or two (a run of keys, like list pushes, goes there one after another), so
    /// they need no search ahead.
    pub(in crate::memtable) fn at_splice(&self, targets: &[&[u8]], at_splice: &mut [bool]) {
        use std::cmp::Ordering::Less;
        let w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let (prev, next) = (w.splice.prev[0], w.splice.next[0]);
        if w.splice.last.is_none() {
            // Nothing linked yet: the splice is not anywhere.
            at_splice.iter_mut().for_each(|a| *a = false);
            return;
        }
        for (t, a) in targets.iter().zip(at_splice.iter_mut()) {
            *a = prev.is_none_or(|p| key::compare(p.key(), t) == Less)
                && next.is_none_or(|n| key::compare(t, n.key()) != std::cmp::Ordering::Greater);
        }
    }

    /// Moves the writer's splice to `ikey`, for which `place` was found by
    /// [`SkipList::search_places`]: at each level, from the place's node (or the level
    /// above's, if that is later) forward over whatever was linked there since, usually
    /// nothing or a node or two of the same batch. Afterwards the splice is what
    /// [`SkipList::seek_splice`] would have made it.
    pub(super) fn seek_place(&self, w: &mut Writer, ikey: &[u8], place: &Place) {
        use std::cmp::Ordering::{Greater, Less};
        let sp = &mut w.splice;
        let mut above: Option<Node> = None;
        for level in (0..MAX_HEIGHT).rev() {
            // Nodes are never unlinked, so a node found before `ikey` stays before it, and a
            // node of a level is on every level below it.
            let mut x = match (place.prev[level], above) {
                (Some(p), Some(a)) if key::compare(a.key(), p.key()) == Greater => Some(a),
                (None, a) => a,
                (p, _) => p,
            };
            let mut next = NonNull::new(self.link_of(x.as_ref(), level).load(Ordering::Acquire)).map(Node);
            while let Some(n) = next.filter(|n| key::compare(n.key(), ikey) == Less) {
                x = Some(n);
                next = NonNull::new(n.link(level).load(Ordering::Acquire)).map(Node);
            }
            sp.prev[level] = x;
            sp.next[level] = next;
            above = x;
        }
    }
}
