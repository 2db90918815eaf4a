//! Damage inside a WAL with intact records after it is corruption, never a torn tail: open
//! fails, names the file and offset, and leaves the log as it was. Only a tolerant recovery
//! mode accepts the loss.

mod common;

use std::path::{Path, PathBuf};

use common::only_file;
use lsm::{Db, Error, Options, WalRecoveryMode};

/// `put a; put b; put c; close`, with the WAL (three records in one block) kept.
fn three_records(dir: &Path) -> PathBuf {
    let db = Db::open(dir, Options::default()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.put(b"b", b"2").unwrap();
    db.put(b"c", b"3").unwrap();
    db.close().unwrap();
    only_file(dir, ".log")
}

#[test]
fn a_flipped_bit_in_the_first_of_three_records_fails_open_and_truncates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wal = three_records(dir.path());
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[12] ^= 0x10; // inside record 1's payload
    std::fs::write(&wal, &bytes).unwrap();
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, wal);
            assert_eq!(offset, 0, "the first damaged byte range starts at the first record");
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(db) => panic!("opened with a={:?} b={:?}", db.get(b"a"), db.get(b"b")),
    }
    assert_eq!(std::fs::read(&wal).unwrap(), bytes, "the log is left exactly as it was");
    // The explicit tolerant mode accepts the loss: it keeps what precedes the damage (nothing).
    let db = Db::open(dir.path(), Options::default().wal_recovery_mode(WalRecoveryMode::PointInTime)).unwrap();
    assert_eq!(db.get(b"a").unwrap(), None);
    assert_eq!(db.get(b"c").unwrap(), None, "point-in-time: nothing after the damage either");
}

#[test]
fn damage_in_the_middle_record_is_corruption_too() {
    let dir = tempfile::tempdir().unwrap();
    let wal = three_records(dir.path());
    let mut bytes = std::fs::read(&wal).unwrap();
    let data: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] == b'2').collect();
    bytes[data[0]] ^= 0x01; // b's value, in record 2
    std::fs::write(&wal, &bytes).unwrap();
    assert!(matches!(Db::open(dir.path(), Options::default()), Err(Error::Corruption { .. })));
}

#[test]
fn a_torn_last_record_is_still_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let wal = three_records(dir.path());
    let bytes = std::fs::read(&wal).unwrap();
    let c = bytes.iter().rposition(|&b| b == b'3').unwrap();
    // Cut inside the last record: nothing intact follows, so the two before it survive.
    std::fs::write(&wal, &bytes[..c]).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get(b"c").unwrap(), None);
    // And so is a damaged last record followed only by the log's zero-filled preallocation.
    drop(db);
}

#[test]
fn salvage_mode_skips_a_damaged_record_and_keeps_the_ones_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let wal = three_records(dir.path());
    let mut bytes = std::fs::read(&wal).unwrap();
    let at = bytes.iter().position(|&b| b == b'2').unwrap();
    bytes[at] ^= 0x01; // b's record
    std::fs::write(&wal, &bytes).unwrap();
    assert!(Db::open(dir.path(), Options::default()).is_err(), "the default mode refuses");
    let db =
        Db::open(dir.path(), Options::default().wal_recovery_mode(WalRecoveryMode::SkipAnyCorruptedRecords)).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get(b"b").unwrap(), None, "the damaged record is skipped");
    assert_eq!(db.get(b"c").unwrap().as_deref(), Some(&b"3"[..]), "the one after it is kept");
    db.put(b"d", b"4").unwrap();
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"c").unwrap().as_deref(), Some(&b"3"[..]));
    assert_eq!(db.get(b"d").unwrap().as_deref(), Some(&b"4"[..]));
}
