//! Striped key locks: read-modify-write commands lock their keys so concurrent clients never
//! lose an update; stripes are taken in index order, so two commands never deadlock. These are
//! internal and held for one command; the user-visible named locks (LOCK/UNLOCK) are
//! [`crate::named_locks`].
//!
//! A stripe also remembers the last async write queued under it and not yet known to be
//! committed (a connection's pipelined SETs run on its own thread and release their stripes
//! as soon as their batch is queued, see `Storage::try_write_blind_async`). Whoever takes the
//! stripe next first waits for that write to be visible ([`LockGuard::settle`]), so every
//! read-modify-write still sees every write to its keys that was queued before it.

use std::sync::{Mutex, MutexGuard};

use super::ExecContext;

/// A fixed set of mutexes that keys hash onto; each holds the stripe's queued async write.
#[derive(Debug)]
pub struct KeyLocks {
    stripes: Vec<Mutex<Option<lsm::WriteTicket>>>,
}

/// Holds the stripes of some keys until dropped.
#[derive(Debug)]
pub struct LockGuard<'a> {
    held: Vec<MutexGuard<'a, Option<lsm::WriteTicket>>>,
    stripes: Vec<usize>,
}

impl LockGuard<'_> {
    /// The stripes this guard holds.
    pub(super) fn stripes(&self) -> &[usize] {
        &self.stripes
    }

    /// Waits until the async writes queued under these stripes are committed (blocking: for
    /// executor threads), so reads under the guard see them.
    pub(super) fn settle(&mut self, engine: &lsm::Db) {
        for pending in self.held.iter_mut() {
            if let Some(ticket) = pending.take() {
                engine.wait_committed(ticket);
            }
        }
    }

    /// [`LockGuard::settle`] without waiting: `Err(ticket)` if the async write `ticket`, queued
    /// under one of these stripes, is still being committed.
    pub(super) fn try_settle(&mut self, engine: &lsm::Db) -> Result<(), lsm::WriteTicket> {
        for pending in self.held.iter_mut() {
            match **pending {
                Some(ticket) if !engine.is_committed(ticket) => return Err(ticket),
                Some(_) => **pending = None,
                None => {}
            }
        }
        Ok(())
    }

    /// Records `ticket` as the async write queued under these stripes.
    pub(super) fn queued(&mut self, ticket: lsm::WriteTicket) {
        for pending in self.held.iter_mut() {
            **pending = Some(ticket);
        }
    }
}

impl KeyLocks {
    /// `n` stripes.
    pub fn new(n: usize) -> Self {
        KeyLocks { stripes: (0..n.max(1)).map(|_| Mutex::new(None)).collect() }
    }

    fn stripe(&self, db: u32, key: &[u8]) -> usize {
        // xxh3 rather than SipHash: a pipelined SET takes one stripe per key (SipHash was 2 % of
        // its server CPU). Neither is keyed against a client aiming keys at one stripe.
        (xxhash_rust::xxh3::xxh3_64_with_seed(key, u64::from(db)) as usize) % self.stripes.len()
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
        LockGuard { held, stripes: idx }
    }

    /// True if `cx` holds every stripe.
    pub fn holds_all(&self, cx: &ExecContext) -> bool {
        cx.held_count() == self.stripes.len()
    }

    /// [`KeyLocks::try_lock_pairs`] of the stripes `cx` does not hold yet (a script's keys it
    /// did not declare).
    pub fn try_lock_unheld<'a, 'k>(
        &'a self,
        cx: &ExecContext,
        keys: impl IntoIterator<Item = (u32, &'k [u8])>,
    ) -> Option<LockGuard<'a>> {
        let mut idx: Vec<usize> = keys.into_iter().map(|(db, k)| self.stripe(db, k)).collect();
        cx.skip_held(&mut idx);
        self.try_lock_indexes(idx)
    }

    /// [`KeyLocks::lock_pairs`] without waiting: `None` if any stripe is held by someone else.
    pub fn try_lock_pairs<'a, 'k>(&'a self, keys: impl IntoIterator<Item = (u32, &'k [u8])>) -> Option<LockGuard<'a>> {
        let idx: Vec<usize> = keys.into_iter().map(|(db, k)| self.stripe(db, k)).collect();
        self.try_lock_indexes(idx)
    }

    fn try_lock_indexes(&self, mut idx: Vec<usize>) -> Option<LockGuard<'_>> {
        idx.sort_unstable();
        idx.dedup();
        let mut held = Vec::with_capacity(idx.len());
        for &i in &idx {
            match self.stripes[i].try_lock() {
                Ok(g) => held.push(g),
                Err(std::sync::TryLockError::Poisoned(e)) => held.push(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
        Some(LockGuard { held, stripes: idx })
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
