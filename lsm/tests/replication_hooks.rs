//! The hooks replication stands on: `updates_since` (WAL tailing, waiting, `WalGone`),
//! `write_replicated`, WAL retention and `checkpoint` (full sync = checkpoint + tail).

use std::time::Duration;

use lsm::{Db, Error, Options, WriteBatch, WriteOptions};

fn batch(i: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put(format!("key{i:06}"), format!("value{i}"));
    if i.is_multiple_of(5) {
        b.delete(format!("key{:06}", i / 2));
    }
    if i.is_multiple_of(17) {
        b.delete_range(format!("key{:06}", i / 3), format!("key{:06}", i / 3 + 2));
    }
    b
}

fn retaining() -> Options {
    Options::default().write_buffer_size(16 << 10).wal_size_limit(64 << 20)
}

fn contents(db: &Db) -> Vec<(lsm::Bytes, lsm::Bytes)> {
    db.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect()
}

#[test]
fn updates_since_returns_exact_batches_across_wal_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), retaining()).unwrap();
    let mut written = Vec::new();
    for i in 1..=2000u64 {
        let b = batch(i);
        written.push(b.clone());
        db.write(b, &WriteOptions::default()).unwrap();
    }
    assert!(db.stats().flushes > 3, "several WAL files were filled and flushed");
    let mut tail = db.updates_since(1).unwrap();
    let mut expected_seq = 1;
    for (i, want) in written.iter().enumerate() {
        let (seq, got) = tail.try_next().unwrap().unwrap_or_else(|| panic!("batch {i} missing"));
        assert_eq!(seq, expected_seq, "batch {i}");
        let got_entries: Vec<_> = got.iter().map(|e| e.unwrap()).collect();
        let want_entries: Vec<_> = want.iter().map(|e| e.unwrap()).collect();
        assert_eq!(got_entries, want_entries, "batch {i}");
        expected_seq += u64::from(got.len());
    }
    assert!(tail.try_next().unwrap().is_none());
    assert_eq!(tail.next_sequence(), db.latest_sequence() + 1);
    // Starting in the middle of a batch returns that batch.
    let mid = written[..10].iter().map(|b| u64::from(b.len())).sum::<u64>() + 1;
    let mut tail = db.updates_since(mid + 1).unwrap();
    let (seq, _) = tail.try_next().unwrap().unwrap();
    assert!(seq <= mid + 1 && seq >= mid - 2, "batch containing {} starts at {seq}", mid + 1);
}

#[test]
fn the_tail_waits_for_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), retaining()).unwrap();
    db.put(b"first", b"1").unwrap();
    let mut tail = db.updates_since(2).unwrap();
    assert!(tail.next_timeout(Duration::from_millis(50)).unwrap().is_none(), "nothing yet");
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in 0..200u64 {
                std::thread::sleep(Duration::from_micros(200));
                db.write(batch(i), &WriteOptions::default()).unwrap();
            }
        })
    };
    let mut got = 0;
    let mut next = 2;
    while got < 200 {
        let (seq, b) = tail.next_timeout(Duration::from_secs(10)).unwrap().expect("a batch within 10 s");
        assert_eq!(seq, next);
        next += u64::from(b.len());
        got += 1;
    }
    writer.join().unwrap();
}

#[test]
fn wal_gone_without_retention_or_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap(); // the WAL holding sequence 1 is deleted
    db.put(b"b", b"2").unwrap();
    assert!(matches!(db.updates_since(1), Err(Error::WalGone(1))));
    let (seq, _) = db.updates_since(2).unwrap().try_next().unwrap().unwrap();
    assert_eq!(seq, 2);
    drop(db);

    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().write_buffer_size(16 << 10).wal_size_limit(40 << 10)).unwrap();
    for i in 1..=3000u64 {
        db.write(batch(i), &WriteOptions::default()).unwrap();
    }
    db.flush().unwrap();
    assert!(matches!(db.updates_since(1), Err(Error::WalGone(1))), "the size limit dropped the oldest WALs");
    let mut wals: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    wals.sort();
    wals.pop(); // the live WAL (preallocated) is not retention's business
    let retained: u64 = wals.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert!(retained <= 40 << 10, "retained {retained} bytes of flushed WALs");
    assert!(!wals.is_empty(), "some flushed WALs are kept");
    let recent = db.latest_sequence() - 20;
    assert!(db.updates_since(recent).unwrap().try_next().unwrap().is_some());
}

#[test]
fn wal_ttl_expires_old_wals() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().wal_ttl(Duration::from_millis(100))).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    assert!(db.updates_since(1).is_ok(), "kept within the TTL");
    std::thread::sleep(Duration::from_millis(1500)); // the everysec thread purges
    assert!(matches!(db.updates_since(1), Err(Error::WalGone(1))));
}

