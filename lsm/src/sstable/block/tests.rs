//! Tests of data and index blocks: round trips, seeks, the hash index, damaged bytes.

use super::*;
use crate::key::{make_internal_key, ValueKind};
use crate::sstable::bloom::hash_key;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn build(n: usize, interval: usize) -> (Block, Entries) {
    build_with(n, interval, true)
}

/// A block of `n` entries `key00000`, `key00002`, …, with or without a hash index.
fn build_with(n: usize, interval: usize, hashed: bool) -> (Block, Entries) {
    let mut b = if hashed { BlockBuilder::with_hash_index(interval) } else { BlockBuilder::new(interval) };
    let entries: Vec<_> = (0..n)
        .map(|i| {
            (
                make_internal_key(format!("key{:05}", i * 2).as_bytes(), 1, ValueKind::Put),
                format!("value{i}").into_bytes(),
            )
        })
        .collect();
    for (k, v) in &entries {
        b.add_hashed(k, v, hash_key(key::user_key(k)));
    }
    let origin = BlockOrigin { file: Arc::from(Path::new("test.sst")), offset: 0 };
    (Block::new(Bytes::from(b.finish()), origin).unwrap(), entries)
}

#[test]
fn a_recycled_buffer_builds_the_next_block_from_nothing_old() {
    let mut b = BlockBuilder::new(4);
    for i in 0..100 {
        b.add(&make_internal_key(format!("a{i:03}").as_bytes(), 1, ValueKind::Put), b"first");
    }
    let first = b.finish();
    let (ptr, cap) = (first.as_ptr(), first.capacity());
    b.recycle(first);
    let only = make_internal_key(b"b", 1, ValueKind::Put);
    b.add(&only, b"second");
    let second = b.finish();
    assert_eq!((second.as_ptr(), second.capacity()), (ptr, cap), "the same buffer, reused");
    let origin = BlockOrigin { file: Arc::from(Path::new("test.sst")), offset: 0 };
    let block = Block::new(Bytes::from(second), origin).unwrap();
    let mut it = block.iter();
    it.seek_to_first().unwrap();
    assert!(it.valid());
    assert_eq!((it.key(), it.value()), (&only[..], &b"second"[..]));
    it.next().unwrap();
    assert!(!it.valid(), "nothing of the first block is left");
}

#[test]
fn round_trip_forward_and_backward() {
    for interval in [1, 2, 16] {
        let (block, entries) = build(100, interval);
        let mut it = block.iter();
        it.seek_to_first().unwrap();
        for (k, v) in &entries {
            assert!(it.valid());
            assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
            it.next().unwrap();
        }
        assert!(!it.valid());
        it.seek_to_last().unwrap();
        for (k, _) in entries.iter().rev() {
            assert_eq!(it.key(), &k[..]);
            it.prev().unwrap();
        }
        assert!(!it.valid());
    }
}

#[test]
fn seeks_use_restart_points() {
    let (block, entries) = build(100, 16);
    let mut it = block.iter();
    // Exact hits, including every restart key and the entries around them.
    for (k, _) in &entries {
        it.seek(k).unwrap();
        assert_eq!(it.key(), &k[..]);
        it.seek_for_prev(k).unwrap();
        assert_eq!(it.key(), &k[..]);
    }
    // Between keys: key00003 lies between key00002 and key00004.
    let between = make_internal_key(b"key00003", 1, ValueKind::Put);
    it.seek(&between).unwrap();
    assert_eq!(key::user_key(it.key()), b"key00004");
    it.seek_for_prev(&between).unwrap();
    assert_eq!(key::user_key(it.key()), b"key00002");
    it.seek(&make_internal_key(b"zzz", 1, ValueKind::Put)).unwrap();
    assert!(!it.valid());
    it.seek_for_prev(&make_internal_key(b"a", 1, ValueKind::Put)).unwrap();
    assert!(!it.valid());
    it.seek_for_prev(&make_internal_key(b"zzz", 1, ValueKind::Put)).unwrap();
    assert_eq!(key::user_key(it.key()), b"key00198");
}

