//! Keys with many versions: a cursor seeks past a key's run of old (or, for a snapshot, too
//! new) versions instead of stepping over each one, so a range read costs the same however
//! often its keys were overwritten since the last flush — and still returns exactly what a
//! `BTreeMap` model holds, at the latest sequence number and at every snapshot, in both
//! directions and with bounds.
//!
//! `PROPTEST_CASES` scales the number of model cases (default 64).

use std::collections::BTreeMap;

use common::cursor::{check_walk, Step};
use lsm::{Db, Options, ReadOptions, Snapshot};
use proptest::prelude::*;

mod common;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// A cursor's bounds (`lower..upper`) when it has some, and the steps it takes.
type Walk = (Option<(Vec<u8>, Vec<u8>)>, Vec<Step>);

/// Five keys, so runs of versions are long.
fn key() -> impl Strategy<Value = Vec<u8>> {
    (0u8..5).prop_map(|i| vec![b'k', b'0' + i])
}

#[derive(Debug, Clone)]
enum Op {
    /// A key, a number and how many bytes of padding follow it (large values count as more
    /// steps).
    Put(Vec<u8>, u16, usize),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
    Snapshot,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (key(), any::<u16>(), prop_oneof![4 => Just(0usize), 1 => 0usize..3000]).prop_map(|(k, v, n)| Op::Put(k, v, n)),
        6 => key().prop_map(Op::Delete),
        1 => (key(), key()).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        3 => Just(Op::Snapshot),
        1 => Just(Op::Flush),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => Just(Step::First),
        1 => Just(Step::Last),
        1 => key().prop_map(Step::Seek),
        1 => key().prop_map(Step::SeekForPrev),
        3 => Just(Step::Next),
        3 => Just(Step::Prev),
        1 => (key(), key()).prop_map(|(a, b)| Step::Range(a.clone().min(b.clone()), a.max(b))),
    ]
}

fn scan(db: &Db, opts: &ReadOptions, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let r = db.range_with::<&[u8], _>(.., opts);
    let kv = |x: lsm::Result<(lsm::Bytes, lsm::Bytes)>| x.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap();
    if reverse {
        r.rev().map(kv).collect()
    } else {
        r.map(kv).collect()
    }
}

fn run(ops: Vec<Op>, walks: Vec<Walk>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().write_buffer_size(1 << 20)).unwrap();
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Put(k, v, padding) => {
                let mut v = v.to_be_bytes().to_vec();
                v.resize(2 + padding, b'.');
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            Op::Delete(k) => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            Op::DeleteRange(a, b) => {
                db.delete_range(&a, &b).unwrap();
                model.retain(|k, _| !(k >= &a && k < &b));
            }
            Op::Snapshot => snaps.push((db.snapshot(), model.clone())),
            Op::Flush => db.flush().unwrap(),
        }
    }
    let latest = (ReadOptions::default(), model);
    let views =
        std::iter::once((latest.0, &latest.1)).chain(snaps.iter().map(|(s, m)| (ReadOptions::new().snapshot(s), m)));
    for (opts, m) in views {
        let forward: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(scan(&db, &opts, false), forward);
        assert_eq!(scan(&db, &opts, true), forward.iter().rev().cloned().collect::<Vec<_>>());
        for (bounds, steps) in &walks {
            check_walk(&db, &opts, m, bounds.clone(), steps);
        }
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn cursors_over_keys_with_many_versions_agree_with_the_model(
        ops in proptest::collection::vec(op(), 1..400),
        walks in proptest::collection::vec(
            (proptest::option::of((key(), key()).prop_map(|(a, b)| if a <= b { (a, b) } else { (b, a) })), proptest::collection::vec(step(), 1..16)),
            1..4,
        ),
    ) {
        run(ops, walks);
    }
}

/// Entries examined and seeks past old versions while `f` reads.
fn cost(db: &Db, f: impl FnOnce()) -> (u64, u64) {
    let before = db.stats();
    f();
    let after = db.stats();
    (after.iter_entries - before.iter_entries, after.iter_reseeks - before.iter_reseeks)
}

