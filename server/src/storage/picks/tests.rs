use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::storage::{ExecContext, KeyType, Storage};

/// A storage whose pick seed is fixed, holding a set of `n` members `m0…`.
fn set_of(dir: &std::path::Path, n: usize) -> (Storage, ExecContext, Meta) {
    let db = lsm::Db::open(dir, lsm::Options::default()).unwrap();
    db.put(super::super::LAYOUT_KEY, super::super::layout_record(super::super::LAYOUT_VERSION, 42)).unwrap();
    let s = Storage::new(db).unwrap();
    let cx = ExecContext::new();
    let meta = {
        let v = s.view(&cx, 0);
        let mut b = lsm::WriteBatch::new();
        let mut meta = v.create(&mut b, b"s", KeyType::Set);
        for i in 0..n {
            v.add_member(&mut b, meta.uid, format!("m{i}").as_bytes(), b"");
        }
        meta.body = Header { count: n as u64, ..Header::default() }.body(KeyType::Set);
        v.put_meta(&mut b, b"s", &meta);
        s.write(&cx, b).unwrap();
        meta
    };
    (s, cx, meta)
}

fn index(m: &[u8]) -> usize {
    std::str::from_utf8(&m[1..]).unwrap().parse().unwrap()
}

/// Pearson's chi-square of `counts` against a uniform expectation.
fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts.iter().map(|&c| (c as f64 - expected).powi(2) / expected).sum()
}

/// The chi-square value no uniform sampler exceeds but with probability ~1e-6
/// (k - 1 degrees of freedom: mean k - 1, standard deviation sqrt(2(k - 1))).
fn limit(k: usize) -> f64 {
    let dof = (k - 1) as f64;
    dof + 5.0 * (2.0 * dof).sqrt()
}

#[test]
fn single_picks_are_uniform_over_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1000;
    let (s, cx, meta) = set_of(dir.path(), n);
    let v = s.view(&cx, 0);
    let mut rng = StdRng::seed_from_u64(7);
    let mut counts = vec![0u64; n];
    for _ in 0..100_000 {
        counts[index(&v.sampler(&meta).pick(&mut rng).unwrap().unwrap())] += 1;
    }
    let chi = chi_square(&counts);
    assert!(chi < limit(n), "chi-square {chi:.0} over {} for single picks", limit(n));
    assert!(counts.iter().all(|&c| c > 0), "every member is picked");
}

#[test]
fn counted_picks_are_uniform_distinct_or_repeated_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2000;
    let (s, cx, meta) = set_of(dir.path(), n);
    let v = s.view(&cx, 0);
    let mut rng = StdRng::seed_from_u64(11);
    // 20 of 2000: bucket picks with repeats rejected.
    let mut counts = vec![0u64; n];
    for _ in 0..5000 {
        let picks = v.sampler(&meta).distinct(20, &mut rng).unwrap();
        let distinct: HashSet<_> = picks.iter().collect();
        assert_eq!((picks.len(), distinct.len()), (20, 20));
        for m in picks {
            counts[index(&m)] += 1;
        }
    }
    assert!(chi_square(&counts) < limit(n), "distinct picks: chi-square {:.0}", chi_square(&counts));
    // Repeats allowed: bucket picks, and reading everything for a large count.
    for count in [20, 5000] {
        let mut counts = vec![0u64; n];
        for _ in 0..(100_000 / count) {
            let picks = v.sampler(&meta).with_repeats(count, &mut rng).unwrap();
            assert_eq!(picks.len(), count);
            for m in picks {
                counts[index(&m)] += 1;
            }
        }
        assert!(chi_square(&counts) < limit(n), "repeated picks of {count}: chi-square {:.0}", chi_square(&counts));
    }
    // More than the set holds: all of it, once each.
    let all = v.sampler(&meta).distinct(n + 5, &mut rng).unwrap();
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), n);
}

