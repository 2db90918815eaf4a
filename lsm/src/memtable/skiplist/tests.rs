use std::collections::BTreeMap;

use super::*;
use crate::key::{self, ValueKind};

fn trailer(seq: u64) -> u64 {
    key::pack_trailer(seq, ValueKind::Put)
}

/// Inserts without a hint (the list is searched), as a memtable without a point index does.
fn put(list: &SkipList, k: &[u8], seq: u64, v: &[u8]) -> (Node, bool, usize) {
    list.insert(k, trailer(seq), v, || Hint::Unknown, |_| {})
}

/// Every version in the list's order: key ascending, sequence number descending.
fn walk(list: &SkipList) -> Vec<(Vec<u8>, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for node in std::iter::successors(list.first(), |n| list.next(*n)) {
        for v in std::iter::successors(Some(list.newest(node)), |v| v.older()) {
            out.push((node.key().to_vec(), v.trailer() >> 8, v.value().to_vec()));
        }
    }
    out
}

#[test]
fn heights_follow_a_branching_factor_of_four() {
    let a = || Arena::new(super::super::arena::MIN_CHUNK);
    let mut w = Writer { nodes: a(), tall: a(), values: a(), rng: 1 };
    let mut counts = [0usize; MAX_HEIGHT + 1];
    let n = 400_000;
    for _ in 0..n {
        counts[w.random_height()] += 1;
    }
    assert_eq!(counts[0], 0);
    for (h, &count) in counts.iter().enumerate().take(5).skip(1) {
        let expected = n as f64 * 0.75 / 4f64.powi(h as i32 - 1);
        let got = count as f64;
        assert!((got - expected).abs() < expected * 0.05 + 50.0, "height {h}: {got} vs {expected}");
    }
}

/// Against a sorted model: every version in order (keys ascending, each key's versions newest
/// first), versions inserted out of order and twice, node searches at, between, before and
/// past the keys, and each key's one node.
#[test]
fn the_list_orders_keys_and_versions_like_a_sorted_model() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let list = SkipList::new(super::super::arena::MIN_CHUNK);
    // (key, reversed sequence number) -> value: the list's order.
    let mut model: BTreeMap<(Vec<u8>, std::cmp::Reverse<u64>), Vec<u8>> = BTreeMap::new();
    let mut nodes: BTreeMap<Vec<u8>, Node> = BTreeMap::new();
    let (mut charged, mut needed) = (0, 0);
    for i in 0..6000u64 {
        let k = format!("k{:05}", rng.random_range(0..1500)).into_bytes();
        // Mostly rising sequence numbers, as the engine writes; some older ones and repeats.
        let seq = match i % 10 {
            0 => rng.random_range(1..i.max(2)),
            1 => i.saturating_sub(1).max(1) + 1000,
            _ => i + 1000,
        };
        let v = vec![b'v'; (i % 300) as usize];
        let fresh = !model.contains_key(&(k.clone(), std::cmp::Reverse(seq)));
        let (node, new_node, charge) = put(&list, &k, seq, &v);
        charged += charge;
        assert_eq!(new_node, !nodes.contains_key(&k), "one node per key");
        assert_eq!(node.key(), &k[..]);
        if let Some(n) = nodes.insert(k.clone(), node) {
            assert_eq!(n, node, "a key keeps its node");
        }
        if fresh {
            needed += v.len();
            model.insert((k, std::cmp::Reverse(seq)), v);
        } else {
            assert_eq!(charge, 0, "a version already there is left alone");
        }
    }
    assert_eq!(list.len(), model.len());
    assert_eq!(list.keys(), nodes.len());
    assert!(charged >= needed, "charged {charged} for {needed} bytes of values");
    let expected: Vec<(Vec<u8>, u64, Vec<u8>)> = model.iter().map(|((k, s), v)| (k.clone(), s.0, v.clone())).collect();
    assert_eq!(walk(&list), expected);
    let keys: Vec<Vec<u8>> = nodes.keys().cloned().collect();
    let backward: Vec<Vec<u8>> =
        std::iter::successors(list.last(), |n| list.prev(*n)).map(|n| n.key().to_vec()).collect();
    assert_eq!(backward, keys.iter().rev().cloned().collect::<Vec<_>>());
    for n in 0..1700 {
        let t = format!("k{n:05}").into_bytes();
        let t2 = [&t[..], b"!"].concat();
        for t in [t, t2] {
            let ge = nodes.range(t.clone()..).next().map(|(k, _)| k.clone());
            assert_eq!(list.seek(&t).map(|n| n.key().to_vec()), ge);
            let le = nodes.range(..=t.clone()).next_back().map(|(k, _)| k.clone());
            assert_eq!(list.seek_for_prev(&t).map(|n| n.key().to_vec()), le);
            assert_eq!(list.find(&t), nodes.get(&t).copied());
        }
    }
    let oldest = list.oldest(nodes[&keys[0]]);
    assert_eq!(
        Some(oldest.trailer() >> 8),
        model
            .range((keys[0].clone(), std::cmp::Reverse(u64::MAX))..)
            .take_while(|((k, _), _)| *k == keys[0])
            .last()
            .map(|((_, s), _)| s.0)
    );
}

