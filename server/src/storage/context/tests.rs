use super::*;
use std::collections::BTreeMap;

#[test]
fn a_transaction_reads_its_own_writes_and_reset_drops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    db.put(b"a", b"engine").unwrap();
    db.put(b"c", b"engine").unwrap();
    let cx = ExecContext::new();
    cx.begin_transaction();
    let mut b = lsm::WriteBatch::new();
    b.put(b"a", b"txn").put(b"b", b"txn").delete(b"c");
    assert!(cx.buffer(b).is_none(), "buffered, not handed back");
    assert_eq!(cx.get(&db, b"a").unwrap().as_deref(), Some(&b"txn"[..]));
    assert_eq!(cx.get(&db, b"c").unwrap(), None);
    let keys: Vec<Bytes> = cx.range(&db, Bound::Unbounded, Bound::Unbounded).map(|kv| kv.unwrap().0).collect();
    assert_eq!(keys, vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"engine"[..]), "nothing reached the engine");
    cx.hold(&[3, 5]);
    assert!(!cx.is_clear());
    cx.reset();
    assert!(cx.is_clear());
    assert_eq!(cx.get(&db, b"a").unwrap().as_deref(), Some(&b"engine"[..]));
}

/// The buffered batch, entry by entry: (kind, key, value).
fn buffered_entries(cx: &ExecContext) -> Vec<(ValueKind, Vec<u8>, Vec<u8>)> {
    cx.with_buffered(|b| b.iter().map(|e| e.map(|e| (e.kind, e.key.to_vec(), e.value.to_vec())).unwrap()).collect())
        .unwrap()
}

proptest::proptest! {
    /// Commands (batches of puts, deletes and range deletions over a few keys) buffered one
    /// after another, each after a savepoint, some rolled back: the buffer is always what
    /// it was at the savepoint, as if the rolled-back command never ran.
    #[test]
    fn a_rollback_leaves_the_buffer_as_it_was_at_its_savepoint(
        commands in proptest::collection::vec(
            (proptest::collection::vec((0u8..3, 0u8..6, 0u8..6), 1..5), proptest::bool::ANY),
            1..20,
        )
    ) {
        let cx = ExecContext::new();
        cx.begin_transaction();
        for (writes, undo) in commands {
            let before = buffered_entries(&cx);
            let savepoint = cx.savepoint();
            let mut b = lsm::WriteBatch::new();
            for (op, k, e) in writes {
                let key = [b'k', k];
                match op {
                    0 => { b.put(key, [k, e]); }
                    1 => { b.delete(key); }
                    _ => { b.delete_range(key, [b'k', k.max(e)]); }
                }
            }
            assert!(cx.buffer(b).is_none());
            if undo {
                cx.rollback(savepoint);
                proptest::prop_assert_eq!(buffered_entries(&cx), before);
            }
        }
    }
}

#[test]
fn a_snapshot_hides_later_writes_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    db.put(b"k", b"1").unwrap();
    let cx = ExecContext::new();
    assert!(cx.begin_snapshot(&db));
    db.put(b"k", b"2").unwrap();
    assert_eq!(cx.get(&db, b"k").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(!cx.begin_snapshot(&db), "one snapshot at a time");
    cx.end_snapshot();
    assert!(cx.is_clear());
    assert_eq!(cx.get(&db, b"k").unwrap().as_deref(), Some(&b"2"[..]));
}

