//! `shale-ldb`: inspect, verify and repair an `lsm` database directory that is not open, like
//! RocksDB's `ldb` and `sst_dump`.
//!
//! ```text
//! shale-ldb verify        DIR              every checksum, key order, manifest against files
//! shale-ldb repair        DIR              rebuild the manifest from tables and WALs (lsm::repair)
//! shale-ldb stats         DIR              levels, tables, bytes
//! shale-ldb get           DIR KEY
//! shale-ldb scan          DIR [FROM [TO]] [--limit N]
//! shale-ldb dump-wal      FILE             records: offset, sequence, operations
//! shale-ldb dump-manifest FILE             version edits
//! shale-ldb dump-sst      FILE [--stats]   entries (user key, sequence, kind, value) or properties
//! ```
//! Keys and values print with non-printable bytes as `\xNN`. Exit status: 0 fine, 1 a problem
//! found (verify) or an error, 2 a usage error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lsm::filename::{self, FileKind};
use lsm::iter::InternalIterator;
use lsm::manifest::{VersionEdit, VersionSet};
use lsm::sstable::Table;
use lsm::wal::LogReader;
use lsm::{Db, Options, WriteBatch};

const USAGE: &str = "usage: shale-ldb verify|repair|stats DIR | get DIR KEY | scan DIR [FROM [TO]] [--limit N] \
                     | dump-wal FILE | dump-manifest FILE | dump-sst FILE [--stats]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout().lock();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["verify", dir] => verify(Path::new(dir), &mut out),
        ["repair", dir] => repair(Path::new(dir), &mut out),
        ["stats", dir] => stats(Path::new(dir), &mut out),
        ["get", dir, key] => get(Path::new(dir), key.as_bytes(), &mut out),
        ["scan", dir, rest @ ..] => scan(Path::new(dir), rest, &mut out),
        ["dump-wal", file] => dump_wal(Path::new(file), &mut out),
        ["dump-manifest", file] => dump_manifest(Path::new(file), &mut out),
        ["dump-sst", file] => dump_sst(Path::new(file), false, &mut out),
        ["dump-sst", file, "--stats"] => dump_sst(Path::new(file), true, &mut out),
        _ => {
            let _ = writeln!(std::io::stderr(), "{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "shale-ldb: {e}");
            ExitCode::from(1)
        }
    }
}

type Out<'a> = std::io::StdoutLock<'a>;
type Outcome = Result<bool, Box<dyn std::error::Error>>;

/// Bytes as text, with non-printable bytes escaped.
fn show(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if c.is_ascii_graphic() || c == b' ' {
            s.push(c as char);
        } else {
            s.push_str(&format!("\\x{c:02x}"));
        }
    }
    s
}

fn files_of(dir: &Path) -> std::io::Result<Vec<(FileKind, PathBuf)>> {
    let mut files = filename::list(dir)?;
    files.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(files)
}

/// Checks every table's blocks and key order, every WAL's records, and the manifest against
/// the files present, without changing anything.
fn verify(dir: &Path, out: &mut Out<'_>) -> Outcome {
    let mut ok = true;
    let files = files_of(dir)?;
    // The manifest as open would read it (a torn last edit is ignored, damage before it is not).
    let listed: std::collections::BTreeSet<u64> = match VersionSet::recover(dir, u64::MAX, None) {
        Ok(set) => {
            let live: std::collections::BTreeSet<u64> = set.current().files().map(|(_, f)| f.number).collect();
            let from = set.recovered_from().map(|p| p.display().to_string()).unwrap_or_default();
            writeln!(out, "MANIFEST {from}: {} live tables", live.len())?;
            live
        }
        Err(e) => {
            writeln!(out, "MANIFEST: {e}")?;
            ok = false;
            std::collections::BTreeSet::new()
        }
    };
    for (kind, path) in &files {
        match kind {
            FileKind::Table(n) => match lsm::repair::verify_table(path, *n) {
                Ok(f) => {
                    let note = if listed.contains(n) { "" } else { " (not in the manifest)" };
                    writeln!(out, "table {}: ok, {} entries{note}", path.display(), f.num_entries)?;
                }
                Err(e) => {
                    writeln!(out, "table {}: {e}", path.display())?;
                    ok = false;
                }
            },
            FileKind::Wal(_) => {
                let data = std::fs::read(path)?;
                let mut reader = LogReader::new(&data);
                let mut records = 0u64;
                while reader.next_record().is_some() {
                    records += 1;
                }
                match reader.damage() {
                    Some(d) if d.valid_data_after => {
                        writeln!(out, "WAL {}: CORRUPTION at offset {}: {}", path.display(), d.offset, d.reason)?;
                        ok = false;
                    }
                    Some(d) => writeln!(out, "WAL {}: {records} records, torn tail at {}", path.display(), d.offset)?,
                    None => writeln!(out, "WAL {}: {records} records", path.display())?,
                }
            }
            _ => {}
        }
    }
    for n in &listed {
        if !files.iter().any(|(k, _)| *k == FileKind::Table(*n)) {
            writeln!(out, "table {n}: listed by the manifest but MISSING")?;
            ok = false;
        }
    }
    writeln!(
        out,
        "{}",
        if ok { "verify: OK" } else { "verify: PROBLEMS FOUND (see above; `shale-ldb repair` rebuilds)" }
    )?;
    Ok(ok)
}

