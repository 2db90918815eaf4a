//! The memtable's unit tests.

use super::*;
use crate::batch::WriteBatch;

#[test]
fn get_sees_newest_version_at_snapshot() {
    let m = Memtable::with_capacity(1, 1 << 20);
    m.insert(1, ValueKind::Put, b"k", b"v1");
    m.insert(2, ValueKind::Put, b"k", b"v2");
    m.insert(3, ValueKind::Delete, b"k", b"");
    m.insert(4, ValueKind::Put, b"k2", b"x");
    assert_eq!(m.get(b"k", 1), Some(Lookup::Found(Bytes::from_static(b"v1"), 1)));
    assert_eq!(m.get(b"k", 2), Some(Lookup::Found(Bytes::from_static(b"v2"), 2)));
    assert_eq!(m.get(b"k", 3), Some(Lookup::Deleted(3)));
    assert_eq!(m.get(b"k", 0), None);
    assert_eq!(m.get(b"j", 9), None);
    assert_eq!(m.get(b"k2", 3), None);
    assert_eq!(m.largest_seq(), 4);
    assert!(m.approximate_size() > 0);
    m.insert(5, ValueKind::RangeDelete, b"a", b"k1");
    assert_eq!(m.max_covering_tombstone(b"k", 9), Some(5));
    assert_eq!(m.max_covering_tombstone(b"k", 4), None);
    assert_eq!(m.max_covering_tombstone(b"k1", 9), None, "end is exclusive");
    assert_eq!(m.get(b"k", 9), Some(Lookup::Deleted(3)), "point lookups ignore range tombstones");
    assert_eq!(m.range_tombstones().len(), 1);
}

#[test]
fn a_long_value_read_pinned_shares_the_arena_and_keeps_the_memtable_alive() {
    let m = Arc::new(Memtable::with_capacity(1, 1 << 20));
    let long = vec![7u8; PIN_AT];
    m.insert(1, ValueKind::Put, b"long", &long);
    m.insert(2, ValueKind::Put, b"short", b"tiny");
    let Some(Lookup::Found(pinned, 1)) = m.get_pinned(b"long", 9) else { panic!("not found") };
    let Some(Lookup::Found(copied, 1)) = m.get(b"long", 9) else { panic!("not found") };
    assert_eq!((&pinned[..], &copied[..]), (&long[..], &long[..]));
    assert_ne!(pinned.as_ptr(), copied.as_ptr(), "get copies");
    let Some(Lookup::Found(again, 1)) = m.get_pinned(b"long", 9) else { panic!("not found") };
    assert_eq!(pinned.as_ptr(), again.as_ptr(), "both views are of the arena's bytes");
    assert_eq!(m.get_pinned(b"short", 9), Some(Lookup::Found(Bytes::from_static(b"tiny"), 2)));
    // The last handle on the memtable goes; the view still reads its bytes.
    let weak = Arc::downgrade(&m);
    drop((m, again));
    assert!(weak.upgrade().is_some(), "the view holds the memtable");
    assert_eq!(&pinned[..], &long[..]);
    drop(pinned);
    assert!(weak.upgrade().is_none(), "and lets it go with the last view");
}

