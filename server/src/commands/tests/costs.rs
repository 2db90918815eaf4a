//! The work a pop or a random pick does must not grow with the pops before it: counted in
//! engine entries examined (`INFO lsm` `lsm_iter_entries`), not in time.

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
