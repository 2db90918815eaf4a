use std::collections::BTreeMap;

use super::*;
use crate::key::{self, ValueKind};

fn trailer(seq: u64) -> u64 {
    key::pack_trailer(seq, ValueKind::Put)
}

/// Inserts without a hint (the list is searched), as a memtable without a point index does.
fn put(list: &SkipList, k: &[u8], seq: u64, v: &[u8]) -> (Node, bool, usize) {
    list.insert(k, trailer(seq), v, || Hint::Unknown, |_| {}, None)
}

/// Every version in the list's order: key ascending, sequence number descending.
fn walk(list: &SkipList) -> Vec<(Vec<u8>, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for node in std::iter::successors(list.first(), |n| list.next(*n)) {
        let chain: Vec<Version> = std::iter::successors(Some(list.newest(node)), |v| v.older()).collect();
        assert!(chain.len() <= MAX_CHAIN, "a chain of {} versions", chain.len());
        assert_eq!(
            chain.last().map(|v| v.trailer()),
            Some(key::trailer(node.key())),
            "a node's key is its oldest version's"
        );
        for v in chain {
            out.push((node.user_key().to_vec(), v.trailer() >> 8, v.value().to_vec()));
        }
    }
    out
}

#[test]
fn heights_follow_a_branching_factor_of_four() {
    let a = || Arena::new(super::super::arena::MIN_CHUNK);
    let mut w = Writer { nodes: a(), tall: a(), values: a(), rng: 1, splice: Splice::default() };
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
/// first), chains no longer than MAX_CHAIN, versions inserted out of order and twice, and node
/// searches at, between, before and past the keys.
#[test]
fn the_list_orders_keys_and_versions_like_a_sorted_model() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let list = SkipList::new(super::super::arena::MIN_CHUNK);
    // (key, reversed sequence number) -> value: the list's order.
    let mut model: BTreeMap<(Vec<u8>, std::cmp::Reverse<u64>), Vec<u8>> = BTreeMap::new();
    let (mut charged, mut needed) = (0, 0);
    for i in 0..8000u64 {
        // A few hot keys (long histories, many nodes each) among many cold ones.
        let k =
            if i % 3 == 0 { format!("h{}", i % 4) } else { format!("k{:05}", rng.random_range(0..1500)) }.into_bytes();
        // Mostly rising sequence numbers, as the engine writes; some repeats and (for cold keys,
        // whose nodes stay short) older ones.
        let seq = match i % 20 {
            0 if k[0] == b'k' => rng.random_range(1..i.max(2)),
            1 => i.saturating_sub(1).max(1) + 10_000,
            _ => i + 10_000,
        };
        let v = vec![b'v'; (i % 300) as usize];
        let fresh = !model.contains_key(&(k.clone(), std::cmp::Reverse(seq)));
        let (node, _, charge) = put(&list, &k, seq, &v);
        charged += charge;
        assert_eq!(node.user_key(), &k[..]);
        if fresh {
            needed += v.len();
            model.insert((k, std::cmp::Reverse(seq)), v);
        } else {
            assert_eq!(charge, 0, "a version already there is left alone");
        }
    }
    assert_eq!(list.len(), model.len());
    assert!(list.nodes() < model.len(), "hot keys share nodes");
    assert!(charged >= needed, "charged {charged} for {needed} bytes of values");
    let expected: Vec<(Vec<u8>, u64, Vec<u8>)> = model.iter().map(|((k, s), v)| (k.clone(), s.0, v.clone())).collect();
    assert_eq!(walk(&list), expected);
    let forward: Vec<Vec<u8>> =
        std::iter::successors(list.first(), |n| list.next(*n)).map(|n| n.key().to_vec()).collect();
    let backward: Vec<Vec<u8>> =
        std::iter::successors(list.last(), |n| list.prev(*n)).map(|n| n.key().to_vec()).collect();
    assert_eq!(backward, forward.iter().rev().cloned().collect::<Vec<_>>());
    for _ in 0..3000 {
        let t = key::make_internal_key(
            format!("k{:05}", rng.random_range(0..1600)).as_bytes(),
            rng.random_range(0..20_000),
            ValueKind::Put,
        );
        let ge = forward.iter().find(|k| key::compare(k, &t).is_ge()).cloned();
        assert_eq!(list.seek(&t).map(|n| n.key().to_vec()), ge);
        let lt = forward.iter().rev().find(|k| key::compare(k, &t).is_lt()).cloned();
        assert_eq!(list.around(&t).0.map(|n| n.key().to_vec()), lt);
    }
}

/// The keys of each level, walked from the head by that level's links.
fn level_keys(list: &SkipList, level: usize) -> Vec<Vec<u8>> {
    let first = NonNull::new(list.head[level].load(Ordering::Acquire)).map(Node);
    std::iter::successors(first, |n| NonNull::new(n.link(level).load(Ordering::Acquire)).map(Node))
        .map(|n| n.key().to_vec())
        .collect()
}

