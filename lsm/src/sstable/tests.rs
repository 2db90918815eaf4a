use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::iter::InternalIterator;
use crate::key::{self, make_internal_key, ValueKind};
use crate::memtable::Lookup;
use crate::options::Compression;

fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let kind = if i % 7 == 3 { ValueKind::Delete } else { ValueKind::Put };
            let v = if kind == ValueKind::Put {
                format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes()
            } else {
                Vec::new()
            };
            (make_internal_key(format!("k{:06}", i * 3).as_bytes(), 1000 + i as u64, kind), v)
        })
        .collect()
}

fn build(es: &[(Vec<u8>, Vec<u8>)], compression: Compression, block_size: usize) -> Arc<Table> {
    build_with(es, compression, block_size, true)
}

/// [`build`], with or without the data blocks' hash index.
fn build_with(es: &[(Vec<u8>, Vec<u8>)], compression: Compression, block_size: usize, hash_index: bool) -> Arc<Table> {
    let opts = TableOptions {
        block_size,
        restart_interval: 16,
        compression,
        zstd_level: 3,
        bloom_bits_per_key: 10,
        hash_index,
        faults: None,
    };
    let mut b = TableBuilder::new(Vec::new(), opts).unwrap();
    for (k, v) in es {
        b.add(k, v).unwrap();
    }
    let (bytes, props, size) = b.finish().unwrap();
    assert_eq!(size as usize, bytes.len());
    assert_eq!(props.num_entries as usize, es.len());
    Table::from_bytes(Bytes::from(bytes), Path::new("mem.sst")).unwrap()
}

fn codecs() -> Vec<Compression> {
    [Compression::None, Compression::Snappy, Compression::Zstd].into_iter().filter(|c| c.is_available()).collect()
}

#[test]
fn scan_both_ways_and_point_lookups() {
    let es = entries(3000);
    for (c, hash_index) in codecs().into_iter().flat_map(|c| [(c, true), (c, false)]) {
        for block_size in [64, 4096] {
            let t = build_with(&es, c, block_size, hash_index);
            let p = t.properties();
            assert_eq!(p.smallest_key, es[0].0);
            assert_eq!(p.largest_key, es.last().unwrap().0);
            assert_eq!(
                p.num_deletions as usize,
                es.iter().filter(|(k, _)| key::parse(k).unwrap().kind == ValueKind::Delete).count()
            );
            let mut it = t.iter();
            it.seek_to_first().unwrap();
            for (k, v) in &es {
                assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
                it.next().unwrap();
            }
            assert!(!it.valid());
            it.seek_to_last().unwrap();
            for (k, _) in es.iter().rev() {
                assert_eq!(it.key(), &k[..]);
                it.prev().unwrap();
            }
            assert!(!it.valid());
            for (i, (k, v)) in es.iter().enumerate() {
                let pk = key::parse(k).unwrap();
                let h = bloom::hash_key(pk.user_key);
                let got = t.get(pk.user_key, u64::MAX >> 8, h).unwrap();
                let want = if pk.kind == ValueKind::Put {
                    Some(Lookup::Found(Bytes::from(v.clone()), pk.seq))
                } else {
                    Some(Lookup::Deleted(pk.seq))
                };
                assert_eq!(got, want, "{c:?} {hash_index} entry {i}");
                // Not visible to a snapshot older than the write.
                assert_eq!(t.get(pk.user_key, pk.seq - 1, h).unwrap(), None);
                // Absent keys in the gaps.
                let missing = format!("k{:06}", i * 3 + 1);
                assert_eq!(
                    t.get(missing.as_bytes(), u64::MAX >> 8, bloom::hash_key(missing.as_bytes())).unwrap(),
                    None
                );
            }
        }
    }
}

