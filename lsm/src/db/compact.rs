//! Running compactions: the background loop, manual `compact_range`, and waiting for both.

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{lock, Db, DbInner, SuperVersion};
use crate::compaction::job::{self, JobContext};
use crate::compaction::picker::{self, Choice, PickerConfig};
use crate::manifest::Version;
use crate::sstable::TableOptions;
use crate::{Error, Result};

/// Compactions asked for.
impl Db {
    /// Compacts every table overlapping the user-key `range` down to the bottom level (after a
    /// flush), dropping everything no reader can see. `..` compacts the whole database.
    pub fn compact_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<()> {
        self.inner.check_writable()?;
        let bound = |b: Bound<&K>| match b {
            Bound::Included(k) | Bound::Excluded(k) => Some(k.as_ref().to_vec()),
            Bound::Unbounded => None,
        };
        let (lo, hi) = (bound(range.start_bound()), bound(range.end_bound()));
        self.inner.compact_range(lo.as_deref(), hi.as_deref())
    }

    /// Blocks until no flush or compaction is running or due, as RocksDB's `WaitForCompact`:
    /// after a bulk load, the tree then has the shape reads will see once the load's backlog
    /// is worked off, and the tables compactions replaced are closed (their memory is back;
    /// their files are gone unless a snapshot's iterator still reads them). Returns at once
    /// (after any running job) when automatic compactions are off; fails if the database is
    /// closed or read-only after a background error.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.inner.wait_for_compactions()
    }
}

impl DbInner {
    pub(super) fn picker_config(&self) -> PickerConfig {
        let opts = self.opts();
        PickerConfig {
            l0_trigger: opts.level0_file_num_compaction_trigger,
            base_bytes: opts.max_bytes_for_level_base,
            multiplier: opts.max_bytes_for_level_multiplier,
            target_file_size: opts.target_file_size_base,
        }
    }

    /// Tells the background threads that the tree changed.
    pub(super) fn signal_work(&self) {
        let mut bg = lock(&self.bg);
        bg.work_gen += 1;
        self.bg_cv.notify_all();
    }

