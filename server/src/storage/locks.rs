//! Striped key locks: read-modify-write commands lock their keys so concurrent clients never
//! lose an update; stripes are taken in index order, so two commands never deadlock.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

thread_local! {
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A fixed set of mutexes that keys hash onto.
#[derive(Debug)]
pub struct KeyLocks {
    stripes: Vec<Mutex<()>>,
    /// Per stripe: the engine ticket of the last asynchronous write queued under it (0: none).
    /// A read-modify-write that takes the stripe waits for it, so it never reads around a blind
    /// write that is queued but not yet applied.
    pending: Vec<AtomicU64>,
}

/// Holds the stripes of some keys until dropped.
#[derive(Debug)]
pub struct LockGuard<'a> {
    _held: Vec<MutexGuard<'a, ()>>,
    stripes: Vec<usize>,
}

impl KeyLocks {
    /// `n` stripes.
    pub fn new(n: usize) -> Self {
        KeyLocks {
            stripes: (0..n.max(1)).map(|_| Mutex::new(())).collect(),
            pending: (0..n.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
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
        // Stripes this thread already holds for a running EXEC are not taken again.
        HELD.with(|h| {
            let h = h.borrow();
            if !h.is_empty() {
                idx.retain(|i| !h.contains(i));
            }
        });
        let held = idx.iter().map(|&i| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())).collect();
        LockGuard { _held: held, stripes: idx }
    }

    /// Makes the stripes of `guard` count as held by this thread (EXEC holds its keys' locks
    /// while the queued commands, which lock the same keys, run on it) until [`KeyLocks::release`].
    pub fn hold(&self, guard: &LockGuard<'_>) {
        HELD.with(|h| h.borrow_mut().extend_from_slice(&guard.stripes));
    }

    /// Ends [`KeyLocks::hold`] on this thread.
    pub fn release(&self) {
        HELD.with(|h| h.borrow_mut().clear());
    }

    /// The newest pending asynchronous write ticket among the stripes `guard` holds (0: none).
    pub fn pending_ticket(&self, guard: &LockGuard<'_>) -> u64 {
        guard.stripes.iter().map(|&i| self.pending[i].load(Ordering::Acquire)).max().unwrap_or(0)
    }

    /// Records that an asynchronous write with `ticket` was queued under the stripes of `guard`.
    pub fn set_pending(&self, guard: &LockGuard<'_>, ticket: u64) {
        for &i in &guard.stripes {
            self.pending[i].fetch_max(ticket, Ordering::AcqRel);
        }
    }
}
