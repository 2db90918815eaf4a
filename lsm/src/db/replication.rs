//! Hooks for replication and backup: WAL retention, tailing the WAL (`updates_since`),
//! applying a primary's batches (`write_replicated`) and checkpoints.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{lock, DbInner};
use crate::batch::WriteBatch;
use crate::filename::{self, FileKind};
use crate::manifest::VersionEdit;
use crate::wal::{LogReader, LogWriter};
use crate::{Error, Result};

/// A flushed WAL kept for replicas.
#[derive(Debug)]
pub(super) struct RetainedWal {
    number: u64,
    size: u64,
    retired_at: SystemTime,
}

impl DbInner {
    /// A WAL whose memtable is now in a table: delete it, or keep it while retention allows.
    pub(super) fn retire_wal(&self, number: u64) {
        let path = filename::wal_path(&self.dir, number);
        if !self.opts().retains_wals() {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(target: "lsm::wal", file = %path.display(), error = %e, "could not delete flushed WAL");
            }
            return;
        }
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        lock(&self.retained_wals).push_back(RetainedWal { number, size, retired_at: SystemTime::now() });
        self.purge_wals();
    }

    /// Registers WALs found at open that are older than the log number (already in tables).
    pub(super) fn adopt_old_wals(&self, mut found: Vec<(u64, std::path::PathBuf)>) {
        found.sort();
        for (number, path) in found {
            if !self.opts().retains_wals() {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let meta = std::fs::metadata(&path).ok();
            let size = meta.as_ref().map_or(0, |m| m.len());
            let retired_at = meta.and_then(|m| m.modified().ok()).unwrap_or_else(SystemTime::now);
            lock(&self.retained_wals).push_back(RetainedWal { number, size, retired_at });
        }
        self.purge_wals();
    }

    /// Deletes retained WALs past `wal_ttl` or beyond `wal_size_limit`, oldest first.
    pub(super) fn purge_wals(&self) {
        let opts = self.opts();
        let mut kept = lock(&self.retained_wals);
        let mut total: u64 = kept.iter().map(|w| w.size).sum();
        while let Some(oldest) = kept.front() {
            let expired = !opts.wal_ttl.is_zero() && oldest.retired_at.elapsed().unwrap_or_default() > opts.wal_ttl;
            let too_big = opts.wal_size_limit > 0 && total > opts.wal_size_limit;
            if !expired && !too_big {
                break;
            }
            total -= oldest.size;
            let path = filename::wal_path(&self.dir, oldest.number);
            tracing::debug!(target: "lsm::wal", file = %path.display(), "retention: deleting old WAL");
            let _ = std::fs::remove_file(&path);
            kept.pop_front();
        }
    }

    /// Called by the write leader after publishing new sequence numbers. Wakes tailers only if
    /// one is asleep (a tailer busy reading needs no syscall per write group): the fence pairs
    /// with the one a tailer passes between counting itself asleep and re-reading the sequence.
    pub(super) fn notify_tailers(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.tailers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.tail_mu);
            self.tail_cv.notify_all();
        }
    }

    fn wal_numbers(&self) -> Result<Vec<u64>> {
        let mut v: Vec<u64> = filename::list(&self.dir)?
            .into_iter()
            .filter_map(|(k, _)| if let FileKind::Wal(n) = k { Some(n) } else { None })
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// Sequence number of the first batch in WAL `n` (`None` if it holds none yet).
    fn first_sequence_of(&self, n: u64) -> Result<Option<u64>> {
        let path = filename::wal_path(&self.dir, n);
        // Small first: the first record is usually short; grows for one that is not.
        let mut chunk = 64 << 10;
        loop {
            let data = match read_chunk(&path, 0, chunk) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let mut r = LogReader::new(&data);
            while let Some(rec) = r.next_record() {
                let b = WriteBatch::from_bytes(rec.payload.into_owned())?;
                if !b.is_empty() {
                    return Ok(Some(b.sequence()));
                }
            }
            // A full chunk without a whole record holds one bigger than the chunk: read more.
            if r.damage().is_none() || data.len() < chunk {
                return Ok(None);
            }
            chunk *= 2;
        }
    }

    /// The first sequence number [`crate::Db::updates_since`] can still return (None: no WAL
    /// holds a write).
    pub(super) fn oldest_wal_sequence(&self) -> Result<Option<u64>> {
        for n in self.wal_numbers()? {
            if let Some(first) = self.first_sequence_of(n)? {
                return Ok(Some(first));
            }
        }
        Ok(None)
    }

    pub(super) fn updates_since(self: &Arc<Self>, seq: u64) -> Result<WalTail> {
        self.check_open()?;
        let wals = self.wal_numbers()?;
        let latest = self.visible_seq.load(Ordering::Acquire);
        let newest = *wals.last().ok_or(Error::WalGone(seq))?;
        let mut start = None;
        if seq > latest {
            start = Some(newest);
        } else {
            for &n in wals.iter().rev() {
                match self.first_sequence_of(n)? {
                    Some(first) if first <= seq => {
                        start = Some(n);
                        break;
                    }
                    _ => {}
                }
            }
        }
        let wal = start.ok_or(Error::WalGone(seq))?;
        Ok(WalTail { db: Arc::clone(self), next_seq: seq.max(1), wal, offset: 0, ready: VecDeque::new() })
    }

    pub(super) fn checkpoint(&self, target: &Path) -> Result<u64> {
        self.check_writable()?;
        if target.exists() {
            return Err(Error::InvalidArgument(format!("checkpoint directory {} already exists", target.display())));
        }
        // Hold the WAL lock: no write lands and no memtable is frozen until the version is taken,
        // so the tables hold exactly the writes up to `boundary`.
        let (boundary, version) = {
            let mut w = lock(&self.wal);
            let boundary = w.last_seq;
            self.make_room(&mut w, true)?;
            let mut bg = lock(&self.bg);
            while !self.super_version().imm.is_empty() {
                self.check_writable()?;
                if bg.shutdown {
                    return Err(Error::Closed);
                }
                bg = self.bg_cv.wait_timeout(bg, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
            }
            drop(bg);
            (boundary, self.super_version().version.clone())
        };
        std::fs::create_dir_all(target)?;
        let mut next_file = 1u64;
        let mut edit = VersionEdit::default();
        for (level, f) in version.files() {
            let src = filename::table_path(&self.dir, f.number);
            let dst = filename::table_path(target, f.number);
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst)?; // another file system
            }
            next_file = next_file.max(f.number + 1);
            edit.added.push((level, f.to_new_file()));
        }
        let manifest_number = next_file;
        let log_number = next_file + 1;
        edit.log_number = Some(log_number);
        edit.next_file_number = Some(log_number + 1);
        edit.last_sequence = Some(boundary);
        let mut m = LogWriter::create(&filename::manifest_path(target, manifest_number), manifest_number)?;
        m.append(&edit.encode(), true)?;
        let tmp = filename::temp_path(target, log_number);
        std::fs::write(&tmp, format!("{}\n", filename::manifest_name(manifest_number)))?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, target.join("CURRENT"))?;
        filename::sync_dir(target)?;
        tracing::info!(target: "lsm::db", dir = %target.display(), sequence = boundary, tables = edit.added.len(), "checkpoint written");
        Ok(boundary)
    }
}