#[test]
fn point_lookups_find_versions_split_across_blocks() {
    // Each key has versions 2, 4, …, 60 (a delete every fifth), newest first; blocks of 64
    // bytes hold a few entries, so a key's versions span blocks and a lookup's target often
    // falls between a block's last entry and its separator.
    let mut es = Vec::new();
    for k in 0..12 {
        for seq in (1..=30u64).rev().map(|s| 2 * s) {
            let kind = if seq % 10 == 0 { ValueKind::Delete } else { ValueKind::Put };
            let v = if kind == ValueKind::Put { format!("{k}@{seq}").into_bytes() } else { Vec::new() };
            es.push((make_internal_key(format!("key{k:02}").as_bytes(), seq, kind), v));
        }
    }
    for (c, hash_index) in codecs().into_iter().flat_map(|c| [(c, true), (c, false)]) {
        for block_size in [64, 200, 4096] {
            let t = build_with(&es, c, block_size, hash_index);
            for k in 0..13 {
                let user = format!("key{k:02}");
                let h = bloom::hash_key(user.as_bytes());
                for seq in 0..=62 {
                    let want = es
                        .iter()
                        .map(|(ik, v)| (key::parse(ik).unwrap(), v))
                        .find(|(p, _)| p.user_key == user.as_bytes() && p.seq <= seq)
                        .map(|(p, v)| match p.kind {
                            ValueKind::Put => Lookup::Found(Bytes::from(v.clone()), p.seq),
                            _ => Lookup::Deleted(p.seq),
                        });
                    assert_eq!(
                        t.get(user.as_bytes(), seq, h).unwrap(),
                        want,
                        "{c:?} {hash_index} {block_size} {user}@{seq}"
                    );
                }
            }
        }
    }
}

#[test]
fn seek_and_seek_for_prev_between_blocks() {
    let es = entries(500);
    let t = build(&es, Compression::None, 128);
    let mut it = t.iter();
    for i in 0..500 * 3 + 2 {
        let target = key::seek_key(format!("k{i:06}").as_bytes(), u64::MAX >> 8);
        it.seek(&target).unwrap();
        let want_fwd = es.iter().find(|(k, _)| key::compare(k, &target).is_ge());
        assert_eq!(it.valid().then(|| it.key().to_vec()), want_fwd.map(|e| e.0.clone()), "seek {i}");
        it.seek_for_prev(&target).unwrap();
        let want_back = es.iter().rev().find(|(k, _)| key::compare(k, &target).is_le());
        assert_eq!(it.valid().then(|| it.key().to_vec()), want_back.map(|e| e.0.clone()), "seek_for_prev {i}");
    }
}

#[test]
fn seeks_from_a_positioned_cursor_land_where_a_fresh_cursor_does() {
    // One cursor seeking ahead (within its block, to a later block, past the end), back, and
    // stepping between seeks: each seek may reuse the block it holds, and must land where a
    // new cursor's seek lands.
    let es = entries(400);
    let t = build(&es, Compression::None, 256);
    let mut it = t.iter();
    let mut i: u64 = 0;
    for round in 0..600u64 {
        i = match round % 7 {
            0 => i + 1,
            1 => i + 2,
            2 => i.saturating_sub(5),
            3 => i + 40,
            4 => (i * 7919) % 1300,
            _ => i + 3,
        };
        let target = key::seek_key(format!("k{i:06}").as_bytes(), u64::MAX >> 8);
        it.seek(&target).unwrap();
        let mut fresh = t.iter();
        fresh.seek(&target).unwrap();
        assert_eq!(it.valid(), fresh.valid(), "seek {i} (round {round})");
        if fresh.valid() {
            assert_eq!((it.key(), it.value()), (fresh.key(), fresh.value()), "seek {i} (round {round})");
            if round % 3 == 0 {
                it.next().unwrap();
            }
        }
    }
}

#[test]
fn keys_out_of_order_are_rejected() {
    let mut b = TableBuilder::new(Vec::new(), TableOptions::default()).unwrap();
    b.add(&make_internal_key(b"b", 1, ValueKind::Put), b"").unwrap();
    assert!(b.add(&make_internal_key(b"a", 1, ValueKind::Put), b"").is_err());
    assert!(b.add(b"short", b"").is_err());
}

