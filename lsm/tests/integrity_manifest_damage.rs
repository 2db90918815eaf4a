//! A damaged MANIFEST fails open with the file and offset, and no table is deleted because of
//! it; tables no manifest edit accounts for are kept.

mod common;

use std::path::{Path, PathBuf};

use common::files_named;
use lsm::{Db, Error, Options};

/// `put a=1; flush; put b=2; flush; close`: a manifest of three records and two tables.
fn two_flushes(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let db = Db::open(dir, Options::default()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    db.put(b"b", b"2").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let manifest = files_named(dir, |n| n.starts_with("MANIFEST-")).pop().unwrap();
    (manifest, files_named(dir, |n| n.ends_with(".sst")))
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
    assert_eq!(files_named(dir.path(), |n| n.ends_with(".sst")), tables, "no table was deleted");
    assert_eq!(std::fs::read(&manifest).unwrap(), bytes);
}

#[test]
fn a_damaged_last_edit_whose_wal_is_gone_is_corruption_not_a_shorter_database() {
    for cut in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (manifest, tables) = two_flushes(dir.path());
        // The last edit (the second flush) damaged or cut: it looks like a torn tail, but the
        // WAL it retired is gone, which only happens once an edit is durable.
        let mut bytes = std::fs::read(&manifest).unwrap();
        if cut {
            bytes.truncate(bytes.len() - 3);
        } else {
            let last = bytes.len() - 2;
            bytes[last] ^= 0x01;
        }
        std::fs::write(&manifest, &bytes).unwrap();
        match Db::open(dir.path(), Options::default()) {
            Err(Error::Corruption { file, reason, .. }) => {
                assert_eq!(file, manifest);
                assert!(reason.contains("lost"), "{reason}");
            }
            Err(e) => panic!("expected corruption, got {e}"),
            Ok(db) => panic!("opened with b={:?}", db.get(b"b")),
        }
        assert_eq!(files_named(dir.path(), |n| n.ends_with(".sst")), tables, "no table was deleted");
    }
}

#[test]
fn a_table_no_edit_accounts_for_is_kept_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (_, tables) = two_flushes(dir.path());
    // Older than the manifest's state, and no edit added or deleted it: not provably obsolete.
    let stray = tables[0].with_file_name("000001.sst");
    assert!(!stray.exists());
    std::fs::copy(&tables[0], &stray).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    drop(db);
    assert!(stray.exists(), "kept and reported, not deleted");
}

#[test]
fn a_table_the_manifest_lists_but_the_directory_lacks_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, tables) = two_flushes(dir.path());
    std::fs::remove_file(&tables[0]).unwrap();
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, reason, .. }) => {
            assert_eq!(file, manifest);
            assert!(reason.contains("missing"), "{reason}");
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("opened without one of its tables"),
    }
}