/// Keys placed by a search ahead ([`SkipList::search_places`]) go where a search at insert time
/// would put them, though the batch links other keys first: neighbours of each other (a
/// batch's keys then lie between a place found and its key, at every level), keys before the
/// first and after the last, repeated keys, keys in any order and the first keys of an empty
/// list. Every level stays sorted and the list matches a sorted model.
#[test]
fn keys_placed_ahead_are_linked_where_a_search_would_put_them() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let list = SkipList::new(super::super::arena::MIN_CHUNK);
    let mut model: BTreeMap<(Vec<u8>, std::cmp::Reverse<u64>), Vec<u8>> = BTreeMap::new();
    let mut seq = 1u64;
    for round in 0..3000u64 {
        let n = rng.random_range(1..=16);
        let base: u32 = rng.random_range(0..2000);
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| match (round % 4, i % 3) {
                // Neighbours: one stretch of the key space, in order or reversed.
                (0, _) => format!("k{:05}", base * 8 + i).into_bytes(),
                (1, _) => format!("k{:05}", base * 8 + (16 - i)).into_bytes(),
                // Anywhere, some before every key and some after.
                (2, 0) => format!("a{}", rng.random_range(0..100)).into_bytes(),
                (2, 1) => format!("z{}", rng.random_range(0..100)).into_bytes(),
                // A few hot keys, repeated within a batch.
                (3, _) => format!("k{:05}", rng.random_range(0..4)).into_bytes(),
                _ => format!("k{:05}", rng.random_range(0..16_000)).into_bytes(),
            })
            .collect();
        let ikeys: Vec<Vec<u8>> =
            keys.iter().enumerate().map(|(i, k)| key::make_internal_key(k, seq + i as u64, ValueKind::Put)).collect();
        let targets: Vec<&[u8]> = ikeys.iter().map(|k| &k[..]).collect();
        let mut places = vec![Place::default(); n as usize];
        list.search_places(&targets, &mut places);
        for (k, place) in keys.iter().zip(&places) {
            let v = seq.to_le_bytes();
            let (node, _, _) = list.insert(k, trailer(seq), &v, || Hint::Unknown, |_| {}, Some(place));
            assert_eq!(node.user_key(), &k[..]);
            model.insert((k.clone(), std::cmp::Reverse(seq)), v.to_vec());
            seq += 1;
        }
    }
    let expected: Vec<(Vec<u8>, u64, Vec<u8>)> = model.iter().map(|((k, s), v)| (k.clone(), s.0, v.clone())).collect();
    assert_eq!(walk(&list), expected);
    let height = list.height.load(Ordering::Acquire);
    assert!(height > 3, "a list of {} nodes has levels to check", list.nodes());
    for level in 0..height {
        let keys = level_keys(&list, level);
        assert!(keys.windows(2).all(|w| key::compare(&w[0], &w[1]).is_lt()), "level {level} is sorted");
        assert!(level == 0 || keys.len() <= level_keys(&list, level - 1).len());
    }
    for level in height..MAX_HEIGHT {
        assert!(level_keys(&list, level).is_empty());
    }
}

