//! The compaction filter: drops the elements of dead collection incarnations.

use std::sync::{Mutex, OnceLock};

use super::collection::is_live;

/// Decides, during compaction, what no read can see any more: element (`E`), score-index (`Z`)
/// and owner (`U`) records of collection incarnations that are no longer the live value of
/// their key (deleted, overwritten, expired, flushed).
///
/// Metadata records are always kept, even once expired: a key counts in `DBSIZE` until the
/// expiry cycle deletes it (as in Redis), and that delete is what keeps the keyspace counts
/// exact; a record vanishing inside compaction would not be counted. Reads hide expired keys.
///
/// Liveness needs lookups, so the filter holds a non-owning handle to the database, attached
/// after it opens; until then it keeps every element. Elements of one incarnation are adjacent
/// in a compaction's input, so one answer is cached for the whole run.
#[derive(Debug, Default)]
pub struct ShaleFilter {
    db: OnceLock<lsm::WeakDb>,
    last: Mutex<Option<(u16, u64, bool)>>,
}

impl ShaleFilter {
    /// Gives the filter the database it filters (call once, right after opening it).
    pub fn attach(&self, db: &lsm::Db) {
        let _ = self.db.set(db.downgrade());
    }

    fn live(&self, pdb: u16, uid: u64) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, u, live)) = *last {
            if (p, u) == (pdb, uid) {
                return live;
            }
        }
        let Some(db) = self.db.get() else { return true };
        // Any doubt (an error reading) keeps the record.
        let live = db.snapshot().and_then(|snap| is_live(&snap, pdb, uid)).unwrap_or(true);
        *last = Some((pdb, uid, live));
        live
    }
}

impl lsm::CompactionFilter for ShaleFilter {
    fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> lsm::Decision {
        let keep = match key.first() {
            Some(b'E' | b'R' | b'Z') if key.len() >= 11 => {
                let pdb = u16::from_be_bytes([key[1], key[2]]);
                let uid = u64::from_be_bytes(key[3..11].try_into().unwrap_or_default());
                self.live(pdb, uid)
            }
            Some(b'U') if key.len() == 9 && value.len() >= 2 => {
                let uid = u64::from_be_bytes(key[1..9].try_into().unwrap_or_default());
                self.live(u16::from_be_bytes([value[0], value[1]]), uid)
            }
            _ => true,
        };
        if keep {
            lsm::Decision::Keep
        } else {
            lsm::Decision::Remove
        }
    }

    fn name(&self) -> &str {
        "shale"
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::storage::tests::filtered_storage;
    use crate::storage::{now_ms, ExecContext, KeyType, Storage};

    #[test]
    fn expired_keys_stay_counted_until_the_expiry_cycle_deletes_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = filtered_storage(dir.path());
        let cx = ExecContext::new();
        for i in 0..100u32 {
            let expire = if i % 2 == 0 { now_ms() - 1 } else { 0 };
            s.set_string(&cx, 0, format!("k{i}").as_bytes(), Bytes::from_static(b"v"), expire).unwrap();
        }
        s.engine().compact_range::<&[u8], _>(..).unwrap();
        let entries = |s: &Storage| s.engine().live_files().iter().map(|f| f.entries).sum::<u64>();
        // + 1: the layout record.
        assert_eq!(entries(&s), 100 + 50 + 1, "compaction keeps expired metadata and their index entries");
        assert_eq!(s.dbsize(0), 100, "as in Redis: expired until reclaimed");
        assert_eq!(s.get(&cx, 0, b"k0").unwrap(), None, "but never readable");
        assert_eq!(s.expire_cycle(&ExecContext::new(), now_ms(), 1000).unwrap(), (50, false));
        assert_eq!(s.dbsize(0), 50);
        s.engine().compact_range::<&[u8], _>(..).unwrap();
        assert_eq!(entries(&s), 50 + 1, "the cycle's deletes reclaim the keys and their index entries");
    }

    #[test]
    fn compaction_drops_elements_of_dead_incarnations_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = filtered_storage(dir.path());
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        let make = |key: &[u8], n: u32| {
            let mut b = lsm::WriteBatch::new();
            let mut meta = v.create(&mut b, key, KeyType::Hash);
            for i in 0..n {
                v.add_field(&mut b, meta.uid, format!("f{i}").as_bytes(), b"x", None);
            }
            meta.body = crate::storage::Header { count: u64::from(n), ..Default::default() }.body(KeyType::Hash);
            v.put_meta(&mut b, key, &meta);
            s.write(&cx, b).unwrap();
            meta
        };
        let kept = make(b"kept", 100);
        let _deleted = make(b"deleted", 1000);
        let _overwritten = make(b"overwritten", 1000);
        let renamed = make(b"old-name", 10);
        let mut b = lsm::WriteBatch::new();
        v.delete_meta(&mut b, b"deleted");
        v.delete_meta(&mut b, b"old-name");
        v.put_meta(&mut b, b"new-name", &renamed);
        v.claim(&mut b, renamed.uid, b"new-name");
        s.write(&cx, b).unwrap();
        s.set_string(&cx, 0, b"overwritten", Bytes::from_static(b"now a string"), 0).unwrap();
        s.engine().compact_range::<&[u8], _>(..).unwrap();
        let entries: u64 = s.engine().live_files().iter().map(|f| f.entries).sum();
        // kept: meta + owner + 100 fields; renamed: meta + owner + 10 fields; overwritten: its
        // string meta; and the layout record.
        assert_eq!(entries, 102 + 12 + 1 + 1);
        assert_eq!(v.members(kept.uid, std::ops::Bound::Unbounded).count(), 100);
        assert_eq!(v.members(renamed.uid, std::ops::Bound::Unbounded).count(), 10);
    }
}
