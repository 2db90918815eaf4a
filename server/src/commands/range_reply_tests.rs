//! Whole-collection replies (HKEYS, HVALS, HGETALL, SMEMBERS), framed as the engine hands
//! members out, against every path that reads them.

use super::tests::{run, session};
use crate::resp::{Protocol, Reply};

/// HKEYS, HVALS, HGETALL and SMEMBERS frame members straight from the engine cursor (or, in a
/// transaction, from the merged range): a compact hash in insertion order, a hash table and a
/// set in pick order, the same whichever path reads them, in RESP2 and RESP3.
#[test]
fn whole_collection_replies_read_the_same_on_every_path() {
    let (_d, mut s) = session();
    let strings = |r: Reply| -> Vec<String> {
        r.into_items()
            .unwrap()
            .into_iter()
            .map(|i| match i {
                Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
                other => panic!("not a bulk: {other:?}"),
            })
            .collect()
    };
    for i in (0..20).rev() {
        run(&mut s, &["hset", "h", &format!("f{i}"), &format!("v{i}")]);
        run(&mut s, &["sadd", "s", &format!("m{i}")]);
    }
    let fields: Vec<String> = (0..20).rev().map(|i| format!("f{i}")).collect();
    assert_eq!(strings(run(&mut s, &["hkeys", "h"])), fields, "a compact hash lists fields as added");
    assert_eq!(strings(run(&mut s, &["hvals", "h"]))[0], "v19");
    let Reply::Bulks(all) = run(&mut s, &["hgetall", "h"]) else { panic!("framed") };
    let Reply::Map(pairs) = all.into_reply() else { panic!("a map") };
    assert_eq!(pairs.len(), 20);
    assert_eq!(pairs[0], (Reply::bulk("f19"), Reply::bulk("v19")));
    let members = strings(run(&mut s, &["smembers", "s"]));
    assert_eq!(members.iter().collect::<std::collections::BTreeSet<_>>().len(), 20);
    // The same replies from inside a transaction, whose writes only the merged range sees.
    run(&mut s, &["multi"]);
    run(&mut s, &["hkeys", "h"]);
    run(&mut s, &["smembers", "s"]);
    run(&mut s, &["hset", "h", "late", "x"]);
    run(&mut s, &["hkeys", "h"]);
    let Reply::Array(replies) = run(&mut s, &["exec"]) else { panic!() };
    let mut replies = replies.into_iter();
    assert_eq!(strings(replies.next().unwrap()), fields);
    assert_eq!(strings(replies.next().unwrap()), members);
    replies.next();
    assert_eq!(strings(replies.next().unwrap()).last().map(String::as_str), Some("late"));
    // Past hash-max-listpack-entries the hash is a table: pick order, every field once.
    run(&mut s, &["config", "set", "hash-max-listpack-entries", "4"]);
    run(&mut s, &["hset", "h", "big", "y"]);
    let keys = strings(run(&mut s, &["hkeys", "h"]));
    assert_eq!(keys.iter().collect::<std::collections::BTreeSet<_>>().len(), 22);
    let resp3 = run(&mut s, &["hgetall", "h"]).to_bytes(Protocol::Resp3);
    assert!(resp3.starts_with(b"%22\r\n$"), "{:?}", &resp3[..8]);
    assert!(run(&mut s, &["smembers", "s"]).to_bytes(Protocol::Resp3).starts_with(b"~20\r\n$"));
    assert!(run(&mut s, &["smembers", "s"]).to_bytes(Protocol::Resp2).starts_with(b"*20\r\n$"));
}
