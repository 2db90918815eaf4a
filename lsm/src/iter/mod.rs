//! Iterators over internal keys, and the user-facing iterators built on them.
//!
//! Inside the engine every source (memtable, table, level, merge) is a cursor implementing
//! [`InternalIterator`]; [`DbIterator`] hides versions and tombstones on top of a merge of them;
//! [`Range`] adapts that cursor to `Iterator + DoubleEndedIterator` at the edge.

mod db_iter;
mod level;
mod merge;
mod range;

pub use db_iter::DbIterator;
pub use level::LevelIter;
pub use merge::MergingIterator;
pub use range::Range;

use bytes::Bytes;

use crate::Result;

/// A cursor over internal keys in [`crate::key::compare`] order.
///
/// Positioning calls return `Err` on I/O or corruption; after an error the cursor is invalid.
/// `key` and `value` may only be called while `valid()`.
pub trait InternalIterator: Send {
    /// True when positioned on an entry.
    fn valid(&self) -> bool;
    /// The current internal key.
    fn key(&self) -> &[u8];
    /// The current value.
    fn value(&self) -> &[u8];
    /// The current value as `Bytes`: a reference-counted share of the memtable entry or table
    /// block where the source allows it, a copy otherwise.
    fn value_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.value())
    }
    /// Positions at the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Positions at the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Positions at the first entry `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Positions at the last entry `<= target`.
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the next entry.
    fn next(&mut self) -> Result<()>;
    /// Moves to the previous entry.
    fn prev(&mut self) -> Result<()>;
}

/// A boxed internal iterator.
pub type BoxedIter = Box<dyn InternalIterator>;
