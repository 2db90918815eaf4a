//! Consumer groups in write groups against a real `shale-server`: XREADGROUP without BLOCK
//! joins pipelined and combined write groups, reads through the group's buffered writes, and
//! with many pipelining consumers still delivers each entry once.

mod common;

use common::Server;
use redis::{cmd, Value};

/// `(id, [field, value, …])` entries of an XRANGE-style reply.
type Entries = Vec<(String, Vec<String>)>;

/// `(key, entries)` of an XREADGROUP reply (nil when nothing came).
type Read = Option<Vec<(String, Entries)>>;

/// XREADGROUP without BLOCK runs in write groups (pipelined, and combined across clients):
/// inside one pipeline each read sees the entry the XADD before it added, XACKs in the same
/// pipeline acknowledge what the reads before them delivered, and eight clients pipelining
/// reads and acknowledgements take every entry exactly once, leaving nothing pending.
#[test]
fn pipelined_group_reads_see_the_writes_before_them_and_deliver_each_entry_once() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    let server = Server::start(&[]);
    let mut c = server.client();
    cmd("XGROUP").arg("CREATE").arg("q").arg("g").arg("$").arg("MKSTREAM").query::<()>(&mut c).unwrap();
    let read = |consumer: &str| {
        let mut r = cmd("XREADGROUP");
        r.arg("GROUP").arg("g").arg(consumer).arg("COUNT").arg(1).arg("STREAMS").arg("q").arg(">");
        r
    };
    let mut pipe = redis::pipe();
    for i in 1..=3 {
        pipe.cmd("XADD").arg("q").arg(format!("{i}-1")).arg("n").arg(i);
        pipe.add_command(read("alice"));
        pipe.cmd("XACK").arg("q").arg("g").arg(format!("{i}-1"));
    }
    pipe.add_command(read("alice"));
    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
    for i in 0..3 {
        let id = format!("{}-1", i + 1);
        assert_eq!(replies[3 * i], Value::BulkString(id.clone().into_bytes()));
        let got: Read = redis::from_redis_value(&replies[3 * i + 1]).unwrap();
        let entries = got.unwrap().pop().unwrap().1;
        assert_eq!(entries, vec![(id, vec!["n".to_string(), (i + 1).to_string()])]);
        assert_eq!(replies[3 * i + 2], Value::Int(1));
    }
    assert_eq!(replies[9], Value::Nil, "nothing new is left");
    let pending: (u64, Value, Value, Value) = cmd("XPENDING").arg("q").arg("g").query(&mut c).unwrap();
    assert_eq!(pending.0, 0);

    const ENTRIES: usize = 2000;
    let mut adds = redis::pipe();
    for i in 0..ENTRIES {
        adds.cmd("XADD").arg("q").arg("*").arg("n").arg(i).ignore();
    }
    adds.query::<()>(&mut c).unwrap();
    let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
    let consumers: Vec<_> = (0..8)
        .map(|n| {
            let (mut c, seen) = (server.client(), Arc::clone(&seen));
            std::thread::spawn(move || loop {
                let me = format!("c{n}");
                let mut reads = redis::pipe();
                for _ in 0..16 {
                    reads.add_command(read(&me));
                }
                let got: Vec<Read> = reads.query(&mut c).unwrap();
                let ids: Vec<String> =
                    got.into_iter().flatten().flat_map(|mut s| s.pop().unwrap().1).map(|e| e.0).collect();
                if ids.is_empty() {
                    return;
                }
                let mut acks = redis::pipe();
                for id in &ids {
                    acks.cmd("XACK").arg("q").arg("g").arg(id);
                }
                let acked: Vec<u64> = acks.query(&mut c).unwrap();
                assert!(acked.iter().all(|&a| a == 1), "{acked:?}");
                let mut seen = seen.lock().unwrap();
                for id in ids {
                    assert!(seen.insert(id.clone()), "{id} delivered twice");
                }
            })
        })
        .collect();
    for t in consumers {
        t.join().unwrap();
    }
    assert_eq!(seen.lock().unwrap().len(), ENTRIES);
    let pending: (u64, Value, Value, Value) = cmd("XPENDING").arg("q").arg("g").query(&mut c).unwrap();
    assert_eq!(pending.0, 0);
}

