use std::sync::Arc;

use super::*;

use crate::exec::gate::tests::{request, session, session_in};
use crate::exec::gate::{dispatch, run_batch, BatchEnd};

#[test]
fn reads_run_in_memory_until_one_needs_the_disk_which_stays_queued_for_an_executor() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = session_in(dir.path());
        for i in 0..2000 {
            let key = format!("k{i}");
            dispatch(&mut s, &request(&[b"set", key.as_bytes(), b"v"]));
        }
        s.state.storage.engine().flush().unwrap();
    }
    // Reopened: the keys are in a table none of whose blocks has been read.
    let mut s = session_in(dir.path());
    dispatch(&mut s, &request(&[b"set", b"fresh", b"new"]));
    let state = Arc::clone(&s.state);
    let processed = || state.commands_processed.load(Ordering::Relaxed);
    let before = processed();
    let mut queue: VecDeque<Vec<Bytes>> =
        [request(&[b"ping"]), request(&[b"get", b"fresh"]), request(&[b"get", b"k7"]), request(&[b"get", b"k8"])]
            .into();
    let mut out = BytesMut::new();
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert_eq!(&out[..], b"+PONG\r\n$3\r\nnew\r\n", "PING and the memtable read ran");
    assert_eq!(queue.len(), 2, "the read that needs the disk (and all after it) stays queued");
    assert_eq!(processed(), before + 2, "the voided attempt is not counted");
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(&out[..], b"+PONG\r\n$3\r\nnew\r\n$1\r\nv\r\n$1\r\nv\r\n");
    assert_eq!(processed(), before + 4);
    // The block is cached now: the same reads run in memory (GETBIT and GETRANGE of a
    // short string too); a random pick, which takes a raw cursor, does not.
    out.clear();
    queue.extend([
        request(&[b"get", b"k7"]),
        request(&[b"getbit", b"k7", b"1"]),
        request(&[b"getrange", b"k7", b"0", b"-1"]),
        request(&[b"srandmember", b"k7"]),
        request(&[b"get", b"k7"]),
    ]);
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert_eq!((&out[..], queue.len()), (&b"$1\r\nv\r\n:1\r\n$1\r\nv\r\n"[..], 2));
    // A bit of a long (segmented) string is one point read too; a range over several of
    // its segments is a memory-only range, which here reaches the table on disk (none of
    // whose blocks around it were read) and is voided.
    queue.clear();
    for offset in [b"8".as_slice(), b"70000"] {
        dispatch(&mut s, &request(&[b"setbit", b"bits", offset, b"1"]));
    }
    out.clear();
    queue.extend([
        request(&[b"getbit", b"bits", b"70000"]),
        request(&[b"getbit", b"bits", b"9"]),
        request(&[b"getrange", b"bits", b"1", b"1"]),
        request(&[b"getrange", b"bits", b"0", b"-1"]),
    ]);
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert_eq!((&out[..], queue.len()), (&b":1\r\n:0\r\n$1\r\n\x80\r\n"[..], 1));
    assert!(s.exec.is_clear());
}

