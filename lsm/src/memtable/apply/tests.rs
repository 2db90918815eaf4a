//! Applying batches and commit groups, checked against a sorted model.

use std::sync::Arc;

use bytes::Bytes;

use super::APPLY_WINDOW;
use crate::iter::InternalIterator;
use crate::key;
use crate::memtable::{Lookup, Memtable};
use crate::WriteBatch;

/// Batches of every shape through `apply` and, split into several batches (a commit group's,
/// some of them empty), through `apply_all`, with and without the point index: new keys
/// scattered over a large list (searched for together), runs of keys next to each other
/// (linked at the writer's splice), keys written again (found through the index), a key
/// repeated inside one window, keys too long to be searched for ahead, deletions, and range
/// deletions among them (each takes its sequence number; the list holds point versions only).
/// Every internal key is where a sorted model puts it, and every key reads back its newest
/// version.
#[test]
fn batches_of_every_shape_apply_like_a_sorted_model() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for indexed in [true, false] {
        let m = Arc::new(if indexed { Memtable::with_capacity(1, 16 << 20) } else { Memtable::new(1) });
        // user key -> (seq, value; None: deleted), and every point version written.
        let mut latest: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        let mut versions = 0;
        let mut seq = 1u64;
        for round in 0..600u64 {
            let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            let n = rng.random_range(1..=3 * APPLY_WINDOW);
            let start = rng.random_range(0..1_000_000u64);
            for i in 0..n as u64 {
                let key = match round % 5 {
                    0 => format!("k{:07}", start + i).into_bytes(),
                    1 => format!("k{:07}", rng.random_range(0..1_000_000)).into_bytes(),
                    2 => format!("k{:07}", rng.random_range(0..40)).into_bytes(),
                    3 => format!("k{:07}{}", rng.random_range(0..1_000_000), "long".repeat(20)).into_bytes(),
                    _ => match latest.keys().nth(rng.random_range(0..latest.len().max(1))) {
                        Some(k) => k.clone(),
                        None => b"k".to_vec(),
                    },
                };
                let value = (i % 7 != 3).then(|| format!("v{round}.{i}").into_bytes());
                writes.push((key, value));
            }
            // A range deletion in the middle of some batches takes a sequence number and
            // leaves the list alone (range tombstones are kept apart).
            let ranged = (round % 7 == 6).then(|| rng.random_range(0..writes.len()));
            // Odd rounds split their updates into a group of batches, numbered on from each
            // other, with an empty batch here and there.
            let split = round % 2 == 1;
            let (mut batches, mut batch, mut next_seq) = (Vec::new(), WriteBatch::new(), seq);
            batch.set_sequence(seq);
            for (i, (key, value)) in writes.iter().enumerate() {
                if split && i > 0 && rng.random_range(0..3) == 0 {
                    batches.push(std::mem::take(&mut batch));
                    if rng.random_range(0..4) == 0 {
                        batches.push(WriteBatch::new());
                    }
                    batch.set_sequence(next_seq);
                }
                if ranged == Some(i) {
                    batch.delete_range("k0500000", "k0500100");
                    next_seq += 1;
                }
                match value {
                    Some(v) => batch.put(key, v),
                    None => batch.delete(key),
                };
                next_seq += 1;
            }
            batches.push(batch);
            if split {
                m.apply_all(&batches).unwrap();
            } else {
                m.apply(&batches[0]).unwrap();
            }
            for (i, (key, value)) in writes.into_iter().enumerate() {
                if ranged == Some(i) {
                    seq += 1;
                }
                latest.insert(key, (seq, value));
                versions += 1;
                seq += 1;
            }
        }
        assert_eq!(m.len(), versions, "indexed: {indexed}");
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut last: Option<Vec<u8>> = None;
        let mut newest: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        while it.valid() {
            let k = it.key().to_vec();
            assert!(last.as_deref().is_none_or(|l| key::compare(l, &k).is_lt()), "internal keys ascend");
            let p = key::parse(&k).unwrap();
            let e = newest.entry(p.user_key.to_vec()).or_insert(p.seq);
            *e = (*e).max(p.seq);
            last = Some(k);
            it.next().unwrap();
        }
        assert_eq!(newest.len(), latest.len());
        for (k, (s, v)) in &latest {
            assert_eq!(newest.get(k), Some(s), "newest version of {k:?}");
            let want = match v {
                Some(v) => Lookup::Found(Bytes::from(v.clone()), *s),
                None => Lookup::Deleted(*s),
            };
            assert_eq!(m.get(k, u64::MAX), Some(want), "indexed: {indexed}");
        }
    }
}
