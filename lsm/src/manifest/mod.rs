//! The manifest: a log of [`VersionEdit`]s naming the live tables, and the [`VersionSet`] that
//! applies edits, writes them durably and hands out the current [`Version`].
//!
//! `CURRENT` holds the live manifest's file name and is replaced atomically (temp file, fsync,
//! rename, fsync directory). Every open, and every time the manifest grows past
//! `max_manifest_file_size`, a new manifest is started with one snapshot edit of the whole state.

mod edit;
mod version;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use edit::{NewFile, VersionEdit, NUM_LEVELS};
pub use version::{FileMeta, Version};

use crate::cache::TableCache;
use crate::filename::{self, sync_dir};
use crate::wal::{LogReader, LogWriter};
use crate::{Error, Result};

/// The current version plus the counters the manifest persists.
#[derive(Debug)]
pub struct VersionSet {
    dir: PathBuf,
    current: Arc<Version>,
    next_file_number: u64,
    last_sequence: u64,
    log_number: u64,
    manifest: Option<LogWriter>,
    max_manifest_size: u64,
    tables: Option<Arc<TableCache>>,
    /// Per level, the largest key of the last table compacted from it (round robin).
    pub(crate) compact_pointers: Vec<Vec<u8>>,
    /// Tables inputs of a running compaction.
    pub(crate) busy: std::collections::HashSet<u64>,
    /// Tables some recovered edit deleted: provably obsolete if no version lists them.
    recorded_deleted: std::collections::HashSet<u64>,
    /// The next file number the recovered manifest recorded: tables numbered from here on are
    /// newer than every recovered edit (outputs of a flush or compaction the crash interrupted).
    recovered_next_file: u64,
    /// The manifest this set was recovered from (None for a new database).
    recovered_from: Option<PathBuf>,
    /// Asked before each manifest write (tests).
    faults: Option<Arc<dyn crate::fault::FaultInjector>>,
}

impl VersionSet {
    /// An empty set for a new database (nothing written yet; call [`Self::write_new_manifest`]).
    pub fn new(dir: &Path, max_manifest_size: u64, tables: Option<Arc<TableCache>>) -> Self {
        VersionSet {
            tables,
            compact_pointers: vec![Vec::new(); NUM_LEVELS],
            busy: Default::default(),
            recorded_deleted: Default::default(),
            recovered_next_file: 2,
            recovered_from: None,
            faults: None,
            dir: dir.to_path_buf(),
            current: Arc::new(Version::default()),
            next_file_number: 2,
            last_sequence: 0,
            log_number: 0,
            manifest: None,
            max_manifest_size,
        }
    }

    /// Reads `CURRENT` and replays the manifest it names.
    pub fn recover(dir: &Path, max_manifest_size: u64, tables: Option<Arc<TableCache>>) -> Result<Self> {
        let current_path = dir.join("CURRENT");
        let name = std::fs::read_to_string(&current_path)?;
        let name = name.strip_suffix('\n').unwrap_or(&name);
        let Some(filename::FileKind::Manifest(_)) = filename::parse(name) else {
            return Err(Error::corruption(current_path, 0, format!("CURRENT names {name:?}, not a manifest")));
        };
        let path = dir.join(name);
        let data = std::fs::read(&path)?;
        let mut set = VersionSet::new(dir, max_manifest_size, tables);
        let mut version = Version::default();
        let mut reader = LogReader::new(&data);
        let (mut saw_next, mut saw_log) = (false, false);
        while let Some(rec) = reader.next_record() {
            let edit = VersionEdit::decode(&rec.payload)
                .ok_or_else(|| Error::corruption(&path, rec.offset, "malformed version edit"))?;
            saw_next |= edit.next_file_number.is_some();
            saw_log |= edit.log_number.is_some();
            set.recorded_deleted.extend(edit.deleted.iter().map(|&(_, n)| n));
            set.absorb(&edit);
            apply(&mut version, &edit, dir, &set.tables)
                .map_err(|reason| Error::corruption(&path, rec.offset, reason))?;
        }
        if let Some(d) = reader.damage() {
            if d.valid_data_after {
                return Err(Error::corruption(&path, d.offset, d.reason.clone()));
            }
            // A torn last edit was never acknowledged: whatever it described is not yet live.
            tracing::warn!(target: "lsm::manifest", file = %path.display(), offset = d.offset, reason = %d.reason, "ignoring torn manifest tail");
        }
        if !saw_next || !saw_log {
            return Err(Error::corruption(&path, 0, "manifest lacks next-file or log number"));
        }
        version.sort_levels();
        set.current = Arc::new(version);
        set.recovered_next_file = set.next_file_number;
        set.recovered_from = Some(path);
        Ok(set)
    }