#[test]
fn a_range_read_past_a_key_overwritten_thousands_of_times_costs_a_seek() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"a", b"first").unwrap();
    for i in 0..10_000u32 {
        db.put(b"hot", i.to_be_bytes()).unwrap();
    }
    db.put(b"z", b"last").unwrap();
    let all = |reverse| scan(&db, &ReadOptions::default(), reverse);
    let (entries, reseeks) = cost(&db, || {
        assert_eq!(all(false).iter().map(|(k, _)| k.as_slice()).collect::<Vec<_>>(), [&b"a"[..], b"hot", b"z"]);
    });
    assert!(entries < 40 && reseeks >= 1, "forward: {entries} entries examined, {reseeks} seeks");
    let (entries, reseeks) = cost(&db, || {
        let back = all(true);
        assert_eq!(back[1], (b"hot".to_vec(), 9_999u32.to_be_bytes().to_vec()), "the newest version, walking back");
    });
    assert!(entries < 40 && reseeks >= 1, "backward: {entries} entries examined, {reseeks} seeks");
}

#[test]
fn a_snapshot_reader_seeks_past_versions_written_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for k in [&b"a"[..], b"hot", b"z"] {
        db.put(k, b"old").unwrap();
    }
    let snap = db.snapshot();
    for i in 0..10_000u32 {
        db.put(b"hot", i.to_be_bytes()).unwrap();
    }
    let opts = ReadOptions::new().snapshot(&snap);
    for reverse in [false, true] {
        let (entries, reseeks) = cost(&db, || {
            let got = scan(&db, &opts, reverse);
            assert_eq!(got.len(), 3);
            assert!(got.iter().all(|(_, v)| v == b"old"), "the snapshot's versions only: {got:?}");
        });
        assert!(entries < 40 && reseeks >= 1, "reverse {reverse}: {entries} entries examined, {reseeks} seeks");
    }
    // Stepping back from the hot key onto the one before it passes the newer versions too.
    let mut it = db.iter(&opts);
    it.seek(b"hot").unwrap();
    let (_, reseeks) = cost(&db, || {
        it.prev().unwrap();
        assert_eq!(it.key(), b"a");
        drop(it);
    });
    assert!(reseeks >= 1, "prev past newer versions seeks");
}

#[test]
fn a_key_deleted_after_many_versions_stays_deleted_in_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..100u32 {
        db.put(b"b", i.to_be_bytes()).unwrap();
        db.put(b"c", i.to_be_bytes()).unwrap();
    }
    db.delete(b"b").unwrap();
    db.put(b"a", b"1").unwrap();
    db.put(b"d", b"2").unwrap();
    let want = vec![
        (b"a".to_vec(), b"1".to_vec()),
        (b"c".to_vec(), 99u32.to_be_bytes().to_vec()),
        (b"d".to_vec(), b"2".to_vec()),
    ];
    assert_eq!(scan(&db, &ReadOptions::default(), false), want);
    assert_eq!(scan(&db, &ReadOptions::default(), true), want.into_iter().rev().collect::<Vec<_>>());
}

#[test]
fn seeking_past_old_versions_leaves_tables_past_the_target_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    // A table of keys after the hot ones, then 200 keys of 20 versions each in the memtable.
    for i in 0..1000u32 {
        db.put(format!("z{i:04}"), b"cold").unwrap();
    }
    db.flush().unwrap();
    for v in 0..20u32 {
        for k in 0..200u32 {
            db.put(format!("h{k:03}"), v.to_be_bytes()).unwrap();
        }
    }
    let before = db.stats();
    let hot: Vec<_> = db.range_with(&b"h"[..]..&b"i"[..], &ReadOptions::default()).map(|r| r.unwrap()).collect();
    let after = db.stats();
    assert_eq!(hot.len(), 200);
    assert!(hot.iter().all(|(_, v)| v.as_ref() == 19u32.to_be_bytes()), "newest versions");
    let reseeks = after.iter_reseeks - before.iter_reseeks;
    let blocks =
        (after.block_cache_hits + after.block_cache_misses) - (before.block_cache_hits + before.block_cache_misses);
    assert!(reseeks >= 200, "a seek past each hot key's old versions: {reseeks}");
    assert!(blocks < 10, "the table past the hot keys is not sought again at each of them: {blocks} block reads");
}
