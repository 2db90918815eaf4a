//! Block-based sorted string tables.
//!
//! ```text
//! [data block 1] … [data block N] [filter] [properties] [range tombstones] [meta-index] [index] [footer]
//! ```
//! See `lsm/FORMAT.md` for the byte layout of every piece.

pub mod block;
pub mod bloom;
mod builder;
pub mod format;
mod index;
mod source;
mod table;

pub use builder::{TableBuilder, TableOptions};
pub use format::TableProperties;
pub use table::{Fetch, PointFetch, Table, TableIter};

/// Meta-index key of the bloom filter block.
pub(crate) const META_FILTER: &[u8] = b"lsm.bloom";
/// Meta-index key of the properties block.
pub(crate) const META_PROPERTIES: &[u8] = b"lsm.properties";
/// Meta-index key of the range tombstone block.
pub(crate) const META_RANGE_DEL: &[u8] = b"lsm.range_del";

#[cfg(test)]
mod tests;
