use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::config::Config;
use crate::resp::{Protocol, Reply};
use crate::state::ServerState;

pub(super) fn session() -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    (dir, Session::new(Arc::new(ServerState::new(Config::default(), db).unwrap())))
}

pub(super) fn run(s: &mut Session, args: &[&str]) -> Reply {
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
    dispatch(s, &args)
}

#[test]
fn lookup_finds_every_command_in_any_case_and_nothing_else() {
    for spec in all() {
        let name = spec.name.as_bytes();
        let upper = spec.name.to_ascii_uppercase();
        let mixed: String =
            spec.name.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        for n in [name, upper.as_bytes(), mixed.as_bytes()] {
            assert!(lookup(n).is_some_and(|found| std::ptr::eq(found, spec)), "{}", String::from_utf8_lossy(n));
        }
        // Not a command: the name with a byte more or less, or a NUL in place of padding.
        let mut longer = name.to_vec();
        longer.push(0);
        assert!(lookup(&longer).is_none(), "{}\\0", spec.name);
        longer.pop();
        longer.push(b'x');
        assert!(lookup(&longer).is_none() || all().iter().any(|c| c.name.as_bytes() == &longer[..]));
        if name.len() > 1 && !all().iter().any(|c| c.name.as_bytes() == &name[..name.len() - 1]) {
            assert!(lookup(&name[..name.len() - 1]).is_none(), "{}", spec.name);
        }
    }
    assert!(all().iter().any(|c| c.name.len() > SHORT_NAME), "both tables are used");
    for absent in [&b""[..], b"\0", b"g", b"gett", b"zremrangebyscorx", b"\xffget", b"get\0\0\0\0\0\0\0\0\0\0\0\x13"] {
        assert!(lookup(absent).is_none(), "{absent:?}");
    }
}

#[test]
fn word_lowercasing_matches_byte_lowercasing_for_every_byte_in_every_position() {
    for b in 0..=255u8 {
        for pos in 0..8 {
            // The byte among neighbours that are upper case, lower case and non-ASCII.
            for fill in [b'Q', b'q', 0xc3, 0] {
                let mut bytes = [fill; 8];
                bytes[pos] = b;
                let want = bytes.map(|c| c.to_ascii_lowercase());
                assert_eq!(super::lowercase_word(u64::from_le_bytes(bytes)), u64::from_le_bytes(want), "{bytes:?}");
            }
        }
    }
}

