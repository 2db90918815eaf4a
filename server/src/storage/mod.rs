//! Redis keys on the `lsm` engine (DESIGN §3).
//!
//! ```text
//! metadata      'M' | db u16 BE | user key                 ->  type u8 | expire_at_ms u64 LE | uid u64 LE | body
//! expiry index  'X' | expire_at_ms u64 BE | db u16 BE | key ->  (empty)
//! db map        "S:dbmap"                                  ->  (logical u16 BE, physical u16 BE)*
//! ```
//! A string's value is the body. Collections keep elements under `'E' | db | uid | field`, so
//! deleting or overwriting one is a single metadata write. An expired key is never returned:
//! reads treat it as absent (lazy expiry), the active cycle deletes keys whose time has come
//! (found through the expiry index), and compaction drops expired records it meets.
//!
//! The `db` in records is a *physical* database. Commands name *logical* databases; a table maps
//! one onto the other so `SWAPDB` is a swap of two table entries (persisted), not a copy.
//! Index entries are written beside every TTL and never updated: an entry whose key has since
//! changed its expiry is stale and is simply dropped when its time comes.

mod collection;
mod expiry;
mod locks;
mod meta;
pub mod txn;

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use bytes::Bytes;

pub use collection::{decode_score, encode_score, ElementIter, Header, ScoreIter, View, LIST_START};
pub use expiry::ShaleFilter;
pub use locks::{KeyLocks, LockGuard};
pub use meta::{KeyType, Meta};
pub use txn::Watched;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

const DB_MAP_KEY: &[u8] = b"S:dbmap";
const DATABASES: usize = 1 << 16;

