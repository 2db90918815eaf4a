use super::*;
use crate::exec::gate::dispatch;
use crate::exec::gate::tests::{request, session, session_in};
use crate::exec::{run_in_memory, InMemory};

/// A current-thread runtime that starts the engine's deferred commits whenever it goes idle,
/// as the server's runtime does.
fn runtime(state: &Arc<ServerState>) -> tokio::runtime::Runtime {
    let engine = state.storage.engine().clone();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(move || engine.start_deferred_commits())
        .build()
        .unwrap()
}

/// Runs `rt` until the drain task of `key` has ended: after answering a combined group it
/// yields once before it looks for the next one (see `drain`).
fn settle(rt: &tokio::runtime::Runtime, state: &Arc<ServerState>, key: &(u32, Bytes)) {
    rt.block_on(async {
        for _ in 0..1000 {
            if state.combiner.waiting().get(key).is_none_or(|w| !w.draining) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the drain task of {key:?} never ended");
    });
}

fn queue(requests: &[&[&[u8]]]) -> VecDeque<Vec<Bytes>> {
    requests.iter().map(|r| request(r)).collect()
}

/// Writes of clients that find a hot key's last write queued and not yet visible wait on the
/// task and run as one group once it is: each gets its own replies (an error stays its own),
/// every write lands once, in order, and the group counts as one combined group.
#[test]
fn writes_waiting_for_a_hot_keys_queued_write_run_as_one_group_on_the_task() {
    let (_d, mut a) = session();
    let state = Arc::clone(&a.state);
    dispatch(&mut a, &request(&[b"set", b"str", b"x"]));
    // Commits queued from here on wait until the runtime goes idle: A's INCR stays queued.
    state.storage.defer_async_commits();
    let (mut pending_a, mut out_a) = (queue(&[&[b"incr", b"counter"]]), BytesMut::new());
    let InMemory::Writes(mut a_writes) = run_in_memory(&mut a, &mut pending_a, &mut out_a, 1 << 20) else {
        panic!("A's INCR runs here")
    };
    let mut b = Box::new(Session::new(Arc::clone(&state)));
    let mut c = Box::new(Session::new(Arc::clone(&state)));
    let mut b_round = queue(&[&[b"incr", b"counter"], &[b"rpush", b"list", b"b"]]);
    let mut c_round = queue(&[&[b"incr", b"counter"], &[b"lpush", b"str", b"v"], &[b"rpush", b"list", b"c"]]);
    let mut ticket = None;
    for (s, round) in [(&mut b, &mut b_round), (&mut c, &mut c_round)] {
        assert!(eligible(s, round));
        match run_in_memory(s, round, &mut BytesMut::new(), 1 << 20) {
            InMemory::Waits(t) => ticket = Some(t),
            other => panic!("the key's write is queued, not visible: {other:?}"),
        }
    }
    let ticket = ticket.unwrap();
    let rt = runtime(&state);
    let (b_done, c_done, a_failed) = rt.block_on(async {
        tokio::join!(
            run(&state, b, b_round, BytesMut::new(), Some(ticket), 1 << 20),
            run(&state, c, c_round, BytesMut::new(), Some(ticket), 1 << 20),
            async { a_writes.commit.take().expect("a commit").await.err() },
        )
    });
    assert!(a_failed.is_none());
    assert!(!a_writes.finish(&mut a, None, &mut out_a));
    assert_eq!(&out_a[..], b":1\r\n");
    let (_, b_left, b_out, b_end) = b_done.expect("B answered");
    let (_, c_left, c_out, c_end) = c_done.expect("C answered");
    assert!(b_left.is_empty() && c_left.is_empty());
    assert!(matches!((b_end, c_end), (BatchEnd::Drained, BatchEnd::Drained)));
    // B's round ran first (it queued first), C's after it, reading through B's writes.
    assert_eq!(&b_out[..], b":2\r\n:1\r\n");
    assert_eq!(&c_out[..], &b":3\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n:2\r\n"[..]);
    assert_eq!(state.combiner.groups.load(Ordering::Relaxed), 1);
    assert_eq!(state.combiner.writes.load(Ordering::Relaxed), 5);
    let key = (0, Bytes::from_static(b"counter"));
    settle(&rt, &state, &key);
    assert!(
        state.combiner.waiting().get(&key).is_some_and(|w| w.rounds.is_empty() && !w.draining),
        "the drain task is gone once nothing waits; the key stays marked hot"
    );
    // The key's next round joins a group here rather than running alone; a group of one
    // round unmarks it.
    let mut d = Box::new(Session::new(Arc::clone(&state)));
    let mut d_round = queue(&[&[b"incr", b"counter"]]);
    assert!(matches!(run_in_memory(&mut d, &mut d_round, &mut BytesMut::new(), 1 << 20), InMemory::Hot));
    assert_eq!(d_round.len(), 1, "nothing of it ran");
    let (_, d_left, d_out, _) =
        rt.block_on(run(&state, d, d_round, BytesMut::new(), None, 1 << 20)).expect("D answered");
    assert!(d_left.is_empty());
    assert_eq!(&d_out[..], b":4\r\n");
    assert!(state.combiner.waiting().is_empty(), "a lone round's group unmarks the key");
    let mut e = Box::new(Session::new(Arc::clone(&state)));
    let mut e_round = queue(&[&[b"incr", b"counter"]]);
    let InMemory::Writes(mut e_writes) = run_in_memory(&mut e, &mut e_round, &mut BytesMut::new(), 1 << 20) else {
        panic!("a key no longer hot: its round runs alone")
    };
    assert!(rt.block_on(e_writes.commit.take().expect("a commit")).is_ok());
    assert_eq!(dispatch(&mut a, &request(&[b"get", b"counter"])), Reply::Bulk(Bytes::from_static(b"5")));
    assert_eq!(
        dispatch(&mut a, &request(&[b"lrange", b"list", b"0", b"-1"])),
        Reply::Array(vec![Reply::Bulk(Bytes::from_static(b"b")), Reply::Bulk(Bytes::from_static(b"c"))])
    );
    assert_eq!(dispatch(&mut a, &request(&[b"dbsize"])), Reply::Integer(3));
}

/// A command of a waiting round that needs the disk ends the group there: the rounds before it
/// are answered, and its round goes on to the executors from that command (sent back to its
/// connection, it would only wait here again and be voided again).
#[test]
fn a_command_that_needs_the_disk_sends_the_rest_of_its_round_to_an_executor() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = session_in(dir.path());
        for i in 0..2000 {
            dispatch(&mut s, &request(&[b"hset", b"big", format!("f{i}").as_bytes(), b"5"]));
        }
        s.state.storage.engine().flush().unwrap();
    }
    // Reopened: the hash's fields are on disk, in blocks nothing has read; a write brings its
    // metadata into memory.
    let mut a = session_in(dir.path());
    let state = Arc::clone(&a.state);
    dispatch(&mut a, &request(&[b"hset", b"big", b"x", b"1"]));
    let on_disk = (0..2000)
        .map(|i| format!("f{i}"))
        .find(|field| {
            let mut probe = queue(&[&[b"hget", b"big", field.as_bytes()]]);
            matches!(run_in_memory(&mut a, &mut probe, &mut BytesMut::new(), 1 << 20), InMemory::Stopped(false))
                && probe.len() == 1
        })
        .expect("fields on disk");
    state.storage.defer_async_commits();
    let (mut pending_a, mut out_a) = (queue(&[&[b"hincrby", b"big", b"x", b"1"]]), BytesMut::new());
    let InMemory::Writes(mut a_writes) = run_in_memory(&mut a, &mut pending_a, &mut out_a, 1 << 20) else {
        panic!("A's HINCRBY runs here")
    };
    let mut b = Box::new(Session::new(Arc::clone(&state)));
    let mut d = Box::new(Session::new(Arc::clone(&state)));
    let mut b_round = queue(&[&[b"hincrby", b"big", b"x", b"1"]]);
    let mut d_round = queue(&[&[b"hincrby", b"big", on_disk.as_bytes(), b"1"], &[b"hincrby", b"big", b"x", b"1"]]);
    let mut ticket = None;
    for (s, round) in [(&mut b, &mut b_round), (&mut d, &mut d_round)] {
        match run_in_memory(s, round, &mut BytesMut::new(), 1 << 20) {
            InMemory::Waits(t) => ticket = Some(t),
            other => panic!("the key's write is queued, not visible: {other:?}"),
        }
    }
    let ticket = ticket.unwrap();
    let voided = state.in_memory.writes_voided.load(Ordering::Relaxed);
    let (b_done, d_done, _) = runtime(&state).block_on(async {
        tokio::join!(
            run(&state, b, b_round, BytesMut::new(), Some(ticket), 1 << 20),
            run(&state, d, d_round, BytesMut::new(), Some(ticket), 1 << 20),
            async { a_writes.commit.take().expect("a commit").await.err() },
        )
    });
    let (_, b_left, b_out, _) = b_done.expect("B answered");
    assert!(b_left.is_empty());
    assert_eq!(&b_out[..], b":3\r\n");
    let (_, d_left, d_out, d_end) = d_done.expect("D answered");
    assert!(matches!(d_end, BatchEnd::Drained));
    assert!(d_left.is_empty());
    assert_eq!(&d_out[..], b":6\r\n:4\r\n", "run on an executor after B's write");
    assert_eq!(state.in_memory.writes_voided.load(Ordering::Relaxed), voided + 1, "voided once");
    let stats = dispatch(&mut a, &request(&[b"info", b"commandstats"]));
    let Reply::Verbatim(stats) = stats else { panic!("{stats:?}") };
    assert!(String::from_utf8_lossy(&stats).contains("cmdstat_hincrby:calls=4,"), "each counted once");
}