/// Keys in runs, as list pushes and sequential loads write them: ascending, descending, two
/// runs interleaved (an LPUSH and an RPUSH queue), and jumps between them. The list matches a
/// sorted model, and a key next to the last one inserted is linked at the writer's splice
/// with a key comparison or two, not a descent (counted in the nodes the searches visited).
#[test]
fn keys_in_runs_are_linked_at_the_splice_without_a_descent() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let list = SkipList::new(super::super::arena::MIN_CHUNK);
    let mut model: BTreeMap<(Vec<u8>, std::cmp::Reverse<u64>), Vec<u8>> = BTreeMap::new();
    let mut seq = 1;
    let mut insert = |k: Vec<u8>| {
        put(&list, &k, seq, &seq.to_le_bytes());
        model.insert((k, std::cmp::Reverse(seq)), seq.to_le_bytes().to_vec());
        seq += 1;
    };
    // A background of random keys, so that a descent has levels to cross.
    for _ in 0..20_000 {
        insert(format!("r{:08}", rng.random_range(0..100_000_000)).into_bytes());
    }
    let visited = |list: &SkipList| list.writer.lock().unwrap().splice.visited;
    let runs = 20_000u64;
    let before = visited(&list);
    for i in 0..runs {
        insert(format!("r50000000-up{i:08}").into_bytes());
    }
    let ascending = visited(&list) - before;
    let before = visited(&list);
    for i in (0..runs).rev() {
        insert(format!("r60000000-down{i:08}").into_bytes());
    }
    let descending = visited(&list) - before;
    let before = visited(&list);
    for i in 0..runs {
        insert(format!("r70000000-left{:08}", runs - i).into_bytes());
        insert(format!("r70000000-right{i:08}").into_bytes());
    }
    let interleaved = visited(&list) - before;
    let before = visited(&list);
    for _ in 0..runs {
        insert(format!("r{:08}x", rng.random_range(0..100_000_000)).into_bytes());
    }
    let random = visited(&list) - before;
    assert!(ascending < runs * 2, "ascending: {ascending} nodes visited for {runs} keys");
    assert!(descending < runs * 2, "descending: {descending} nodes visited for {runs} keys");
    assert!(random > runs * 8, "random: {random} nodes visited for {runs} keys (a descent each)");
    // Two places at once: a descent for each key, and not a longer one than a random key's.
    assert!(
        interleaved / (2 * runs) <= random / runs + 2,
        "interleaved runs: {interleaved} nodes visited for {} keys, random: {random} for {runs}",
        2 * runs
    );
    let expected: Vec<(Vec<u8>, u64, Vec<u8>)> = model.iter().map(|((k, s), v)| (k.clone(), s.0, v.clone())).collect();
    assert_eq!(walk(&list), expected);
    // Readers' searches (which never use the splice) agree.
    let forward: Vec<Vec<u8>> =
        std::iter::successors(list.first(), |n| list.next(*n)).map(|n| n.key().to_vec()).collect();
    for k in forward.iter().step_by(97) {
        assert_eq!(list.seek(k).map(|n| n.key().to_vec()).as_ref(), Some(k));
    }
}

/// The hint skips the search: a version of a known node goes on its chain, a key known to be
/// absent gets a node, which the new-node callback hears of.
#[test]
fn hints_place_versions_on_known_nodes_and_new_nodes_are_reported() {
    let list = SkipList::new(super::super::arena::MIN_CHUNK);
    let mut made = Vec::new();
    let (a, new, _) = list.insert(b"a", trailer(1), b"1", || Hint::Absent, |n| made.push(n), None);
    assert!(new);
    let (c, _, _) = list.insert(b"c", trailer(2), b"2", || Hint::Absent, |n| made.push(n), None);
    assert_eq!(made, vec![a, c]);
    let (again, new, _) = list.insert(b"a", trailer(3), b"3", || Hint::Node(a), |_| panic!("no new node"), None);
    assert!(!new && again == a);
    let (b, new, _) = list.insert(b"b", trailer(4), b"4", || Hint::Unknown, |_| {}, None);
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
    // A full node: the next version starts a node of its own, before it, and is reported.
    let mut newest = a;
    for seq in 5..5 + MAX_CHAIN as u64 {
        let mut made = None;
        let (n, new, _) = list.insert(b"a", trailer(seq), b"x", || Hint::Node(newest), |n| made = Some(n), None);
        assert_eq!(new, made.is_some());
        newest = n;
    }
    assert_ne!(newest, a, "a's first node filled up");
    assert_eq!(list.next(newest), Some(a));
    assert_eq!(walk(&list).iter().filter(|(k, _, _)| k == b"a").count(), MAX_CHAIN + 2);
}

/// Keys of 64 KiB and more (the long form), empty values and values of any length, sequence numbers far from
/// the base (a varint of any length), and deletions' kind all read back.
#[test]
fn any_key_value_and_sequence_number_reads_back() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    let keys = [vec![b'b'; 1 << 16], vec![b'a'; 3], vec![b'c'; 1 << 20], vec![b'b'; (1 << 16) - 9], vec![b'b'; 10]];
    for (i, k) in keys.iter().enumerate() {
        let value = vec![i as u8; i * 50];
        let seq = [5, 200, 1 << 40, key::MAX_SEQUENCE, 6][i];
        let kind = if i == 3 { ValueKind::Delete } else { ValueKind::Put };
        let (node, new, _) = list.insert(k, key::pack_trailer(seq, kind), &value, || Hint::Unknown, |_| {}, None);
        assert!(new);
        let v = list.newest(node);
        assert_eq!((node.user_key(), v.value(), v.trailer()), (&k[..], &value[..], key::pack_trailer(seq, kind)));
    }
    let mut sorted = keys.to_vec();
    sorted.sort();
    let walked: Vec<Vec<u8>> =
        std::iter::successors(list.first(), |n| list.next(*n)).map(|n| n.user_key().to_vec()).collect();
    assert_eq!(walked, sorted);
    // An older version of the first key, below the base (a sequence varint of ten bytes): past
    // its node's range, so in a node of its own, after it.
    let first = list.seek(&key::seek_key(&keys[0], key::MAX_SEQUENCE)).expect("the key's node");
    let (node, new, _) = list.insert(&keys[0], trailer(1), b"old", || Hint::Unknown, |_| {}, None);
    assert!(new && list.next(first) == Some(node));
    let older = list.newest(node);
    assert_eq!((older.trailer() >> 8, older.value()), (1, &b"old"[..]));
}

