//! User compaction filters.

/// What a [`CompactionFilter`] decides for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Keep the entry as it is.
    Keep,
    /// Remove the key: the entry becomes a tombstone (so older versions in deeper levels stay
    /// hidden), which later compactions drop at the bottom of the tree.
    Remove,
    /// Replace the value.
    ChangeValue(Vec<u8>),
}

/// Decides, during compaction, what happens to the newest version of each key.
///
/// Called only for values no live snapshot can see (newer than the newest snapshot), so
/// snapshots never observe a filter's effect. The server uses it to drop expired keys and the
/// elements of deleted collections.
///
/// ```
/// use lsm::compaction::{CompactionFilter, Decision};
///
/// /// Drops every key starting with "tmp:".
/// struct DropTemp;
/// impl CompactionFilter for DropTemp {
///     fn filter(&self, _level: usize, key: &[u8], _value: &[u8]) -> Decision {
///         if key.starts_with(b"tmp:") { Decision::Remove } else { Decision::Keep }
///     }
/// }
/// let opts = lsm::Options::default().compaction_filter(std::sync::Arc::new(DropTemp));
/// ```
pub trait CompactionFilter: Send + Sync {
    /// The decision for `key` → `value`, being compacted into `level`.
    fn filter(&self, level: usize, key: &[u8], value: &[u8]) -> Decision;

    /// A name for logs.
    fn name(&self) -> &str {
        "compaction filter"
    }
}
