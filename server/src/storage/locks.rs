//! Striped key locks: read-modify-write commands lock their keys so concurrent clients never
//! lose an update; stripes are taken in index order, so two commands never deadlock.

use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

/// A fixed set of mutexes that keys hash onto.
#[derive(Debug)]
pub struct KeyLocks {
    stripes: Vec<Mutex<()>>,
}

/// Holds the stripes of some keys until dropped.
#[derive(Debug)]
pub struct LockGuard<'a> {
    _held: Vec<MutexGuard<'a, ()>>,
}

impl KeyLocks {
    /// `n` stripes.
    pub fn new(n: usize) -> Self {
        KeyLocks { stripes: (0..n.max(1)).map(|_| Mutex::new(())).collect() }
    }

    fn stripe(&self, db: u32, key: &[u8]) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        db.hash(&mut h);
        key.hash(&mut h);
        (h.finish() as usize) % self.stripes.len()
    }

    /// Locks the stripes of `keys` in `db`.
    pub fn lock<'a>(&'a self, db: u32, keys: impl IntoIterator<Item = &'a [u8]>) -> LockGuard<'a> {
        self.lock_pairs(keys.into_iter().map(|k| (db, k)))
    }

    /// Locks the stripes of keys in several databases (MOVE, COPY … DB).
    pub fn lock_pairs<'a>(&'a self, keys: impl IntoIterator<Item = (u32, &'a [u8])>) -> LockGuard<'a> {
        self.lock_indexes(keys.into_iter().map(|(db, k)| self.stripe(db, k)).collect())
    }

    /// Locks every stripe: no read-modify-write command runs until the guard drops (SWAPDB).
    pub fn lock_all(&self) -> LockGuard<'_> {
        self.lock_indexes((0..self.stripes.len()).collect())
    }

    fn lock_indexes(&self, mut idx: Vec<usize>) -> LockGuard<'_> {
        idx.sort_unstable();
        idx.dedup();
        LockGuard {
            _held: idx.into_iter().map(|i| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())).collect(),
        }
    }
}