#[test]
fn point_seeks_agree_with_the_cursor() {
    for (interval, hashed) in [1, 3, 16].into_iter().flat_map(|i| [(i, true), (i, false)]) {
        let (block, _) = build_with(60, interval, hashed);
        let mut it = block.iter();
        let mut key = Vec::new();
        for i in 0..125 {
            let user = format!("key{i:05}");
            for seq in [0, 1, 2] {
                let target = make_internal_key(user.as_bytes(), seq, ValueKind::Put);
                it.seek(&target).unwrap();
                let cursor = it.valid().then(|| it.key().to_vec());
                for hash in [None, Some(hash_key(user.as_bytes()))] {
                    match seek_in(&block.data, &target, hash, &mut key).unwrap() {
                        Seek::Found(vs, ve) if Some(&key) == cursor.as_ref() => {
                            assert_eq!(&block.data[vs..ve], it.value());
                        }
                        // A key the block does not hold, sharing a bucket with one it does.
                        Seek::Found(..) => {
                            assert!(hashed && hash.is_some(), "{i}@{seq}");
                            assert!(key::compare(&key, &target).is_gt() && key::user_key(&key) != user.as_bytes());
                            assert!(cursor.as_ref().is_none_or(|c| key::user_key(c) != user.as_bytes()));
                        }
                        Seek::Past => assert_eq!(cursor, None, "{i}@{seq}"),
                        // Only a key the block does not hold, asked with its hash.
                        Seek::Absent => {
                            assert!(hashed && hash.is_some() && (i % 2 == 1 || i > 118), "{i}@{seq}");
                            assert!(cursor.as_ref().is_none_or(|c| key::user_key(c) != user.as_bytes()));
                        }
                    }
                }
            }
        }
    }
}

/// Most keys of a block get a bucket of their own: the lookups of keys present start at
/// their restart interval without a binary search, and most absent keys are answered from
/// the bucket alone. Blocks with more restarts than a bucket can name have no index.
#[test]
fn the_hash_index_answers_most_lookups_from_one_bucket() {
    let (block, entries) = build(120, 16);
    let Layout { buckets: Some((at, m)), num_restarts, .. } = layout(&block.data).unwrap() else {
        panic!("no hash index")
    };
    assert_eq!((m, num_restarts), (160 | 1, 8));
    let bucket = |user: &[u8]| block.data[at + bucket_of(hash_key(user), m)];
    let direct = entries.iter().filter(|(k, _)| bucket(key::user_key(k)) < COLLISION).count();
    // With RocksDB's utilisation of 3/4 a key shares its bucket with one of another interval
    // with probability 1 - e^(-104/161), about half the time here (8 intervals).
    assert!(direct * 10 >= entries.len() * 4, "{direct} of {} keys with a bucket of their own", entries.len());
    for (i, (k, _)) in entries.iter().enumerate() {
        let b = bucket(key::user_key(k));
        assert!(b == COLLISION || b as usize == i / 16, "entry {i} in interval {}, bucket says {b}", i / 16);
    }
    let absent = (0..1000).filter(|i| bucket(format!("absent{i}").as_bytes()) == NO_ENTRY).count();
    assert!(absent > 300, "{absent} of 1000 absent keys answered from the bucket");
    let mut many = BlockBuilder::with_hash_index(1);
    for i in 0..MAX_HASHED_RESTARTS + 1 {
        let k = make_internal_key(format!("k{i:04}").as_bytes(), 1, ValueKind::Put);
        many.add_hashed(&k, b"v", hash_key(key::user_key(&k)));
    }
    assert!(layout(&many.finish()).unwrap().buckets.is_none());
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let origin = BlockOrigin { file: Arc::from(Path::new("x.sst")), offset: 7 };
    assert!(Block::new(Bytes::from_static(&[1, 2]), origin.clone()).is_err());
    assert!(Block::new(Bytes::from_static(&[0, 0, 0, 0]), origin.clone()).is_err());
    assert!(Block::new(Bytes::from_static(&[9, 9, 9, 9, 0xff, 0, 0, 0]), origin.clone()).is_err());
    let (good, _) = build(40, 4);
    let mut bytes = good.data.to_vec();
    for i in 0..bytes.len() - 4 {
        bytes[i] ^= 0xa5;
        if let Ok(b) = Block::new(Bytes::from(bytes.clone()), origin.clone()) {
            let mut it = b.iter();
            let _ = it.seek_to_first();
            let mut steps = 0;
            while it.valid() && steps < 1000 {
                if it.next().is_err() {
                    break;
                }
                steps += 1;
            }
            let _ = it.seek(&make_internal_key(b"key00050", 1, ValueKind::Put));
            let target = make_internal_key(b"key00050", 1, ValueKind::Put);
            let _ = seek_in(&b.data, &target, Some(hash_key(b"key00050")), &mut Vec::new());
            let _ = seek_in(&b.data, &target, None, &mut Vec::new());
            let _ = it.seek_to_last();
            let _ = it.prev();
        }
        bytes[i] ^= 0xa5;
    }
}