#[test]
fn a_replica_from_checkpoint_and_tail_matches_the_primary() {
    let dir = tempfile::tempdir().unwrap();
    let primary = Db::open(dir.path().join("primary"), retaining()).unwrap();
    for i in 1..=1500u64 {
        primary.write(batch(i), &WriteOptions::default()).unwrap();
    }
    let at = primary.latest_sequence();
    let cp_dir = dir.path().join("checkpoint");
    let cp_seq = primary.checkpoint(&cp_dir).unwrap();
    assert_eq!(cp_seq, at);
    assert!(matches!(primary.checkpoint(&cp_dir), Err(Error::InvalidArgument(_))), "target must be new");
    let frozen = contents(&primary);
    for i in 1501..=3000u64 {
        primary.write(batch(i), &WriteOptions::default()).unwrap();
    }
    // The checkpoint opens on its own and holds exactly the state at its sequence.
    let replica = Db::open(&cp_dir, Options::default()).unwrap();
    assert_eq!(replica.latest_sequence(), cp_seq);
    assert_eq!(contents(&replica), frozen);
    // Full sync: apply the primary's WAL from the checkpoint on.
    let mut tail = primary.updates_since(cp_seq + 1).unwrap();
    while let Some((seq, b)) = tail.try_next().unwrap() {
        replica.write_replicated(seq, b).unwrap();
    }
    assert_eq!(replica.latest_sequence(), primary.latest_sequence());
    assert_eq!(contents(&replica), contents(&primary));
    // Out-of-order replication is refused without harming the replica.
    let err = replica.write_replicated(5, batch(1)).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    replica.put(b"still", b"writable").unwrap();
    drop(replica);
    let replica = Db::open(&cp_dir, Options::default()).unwrap();
    assert_eq!(replica.latest_sequence(), primary.latest_sequence() + 1);
}

#[test]
fn install_checkpoint_replaces_a_diverged_database_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let primary = Db::open(dir.path().join("primary"), retaining()).unwrap();
    for i in 1..=1200u64 {
        primary.write(batch(i), &WriteOptions::default()).unwrap();
    }
    let cp_dir = dir.path().join("checkpoint");
    let cp_seq = primary.checkpoint(&cp_dir).unwrap();
    let frozen = contents(&primary);
    for i in 1201..=1500u64 {
        primary.write(batch(i), &WriteOptions::default()).unwrap();
    }
    // A replica with a history of its own: more writes (higher sequences), tables and WALs.
    let replica_dir = dir.path().join("replica");
    let replica = Db::open(&replica_dir, retaining()).unwrap();
    for i in 1..=2500u64 {
        replica.put(format!("mine{i:05}"), vec![b'x'; 100]).unwrap();
    }
    assert!(replica.latest_sequence() > cp_seq);
    let old_iter = replica.range::<&[u8], _>(..);
    assert_eq!(replica.install_checkpoint(&cp_dir).unwrap(), cp_seq);
    assert_eq!(replica.latest_sequence(), cp_seq);
    assert_eq!(contents(&replica), frozen, "exactly the checkpoint's data");
    assert_eq!(old_iter.count(), 2500, "an iterator opened before still sees the old contents");
    assert!(matches!(replica.updates_since(1), Err(Error::WalGone(_))), "the old history is never shipped");
    assert_eq!(replica.oldest_wal_sequence().unwrap(), None, "no WAL holds a write yet");
    // The primary's tail applies on top, and all of it survives a reopen.
    let mut tail = primary.updates_since(cp_seq + 1).unwrap();
    while let Some((seq, b)) = tail.try_next().unwrap() {
        replica.write_replicated(seq, b).unwrap();
    }
    assert_eq!(contents(&replica), contents(&primary));
    assert_eq!(replica.oldest_wal_sequence().unwrap(), Some(cp_seq + 1), "the backlog starts after the checkpoint");
    drop(replica);
    let replica = Db::open(&replica_dir, retaining()).unwrap();
    assert_eq!(replica.latest_sequence(), primary.latest_sequence());
    assert_eq!(contents(&replica), contents(&primary));
    // It keeps working as a database: writes, flushes and compaction over the installed tables.
    let mut tail = primary.updates_since(primary.latest_sequence() + 1).unwrap();
    for i in 1501..=3000u64 {
        primary.write(batch(i), &WriteOptions::default()).unwrap();
        let (seq, b) = tail.try_next().unwrap().unwrap();
        replica.write_replicated(seq, b).unwrap();
    }
    replica.compact_range::<&[u8], _>(..).unwrap();
    assert_eq!(contents(&replica), contents(&primary));
    assert!(cp_dir.join("CURRENT").exists(), "the source is left as it was");
}

#[test]
fn rewind_drops_exactly_the_writes_after_a_sequence_while_they_are_not_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options::default().write_buffer_size(32 << 10).disable_auto_compactions(true);
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 1..=600u64 {
        db.write(batch(i), &WriteOptions::default()).unwrap();
    }
    let at = db.latest_sequence();
    let then = contents(&db);
    // Later writes overwrite, delete and range-delete earlier keys, some flushed to L0.
    for i in 1..=600u64 {
        let mut b = batch(i);
        b.put(format!("key{:06}", i / 2), "rewritten");
        db.write(b, &WriteOptions::default()).unwrap();
    }
    db.delete_range("key000100", "key000200").unwrap();
    db.flush().unwrap();
    db.put("in-the-memtable", "x").unwrap();
    assert_ne!(contents(&db), then);
    db.rewind_to(at).unwrap();
    assert_eq!(db.latest_sequence(), at);
    assert_eq!(contents(&db), then, "exactly the state at the sequence");
    assert!(matches!(db.updates_since(at + 1).unwrap().try_next(), Ok(None)), "nothing after it is shipped");
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!((db.latest_sequence(), contents(&db)), (at, then.clone()), "and it stays so after a reopen");
    // It goes on from there.
    db.write_replicated(at + 1, batch(9999)).unwrap();
    // Once the later writes are compacted below L0, a rewind is refused and changes nothing.
    let before = contents(&db);
    db.compact_range::<&[u8], _>(..).unwrap();
    let err = db.rewind_to(at).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(contents(&db), before);
    assert_eq!(db.latest_sequence(), at + batch(9999).len() as u64);
}