/// A CLIENT PAUSE that starts while rounds wait here holds them as it holds any write: they
/// go the usual way, which waits for the pause to end.
#[test]
fn rounds_waiting_when_a_pause_starts_are_held_by_it() {
    let (_d, mut a) = session();
    let state = Arc::clone(&a.state);
    state.storage.defer_async_commits();
    let (mut pending_a, mut out_a) = (queue(&[&[b"incr", b"counter"]]), BytesMut::new());
    let InMemory::Writes(mut a_writes) = run_in_memory(&mut a, &mut pending_a, &mut out_a, 1 << 20) else {
        panic!("A's INCR runs here")
    };
    let mut b = Box::new(Session::new(Arc::clone(&state)));
    let mut b_round = queue(&[&[b"incr", b"counter"]]);
    let InMemory::Waits(ticket) = run_in_memory(&mut b, &mut b_round, &mut BytesMut::new(), 1 << 20) else {
        panic!("the key's write is queued, not visible")
    };
    let b_done = runtime(&state).block_on(async {
        let (b_done, _) = tokio::join!(run(&state, b, b_round, BytesMut::new(), Some(ticket), 1 << 20), async {
            assert_eq!(dispatch(&mut a, &request(&[b"client", b"pause", b"60000", b"write"])), Reply::ok());
            a_writes.commit.take().expect("a commit").await.err()
        });
        b_done
    });
    let (_, b_left, b_out, b_end) = b_done.expect("B answered");
    assert!(matches!(b_end, BatchEnd::Paused(_)), "{b_end:?}");
    assert_eq!((b_left.len(), &b_out[..]), (1, &b""[..]));
    assert_eq!(dispatch(&mut a, &request(&[b"client", b"unpause"])), Reply::ok());
    assert_eq!(dispatch(&mut a, &request(&[b"get", b"counter"])), Reply::Bulk(Bytes::from_static(b"1")));
}

