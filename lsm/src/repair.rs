//! Repair: rebuild a database's manifest from the tables and WALs in its directory, as
//! LevelDB's and RocksDB's `RepairDB` do, when the manifest is lost or damaged.
//!
//! 1. Every table is read through completely (every block's checksum, the key order, the
//!    properties). A table that verifies is kept; one that does not is moved to `lost/`.
//! 2. Every WAL is replayed, up to its first damaged record, into new tables (sequence numbers
//!    preserved); the WAL itself is then moved to `lost/`, as are old manifests.
//! 3. A new manifest lists every table in L0, with the largest sequence number seen; the
//!    database is opened and fully compacted once, so versions that overlapped across tables
//!    are merged by sequence number and the levels are sorted again.
//!
//! Nothing is deleted: whatever repair could not use is in `lost/` for a human to look at.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::db::build_table_file;
use crate::filename::{self, FileKind};
use crate::iter::InternalIterator;
use crate::manifest::{NewFile, VersionEdit, VersionSet};
use crate::memtable::Memtable;
use crate::sstable::{Table, TableOptions};
use crate::wal::LogReader;
use crate::{Db, Error, Options, Result};

/// What [`repair`] did.
#[derive(Debug, Default, Clone)]
pub struct RepairReport {
    /// Tables that verified and are in the rebuilt database.
    pub tables_kept: Vec<u64>,
    /// Tables that failed verification, moved to `lost/`, with the reason.
    pub tables_lost: Vec<(u64, String)>,
    /// WALs replayed, with the records recovered from each.
    pub wals_replayed: Vec<(u64, u64)>,
    /// WALs whose replay stopped at damage: the offset and the bytes not recovered.
    pub wal_damage: Vec<(u64, u64, u64)>,
    /// The largest sequence number found.
    pub last_sequence: u64,
    /// Where unusable and replaced files went.
    pub lost_dir: PathBuf,
}

/// Rebuilds the database in `dir` from the tables and WALs present (see the module docs).
/// The directory must not be open anywhere.
pub fn repair(dir: impl AsRef<Path>, opts: Options) -> Result<RepairReport> {
    let dir = dir.as_ref();
    let lock_file = crate::db::lock_dir(dir)?;
    let lost = dir.join("lost");
    std::fs::create_dir_all(&lost)?;
    let mut report = RepairReport { lost_dir: lost.clone(), ..RepairReport::default() };
    let files = filename::list(dir)?;
    let mut max_number = 1;
    for (kind, _) in &files {
        if let FileKind::Wal(n) | FileKind::Table(n) | FileKind::Manifest(n) | FileKind::Temp(n) = kind {
            max_number = max_number.max(*n);
        }
    }
    let mut next_number = max_number + 1;
    let mut edit = VersionEdit::default();
    // 1. Tables.
    let mut tables: Vec<(u64, PathBuf)> = files
        .iter()
        .filter_map(|(k, p)| if let FileKind::Table(n) = k { Some((*n, p.clone())) } else { None })
        .collect();
    tables.sort();
    for (n, path) in tables {
        match verify_table(&path, n) {
            Ok(f) => {
                report.last_sequence = report.last_sequence.max(f.largest_seq);
                report.tables_kept.push(n);
                edit.added.push((0, f));
            }
            Err(e) => {
                tracing::warn!(target: "lsm::repair", file = %path.display(), error = %e, "table failed verification; moved to lost/");
                move_to(&path, &lost)?;
                report.tables_lost.push((n, e.to_string()));
            }
        }
    }
    // 2. WALs, oldest first.
    let table_opts = TableOptions::from_options(&opts);
    let mut wals: Vec<(u64, PathBuf)> =
        files.iter().filter_map(|(k, p)| if let FileKind::Wal(n) = k { Some((*n, p.clone())) } else { None }).collect();
    wals.sort();
    for (n, path) in wals {
        let data = std::fs::read(&path)?;
        let mut reader = LogReader::new(&data);
        let mem = Arc::new(Memtable::new(n));
        let mut records = 0u64;
        while let Some(rec) = reader.next_record() {
            let Ok(batch) = WriteBatch::from_bytes(rec.payload.into_owned()) else {
                report.wal_damage.push((n, rec.offset, data.len() as u64 - rec.offset));
                break;
            };
            mem.apply(&batch)?;
            if let Some(last) = batch.last_sequence() {
                report.last_sequence = report.last_sequence.max(last);
            }
            records += 1;
        }
        if let Some(d) = reader.damage().filter(|d| d.valid_data_after) {
            tracing::warn!(target: "lsm::repair", file = %path.display(), offset = d.offset, reason = %d.reason, "WAL damaged; records after the damage are not recovered");
            report.wal_damage.push((n, d.offset, data.len() as u64 - d.offset));
        }
        if !mem.is_empty() {
            let number = next_number;
            next_number += 1;
            if let Some(f) = build_table_file(dir, number, &mem, &table_opts, None, &[])? {
                report.tables_kept.push(number);
                edit.added.push((0, f));
            }
        }
        report.wals_replayed.push((n, records));
        move_to(&path, &lost)?;
    }
    // 3. A new manifest.
    for (kind, path) in filename::list(dir)? {
        if let FileKind::Manifest(_) = kind {
            move_to(&path, &lost)?;
        }
    }
    let mut versions = VersionSet::new(dir, opts.max_manifest_file_size, None);
    versions.mark_file_number_used(next_number);
    let log_number = versions.new_file_number();
    edit.log_number = Some(log_number);
    edit.last_sequence = Some(report.last_sequence);
    versions.log_and_apply(edit)?;
    drop(versions);
    drop(lock_file);
    // Merge overlapping versions across the L0 tables, level the result.
    let db = Db::open(dir, opts)?;
    db.compact_range::<&[u8], _>(..)?;
    db.close()?;
    tracing::info!(
        target: "lsm::repair",
        dir = %dir.display(),
        kept = report.tables_kept.len(),
        lost = report.tables_lost.len(),
        wals = report.wals_replayed.len(),
        last_sequence = report.last_sequence,
        "repaired"
    );
    Ok(report)
}

/// Reads table `n` at `path` through, checking every block and the key order; its manifest
/// record if it verifies.
pub fn verify_table(path: &Path, n: u64) -> Result<NewFile> {
    let table = Table::open(path)?;
    let mut it = table.iter();
    it.seek_to_first()?;
    let mut last: Option<Vec<u8>> = None;
    let mut entries = 0u64;
    while it.valid() {
        let k = it.key();
        if let Some(prev) = &last {
            if crate::key::compare(prev, k).is_ge() {
                return Err(Error::corruption(path, 0, "keys out of order"));
            }
        }
        last = Some(k.to_vec());
        entries += 1;
        it.next()?;
    }
    let props = table.properties();
    if entries != props.num_entries {
        return Err(Error::corruption(
            path,
            0,
            format!("{entries} entries read, the properties say {}", props.num_entries),
        ));
    }
    Ok(NewFile::from_properties(n, table.file_size(), props))
}

fn move_to(path: &Path, dir: &Path) -> Result<()> {
    let Some(name) = path.file_name() else { return Ok(()) };
    std::fs::rename(path, dir.join(name))?;
    Ok(())
}
