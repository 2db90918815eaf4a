//! Dropping expired keys during compaction, through the engine's compaction filter.

use super::{now_ms, Meta};

/// Removes metadata records whose expiry has passed (the engine turns a removal into a
/// tombstone, so nothing older reappears). Reads already hide expired keys; this gets the space
/// back.
#[derive(Debug, Default)]
pub struct ExpiryFilter;

impl lsm::CompactionFilter for ExpiryFilter {
    fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> lsm::Decision {
        if key.first() == Some(&b'M') {
            if let Some(m) = Meta::decode(bytes::Bytes::copy_from_slice(value)) {
                if m.is_expired(now_ms()) {
                    return lsm::Decision::Remove;
                }
            }
        }
        lsm::Decision::Keep
    }

    fn name(&self) -> &str {
        "shale expiry"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::storage::Storage;

    #[test]
    fn compaction_drops_expired_keys() {
        let dir = tempfile::tempdir().unwrap();
        let opts = lsm::Options::default().compaction_filter(Arc::new(ExpiryFilter));
        let s = Storage::new(lsm::Db::open(dir.path(), opts).unwrap()).unwrap();
        for i in 0..100u32 {
            let expire = if i % 2 == 0 { now_ms() - 1 } else { 0 };
            s.set_string(0, format!("k{i}").as_bytes(), Bytes::from_static(b"v"), expire).unwrap();
        }
        s.engine().compact_range::<&[u8], _>(..).unwrap();
        let entries = |s: &Storage| s.engine().live_files().iter().map(|f| f.entries).sum::<u64>();
        assert_eq!(entries(&s), 50 + 50, "the expired half is gone; its expiry index entries remain");
        assert_eq!(s.dbsize(0).unwrap(), 50);
        assert_eq!(s.expire_cycle(now_ms(), 1000).unwrap(), (0, false), "nothing left to delete, only entries");
        s.engine().compact_range::<&[u8], _>(..).unwrap();
        assert_eq!(entries(&s), 50, "the active cycle removed the stale index entries");
    }
}
