//! Opening a database: lock the directory, recover the manifest, replay WALs newer than the
//! manifest's log number into L0 tables, start a new WAL and manifest, remove obsolete files.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use super::flush::build_table;
use super::{BgState, Counters, DbInner, SuperVersion, WalState};
use crate::batch::WriteBatch;
use crate::cache::{BlockCache, ReadCounters, TableCache};
use crate::filename::{self, FileKind};
use crate::manifest::{VersionEdit, VersionSet};
use crate::memtable::Memtable;
use crate::options::{Options, WalRecoveryMode};
use crate::snapshot::SnapshotList;
use crate::sstable::TableOptions;
use crate::wal::{LogReader, LogWriter};
use crate::{Error, Result};

pub(super) fn open(dir: &Path, opts: Options) -> Result<Arc<DbInner>> {
    opts.validate()?;
    if !dir.exists() {
        if !opts.create_if_missing {
            return Err(Error::InvalidArgument(format!("{} does not exist (create_if_missing is off)", dir.display())));
        }
        std::fs::create_dir_all(dir)?;
    }
    let lock_file = lock_dir(dir)?;
    let read_counters = Arc::new(ReadCounters::default());
    let block_cache =
        Arc::new(BlockCache::with_rows(opts.block_cache_size, opts.row_cache_size, Arc::clone(&read_counters)));
    block_cache.charge_readers(opts.charge_table_readers);
    block_cache.charge_memtables(opts.charge_memtables);
    let tables = Arc::new(TableCache::new(dir.to_path_buf(), opts.max_open_files, block_cache, opts.table_read_mode));
    let exists = dir.join("CURRENT").exists();
    let mut versions = if exists {
        if opts.error_if_exists {
            return Err(Error::InvalidArgument(format!(
                "database {} already exists (error_if_exists is on)",
                dir.display()
            )));
        }
        VersionSet::recover(dir, opts.max_manifest_file_size, Some(Arc::clone(&tables)))?
    } else {
        if !opts.create_if_missing {
            return Err(Error::InvalidArgument(format!("no database in {} (create_if_missing is off)", dir.display())));
        }
        // Without CURRENT a directory holding tables or logs is a database that lost its
        // manifest pointer, not a new one: starting afresh would delete its tables.
        // (A first open that failed may leave an empty WAL and a manifest: no data, no harm.)
        let stray = filename::list(dir)?.into_iter().find(|(k, p)| match k {
            FileKind::Table(_) => true,
            FileKind::Wal(_) => std::fs::read(p).is_ok_and(|d| d.iter().any(|&b| b != 0)),
            _ => false,
        });
        if let Some((_, path)) = stray {
            return Err(Error::corruption(
                dir.join("CURRENT"),
                0,
                format!("missing while {} exists: rebuild with lsm::repair (shale-ldb repair)", path.display()),
            ));
        }
        VersionSet::new(dir, opts.max_manifest_file_size, Some(Arc::clone(&tables)))
    };

    versions.set_faults(opts.faults.clone());
    let files = filename::list(dir)?;
    for (kind, _) in &files {
        if let FileKind::Wal(n) | FileKind::Table(n) | FileKind::Manifest(n) | FileKind::Temp(n) = kind {
            versions.mark_file_number_used(*n);
        }
    }
    check_recovered_files(&versions, &files)?;
    let mut wals: Vec<u64> = files
        .iter()
        .filter_map(|(k, _)| match k {
            FileKind::Wal(n) if *n >= versions.log_number() => Some(*n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();

    let mut edit = VersionEdit::default();
    let mut last_seq = versions.last_sequence();
    let table_opts = TableOptions::from_options(&opts);
    let mut mem = Arc::new(Memtable::new(0));
    for (i, &n) in wals.iter().enumerate() {
        let is_last = i + 1 == wals.len();
        let stop = replay_wal(dir, n, is_last, &opts, &mut mem, &mut last_seq, &mut |m| {
            flush_recovered(dir, &mut versions, m, &table_opts, &mut edit)
        })?;
        if stop {
            break;
        }
    }
    flush_recovered(dir, &mut versions, &mem, &table_opts, &mut edit)?;

    let wal_number = versions.new_file_number();
    let log = LogWriter::create_mapped(&filename::wal_path(dir, wal_number), wal_number, wal_capacity(&opts))?;
    edit.log_number = Some(wal_number);
    edit.last_sequence = Some(last_seq);
    // A recovered version set has no manifest writer yet, so this starts a new, compact manifest
    // (dropping any torn tail of the old one) that holds the recovered state plus `edit`.
    versions.log_and_apply(edit)?;
    let old_wals = remove_obsolete_files(dir, &versions)?;

    let version = versions.current();
    tracing::info!(
        target: "lsm::db",
        dir = %dir.display(),
        last_seq,
        tables = version.files().count(),
        replayed_wals = wals.len(),
        "database open"
    );
    let active = Arc::new(Memtable::with_budget(wal_number, opts.write_buffer_size));
    let l0_files = version.num_files(0);
    let inner = Arc::new(DbInner {
        dir: dir.to_path_buf(),
        sync_mode: std::sync::atomic::AtomicU8::new(opts.sync_mode as u8),
        groups_done: AtomicU64::new(0),
        committed_through: AtomicU64::new(0),
        unread_failures: AtomicBool::new(false),
        failed_groups: AtomicU64::new(0),
        next_waiter: AtomicU64::new(0),
        versions: Mutex::new(versions),
        sv: arc_swap::ArcSwap::from_pointee(SuperVersion { mem: Arc::clone(&active), imm: Vec::new(), version }),
        sv_change: Mutex::new(()),
        imm_count: AtomicUsize::new(0),
        imm_bytes: AtomicUsize::new(0),
        l0_files: AtomicUsize::new(l0_files),
        queue: Mutex::default(),
        queue_cv: Condvar::new(),
        commit_cv: Condvar::new(),
        commit_deferred: AtomicBool::new(false),
        wal_file: Mutex::new(log.file()),
        active_wal: super::ActiveWal { number: AtomicU64::new(log.number()), size: AtomicU64::new(log.size()) },
        wal: Mutex::new(WalState { log, last_seq, mem: active }),
        bg: Mutex::new(BgState::default()),
        bg_cv: Condvar::new(),
        visible_seq: AtomicU64::new(last_seq),
        snapshots: Arc::new(SnapshotList::default()),
        poisoned: Mutex::new(None),
        is_poisoned: AtomicBool::new(false),
        last_resume: Mutex::new(None),
        closed: AtomicBool::new(false),
        threads: Mutex::new(Vec::new()),
        lock_file: Mutex::new(Some(lock_file)),
        counters: Counters::default(),
        read_counters,
        tables,
        retained_wals: Mutex::default(),
        tailers: std::sync::atomic::AtomicUsize::new(0),
        tail_mu: Mutex::new(()),
        tail_cv: Condvar::new(),
        options: RwLock::new(Arc::new(opts)),
    });
    inner.adopt_old_wals(old_wals);
    let mut threads = Vec::new();
    let flusher = Arc::clone(&inner);
    threads.push(std::thread::Builder::new().name("lsm-flush".into()).spawn(move || flusher.flush_loop())?);
    // Started even with auto compactions off: they idle until `set_options` turns them on.
    {
        for i in 0..inner.opts().max_background_compactions {
            let compactor = Arc::clone(&inner);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("lsm-compact-{i}"))
                    .spawn(move || compactor.compaction_loop())?,
            );
        }
    }
    {
        let committer = Arc::clone(&inner);
        threads.push(std::thread::Builder::new().name("lsm-commit".into()).spawn(move || committer.commit_loop())?);
    }
    {
        let syncer = Arc::clone(&inner);
        threads.push(std::thread::Builder::new().name("lsm-wal-sync".into()).spawn(move || syncer.sync_loop())?);
    }
    *super::lock(&inner.threads) = threads;
    Ok(inner)
}

/// Checks the recovered manifest against the files present, before anything is replayed or
/// deleted: every table it lists must exist, and a table newer than every recovered edit that
/// holds writes past the recorded last sequence (a flush output) is only harmless if the oldest
/// WAL the manifest still needs is there too: if it is gone, the edit that retired it was lost.
/// (Under `EverySec` a power cut may take the active, never-synced WAL: then a newer table is an
/// interrupted compaction's output, holding nothing new, and is simply deleted.)
fn check_recovered_files(versions: &VersionSet, files: &[(FileKind, std::path::PathBuf)]) -> Result<()> {
    let Some(manifest) = versions.recovered_from() else { return Ok(()) };
    let on_disk: std::collections::HashSet<u64> =
        files.iter().filter_map(|(k, _)| if let FileKind::Table(n) = k { Some(*n) } else { None }).collect();
    let version = versions.current();
    if let Some((_, f)) = version.files().find(|(_, f)| !on_disk.contains(&f.number)) {
        return Err(Error::corruption(manifest, 0, format!("table {} listed by the manifest is missing", f.number)));
    }
    let live: std::collections::HashSet<u64> = version.files().map(|(_, f)| f.number).collect();
    let wal_there = files.iter().any(|(k, _)| matches!(k, FileKind::Wal(n) if *n == versions.log_number()));
    if wal_there {
        return Ok(());
    }
    // Without that WAL, a newer table is harmless only if it holds nothing the manifest does not
    // already account for (an interrupted compaction's output: sequences up to the recorded
    // last one). One holding later writes is a flush whose edit was lost with its WAL.
    for (kind, path) in files {
        let FileKind::Table(n) = kind else { continue };
        if live.contains(n) || versions.recorded_deleted(*n) || !versions.provably_obsolete(*n) {
            continue;
        }
        let Ok(table) = crate::sstable::Table::open(path) else { continue }; // an unfinished output
        let largest = table.properties().largest_seq;
        if largest > versions.last_sequence() {
            return Err(Error::corruption(
                manifest,
                0,
                format!(
                    "table {n} holds writes up to sequence {largest}, past the manifest's {}, and WAL {} is gone: manifest edits were lost",
                    versions.last_sequence(),
                    versions.log_number()
                ),
            ));
        }
    }
    Ok(())
}

/// Takes the directory's `LOCK` (held until the returned file is dropped): one process at a
/// time opens or repairs a database.
pub(crate) fn lock_dir(dir: &Path) -> Result<File> {
    let lock_file = File::options().create(true).truncate(false).write(true).open(dir.join("LOCK"))?;
    match lock_file.try_lock() {
        Ok(()) => Ok(lock_file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Replays WAL `n` into `mem`, calling `flush` whenever `mem` fills up. Returns `true` when
/// recovery must stop here (point-in-time recovery hit damage).
fn replay_wal(
    dir: &Path,
    n: u64,
    is_last: bool,
    opts: &Options,
    mem: &mut Arc<Memtable>,
    last_seq: &mut u64,
    flush: &mut dyn FnMut(&Arc<Memtable>) -> Result<()>,
) -> Result<bool> {
    let path = filename::wal_path(dir, n);
    let data = std::fs::read(&path)?;
    let mut reader = LogReader::new(&data);
    let mut records = 0u64;
    loop {
        let Some(rec) = reader.next_record() else {
            // Salvage mode: skip a damaged stretch with intact records after it, and go on.
            match reader.damage() {
                Some(d) if d.valid_data_after && opts.wal_recovery_mode == WalRecoveryMode::SkipAnyCorruptedRecords => {
                    let (offset, reason) = (d.offset, d.reason.clone());
                    let resumed = reader.skip_damage();
                    tracing::warn!(
                        target: "lsm::wal",
                        file = %path.display(),
                        offset,
                        skipped_to = reader.good_end(),
                        %reason,
                        "skipping damaged WAL records"
                    );
                    if resumed {
                        continue;
                    }
                }
                _ => {}
            }
            break;
        };
        let batch = WriteBatch::from_bytes(rec.payload.into_owned())
            .map_err(|e| Error::corruption(&path, rec.offset, e.to_string()))?;
        if !batch.is_empty() {
            // Records carry increasing sequence numbers below the largest one: anything else
            // is damage that happened to pass the checksum.
            match batch.last_sequence() {
                Some(last) if batch.sequence() > 0 => {
                    *last_seq = (*last_seq).max(last);
                }
                _ => {
                    return Err(Error::corruption(
                        &path,
                        rec.offset,
                        format!("record sequence {} (count {}) is out of range", batch.sequence(), batch.len()),
                    ))
                }
            }
        }
        mem.apply(&batch)?;
        records += 1;
        if mem.approximate_size() >= opts.write_buffer_size {
            flush(mem)?;
            *mem = Arc::new(Memtable::new(0));
        }
    }
    let Some(d) = reader.damage() else {
        if (data.len() as u64) > reader.good_end() {
            // The zero-filled tail of a mapped WAL that was not closed cleanly.
            File::options().write(true).open(&path)?.set_len(reader.good_end())?;
        }
        tracing::debug!(target: "lsm::wal", file = %path.display(), records, "WAL replayed");
        return Ok(false);
    };
    let tolerate = match opts.wal_recovery_mode {
        WalRecoveryMode::AbsoluteConsistency => false,
        WalRecoveryMode::TolerateCorruptedTail => is_last && !d.valid_data_after,
        WalRecoveryMode::PointInTime | WalRecoveryMode::SkipAnyCorruptedRecords => true,
    };
    if !tolerate {
        return Err(Error::corruption(&path, d.offset, d.reason.clone()));
    }
    tracing::warn!(
        target: "lsm::wal",
        file = %path.display(),
        offset = d.offset,
        dropped_bytes = data.len() as u64 - d.offset,
        reason = %d.reason,
        "truncating damaged WAL tail"
    );
    let f = File::options().write(true).open(&path)?;
    f.set_len(d.offset)?;
    f.sync_all()?;
    Ok(true)
}

/// Bytes to preallocate for a WAL: a memtable's worth of records, give or take.
pub(super) fn wal_capacity(opts: &Options) -> u64 {
    (opts.write_buffer_size as u64 + opts.write_buffer_size as u64 / 4).clamp(64 << 10, 256 << 20)
}

/// Writes a recovered memtable to an L0 table, recorded in `edit`.
fn flush_recovered(
    dir: &Path,
    versions: &mut VersionSet,
    mem: &Arc<Memtable>,
    opts: &TableOptions,
    edit: &mut VersionEdit,
) -> Result<()> {
    if mem.is_empty() {
        return Ok(());
    }
    let number = versions.new_file_number();
    // No snapshot exists while the database opens.
    if let Some(f) = build_table(dir, number, mem, opts, None, &[])? {
        edit.added.push((0, f));
    }
    Ok(())
}

/// Removes tables no version lists, old manifests and temp files. Returns the WALs already in
/// tables, which retention may keep for replicas.
fn remove_obsolete_files(dir: &Path, versions: &VersionSet) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let mut old_wals = Vec::new();
    let version = versions.current();
    let live: std::collections::HashSet<u64> = version.files().map(|(_, f)| f.number).collect();
    for (kind, path) in filename::list(dir)? {
        let obsolete = match kind {
            FileKind::Wal(n) => {
                if n < versions.log_number() {
                    old_wals.push((n, path));
                }
                continue;
            }
            FileKind::Table(n) if live.contains(&n) => false,
            FileKind::Table(n) if versions.provably_obsolete(n) => true,
            FileKind::Table(_) => {
                // Never delete what cannot be proven obsolete (a manifest that lost edits would
                // otherwise take the tables they added with it).
                tracing::warn!(target: "lsm::db", file = %path.display(), "table not in the manifest kept: no manifest edit accounts for it");
                false
            }
            FileKind::Manifest(n) => Some(n) != versions.manifest_number(),
            FileKind::Temp(_) => true,
            FileKind::Current | FileKind::Lock => false,
        };
        if obsolete {
            tracing::debug!(target: "lsm::db", file = %path.display(), "removing obsolete file");
            std::fs::remove_file(&path)?;
        }
    }
    Ok(old_wals)
}
