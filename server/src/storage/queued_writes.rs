//! Read-modify-write commands run on a connection's own (async) task: their keys' stripes are
//! taken without waiting, their reads answered from memory, and their writes queued with the
//! engine's async commit, the stripes released at once and marked with the write (see
//! `key_locks`), as pipelined plain SETs are (`blind_writes.rs`). The caller (`exec::queued`)
//! runs the commands; this is the storage side: taking the stripes, knowing the keyspace
//! counts' "before" from memory, and queueing the batch.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;

use super::blind_writes::CountChanges;
use super::meta_states::Fingerprint;
use super::{LockGuard, MetaKeys, Storage};
use crate::services::tracking::Touched;

/// The state before (absent, or present with its `expire_at_ms`) of the metadata record of
/// each key a queued write group may write, read from memory before the group runs, while its
/// stripes are held: nobody else writes those records until the group's write is visible, so
/// these are the states its write replaces, and counting it needs no read that could block.
#[derive(Debug, Default)]
pub struct Befores(HashMap<Fingerprint, Option<u64>, BuildHasherDefault<FingerprintHasher>>);

/// A fingerprint is already a hash of its key: the table takes its bits as they are (SipHash
/// of each 128-bit fingerprint, and the table's growth from empty, were 2 % of INCR -P 16).
#[derive(Default)]
pub struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0 ^ u64::from_le_bytes(word)).rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 ^= n as u64 ^ (n >> 64) as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Befores {
    /// Room for the states of `keys` keys.
    pub fn with_capacity(keys: usize) -> Befores {
        Befores(HashMap::with_capacity_and_hasher(keys, BuildHasherDefault::default()))
    }

    /// The state before of the metadata record with `fingerprint` (None: not known).
    pub(super) fn get(&self, fingerprint: Fingerprint) -> Option<Option<u64>> {
        self.0.get(&fingerprint).copied()
    }
}

/// Why [`Storage::try_lock_settled`] could not lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsettled {
    /// Another command holds a stripe.
    Held,
    /// The stripes are free, but this async write queued under one is not visible yet.
    Queued(lsm::WriteTicket),
}

/// A write group's batch, queued: await its commit ([`QueuedWrite::into_parts`]), then hand
/// the outcome to [`Storage::finish_queued`].
#[derive(Debug)]
pub struct QueuedWrite {
    /// Resolves once the batch is committed (or failed).
    commit: lsm::Commit,
    changes: CountChanges,
    touched: Option<Touched>,
}

impl Storage {
    /// Locks the stripes of `keys` without waiting. Fails if another command holds one
    /// ([`Unsettled::Held`]: the commands run where waiting is allowed), or if an async write
    /// queued under one is not visible yet ([`Unsettled::Queued`], with that write's ticket:
    /// the commands may wait for it without blocking, `exec::combine::on_task`).
    pub fn try_lock_settled(&self, keys: &[(u32, &[u8])]) -> Result<LockGuard<'_>, Unsettled> {
        let mut guard = self.locks.try_lock_pairs(keys.iter().copied()).ok_or(Unsettled::Held)?;
        guard.try_settle(&self.engine).map_err(Unsettled::Queued)?;
        Ok(guard)
    }

    /// Adds the states before of the metadata records of a run of commands' `keys` (see
    /// [`Befores`]; command `i` has the next `counts[i]` of them) to `befores`, from memory
    /// only, in order until a command has one that needs the disk (or is damaged: the executor
    /// path reports it); returns how many commands' states are known. The caller holds the
    /// keys' stripes. Every key's fingerprint is taken and its slot's load started before the
    /// first lookup, so a run waits on memory once.
    pub fn learn_befores(&self, befores: &mut Befores, keys: &[(u32, &[u8])], counts: &[usize]) -> usize {
        let failures = self.engine.failed_write_groups();
        let mut metas = MetaKeys::default();
        for (db, key) in keys {
            metas.push(self.phys(*db), key);
        }
        let fingerprints: Vec<Fingerprint> = metas
            .iter()
            .map(|mk| {
                let fingerprint = Fingerprint::of(mk);
                self.meta_states.prefetch(fingerprint);
                fingerprint
            })
            .collect();
        let mut fingerprinted = metas.iter().zip(&fingerprints);
        for (learned, &count) in counts.iter().enumerate() {
            for (mk, fingerprint) in fingerprinted.by_ref().take(count) {
                match self.state_before(mk, *fingerprint, failures, true) {
                    Ok(state) => befores.0.insert(*fingerprint, state),
                    Err(_) => return learned,
                };
            }
        }
        counts.len()
    }

    /// Queues `batch` (the writes of commands that ran under `guard` with [`Storage::learn_befores`]
    /// learned) with the engine's async commit and marks the stripes with it, so their next
    /// holder waits until it is visible; the counts and WATCH flags change now (taken back by
    /// [`Storage::finish_queued`] if the commit fails). `Err`: nothing was queued (the engine
    /// refused the write, or the batch writes a metadata record `befores` does not know).
    /// `now`: the engine's commit thread is woken for it at once even where commits are
    /// deferred ([`Storage::defer_async_commits`]) — for a write others wait on.
    pub fn queue_write(
        &self,
        guard: &mut LockGuard<'_>,
        mut batch: lsm::WriteBatch,
        befores: &Befores,
        now: bool,
    ) -> lsm::Result<QueuedWrite> {
        let deltas = self.count_changes(&batch, true, true, Some(befores))?;
        self.pick_cache.written(&batch);
        // A watched key that was absent before is not "touched" by a range delete; point
        // writes flag their watchers whatever the state before.
        let watchers =
            self.watches.affected(&batch, |mk| befores.get(Fingerprint::of(mk)).is_none_or(|state| state.is_some()));
        let touched = self.tracking.touched(&batch);
        let opts = lsm::WriteOptions::default();
        let queued = if !now && self.defer_commits.load(Ordering::Relaxed) {
            self.engine.write_async_deferred(&mut batch, &opts)
        } else {
            self.engine.write_async(&mut batch, &opts)
        };
        let commit = self.meta_states.after_write(queued)?;
        guard.queued(commit.ticket());
        self.changes.fetch_add(1, Ordering::Relaxed);
        for (pdb, d) in &deltas {
            self.counts.apply(*pdb, d);
        }
        // Set before the write is visible: whoever locks these keys next waits for the write,
        // then sees its flag (at worst a spurious failure if the write fails).
        for f in watchers {
            f.store(true, Ordering::Release);
        }
        Ok(QueuedWrite { commit, changes: CountChanges(deltas), touched })
    }

    /// What follows a [`QueuedWrite`]'s commit: clients tracking its keys hear of it once it
    /// is visible (as client `origin`'s write); a failed one takes back its count changes.
    pub fn finish_queued(
        &self,
        changes: CountChanges,
        touched: Option<Touched>,
        committed: &lsm::Result<()>,
        origin: u64,
    ) {
        match committed {
            Ok(()) => self.tracking.invalidate(touched, origin),
            Err(_) => self.revert_counts(&changes),
        }
    }
}

impl QueuedWrite {
    /// The commit, and what [`Storage::finish_queued`] needs after it.
    pub fn into_parts(self) -> (lsm::Commit, CountChanges, Option<Touched>) {
        (self.commit, self.changes, self.touched)
    }
}
