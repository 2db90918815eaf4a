//! A merge of many sorted cursors, by a binary heap of child indexes.
//!
//! Children are given newest source first; equal keys (which distinct sequence numbers make rare)
//! come out in child order.
//!
//! Going forward with an upper bound on user keys ([`MergingIterator::set_upper_bound`], which
//! a bounded [`DbIterator`](super::DbIterator) passes down), a child whose key passes the bound
//! leaves the heap while others remain: nothing it holds further on can come out. The bound
//! is a hint, not a filter: the last child left goes on past it (comparing it with the bound
//! would repeat the check the bounded cursor makes anyway). A range read whose records one
//! source holds (a collection written since the last flush, the head of a list) then steps
//! through that source alone, without comparing each key against the positions of the others.

use std::cmp::Ordering;

use super::{BoxedIter, InternalIterator};
use crate::key;
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// Merges children into one sorted cursor, forward or backward.
pub struct MergingIterator {
    children: Vec<BoxedIter>,
    /// Indexes of valid children; `heap[0]` is the current one.
    heap: Vec<usize>,
    direction: Direction,
    /// No key past this (a user key) comes out going forward.
    upper: std::ops::Bound<Vec<u8>>,
}

impl std::fmt::Debug for MergingIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergingIterator")
            .field("children", &self.children.len())
            .field("direction", &self.direction)
            .finish()
    }
}

impl MergingIterator {
    /// Merges `children` (newest first).
    pub fn new(children: Vec<BoxedIter>) -> Self {
        MergingIterator { children, heap: Vec::new(), direction: Direction::Forward, upper: std::ops::Bound::Unbounded }
    }

    /// Bounds the user keys going forward (`Unbounded` lifts the bound): a child positioned
    /// past the bound drops out of the heap while another remains (keys past the bound may
    /// still come out: the caller enforces its bounds). Changed while positioned, the heap is
    /// rebuilt, so a child dropped under a narrower bound comes back.
    pub fn set_upper_bound(&mut self, upper: std::ops::Bound<Vec<u8>>) {
        self.upper = upper;
        if !self.heap.is_empty() {
            self.rebuild(self.direction);
        }
    }

    /// [`seek`](InternalIterator::seek) for a caller that knows `target` is at or past its last
    /// forward seek and past every entry stepped over since (a cursor that stopped at its
    /// upper bound and seeks at or past that bound: the next range of a multi-range read).
    /// Every child then sits on its first entry past what was consumed, so only those
    /// behind `target` move — dropped past the bound or not — and an exhausted one stays
    /// exhausted. After a backward move it is a plain seek.
    pub(crate) fn seek_ahead(&mut self, target: &[u8]) -> Result<()> {
        if self.direction != Direction::Forward {
            return self.seek(target);
        }
        for c in &mut self.children {
            if c.valid() && key::compare(c.key(), target) == Ordering::Less {
                if let Err(e) = c.seek(target) {
                    self.heap.clear();
                    return Err(e);
                }
            }
        }
        self.rebuild(Direction::Forward);
        Ok(())
    }

    /// True when going forward, child `i` (valid) stands past the upper bound.
    fn past_upper(&self, i: usize) -> bool {
        if self.direction == Direction::Reverse {
            return false;
        }
        let user = || key::user_key(self.children[i].key());
        match &self.upper {
            std::ops::Bound::Excluded(u) => key::compare_bytes(user(), u).is_ge(),
            std::ops::Bound::Included(u) => key::compare_bytes(user(), u).is_gt(),
            std::ops::Bound::Unbounded => false,
        }
    }

    /// True when child `a` should come out before child `b`.
    fn before(&self, a: usize, b: usize) -> bool {
        let ord = key::compare(self.children[a].key(), self.children[b].key());
        let ord = if self.direction == Direction::Reverse { ord.reverse() } else { ord };
        match ord {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => a < b,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < n && self.before(self.heap[l], self.heap[best]) {
                best = l;
            }
            if r < n && self.before(self.heap[r], self.heap[best]) {
                best = r;
            }
            if best == i {
                return;
            }
            self.heap.swap(i, best);
            i = best;
        }
    }