/// Stream `s` with an entry at each of `ids` (field `n`, numbered from 1) and group `g` from
/// its start.
fn stream_with_group(c: &mut redis::Connection, ids: impl Iterator<Item = String>) {
    for (n, id) in ids.enumerate() {
        cmd("XADD").arg("s").arg(id).arg("n").arg(n + 1).query::<String>(c).unwrap();
    }
    cmd("XGROUP").arg("CREATE").arg("s").arg("g").arg("0").query::<()>(c).unwrap();
}

/// A transaction's XREADGROUPs of one stream go on from where the one before stopped (the
/// engine range is parked between them): committed entries come in order with none skipped
/// or repeated, and an entry the transaction itself added comes after them.
#[test]
fn group_reads_in_one_transaction_go_on_from_each_other() {
    let server = Server::start(&[]);
    let mut c = server.client();
    stream_with_group(&mut c, (1..=5).map(|i| format!("{i}-0")));
    let read = |count: usize| {
        let mut r = cmd("XREADGROUP");
        r.arg("GROUP").arg("g").arg("c").arg("COUNT").arg(count).arg("STREAMS").arg("s").arg(">");
        r
    };
    let mut pipe = redis::pipe();
    pipe.atomic();
    pipe.add_command(read(2));
    pipe.cmd("XADD").arg("s").arg("6-0").arg("n").arg(6);
    for _ in 0..5 {
        pipe.add_command(read(1));
    }
    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
    let ids = |v: &Value| -> Vec<String> {
        let got: Read = redis::from_redis_value(v).unwrap();
        got.map(|mut keys| keys.pop().unwrap().1.into_iter().map(|(id, _)| id).collect()).unwrap_or_default()
    };
    assert_eq!(ids(&replies[0]), ["1-0", "2-0"]);
    assert_eq!(replies[1], Value::BulkString(b"6-0".to_vec()));
    let singles: Vec<Vec<String>> = replies[2..].iter().map(ids).collect();
    assert_eq!(singles, [vec!["3-0"], vec!["4-0"], vec!["5-0"], vec!["6-0"], vec![]]);
    let pending: (u64, Value, Value, Value) = cmd("XPENDING").arg("s").arg("g").query(&mut c).unwrap();
    assert_eq!(pending.0, 6);
}

/// A stream named twice in one XREADGROUP is served twice, as by Redis: the second `>` goes
/// on after what the first delivered, and a history ID and `>` of one stream each answer.
#[test]
fn a_stream_named_twice_is_read_on_from_the_first_delivery() {
    let server = Server::start(&[]);
    let mut c = server.client();
    stream_with_group(&mut c, (1..=3).map(|i| format!("1-{i}")));
    let mut read = |count: usize, ids: [&str; 2]| -> Vec<(String, Vec<String>)> {
        let got: Read = cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg("c")
            .arg("COUNT")
            .arg(count)
            .arg("STREAMS")
            .arg("s")
            .arg("s")
            .arg(&ids[..])
            .query(&mut c)
            .unwrap();
        got.unwrap_or_default().into_iter().map(|(k, e)| (k, e.into_iter().map(|(id, _)| id).collect())).collect()
    };
    let s = |ids: &[&str]| ("s".to_string(), ids.iter().map(|i| i.to_string()).collect::<Vec<_>>());
    assert_eq!(read(1, [">", ">"]), [s(&["1-1"]), s(&["1-2"])]);
    assert_eq!(read(5, ["0", ">"]), [s(&["1-1", "1-2"]), s(&["1-3"])]);
    let pending: (u64, Value, Value, Value) = cmd("XPENDING").arg("s").arg("g").query(&mut c).unwrap();
    assert_eq!(pending.0, 3);
}
