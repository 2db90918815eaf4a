//! Striped key locks: read-modify-write commands lock their keys so concurrent clients never
//! lose an update; stripes are taken in index order, so two commands never deadlock. These are
//! internal and held for one command; the user-visible named locks (LOCK/UNLOCK) are
//! [`crate::named_locks`].

use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

use super::ExecContext;

/// A fixed set of mutexes that keys hash onto.
#[derive(Debug)]
pub struct KeyLocks {
    stripes: Vec<Mutex<()>>,
}

/// Holds the stripes of some keys until dropped.
#[derive(Debug)]
pub struct LockGuard<'a> {
    _held: Vec<MutexGuard<'a, ()>>,
    stripes: Vec<usize>,
}

impl LockGuard<'_> {
    /// The stripes this guard holds.
    pub(super) fn stripes(&self) -> &[usize] {
        &self.stripes
    }
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

    /// Locks the stripes of keys in (database, key) pairs, skipping those `cx` already holds
    /// (a command queued in an EXEC that locked them all).
    pub fn lock_pairs<'a>(
        &'a self,
        cx: &ExecContext,
        keys: impl IntoIterator<Item = (u32, &'a [u8])>,
    ) -> LockGuard<'a> {
        let mut idx: Vec<usize> = keys.into_iter().map(|(db, k)| self.stripe(db, k)).collect();
        cx.skip_held(&mut idx);
        self.lock_indexes(idx)
    }

    /// Locks every stripe `cx` does not hold yet: no other read-modify-write command runs until
    /// the guard drops (FLUSHDB, SWAPDB).
    pub fn lock_all(&self, cx: &ExecContext) -> LockGuard<'_> {
        let mut idx = (0..self.stripes.len()).collect();
        cx.skip_held(&mut idx);
        self.lock_indexes(idx)
    }

    fn lock_indexes(&self, mut idx: Vec<usize>) -> LockGuard<'_> {
        idx.sort_unstable();
        idx.dedup();
        let held = idx.iter().map(|&i| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())).collect();
        LockGuard { _held: held, stripes: idx }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_stripes_are_not_taken_twice_and_a_panic_releases_them() {
        let locks = std::sync::Arc::new(KeyLocks::new(8));
        let cx = ExecContext::new();
        let outer = locks.lock_pairs(&cx, [(0, &b"a"[..]), (0, &b"b"[..])]);
        cx.hold(outer.stripes());
        // The same keys again under the holding context: no self-deadlock.
        let inner = locks.lock_pairs(&cx, [(0, &b"a"[..])]);
        assert!(inner.stripes().is_empty());
        drop(inner);
        drop(outer);
        cx.reset();
        let l = std::sync::Arc::clone(&locks);
        let _ = std::thread::spawn(move || {
            let cx = ExecContext::new();
            let _g = l.lock_pairs(&cx, [(0, &b"a"[..])]);
            panic!("a command failed while holding its key lock");
        })
        .join();
        // Unwinding dropped the guard: the stripe is free (poisoning is ignored).
        let again = locks.lock_pairs(&ExecContext::new(), [(0, &b"a"[..])]);
        assert_eq!(again.stripes().len(), 1);
    }
}
