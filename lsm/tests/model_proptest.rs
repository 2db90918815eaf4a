//! Model-based test: random operations against the engine and against a `BTreeMap`, with small
//! memtables and level targets so flushes and compactions (background and manual) happen while
//! snapshots are held, cursors in both directions and reopens. Every read must agree with the
//! model.
//!
//! `PROPTEST_CASES` scales the number of cases (default 48).

use std::collections::BTreeMap;

use common::cursor::{check_walk, Step};
use lsm::{Db, Options, ReadOptions, Snapshot, WriteBatch, WriteOptions};
use proptest::prelude::*;

mod common;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Get(Vec<u8>),
    MultiGet(Vec<Vec<u8>>),
    MultiGetSnapshot(usize, Vec<Vec<u8>>),
    Scan { reverse: bool },
    Range(Vec<u8>, Vec<u8>, bool),
    Cursor(Vec<Step>),
    TakeSnapshot,
    ReadSnapshot(usize, Vec<u8>),
    ScanSnapshot(usize),
    Flush,
    Compact(Option<(Vec<u8>, Vec<u8>)>),
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0u8..40).prop_map(|i| format!("k{i:02}").into_bytes()),
        1 => Just(Vec::new()),
        1 => proptest::collection::vec(any::<u8>(), 1..4),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => (0usize..3000).prop_map(|n| vec![b'x'; n]),
    ]
}

fn cursor_op() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => Just(Step::First),
        1 => Just(Step::Last),
        2 => key().prop_map(Step::Seek),
        2 => key().prop_map(Step::SeekForPrev),
        4 => Just(Step::Next),
        4 => Just(Step::Prev),
        1 => (key(), key()).prop_map(|(a, b)| Step::Range(a.clone().min(b.clone()), a.max(b))),
    ]
}

