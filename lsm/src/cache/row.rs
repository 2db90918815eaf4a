//! The row cache: the newest version of a user key in one table, found by a point lookup,
//! kept so the next lookup of that key in that table skips the table's index and data block
//! (RocksDB's `row_cache`).
//!
//! Entries are keyed by `(table number, xxh3-64 of the user key)` and hold the user key itself,
//! compared on every hit, so two keys with one hash never answer for each other. Tables never
//! change, so an entry never goes stale: it is dropped with its table (see
//! [`super::BlockCache::evict_file`]) or by the clock. Only lookups that can see the table's
//! newest version of the key use it (a read at a sequence number at or past the table's
//! largest), so a snapshot older than the table never reads a version it must not see.

use bytes::{BufMut, Bytes, BytesMut};

use super::{allocation_size, Shards};
use crate::memtable::Lookup;

/// What one entry costs beyond its bytes: its slot in the shard (key 16 bytes, the row 48,
/// the clock's fields 24), its share of the shard's index and clock (~25 under churn, see
/// [`super::Lru`]) and the shared buffer's header (32): ~150 bytes, which for short values is
/// most of a row's memory.
const ENTRY_OVERHEAD: usize = 150;

/// One cached row: the user key followed by the value (empty for a tombstone).
#[derive(Debug, Clone)]
struct Row {
    data: Bytes,
    key_len: u32,
    seq: u64,
    deleted: bool,
}

/// Rows in 16 CLOCK shards bounded in bytes.
#[derive(Debug)]
pub struct RowCache {
    rows: Shards<Row>,
}

impl RowCache {
    /// A cache of about `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        RowCache { rows: Shards::new(capacity) }
    }

    /// The newest version of `user_key` (whose xxh3-64 is `hash`) in table `table`, if cached.
    pub fn get(&self, table: u64, hash: u64, user_key: &[u8]) -> Option<Lookup> {
        // Read in place: one reference count taken (the value's), not the row's too.
        self.rows
            .lock((table, hash))
            .get_with(&(table, hash), |row| {
                let k = row.key_len as usize;
                (&row.data[..k] == user_key).then(|| match row.deleted {
                    true => Lookup::Deleted(row.seq),
                    false => Lookup::Found(row.data.slice(k..), row.seq),
                })
            })
            .flatten()
    }

    /// Caches `found`, the newest version of `user_key` in table `table`.
    pub fn insert(&self, table: u64, hash: u64, user_key: &[u8], found: &Lookup) {
        let (value, seq, deleted): (&[u8], u64, bool) = match found {
            Lookup::Found(v, seq) => (v, *seq, false),
            Lookup::Deleted(seq) => (&[], *seq, true),
        };
        let Ok(key_len) = u32::try_from(user_key.len()) else { return };
        let mut data = BytesMut::with_capacity(user_key.len() + value.len());
        data.put_slice(user_key);
        data.put_slice(value);
        let charge = allocation_size(data.len()) + ENTRY_OVERHEAD;
        let row = Row { data: data.freeze(), key_len, seq, deleted };
        self.rows.lock((table, hash)).insert((table, hash), row, charge);
    }

    /// Drops the rows of table `table`.
    pub fn evict_table(&self, table: u64) {
        self.rows.evict_table(table);
    }

    /// Bytes held.
    pub fn usage(&self) -> usize {
        self.rows.usage()
    }

    /// Changes the capacity to about `capacity` bytes, evicting what no longer fits.
    pub fn set_capacity(&self, capacity: usize) {
        self.rows.set_capacity(capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_answer_only_for_their_table_and_key() {
        let c = RowCache::new(1 << 20);
        c.insert(7, 42, b"apple", &Lookup::Found(Bytes::from_static(b"red"), 9));
        c.insert(7, 43, b"gone", &Lookup::Deleted(11));
        assert_eq!(c.get(7, 42, b"apple"), Some(Lookup::Found(Bytes::from_static(b"red"), 9)));
        assert_eq!(c.get(7, 43, b"gone"), Some(Lookup::Deleted(11)));
        // Another table, or another key with the same hash: not an answer.
        assert_eq!(c.get(8, 42, b"apple"), None);
        assert_eq!(c.get(7, 42, b"apricot"), None);
        c.evict_table(7);
        assert_eq!(c.get(7, 42, b"apple"), None);
        assert_eq!(c.usage(), 0);
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let c = RowCache::new(64 << 10);
        for i in 0..10_000u64 {
            c.insert(1, i, format!("key{i}").as_bytes(), &Lookup::Found(Bytes::from(vec![b'v'; 100]), i));
        }
        assert!(c.usage() <= 64 << 10, "{}", c.usage());
        let kept = (0..10_000u64).filter(|&i| c.get(1, i, format!("key{i}").as_bytes()).is_some()).count();
        // 262 bytes charged a row (112 for the key and value, 150 beside): 15 fit a shard.
        assert!(kept > 120 && kept <= 240, "{kept} rows kept");
    }
}
