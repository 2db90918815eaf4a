//! `Iterator + DoubleEndedIterator` over a key range, built on two [`DbIterator`] cursors.

use std::ops::Bound;

use bytes::Bytes;

use super::DbIterator;
use crate::Result;

/// The entries of a key range, from either end; see [`crate::Db::range`].
///
/// Both ends read the same snapshot. The back cursor is created on the first `next_back`.
/// Each cursor enforces the bounds itself ([`DbIterator::set_bounds`]); each stays on the last
/// key it handed out, which is where the other end must stop.
pub struct Range {
    make: Box<dyn Fn() -> DbIterator + Send>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Each cursor boxed: a range is moved around by its users (the server parks one between
    /// the commands of a write group), and two cursors inline made it 900 bytes to copy.
    front: Option<Box<DbIterator>>,
    back: Option<Box<DbIterator>>,
    done: bool,
}

impl std::fmt::Debug for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("lower", &self.lower)
            .field("upper", &self.upper)
            .field("done", &self.done)
            .finish()
    }
}

impl Range {
    pub(crate) fn new(make: Box<dyn Fn() -> DbIterator + Send>, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> Self {
        Range { make, lower, upper, front: None, back: None, done: false }
    }
}

impl Range {
    /// The key the front end handed out last, if only `next` read this range and it is not
    /// used up or failed: every key it stepped over lies at or before this one. A caller that
    /// keeps the range open can go on from here with a later lower bound (see the server's
    /// pops from a sorted set inside a transaction).
    pub fn front_key(&self) -> Option<&[u8]> {
        if self.done || self.back.is_some() {
            return None;
        }
        self.front.as_deref().filter(|it| it.valid()).map(DbIterator::key)
    }

    /// [`Range::front_key`] from the back end (only `next_back` read the range).
    pub fn back_key(&self) -> Option<&[u8]> {
        if self.done || self.front.is_some() {
            return None;
        }
        self.back.as_deref().filter(|it| it.valid()).map(DbIterator::key)
    }

    /// The bounds the range was made with.
    pub fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (self.lower.as_ref().map(Vec::as_slice), self.upper.as_ref().map(Vec::as_slice))
    }

    fn advance_front(&mut self) -> Result<Option<(Bytes, Bytes)>> {
        let it = match self.front.as_mut() {
            Some(it) => {
                it.next()?;
                it
            }
            None => {
                let mut it = (self.make)();
                it.set_bounds(self.lower.clone(), self.upper.clone());
                match &self.lower {
                    Bound::Included(k) | Bound::Excluded(k) => it.seek(k)?,
                    Bound::Unbounded => it.seek_to_first()?,
                }
                if let Bound::Excluded(k) = &self.lower {
                    if it.valid() && it.key() == k.as_slice() {
                        it.next()?;
                    }
                }
                self.front.insert(Box::new(it))
            }
        };
        if !it.valid() {
            return Ok(None);
        }
        let k = it.key();
        // The back cursor sits on the last key it handed out.
        if self.back.as_ref().is_some_and(|b| b.valid() && k >= b.key()) {
            return Ok(None);
        }
        Ok(Some((Bytes::copy_from_slice(k), it.value_bytes())))
    }

    fn advance_back(&mut self) -> Result<Option<(Bytes, Bytes)>> {
        let it = match self.back.as_mut() {
            Some(it) => {
                it.prev()?;
                it
            }
            None => {
                let mut it = (self.make)();
                it.set_bounds(self.lower.clone(), self.upper.clone());
                match &self.upper {
                    Bound::Included(k) | Bound::Excluded(k) => it.seek_for_prev(k)?,
                    Bound::Unbounded => it.seek_to_last()?,
                }
                if let Bound::Excluded(k) = &self.upper {
                    if it.valid() && it.key() == k.as_slice() {
                        it.prev()?;
                    }
                }
                self.back.insert(Box::new(it))
            }
        };
        if !it.valid() {
            return Ok(None);
        }
        let (k, v) = (it.key(), it.value());
        if self.front.as_ref().is_some_and(|f| f.valid() && k <= f.key()) {
            return Ok(None);
        }
        Ok(Some((Bytes::copy_from_slice(k), Bytes::copy_from_slice(v))))
    }

    fn finish(&mut self, r: Result<Option<(Bytes, Bytes)>>) -> Option<Result<(Bytes, Bytes)>> {
        match r {
            Ok(Some(kv)) => Some(Ok(kv)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl Iterator for Range {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.advance_front();
        self.finish(r)
    }
}

impl DoubleEndedIterator for Range {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.advance_back();
        self.finish(r)
    }
}