/// Lazy merging from both ends agrees with a model of engine + buffer, whatever the
/// order of `next` and `next_back` calls.
#[test]
fn merged_ranges_and_the_committed_buffer_match_a_model() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for round in 0..200 {
        let dir = tempfile::tempdir().unwrap();
        let engine = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
        let key = |i: u32| format!("k{i:03}").into_bytes();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for _ in 0..rng.random_range(0..40) {
            let k = key(rng.random_range(0..60));
            engine.put(&k, b"engine").unwrap();
            model.insert(k, b"engine".to_vec());
        }
        let cx = ExecContext::new();
        cx.begin_transaction();
        for step in 0..rng.random_range(0..30) {
            let mut b = lsm::WriteBatch::new();
            match rng.random_range(0..10) {
                0 => {
                    let (a, z) = (rng.random_range(0..60), rng.random_range(0..60));
                    let (a, z) = (a.min(z), a.max(z));
                    b.delete_range(key(a), key(z));
                    model.retain(|k, _| !(k >= &key(a) && k < &key(z)));
                }
                1..=4 => {
                    let k = key(rng.random_range(0..60));
                    b.delete(&k);
                    model.remove(&k);
                }
                _ => {
                    let (k, v) = (key(rng.random_range(0..60)), format!("buffer{step}").into_bytes());
                    b.put(&k, &v);
                    model.insert(k, v);
                }
            }
            assert!(cx.buffer(b).is_none());
        }
        let (lo, hi) = (rng.random_range(0..30), rng.random_range(30..61));
        let mut expect: std::collections::VecDeque<(Vec<u8>, Vec<u8>)> =
            model.range(key(lo)..key(hi)).map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut range = cx.range(&engine, Bound::Included(key(lo)), Bound::Excluded(key(hi)));
        loop {
            let from_front = rng.random_bool(0.5);
            let got = if from_front { range.next() } else { range.next_back() };
            let want = if from_front { expect.pop_front() } else { expect.pop_back() };
            let got = got.map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap());
            assert_eq!(got, want, "round {round}");
            if want.is_none() {
                break;
            }
        }
        drop(range);
        // Committed, the buffer leaves the engine as the model says, writing each key once.
        let batch = cx.finish_transaction();
        let mut keys: Vec<Vec<u8>> = batch
            .iter()
            .map(|e| e.unwrap())
            .filter(|e| e.kind != lsm::key::ValueKind::RangeDelete)
            .map(|e| e.key.to_vec())
            .collect();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "round {round}: a key written twice");
        engine.write(batch, &lsm::WriteOptions::default()).unwrap();
        let stored: BTreeMap<Vec<u8>, Vec<u8>> =
            engine.range::<Vec<u8>, _>(..).map(|kv| kv.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(stored, model, "round {round}");
    }
}

/// Whether `range` goes on from a parked engine range.
fn resumed(range: &RawRange<'_>) -> bool {
    matches!(&range.source, RangeSource::Merged(m) if m.resumed)
}

#[test]
fn pops_through_parked_ranges_match_a_model_whatever_the_buffer_and_rollbacks_do() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let key = |i: u32| format!("k{i:03}").into_bytes();
    let mut resumes = 0;
    for round in 0..300 {
        let dir = tempfile::tempdir().unwrap();
        let engine = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for i in 0..rng.random_range(0..80) {
            let k = key(rng.random_range(0..100));
            engine.put(&k, b"engine").unwrap();
            model.insert(k, b"engine".to_vec());
            if i == 40 {
                engine.flush().unwrap();
            }
        }
        let cx = ExecContext::new();
        cx.begin_transaction();
        // The live bounds a pop moves (as a sorted set's metadata does).
        let (mut lo, mut hi) =
            (Bound::Included(key(rng.random_range(0..20))), Bound::Excluded(key(rng.random_range(80..101))));
        let mut epoch = 0;
        for step in 0..rng.random_range(0..60) {
            match rng.random_range(0..20) {
                // Another write in the transaction, anywhere (also before what was popped).
                0..=2 => {
                    let k = key(rng.random_range(0..100));
                    let mut b = lsm::WriteBatch::new();
                    if rng.random_bool(0.5) {
                        b.put(&k, format!("buffer{step}"));
                        model.insert(k, format!("buffer{step}").into_bytes());
                    } else {
                        b.delete(&k);
                        model.remove(&k);
                    }
                    assert!(cx.buffer(b).is_none());
                }
                // The bounds move by other means (a range removal, a rollback of the metadata).
                3 => lo = Bound::Included(key(rng.random_range(0..50))),
                4 => epoch += 1,
                // A pop from the front or the back, kept or rolled back.
                _ => {
                    let front = rng.random_bool(0.7);
                    let in_range =
                        |k: &Vec<u8>| std::ops::RangeBounds::<Vec<u8>>::contains(&(lo.as_ref(), hi.as_ref()), k);
                    let want = if front {
                        model.iter().find(|(k, _)| in_range(k))
                    } else {
                        model.iter().rev().find(|(k, _)| in_range(k))
                    }
                    .map(|(k, v)| (k.clone(), v.clone()));
                    let savepoint = cx.savepoint();
                    let mut range = cx.resuming_range(&engine, lo.clone(), hi.clone(), epoch);
                    resumes += usize::from(resumed(&range));
                    let got = if front { range.next() } else { range.next_back() };
                    drop(range);
                    let got = got.map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap());
                    assert_eq!(got, want, "round {round} step {step}");
                    let Some((k, _)) = got else { continue };
                    let mut b = lsm::WriteBatch::new();
                    b.delete(&k);
                    assert!(cx.buffer(b).is_none());
                    if rng.random_range(0..8) == 0 {
                        // Thrown away: the entry and the old bounds are back.
                        cx.rollback(savepoint);
                    } else {
                        model.remove(&k);
                        if front {
                            lo = Bound::Excluded(k);
                        } else {
                            hi = Bound::Excluded(k);
                        }
                    }
                }
            }
        }
    }
    assert!(resumes > 1000, "pops went on from parked ranges {resumes} times");
}

