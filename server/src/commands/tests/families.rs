//! Per-family behaviour through `dispatch`: lazy freeing, geo and HyperLogLog reads and
//! writes, keyspace counts, list pops in transactions, the row cache.

use super::*;

/// `lazyfreed_objects` from `INFO memory`.
fn lazyfreed(s: &mut Session) -> u64 {
    let Reply::Verbatim(info) = run(s, &["INFO", "memory"]) else { panic!("INFO is verbatim text") };
    let text = String::from_utf8_lossy(&info).to_string();
    let line = text.lines().find_map(|l| l.strip_prefix("lazyfreed_objects:")).expect("lazyfreed_objects line");
    line.trim().parse().unwrap()
}

#[test]
fn unlink_and_async_flushes_count_what_redis_would_free_in_the_background() {
    let (_d, mut s) = session();
    let many: Vec<String> = (0..600).map(|i| i.to_string()).collect();
    let sadd = |s: &mut Session, key: &str, n: usize| {
        let mut args = vec!["SADD", key];
        args.extend(many[..n].iter().map(String::as_str));
        run(s, &args)
    };
    // 600 integers: a hash table in Redis (freed lazily); 100: an intset (one allocation).
    sadd(&mut s, "big", 600);
    sadd(&mut s, "small", 100);
    sadd(&mut s, "deleted", 600);
    assert_eq!(run(&mut s, &["DEL", "deleted"]), Reply::Integer(1));
    assert_eq!(lazyfreed(&mut s), 0, "DEL frees at once (lazyfree-lazy-user-del no)");
    assert_eq!(run(&mut s, &["UNLINK", "big", "small", "missing"]), Reply::Integer(2));
    assert_eq!(lazyfreed(&mut s), 1);
    // A stream of 200 nodes of 5 entries is freed lazily; one of a single entry is not.
    run(&mut s, &["CONFIG", "SET", "stream-node-max-entries", "5"]);
    for _ in 0..1000 {
        run(&mut s, &["XADD", "st", "*", "f", "v"]);
    }
    run(&mut s, &["XADD", "one", "*", "f", "v"]);
    assert_eq!(run(&mut s, &["UNLINK", "st", "one"]), Reply::Integer(2));
    assert_eq!(lazyfreed(&mut s), 2);
    // FLUSHALL ASYNC counts every key it drops; SYNC none.
    run(&mut s, &["SET", "a", "1"]);
    run(&mut s, &["SELECT", "3"]);
    run(&mut s, &["SET", "b", "1"]);
    assert_eq!(run(&mut s, &["FLUSHALL", "ASYNC"]), Reply::ok());
    assert_eq!(lazyfreed(&mut s), 4);
    run(&mut s, &["SET", "c", "1"]);
    assert_eq!(run(&mut s, &["FLUSHDB", "SYNC"]), Reply::ok());
    assert_eq!(lazyfreed(&mut s), 4);
    assert_eq!(run(&mut s, &["CONFIG", "RESETSTAT"]), Reply::ok());
    assert_eq!(lazyfreed(&mut s), 0);
}