#[test]
fn empty_table_is_valid() {
    let t = build(&[], Compression::None, 4096);
    let mut it = t.iter();
    it.seek_to_first().unwrap();
    assert!(!it.valid());
    assert_eq!(t.get(b"x", 5, bloom::hash_key(b"x")).unwrap(), None);
}

#[test]
fn flipped_byte_in_a_data_block_is_reported_as_corruption() {
    let es = entries(2000);
    for c in codecs() {
        let t = build(&es, c, 4096);
        let mut bytes = t.data_for_test().to_vec();
        bytes[20] ^= 0x01; // inside the first data block
        let bad = Table::from_bytes(Bytes::from(bytes), Path::new("bad.sst")).unwrap();
        let first = key::parse(&es[0].0).unwrap();
        let err = bad.get(first.user_key, u64::MAX >> 8, bloom::hash_key(first.user_key)).unwrap_err();
        match err {
            crate::Error::Corruption { file, offset, .. } => {
                assert_eq!(file, Path::new("bad.sst"));
                assert_eq!(offset, 0);
            }
            other => panic!("expected corruption, got {other}"),
        }
        let mut it = bad.iter();
        assert!(it.seek_to_first().is_err());
        assert!(!it.valid());
        // Keys in other blocks are still readable.
        let last = key::parse(&es[1999].0).unwrap();
        assert!(bad.get(last.user_key, u64::MAX >> 8, bloom::hash_key(last.user_key)).unwrap().is_some());
    }
}

#[test]
fn damaged_metadata_fails_open_without_panicking() {
    let t = build(&entries(300), Compression::None, 256);
    let good = t.data_for_test().to_vec();
    let n = good.len();
    // Every byte of the index, meta-index, properties, filter and footer region.
    for i in n.saturating_sub(2500)..n {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        match Table::from_bytes(Bytes::from(bad), Path::new("x.sst")) {
            Err(e) => assert!(e.is_corruption(), "byte {i}: {e}"),
            Ok(t) => {
                // A flip in a data block opens fine; reading it must fail or return good data.
                let mut it = t.iter();
                let _ = it.seek_to_first();
            }
        }
    }
    for cut in [0, 10, 47, n / 2, n - 1] {
        assert!(Table::from_bytes(Bytes::from(good[..cut].to_vec()), Path::new("x.sst")).is_err());
    }
}

#[test]
fn range_tombstones_round_trip_and_widen_the_key_range() {
    use crate::range_del::RangeTombstone;
    let mut b = TableBuilder::new(Vec::new(), TableOptions::default()).unwrap();
    b.add(&make_internal_key(b"m", 5, ValueKind::Put), b"v").unwrap();
    b.add_range_tombstone(RangeTombstone { start: b"c".to_vec(), end: b"f".to_vec(), seq: 9 });
    b.add_range_tombstone(RangeTombstone { start: b"k".to_vec(), end: b"z".to_vec(), seq: 3 });
    let (bytes, props, _) = b.finish().unwrap();
    assert_eq!(props.num_range_deletions, 2);
    assert_eq!(key::user_key(&props.smallest_key), b"c");
    assert_eq!(key::user_key(&props.largest_key), b"z");
    assert_eq!((props.smallest_seq, props.largest_seq), (3, 9));
    let t = Table::from_bytes(Bytes::from(bytes), Path::new("rd.sst")).unwrap();
    assert_eq!(t.range_tombstones().len(), 2);
    assert_eq!(t.max_covering_tombstone(b"d", 100), Some(9));
    assert_eq!(t.max_covering_tombstone(b"d", 8), None);
    assert_eq!(t.max_covering_tombstone(b"m", 100), Some(3));
    assert_eq!(t.max_covering_tombstone(b"z", 100), None);
    // A table of tombstones only is valid too.
    let mut b = TableBuilder::new(Vec::new(), TableOptions::default()).unwrap();
    b.add_range_tombstone(RangeTombstone { start: b"a".to_vec(), end: b"b".to_vec(), seq: 1 });
    let (bytes, props, _) = b.finish().unwrap();
    assert_eq!((props.num_entries, props.num_range_deletions), (0, 1));
    let t = Table::from_bytes(Bytes::from(bytes), Path::new("rd.sst")).unwrap();
    let mut it = t.iter();
    it.seek_to_first().unwrap();
    assert!(!it.valid());
    assert_eq!(t.max_covering_tombstone(b"a", 5), Some(1));
}