/// Rounds still waiting when their drain task panics go to the executors, and the key is free
/// for a new drain task: nobody waits behind a task that is gone.
#[test]
fn rounds_left_by_a_drain_task_that_panicked_go_to_the_executors() {
    let (_d, a) = session();
    let state = Arc::clone(&a.state);
    let b = Box::new(Session::new(Arc::clone(&state)));
    let (entry, rx) = Entry::new(b, queue(&[&[b"incr", b"counter"]]), BytesMut::new());
    let key = entry.key.clone().expect("a key");
    state
        .combiner
        .waiting()
        .insert(key.clone(), Waiting { rounds: VecDeque::from([entry]), draining: true, idle_since: None });
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _draining = Draining { state: Arc::clone(&state), key };
        panic!("a bug in a drain task");
    }));
    assert!(panicked.is_err());
    assert!(state.combiner.waiting().is_empty());
    let (_, left, out, end) = runtime(&state).block_on(rx).expect("answered on an executor");
    assert!(left.is_empty() && matches!(end, BatchEnd::Drained));
    assert_eq!(&out[..], b":1\r\n");
}

/// EVAL scripts of clients that find a hot key's last write queued wait on the task and run as
/// one group as well; scripts that turn out void there (they read a key they did not declare)
/// run again alone on the executors, never in a combined group. Each gets its own reply and
/// every script's writes land once.
#[test]
fn scripts_waiting_for_a_hot_keys_queued_write_run_on_the_task_and_void_ones_on_an_executor() {
    let (_d, mut a) = session();
    let state = Arc::clone(&a.state);
    dispatch(&mut a, &request(&[b"set", b"other", b"o"]));
    state.storage.defer_async_commits();
    let (mut pending_a, mut out_a) = (queue(&[&[b"incr", b"counter"]]), BytesMut::new());
    let InMemory::Writes(mut a_writes) = run_in_memory(&mut a, &mut pending_a, &mut out_a, 1 << 20) else {
        panic!("A's INCR runs here")
    };
    let declared: &[u8] = b"redis.call('incr', KEYS[1]) return redis.call('expire', KEYS[1], 100)";
    let undeclared: &[u8] = b"return {redis.call('incr', KEYS[1]), redis.call('get', 'other')}";
    let scripts = [declared, undeclared, undeclared, declared];
    let mut rounds = Vec::new();
    let mut ticket = None;
    for script in scripts {
        let mut s = Box::new(Session::new(Arc::clone(&state)));
        let mut round = queue(&[&[b"eval", script, b"1", b"counter"]]);
        assert!(eligible(&s, &round));
        match run_in_memory(&mut s, &mut round, &mut BytesMut::new(), 1 << 20) {
            InMemory::Waits(t) => ticket = Some(t),
            other => panic!("the key's write is queued, not visible: {other:?}"),
        }
        rounds.push((s, round));
    }
    let ticket = ticket.unwrap();
    let (done, a_failed) = runtime(&state).block_on(async {
        let waiting: Vec<_> = rounds
            .into_iter()
            .map(|(s, round)| {
                let state = Arc::clone(&state);
                tokio::spawn(async move { run(&state, s, round, BytesMut::new(), Some(ticket), 1 << 20).await })
            })
            .collect();
        let a_failed = a_writes.commit.take().expect("a commit").await.err();
        let mut done = Vec::new();
        for round in waiting {
            done.push(round.await.unwrap().expect("answered"));
        }
        (done, a_failed)
    });
    assert!(a_failed.is_none());
    assert!(!a_writes.finish(&mut a, None, &mut out_a));
    for ((_, left, out, end), script) in done.into_iter().zip(scripts) {
        assert!(left.is_empty() && matches!(end, BatchEnd::Drained));
        if script == undeclared {
            let text = String::from_utf8(out.to_vec()).unwrap();
            let (count, other) = text.strip_prefix("*2\r\n:").unwrap().split_once("\r\n").unwrap();
            assert!(count.parse::<i64>().unwrap() >= 2, "{text}");
            assert_eq!(other, "$1\r\no\r\n", "{text}");
        } else {
            assert_eq!(&out[..], b":1\r\n");
        }
    }
    assert_eq!(state.combiner.groups.load(Ordering::Relaxed), 1, "the declared scripts ran as one group");
    assert_eq!(dispatch(&mut a, &request(&[b"get", b"counter"])), Reply::Bulk(Bytes::from_static(b"5")));
    assert!(matches!(dispatch(&mut a, &request(&[b"ttl", b"counter"])), Reply::Integer(t) if t > 0));
}

/// A key left marked hot longer than `HOT_FOR` ago is cold again: its next round runs alone,
/// and the mark is forgotten (no round pays for looking it up any more).
#[test]
fn a_key_marked_hot_long_ago_is_forgotten() {
    let (_d, mut a) = session();
    let state = Arc::clone(&a.state);
    let long_ago = std::time::Instant::now().checked_sub(HOT_FOR * 2).expect("an instant that long ago");
    let marked = Waiting { rounds: VecDeque::new(), draining: false, idle_since: Some(long_ago) };
    state.combiner.waiting().insert((0, Bytes::from_static(b"counter")), marked);
    state.combiner.hot_keys.store(1, Ordering::Relaxed);
    let mut round = queue(&[&[b"incr", b"counter"]]);
    let InMemory::Writes(mut writes) = run_in_memory(&mut a, &mut round, &mut BytesMut::new(), 1 << 20) else {
        panic!("a cold key's round runs alone")
    };
    assert!(runtime(&state).block_on(writes.commit.take().expect("a commit")).is_ok());
    assert!(state.combiner.waiting().is_empty());
    assert_eq!(state.combiner.hot_keys.load(Ordering::Relaxed), 0);
}