/// Lookups answered by the point index (and by the list, where the index cannot tell: an
/// older snapshot, or a key that found no slot in a full index) match the list alone, for
/// every key at every sequence number.
#[test]
fn the_point_index_answers_as_the_list_does() {
    use rand::{Rng, SeedableRng};
    // 1 MiB: the index has room for every key; 4 KiB: its 1024 slots overflow.
    for capacity in [1 << 20, 1 << 12] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(capacity as u64);
        let (indexed, plain) = (Memtable::with_capacity(1, capacity), Memtable::new(1));
        assert!(indexed.lookups.is_some() && plain.lookups.is_none());
        let keys = 3000u64;
        let mut seq = 0;
        for _ in 0..20_000 {
            seq += 1;
            let k = format!("key{}", rng.random_range(0..keys));
            let (kind, v) = if rng.random_bool(0.2) {
                (ValueKind::Delete, String::new())
            } else {
                (ValueKind::Put, format!("v{seq}"))
            };
            indexed.insert(seq, kind, k.as_bytes(), v.as_bytes());
            plain.insert(seq, kind, k.as_bytes(), v.as_bytes());
            if rng.random_bool(0.01) {
                indexed.insert(seq, kind, k.as_bytes(), v.as_bytes()); // applied twice
            }
        }
        let mut answered = 0;
        for k in 0..keys + 50 {
            let k = format!("key{k}");
            for at in [seq, seq / 2, rng.random_range(0..=seq), 0] {
                let got = indexed.get(k.as_bytes(), at);
                assert_eq!(got, plain.get(k.as_bytes(), at), "{k} at {at} (capacity {capacity})");
                answered += usize::from(got.is_some());
            }
        }
        assert!(answered > 5000, "the lookups found versions: {answered}");
    }
}

#[test]
fn memory_for_counts_what_a_memtable_allocates_beside_its_entries() {
    for capacity in [4096, 1 << 20, 16 << 20, 48 << 20] {
        let m = Memtable::with_capacity(1, capacity);
        assert_eq!(Memtable::memory_for(capacity), capacity + m.index_memory(), "capacity {capacity}");
        assert!(m.index_memory() <= capacity / 3 + (16 << 10), "capacity {capacity}: {}", m.index_memory());
    }
    assert_eq!(Memtable::new(1).index_memory(), 0);
}

#[test]
fn a_budget_pays_for_the_lookups_first() {
    for budget in [1 << 16, 1 << 20, 16 << 20, 64 << 20] {
        let m = Memtable::with_budget(1, budget);
        let lookups = m.index_memory();
        assert!(lookups > 0 && lookups * 4 <= budget, "budget {budget}: lookups {lookups}");
        assert_eq!(m.memory_usage(), lookups, "an empty memtable uses its lookups");
        let value = [7u8; 100];
        let mut i = 0u64;
        while m.memory_usage() < budget {
            m.insert(i + 1, ValueKind::Put, format!("key{i:012}").as_bytes(), &value);
            i += 1;
        }
        let entries = m.approximate_size();
        // Over by at most the chunk (charged whole) the last entry started.
        assert!(entries + lookups < budget + arena::Arena::chunk_for(budget), "budget {budget}: {entries} + {lookups}");
        assert!(entries + lookups * 2 > budget, "the lookups were paid once, from the budget");
    }
    // Too small to spare a quarter: the entries get it all.
    assert_eq!(Memtable::with_budget(1, 4096).index_memory(), 0);
}

#[test]
fn a_repeated_write_keeps_one_entry() {
    let m = Memtable::new(1);
    m.insert(7, ValueKind::Put, b"k", b"v");
    m.insert(7, ValueKind::Put, b"k", b"v");
    assert_eq!(m.len(), 1);
    assert_eq!(m.get(b"k", 9), Some(Lookup::Found(Bytes::from_static(b"v"), 7)));
}

/// Cursors and lookups run while the writer inserts (no locks, see `skiplist`), one key at a
/// time or in batches whose new keys are searched for ahead (as readers search, then linked
/// from there): every walk, forwards or backwards, sees keys in order, and every entry
/// inserted before it started; seeks land on the right side of their targets.
#[test]
fn readers_walk_while_the_writer_inserts() {
    // One key at a time, then batches of 16 whose new keys are searched for ahead.
    readers_walk_while_the_writer_writes(false);
    readers_walk_while_the_writer_writes(true);
}