#[test]
fn blocks_are_cut_before_they_pass_the_block_size() {
    // 116-byte entries: a block cut only after passing 4096 bytes would end up to an entry
    // past it, one allocator size class up once read back.
    let es: Vec<_> = (0..5000u32)
        .map(|i| (make_internal_key(format!("key{i:013}").as_bytes(), 1, ValueKind::Put), vec![b'v'; 100]))
        .collect();
    let t = build(&es, Compression::None, 4096);
    let sizes = t.block_sizes_for_test();
    assert!(sizes.len() > 100);
    assert!(sizes.iter().all(|&s| s <= 4096), "{:?}", sizes.iter().max());
    // ...and still nearly full.
    let full = sizes[..sizes.len() - 1].iter().filter(|&&s| s * 10 >= 4096 * 9).count();
    assert_eq!(full, sizes.len() - 1);
    // A single entry larger than the block still gets a block of its own.
    let big = vec![(make_internal_key(b"a", 1, ValueKind::Put), vec![b'x'; 10_000])];
    assert!(build(&big, Compression::None, 4096).block_sizes_for_test()[0] > 10_000);
}

/// A table whose builder knew how many keys to expect: the same entries and answers as one
/// built from collected hashes, a filter of about the same size (folded down when far fewer keys
/// came than expected), and `filter_is_full` once the expected number arrived.
#[test]
fn a_filter_sized_in_advance_answers_as_one_built_from_hashes() {
    let es = entries(5000);
    let hashed = build(&es, Compression::None, 4096);
    for expected in [5000, 5001, 60_000] {
        let mut b = TableBuilder::new(Vec::new(), TableOptions::default()).unwrap();
        b.expect_keys(expected);
        for (i, (k, v)) in es.iter().enumerate() {
            assert_eq!(b.filter_is_full(), i >= expected, "after {i} keys");
            b.add(k, v).unwrap();
        }
        assert_eq!(b.filter_is_full(), es.len() >= expected);
        let (bytes, _, _) = b.finish().unwrap();
        let t = Table::from_bytes(Bytes::from(bytes), Path::new("sized.sst")).unwrap();
        let (sized, plain) = (t.filter_len_for_test(), hashed.filter_len_for_test());
        assert!(sized >= plain && sized < 2 * plain, "expecting {expected}: filter {sized} bytes, from hashes {plain}");
        for (i, (k, _)) in es.iter().enumerate() {
            let user = key::user_key(k);
            let h = bloom::hash_key(user);
            assert!(t.may_contain(h), "key {i} passes the filter");
            assert_eq!(t.get(user, u64::MAX >> 8, h).unwrap(), hashed.get(user, u64::MAX >> 8, h).unwrap(), "key {i}");
        }
        let absent = (0..3000).filter(|i| t.may_contain(bloom::hash_key(format!("absent{i}").as_bytes()))).count();
        assert!(absent < 3000 / 40, "{absent} of 3000 absent keys pass");
    }
    // An absurd count (a damaged estimate) allocates nothing up front.
    let mut b = TableBuilder::new(Vec::new(), TableOptions::default()).unwrap();
    b.expect_keys(usize::MAX);
    assert!(!b.filter_is_full());
    b.add(&es[0].0, &es[0].1).unwrap();
    let (bytes, _, _) = b.finish().unwrap();
    let t = Table::from_bytes(Bytes::from(bytes), Path::new("absurd.sst")).unwrap();
    assert_eq!(t.filter_len_for_test(), 64 + 5, "one key, one line");
}