/// A small first version is written into its node (of height 1), right after the key; a large
/// one, every later version and the first version of a taller node, into the value arena. Each
/// reads back, and newer versions chain onto an inline one as onto any other.
#[test]
fn a_small_first_version_lives_in_its_node() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    // (node key, whether its first version is inline) of each small first version.
    let mut small = Vec::new();
    for i in 0..400u64 {
        let k = format!("key{i:04}");
        let len = (i % 5) as usize * 15; // 0, 15, 30, 45, 60 bytes
        let value = vec![i as u8; len];
        let (node, new, _) = put(&list, k.as_bytes(), 10 + i, &value);
        assert!(new);
        let first = list.newest(node);
        assert_eq!((first.value(), first.trailer() >> 8), (&value[..], 10 + i));
        let inline = first.at.as_ptr() as usize == node.addr() + WORD + node.key().len();
        // Flags, the sequence number's distance from the base (`i`: a varint of one or two
        // bytes), the length byte and the value.
        let bytes = 1 + if i < 128 { 1 } else { 2 } + 1 + len;
        if bytes <= INLINE_VERSION {
            small.push((node.key().to_vec(), inline));
        } else {
            assert!(!inline, "a version of {bytes} bytes goes into the value arena");
        }
        let newer = format!("newer {i}");
        let (same, new, _) =
            list.insert(k.as_bytes(), trailer(1000 + i), newer.as_bytes(), || Hint::Node(node), |_| {}, None);
        assert!(same == node && !new, "the newer version joins the node's chain");
        let newest = list.newest(node);
        assert_eq!(newest.value(), newer.as_bytes());
        assert_eq!(newest.older().map(|v| (v.at, v.value().to_vec())), Some((first.at, value)));
    }
    // Exactly the small first versions of nodes of height 1 (those not on level 1) are inline.
    let tall: std::collections::BTreeSet<Vec<u8>> = level_keys(&list, 1).into_iter().collect();
    for (key, inline) in &small {
        assert_eq!(*inline, !tall.contains(key), "height decides");
    }
    let inline = small.iter().filter(|(_, i)| *i).count();
    assert!(inline * 10 > small.len() * 6, "{inline} of {} small first versions inline", small.len());
}

#[test]
fn an_empty_list_has_no_nodes() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    assert_eq!(list.len(), 0);
    assert!(list.first().is_none() && list.last().is_none());
    let t = key::make_internal_key(b"a", 1, ValueKind::Put);
    assert!(list.seek(&t).is_none() && list.around(&t).0.is_none());
}

#[test]
fn an_entry_takes_its_bytes_its_links_and_a_few_more_and_a_rewrite_only_its_version() {
    let list = SkipList::new(super::super::arena::MAX_CHUNK);
    let n = 100_000u64;
    let mut charged = 0;
    let mut nodes = Vec::new();
    for i in 0..n {
        let k = format!("{:016}", i.wrapping_mul(0x9e37_79b9) % n);
        let (node, _, c) = list.insert(k.as_bytes(), trailer(1000 + i), &[7u8; 100], || Hint::Absent, |_| {}, None);
        charged += c;
        nodes.push(node);
    }
    // A node: a word of key length and version pointer and a 24-byte internal key, plus 8
    // bytes a link (4/3 on average); the version: flags, 3 bytes of sequence number, a length
    // byte and 100 bytes (~148); and the arenas' last chunks, charged whole.
    let per = charged as f64 / n as f64;
    assert!((146.0..154.0).contains(&per), "{per} bytes an entry");
    let mut charged = 0;
    for (i, node) in nodes.iter().enumerate() {
        let key = node.user_key().to_vec();
        charged += list.insert(&key, trailer(1000 + n + i as u64), &[8u8; 100], || Hint::Node(*node), |_| {}, None).2;
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
                    let start = if r == 0 { list.first() } else { list.seek(&key::seek_key(b"k0500", u64::MAX >> 8)) };
                    for node in std::iter::successors(start, |n| list.next(*n)) {
                        assert!(last.as_deref().is_none_or(|l| key::compare(l, node.key()).is_lt()), "keys ascend");
                        last = Some(node.key().to_vec());
                        let k: u64 = std::str::from_utf8(&node.user_key()[1..]).unwrap().parse().unwrap();
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
        list.insert(key.as_bytes(), trailer(seq), &value_of(k, seq), || Hint::Unknown, |_| {}, None);
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert!(list.nodes() >= 1000);
}
