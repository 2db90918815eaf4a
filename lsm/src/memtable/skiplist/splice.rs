//! The writer's splice: where the last node went in, so that the next node near it is linked
//! without a search from the top of the list.

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::{Node, SkipList, Writer, MAX_HEIGHT};
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