fn readers_walk_while_the_writer_writes(batched: bool) {
    const N: u64 = 20_000;
    let m = Arc::new(Memtable::with_capacity(1, 1 << 20));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (m, done) = (Arc::clone(&m), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut walks = 0;
                while !done.load(Ordering::Acquire) || walks < 3 {
                    let before = m.largest_seq();
                    let mut it = m.iter();
                    it.seek_to_first().unwrap();
                    let (mut seen, mut last): (u64, Option<Vec<u8>>) = (0, None);
                    while it.valid() {
                        let k = it.key().to_vec();
                        assert!(last.as_ref().is_none_or(|l| key::compare(l, &k).is_lt()), "reader {r}: out of order");
                        assert_eq!(it.value(), key::user_key(&k), "reader {r}: value of its key");
                        last = Some(k);
                        seen += 1;
                        it.next().unwrap();
                    }
                    assert!(seen >= before, "reader {r}: saw {seen} of the {before} inserted before the walk");
                    // Backwards (each step a search from the top), and seeks both ways.
                    let before = m.largest_seq();
                    it.seek_to_last().unwrap();
                    let (mut seen, mut last): (u64, Option<Vec<u8>>) = (0, None);
                    while it.valid() {
                        let k = it.key().to_vec();
                        assert!(
                            last.as_ref().is_none_or(|l| key::compare(&k, l).is_lt()),
                            "reader {r}: out of order back"
                        );
                        last = Some(k);
                        seen += 1;
                        it.prev().unwrap();
                    }
                    assert!(seen >= before, "reader {r}: saw {seen} of the {before} inserted before the walk back");
                    let probe = key::seek_key(format!("key{:08}", walks * 104_729 % N).as_bytes(), u64::MAX >> 8);
                    it.seek(&probe).unwrap();
                    if it.valid() {
                        assert!(key::compare(it.key(), &probe).is_ge(), "reader {r}: seek landed before its target");
                    }
                    it.seek_for_prev(&probe).unwrap();
                    if it.valid() {
                        assert!(
                            key::compare(it.key(), &probe).is_le(),
                            "reader {r}: seek_for_prev landed after its target"
                        );
                    }
                    let probe = format!("key{:08}", walks * 7919 % N);
                    if let Some(Lookup::Found(v, _)) = m.get(probe.as_bytes(), u64::MAX >> 8) {
                        assert_eq!(&v[..], probe.as_bytes());
                    }
                    walks += 1;
                }
            })
        })
        .collect();
    // Keys in a scrambled order, so inserts land all over the list.
    let key_of = |seq: u64| format!("key{:08}", seq.wrapping_mul(7_777_777) % N);
    if batched {
        for first in (1..=N).step_by(16) {
            let mut batch = WriteBatch::new();
            for seq in first..(first + 16).min(N + 1) {
                batch.put(key_of(seq), key_of(seq));
            }
            batch.set_sequence(first);
            m.apply(&batch).unwrap();
        }
    } else {
        for seq in 1..=N {
            let k = key_of(seq);
            m.insert(seq, ValueKind::Put, k.as_bytes(), k.as_bytes());
        }
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(m.len() as u64, N);
}