    /// Sets the fault injector asked before each manifest write (tests).
    pub fn set_faults(&mut self, faults: Option<Arc<dyn crate::fault::FaultInjector>>) {
        self.faults = faults;
    }

    /// Whether a recovered edit deleted table `number`.
    pub fn recorded_deleted(&self, number: u64) -> bool {
        self.recorded_deleted.contains(&number)
    }

    /// The manifest this set was recovered from.
    pub fn recovered_from(&self) -> Option<&Path> {
        self.recovered_from.as_deref()
    }

    /// Whether table `number`, listed by no current version, is provably obsolete: an edit
    /// deleted it, or it is newer than every recovered edit. Anything else is a table the
    /// manifest cannot account for, which must be kept.
    pub fn provably_obsolete(&self, number: u64) -> bool {
        self.recorded_deleted.contains(&number) || number >= self.recovered_next_file
    }

    fn absorb(&mut self, edit: &VersionEdit) {
        if let Some(n) = edit.log_number {
            self.log_number = n;
        }
        if let Some(n) = edit.next_file_number {
            self.next_file_number = self.next_file_number.max(n);
        }
        if let Some(n) = edit.last_sequence {
            self.last_sequence = self.last_sequence.max(n);
        }
        for (_, f) in &edit.added {
            self.next_file_number = self.next_file_number.max(f.number + 1);
        }
    }

    /// The current version.
    pub fn current(&self) -> Arc<Version> {
        Arc::clone(&self.current)
    }

    /// A fresh file number.
    pub fn new_file_number(&mut self) -> u64 {
        let n = self.next_file_number;
        self.next_file_number += 1;
        n
    }

    /// Makes sure future file numbers are above `n` (files found on disk at open).
    pub fn mark_file_number_used(&mut self, n: u64) {
        self.next_file_number = self.next_file_number.max(n + 1);
    }

    /// WALs numbered below this are reflected in tables.
    pub fn log_number(&self) -> u64 {
        self.log_number
    }

    /// Largest sequence number recorded.
    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    /// Writes `edit` durably to the manifest and makes the resulting version current.
    pub fn log_and_apply(&mut self, mut edit: VersionEdit) -> Result<()> {
        edit.next_file_number = Some(self.next_file_number);
        if let Some(s) = edit.last_sequence {
            edit.last_sequence = Some(s.max(self.last_sequence));
        }
        let mut version = (*self.current).clone();
        apply(&mut version, &edit, &self.dir, &self.tables).map_err(Error::InvalidArgument)?;
        version.sort_levels();
        // Tables deleted by this edit (and not moved to another level) go once unreferenced.
        let obsolete: Vec<Arc<FileMeta>> = self
            .current
            .files()
            .filter(|(_, f)| {
                edit.deleted.iter().any(|&(_, n)| n == f.number)
                    && !edit.added.iter().any(|(_, a)| a.number == f.number)
            })
            .map(|(_, f)| Arc::clone(f))
            .collect();
        let too_big = self.manifest.as_ref().is_none_or(|m| m.size() >= self.max_manifest_size);
        crate::fault::check(&self.faults, crate::fault::IoOp::ManifestWrite, &self.dir)?;
        if !edit.added.is_empty() {
            // New tables' directory entries must be durable before the manifest names them.
            sync_dir(&self.dir)?;
        }
        if too_big {
            self.absorb(&edit);
            self.current = Arc::new(version);
            self.write_new_manifest()?;
        } else {
            let m = self.manifest.as_mut().ok_or(Error::Closed)?;
            m.append(&edit.encode(), true)?;
            self.absorb(&edit);
            self.current = Arc::new(version);
        }
        for f in obsolete {
            f.mark_obsolete();
        }
        Ok(())
    }