#[test]
fn a_range_is_parked_only_inside_a_transaction_and_taken_up_only_where_it_stood() {
    let dir = tempfile::tempdir().unwrap();
    let engine = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    for k in ["a", "b", "c", "d"] {
        engine.put(k, b"").unwrap();
    }
    let (lo, hi) = (|k: &str| Bound::Included(k.as_bytes().to_vec()), Bound::Excluded(b"z".to_vec()));
    let cx = ExecContext::new();
    let mut r = cx.resuming_range(&engine, lo("a"), hi.clone(), 0);
    assert_eq!(&r.next().unwrap().unwrap().0[..], b"a");
    drop(r);
    cx.begin_transaction();
    let mut r = cx.resuming_range(&engine, lo("a"), hi.clone(), 0);
    assert!(!resumed(&r), "nothing was parked outside the transaction");
    assert_eq!(&r.next().unwrap().unwrap().0[..], b"a");
    drop(r);
    // Asked again from the same start, it would step over `a`: a fresh range.
    let mut r = cx.resuming_range(&engine, lo("a"), hi.clone(), 0);
    assert!(!resumed(&r));
    r.next().unwrap().unwrap();
    drop(r);
    // From past `a` it goes on, and skips what lies before the start asked for.
    let mut r = cx.resuming_range(&engine, lo("c"), hi.clone(), 0);
    assert!(resumed(&r));
    assert_eq!(&r.next().unwrap().unwrap().0[..], b"c");
    drop(r);
    // Read from the other end, it stops at the start asked for too.
    let mut r = cx.resuming_range(&engine, lo("a"), hi.clone(), 0);
    assert_eq!(&r.next().unwrap().unwrap().0[..], b"a");
    drop(r);
    let r = cx.resuming_range(&engine, lo("c"), hi.clone(), 0);
    assert!(resumed(&r));
    let back: Vec<Bytes> = r.rev().map(|kv| kv.unwrap().0).collect();
    assert_eq!(back, [Bytes::from_static(b"d"), Bytes::from_static(b"c")]);
    // Another end bound, another epoch or another mode: fresh.
    assert!(!resumed(&cx.resuming_range(&engine, lo("d"), Bound::Excluded(b"y".to_vec()), 0)));
    let mut r = cx.resuming_range(&engine, lo("c"), hi.clone(), 0);
    r.next().unwrap().unwrap();
    drop(r);
    assert!(!resumed(&cx.resuming_range(&engine, lo("d"), hi.clone(), 1)));
    let mut r = cx.resuming_range(&engine, lo("c"), hi.clone(), 0);
    r.next().unwrap().unwrap();
    drop(r);
    cx.begin_memory_only();
    assert!(!resumed(&cx.resuming_range(&engine, lo("d"), hi.clone(), 0)));
    // Read from both ends: not parked.
    let mut r = cx.resuming_range(&engine, lo("a"), hi.clone(), 0);
    r.next().unwrap().unwrap();
    r.next_back().unwrap().unwrap();
    drop(r);
    assert!(cx.txn.borrow().as_ref().unwrap().parked.is_none());
}