#[test]
fn geosearch_reads_its_cells_with_one_cursor_and_sees_a_transactions_own_writes() {
    let (_d, mut s) = session();
    let bulks = |r: &Reply| -> std::collections::BTreeSet<String> {
        let Reply::Array(items) = r else { panic!("not an array: {r:?}") };
        items
            .iter()
            .map(|i| match i {
                Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    run(&mut s, &["geoadd", "g", "0", "0", "origin"]);
    for lon in -12..=12 {
        for lat in -12..=12 {
            run(
                &mut s,
                &[
                    "geoadd",
                    "g",
                    &format!("{}", lon as f64 * 0.5),
                    &format!("{}", lat as f64 * 0.5),
                    &format!("p{lon}_{lat}"),
                ],
            );
        }
    }
    // Every member within 400 km of the origin, as GEODIST measures it.
    let mut want = std::collections::BTreeSet::new();
    for lon in -12..=12 {
        for lat in -12..=12 {
            let m = format!("p{lon}_{lat}");
            let Reply::Bulk(d) = run(&mut s, &["geodist", "g", "origin", &m, "km"]) else { panic!() };
            if std::str::from_utf8(&d).unwrap().parse::<f64>().unwrap() <= 400.0 {
                want.insert(m);
            }
        }
    }
    want.insert("origin".into());
    assert!(want.len() > 50 && want.len() < 625, "a radius that cuts the grid: {}", want.len());
    let got = bulks(&run(&mut s, &["geosearch", "g", "frommember", "origin", "byradius", "400", "km"]));
    assert_eq!(got, want);
    assert_eq!(bulks(&run(&mut s, &["georadius_ro", "g", "0", "0", "400", "km"])), want);
    // Inside a transaction the search sees what the transaction added and removed.
    run(&mut s, &["multi"]);
    run(&mut s, &["geoadd", "g", "0.25", "0.25", "newcomer"]);
    run(&mut s, &["zrem", "g", "p0_0"]);
    run(&mut s, &["geosearch", "g", "fromlonlat", "0", "0", "byradius", "400", "km"]);
    let Reply::Array(replies) = run(&mut s, &["exec"]) else { panic!() };
    let mut inside = want.clone();
    inside.insert("newcomer".into());
    inside.remove("p0_0");
    assert_eq!(bulks(&replies[2]), inside);
    assert_eq!(bulks(&run(&mut s, &["geosearch", "g", "fromlonlat", "0", "0", "byradius", "400", "km"])), inside);
    // COUNT ANY stops at the count, whichever cells the members are in.
    let any =
        bulks(&run(&mut s, &["geosearch", "g", "fromlonlat", "0", "0", "byradius", "400", "km", "count", "7", "any"]));
    assert!(any.len() == 7 && any.is_subset(&inside), "{any:?}");
}

#[test]
fn pfadd_and_pfcount_edit_a_dense_hll_in_place_with_redis_bytes() {
    use crate::hyperloglog::Hll;
    let (_d, mut s) = session();
    let mut model: Option<Hll> = None;
    let mut next = 0u32;
    for round in 0..400 {
        // Batches that grow, then single elements: the sparse form turns dense on the way.
        let n = if round < 60 { 100 } else { 1 + round % 3 };
        let elements: Vec<String> = (0..n)
            .map(|_| {
                next += 1;
                format!("element:{}", next.wrapping_mul(2_654_435_761) % 50_000)
            })
            .collect();
        let mut args = vec!["PFADD", "h"];
        args.extend(elements.iter().map(String::as_str));
        let hll = model.get_or_insert_with(Hll::new);
        let mut changed = round == 0;
        for e in &elements {
            changed |= hll.add(e.as_bytes(), 3000).unwrap();
        }
        if changed {
            hll.invalidate();
        }
        assert_eq!(run(&mut s, &args), Reply::Integer(i64::from(changed)), "round {round}");
        if round % 7 == 3 {
            let (card, _) = hll.count().unwrap();
            assert_eq!(run(&mut s, &["PFCOUNT", "h"]), Reply::Integer(card as i64), "round {round}");
        }
        if round % 50 == 49 {
            assert_eq!(
                run(&mut s, &["GET", "h"]),
                Reply::bulk(Bytes::copy_from_slice(hll.as_bytes())),
                "round {round}"
            );
        }
    }
    // The last register ends in the value's last byte: its edit must not lengthen the value.
    let mut hll = model.unwrap();
    let last = (0..)
        .map(|i| format!("last:{i}"))
        .find(|e| crate::hyperloglog::pattern(e.as_bytes()) == (crate::hyperloglog::REGISTERS - 1, 1))
        .unwrap();
    let changed = hll.add(last.as_bytes(), 3000).unwrap();
    hll.invalidate();
    assert_eq!(run(&mut s, &["PFADD", "h", &last]), Reply::Integer(i64::from(changed)));
    assert!(!hll.is_sparse());
    assert_eq!(run(&mut s, &["GET", "h"]), Reply::bulk(Bytes::copy_from_slice(hll.as_bytes())));
    // Edited in place: the value now lives in segments.
    let meta = s.state.storage.get(&s.exec, s.db, b"h").unwrap().unwrap();
    assert!(meta.is_segmented(), "a dense HLL's PFADD writes segments");
    assert_eq!(meta.segment_size(), crate::storage::HLL_SEGMENT, "small ones: a PFADD rewrites one");
    // A dense-sized string that is not an HLL is refused as before.
    run(&mut s, &["SET", "x", &"x".repeat(crate::hyperloglog::DENSE_SIZE)]);
    assert_eq!(
        run(&mut s, &["PFADD", "x", "a"]),
        Reply::error("WRONGTYPE Key is not a valid HyperLogLog string value.")
    );
    assert_eq!(run(&mut s, &["PFCOUNT", "x"]), Reply::error("WRONGTYPE Key is not a valid HyperLogLog string value."));
}

#[test]
fn keyspace_counts_take_each_keys_last_write_in_a_batch() {
    let (_d, mut s) = session();
    assert_eq!(run(&mut s, &["MSET", "k1", "a", "k2", "b", "k1", "c"]), Reply::ok());
    assert_eq!(run(&mut s, &["DBSIZE"]), Reply::Integer(2));
    assert_eq!(run(&mut s, &["GET", "k1"]), Reply::bulk(&b"c"[..]));
    for cmd in [&["MULTI"][..], &["SET", "k3", "x"], &["DEL", "k3"], &["SET", "k4", "y", "EX", "100"], &["DEL", "k1"]] {
        run(&mut s, cmd);
    }
    assert!(matches!(run(&mut s, &["EXEC"]), Reply::Array(r) if r.len() == 4));
    assert_eq!(run(&mut s, &["DBSIZE"]), Reply::Integer(2));
    // A database emptied inside the batch, then written again.
    for cmd in [&["MULTI"][..], &["SET", "k5", "x"], &["FLUSHDB"], &["SET", "k6", "y"], &["SET", "k6", "z"]] {
        run(&mut s, cmd);
    }
    assert!(matches!(run(&mut s, &["EXEC"]), Reply::Array(r) if r.len() == 4));
    assert_eq!(run(&mut s, &["DBSIZE"]), Reply::Integer(1));
    let info = format!("{:?}", run(&mut s, &["INFO", "keyspace"]));
    assert!(info.contains("db0:keys=1,expires=0"), "{info}");
}

/// Runs of pops in one transaction read on from where the pop before stood (one engine range
/// instead of a point read each): every pop, push and move of a random mix, inside and outside
/// transactions, on lists whose elements are partly on disk, answers as a model list does.
#[test]
fn list_pops_in_transactions_match_a_model() {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::collections::VecDeque;
    let (_d, mut s) = session();
    let mut rng = StdRng::seed_from_u64(5);
    let mut model: [VecDeque<String>; 2] = [VecDeque::new(), VecDeque::new()];
    let names = ["a", "b"];
    let mut next = 0u32;
    for _ in 0..300 {
        let in_multi = rng.random_bool(0.7);
        if in_multi {
            assert_eq!(run(&mut s, &["multi"]), Reply::ok());
        }
        let mut expected = Vec::new();
        for _ in 0..rng.random_range(1..40) {
            let l = rng.random_range(0..2);
            let left = rng.random_bool(0.5);
            let reply = match rng.random_range(0..10) {
                0..=2 => {
                    let values: Vec<String> =
                        (0..rng.random_range(1..6)).map(|_| (next, next += 1).0.to_string()).collect();
                    for v in &values {
                        if left {
                            model[l].push_front(v.clone())
                        } else {
                            model[l].push_back(v.clone())
                        }
                    }
                    let mut args = vec![if left { "lpush" } else { "rpush" }, names[l]];
                    args.extend(values.iter().map(String::as_str));
                    expected.push(Reply::Integer(model[l].len() as i64));
                    run(&mut s, &args)
                }
                3..=7 => {
                    let got = if left { model[l].pop_front() } else { model[l].pop_back() };
                    expected.push(got.map_or(Reply::Null, |v| Reply::bulk(v.clone())));
                    run(&mut s, &[if left { "lpop" } else { "rpop" }, names[l]])
                }
                8 => {
                    let n = rng.random_range(0..8);
                    let had = !model[l].is_empty();
                    let got: Vec<Reply> = (0..n)
                        .map_while(|_| if left { model[l].pop_front() } else { model[l].pop_back() })
                        .map(|v| Reply::bulk(v.clone()))
                        .collect();
                    expected.push(if had { Reply::Array(got) } else { Reply::NullArray });
                    run(&mut s, &[if left { "lpop" } else { "rpop" }, names[l], &n.to_string()])
                }
                _ => {
                    let to_left = rng.random_bool(0.5);
                    let got = if left { model[l].pop_front() } else { model[l].pop_back() };
                    if let Some(v) = &got {
                        if to_left {
                            model[1 - l].push_front(v.clone())
                        } else {
                            model[1 - l].push_back(v.clone())
                        }
                    }
                    expected.push(got.map_or(Reply::Null, |v| Reply::bulk(v.clone())));
                    let side = |left: bool| if left { "left" } else { "right" };
                    run(&mut s, &["lmove", names[l], names[1 - l], side(left), side(to_left)])
                }
            };
            if in_multi {
                assert_eq!(reply, Reply::Simple("QUEUED".into()));
            } else {
                assert_eq!(reply, expected.pop().unwrap());
            }
        }
        if in_multi {
            assert_eq!(run(&mut s, &["exec"]), Reply::Array(expected));
        }
        if rng.random_ratio(1, 20) {
            // Elements on disk as well as in the memtable.
            s.state.storage.engine().flush().unwrap();
        }
    }
    for l in 0..2 {
        let want: Vec<Reply> = model[l].iter().map(|v| Reply::bulk(v.clone())).collect();
        assert_eq!(run(&mut s, &["lrange", names[l], "0", "-1"]), Reply::Array(want));
    }
}

/// Reads of keys a command is about to write (an INCR's read of the old value, the keyspace
/// counts' check before a SET) leave no rows in the engine's row cache, where they would never
/// answer again; a GET's read keeps its row.
#[test]
fn only_reads_keep_rows_in_the_row_cache() {
    let dir = tempfile::tempdir().unwrap();
    let db = lsm::Db::open(dir.path(), lsm::Options::default().row_cache_size(1 << 20)).unwrap();
    let mut s = Session::new(Arc::new(ServerState::new(Config::default(), db.clone()).unwrap()));
    for i in 0..50 {
        assert_eq!(run(&mut s, &["SET", &format!("k{i}"), "1"]), Reply::ok());
    }
    db.flush().unwrap();
    for i in 0..50 {
        assert_eq!(run(&mut s, &["INCR", &format!("k{i}")]), Reply::Integer(2));
    }
    db.flush().unwrap();
    for i in 0..50 {
        assert_eq!(run(&mut s, &["SET", &format!("k{i}"), "3"]), Reply::ok());
    }
    assert_eq!(db.stats().row_cache_bytes, 0, "writes' reads keep no rows");
    db.flush().unwrap();
    assert_eq!(run(&mut s, &["GET", "k7"]), Reply::Bulk(Bytes::from_static(b"3")));
    assert!(db.stats().row_cache_bytes > 0, "a GET keeps its row");
}