    /// Starts a new manifest holding one snapshot edit of the whole state and points `CURRENT`
    /// at it; the previous manifest is removed.
    pub fn write_new_manifest(&mut self) -> Result<()> {
        let number = self.new_file_number();
        let temp = self.new_file_number();
        let mut snapshot = VersionEdit {
            log_number: Some(self.log_number),
            next_file_number: Some(self.next_file_number),
            last_sequence: Some(self.last_sequence),
            ..Default::default()
        };
        for (level, f) in self.current.files() {
            snapshot.added.push((level, f.to_new_file()));
        }
        let path = filename::manifest_path(&self.dir, number);
        let mut w = LogWriter::create(&path, number)?;
        w.append(&snapshot.encode(), true)?;
        set_current(&self.dir, number, temp, &self.faults)?;
        if let Some(old) = self.manifest.replace(w) {
            let _ = std::fs::remove_file(old.path());
        }
        Ok(())
    }

    /// Replaces the whole tree with `files` (tables already in this directory), as of
    /// `last_sequence`, with WAL `log_number` next; written as a fresh manifest. The old tables
    /// go once unreferenced. Only for [`crate::Db::install_checkpoint`]: the caller holds every
    /// writer and background job off.
    pub fn install(&mut self, files: Vec<(usize, NewFile)>, log_number: u64, last_sequence: u64) -> Result<()> {
        let mut version = Version::default();
        for (level, f) in &files {
            self.next_file_number = self.next_file_number.max(f.number + 1);
            version.levels[*level].push(Arc::new(FileMeta::new(&self.dir, f, self.tables.clone())));
        }
        version.sort_levels();
        crate::fault::check(&self.faults, crate::fault::IoOp::ManifestWrite, &self.dir)?;
        sync_dir(&self.dir)?;
        let old = std::mem::replace(&mut self.current, Arc::new(version));
        let (old_log, old_seq) = (self.log_number, self.last_sequence);
        self.log_number = log_number;
        self.last_sequence = last_sequence;
        if let Err(e) = self.write_new_manifest() {
            self.current = old;
            (self.log_number, self.last_sequence) = (old_log, old_seq);
            return Err(e);
        }
        self.compact_pointers = vec![Vec::new(); NUM_LEVELS];
        for (_, f) in old.files() {
            f.mark_obsolete();
        }
        Ok(())
    }

    /// Lowers the recorded last sequence (a rewind); persist it with
    /// [`Self::write_new_manifest`], since replaying edits keeps the largest ever recorded.
    pub fn rewind_last_sequence(&mut self, seq: u64) {
        self.last_sequence = seq;
    }

    /// Number of the live manifest.
    pub fn manifest_number(&self) -> Option<u64> {
        self.manifest.as_ref().map(LogWriter::number)
    }
}

/// Applies `edit` to `v` (unsorted). Errors describe an edit that does not fit the version.
fn apply(v: &mut Version, edit: &VersionEdit, dir: &Path, tables: &Option<Arc<TableCache>>) -> Result<(), String> {
    let mut moved = std::collections::HashMap::new();
    for &(level, number) in &edit.deleted {
        let files = &mut v.levels[level];
        let Some(i) = files.iter().position(|f| f.number == number) else {
            return Err(format!("edit deletes table {number} which is not in level {level}"));
        };
        moved.insert(number, files.remove(i));
    }
    for (level, f) in &edit.added {
        if v.files().any(|(_, g)| g.number == f.number) {
            return Err(format!("edit adds table {} twice", f.number));
        }
        // A table moved between levels keeps its shared metadata (and its open handle).
        let meta = moved.remove(&f.number).unwrap_or_else(|| Arc::new(FileMeta::new(dir, f, tables.clone())));
        v.levels[*level].push(meta);
    }
    Ok(())
}

