//! Redis keys on the `lsm` engine (DESIGN §3).
//!
//! ```text
//! metadata  'M' | db u16 BE | user key   ->  type u8 | expire_at_ms u64 LE | uid u64 LE | body
//! ```
//! A string's value is the body. Collections (next) keep elements under `'E' | db | uid | field`,
//! so deleting or overwriting one is a single metadata write. An expired key is never returned:
//! reads treat it as absent (lazy expiry); writes replace it.

mod expiry;
mod locks;
mod meta;

use bytes::Bytes;

pub use expiry::ExpiryFilter;
pub use locks::{KeyLocks, LockGuard};
pub use meta::{KeyType, Meta};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The metadata record key of `key` in database `db`.
pub fn meta_key(db: u32, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + key.len());
    k.push(b'M');
    k.extend_from_slice(&(db as u16).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The keyspace over one engine.
#[derive(Debug)]
pub struct Storage {
    engine: lsm::Db,
    locks: KeyLocks,
}

impl Storage {
    /// Keys stored in `engine`.
    pub fn new(engine: lsm::Db) -> Self {
        Storage { engine, locks: KeyLocks::new(1024) }
    }

    /// The engine underneath.
    pub fn engine(&self) -> &lsm::Db {
        &self.engine
    }

    /// Locks `keys` of `db` for a read-modify-write (in a fixed order, so never deadlocks).
    pub fn lock<'a>(&'a self, db: u32, keys: impl IntoIterator<Item = &'a [u8]>) -> LockGuard<'a> {
        self.locks.lock(db, keys)
    }

    /// The live (not expired) metadata of `key`.
    pub fn get(&self, db: u32, key: &[u8]) -> lsm::Result<Option<Meta>> {
        let Some(raw) = self.engine.get(meta_key(db, key))? else { return Ok(None) };
        let meta = Meta::decode(raw)
            .ok_or_else(|| lsm::Error::InvalidArgument(format!("damaged metadata for a key in db {db}")))?;
        Ok((!meta.is_expired(now_ms())).then_some(meta))
    }

    /// Adds writing `meta` for `key` to `batch`.
    pub fn put_into(batch: &mut lsm::WriteBatch, db: u32, key: &[u8], meta: &Meta) {
        batch.put(meta_key(db, key), meta.encode());
    }

    /// Adds deleting `key` to `batch`.
    pub fn delete_into(batch: &mut lsm::WriteBatch, db: u32, key: &[u8]) {
        batch.delete(meta_key(db, key));
    }

    /// Applies `batch` atomically (one command = one batch).
    pub fn write(&self, batch: lsm::WriteBatch) -> lsm::Result<()> {
        self.engine.write(batch, &lsm::WriteOptions::default())
    }

    /// Sets a string, replacing whatever `key` held.
    pub fn set_string(&self, db: u32, key: &[u8], value: Bytes, expire_at_ms: u64) -> lsm::Result<()> {
        let mut b = lsm::WriteBatch::new();
        Self::put_into(&mut b, db, key, &Meta::string(value, expire_at_ms));
        self.write(b)
    }

    /// Live keys in `db`.
    pub fn dbsize(&self, db: u32) -> lsm::Result<u64> {
        Ok(self.keyspace_counts(db)?.0)
    }

    /// Live keys in `db`, and how many of them have an expiry (a scan of the db's metadata).
    pub fn keyspace_counts(&self, db: u32) -> lsm::Result<(u64, u64)> {
        let now = now_ms();
        let (mut keys, mut expires) = (0, 0);
        for kv in self.engine.prefix(meta_key(db, b"")) {
            let (_, v) = kv?;
            if let Some(m) = Meta::decode(v).filter(|m| !m.is_expired(now)) {
                keys += 1;
                expires += u64::from(m.expire_at_ms != 0);
            }
        }
        Ok((keys, expires))
    }

    /// Databases that hold at least one metadata record (found by seeking, not scanning).
    pub fn nonempty_databases(&self) -> lsm::Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut it = self.engine.iter(&lsm::ReadOptions::default());
        it.seek(b"M")?;
        while it.valid() && it.key().first() == Some(&b'M') && it.key().len() >= 3 {
            let db = u32::from(u16::from_be_bytes([it.key()[1], it.key()[2]]));
            out.push(db);
            if db == u32::from(u16::MAX) {
                break;
            }
            it.seek(&meta_key(db + 1, b""))?;
        }
        it.status()?;
        Ok(out)
    }

    /// Deletes every key of `db` with one range tombstone.
    pub fn flushdb(&self, db: u32) -> lsm::Result<()> {
        let start = meta_key(db, b"");
        let mut end = b"M".to_vec();
        end.extend_from_slice(&(db + 1).to_be_bytes()[2..]);
        if db >= u32::from(u16::MAX) {
            end = b"N".to_vec();
        }
        self.engine.delete_range(start, end)
    }

    /// Deletes every key of every database.
    pub fn flushall(&self) -> lsm::Result<()> {
        self.engine.delete_range(b"M", b"N")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_expire_and_databases_flush_apart() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap());
        s.set_string(0, b"a", Bytes::from_static(b"1"), 0).unwrap();
        s.set_string(0, b"gone", Bytes::from_static(b"x"), now_ms() - 1).unwrap();
        s.set_string(1, b"a", Bytes::from_static(b"2"), 0).unwrap();
        s.set_string(65535, b"last", Bytes::from_static(b"3"), 0).unwrap();
        assert_eq!(s.get(0, b"a").unwrap().unwrap().body, "1");
        assert_eq!(s.get(0, b"gone").unwrap(), None, "an expired key is never returned");
        assert_eq!((s.dbsize(0).unwrap(), s.dbsize(1).unwrap()), (1, 1));
        s.flushdb(0).unwrap();
        assert_eq!((s.dbsize(0).unwrap(), s.dbsize(1).unwrap(), s.dbsize(65535).unwrap()), (0, 1, 1));
        s.flushdb(65535).unwrap();
        assert_eq!(s.dbsize(65535).unwrap(), 0);
        s.flushall().unwrap();
        assert_eq!(s.get(1, b"a").unwrap(), None);
    }
}