#[test]
fn range_reads_run_in_memory_until_one_needs_a_block_memory_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = session_in(dir.path());
        for i in 0..2000 {
            let item = format!("item-{i:04}-{}", "x".repeat(40));
            dispatch(&mut s, &request(&[b"rpush", b"list", item.as_bytes()]));
        }
        dispatch(&mut s, &request(&[b"hset", b"h", b"a", b"1", b"b", b"2"]));
        s.state.storage.engine().flush().unwrap();
    }
    // Reopened: nothing of the table is cached.
    let mut s = session_in(dir.path());
    let state = Arc::clone(&s.state);
    let voided = || state.in_memory.reads_voided.load(Ordering::Relaxed);
    let mut out = BytesMut::new();
    let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"lrange", b"list", b"0", b"2"])].into();
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert_eq!((out.len(), queue.len(), voided()), (0, 1, 1), "the list's blocks are on disk: void");
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    let first = out.split().freeze();
    assert!(first.starts_with(b"*3\r\n$50\r\nitem-0000-"), "{first:?}");
    // The blocks it read are cached now: the same LRANGE and an HGETALL whose records
    // they hold run here; the whole list, which needs blocks not read yet, is voided again.
    queue.extend([
        request(&[b"lrange", b"list", b"0", b"2"]),
        request(&[b"hgetall", b"h"]),
        request(&[b"lrange", b"list", b"0", b"-1"]),
    ]);
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert_eq!(queue.len(), 1, "the full LRANGE stays queued");
    assert_eq!(voided(), 2);
    assert!(out.starts_with(&first) && out.ends_with(b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n"));
    out.clear();
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert!(out.starts_with(b"*2000\r\n"));
    // Every block was read by it: now it runs here.
    out.clear();
    queue.push_back(request(&[b"lrange", b"list", b"0", b"-1"]));
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert!(queue.is_empty() && out.starts_with(b"*2000\r\n") && voided() == 2);
    assert!(s.exec.is_clear());
}

#[test]
fn read_modify_writes_run_in_memory_as_a_group_until_one_needs_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = session_in(dir.path());
        for i in 0..2000 {
            let (key, field) = (format!("n{i}"), format!("f{i}"));
            dispatch(&mut s, &request(&[b"set", key.as_bytes(), b"10"]));
            dispatch(&mut s, &request(&[b"hset", b"big", field.as_bytes(), b"5"]));
        }
        s.state.storage.engine().flush().unwrap();
    }
    // Reopened: every record is in a table none of whose blocks has been read. A write
    // brings the hash's metadata into memory; its fields stay on disk.
    let mut s = session_in(dir.path());
    dispatch(&mut s, &request(&[b"hset", b"big", b"new", b"1"]));
    // Keys in the memtable: a lookup finds them there, whatever the tables' blooms say
    // (a new key's absence can need a table's block: a bloom false positive).
    dispatch(&mut s, &request(&[b"set", b"fresh", b"0"]));
    dispatch(&mut s, &request(&[b"set", b"other", b"0"]));
    // A field only the disk holds: its memory-only HGET voids. Most fields qualify, but a
    // field's record sits at a seeded hash of its name, so a few share a block that was
    // read already (the last one, holding the layout record that opening the database
    // reads; or the one the HSET above read).
    let on_disk = (0..2000)
        .map(|i| format!("f{i}"))
        .find(|field| {
            let mut probe: VecDeque<Vec<Bytes>> = [request(&[b"hget", b"big", field.as_bytes()])].into();
            run_here(&mut s, &mut probe, &mut BytesMut::new());
            probe.len() == 1
        })
        .expect("fields on disk");
    let state = Arc::clone(&s.state);
    let processed = || state.commands_processed.load(Ordering::Relaxed);
    let groups = || state.in_memory.write_groups.load(Ordering::Relaxed);
    let voided = || state.in_memory.writes_voided.load(Ordering::Relaxed);
    let before = processed();
    let mut queue: VecDeque<Vec<Bytes>> = [
        request(&[b"incr", b"fresh"]),
        request(&[b"incr", b"other"]),
        request(&[b"hincrby", b"big", on_disk.as_bytes(), b"1"]), // its field needs the disk: void
        request(&[b"incr", b"fresh"]),
    ]
    .into();
    let mut out = BytesMut::new();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!(&out[..], b":1\r\n:1\r\n", "the two commands before the void");
    assert_eq!((queue.len(), groups(), voided()), (2, 1, 1));
    assert_eq!(processed(), before + 2, "the voided attempt is not counted");
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(&out[..], b":1\r\n:1\r\n:6\r\n:2\r\n");
    assert_eq!(processed(), before + 4);
    // A run ends before a key whose metadata needs the disk: no attempt, no void.
    out.clear();
    queue.extend([request(&[b"incr", b"fresh"]), request(&[b"incr", b"n7"])]);
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len(), groups(), voided()), (&b":3\r\n"[..], 1, 2, 1));
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(&out[..], b":3\r\n:11\r\n");
    // Nothing was written twice; the counts are exact.
    assert_eq!(
        dispatch(&mut s, &request(&[b"hget", b"big", on_disk.as_bytes()])),
        Reply::Bulk(Bytes::from_static(b"6"))
    );
    assert_eq!(dispatch(&mut s, &request(&[b"dbsize"])), Reply::Integer(2003), "n0..n1999, big, fresh, other");
    let Reply::Verbatim(stats) = dispatch(&mut s, &request(&[b"info", b"commandstats"])) else { panic!() };
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.contains("cmdstat_incr:calls=5,") && stats.contains("cmdstat_hincrby:calls=1,"), "{stats}");
    // ZPOPMIN reads the sorted set's front from memory here; a write that deletes a range
    // goes straight to an executor, and so does what follows.
    out.clear();
    queue.extend([
        request(&[b"zadd", b"z", b"1", b"a", b"2", b"b"]),
        request(&[b"zpopmin", b"z"]),
        request(&[b"zremrangebyrank", b"z", b"0", b"0"]),
        request(&[b"incr", b"fresh"]),
    ]);
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len(), groups()), (&b":2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"[..], 2, 3));
    // XADD appends here (it reads only the stream's metadata); one that trims does not.
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    out.clear();
    queue.extend([
        request(&[b"xadd", b"st", b"1-1", b"f", b"v"]),
        request(&[b"xadd", b"st", b"NOMKSTREAM", b"2-1", b"f", b"v"]),
        request(&[b"xadd", b"st", b"maxlen", b"1", b"3-1", b"f", b"v"]),
    ]);
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len(), groups()), (&b"$3\r\n1-1\r\n$3\r\n2-1\r\n"[..], 1, 4));
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(dispatch(&mut s, &request(&[b"xlen", b"st"])), Reply::Integer(1));
    assert!(s.exec.is_clear());
}