/// Atomically points `CURRENT` at manifest `number`, using temp file number `temp`.
fn set_current(
    dir: &Path,
    number: u64,
    temp: u64,
    faults: &Option<Arc<dyn crate::fault::FaultInjector>>,
) -> Result<()> {
    let tmp = filename::temp_path(dir, temp);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{}\n", filename::manifest_name(number)).as_bytes())?;
        f.sync_all()?;
    }
    crate::fault::check(faults, crate::fault::IoOp::Rename, &dir.join("CURRENT"))?;
    std::fs::rename(&tmp, dir.join("CURRENT"))?;
    sync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, ValueKind};

    fn file(n: u64, a: &str, z: &str) -> NewFile {
        NewFile {
            number: n,
            size: 100,
            smallest: make_internal_key(a.as_bytes(), n, ValueKind::Put),
            largest: make_internal_key(z.as_bytes(), n, ValueKind::Put),
            smallest_seq: n,
            largest_seq: n,
            num_entries: 1,
            num_range_dels: 0,
            num_deletions: 0,
            marked_for_compaction: false,
        }
    }

    #[test]
    fn edits_survive_recovery_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let mut set = VersionSet::new(dir.path(), 1024, None);
        set.write_new_manifest().unwrap();
        for i in 0..50u64 {
            let n = set.new_file_number();
            let mut e = VersionEdit { log_number: Some(n), last_sequence: Some(i * 10), ..Default::default() };
            e.added.push((0, file(n, "a", "z")));
            if i % 3 == 2 {
                // Remove the oldest L0 file now and then.
                let oldest = set.current().levels[0].last().unwrap().number;
                e.deleted.push((0, oldest));
            }
            set.log_and_apply(e).unwrap();
        }
        let live: Vec<u64> = set.current().levels[0].iter().map(|f| f.number).collect();
        let recovered = VersionSet::recover(dir.path(), 1024, None).unwrap();
        assert_eq!(recovered.current().levels[0].iter().map(|f| f.number).collect::<Vec<_>>(), live);
        assert_eq!(recovered.last_sequence(), 490);
        assert!(recovered.next_file_number > *live.iter().max().unwrap());
        // The small size limit forced rotations; only the live manifest remains.
        let manifests = filename::list(dir.path())
            .unwrap()
            .into_iter()
            .filter(|(k, _)| matches!(k, filename::FileKind::Manifest(_)))
            .count();
        assert_eq!(manifests, 1);
    }

    #[test]
    fn torn_manifest_tail_is_ignored_but_damage_inside_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut set = VersionSet::new(dir.path(), 1 << 30, None);
        set.write_new_manifest().unwrap();
        for _ in 0..3 {
            let n = set.new_file_number();
            set.log_and_apply(VersionEdit { added: vec![(0, file(n, "a", "b"))], ..Default::default() }).unwrap();
        }
        let path = filename::manifest_path(dir.path(), set.manifest_number().unwrap());
        let data = std::fs::read(&path).unwrap();
        std::fs::write(&path, &data[..data.len() - 3]).unwrap();
        assert_eq!(VersionSet::recover(dir.path(), 1 << 30, None).unwrap().current().num_files(0), 2);
        let mut bad = data.clone();
        bad[10] ^= 1;
        bad.resize(40 * 1024, 0); // the damaged first record is followed by a good block
        let mut w = Vec::new();
        let tmp = dir.path().join("x");
        let mut lw = LogWriter::create(&tmp, 0).unwrap();
        lw.append(&VersionEdit { log_number: Some(1), ..Default::default() }.encode(), false).unwrap();
        w.extend_from_slice(&std::fs::read(&tmp).unwrap());
        bad.truncate(32 * 1024);
        bad.extend_from_slice(&w);
        std::fs::write(&path, &bad).unwrap();
        assert!(VersionSet::recover(dir.path(), 1 << 30, None).unwrap_err().is_corruption());
    }

    #[test]
    fn bad_current_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("CURRENT"), "000001.sst\n").unwrap();
        assert!(VersionSet::recover(dir.path(), 1024, None).unwrap_err().is_corruption());
    }
}
