//! Names of the files in a database directory.

use std::path::{Path, PathBuf};

/// What a file in the database directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `NNNNNN.log`: a write-ahead log.
    Wal(u64),
    /// `NNNNNN.sst`: a table.
    Table(u64),
    /// `MANIFEST-NNNNNN`: a manifest log.
    Manifest(u64),
    /// `CURRENT`: names the live manifest.
    Current,
    /// `LOCK`: held by the process that has the database open.
    Lock,
    /// `NNNNNN.dbtmp`: a temporary file from an interrupted atomic rename.
    Temp(u64),
}

/// Path of WAL `n`.
pub fn wal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

/// Path of table `n`.
pub fn table_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

/// Path of manifest `n`.
pub fn manifest_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(manifest_name(n))
}

/// File name of manifest `n`.
pub fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:06}")
}

/// Path of temporary file `n`.
pub fn temp_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.dbtmp"))
}

/// Recognises an engine file name.
pub fn parse(name: &str) -> Option<FileKind> {
    match name {
        "CURRENT" => return Some(FileKind::Current),
        "LOCK" => return Some(FileKind::Lock),
        _ => {}
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return n.parse().ok().map(FileKind::Manifest);
    }
    let (stem, ext) = name.split_once('.')?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = stem.parse().ok()?;
    match ext {
        "log" => Some(FileKind::Wal(n)),
        "sst" => Some(FileKind::Table(n)),
        "dbtmp" => Some(FileKind::Temp(n)),
        _ => None,
    }
}

/// Lists the engine files in `dir`.
pub fn list(dir: &Path) -> std::io::Result<Vec<(FileKind, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(kind) = entry.file_name().to_str().and_then(parse) {
            out.push((kind, entry.path()));
        }
    }
    Ok(out)
}

/// fsyncs a directory so that created, renamed and removed names in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let d = Path::new("/db");
        for (p, k) in [
            (wal_path(d, 7), FileKind::Wal(7)),
            (table_path(d, 1_234_567), FileKind::Table(1_234_567)),
            (manifest_path(d, 3), FileKind::Manifest(3)),
            (temp_path(d, 9), FileKind::Temp(9)),
        ] {
            assert_eq!(parse(p.file_name().unwrap().to_str().unwrap()), Some(k));
        }
        assert_eq!(parse("CURRENT"), Some(FileKind::Current));
        for junk in ["x.log", ".sst", "12.txt", "MANIFEST-", "MANIFEST-x", "-1.sst", "README"] {
            assert_eq!(parse(junk), None, "{junk}");
        }
    }
}