/// Lookups and seeks at older sequence numbers run while the writer rewrites a few keys, so a
/// new node of a key (every [`skiplist::MAX_CHAIN`]-th version) keeps going in right before
/// the node a reader is looking for: every lookup finds exactly the version its sequence number
/// sees, and every seek lands on it. (A search that loaded its last link again, instead of
/// keeping the node it compared, could land on such a new node, which holds only newer
/// versions: a lookup found nothing of a key the memtable held.)
#[test]
fn lookups_at_older_sequence_numbers_see_their_versions_while_new_nodes_go_in() {
    const KEYS: u64 = 8;
    let n: u64 = std::env::var("SHALE_MEMTABLE_RACE_WRITES").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let m = Arc::new(Memtable::with_capacity(1, 64 << 20));
    // The last sequence number whose insert returned: every version up to it is visible.
    let published = Arc::new(AtomicU64::new(0));
    let key_of = |k: u64| format!("key{k}");
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (m, published) = (Arc::clone(&m), Arc::clone(&published));
            std::thread::spawn(move || {
                let mut rng = r.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut it = m.iter();
                loop {
                    let top = published.load(Ordering::Acquire);
                    if top >= n {
                        break;
                    }
                    if top < KEYS {
                        std::hint::spin_loop();
                        continue;
                    }
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // Just below the newest, where the writer is adding nodes.
                    let seq = top - rng % KEYS.min(top - KEYS + 1);
                    let k = rng >> 32 & (KEYS - 1);
                    // The newest version of key k at or below `seq` (key k is written at the
                    // sequence numbers that are k modulo KEYS).
                    let want = seq - (seq + KEYS - k) % KEYS;
                    let user_key = key_of(k);
                    let value = want.to_le_bytes();
                    assert_eq!(
                        m.get(user_key.as_bytes(), seq),
                        Some(Lookup::Found(Bytes::copy_from_slice(&value), want)),
                        "reader {r}: {user_key} at {seq}"
                    );
                    let target = key::seek_key(user_key.as_bytes(), seq);
                    it.seek(&target).unwrap();
                    assert!(it.valid(), "reader {r}: seek to {user_key} at {seq} found nothing");
                    assert_eq!(
                        (key::user_key(it.key()), key::trailer(it.key()) >> 8, it.value()),
                        (user_key.as_bytes(), want, &value[..]),
                        "reader {r}: seek to {user_key} at {seq}"
                    );
                }
            })
        })
        .collect();
    for seq in 1..=n {
        m.insert(seq, ValueKind::Put, key_of(seq % KEYS).as_bytes(), &seq.to_le_bytes());
        published.store(seq, Ordering::Release);
    }
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn iterator_walks_both_ways() {
    let m = Arc::new(Memtable::new(1));
    for (i, k) in ["b", "a", "c"].iter().enumerate() {
        m.insert(i as u64 + 1, ValueKind::Put, k.as_bytes(), b"v");
    }
    m.insert(9, ValueKind::Put, b"b", b"new");
    let mut it = m.iter();
    it.seek_to_first().unwrap();
    let mut seen = Vec::new();
    while it.valid() {
        let p = key::parse(it.key()).unwrap();
        seen.push((String::from_utf8(p.user_key.to_vec()).unwrap(), p.seq));
        it.next().unwrap();
    }
    assert_eq!(seen, [("a".into(), 2), ("b".into(), 9), ("b".into(), 1), ("c".into(), 3)]);
    it.seek_for_prev(&key::seek_key(b"bb", 100)).unwrap();
    assert_eq!(key::parse(it.key()).unwrap().seq, 1);
    it.prev().unwrap();
    assert_eq!(it.value(), b"new");
    it.seek_to_last().unwrap();
    assert_eq!(key::user_key(it.key()), b"c");
    it.next().unwrap();
    assert!(!it.valid());
}

/// Values of every size (empty, small ones crossing arena chunks, ones with a chunk of their
/// own) read back whole through lookups, iterators and outliving copies, and the memtable
/// charges each entry its node: links, key and value.
#[test]
fn values_of_every_size_read_back_and_are_charged_their_length() {
    let m = Arc::new(Memtable::with_capacity(1, 64 << 20));
    let value = |i: usize| -> Vec<u8> {
        let len = match i % 5 {
            0 => 0,
            1 => 100_000 + i,
            _ => (i * 131) % 5000,
        };
        (0..len).map(|j| (i * 7 + j) as u8).collect()
    };
    let n = 3000;
    let mut values = 0;
    for i in 0..n {
        let v = value(i);
        values += v.len();
        m.insert(i as u64 + 1, ValueKind::Put, format!("k{i:05}").as_bytes(), &v);
    }
    // Each node: at least one link, a 14-byte internal key, two length bytes and the value;
    // besides, on average a third of a link more, padding to 8 and longer length varints.
    let least = n * (8 + 14 + 2) + values;
    let size = m.approximate_size();
    assert!(size >= least, "charged {size}, entries need {least}");
    assert!(size <= least + n * 24 + values / 8, "charged {size} for {least} bytes of entries");
    let mut copies = Vec::new();
    for i in 0..n {
        match m.get(format!("k{i:05}").as_bytes(), u64::MAX) {
            Some(Lookup::Found(v, seq)) => {
                assert_eq!((&v[..], seq), (&value(i)[..], i as u64 + 1));
                copies.push(v);
            }
            other => panic!("k{i:05}: {other:?}"),
        }
    }
    let mut it = m.iter();
    it.seek_to_first().unwrap();
    for i in 0..n {
        assert_eq!((it.value(), &it.value_bytes()[..]), (&value(i)[..], &value(i)[..]));
        it.next().unwrap();
    }
    drop((it, m));
    for (i, v) in copies.iter().enumerate() {
        assert_eq!(&v[..], &value(i)[..], "a value read out outlives the memtable");
    }
}

