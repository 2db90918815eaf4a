use super::*;

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