/// The metadata record key of `key` in physical database `pdb`.
fn meta_key(pdb: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + key.len());
    k.push(b'M');
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The expiry index entry of `key` in `pdb`, expiring at `at`.
fn expiry_key(at: u64, pdb: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(11 + key.len());
    k.push(b'X');
    k.extend_from_slice(&at.to_be_bytes());
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The prefix of the element records (`E`) or score index (`Z`) of incarnation `uid` in `pdb`.
fn element_prefix(tag: u8, pdb: u16, uid: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(11);
    k.push(tag);
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// The first key after every metadata record of `pdb`.
fn meta_end(pdb: u16) -> Vec<u8> {
    match pdb.checked_add(1) {
        Some(next) => meta_key(next, b""),
        None => b"N".to_vec(),
    }
}

/// The keyspace over one engine.
#[derive(Debug)]
pub struct Storage {
    engine: lsm::Db,
    locks: KeyLocks,
    /// Logical database -> physical database.
    map: Vec<AtomicU16>,
    /// Physical database -> logical database.
    inverse: Vec<AtomicU16>,
    /// Clients watching keys (WATCH).
    pub watches: txn::Watches,
    /// Next incarnation id. Starts above the engine's last sequence: every id ever used went
    /// into a batch together with at least one record, so ids handed out before a restart are
    /// all below it.
    next_uid: AtomicU64,
}

/// One page of a SCAN-style walk of a database.
#[derive(Debug, Default)]
pub struct ScanPage {
    /// Live keys seen, in key order, with their metadata.
    pub keys: Vec<(Bytes, Meta)>,
    /// Where the next page starts (None: the walk is complete).
    pub next: Option<Bytes>,
}

impl Storage {
    /// Keys stored in `engine`. Fails if the stored database map is unreadable.
    pub fn new(engine: lsm::Db) -> lsm::Result<Self> {
        let map: Vec<AtomicU16> = (0..DATABASES).map(|i| AtomicU16::new(i as u16)).collect();
        let inverse: Vec<AtomicU16> = (0..DATABASES).map(|i| AtomicU16::new(i as u16)).collect();
        if let Some(raw) = engine.get(DB_MAP_KEY)? {
            if raw.len() % 4 != 0 {
                return Err(lsm::Error::InvalidArgument("damaged database map record".into()));
            }
            for pair in raw.chunks_exact(4) {
                let logical = u16::from_be_bytes([pair[0], pair[1]]);
                let physical = u16::from_be_bytes([pair[2], pair[3]]);
                map[usize::from(logical)].store(physical, Ordering::Relaxed);
                inverse[usize::from(physical)].store(logical, Ordering::Relaxed);
            }
        }
        let next_uid = AtomicU64::new(engine.latest_sequence() + 1);
        Ok(Storage { engine, locks: KeyLocks::new(1024), map, inverse, watches: txn::Watches::default(), next_uid })
    }

    /// The engine underneath.
    pub fn engine(&self) -> &lsm::Db {
        &self.engine
    }

    /// Locks `keys` of `db` for a read-modify-write (in a fixed order, so never deadlocks), and
    /// waits for any pipelined blind write to those keys that is queued but not yet applied.
    pub fn lock<'a>(&'a self, db: u32, keys: impl IntoIterator<Item = &'a [u8]>) -> LockGuard<'a> {
        self.settled(self.locks.lock(db, keys))
    }

    /// Locks keys for a whole EXEC: the queued commands' own locking of them is then a no-op
    /// on this thread until [`Storage::end_exec`].
    pub fn lock_for_exec<'a>(&'a self, keys: impl IntoIterator<Item = (u32, &'a [u8])>) -> LockGuard<'a> {
        let guard = self.lock_pairs(keys);
        self.locks.hold(&guard);
        guard
    }

    /// Ends [`Storage::lock_for_exec`] (before its guard is dropped).
    pub fn end_exec(&self) {
        self.locks.release();
    }

    /// Locks keys of several databases (see [`Storage::lock`]).
    pub fn lock_pairs<'a>(&'a self, keys: impl IntoIterator<Item = (u32, &'a [u8])>) -> LockGuard<'a> {
        self.settled(self.locks.lock_pairs(keys))
    }

    fn settled<'a>(&'a self, guard: LockGuard<'a>) -> LockGuard<'a> {
        let ticket = self.locks.pending_ticket(&guard);
        if ticket > 0 {
            self.engine.wait_for_write(ticket);
        }
        guard
    }

    /// Queues `batch` (blind writes to `keys` of `db`) without waiting for it: the key locks are
    /// held only while it is queued, and later read-modify-writes of those keys wait for it.
    pub fn write_queued(&self, db: u32, keys: &[Bytes], batch: lsm::WriteBatch) -> lsm::WriteFuture {
        let guard = self.locks.lock(db, keys.iter().map(|k| &k[..]));
        self.watches.touch_batch(&batch);
        let future = self.engine.write_async(batch, &lsm::WriteOptions::default());
        if let Some(ticket) = future.ticket() {
            self.locks.set_pending(&guard, ticket);
        }
        future
    }

    fn phys(&self, db: u32) -> u16 {
        self.map[db as usize % DATABASES].load(Ordering::Acquire)
    }

    /// The live (not expired) metadata of `key`.
    pub fn get(&self, db: u32, key: &[u8]) -> lsm::Result<Option<Meta>> {
        self.get_physical(self.phys(db), key, now_ms())
    }

    fn get_physical(&self, pdb: u16, key: &[u8], now: u64) -> lsm::Result<Option<Meta>> {
        // Short keys are built on the stack: this is every read's path.
        let mut buf = [0u8; 128];
        let raw = if key.len() + 3 <= buf.len() {
            buf[0] = b'M';
            buf[1..3].copy_from_slice(&pdb.to_be_bytes());
            buf[3..3 + key.len()].copy_from_slice(key);
            self.raw_get(&buf[..3 + key.len()])?
        } else {
            self.raw_get(&meta_key(pdb, key))?
        };
        let Some(raw) = raw else { return Ok(None) };
        let meta = decode(raw)?;
        Ok((!meta.is_expired(now)).then_some(meta))
    }

    /// Adds writing `meta` for `key` to `batch` (and its expiry index entry).
    pub fn put_into(&self, batch: &mut lsm::WriteBatch, db: u32, key: &[u8], meta: &Meta) {
        let pdb = self.phys(db);
        batch.put(meta_key(pdb, key), meta.encode());
        if meta.expire_at_ms != 0 {
            batch.put(expiry_key(meta.expire_at_ms, pdb, key), b"");
        }
    }

    /// Adds deleting `key` to `batch`.
    pub fn delete_into(&self, batch: &mut lsm::WriteBatch, db: u32, key: &[u8]) {
        batch.delete(meta_key(self.phys(db), key));
    }

    /// A record as the current command sees it (inside EXEC: with the transaction's writes).
    fn raw_get(&self, key: &[u8]) -> lsm::Result<Option<Bytes>> {
        match txn::lookup(key) {
            Some(v) => Ok(v),
            None => txn::snapshot_get(&self.engine, key),
        }
    }

    /// Records in `[start, end)` as the current command sees them.
    fn raw_range(&self, start: std::ops::Bound<Vec<u8>>, end: std::ops::Bound<Vec<u8>>) -> txn::RawRange {
        txn::range(&self.engine, start, end)
    }

    /// Applies `batch` atomically (one command = one batch; inside EXEC it joins the
    /// transaction's batch). Watchers of the keys it writes are told.
    pub fn write(&self, batch: lsm::WriteBatch) -> lsm::Result<()> {
        let Some(batch) = txn::buffer(batch) else { return Ok(()) };
        self.commit(batch)
    }

    /// Commits `batch` to the engine now (EXEC's own commit goes here).
    pub fn commit(&self, batch: lsm::WriteBatch) -> lsm::Result<()> {
        let watchers = self.watches.affected(&batch);
        self.engine.write(batch, &lsm::WriteOptions::default())?;
        // Only once the write is visible: a watcher that re-reads after this sees it.
        for f in watchers {
            f.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// A fresh incarnation id for a new collection.
    pub fn new_uid(&self) -> u64 {
        self.next_uid.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds copies of every element record of incarnation `uid` in `from` (a collection's
    /// `E` and `Z` records) to `batch`, as incarnation `new_uid` of database `to`. Strings have
    /// none. Used by COPY and MOVE.
    pub fn copy_elements_into(
        &self,
        batch: &mut lsm::WriteBatch,
        from: u32,
        uid: u64,
        to: u32,
        new_uid: u64,
    ) -> lsm::Result<()> {
        let (src, dst) = (self.phys(from), self.phys(to));
        for tag in [b'E', b'Z'] {
            let prefix = element_prefix(tag, src, uid);
            let end = collection::prefix_end(&prefix);
            for kv in self.raw_range(std::ops::Bound::Included(prefix.clone()), std::ops::Bound::Excluded(end)) {
                let (k, v) = kv?;
                let mut key = element_prefix(tag, dst, new_uid);
                key.extend_from_slice(&k[prefix.len()..]);
                batch.put(key, v);
            }
        }
        Ok(())
    }

    /// A key of `db` picked at random (RANDOMKEY): the first live key at or after a random point
    /// of the database's key range, wrapping around once.
    pub fn random_key(&self, db: u32) -> lsm::Result<Option<Bytes>> {
        let target: [u8; 8] = rand::random();
        for start in [&target[..], b""] {
            let page = self.scan(db, start, 64)?;
            if let Some((k, _)) = page.keys.into_iter().next() {
                return Ok(Some(k));
            }
        }
        // Everything near the start was expired; walk on until a live key appears.
        let mut cursor = Bytes::new();
        loop {
            let page = self.scan(db, &cursor, 1024)?;
            if let Some((k, _)) = page.keys.into_iter().next() {
                return Ok(Some(k));
            }
            match page.next {
                Some(next) => cursor = next,
                None => return Ok(None),
            }
        }
    }

    /// Sets a string, replacing whatever `key` held.
    pub fn set_string(&self, db: u32, key: &[u8], value: Bytes, expire_at_ms: u64) -> lsm::Result<()> {
        let mut b = lsm::WriteBatch::new();
        self.put_into(&mut b, db, key, &Meta::string(value, expire_at_ms));
        self.write(b)
    }

    /// Live keys in `db`.
    pub fn dbsize(&self, db: u32) -> lsm::Result<u64> {
        Ok(self.keyspace_counts(db)?.0)
    }

    /// Live keys in `db`, and how many of them have an expiry (a scan of the db's metadata).
    pub fn keyspace_counts(&self, db: u32) -> lsm::Result<(u64, u64)> {
        let now = now_ms();
        let pdb = self.phys(db);
        let (mut keys, mut expires) = (0, 0);
        for kv in
            self.raw_range(std::ops::Bound::Included(meta_key(pdb, b"")), std::ops::Bound::Excluded(meta_end(pdb)))
        {
            let (_, v) = kv?;
            let m = decode(v)?;
            if !m.is_expired(now) {
                keys += 1;
                expires += u64::from(m.expire_at_ms != 0);
            }
        }
        Ok((keys, expires))
    }

    /// Logical databases below `databases` that hold at least one metadata record (found by
    /// seeking from physical database to physical database, not scanning).
    pub fn nonempty_databases(&self, databases: u32) -> lsm::Result<Vec<u32>> {
        let mut physical = Vec::new();
        let mut it = self.engine.iter(&lsm::ReadOptions::default());
        it.seek(b"M")?;
        while it.valid() && it.key().first() == Some(&b'M') && it.key().len() >= 3 {
            let pdb = u16::from_be_bytes([it.key()[1], it.key()[2]]);
            physical.push(pdb);
            match pdb.checked_add(1) {
                Some(next) => it.seek(&meta_key(next, b""))?,
                None => break,
            }
        }
        it.status()?;
        Ok((0..databases).filter(|&db| physical.contains(&self.phys(db))).collect())
    }

    /// Up to `count` records of `db` from `cursor` (a key; empty = the start), in key order,
    /// skipping expired keys. Used by KEYS, SCAN and RANDOMKEY.
    pub fn scan(&self, db: u32, cursor: &[u8], count: usize) -> lsm::Result<ScanPage> {
        let pdb = self.phys(db);
        let now = now_ms();
        let mut page = ScanPage::default();
        let (start, end) = (std::ops::Bound::Included(meta_key(pdb, cursor)), std::ops::Bound::Excluded(meta_end(pdb)));
        for (seen, kv) in self.raw_range(start, end).enumerate() {
            let (k, v) = kv?;
            let key = k.slice(3..);
            if seen == count {
                page.next = Some(key);
                break;
            }
            let meta = decode(v)?;
            if !meta.is_expired(now) {
                page.keys.push((key, meta));
            }
        }
        Ok(page)
    }

    /// Deletes every key of `db` (metadata and elements) with range tombstones.
    pub fn flushdb(&self, db: u32) -> lsm::Result<()> {
        let pdb = self.phys(db);
        let mut b = lsm::WriteBatch::new();
        b.delete_range(meta_key(pdb, b""), meta_end(pdb));
        for tag in [b'E', b'Z'] {
            let end = match pdb.checked_add(1) {
                Some(next) => vec![tag, (next >> 8) as u8, next as u8],
                None => vec![tag + 1],
            };
            b.delete_range(vec![tag, (pdb >> 8) as u8, pdb as u8], end);
        }
        self.write(b)
    }

    /// Deletes every key of every database (and the whole expiry index).
    pub fn flushall(&self) -> lsm::Result<()> {
        let mut b = lsm::WriteBatch::new();
        b.delete_range(b"E", b"F").delete_range(b"M", b"N").delete_range(b"X", b"Y").delete_range(b"Z", b"[");
        self.write(b)
    }

    /// Swaps two logical databases (`SWAPDB`): every read-modify-write is held off while the
    /// map changes, and the new map is stored durably before the swap is visible.
    pub fn swap_databases(&self, a: u32, b: u32) -> lsm::Result<()> {
        let _all = self.locks.lock_all();
        let (pa, pb) = (self.phys(a), self.phys(b));
        let mut record = Vec::new();
        for (logical, slot) in self.map.iter().enumerate() {
            let physical = match logical as u32 {
                l if l == a % DATABASES as u32 => pb,
                l if l == b % DATABASES as u32 => pa,
                _ => slot.load(Ordering::Acquire),
            };
            if usize::from(physical) != logical {
                record.extend_from_slice(&(logical as u16).to_be_bytes());
                record.extend_from_slice(&physical.to_be_bytes());
            }
        }
        let mut batch = lsm::WriteBatch::new();
        batch.put(DB_MAP_KEY, record);
        self.engine.write(batch, &lsm::WriteOptions::synced())?;
        self.watches.touch_databases(&[pa, pb]);
        self.map[a as usize % DATABASES].store(pb, Ordering::Release);
        self.map[b as usize % DATABASES].store(pa, Ordering::Release);
        self.inverse[usize::from(pb)].store(a as u16, Ordering::Release);
        self.inverse[usize::from(pa)].store(b as u16, Ordering::Release);
        Ok(())
    }

    /// One step of the active expiry cycle: looks at up to `budget` index entries due by `now`,
    /// deletes the keys that really expired (under their key locks) and the entries. Returns
    /// how many keys it deleted and whether due entries remain.
    pub fn expire_cycle(&self, now: u64, budget: usize) -> lsm::Result<(u64, bool)> {
        let mut due = Vec::new();
        let end = expiry_key(now.saturating_add(1), 0, b"");
        for kv in self.engine.range(b"X".to_vec()..end) {
            let (k, _) = kv?;
            if due.len() == budget {
                return self.expire_entries(due, now).map(|n| (n, true));
            }
            due.push(k);
        }
        self.expire_entries(due, now).map(|n| (n, false))
    }

    fn expire_entries(&self, due: Vec<Bytes>, now: u64) -> lsm::Result<u64> {
        let mut expired = 0;
        for entry in due {
            if entry.len() < 11 {
                self.engine.delete(&entry)?;
                continue;
            }
            let at = u64::from_be_bytes(entry[1..9].try_into().unwrap_or_default());
            let pdb = u16::from_be_bytes([entry[9], entry[10]]);
            let key = &entry[11..];
            let mk = meta_key(pdb, key);
            let mut one = lsm::WriteBatch::new();
            one.delete(&entry);
            // Key locks are by logical database.
            let logical = u32::from(self.inverse[usize::from(pdb)].load(Ordering::Acquire));
            let _guard = self.locks.lock(logical, [key]);
            if let Some(raw) = self.engine.get(&mk)? {
                let meta = decode(raw)?;
                if meta.expire_at_ms == at && meta.is_expired(now) {
                    one.delete(&mk);
                    expired += 1;
                }
            }
            self.engine.write(one, &lsm::WriteOptions::default())?;
        }
        Ok(expired)
    }
}

fn decode(raw: Bytes) -> lsm::Result<Meta> {
    Meta::decode(raw).ok_or_else(|| lsm::Error::InvalidArgument("damaged metadata record".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_expire_and_databases_flush_apart() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
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

#[cfg(test)]
mod cycle_tests {
    use super::*;

    fn storage(dir: &std::path::Path) -> Storage {
        Storage::new(lsm::Db::open(dir, lsm::Options::default()).unwrap()).unwrap()
    }

    #[test]
    fn active_cycle_deletes_due_keys_in_bounded_batches_and_skips_stale_entries() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let now = now_ms();
        for i in 0..10u32 {
            s.set_string(3, format!("due{i}").as_bytes(), Bytes::from_static(b"v"), now - 10).unwrap();
        }
        s.set_string(3, b"later", Bytes::from_static(b"v"), now + 60_000).unwrap();
        // A key whose TTL was replaced: its old index entry is stale and must not delete it.
        s.set_string(3, b"renewed", Bytes::from_static(b"v"), now - 5).unwrap();
        s.set_string(3, b"renewed", Bytes::from_static(b"v2"), 0).unwrap();
        assert_eq!(s.expire_cycle(now, 4).unwrap(), (4, true), "a batch stops at its budget");
        assert_eq!(s.expire_cycle(now, 100).unwrap(), (6, false));
        assert_eq!(s.expire_cycle(now, 100).unwrap(), (0, false), "entries are consumed");
        assert_eq!(s.get(3, b"renewed").unwrap().unwrap().body, "v2");
        assert!(s.get(3, b"later").unwrap().is_some());
        let raw_due = s.engine().get(meta_key(3, b"due0")).unwrap();
        assert_eq!(raw_due, None, "deleted from the engine, not just hidden");
    }

    #[test]
    fn swapdb_survives_restart_and_expiry_follows_the_data() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = storage(dir.path());
            s.set_string(0, b"k", Bytes::from_static(b"zero"), 0).unwrap();
            s.set_string(1, b"k", Bytes::from_static(b"one"), 0).unwrap();
            s.set_string(1, b"t", Bytes::from_static(b"ttl"), now_ms() - 1).unwrap();
            s.swap_databases(0, 1).unwrap();
            assert_eq!(s.get(0, b"k").unwrap().unwrap().body, "one");
            assert_eq!(s.get(1, b"k").unwrap().unwrap().body, "zero");
            s.swap_databases(1, 2).unwrap();
            assert_eq!(s.get(2, b"k").unwrap().unwrap().body, "zero");
            assert_eq!(s.nonempty_databases(16).unwrap(), vec![0, 2]);
            s.engine().clone().close().unwrap();
        }
        let s = storage(dir.path());
        assert_eq!(s.get(0, b"k").unwrap().unwrap().body, "one");
        assert_eq!(s.get(1, b"k").unwrap(), None);
        assert_eq!(s.get(2, b"k").unwrap().unwrap().body, "zero");
        assert_eq!(s.expire_cycle(now_ms(), 10).unwrap().0, 1, "the expired key of (now) db 0 is found");
        s.flushdb(0).unwrap();
        assert_eq!((s.dbsize(0).unwrap(), s.dbsize(2).unwrap()), (0, 1));
    }
}