/// Ranges in key order read with one cursor, stepping forward through each (sometimes
/// backward too): the walk whose later seeks move only the sources behind them.
fn ranges_walk() -> impl Strategy<Value = Vec<Step>> {
    (proptest::collection::vec(key(), 2..12), proptest::collection::vec(0usize..6, 6), any::<bool>()).prop_map(
        |(mut keys, nexts, with_prev)| {
            keys.sort();
            let mut steps = Vec::new();
            for (i, pair) in keys.chunks_exact(2).enumerate() {
                steps.push(Step::Range(pair[0].clone(), pair[1].clone()));
                steps.extend(std::iter::repeat_n(Step::Next, nexts[i % nexts.len()]));
                if with_prev && i == 1 {
                    steps.push(Step::Prev);
                }
            }
            steps
        },
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        6 => key().prop_map(Op::Delete),
        2 => (key(), key()).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        4 => proptest::collection::vec((key(), proptest::option::of(value())), 0..8).prop_map(Op::Batch),
        8 => key().prop_map(Op::Get),
        3 => proptest::collection::vec(key(), 0..10).prop_map(Op::MultiGet),
        2 => (any::<usize>(), proptest::collection::vec(key(), 0..10)).prop_map(|(i, ks)| Op::MultiGetSnapshot(i, ks)),
        2 => any::<bool>().prop_map(|reverse| Op::Scan { reverse }),
        2 => (key(), key(), any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
        4 => proptest::collection::vec(cursor_op(), 1..12).prop_map(Op::Cursor),
        2 => ranges_walk().prop_map(Op::Cursor),
        2 => Just(Op::TakeSnapshot),
        3 => (any::<usize>(), key()).prop_map(|(i, k)| Op::ReadSnapshot(i, k)),
        1 => any::<usize>().prop_map(Op::ScanSnapshot),
        1 => Just(Op::Flush),
        1 => proptest::option::of((key(), key())).prop_map(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn options() -> Options {
    // Tiny memtables, tables and level targets: flushes, L0 compactions and deep levels all
    // happen within a few hundred operations.
    Options::default()
        .write_buffer_size(8 << 10)
        .block_size(256)
        .block_restart_interval(4)
        .level0_file_num_compaction_trigger(2)
        .max_bytes_for_level_base(16 << 10)
        .max_bytes_for_level_multiplier(3)
        .target_file_size_base(4 << 10)
        // A row cache small enough to evict: point reads of tables go through it.
        .row_cache_size(16 << 10)
}

fn scan(db: &Db, opts: &ReadOptions, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let r = db.range_with::<&[u8], _>(.., opts);
    let kv = |x: lsm::Result<(lsm::Bytes, lsm::Bytes)>| {
        let (k, v) = x.unwrap();
        (k.to_vec(), v.to_vec())
    };
    if reverse {
        r.rev().map(kv).collect()
    } else {
        r.map(kv).collect()
    }
}

fn model_scan(m: &Model, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let v: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if reverse {
        v.into_iter().rev().collect()
    } else {
        v
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), options()).unwrap();
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            Op::Delete(k) => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            Op::DeleteRange(a, b) => {
                db.delete_range(&a, &b).unwrap();
                let doomed: Vec<Vec<u8>> =
                    model.range(a.clone()..).take_while(|(k, _)| **k < b).map(|(k, _)| k.clone()).collect();
                for k in doomed {
                    model.remove(&k);
                }
            }
            Op::Batch(entries) => {
                let mut b = WriteBatch::new();
                for (k, v) in entries {
                    match v {
                        Some(v) => {
                            b.put(&k, &v);
                            model.insert(k, v);
                        }
                        None => {
                            b.delete(&k);
                            model.remove(&k);
                        }
                    }
                }
                db.write(b, &WriteOptions::default()).unwrap();
            }
            Op::Get(k) => assert_eq!(db.get(&k).unwrap().map(|b| b.to_vec()), model.get(&k).cloned(), "get {k:?}"),
            Op::MultiGet(keys) => {
                // A hint: whatever the sources hold, it changes no answer.
                db.prefetch_gets(&keys.iter().map(Vec::as_slice).collect::<Vec<_>>());
                let got: Vec<_> = db
                    .multi_get(&keys, &ReadOptions::new())
                    .unwrap()
                    .into_iter()
                    .map(|v| v.map(|b| b.to_vec()))
                    .collect();
                let want: Vec<_> = keys.iter().map(|k| model.get(k).cloned()).collect();
                assert_eq!(got, want, "multi_get {keys:?}");
            }
            Op::MultiGetSnapshot(i, keys) => {
                if let Some((s, m)) = (!snaps.is_empty()).then(|| &snaps[i % snaps.len()]) {
                    let got: Vec<_> = db
                        .multi_get(&keys, &ReadOptions::new().snapshot(s))
                        .unwrap()
                        .into_iter()
                        .map(|v| v.map(|b| b.to_vec()))
                        .collect();
                    let want: Vec<_> = keys.iter().map(|k| m.get(k).cloned()).collect();
                    assert_eq!(got, want, "snapshot multi_get {keys:?}");
                }
            }
            Op::Scan { reverse } => {
                assert_eq!(scan(&db, &ReadOptions::default(), reverse), model_scan(&model, reverse))
            }
            Op::Range(a, b, reverse) => {
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let got: Vec<Vec<u8>> = if reverse {
                    db.range(lo.clone()..hi.clone()).rev().map(|kv| kv.unwrap().0.to_vec()).collect()
                } else {
                    db.range(lo.clone()..hi.clone()).map(|kv| kv.unwrap().0.to_vec()).collect()
                };
                let mut want: Vec<Vec<u8>> = model.range(lo..hi).map(|(k, _)| k.clone()).collect();
                if reverse {
                    want.reverse();
                }
                assert_eq!(got, want);
            }
            Op::Cursor(ops) => check_walk(&db, &ReadOptions::default(), &model, None, &ops),
            Op::TakeSnapshot => snaps.push((db.snapshot(), model.clone())),
            Op::ReadSnapshot(i, k) => {
                if let Some((s, m)) = (!snaps.is_empty()).then(|| &snaps[i % snaps.len()]) {
                    let got = db.get_with(&k, &ReadOptions::new().snapshot(s)).unwrap();
                    assert_eq!(got.map(|b| b.to_vec()), m.get(&k).cloned(), "snapshot read {k:?}");
                }
            }
            Op::ScanSnapshot(i) => {
                if let Some((s, m)) = (!snaps.is_empty()).then(|| &snaps[i % snaps.len()]) {
                    assert_eq!(scan(&db, &ReadOptions::new().snapshot(s), i % 2 == 0), model_scan(m, i % 2 == 0));
                }
            }
            Op::Flush => db.flush().unwrap(),
            Op::Compact(range) => match range {
                Some((a, b)) => db.compact_range(a.clone().min(b.clone())..=a.max(b)).unwrap(),
                None => db.compact_range::<&[u8], _>(..).unwrap(),
            },
            Op::Reopen => {
                snaps.clear();
                drop(db);
                db = Db::open(dir.path(), options()).unwrap();
            }
        }
    }
    assert_eq!(scan(&db, &ReadOptions::default(), false), model_scan(&model, false));
    snaps.clear();
    drop(db);
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(scan(&db, &ReadOptions::default(), true), model_scan(&model, true), "after final reopen");
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_btreemap_model(ops in proptest::collection::vec(op(), 1..300)) {
        run(ops);
    }
}