#[test]
fn picks_inside_a_transaction_see_its_buffered_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (s, cx, meta) = set_of(dir.path(), 2000);
    cx.begin_transaction();
    let v = s.view(&cx, 0);
    let mut b = lsm::WriteBatch::new();
    for i in 0..1000 {
        v.remove_member(&mut b, meta.uid, format!("m{i}").as_bytes());
    }
    for i in 2000..2100 {
        v.add_member(&mut b, meta.uid, format!("m{i}").as_bytes(), b"");
    }
    s.write(&cx, b).unwrap();
    assert!(cx.in_transaction(), "the writes are buffered, not committed");
    let meta = Meta { body: Header { count: 1100, ..Header::default() }.body(KeyType::Set), ..meta };
    let live: HashSet<usize> = (1000..2100).collect();
    let mut added = 0;
    for _ in 0..500 {
        let i = index(&v.random_member(b"s", &meta, false).unwrap().unwrap());
        assert!(live.contains(&i), "picked m{i}, which the transaction removed");
        added += usize::from(i >= 2000);
    }
    assert!(added > 0, "members the transaction added are picked too");
    let all: HashSet<usize> = v.random_distinct(b"s", &meta, 5000, false).unwrap().iter().map(|m| index(m)).collect();
    assert_eq!(all, live);
    cx.finish_transaction();
}

#[test]
fn small_sets_and_empty_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (s, cx, meta) = set_of(dir.path(), 10);
    let v = s.view(&cx, 0);
    let mut rng = StdRng::seed_from_u64(3);
    let mut counts = vec![0u64; 10];
    for _ in 0..20_000 {
        counts[index(&v.sampler(&meta).pick(&mut rng).unwrap().unwrap())] += 1;
    }
    assert!(chi_square(&counts) < limit(10));
    let empty = Meta { uid: meta.uid + 1000, ..meta.clone() };
    let empty = Meta { body: Header::default().body(KeyType::Set), ..empty };
    assert_eq!(v.sampler(&empty).pick(&mut rng).unwrap(), None);
    assert!(v.sampler(&empty).with_repeats(5, &mut rng).unwrap().is_empty());
}

/// What SPOP writes for `popped`: the pick record deletes and the new count.
fn write_pop(s: &Storage, cx: &ExecContext, meta: &mut Meta, popped: &[Bytes]) {
    let v = s.view(cx, 0);
    let mut b = lsm::WriteBatch::new();
    for m in popped {
        v.remove_member(&mut b, meta.uid, m);
    }
    let count = Header::of(meta).count - popped.len() as u64;
    meta.body = Header { count, ..Header::default() }.body(KeyType::Set);
    v.put_meta(&mut b, b"s", meta);
    s.write(cx, b).unwrap();
}

#[test]
fn picks_from_the_cache_are_uniform_once_picks_paid_for_reading_the_set() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1000;
    let (s, cx, meta) = set_of(dir.path(), n);
    let v = s.view(&cx, 0);
    let mut rng = StdRng::seed_from_u64(17);
    // n / 8 rounds pay for a reading; a pick takes about four.
    for _ in 0..100 {
        v.random_member_with(b"s", &meta, false, &mut rng).unwrap().unwrap();
    }
    assert!(s.pick_cache_bytes() > 0, "read in after ~{} rounds", n / 8);
    let mut counts = vec![0u64; n];
    for _ in 0..100_000 {
        counts[index(&v.random_member_with(b"s", &meta, false, &mut rng).unwrap().unwrap())] += 1;
    }
    assert!(chi_square(&counts) < limit(n), "cached picks: chi-square {:.0}", chi_square(&counts));
    let mut counts = vec![0u64; n];
    for _ in 0..5000 {
        let picks = v.random_distinct_with(b"s", &meta, 20, false, &mut rng).unwrap();
        assert_eq!(picks.iter().collect::<HashSet<_>>().len(), 20);
        for m in picks {
            counts[index(&m)] += 1;
        }
    }
    assert!(chi_square(&counts) < limit(n), "cached distinct picks: chi-square {:.0}", chi_square(&counts));
    let repeats = v.random_with_repeats_with(b"s", &meta, 3000, false, &mut rng).unwrap();
    assert_eq!(repeats.len(), 3000);
}