impl DbInner {
    /// With the WAL lock held and background work paused: waits until no frozen memtable is
    /// left to flush and no compaction runs, and returns the version set locked.
    fn quiesced(&self) -> Result<std::sync::MutexGuard<'_, crate::manifest::VersionSet>> {
        loop {
            self.check_writable()?;
            let vs = lock(&self.versions);
            if vs.busy.is_empty() && self.super_version().imm.is_empty() {
                return Ok(vs);
            }
            drop(vs);
            let bg = lock(&self.bg);
            if bg.shutdown {
                return Err(Error::Closed);
            }
            let _ = self.bg_cv.wait_timeout(bg, Duration::from_millis(20));
        }
    }

    /// With everything flushed (see [`Self::quiesced`] after a forced rotation): deletes the
    /// WALs before the active one, retained ones too — before the tree is replaced, so a crash
    /// at any point leaves no WAL of the old history to be shipped later (the active one is
    /// empty; [`Self::start_history`] deletes it).
    fn drop_flushed_wals(&self, w: &super::WalState) {
        lock(&self.retained_wals).clear();
        let active = w.log.number();
        for n in self.wal_numbers().unwrap_or_default().into_iter().filter(|&n| n < active) {
            let _ = std::fs::remove_file(filename::wal_path(&self.dir, n));
        }
    }

    /// A new, empty WAL file.
    fn new_wal(&self, vs: &mut crate::manifest::VersionSet) -> Result<LogWriter> {
        let number = vs.new_file_number();
        let path = filename::wal_path(&self.dir, number);
        Ok(LogWriter::create_mapped(&path, number, super::open::wal_capacity(&self.opts()))?)
    }

    /// After the tree was replaced (its manifest written): writes go to `log` from sequence
    /// `seq + 1` into an empty memtable, and the older (empty) WAL is deleted.
    fn start_history(
        &self,
        w: &mut super::WalState,
        vs: std::sync::MutexGuard<'_, crate::manifest::VersionSet>,
        log: LogWriter,
        seq: u64,
    ) -> Result<()> {
        let number = log.number();
        *lock(&self.wal_file) = log.file();
        w.log = log;
        self.active_wal.switch(number, 0);
        w.last_seq = seq;
        let version = vs.current();
        w.mem = Arc::new(crate::memtable::Memtable::with_budget(number, self.opts().write_buffer_size));
        self.set_super_version(|_| super::SuperVersion { mem: Arc::clone(&w.mem), imm: Vec::new(), version });
        self.visible_seq.store(seq, Ordering::Release);
        drop(vs);
        lock(&self.retained_wals).clear();
        for n in self.wal_numbers()?.into_iter().filter(|&n| n < number) {
            let _ = std::fs::remove_file(filename::wal_path(&self.dir, n));
        }
        Ok(())
    }

    pub(super) fn install_checkpoint(&self, source: &Path) -> Result<u64> {
        self.check_writable()?;
        let theirs = crate::manifest::VersionSet::recover(source, u64::MAX, None)?;
        let boundary = theirs.last_sequence();
        let incoming: Vec<(usize, crate::manifest::NewFile)> =
            theirs.current().files().map(|(level, f)| (level, f.to_new_file())).collect();
        drop(theirs);
        lock(&self.bg).paused = true;
        let result = self.install_paused(source, boundary, incoming);
        lock(&self.bg).paused = false;
        self.signal_work();
        result
    }

    fn install_paused(
        &self,
        source: &Path,
        boundary: u64,
        incoming: Vec<(usize, crate::manifest::NewFile)>,
    ) -> Result<u64> {
        // Writers wait on the WAL lock; the flush thread drains the frozen memtables (their data
        // is about to be dropped, but a flush must not land on the new tree) and running
        // compactions finish (no new one starts while paused).
        let mut w = lock(&self.wal);
        self.make_room(&mut w, true)?;
        let mut vs = self.quiesced()?;
        self.drop_flushed_wals(&w);
        let mut files = Vec::with_capacity(incoming.len());
        let mut linked = Vec::new();
        let result = (|| {
            for (level, mut f) in incoming {
                let number = vs.new_file_number();
                let src = filename::table_path(source, f.number);
                let dst = filename::table_path(&self.dir, number);
                if std::fs::hard_link(&src, &dst).is_err() {
                    std::fs::copy(&src, &dst)?; // another file system
                    std::fs::File::open(&dst)?.sync_all()?;
                }
                linked.push(dst);
                f.number = number;
                files.push((level, f));
            }
            let log = self.new_wal(&mut vs)?;
            vs.install(files, log.number(), boundary)?;
            Ok(log)
        })();
        let log = match result {
            Ok(log) => log,
            Err(e) => {
                for path in linked {
                    let _ = std::fs::remove_file(path);
                }
                return Err(e);
            }
        };
        let old_wal = w.log.number();
        self.start_history(&mut w, vs, log, boundary)?;
        drop(w);
        tracing::info!(target: "lsm::db", from = %source.display(), sequence = boundary, replaced_wal = old_wal, "checkpoint installed");
        Ok(boundary)
    }
}

