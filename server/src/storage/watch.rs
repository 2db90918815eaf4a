//! WATCH: per watched key, the flags of the clients watching it. Every committed batch that
//! writes a watched key's metadata (or range-deletes over it) sets them, once the batch is
//! visible.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lsm::key::ValueKind;

/// One watched key of one client.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Physical database.
    pub pdb: u16,
    /// The key.
    pub key: Bytes,
    /// Whether it existed (unexpired) when watched, and its expiry then.
    pub live_until: Option<u64>,
}

/// (physical db, key) -> the flags of the clients watching it.
type WatchMap = HashMap<(u16, Bytes), Vec<Arc<AtomicBool>>>;

/// Who watches which keys.
#[derive(Debug, Default)]
pub struct Watches {
    keys: Mutex<WatchMap>,
    count: AtomicUsize,
}

impl Watches {
    /// Registers `flag` (set when the key changes) on `key` of `pdb`.
    pub fn watch(&self, pdb: u16, key: Bytes, flag: &Arc<AtomicBool>) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.entry((pdb, key)).or_default().push(Arc::clone(flag));
        self.count.store(keys.len(), Ordering::Release);
    }

    /// Removes `flag` from every key in `watched`.
    pub fn unwatch(&self, watched: &[Watched], flag: &Arc<AtomicBool>) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        for w in watched {
            let slot = (w.pdb, w.key.clone());
            if let Some(flags) = keys.get_mut(&slot) {
                flags.retain(|f| !Arc::ptr_eq(f, flag));
                if flags.is_empty() {
                    keys.remove(&slot);
                }
            }
        }
        self.count.store(keys.len(), Ordering::Release);
    }

    /// The flags of the clients watching a key `batch` writes. Writers take them before
    /// committing and set them once the batch is visible (a client that WATCHes meanwhile waits
    /// for the writer's key lock, so it reads the new value and needs no flag). A range delete
    /// (FLUSHDB, FLUSHALL) touches only watched keys that exist, as in Redis: `exists` answers
    /// for a metadata record key, before the batch.
    pub fn affected(&self, batch: &lsm::WriteBatch, exists: impl Fn(&[u8]) -> bool) -> Vec<Arc<AtomicBool>> {
        let mut out = Vec::new();
        if self.count.load(Ordering::Acquire) == 0 {
            return out;
        }
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut set = |flags: &Vec<Arc<AtomicBool>>| out.extend(flags.iter().cloned());
        for entry in batch.iter().flatten() {
            match entry.kind {
                ValueKind::RangeDelete => {
                    for ((pdb, key), flags) in keys.iter() {
                        let mk = super::meta_key(*pdb, key);
                        if mk[..] >= *entry.key && mk[..] < *entry.value && exists(&mk) {
                            set(flags);
                        }
                    }
                }
                _ if entry.key.first() == Some(&b'M') && entry.key.len() >= 3 => {
                    let pdb = u16::from_be_bytes([entry.key[1], entry.key[2]]);
                    if let Some(flags) = keys.get(&(pdb, Bytes::copy_from_slice(&entry.key[3..]))) {
                        set(flags);
                    }
                }
                _ => {}
            }
        }
        drop(keys);
        out
    }

    /// Flags the watchers of every key of the physical databases `pdbs` (SWAPDB).
    pub fn touch_databases(&self, pdbs: &[u16]) {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        for ((pdb, _), flags) in keys.iter() {
            if pdbs.contains(pdb) {
                flags.iter().for_each(|f| f.store(true, Ordering::Release));
            }
        }
    }
}