    fn rebuild(&mut self, direction: Direction) {
        self.direction = direction;
        self.heap = (0..self.children.len()).filter(|&i| self.children[i].valid() && !self.past_upper(i)).collect();
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Runs `f` on every child, then rebuilds the heap for `direction`.
    fn reposition(&mut self, direction: Direction, f: impl Fn(&mut BoxedIter) -> Result<()>) -> Result<()> {
        for c in &mut self.children {
            if let Err(e) = f(c) {
                self.heap.clear();
                return Err(e);
            }
        }
        self.rebuild(direction);
        Ok(())
    }

    /// After the current child moved, restore the heap.
    fn fix_top(&mut self) {
        // (A lone child stays past the bound: there is nothing left to compare it with, and
        // the cursor above checks its bounds anyway.)
        let top = self.heap[0];
        if !self.children[top].valid() || (self.heap.len() > 1 && self.past_upper(top)) {
            self.heap.swap_remove(0);
        }
        if !self.heap.is_empty() {
            self.sift_down(0);
        }
    }

    fn step(&mut self, direction: Direction) -> Result<()> {
        let Some(&cur) = self.heap.first() else {
            return Ok(());
        };
        if self.direction != direction {
            // Move every other child to the right side of the current key, then step past it.
            let target = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                let r = match direction {
                    Direction::Forward => c.seek(&target).and_then(|_| {
                        if c.valid() && c.key() == target.as_slice() {
                            c.next()
                        } else {
                            Ok(())
                        }
                    }),
                    Direction::Reverse => c.seek_for_prev(&target).and_then(|_| {
                        if c.valid() && c.key() == target.as_slice() {
                            c.prev()
                        } else {
                            Ok(())
                        }
                    }),
                };
                if let Err(e) = r {
                    self.heap.clear();
                    return Err(e);
                }
            }
            let r = if direction == Direction::Forward { self.children[cur].next() } else { self.children[cur].prev() };
            if let Err(e) = r {
                self.heap.clear();
                return Err(e);
            }
            self.rebuild(direction);
            return Ok(());
        }
        let r = if direction == Direction::Forward { self.children[cur].next() } else { self.children[cur].prev() };
        if let Err(e) = r {
            self.heap.clear();
            return Err(e);
        }
        self.fix_top();
        Ok(())
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }
    fn key(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].key())
    }
    fn value(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].value())
    }
    fn value_bytes(&self) -> bytes::Bytes {
        self.heap.first().map(|&i| self.children[i].value_bytes()).unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.reposition(Direction::Forward, |c| c.seek_to_first())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.reposition(Direction::Reverse, |c| c.seek_to_last())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // Forward, with the current key before `target`: every child sits on its first entry
        // past what was consumed, so one already at or past `target` is where a seek would put
        // it (an exhausted one stays exhausted), and only the children behind `target` move —
        // a cursor seeking ahead (past a key's old versions, to the next bucket) pays for the
        // sources that hold the keys it skips, not for every table.
        let ahead = self.direction == Direction::Forward
            && self.heap.first().is_some_and(|&i| key::compare(self.children[i].key(), target) == Ordering::Less);
        if ahead {
            self.seek_ahead(target)
        } else {
            self.reposition(Direction::Forward, |c| c.seek(target))
        }
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.reposition(Direction::Reverse, |c| c.seek_for_prev(target))
    }
    fn next(&mut self) -> Result<()> {
        self.step(Direction::Forward)
    }
    fn prev(&mut self) -> Result<()> {
        self.step(Direction::Reverse)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::key::ValueKind;
    use crate::memtable::Memtable;

    fn mem(keys: &[(&str, u64)]) -> BoxedIter {
        let m = Arc::new(Memtable::new(1));
        for (k, s) in keys {
            m.insert(*s, ValueKind::Put, k.as_bytes(), k.as_bytes());
        }
        Box::new(m.iter())
    }

    fn user(it: &MergingIterator) -> (String, u64) {
        let p = key::parse(it.key()).unwrap();
        (String::from_utf8(p.user_key.to_vec()).unwrap(), p.seq)
    }

    #[test]
    fn an_upper_bound_drops_sources_past_it_and_loses_nothing_below_it() {
        let children =
            || vec![mem(&[("a", 5), ("b", 6), ("x", 7)]), mem(&[("c", 1), ("d", 2)]), mem(&[("b", 3), ("y", 4)])];
        let walk = |it: &mut MergingIterator| {
            let mut out = Vec::new();
            while it.valid() {
                out.push(user(it));
                it.next().unwrap();
            }
            out
        };
        let mut it = MergingIterator::new(children());
        it.set_upper_bound(std::ops::Bound::Excluded(b"c".to_vec()));
        it.seek_to_first().unwrap();
        assert_eq!(it.heap.len(), 2, "the source positioned on c is out");
        it.next().unwrap();
        it.next().unwrap();
        assert_eq!(it.heap.len(), 1, "the first source moved on to x");
        assert_eq!(walk(&mut it), vec![("b".into(), 3), ("y".into(), 4)], "the last source goes on");
        // Included bounds keep their key; lifting the bound while positioned brings the sources back.
        it.set_upper_bound(std::ops::Bound::Included(b"c".to_vec()));
        it.seek(&key::seek_key(b"b", 100)).unwrap();
        assert_eq!(user(&it), ("b".into(), 6));
        it.set_upper_bound(std::ops::Bound::Unbounded);
        let rest: Vec<String> = walk(&mut it).into_iter().map(|(k, _)| k).collect();
        assert_eq!(rest, ["b", "b", "c", "d", "x", "y"]);
        // Backward, the bound does not apply (a cursor's own bounds do).
        it.set_upper_bound(std::ops::Bound::Excluded(b"c".to_vec()));
        it.seek_to_last().unwrap();
        assert_eq!(user(&it), ("y".into(), 4));
    }

    #[test]
    fn merges_and_switches_direction() {
        let mut it = MergingIterator::new(vec![
            mem(&[("b", 9), ("d", 8)]),
            mem(&[("a", 1), ("b", 2), ("e", 3)]),
            mem(&[]),
            mem(&[("c", 4)]),
        ]);
        it.seek_to_first().unwrap();
        let mut all = Vec::new();
        while it.valid() {
            all.push(user(&it));
            it.next().unwrap();
        }
        let want: Vec<(String, u64)> = [("a", 1), ("b", 9), ("b", 2), ("c", 4), ("d", 8), ("e", 3)]
            .iter()
            .map(|(k, s)| (k.to_string(), *s))
            .collect();
        assert_eq!(all, want);
        it.seek_to_last().unwrap();
        let mut back = Vec::new();
        while it.valid() {
            back.push(user(&it));
            it.prev().unwrap();
        }
        back.reverse();
        assert_eq!(back, want);
        // Zig-zag from the middle.
        it.seek(&key::seek_key(b"c", 100)).unwrap();
        assert_eq!(user(&it), ("c".into(), 4));
        it.prev().unwrap();
        assert_eq!(user(&it), ("b".into(), 2));
        it.prev().unwrap();
        assert_eq!(user(&it), ("b".into(), 9));
        it.next().unwrap();
        assert_eq!(user(&it), ("b".into(), 2));
        it.next().unwrap();
        assert_eq!(user(&it), ("c".into(), 4));
        it.seek_for_prev(&key::seek_key(b"bz", 100)).unwrap();
        assert_eq!(user(&it), ("b".into(), 2));
        it.next().unwrap();
        assert_eq!(user(&it), ("c".into(), 4));
    }
}