/// Fills `m` with 16-byte keys and 100-byte values until it reaches `budget`; returns how many.
fn fill_to(m: &Memtable, budget: usize) -> u64 {
    let value = [7u8; 100];
    let mut i = 0u64;
    while m.memory_usage() < budget {
        m.insert(i + 1, ValueKind::Put, format!("key{i:013}").as_bytes(), &value);
        i += 1;
    }
    i
}

#[test]
fn lookups_sized_after_a_predecessor_leave_more_room_for_entries() {
    let budget = 8 << 20;
    let first = Memtable::with_budget(1, budget);
    assert_eq!(Memtable::with_budget_after(1, budget, None).index_memory(), first.index_memory());
    let n_first = fill_to(&first, budget);
    let hint = first.entry_bytes();
    assert!(hint.is_some_and(|b| (120..260).contains(&b)), "{hint:?}");
    let next = Memtable::with_budget_after(2, budget, hint);
    assert!(next.index_memory() * 4 < first.index_memory() * 3, "{} vs {}", next.index_memory(), first.index_memory());
    let n_next = fill_to(&next, budget);
    assert!(n_next > n_first, "{n_next} entries after the hint, {n_first} before");
    // The lookups still find every key (the index has a slot for nearly all of them).
    for i in (0..n_next).step_by(7) {
        let key = format!("key{i:013}");
        assert_eq!(
            next.get(key.as_bytes(), key::MAX_SEQUENCE),
            Some(Lookup::Found(Bytes::from_static(&[7u8; 100]), i + 1))
        );
    }
    assert_eq!(next.get(b"key-absent", key::MAX_SEQUENCE), None);
    assert!(Memtable::new(1).entry_bytes().is_none(), "no hint from an empty memtable");
}

#[test]
fn a_hint_far_too_large_costs_speed_not_answers() {
    // Sized for a handful of keys, then given thousands: the bloom filter says "maybe" and the
    // index runs out of slots, so lookups fall back to the list, and still answer right.
    let m = Memtable::with_budget_after(1, 4 << 20, Some(1 << 20));
    let default = Memtable::with_budget(1, 4 << 20).index_memory();
    assert!(m.index_memory() * 4 >= default - 4096, "a quarter of the default at least");
    let n = fill_to(&m, 2 << 20);
    assert!(n > 10_000);
    for i in (0..n).step_by(3) {
        let key = format!("key{i:013}");
        assert_eq!(
            m.get(key.as_bytes(), key::MAX_SEQUENCE),
            Some(Lookup::Found(Bytes::from_static(&[7u8; 100]), i + 1))
        );
        assert_eq!(m.get(key.as_bytes(), i), None, "not visible before it was written");
    }
    assert_eq!(m.get(b"key-absent", key::MAX_SEQUENCE), None);
}

/// A batch goes in window by window (prefetching each window's lookups first): every update
/// lands, numbered in batch order, whatever the batch's length against the window.
#[test]
fn apply_inserts_every_update_in_batch_order_across_windows() {
    for len in [1, APPLY_WINDOW - 1, APPLY_WINDOW, APPLY_WINDOW + 1, 3 * APPLY_WINDOW + 5] {
        let m = Memtable::with_capacity(1, 1 << 20);
        let mut batch = WriteBatch::new();
        for i in 0..len {
            batch.put(format!("k{i}"), format!("v{i}"));
        }
        // The last update of a key wins: a later sequence number.
        batch.delete("k0");
        batch.set_sequence(100);
        m.apply(&batch).unwrap();
        assert_eq!(m.len(), len + 1);
        assert_eq!(m.get(b"k0", u64::MAX), Some(Lookup::Deleted(100 + len as u64)), "len {len}");
        for i in 1..len {
            let want = Lookup::Found(Bytes::from(format!("v{i}")), 100 + i as u64);
            assert_eq!(m.get(format!("k{i}").as_bytes(), u64::MAX), Some(want), "len {len}");
        }
        assert_eq!(m.largest_seq(), 100 + len as u64);
    }
}

