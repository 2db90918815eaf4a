//! `lsm::repair` rebuilds a database whose manifest is gone or damaged from its tables and
//! WALs: everything that verifies comes back, what does not is moved to `lost/`, nothing is
//! deleted. And a directory with tables but no CURRENT is not mistaken for a new database.

mod common;

use std::path::Path;

use common::files_named as named;
use lsm::{Db, Error, Options};

fn opts() -> Options {
    Options::default().disable_auto_compactions(true)
}

/// Three flushed tables (keys 0..300, a third each, later ones overwriting some earlier keys)
/// and unflushed writes in the WAL.
fn build(dir: &Path) {
    let db = Db::open(dir, opts()).unwrap();
    for round in 0..3u32 {
        for i in (round * 100)..(round * 100 + 100) {
            db.put(format!("k{i:04}"), format!("r{round}")).unwrap();
        }
        db.put(b"shared", format!("round{round}")).unwrap();
        db.flush().unwrap();
    }
    db.put(b"shared", b"wal").unwrap();
    db.put(b"in-wal", b"yes").unwrap();
    db.delete(b"k0000").unwrap();
    db.close().unwrap();
}

#[test]
fn a_lost_manifest_is_rebuilt_from_tables_and_wals() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    for m in named(dir.path(), |n| n.starts_with("MANIFEST-") || n == "CURRENT") {
        std::fs::remove_file(m).unwrap();
    }
    let tables = named(dir.path(), |n| n.ends_with(".sst"));
    match Db::open(dir.path(), opts()) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("repair"), "{reason}"),
        other => panic!("expected corruption, got {:?}", other.map(|_| "an open database")),
    }
    assert_eq!(named(dir.path(), |n| n.ends_with(".sst")), tables, "nothing was deleted");
    let report = lsm::repair(dir.path(), opts()).unwrap();
    assert!(report.tables_lost.is_empty(), "{report:?}");
    assert_eq!(report.wals_replayed.len(), 1, "{report:?}");
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"shared").unwrap().as_deref(), Some(&b"wal"[..]), "the newest version wins");
    assert_eq!(db.get(b"in-wal").unwrap().as_deref(), Some(&b"yes"[..]));
    assert_eq!(db.get(b"k0000").unwrap(), None, "a delete in the WAL still deletes");
    assert_eq!(db.get(b"k0299").unwrap().as_deref(), Some(&b"r2"[..]));
    assert_eq!(db.range::<&[u8], _>(..).count(), 299 + 2);
    db.put(b"after", b"repair").unwrap();
    assert!(db.latest_sequence() > report.last_sequence, "sequence numbers go on from the repaired ones");
}

#[test]
fn a_damaged_table_goes_to_lost_and_the_rest_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let tables = named(dir.path(), |n| n.ends_with(".sst"));
    let victim = &tables[0];
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[40] ^= 0x20;
    std::fs::write(victim, &bytes).unwrap();
    let report = lsm::repair(dir.path(), opts()).unwrap();
    assert_eq!(report.tables_lost.len(), 1, "{report:?}");
    assert!(report.lost_dir.join(victim.file_name().unwrap()).exists(), "quarantined, not deleted");
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"k0150").unwrap().as_deref(), Some(&b"r1"[..]));
    assert_eq!(db.get(b"k0299").unwrap().as_deref(), Some(&b"r2"[..]));
    assert_eq!(db.get(b"k0050").unwrap(), None, "the first table's keys went with it");
    assert_eq!(db.get(b"in-wal").unwrap().as_deref(), Some(&b"yes"[..]));
}