    /// A compaction thread: runs due compactions until shutdown.
    pub(super) fn compaction_loop(self: Arc<Self>) {
        loop {
            let seen = {
                let bg = lock(&self.bg);
                if bg.shutdown {
                    return;
                }
                bg.work_gen
            };
            let idle = self.opts().disable_auto_compactions;
            let picked = if idle || self.is_poisoned.load(Ordering::Acquire) || lock(&self.bg).paused {
                None
            } else {
                let mut vs = lock(&self.versions);
                let v = vs.current();
                let cfg = self.picker_config();
                let c = picker::choose(&v, &cfg, &vs.compact_pointers, &vs.busy)
                    .or_else(|| picker::choose_marked(&v, &cfg, &vs.busy, self.snapshots.oldest()));
                if let Some(c) = &c {
                    vs.busy.extend(c.all_inputs().map(|f| f.number));
                }
                c.map(|c| (c, v))
            };
            match picked {
                Some((choice, version)) => {
                    let result = self.run_compaction(choice, version);
                    match result {
                        // A throttled compaction interrupted by close: nothing is lost, its inputs stay.
                        Err(Error::Closed) if lock(&self.bg).shutdown => {}
                        // A failed job removed its outputs (retryable on a full disk); a failed
                        // manifest write was already recorded as fatal by run_compaction.
                        Err(e) => {
                            self.poison_retryable(e);
                        }
                        // The job's buffers (blocks read and written, the filters built) are
                        // free now: the application may hand them back to the OS.
                        Ok(()) => {
                            if let Some(release) = &self.opts().memory_release {
                                (release.0)();
                            }
                        }
                    }
                }
                None => {
                    let mut bg = lock(&self.bg);
                    while !bg.shutdown && bg.work_gen == seen {
                        bg = self.bg_cv.wait(bg).unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
        }
    }

    /// Runs a chosen compaction (its inputs already marked busy), installs the result and
    /// clears the inputs' busy marks.
    ///
    /// The job's references were the last to its inputs (readers hold a version only for a
    /// lookup or an iterator's life): they are dropped, closing the obsolete tables and
    /// evicting their cached blocks, before the marks are cleared. So when
    /// [`DbInner::wait_for_compactions`] sees no table busy, the tables' memory is already
    /// back, and a memory release after this call hands it to the OS with the job's buffers.
    fn run_compaction(&self, choice: Choice, version: Arc<Version>) -> Result<()> {
        let inputs: Vec<u64> = choice.all_inputs().map(|f| f.number).collect();
        let result = self.run_compaction_job(&choice, &version);
        drop((choice, version));
        let mut vs = lock(&self.versions);
        for n in &inputs {
            vs.busy.remove(n);
        }
        drop(vs);
        self.signal_work();
        result
    }

    /// [`DbInner::run_compaction`]'s job: runs it and installs its result, if it succeeds.
    fn run_compaction_job(&self, choice: &Choice, version: &Version) -> Result<()> {
        let started = Instant::now();
        let snapshots = self.snapshots.all();
        let cfg = self.picker_config();
        let new_file_number = || lock(&self.versions).new_file_number();
        let opts = self.opts();
        let cx = JobContext {
            dir: &self.dir,
            version,
            snapshots: &snapshots,
            table_opts: TableOptions::from_options(&opts),
            cfg: &cfg,
            filter: opts.compaction_filter.as_ref().map(|f| &*f.0),
            new_file_number: &new_file_number,
            rate_limit: opts.compaction_rate_limit,
            cancelled: &|| lock(&self.bg).shutdown,
        };
        let res = job::run(choice, &cx)?;
        let mut vs = lock(&self.versions);
        let outputs = res.edit.added.len();
        vs.log_and_apply(res.edit).map_err(|e| self.poison(e))?;
        if let Some(largest) = choice.inputs.iter().map(|f| &f.largest).max_by(|a, b| crate::key::compare(a, b)) {
            vs.compact_pointers[choice.level] = largest.clone();
        }
        let version = vs.current();
        self.set_super_version(|sv| SuperVersion { mem: Arc::clone(&sv.mem), imm: sv.imm.clone(), version });
        drop(vs);
        let c = &self.counters;
        c.compactions.fetch_add(1, Ordering::Relaxed);
        c.compaction_bytes_read.fetch_add(res.bytes_read, Ordering::Relaxed);
        c.compaction_bytes_written.fetch_add(res.bytes_written, Ordering::Relaxed);
        tracing::info!(
            target: "lsm::compaction",
            from = choice.level,
            to = choice.output_level,
            inputs = choice.inputs.len() + choice.next_inputs.len(),
            outputs,
            trivial_move = choice.trivial_move,
            read = res.bytes_read,
            written = res.bytes_written,
            dropped = res.entries_dropped,
            score = choice.score,
            ms = started.elapsed().as_millis() as u64,
            "compaction done"
        );
        Ok(())
    }

    /// Waits until no flush or compaction is running or due: no frozen memtable, no table
    /// being compacted, and (unless automatic compactions are off or paused) nothing the
    /// background threads would pick next. Fails at once if the database is closed or
    /// read-only after a background error, since nothing would run then.
    pub(super) fn wait_for_compactions(&self) -> Result<()> {
        loop {
            self.check_writable()?;
            let idle = self.opts().disable_auto_compactions || lock(&self.bg).paused;
            let due = {
                let vs = lock(&self.versions);
                let v = vs.current();
                let cfg = self.picker_config();
                !vs.busy.is_empty()
                    || !idle
                        && (picker::choose(&v, &cfg, &vs.compact_pointers, &vs.busy).is_some()
                            || picker::choose_marked(&v, &cfg, &vs.busy, self.snapshots.oldest()).is_some())
            };
            if !due && self.imm_count.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            let bg = lock(&self.bg);
            if bg.shutdown {
                return Err(Error::Closed);
            }
            // Every finished flush or compaction signals `bg_cv`; the timeout covers one that
            // finished between the check above and this wait.
            let _ = self.bg_cv.wait_timeout(bg, Duration::from_millis(20));
        }
    }

    /// Flushes, then compacts every level's tables overlapping `[lo, hi]` down to the bottom,
    /// and rewrites the bottom level's so that nothing unneeded is left anywhere in the range.
    pub(super) fn compact_range(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        self.flush()?;
        let bottom = picker::last_nonempty_level(&lock(&self.versions).current()).max(1);
        for level in 0..=bottom {
            loop {
                self.check_writable()?;
                let picked = {
                    let mut vs = lock(&self.versions);
                    let v = vs.current();
                    let choice = if level < bottom {
                        picker::choose_range(&v, &self.picker_config(), level, lo, hi)
                    } else {
                        picker::choose_bottom(&v, level, lo, hi)
                    };
                    match choice {
                        None => Ok(None),
                        Some(c) if c.all_inputs().any(|f| vs.busy.contains(&f.number)) => Err(()),
                        Some(c) => {
                            vs.busy.extend(c.all_inputs().map(|f| f.number));
                            Ok(Some((c, v)))
                        }
                    }
                };
                match picked {
                    Ok(None) => break,
                    Ok(Some((c, v))) => {
                        self.run_compaction(c, v).map_err(|e| self.poison(e))?;
                        break;
                    }
                    Err(()) => {
                        // A background compaction holds some of these tables: wait for it.
                        let bg = lock(&self.bg);
                        if bg.shutdown {
                            return Err(Error::Closed);
                        }
                        let _ = self.bg_cv.wait_timeout(bg, Duration::from_millis(20));
                    }
                }
            }
        }
        Ok(())
    }
}
