//! Sequence numbers: a replicated batch that would go backwards or pass the largest sequence
//! number is refused before anything is written, and the database stays writable.

use lsm::{Db, Error, Options, WriteBatch};

#[test]
fn replicated_batches_out_of_range_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let mut b = WriteBatch::new();
    b.put(b"a", b"1");
    db.write_replicated(100, b).unwrap();
    // Backwards.
    let mut b = WriteBatch::new();
    b.put(b"back", b"x");
    assert!(matches!(db.write_replicated(50, b), Err(Error::InvalidArgument(_))));
    // Past the largest sequence number (2^56 - 1).
    let max = lsm::key::MAX_SEQUENCE;
    let mut b = WriteBatch::new();
    b.put(b"x", b"1").put(b"y", b"2").put(b"z", b"3");
    assert!(matches!(db.write_replicated(max - 1, b), Err(Error::InvalidArgument(_))));
    // Still writable, and nothing of the refused batches exists, now or after a restart.
    db.put(b"after", b"ok").unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for k in [&b"back"[..], b"x", b"y", b"z"] {
        assert_eq!(db.get(k).unwrap(), None);
    }
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"ok"[..]));
    assert_eq!(db.latest_sequence(), 101);
    // The last possible sequence number itself is fine.
    let mut b = WriteBatch::new();
    b.put(b"last", b"1");
    db.write_replicated(max, b).unwrap();
    assert_eq!(db.get(b"last").unwrap().as_deref(), Some(&b"1"[..]));
}