/// The hint skips the search: a version of a known node goes on its chain, a key known to be
/// absent gets a node, which the new-node callback hears of.
#[test]
fn hints_place_versions_on_known_nodes_and_new_nodes_are_reported() {
    let list = SkipList::new(super::super::arena::MIN_CHUNK);
    let mut made = Vec::new();
    let (a, new, _) = list.insert(b"a", trailer(1), b"1", || Hint::Absent, |n| made.push(n));
    assert!(new);
    let (c, _, _) = list.insert(b"c", trailer(2), b"2", || Hint::Absent, |n| made.push(n));
    assert_eq!(made, vec![a, c]);
    let (again, new, _) = list.insert(b"a", trailer(3), b"3", || Hint::Node(a), |_| panic!("no new node"));
    assert!(!new && again == a);
    let (b, new, _) = list.insert(b"b", trailer(4), b"4", || Hint::Unknown, |_| {});
    assert!(new);
    assert_eq!(
        walk(&list),
        vec![
            (b"a".to_vec(), 3, b"3".to_vec()),
            (b"a".to_vec(), 1, b"1".to_vec()),
            (b"b".to_vec(), 4, b"4".to_vec()),
            (b"c".to_vec(), 2, b"2".to_vec()),
        ]
    );
    assert_eq!(list.next(a), Some(b));
}

/// Keys of 64 KiB and more, empty values and values of any length, sequence numbers far from
/// the base (a varint of any length), and deletions' kind all read back.
#[test]
fn any_key_value_and_sequence_number_reads_back() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    let keys = [vec![b'b'; 1 << 16], vec![b'a'; 3], vec![b'c'; 1 << 20], vec![b'b'; (1 << 16) - 9], vec![b'b'; 10]];
    for (i, k) in keys.iter().enumerate() {
        let value = vec![i as u8; i * 50];
        let seq = [5, 200, 1 << 40, key::MAX_SEQUENCE, 6][i];
        let kind = if i == 3 { ValueKind::Delete } else { ValueKind::Put };
        let (node, new, _) = list.insert(k, key::pack_trailer(seq, kind), &value, || Hint::Unknown, |_| {});
        assert!(new);
        let v = list.newest(node);
        assert_eq!((node.key(), v.value(), v.trailer()), (&k[..], &value[..], key::pack_trailer(seq, kind)));
    }
    let mut sorted = keys.to_vec();
    sorted.sort();
    let walked: Vec<Vec<u8>> =
        std::iter::successors(list.first(), |n| list.next(*n)).map(|n| n.key().to_vec()).collect();
    assert_eq!(walked, sorted);
    // An older version of the first key, below the base: a sequence varint of ten bytes.
    let (node, _, _) = list.insert(&keys[0], trailer(1), b"old", || Hint::Unknown, |_| {});
    let older = list.newest(node).older().expect("an older version");
    assert_eq!((older.trailer() >> 8, older.value()), (1, &b"old"[..]));
}

#[test]
fn an_empty_list_has_no_nodes() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    assert_eq!(list.len(), 0);
    assert!(list.first().is_none() && list.last().is_none());
    assert!(list.seek(b"a").is_none() && list.seek_for_prev(b"a").is_none() && list.find(b"a").is_none());
}

#[test]
fn an_entry_takes_its_bytes_its_links_and_a_few_more_and_a_rewrite_only_its_version() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    let n = 100_000u64;
    let mut charged = 0;
    let mut nodes = Vec::new();
    for i in 0..n {
        let k = format!("{:016}", i.wrapping_mul(0x9e37_79b9) % n);
        let (node, _, c) = list.insert(k.as_bytes(), trailer(1000 + i), &[7u8; 100], || Hint::Absent, |_| {});
        charged += c;
        nodes.push(node);
    }
    // A node: the version pointer, a length byte and 16 key bytes (32 with padding), plus 8
    // bytes a link (4/3 on average); the version: kind, 3 bytes of sequence number, a length
    // byte and 100 bytes (~148); and the arenas' last chunks, charged whole.
    let per = charged as f64 / n as f64;
    assert!((146.0..154.0).contains(&per), "{per} bytes an entry");
    let mut charged = 0;
    for (i, node) in nodes.iter().enumerate() {
        let key = node.key().to_vec();
        charged += list.insert(&key, trailer(1000 + n + i as u64), &[8u8; 100], || Hint::Node(*node), |_| {}).2;
    }
    // The version alone, with its pointer to the older one.
    let per = charged as f64 / n as f64;
    assert!((112.0..116.0).contains(&per), "{per} bytes a rewrite");
}

/// Readers walk, seek and read chains while the writer adds keys and versions: every walk is
/// sorted, every chain strictly newest first, every value the one written with its version.
#[test]
fn readers_see_complete_sorted_chains_while_the_writer_inserts() {
    let list = std::sync::Arc::new(SkipList::new(super::super::arena::MIN_CHUNK));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let value_of = |k: u64, seq: u64| format!("{k}/{seq}").into_bytes();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (list, done) = (std::sync::Arc::clone(&list), std::sync::Arc::clone(&done));
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !done.load(Ordering::Acquire) || rounds < 3 {
                    rounds += 1;
                    let mut last: Option<Vec<u8>> = None;
                    let start = if r == 0 { list.first() } else { list.seek(b"k0500") };
                    for node in std::iter::successors(start, |n| list.next(*n)) {
                        assert!(last.as_deref().is_none_or(|l| l < node.key()), "keys ascend");
                        last = Some(node.key().to_vec());
                        let k: u64 = std::str::from_utf8(&node.key()[1..]).unwrap().parse().unwrap();
                        let mut prev_seq = u64::MAX;
                        for v in std::iter::successors(Some(list.newest(node)), |v| v.older()) {
                            let seq = v.trailer() >> 8;
                            assert!(seq < prev_seq, "versions newest first");
                            prev_seq = seq;
                            assert_eq!(v.value(), &value_of(k, seq)[..]);
                        }
                    }
                }
            })
        })
        .collect();
    for seq in 1..60_000u64 {
        let k = (seq * 7919) % 1000;
        let key = format!("k{k:04}");
        list.insert(key.as_bytes(), trailer(seq), &value_of(k, seq), || Hint::Unknown, |_| {});
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(list.keys(), 1000);
}