impl DbInner {
    pub(super) fn rewind(&self, seq: u64) -> Result<()> {
        self.check_writable()?;
        lock(&self.bg).paused = true;
        let result = self.rewind_paused(seq);
        lock(&self.bg).paused = false;
        self.signal_work();
        result
    }

    fn rewind_paused(&self, seq: u64) -> Result<()> {
        use crate::iter::InternalIterator;
        let mut w = lock(&self.wal);
        if w.last_seq <= seq {
            return Ok(());
        }
        // Everything into tables first: a rewind rewrites tables only.
        self.make_room(&mut w, true)?;
        let mut vs = self.quiesced()?;
        let version = vs.current();
        // L0 tables are flush outputs and hold every version of every key, so dropping their
        // entries after `seq` leaves exactly the state at `seq`. A compaction output (L1 and
        // deeper) may have dropped versions that newer ones shadowed: it cannot be rewound.
        let late: Vec<_> = version.files().filter(|(_, f)| f.largest_seq > seq).collect();
        if let Some((level, f)) = late.iter().find(|(level, _)| *level > 0) {
            return Err(Error::InvalidArgument(format!(
                "cannot rewind to sequence {seq}: table {} in level {level} was compacted after it",
                f.number
            )));
        }
        self.drop_flushed_wals(&w);
        let opts = crate::sstable::TableOptions::from_options(&self.opts());
        let mut edit = VersionEdit::default();
        let mut dropped = 0u64;
        for (level, f) in &late {
            let table = f.table()?;
            let number = vs.new_file_number();
            let path = filename::table_path(&self.dir, number);
            let built = (|| -> Result<Option<crate::manifest::NewFile>> {
                let file = std::fs::File::create(&path)?;
                let mut b =
                    crate::sstable::TableBuilder::new(std::io::BufWriter::with_capacity(1 << 20, file), opts.clone())?;
                b.expect_keys(usize::try_from(f.num_entries).unwrap_or(usize::MAX));
                let mut kept = 0u64;
                for t in table.range_tombstones().iter().filter(|t| t.seq <= seq) {
                    b.add_range_tombstone(t.clone());
                    kept += 1;
                }
                let mut it = table.iter();
                it.seek_to_first()?;
                while it.valid() {
                    let parsed = crate::key::parse(it.key()).ok_or_else(|| {
                        Error::corruption(filename::table_path(&self.dir, f.number), 0, "malformed internal key")
                    })?;
                    if parsed.seq <= seq {
                        b.add(it.key(), it.value())?;
                        kept += 1;
                    } else {
                        dropped += 1;
                    }
                    it.next()?;
                }
                if kept == 0 {
                    return Ok(None);
                }
                super::finish_table_file(&path, number, b, &opts).map(Some)
            })();
            match built {
                Ok(Some(new)) => edit.added.push((*level, new)),
                Ok(None) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    for (_, new) in &edit.added {
                        let _ = std::fs::remove_file(filename::table_path(&self.dir, new.number));
                    }
                    return Err(e);
                }
            }
            edit.deleted.push((*level, f.number));
        }
        // A fresh WAL: the old ones hold the dropped history.
        let log = self.new_wal(&mut vs)?;
        edit.log_number = Some(log.number());
        vs.log_and_apply(edit).map_err(|e| self.poison(e))?;
        // The manifest's last sequence only ever grows edit by edit: restate it in a new one.
        vs.rewind_last_sequence(seq);
        vs.write_new_manifest().map_err(|e| self.poison(e))?;
        self.start_history(&mut w, vs, log, seq)?;
        drop(w);
        tracing::warn!(target: "lsm::db", sequence = seq, dropped, "rewound: every write after this sequence was dropped");
        Ok(())
    }
}

