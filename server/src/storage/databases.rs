//! Whole databases: DBSIZE and INFO keyspace counts, the key scan behind KEYS, SCAN and
//! RANDOMKEY, FLUSHDB, FLUSHALL and SWAPDB.

use std::sync::atomic::Ordering;

use super::{
    decode, meta_end, meta_key, now_ms, CountsSnapshot, ExecContext, ScanPage, Storage, DATABASES, DB_MAP_KEY,
};

impl Storage {
    /// Keys in `db` (O(1); as in Redis, a key whose TTL has passed counts until it is
    /// reclaimed by the expiry cycle).
    pub fn dbsize(&self, db: u32) -> u64 {
        self.counts.get(self.phys(db), now_ms()).keys
    }

    /// Keys in every database (64K counter reads: for FLUSHALL, not for hot paths).
    pub fn keys_total(&self) -> u64 {
        let now = now_ms();
        (0..DATABASES).map(|pdb| self.counts.get(pdb as u16, now).keys).sum()
    }

    /// Keys in `db` as the command running in `cx` sees them: with the writes its transaction
    /// (EXEC, a script) has buffered and not committed yet.
    pub fn dbsize_seen(&self, cx: &ExecContext, db: u32) -> lsm::Result<u64> {
        let pdb = self.phys(db);
        let committed = self.dbsize(db);
        let Some(deltas) = cx.with_buffered(|batch| self.count_changes(batch, false, false, None)) else {
            return Ok(committed);
        };
        Ok(match deltas?.into_iter().find(|(p, _)| *p == pdb) {
            Some((_, d)) if d.cleared => d.keys.max(0) as u64,
            Some((_, d)) => (committed as i64 + d.keys).max(0) as u64,
            None => committed,
        })
    }

    /// Keys in `db`, those with a TTL, and their average remaining TTL (O(1), INFO keyspace).
    pub fn keyspace_counts(&self, db: u32) -> CountsSnapshot {
        self.counts.get(self.phys(db), now_ms())
    }

    /// Up to `count` records of `db` from `cursor` (a key; empty = the start), in key order,
    /// skipping expired keys. Used by KEYS, SCAN and RANDOMKEY.
    pub fn scan(&self, cx: &ExecContext, db: u32, cursor: &[u8], count: usize) -> lsm::Result<ScanPage> {
        let pdb = self.phys(db);
        let now = now_ms();
        let mut page = ScanPage::default();
        let (start, end) = (std::ops::Bound::Included(meta_key(pdb, cursor)), std::ops::Bound::Excluded(meta_end(pdb)));
        for (seen, kv) in cx.range(&self.engine, start, end).enumerate() {
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

    /// After FLUSHDB / FLUSHALL, or UNLINK of a key of 10,000 elements or more: a memtable
    /// holding at least 1 MiB is frozen and flushed in the background, so the memory of what
    /// was dropped is returned soon, as Redis's background free returns it, not when the
    /// memtable next fills. Inside a transaction the drop is not committed yet,
    /// and nothing happens.
    pub fn reclaim_memtable(&self, cx: &ExecContext) {
        if cx.in_transaction() {
            return;
        }
        if let Err(e) = self.engine.flush_in_background(1 << 20) {
            tracing::warn!(target: "shale::storage", error = %e, "could not flush the memtable after dropping data");
        }
    }

    /// Deletes every key of `db` (metadata and elements) with range tombstones, holding every
    /// key stripe so no read-modify-write straddles it.
    pub fn flushdb(&self, cx: &ExecContext, db: u32) -> lsm::Result<()> {
        let _all = self.lock_all(cx);
        let pdb = self.phys(db);
        let mut b = lsm::WriteBatch::new();
        b.delete_range(meta_key(pdb, b""), meta_end(pdb));
        for tag in [b'E', b'R', b'Z'] {
            let end = match pdb.checked_add(1) {
                Some(next) => vec![tag, (next >> 8) as u8, next as u8],
                None => vec![tag + 1],
            };
            b.delete_range(vec![tag, (pdb >> 8) as u8, pdb as u8], end);
        }
        self.write(cx, b)
    }

    /// Deletes every key of every database (and the whole expiry index).
    pub fn flushall(&self, cx: &ExecContext) -> lsm::Result<()> {
        let _all = self.lock_all(cx);
        let mut b = lsm::WriteBatch::new();
        b.delete_range(b"E", b"F")
            .delete_range(b"M", b"N")
            .delete_range(b"R", b"S")
            .delete_range(b"X", b"Y")
            .delete_range(b"Z", b"[");
        self.write(cx, b)
    }

    /// Swaps two logical databases (`SWAPDB`): every read-modify-write is held off while the
    /// map changes, and the new map is stored durably before the swap is visible.
    pub fn swap_databases(&self, cx: &ExecContext, a: u32, b: u32) -> lsm::Result<()> {
        let _all = self.lock_all(cx);
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
}