#[test]
fn dispatch_checks_names_and_arity_like_redis() {
    let (_d, mut s) = session();
    assert_eq!(run(&mut s, &["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(run(&mut s, &["ping", "hi"]), Reply::bulk(&b"hi"[..]));
    assert_eq!(run(&mut s, &["PiNg", "a", "b"]), Reply::error("ERR wrong number of arguments for 'ping' command"));
    assert_eq!(run(&mut s, &["echo"]), Reply::error("ERR wrong number of arguments for 'echo' command"));
    assert_eq!(
        run(&mut s, &["foo", "a", "b"]),
        Reply::error("ERR unknown command 'foo', with args beginning with: 'a' 'b' ")
    );
    assert_eq!(run(&mut s, &["foo"]), Reply::error("ERR unknown command 'foo', with args beginning with: "));
    // Past the table's arity, each command words its own error as Redis does.
    assert_eq!(run(&mut s, &["lpop", "l", "1", "2"]), Reply::error("ERR wrong number of arguments for 'lpop' command"));
    assert_eq!(run(&mut s, &["spop", "s", "1", "2"]), Reply::error("ERR syntax error"));
}

#[test]
fn select_and_hello_change_the_session() {
    let (_d, mut s) = session();
    assert_eq!(run(&mut s, &["select", "15"]), Reply::ok());
    assert_eq!(s.db, 15);
    assert_eq!(run(&mut s, &["select", "16"]), Reply::error("ERR DB index is out of range"));
    assert_eq!(run(&mut s, &["select", "x"]), Reply::error("ERR value is not an integer or out of range"));
    assert_eq!(run(&mut s, &["hello", "4"]), Reply::error("NOPROTO unsupported protocol version"));
    let Reply::Map(fields) = run(&mut s, &["hello", "3", "setname", "me"]) else { panic!("HELLO replies with a map") };
    assert!(fields.contains(&(Reply::bulk(&b"proto"[..]), Reply::Integer(3))));
    assert_eq!((s.protocol, s.handle.name.lock().unwrap().as_deref()), (Protocol::Resp3, Some(&b"me"[..])));
    assert!(matches!(run(&mut s, &["hello", "2", "bogus"]), Reply::Error(e) if e.starts_with("ERR Syntax error")));
    assert_eq!(run(&mut s, &["quit"]), Reply::ok());
    assert!(s.closing);
}

#[test]
fn command_describes_the_table() {
    let (_d, mut s) = session();
    let count = all().len() as i64;
    assert_eq!(run(&mut s, &["command", "count"]), Reply::Integer(count));
    let Reply::Array(info) = run(&mut s, &["command", "info", "get-not-here", "ping"]) else { panic!() };
    assert_eq!(info[0], Reply::NullArray);
    let Reply::Array(ping) = &info[1] else { panic!() };
    assert_eq!((ping.len(), &ping[0], &ping[1]), (10, &Reply::bulk(&b"ping"[..]), &Reply::Integer(-1)));
    assert!(matches!(run(&mut s, &["command", "nope"]), Reply::Error(e) if e.contains("Try COMMAND HELP")));
}

/// The work a pop or a random pick does must not grow with the pops before it: counted in
/// engine entries examined (`INFO lsm` `lsm_iter_entries`), not in time.
mod costs {
    use super::*;

    /// Engine entries examined while running `args` `times` times.
    fn entries_for(s: &mut Session, times: usize, args: &[&str]) -> u64 {
        let before = s.state.storage.engine().stats().iter_entries;
        for _ in 0..times {
            let r = run(s, args);
            assert!(!matches!(r, Reply::Error(_)), "{args:?}: {r:?}");
        }
        s.state.storage.engine().stats().iter_entries - before
    }

    fn scale() -> usize {
        std::env::var("SHALE_QUEUE_ITEMS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
    }

    /// Pops are compared over windows of a tenth of the items: a window may include rewriting
    /// the collection (every `2 × count` removals, see `Header::needs_rebuild`), whose cost is
    /// spread over the pops that made it due, so the bound is a small factor, not equality.
    #[test]
    fn popping_a_sorted_set_from_either_end_costs_the_same_at_the_end_as_at_the_start() {
        let (_d, mut s) = session();
        let n = scale();
        let w = n / 10;
        for i in 0..n {
            run(&mut s, &["zadd", "q", &i.to_string(), &format!("m{i}")]);
        }
        let first = entries_for(&mut s, w, &["zpopmin", "q"]);
        entries_for(&mut s, n / 2 - 2 * w, &["zpopmin", "q"]);
        let last = entries_for(&mut s, w, &["zpopmin", "q"]);
        assert!(last <= first * 4, "ZPOPMIN: {first} entries for the first {w} pops, {last} for the last");
        let first = entries_for(&mut s, w, &["zpopmax", "q"]);
        entries_for(&mut s, n / 2 - 2 * w, &["zpopmax", "q"]);
        let last = entries_for(&mut s, w, &["zpopmax", "q"]);
        assert!(last <= first * 4, "ZPOPMAX: {first} entries for the first {w} pops, {last} for the last");
        assert_eq!(run(&mut s, &["zcard", "q"]), Reply::Integer(0));
    }

    #[test]
    fn a_sorted_set_used_as_a_queue_keeps_its_pop_cost() {
        let (_d, mut s) = session();
        for i in 0..1000 {
            run(&mut s, &["zadd", "q", &i.to_string(), &format!("m{i}")]);
        }
        let mut next = 1000;
        let mut cost = |s: &mut Session| {
            let before = s.state.storage.engine().stats().iter_entries;
            for _ in 0..1000 {
                run(s, &["zadd", "q", &next.to_string(), &format!("m{next}")]);
                let Reply::Array(popped) = run(s, &["zpopmin", "q"]) else { panic!() };
                assert_eq!(popped[0], Reply::bulk(Bytes::from(format!("m{}", next - 1000))));
                next += 1;
            }
            s.state.storage.engine().stats().iter_entries - before
        };
        let first: u64 = (0..10).map(|_| cost(&mut s)).sum();
        for _ in 0..scale() / 1000 {
            cost(&mut s);
        }
        let last: u64 = (0..10).map(|_| cost(&mut s)).sum();
        assert!(last <= first * 4, "queue pops: {first} entries at the start, {last} at the end");
    }

    #[test]
    fn spop_and_srandmember_cost_the_same_on_a_drained_set() {
        let (_d, mut s) = session();
        let n = scale();
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let mut args = vec!["sadd".to_string(), "s".into()];
            args.extend(chunk.iter().map(|i| format!("m{i}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&mut s, &args);
        }
        let w = n / 10;
        let first = entries_for(&mut s, w, &["spop", "s"]);
        let first_rand = entries_for(&mut s, w, &["srandmember", "s"]);
        // Drain to a tenth, then measure again.
        entries_for(&mut s, n * 8 / 10 - w, &["spop", "s"]);
        let last = entries_for(&mut s, w, &["spop", "s"]);
        let last_rand = entries_for(&mut s, w, &["srandmember", "s"]);
        assert!(first < w as u64 * 300, "SPOP examined {first} entries for {w} pops");
        assert!(last <= first * 4, "SPOP: {first} entries for {w} pops of a full set, {last} as it empties");
        assert!(last_rand <= first_rand * 4, "SRANDMEMBER: {first_rand} entries, then {last_rand}");
        assert_eq!(run(&mut s, &["scard", "s"]), Reply::Integer(w as i64));
    }

    #[test]
    fn lists_pop_from_both_ends_at_a_constant_cost() {
        let (_d, mut s) = session();
        let n = scale();
        for i in 0..n {
            run(&mut s, &["rpush", "l", &i.to_string()]);
        }
        let first = entries_for(&mut s, 1000, &["lpop", "l"]) + entries_for(&mut s, 1000, &["rpop", "l"]);
        entries_for(&mut s, n / 2 - 3000, &["lpop", "l"]);
        entries_for(&mut s, n / 2 - 3000, &["rpop", "l"]);
        let last = entries_for(&mut s, 1000, &["lpop", "l"]) + entries_for(&mut s, 1000, &["rpop", "l"]);
        assert!(last <= first * 2 + 1000, "list pops: {first} entries, then {last}");
        let rest = run(&mut s, &["lrange", "l", "0", "-1"]).into_items().unwrap();
        assert_eq!(rest.len(), 2000);
    }

    /// A transaction's (or write group's) run of pops from one end of a list reads its elements
    /// with one engine range, not a point read (a bloom check of each table) per pop.
    #[test]
    fn a_run_of_list_pops_reads_one_range() {
        let (_d, mut s) = session();
        for i in 0..1000 {
            run(&mut s, &["rpush", "l", &i.to_string()]);
        }
        s.state.storage.engine().flush().unwrap();
        let point_reads = |s: &Session| s.state.storage.engine().stats().bloom_checks;
        for (pop, first) in [("lpop", 0), ("rpop", 999)] {
            run(&mut s, &["multi"]);
            for _ in 0..200 {
                run(&mut s, &[pop, "l"]);
            }
            let before = point_reads(&s);
            let Reply::Array(popped) = run(&mut s, &["exec"]) else { panic!() };
            let checks = point_reads(&s) - before;
            assert!(checks <= 3, "{pop}: {checks} point reads of the table for 200 pops");
            let step = if pop == "lpop" { 1 } else { -1 };
            for (j, r) in popped.iter().enumerate() {
                assert_eq!(r, &Reply::bulk((first + step * j as i64).to_string()));
            }
        }
    }

    /// A collection rewritten under a fresh incarnation (removals > 2 × members) keeps exactly
    /// its members, inside a transaction too.
    #[test]
    fn rewritten_collections_keep_their_members() {
        let (_d, mut s) = session();
        let mut model = std::collections::BTreeSet::new();
        for i in 0..2000 {
            run(&mut s, &["sadd", "s", &format!("m{i}")]);
            run(&mut s, &["hset", "h", &format!("f{i}"), &i.to_string()]);
            run(&mut s, &["zadd", "z", &i.to_string(), &format!("m{i}")]);
            model.insert(format!("m{i}"));
        }
        run(&mut s, &["multi"]);
        for i in 0..1900 {
            run(&mut s, &["srem", "s", &format!("m{i}")]);
            run(&mut s, &["hdel", "h", &format!("f{i}")]);
            run(&mut s, &["zrem", "z", &format!("m{i}")]);
            model.remove(&format!("m{i}"));
        }
        run(&mut s, &["sadd", "s", "late"]);
        run(&mut s, &["exec"]);
        model.insert("late".into());
        let members = run(&mut s, &["smembers", "s"]).into_items().unwrap();
        let got: std::collections::BTreeSet<String> = members
            .iter()
            .map(|r| match r {
                Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
                _ => panic!(),
            })
            .collect();
        assert_eq!(got, model);
        assert_eq!(run(&mut s, &["hlen", "h"]), Reply::Integer(100));
        assert_eq!(run(&mut s, &["hget", "h", "f1950"]), Reply::bulk(&b"1950"[..]));
        assert_eq!(run(&mut s, &["zcard", "z"]), Reply::Integer(100));
        assert_eq!(run(&mut s, &["zscore", "z", "m1999"]), Reply::Double(1999.0));
        let Reply::Array(first) = run(&mut s, &["zpopmin", "z"]) else { panic!() };
        assert_eq!(first[0], Reply::bulk(&b"m1900"[..]));
        // Random picks see the rewritten members only.
        for _ in 0..200 {
            let Reply::Bulk(m) = run(&mut s, &["srandmember", "s"]) else { panic!() };
            assert!(model.contains(std::str::from_utf8(&m).unwrap()));
        }
        let Reply::Pairs(fields) = run(&mut s, &["hrandfield", "h", "-50", "withvalues"]) else { panic!() };
        assert_eq!(fields.len(), 50);
        // Picks inside a transaction read through its buffer (bucket reads, 101 members).
        run(&mut s, &["multi"]);
        for _ in 0..30 {
            run(&mut s, &["spop", "s"]);
        }
        let Reply::Array(popped) = run(&mut s, &["exec"]) else { panic!() };
        let popped: std::collections::BTreeSet<String> = popped
            .iter()
            .map(|r| match r {
                Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(popped.len(), 30, "30 distinct members popped inside one transaction");
        assert!(popped.is_subset(&model));
        assert_eq!(run(&mut s, &["scard", "s"]), Reply::Integer(71));
    }
}

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
fn key_positions_follow_the_table() {
    let positions = |name: &str, argc: usize| lookup(name.as_bytes()).unwrap().key_positions(argc).collect::<Vec<_>>();
    assert_eq!(positions("get", 2), [1]);
    assert_eq!(positions("mset", 7), [1, 3, 5], "first to last by step");
    assert_eq!(positions("del", 4), [1, 2, 3], "last key -1: to the end");
    assert_eq!(positions("ping", 1), Vec::<usize>::new(), "no keys");
    assert_eq!(positions("get", 1), Vec::<usize>::new(), "never past the arguments");
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
fn flag_bits_and_known_entries_agree_with_the_names() {
    for c in all() {
        for &(name, bit) in flag::NAMES {
            assert_eq!(c.has(bit), c.flags.contains(&name), "{} {name}", c.name);
        }
        assert_eq!(c.has(flag::GROUPABLE), crate::exec::write_group::GROUPABLE.contains(&c.name), "{}", c.name);
        assert_eq!(c.has(flag::NOT_ON_TASK), crate::exec::queued::NOT_HERE.contains(&c.name), "{}", c.name);
        assert_eq!(c.has(flag::MEMORY_READ), crate::exec::in_memory::MEMORY_READS.contains(&c.name), "{}", c.name);
        let known = lookup(c.name.as_bytes()).unwrap().known();
        assert_eq!(known.acl.name, c.name);
        assert_eq!(known.redis.map(|r| r.name), meta::redis_command(c.name).map(|r| r.name));
    }
    // Every listed name is a command, so no bit is silently missing.
    let lists =
        [crate::exec::write_group::GROUPABLE, crate::exec::queued::NOT_HERE, crate::exec::in_memory::MEMORY_READS];
    for name in lists.concat() {
        assert!(lookup(name.as_bytes()).is_some(), "{name}");
    }
    assert!(lookup(b"GeT").unwrap().has(flag::READONLY | flag::FAST));
    assert!(!lookup(b"get").unwrap().has(flag::READONLY | flag::WRITE));
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
