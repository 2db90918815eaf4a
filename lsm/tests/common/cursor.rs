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
    /// New bounds `lo..hi`, then a seek to `lo`: a read of many ranges with one cursor, as a
    /// GEOSEARCH's cells or a sorted set's score spans are read (ranges in key order let the
    /// cursor keep the sources it need not move).
    Range(Vec<u8>, Vec<u8>),
}

/// A cursor (with `lower..upper` bounds when given) walked through `steps` must stop where the
/// model says, with the model's value.
pub fn check_walk(
    db: &Db,
    opts: &ReadOptions,
    full: &BTreeMap<Vec<u8>, Vec<u8>>,
    bounds: Option<(Vec<u8>, Vec<u8>)>,
    steps: &[Step],
) {
    let mut it = db.iter(opts);
    let within = |bounds: &Option<(Vec<u8>, Vec<u8>)>| -> BTreeMap<Vec<u8>, Vec<u8>> {
        match bounds {
            Some((lo, hi)) if lo <= hi => full
                .range::<Vec<u8>, _>((Bound::Included(lo), Bound::Excluded(hi)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Some(_) => BTreeMap::new(),
            None => full.clone(),
        }
    };
    let mut model = within(&bounds);
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
            Step::Range(lo, hi) => {
                it.set_bounds(Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
                it.seek(lo).unwrap();
                model = within(&Some((lo.clone(), hi.clone())));
                pos = model.keys().next().cloned();
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
