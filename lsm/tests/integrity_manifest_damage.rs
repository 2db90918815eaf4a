//! A damaged MANIFEST fails open with the file and offset, and no table is deleted because of
//! it; tables no manifest edit accounts for are kept.

use std::path::{Path, PathBuf};

use lsm::{Db, Error, Options};

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with(prefix) || p.extension().is_some_and(|e| e == prefix)
        })
        .collect();
    v.sort();
    v
}

/// `put a=1; flush; put b=2; flush; close`: a manifest of three records and two tables.
fn two_flushes(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let db = Db::open(dir, Options::default()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    db.put(b"b", b"2").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let manifest = files(dir, "MANIFEST-").pop().unwrap();
    (manifest, files(dir, "sst"))
}

#[test]
fn a_flipped_bit_in_the_first_manifest_record_fails_open_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, tables) = two_flushes(dir.path());
    assert_eq!(tables.len(), 2);
    let mut bytes = std::fs::read(&manifest).unwrap();
    bytes[21] ^= 0x04;
    std::fs::write(&manifest, &bytes).unwrap();
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, manifest),
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(db) => panic!("opened with a={:?} b={:?}", db.get(b"a"), db.get(b"b")),
    }
    assert_eq!(files(dir.path(), "sst"), tables, "no table was deleted");
    assert_eq!(std::fs::read(&manifest).unwrap(), bytes);
}

#[test]
fn tables_the_recovered_manifest_does_not_explain_are_kept_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, tables) = two_flushes(dir.path());
    // Cut the manifest inside its last record (the second flush): a torn tail. The second
    // table is then newer than every recovered edit (an interrupted flush's output, whose WAL
    // still exists), the first stays live.
    let bytes = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &bytes[..bytes.len() - 3]).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    drop(db);
    // A table older than the manifest's state that no edit added or deleted is not provably
    // obsolete: it stays on disk.
    let stray = tables[0].with_file_name("000001.sst");
    std::fs::copy(&tables[0], &stray).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    drop(db);
    assert!(stray.exists(), "an unexplained older table is kept and reported, not deleted");
}