/// Drives `run_in_memory` as a connection does, committing queued SETs on this thread.
pub(super) fn run_here(s: &mut Session, queue: &mut VecDeque<Vec<Bytes>>, out: &mut BytesMut) {
    loop {
        match run_in_memory(s, queue, out, 1 << 20) {
            InMemory::Stopped(_) => return,
            InMemory::Sets(mut sets) => {
                let committed = sets.commit.take().map_or(Ok(()), futures_block_on);
                sets.finish(s, committed, out);
            }
            // (As `combine::on_task` does, without the company.)
            InMemory::Waits(ticket) => s.state.storage.engine().wait_committed(ticket),
            // (No key is hot without `combine::on_task`'s groups.)
            InMemory::Hot => return,
            InMemory::Writes(mut writes) => {
                let committed = writes.commit.take().map_or(Ok(()), futures_block_on);
                let voided = writes.voided;
                if writes.finish(s, committed.err().map(crate::commands::engine_error).as_ref(), out) {
                    crate::exec::serve_signals(s);
                }
                if voided {
                    return;
                }
            }
        }
    }
}

/// Polls `f` to completion on this thread.
fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

#[test]
fn pipelined_sets_commit_in_memory_with_exact_counts_and_replies_in_order() {
    let (_d, mut s) = session();
    dispatch(&mut s, &request(&[b"set", b"old", b"1"]));
    let mut queue: VecDeque<Vec<Bytes>> = [
        request(&[b"set", b"old", b"2"]),
        request(&[b"set", b"new", b"1"]),
        request(&[b"set", b"new", b"2"]),
        request(&[b"set", b"x", b"1", b"nx"]), // not a plain SET: a write group of its own
        request(&[b"get", b"new"]),
    ]
    .into();
    let mut out = BytesMut::new();
    let state = Arc::clone(&s.state);
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!(&out[..], b"+OK\r\n+OK\r\n+OK\r\n+OK\r\n$1\r\n2\r\n", "all ran in memory, in order");
    assert!(queue.is_empty());
    assert_eq!(state.in_memory.set_batches.load(Ordering::Relaxed), 1, "the three plain SETs");
    assert_eq!(state.in_memory.write_groups.load(Ordering::Relaxed), 1, "the SET NX");
    assert_eq!(dispatch(&mut s, &request(&[b"dbsize"])), Reply::Integer(3), "old, new, x");
    // A read-modify-write right after sees the queued write (its stripe waits for it).
    queue.extend([request(&[b"set", b"n", b"41"])]);
    out.clear();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!(dispatch(&mut s, &request(&[b"incr", b"n"])), Reply::Integer(42));
    assert_eq!(dispatch(&mut s, &request(&[b"dbsize"])), Reply::Integer(4));
    // A lone MSET is a blind write here too (a key given twice keeps its last value,
    // counted once); one in a pipeline, or with a missing value, runs its handler.
    out.clear();
    let queued = || state.in_memory.set_batches.load(Ordering::Relaxed);
    let before = queued();
    for req in [
        request(&[b"mset", b"m1", b"a", b"m2", b"b", b"m1", b"c"]),
        request(&[b"set", b"m2", b"d"]),
        request(&[b"mset", b"m3", b"e", b"old", b"3"]),
    ] {
        queue.push_back(req);
        run_here(&mut s, &mut queue, &mut out);
    }
    assert_eq!((&out[..], queue.len()), (&b"+OK\r\n+OK\r\n+OK\r\n"[..], 0));
    assert_eq!(queued(), before + 3, "the lone MSETs and the SET were queued from memory");
    queue.extend([request(&[b"mset", b"m4", b"x", b"m5"]), request(&[b"mset", b"m6", b"y"])]);
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!(queue.len(), 2, "a pipeline of MSETs goes to an executor");
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(&out[..], b"+OK\r\n+OK\r\n+OK\r\n-ERR wrong number of arguments for 'mset' command\r\n+OK\r\n");
    assert_eq!(dispatch(&mut s, &request(&[b"dbsize"])), Reply::Integer(8), "m1, m2, m3, m6 are new");
    for (key, value) in [(&b"m1"[..], &b"c"[..]), (b"m2", b"d"), (b"m3", b"e"), (b"old", b"3"), (b"m6", b"y")] {
        assert_eq!(dispatch(&mut s, &request(&[b"get", key])), Reply::Bulk(Bytes::copy_from_slice(value)));
    }
    let Reply::Verbatim(stats) = dispatch(&mut s, &request(&[b"info", b"commandstats"])) else { panic!() };
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.contains("cmdstat_mset:calls=4,"), "{stats}");
    // A SET the gate refuses keeps its place among the replies.
    dispatch(&mut s, &request(&[b"config", b"set", b"min-replicas-to-write", b"1"]));
    queue.extend([request(&[b"set", b"a", b"1"]), request(&[b"ping"])]);
    out.clear();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!(&out[..], b"-NOREPLICAS Not enough good replicas to write.\r\n+PONG\r\n");
    assert!(s.exec.is_clear());
}