fn repair(dir: &Path, out: &mut Out<'_>) -> Outcome {
    let r = lsm::repair(dir, Options::default())?;
    writeln!(out, "tables kept: {:?}", r.tables_kept)?;
    for (n, why) in &r.tables_lost {
        writeln!(out, "table {n} moved to {}: {why}", r.lost_dir.display())?;
    }
    for (n, records) in &r.wals_replayed {
        writeln!(out, "WAL {n}: {records} records replayed")?;
    }
    for (n, offset, bytes) in &r.wal_damage {
        writeln!(out, "WAL {n}: damaged at offset {offset}, {bytes} bytes not recovered")?;
    }
    writeln!(out, "last sequence: {}; replaced files are in {}", r.last_sequence, r.lost_dir.display())?;
    Ok(r.tables_lost.is_empty() && r.wal_damage.is_empty())
}

fn open(dir: &Path) -> lsm::Result<Db> {
    Db::open(dir, Options::default().create_if_missing(false))
}

fn stats(dir: &Path, out: &mut Out<'_>) -> Outcome {
    let db = open(dir)?;
    writeln!(out, "{}", db.stats())?;
    writeln!(out, "last sequence: {}", db.latest_sequence())?;
    db.close()?;
    Ok(true)
}

fn get(dir: &Path, key: &[u8], out: &mut Out<'_>) -> Outcome {
    let db = open(dir)?;
    let found = db.get(key)?;
    match &found {
        Some(v) => writeln!(out, "{}", show(v))?,
        None => writeln!(out, "(not found)")?,
    }
    db.close()?;
    Ok(found.is_some())
}

fn scan(dir: &Path, rest: &[&str], out: &mut Out<'_>) -> Outcome {
    let mut bounds = Vec::new();
    let mut limit = usize::MAX;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if *a == "--limit" {
            limit = it.next().and_then(|n| n.parse().ok()).ok_or("--limit needs a number")?;
        } else {
            bounds.push(a.as_bytes().to_vec());
        }
    }
    let db = open(dir)?;
    let from = bounds.first().cloned().unwrap_or_default();
    let range = match bounds.get(1) {
        Some(to) => db.range(from..to.clone()),
        None => db.range(from..),
    };
    for kv in range.take(limit) {
        let (k, v) = kv?;
        writeln!(out, "{} => {}", show(&k), show(&v))?;
    }
    db.close()?;
    Ok(true)
}

fn dump_wal(file: &Path, out: &mut Out<'_>) -> Outcome {
    let data = std::fs::read(file)?;
    let mut reader = LogReader::new(&data);
    while let Some(rec) = reader.next_record() {
        match WriteBatch::from_bytes(rec.payload.to_vec()) {
            Ok(batch) => {
                writeln!(out, "@{} seq {} count {}", rec.offset, batch.sequence(), batch.len())?;
                for e in batch.iter() {
                    let e = e?;
                    writeln!(out, "  {:?} {} => {}", e.kind, show(e.key), show(e.value))?;
                }
            }
            Err(e) => writeln!(out, "@{} not a write batch: {e}", rec.offset)?,
        }
    }
    Ok(report_damage(&reader, out)?)
}

fn dump_manifest(file: &Path, out: &mut Out<'_>) -> Outcome {
    let data = std::fs::read(file)?;
    let mut reader = LogReader::new(&data);
    while let Some(rec) = reader.next_record() {
        let Some(edit) = VersionEdit::decode(&rec.payload) else {
            writeln!(out, "@{} malformed edit", rec.offset)?;
            return Ok(false);
        };
        writeln!(
            out,
            "@{} log_number {:?} next_file {:?} last_sequence {:?}",
            rec.offset, edit.log_number, edit.next_file_number, edit.last_sequence
        )?;
        for (level, n) in &edit.deleted {
            writeln!(out, "  - L{level} table {n}")?;
        }
        for (level, f) in &edit.added {
            writeln!(
                out,
                "  + L{level} table {} ({} bytes, {} entries, seq {}..{}) [{} .. {}]",
                f.number,
                f.size,
                f.num_entries,
                f.smallest_seq,
                f.largest_seq,
                show(lsm::key::user_key(&f.smallest)),
                show(lsm::key::user_key(&f.largest))
            )?;
        }
    }
    Ok(report_damage(&reader, out)?)
}

fn report_damage(reader: &LogReader<'_>, out: &mut Out<'_>) -> std::io::Result<bool> {
    match reader.damage() {
        Some(d) if d.valid_data_after => {
            writeln!(out, "CORRUPTION at offset {}: {} (intact records follow)", d.offset, d.reason)?;
            Ok(false)
        }
        Some(d) => {
            writeln!(out, "torn tail at offset {}: {}", d.offset, d.reason)?;
            Ok(true)
        }
        None => Ok(true),
    }
}

fn dump_sst(file: &Path, stats_only: bool, out: &mut Out<'_>) -> Outcome {
    let table = Table::open(file)?;
    if stats_only {
        writeln!(out, "{:#?}", table.properties())?;
        writeln!(out, "file size: {}", table.file_size())?;
        return Ok(true);
    }
    let mut it = table.iter();
    it.seek_to_first()?;
    while it.valid() {
        match lsm::key::parse(it.key()) {
            Some(p) => writeln!(out, "{} @{} {:?} => {}", show(p.user_key), p.seq, p.kind, show(it.value()))?,
            None => writeln!(out, "malformed internal key {}", show(it.key()))?,
        }
        it.next()?;
    }
    for t in table.range_tombstones() {
        writeln!(out, "range tombstone {t:?}")?;
    }
    Ok(true)
}