#[test]
fn pops_drain_a_set_exactly_through_the_cache_and_other_writes_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2000;
    let (s, cx, mut meta) = set_of(dir.path(), n);
    let mut left: HashSet<usize> = (0..n).collect();
    let mut added = false;
    let mut from_cache = 0;
    while !left.is_empty() {
        let v = s.view(&cx, 0);
        let cached_before = s.pick_cache_bytes() > 0;
        let popped = v.pop_random(b"s", &meta, Some(3)).unwrap();
        from_cache += usize::from(cached_before && s.pick_cache_bytes() > 0);
        assert_eq!(popped.len(), 3.min(left.len()));
        for m in &popped {
            assert!(left.remove(&index(m)), "m{} popped twice, or never a member", index(m));
        }
        write_pop(&s, &cx, &mut meta, &popped);
        if left.len() < 1000 && !added {
            // Another command adds a member: the cache drops the set, and the new member is
            // popped like the others.
            added = true;
            let v = s.view(&cx, 0);
            let mut b = lsm::WriteBatch::new();
            v.add_member(&mut b, meta.uid, b"m5000", b"");
            let count = Header::of(&meta).count + 1;
            meta.body = Header { count, ..Header::default() }.body(KeyType::Set);
            v.put_meta(&mut b, b"s", &meta);
            s.write(&cx, b).unwrap();
            assert_eq!(s.pick_cache_bytes(), 0, "a write of the set's pick records drops it");
            left.insert(5000);
        }
    }
    assert!(added);
    assert!(from_cache > 300, "most pops came from the cache ({from_cache})");
}

#[test]
fn a_transaction_sees_its_own_writes_over_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (s, cx, mut meta) = set_of(dir.path(), 500);
    let v = s.view(&cx, 0);
    let mut rng = StdRng::seed_from_u64(23);
    while s.pick_cache_bytes() == 0 {
        v.random_member_with(b"s", &meta, true, &mut rng).unwrap();
    }
    // In a transaction: a pop (from the cache), then a removal and an addition of its own.
    cx.begin_transaction();
    let popped = v.pop_random(b"s", &meta, None).unwrap();
    write_pop(&s, &cx, &mut meta, &popped);
    let gone = (0..500).map(|i| Bytes::from(format!("m{i}"))).find(|m| *m != popped[0]).unwrap();
    let mut b = lsm::WriteBatch::new();
    v.remove_member(&mut b, meta.uid, &gone);
    v.add_member(&mut b, meta.uid, b"m900", b"");
    s.write(&cx, b).unwrap();
    assert_eq!(s.pick_cache_bytes(), 0, "buffering other writes of the set drops it");
    let seen: HashSet<Bytes> =
        v.random_distinct_with(b"s", &meta, 1000, false, &mut rng).unwrap().into_iter().collect();
    assert_eq!(seen.len(), 499);
    assert!(seen.contains(&Bytes::from("m900")) && !seen.contains(&gone) && !seen.contains(&popped[0]));
    for _ in 0..200 {
        let m = v.pop_random(b"s", &meta, None).unwrap();
        assert!(m[0] != gone && m[0] != popped[0], "popped {:?}, which the transaction removed", m[0]);
        // Not written: every pop sees the same state.
    }
    s.commit(cx.finish_transaction()).unwrap();
    assert_eq!(s.pick_cache_bytes(), 0, "the commit wrote more than the pop");
}

/// The test above has the power to catch a biased sampler: "the member after a random
/// point of the hash ring" favours members after wide gaps, and fails it by far.
#[test]
fn the_chi_square_check_catches_a_gap_biased_sampler() {
    let n = 1000;
    let mut ring: Vec<u64> = (0..n).map(|i| member_hash(42, format!("m{i}").as_bytes())).collect();
    ring.sort_unstable();
    let mut rng = StdRng::seed_from_u64(5);
    let mut counts = vec![0u64; n];
    for _ in 0..100_000 {
        let point: u64 = rng.random();
        let i = ring.partition_point(|&h| h < point) % n;
        counts[i] += 1;
    }
    assert!(chi_square(&counts) > 10.0 * limit(n), "chi-square {:.0}", chi_square(&counts));
}