#[test]
fn a_write_that_rewrites_its_collection_is_voided_and_rewrites_on_an_executor() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session_in(dir.path());
    let members: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    let mut sadd: Vec<&[u8]> = vec![b"sadd", b"s"];
    sadd.extend(members.iter().map(|m| m.as_bytes()));
    dispatch(&mut s, &request(&sadd));
    // 176 removals leave the set under the rewrite threshold (removals > 2 × members + 128);
    // the 177th rewrites it under a fresh incarnation.
    for m in &members[..176] {
        assert_eq!(dispatch(&mut s, &request(&[b"srem", b"s", m.as_bytes()])), Reply::Integer(1));
    }
    let uid = |s: &Session| s.state.storage.view(&s.exec, 0).get(b"s").unwrap().unwrap().uid;
    let first = uid(&s);
    let state = Arc::clone(&s.state);
    let voided = || state.in_memory.writes_voided.load(Ordering::Relaxed);
    let before = voided();
    let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"srem", b"s", b"m176"]), request(&[b"scard", b"s"])].into();
    let mut out = BytesMut::new();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len(), voided()), (&b""[..], 2, before + 1), "the rewrite does not run here");
    assert_eq!(uid(&s), first);
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(&out[..], b":1\r\n:23\r\n");
    assert_ne!(uid(&s), first, "rewritten on the executor");
    let left = dispatch(&mut s, &request(&[b"smembers", b"s"])).into_items().unwrap();
    let mut left: Vec<Bytes> = left.into_iter().map(|r| if let Reply::Bulk(b) = r { b } else { panic!() }).collect();
    left.sort();
    let mut expected: Vec<Bytes> = members[177..].iter().map(|m| Bytes::from(m.clone())).collect();
    expected.sort();
    assert_eq!(left, expected);
    assert!(s.exec.is_clear());
}

