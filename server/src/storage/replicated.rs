//! The keyspace on a replica: applying the primary's batches with the primary's sequence
//! numbers, and loading a full sync. Everything the server derives from the records (keyspace
//! counts, the database map, WATCH flags, the next incarnation id, the pick seed) follows, so a
//! replica answers DBSIZE, SWAPDB'd databases and WATCH exactly as its primary would.

use std::sync::atomic::Ordering;

use super::{layout, Storage, DATABASES, DB_MAP_KEY};

impl Storage {
    /// Applies one batch the primary committed at sequence `seq` (a replica's only writer: its
    /// clients cannot write, so the counts computed against the engine stay exact).
    pub fn apply_replicated(&self, seq: u64, batch: lsm::WriteBatch) -> lsm::Result<()> {
        let deltas = self.count_changes(&batch, false, true, None)?;
        // No stripes held: the pick cache's epoch moves before and after (see `pick_cache.rs`).
        self.pick_cache.move_epoch();
        self.pick_cache.written(&batch);
        let watchers = self.watches.affected(&batch, |mk| !matches!(self.engine.get(mk), Ok(None)));
        let mut new_map = None;
        for entry in batch.iter() {
            let entry = entry?;
            if entry.key == DB_MAP_KEY && entry.kind == lsm::key::ValueKind::Put {
                new_map = Some(entry.value.to_vec());
            }
        }
        let last = batch.last_sequence().unwrap_or(seq);
        let touched = self.tracking.touched(&batch);
        let written = self.meta_states.after_write(self.engine.write_replicated(seq, batch));
        self.pick_cache.move_epoch();
        written?;
        self.tracking.invalidate(touched, 0);
        for (pdb, d) in &deltas {
            self.counts.apply(*pdb, d);
        }
        if let Some(raw) = new_map {
            self.load_map(Some(&raw))?;
        }
        // Ids the primary handed out are below its sequence numbers: never reuse one if this
        // replica is promoted.
        self.next_uid.fetch_max(last + 1, Ordering::Relaxed);
        for f in watchers {
            f.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Replaces the whole keyspace with the checkpoint in `dir` (a full sync) and returns its
    /// sequence number. Every watcher is told; counts, map and pick seed are the primary's.
    pub fn install_checkpoint(&self, dir: &std::path::Path) -> lsm::Result<u64> {
        let seq = self.engine.install_checkpoint(dir)?;
        self.reload()?;
        Ok(seq)
    }

    /// Drops every write after sequence `seq` (see [`lsm::Db::rewind_to`]): a node rejoining a
    /// primary that never saw its last writes.
    pub fn rewind_to(&self, seq: u64) -> lsm::Result<()> {
        self.engine.rewind_to(seq)?;
        self.reload()
    }

    /// Re-reads everything derived from the records after the engine's contents were replaced.
    fn reload(&self) -> lsm::Result<()> {
        self.meta_states.clear();
        self.pick_cache.clear();
        self.load_map(self.engine.get(DB_MAP_KEY)?.as_deref())?;
        self.pick_seed.store(layout(&self.engine, false)?, Ordering::Relaxed);
        self.counts.assign(&super::KeyspaceCounts::recount(&self.engine)?);
        self.next_uid.fetch_max(self.engine.latest_sequence() + 1, Ordering::Relaxed);
        self.watches.touch_databases(&(0..=u16::MAX).collect::<Vec<_>>());
        Ok(())
    }

    /// Sets the logical → physical database map from its record (None: the identity), telling
    /// the watchers of every database whose mapping changed.
    pub(super) fn load_map(&self, raw: Option<&[u8]>) -> lsm::Result<()> {
        let raw = raw.unwrap_or_default();
        if !raw.len().is_multiple_of(4) {
            return Err(lsm::Error::InvalidArgument("damaged database map record".into()));
        }
        let mut map: Vec<u16> = (0..DATABASES).map(|i| i as u16).collect();
        for pair in raw.chunks_exact(4) {
            let logical = u16::from_be_bytes([pair[0], pair[1]]);
            map[usize::from(logical)] = u16::from_be_bytes([pair[2], pair[3]]);
        }
        let mut changed = Vec::new();
        for (logical, &physical) in map.iter().enumerate() {
            let old = self.map[logical].swap(physical, Ordering::AcqRel);
            if old != physical {
                changed.extend([old, physical]);
            }
            self.inverse[usize::from(physical)].store(logical as u16, Ordering::Release);
        }
        if !changed.is_empty() {
            self.watches.touch_databases(&changed);
        }
        Ok(())
    }
}