/// Keys written many times (several nodes each) among keys written once, with and without the
/// point index: every read at every snapshot, seeks and reverse seeks at every version and
/// between, and walks both ways agree with a sorted model of the internal keys.
#[test]
fn keys_with_long_histories_read_seek_and_walk_like_a_sorted_model() {
    use std::collections::BTreeMap;
    #[derive(Clone, PartialEq, Eq)]
    struct Ordered(Vec<u8>);
    impl Ord for Ordered {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            key::compare(&self.0, &other.0)
        }
    }
    impl PartialOrd for Ordered {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    for indexed in [true, false] {
        let m = Arc::new(if indexed { Memtable::with_capacity(1, 1 << 22) } else { Memtable::new(1) });
        let mut model = BTreeMap::new();
        let mut seq = 0;
        for round in 0..70u64 {
            for k in ["a", "hot", "m", "warm", "z"] {
                if k == "hot" || (k == "warm" && round % 3 == 0) || round == 0 {
                    seq += 1;
                    let kind = if seq % 11 == 0 { ValueKind::Delete } else { ValueKind::Put };
                    let value = if kind == ValueKind::Put { format!("{k}{seq}").into_bytes() } else { Vec::new() };
                    m.insert(seq, kind, k.as_bytes(), &value);
                    model.insert(Ordered(key::make_internal_key(k.as_bytes(), seq, kind)), value);
                }
            }
        }
        for k in ["a", "hot", "m", "warm", "z", "b", "zz"] {
            for s in 0..=seq + 1 {
                let expected = model
                    .range(Ordered(key::seek_key(k.as_bytes(), s))..)
                    .next()
                    .filter(|(ik, _)| key::user_key(&ik.0) == k.as_bytes())
                    .map(|(ik, v)| {
                        let p = key::parse(&ik.0).unwrap();
                        match p.kind {
                            ValueKind::Put => Lookup::Found(Bytes::from(v.clone()), p.seq),
                            _ => Lookup::Deleted(p.seq),
                        }
                    });
                assert_eq!(m.get(k.as_bytes(), s), expected, "{k} at {s}");
            }
        }
        let keys: Vec<Vec<u8>> = model.keys().map(|k| k.0.clone()).collect();
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut forward = Vec::new();
        while it.valid() {
            forward.push(it.key().to_vec());
            it.next().unwrap();
        }
        assert_eq!(forward, keys);
        it.seek_to_last().unwrap();
        let mut backward = Vec::new();
        while it.valid() {
            backward.push(it.key().to_vec());
            it.prev().unwrap();
        }
        assert_eq!(backward, keys.iter().rev().cloned().collect::<Vec<_>>());
        for k in ["a", "hot", "m", "warm", "z", "b", "zz"] {
            for s in 0..=seq + 1 {
                for kind in [ValueKind::Delete, ValueKind::MAX] {
                    let t = key::make_internal_key(k.as_bytes(), s, kind);
                    let ge = model.range(Ordered(t.clone())..).next().map(|(k, _)| k.0.clone());
                    it.seek(&t).unwrap();
                    assert_eq!(it.valid().then(|| it.key().to_vec()), ge, "seek {k}@{s}");
                    let le = model.range(..=Ordered(t.clone())).next_back().map(|(k, _)| k.0.clone());
                    it.seek_for_prev(&t).unwrap();
                    assert_eq!(it.valid().then(|| it.key().to_vec()), le, "seek_for_prev {k}@{s}");
                }
            }
        }
    }
}
