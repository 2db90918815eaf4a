//! Damaged files are reported, never read as wrong data; torn WAL tails are cut cleanly.

use std::path::{Path, PathBuf};

use lsm::{Compression, Db, Error, Options, TableReadMode, WalRecoveryMode};

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn flipped_byte_in_a_table_data_block_is_a_corruption_error() {
    let codecs = [Compression::None, Compression::Snappy, Compression::Zstd].into_iter().filter(|c| c.is_available());
    for (codec, mode) in codecs.flat_map(|c| [(c, TableReadMode::Mmap), (c, TableReadMode::Pread)]) {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), Options::default().compression(codec)).unwrap();
            for i in 0..1000u32 {
                db.put(format!("key{i:04}"), format!("value{i:04}")).unwrap();
            }
            db.flush().unwrap();
        }
        let sst = files_with_ext(dir.path(), "sst").pop().expect("one table");
        let mut bytes = std::fs::read(&sst).unwrap();
        bytes[30] ^= 0x08; // inside the first data block, which holds key0000
        std::fs::write(&sst, &bytes).unwrap();
        let db = Db::open(dir.path(), Options::default().table_read_mode(mode)).unwrap();
        match db.get(b"key0000") {
            Err(Error::Corruption { file, offset, reason }) => {
                assert_eq!(file, sst);
                assert_eq!(offset, 0, "the first block starts at 0");
                assert!(reason.contains("checksum"), "{reason}");
            }
            other => panic!("{codec:?} {mode:?}: expected corruption, got {other:?}"),
        }
        // A scan reports the error instead of skipping the block.
        let first = db.range::<&[u8], _>(..).next().unwrap();
        assert!(matches!(first, Err(Error::Corruption { .. })));
        // Keys in intact blocks still read correctly.
        assert_eq!(db.get(b"key0999").unwrap().as_deref(), Some(&b"value0999"[..]));
    }
}

#[test]
fn truncated_table_fails_open_of_the_table_not_silently() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        db.put(b"a", b"1").unwrap();
        db.flush().unwrap();
    }
    let sst = files_with_ext(dir.path(), "sst").pop().unwrap();
    let len = std::fs::metadata(&sst).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&sst).unwrap().set_len(len - 10).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(db.get(b"a").unwrap_err().is_corruption());
}

/// Writes `n` records with no flush, so they live only in the WAL; returns the WAL's path.
fn wal_only_db(dir: &Path, n: u32) -> PathBuf {
    let db = Db::open(dir, Options::default()).unwrap();
    for i in 0..n {
        db.put(format!("key{i:05}"), vec![b'v'; 700]).unwrap();
    }
    db.close().unwrap();
    files_with_ext(dir, "log").pop().unwrap()
}

#[test]
fn wal_cut_mid_record_keeps_every_complete_record() {
    let dir = tempfile::tempdir().unwrap();
    let wal = wal_only_db(dir.path(), 200);
    let len = std::fs::metadata(&wal).unwrap().len();
    // Each record is the batch header (12) + entry (1 + 1 + 8 + 2 + 700) + fragment header(s).
    let cut = len * 2 / 3 + 123;
    std::fs::OpenOptions::new().write(true).open(&wal).unwrap().set_len(cut).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let present: Vec<u32> = (0..200).filter(|i| db.get(format!("key{i:05}")).unwrap().is_some()).collect();
    assert!(!present.is_empty());
    let k = present.len() as u32;
    assert_eq!(present, (0..k).collect::<Vec<_>>(), "a prefix of the writes survives");
    // Every record that lies completely before the cut survived: each takes about 731 bytes.
    assert!(u64::from(k + 1) * 731 + 7 * 32 > cut, "lost complete records: kept {k} of a {cut}-byte WAL");
    assert_eq!(db.latest_sequence(), u64::from(k));
    // The damaged tail is gone for good: writes after recovery go on from there.
    db.put(b"after", b"x").unwrap();
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(db.latest_sequence(), u64::from(k) + 1);
}

#[test]
fn wal_damage_before_the_tail_is_an_error_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let wal = wal_only_db(dir.path(), 200);
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[100] ^= 0xff; // inside the first record; good records follow in later blocks
    std::fs::write(&wal, &bytes).unwrap();
    let err = Db::open(dir.path(), Options::default()).unwrap_err();
    match err {
        Error::Corruption { file, .. } => assert_eq!(file, wal),
        other => panic!("expected corruption, got {other}"),
    }
    // Nothing was lost by refusing: point-in-time recovery is the user's explicit choice.
    let db = Db::open(dir.path(), Options::default().wal_recovery_mode(WalRecoveryMode::PointInTime)).unwrap();
    assert_eq!(db.get(b"key00000").unwrap(), None);
    assert_eq!(db.range::<&[u8], _>(..).count(), 0);
}

#[test]
fn absolute_consistency_refuses_even_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let wal = wal_only_db(dir.path(), 10);
    let len = std::fs::metadata(&wal).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&wal).unwrap().set_len(len - 5).unwrap();
    let opts = Options::default().wal_recovery_mode(WalRecoveryMode::AbsoluteConsistency);
    assert!(Db::open(dir.path(), opts).unwrap_err().is_corruption());
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.range::<&[u8], _>(..).count(), 9);
}

#[test]
fn damaged_manifest_is_a_corruption_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        db.put(b"a", b"1").unwrap();
        db.flush().unwrap();
    }
    let manifest = std::fs::read_to_string(dir.path().join("CURRENT")).unwrap();
    let path = dir.path().join(manifest.trim());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[9] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    // The only record is damaged and nothing follows: treated like a torn write would be, the
    // manifest then lacks its required fields, which is corruption.
    assert!(Db::open(dir.path(), Options::default()).unwrap_err().is_corruption());
}
