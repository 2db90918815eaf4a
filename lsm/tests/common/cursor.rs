//! Walking a cursor against a `BTreeMap` model of what it should see.

use std::collections::BTreeMap;
use std::ops::Bound;

use lsm::{Db, ReadOptions};

/// One positioning call on a cursor.
#[derive(Debug, Clone)]
pub enum Step {
    First,
    Last,
    Seek(Vec<u8>),
    SeekForPrev(Vec<u8>),
    Next,
    Prev,
}

/// A cursor (with `lower..upper` bounds when given) walked through `steps` must stop where the
/// model says, with the model's value.
pub fn check_walk(
    db: &Db,
    opts: &ReadOptions,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    bounds: Option<(Vec<u8>, Vec<u8>)>,
    steps: &[Step],
) {
    let mut it = db.iter(opts);
    let model: BTreeMap<Vec<u8>, Vec<u8>> = match &bounds {
        Some((lo, hi)) => model
            .range::<Vec<u8>, _>((Bound::Included(lo), Bound::Excluded(hi)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        None => model.clone(),
    };
    if let Some((lo, hi)) = bounds {
        it.set_bounds(Bound::Included(lo), Bound::Excluded(hi));
    }
    let mut pos: Option<Vec<u8>> = None;
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::First => {
                it.seek_to_first().unwrap();
                pos = model.keys().next().cloned();
            }
            Step::Last => {
                it.seek_to_last().unwrap();
                pos = model.keys().next_back().cloned();
            }
            Step::Seek(k) => {
                it.seek(k).unwrap();
                pos = model.range(k.clone()..).next().map(|(k, _)| k.clone());
            }
            Step::SeekForPrev(k) => {
                it.seek_for_prev(k).unwrap();
                pos = model.range(..=k.clone()).next_back().map(|(k, _)| k.clone());
            }
            Step::Next => {
                it.next().unwrap();
                if let Some(p) = &pos {
                    pos = model
                        .range::<Vec<u8>, _>((Bound::Excluded(p), Bound::Unbounded))
                        .next()
                        .map(|(k, _)| k.clone());
                }
            }
            Step::Prev => {
                it.prev().unwrap();
                if let Some(p) = &pos {
                    pos = model.range(..p.clone()).next_back().map(|(k, _)| k.clone());
                }
            }
        }
        assert_eq!(it.valid(), pos.is_some(), "after step {i} {s:?} of {steps:?}");
        if let Some(p) = &pos {
            assert_eq!(it.key(), p.as_slice(), "after step {i} {s:?} of {steps:?}");
            assert_eq!(it.value(), model[p].as_slice(), "value after step {i} {s:?}");
        }
    }
}