/// The WAL from a sequence number on, as `(sequence, batch)` in order. See
/// [`crate::Db::updates_since`].
pub struct WalTail {
    db: Arc<DbInner>,
    /// The first sequence number not yet handed out.
    next_seq: u64,
    wal: u64,
    /// File offset of the next record to read in `wal`.
    offset: u64,
    ready: VecDeque<(u64, WriteBatch)>,
}

impl std::fmt::Debug for WalTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalTail")
            .field("next_seq", &self.next_seq)
            .field("wal", &self.wal)
            .field("offset", &self.offset)
            .finish()
    }
}

impl WalTail {
    /// The sequence number the next batch will contain.
    pub fn next_sequence(&self) -> u64 {
        self.next_seq
    }

    /// The next batch if one is already in the WAL, without waiting.
    pub fn try_next(&mut self) -> Result<Option<(u64, WriteBatch)>> {
        self.db.check_open()?;
        if self.ready.is_empty() {
            self.fill()?;
        }
        Ok(self.ready.pop_front())
    }

    /// The next batch, waiting up to `timeout` for one to be written.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<(u64, WriteBatch)>> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.db.visible_seq.load(Ordering::Acquire);
            if let Some(b) = self.try_next()? {
                return Ok(Some(b));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let g = lock(&self.db.tail_mu);
            self.db.tailers.fetch_add(1, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.db.visible_seq.load(Ordering::SeqCst) == seen {
                let _ = self.db.tail_cv.wait_timeout(g, (deadline - now).min(Duration::from_millis(200)));
            }
            self.db.tailers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Reads complete records after `offset`, moving on to newer WALs as they appear.
    fn fill(&mut self) -> Result<()> {
        let mut drained_before_switch = false;
        let mut chunk = TAIL_CHUNK;
        loop {
            let path = filename::wal_path(&self.db.dir, self.wal);
            // A bounded read: the live WAL is preallocated, zeros past what was written, so only
            // the written part of it is read.
            let want = match self.db.active_wal.written(self.wal) {
                Some(written) => (written.saturating_sub(self.offset) as usize).min(chunk),
                None => chunk,
            };
            let data = match read_chunk(&path, self.offset, want) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::WalGone(self.next_seq)),
                Err(e) => return Err(e.into()),
            };
            let start = self.offset;
            // Only acknowledged writes are shipped: a group is in the WAL before it is visible,
            // and one whose commit failed (its fsync, say) never becomes visible.
            let visible = self.db.visible_seq.load(Ordering::Acquire);
            let mut r = LogReader::with_base(&data, start);
            let mut held_back = false;
            while let Some(rec) = r.next_record() {
                let batch = WriteBatch::from_bytes(rec.payload.into_owned())
                    .map_err(|e| Error::corruption(&path, rec.offset, e.to_string()))?;
                let Some(last) = batch.last_sequence() else {
                    self.offset = rec.end;
                    continue;
                };
                if last > visible {
                    held_back = true;
                    break; // read again once it is visible
                }
                self.offset = rec.end;
                if last < self.next_seq {
                    continue;
                }
                self.next_seq = last + 1;
                self.ready.push_back((batch.sequence(), batch));
            }
            if held_back {
                return Ok(());
            }
            if let Some(d) = r.damage().filter(|d| d.valid_data_after) {
                return Err(Error::corruption(&path, d.offset, d.reason.clone()));
            }
            // (A damaged tail without valid data after it is a record still being written, or
            // one cut by the chunk's end: the next read starts at `offset` again.)
            if !self.ready.is_empty() {
                return Ok(());
            }
            if data.len() == chunk && r.damage().is_some() {
                if self.offset == start {
                    chunk *= 2; // one record bigger than the chunk
                }
                continue; // the chunk ended inside a record: keep reading this WAL
            }
            if self.db.active_wal.written(self.wal).is_some() {
                return Ok(()); // still the active WAL: nothing newer to move on to
            }
            let newer = self.db.wal_numbers()?.into_iter().find(|&n| n > self.wal);
            match newer {
                None => return Ok(()),
                // A newer WAL exists, so this one is complete: read it once more, then move on.
                Some(_) if !drained_before_switch => drained_before_switch = true,
                Some(n) => {
                    self.wal = n;
                    self.offset = 0;
                    drained_before_switch = false;
                }
            }
        }
    }
}

/// How much of a WAL a tailer reads at once.
const TAIL_CHUNK: usize = 4 << 20;

/// Up to `max` bytes of the file from `offset` (fewer at its end).
fn read_chunk(path: &Path, offset: u64, max: usize) -> std::io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::with_capacity(max.min(1 << 20));
    let mut r = std::io::BufReader::new(f);
    r.seek(SeekFrom::Start(offset))?;
    r.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}