#[test]
fn a_range_longer_than_a_memory_only_attempt_may_step_runs_on_an_executor() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session_in(dir.path());
    let n = crate::storage::MEMORY_ONLY_STEPS + 1;
    let members: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    let mut sadd: Vec<&[u8]> = vec![b"sadd", b"big"];
    sadd.extend(members.iter().map(|m| m.as_bytes()));
    dispatch(&mut s, &request(&sadd));
    let (mut zadd, mut rpush): (Vec<&[u8]>, Vec<&[u8]>) = (vec![b"zadd", b"z"], vec![b"rpush", b"l"]);
    for m in &members {
        zadd.extend([b"1".as_slice(), m.as_bytes()]);
        rpush.push(m.as_bytes());
    }
    dispatch(&mut s, &request(&zadd));
    dispatch(&mut s, &request(&rpush));
    dispatch(&mut s, &request(&[b"sadd", b"small", b"a"]));
    // Everything is in the memtable: only the length of a read decides where it runs.
    let state = Arc::clone(&s.state);
    let voided = || state.in_memory.reads_voided.load(Ordering::Relaxed);
    for long in [
        request(&[b"smembers", b"big"]),
        request(&[b"zrange", b"z", b"0", b"-1"]),
        request(&[b"zrangebyscore", b"z", b"-inf", b"+inf"]),
        request(&[b"lrange", b"l", b"0", b"-1"]),
    ] {
        let before = voided();
        let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"smembers", b"small"]), long.clone()].into();
        let mut out = BytesMut::new();
        assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
        assert_eq!((&out[..], queue.len(), voided()), (&b"*1\r\n$1\r\na\r\n"[..], 1, before + 1), "{long:?}");
        out.clear();
        assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 24), BatchEnd::Drained));
        assert!(out.starts_with(format!("*{n}\r\n").as_bytes()), "{long:?} answered whole on the executor");
    }
    // A range within the limit runs here.
    let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"lrange", b"l", b"0", b"99"])].into();
    let mut out = BytesMut::new();
    assert!(matches!(run_in_memory(&mut s, &mut queue, &mut out, 1 << 20), InMemory::Stopped(false)));
    assert!(queue.is_empty() && out.starts_with(b"*100\r\n"));
    assert!(s.exec.is_clear());
}

#[test]
fn pfcount_answers_in_memory_only_from_a_valid_cached_cardinality() {
    let (_dir, mut s) = session();
    let state = Arc::clone(&s.state);
    let voided = || state.in_memory.reads_voided.load(Ordering::Relaxed);
    let count_in_memory = |s: &mut Session, key: &[u8]| {
        let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"pfcount", key])].into();
        let mut out = BytesMut::new();
        let before = voided();
        run_in_memory(s, &mut queue, &mut out, 1 << 20);
        if queue.is_empty() {
            Some(String::from_utf8(out.to_vec()).unwrap())
        } else {
            assert!(out.is_empty(), "a voided PFCOUNT sends nothing");
            assert_eq!(voided(), before + 1);
            assert!(matches!(run_batch(s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
            assert_eq!(String::from_utf8(out.to_vec()).unwrap(), ":3\r\n", "counted on the executor path");
            None
        }
    };
    dispatch(&mut s, &request(&[b"pfadd", b"hll", b"a", b"b", b"c"]));
    // Stale after the PFADD: counted (and the count written back) on the executor path, then
    // answered from the cache in memory, without the key's lock.
    assert_eq!(count_in_memory(&mut s, b"hll"), None);
    assert_eq!(count_in_memory(&mut s, b"hll").as_deref(), Some(":3\r\n"));
    // An absent key and a string that is no HLL go to the executor path, which answers them.
    dispatch(&mut s, &request(&[b"set", b"plain", b"not an hll at all"]));
    for key in [&b"absent"[..], b"plain"] {
        let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"pfcount", key])].into();
        let mut out = BytesMut::new();
        run_in_memory(&mut s, &mut queue, &mut out, 1 << 20);
        assert_eq!(queue.len(), 1, "{key:?} is void in memory");
        assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
        let want: &[u8] =
            if key == b"absent" { b":0\r\n" } else { b"-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n" };
        assert_eq!(&out[..], want);
    }
    assert!(s.exec.is_clear());
}
