//! EVAL scripts on a connection's task (see `scripting::call`, `OnBusy::Void`).

use std::sync::Arc;

use super::tests::run_here;
use super::*;

use crate::exec::gate::tests::{request, session};
use crate::exec::gate::{dispatch, run_batch, BatchEnd};

/// The bulk string of `reply`.
fn text(reply: Reply) -> String {
    match reply {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// `INFO commandstats`' calls of `command`.
fn calls(s: &mut Session, command: &str) -> u64 {
    let Reply::Verbatim(stats) = dispatch(s, &request(&[b"info", b"commandstats"])) else { panic!() };
    let stats = String::from_utf8_lossy(&stats).into_owned();
    let line = format!("cmdstat_{command}:calls=");
    stats.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[test]
fn scripts_of_declared_keys_run_here_and_the_rest_run_again_on_an_executor_counted_once() {
    let (_dir, mut s) = session();
    let state = Arc::clone(&s.state);
    let groups = || state.in_memory.write_groups.load(Ordering::Relaxed);
    let voided = || state.in_memory.writes_voided.load(Ordering::Relaxed);
    let incr_expire = "redis.call('incr', KEYS[1]) return redis.call('expire', KEYS[1], 100)";
    let sha = text(dispatch(&mut s, &request(&[b"script", b"load", incr_expire.as_bytes()])));
    dispatch(&mut s, &request(&[b"set", b"k", b"0"]));
    let evalsha = |key: &[u8]| request(&[b"evalsha", sha.as_bytes(), b"1", key]);
    let (groups0, voided0) = (groups(), voided());
    let mut queue: VecDeque<Vec<Bytes>> = [evalsha(b"k"), evalsha(b"k"), evalsha(b"new")].into();
    let mut out = BytesMut::new();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len()), (&b":1\r\n:1\r\n:1\r\n"[..], 0));
    assert_eq!((groups(), voided()), (groups0 + 1, voided0), "one group, nothing voided");
    assert_eq!(text(dispatch(&mut s, &request(&[b"get", b"k"]))), "2");
    assert!(matches!(dispatch(&mut s, &request(&[b"ttl", b"new"])), Reply::Integer(100)));
    assert_eq!(dispatch(&mut s, &request(&[b"dbsize"])), Reply::Integer(2), "the new key is counted");
    assert_eq!((calls(&mut s, "incr"), calls(&mut s, "expire"), calls(&mut s, "evalsha")), (3, 3, 3));

    // A key it did not declare, after one it did: void here (its INCR of `k` undone and not
    // counted), run once on an executor.
    let undeclared = "redis.call('incr', KEYS[1]) return redis.call('incr', 'other')";
    // A command that may not run here (a message cannot be taken back), and a read of all keys.
    let publishes = "redis.call('incr', KEYS[1]) return redis.call('publish', 'ch', 'hi')";
    let keyless = "return redis.call('dbsize')";
    for (script, keys, expected) in
        [(undeclared, &b"1"[..], &b":1\r\n"[..]), (publishes, b"1", b":0\r\n"), (keyless, b"0", b":3\r\n")]
    {
        let mut eval = request(&[b"eval", script.as_bytes(), keys]);
        if keys == b"1" {
            eval.push(Bytes::from_static(b"k"));
        }
        let mut queue: VecDeque<Vec<Bytes>> = [eval].into();
        let mut out = BytesMut::new();
        let before = voided();
        run_here(&mut s, &mut queue, &mut out);
        assert_eq!((&out[..], queue.len(), voided()), (&b""[..], 1, before + 1), "void here: {script}");
        assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
        assert_eq!(&out[..], expected, "{script}");
    }
    assert_eq!(text(dispatch(&mut s, &request(&[b"get", b"k"]))), "4", "each script's INCR of k once");
    assert_eq!(text(dispatch(&mut s, &request(&[b"get", b"other"]))), "1");
    assert_eq!((calls(&mut s, "incr"), calls(&mut s, "eval"), calls(&mut s, "publish")), (6, 3, 1));
    assert!(s.exec.is_clear());
}

#[test]
fn a_script_that_runs_long_here_is_stopped_even_under_pcall_and_runs_again_on_an_executor() {
    let (_dir, mut s) = session();
    let state = Arc::clone(&s.state);
    let voided = || state.in_memory.writes_voided.load(Ordering::Relaxed);
    // Each inner loop outlasts the time a script may run here; pcall catches the error that
    // stops it, but the next instruction meets it again.
    let slow = "local n = 0 \
        while n < 4 do pcall(function() local i = 0 while i < 3000000 do i = i + 1 end end) n = n + 1 end \
        redis.call('incr', KEYS[1]) return n";
    let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"eval", slow.as_bytes(), b"1", b"k"])].into();
    let mut out = BytesMut::new();
    let before = voided();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len(), voided()), (&b""[..], 1, before + 1));
    assert!(matches!(run_batch(&mut s, &mut queue, &mut out, 1 << 20), BatchEnd::Drained));
    assert_eq!(&out[..], b":4\r\n");
    assert_eq!(text(dispatch(&mut s, &request(&[b"get", b"k"]))), "1");
    assert!(s.exec.is_clear());
}

#[test]
fn scripts_cached_on_any_vm_are_known_to_all_and_script_flush_forgets_them_everywhere() {
    let (_dir, mut s) = session();
    let body = "return redis.call('get', KEYS[1])";
    let sha = crate::scripting::sha1_hex(body.as_bytes());
    dispatch(&mut s, &request(&[b"set", b"k", b"v"]));
    // EVAL on the task compiles it on a spare VM and caches it for every VM.
    let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"eval", body.as_bytes(), b"1", b"k"])].into();
    let mut out = BytesMut::new();
    run_here(&mut s, &mut queue, &mut out);
    assert_eq!((&out[..], queue.len()), (&b"$1\r\nv\r\n"[..], 0));
    let exists = |s: &mut Session| dispatch(s, &request(&[b"script", b"exists", sha.as_bytes()]));
    assert_eq!(exists(&mut s), Reply::Array(vec![Reply::Integer(1)]));
    // The one VM compiles it from the cache (an executor's EVALSHA).
    let evalsha = request(&[b"evalsha", sha.as_bytes(), b"1", b"k"]);
    assert_eq!(text(dispatch(&mut s, &evalsha)), "v");
    dispatch(&mut s, &request(&[b"script", b"flush"]));
    assert_eq!(exists(&mut s), Reply::Array(vec![Reply::Integer(0)]));
    let noscript = Reply::error("NOSCRIPT No matching script. Please use EVAL.");
    let mut queue: VecDeque<Vec<Bytes>> = [evalsha.clone()].into();
    let mut out = BytesMut::new();
    run_here(&mut s, &mut queue, &mut out);
    assert!(queue.is_empty());
    assert_eq!(out, {
        let mut expected = BytesMut::new();
        noscript.encode(s.protocol, &mut expected);
        expected
    });
    assert_eq!(dispatch(&mut s, &evalsha), noscript);
    assert!(s.exec.is_clear());
}

#[test]
fn every_vm_draws_from_one_random_sequence_and_encodes_with_the_cjson_settings_scripts_chose() {
    let (_dir, mut s) = session();
    // On a spare VM (the task): seed the generator, draw once, and choose a cjson setting.
    let first = "math.randomseed(7) cjson.encode_max_depth(1) return math.random(1000000)";
    let mut queue: VecDeque<Vec<Bytes>> = [request(&[b"eval", first.as_bytes(), b"0"])].into();
    let mut out = BytesMut::new();
    run_here(&mut s, &mut queue, &mut out);
    assert!(queue.is_empty() && out.starts_with(b":"), "ran here: {out:?}");
    // On the one VM (an executor's run): the sequence and the setting go on.
    let next = dispatch(&mut s, &request(&[b"eval", b"return math.random(1000000)", b"0"]));
    let Reply::Error(nested) = dispatch(&mut s, &request(&[b"eval", b"return cjson.encode({{1}})", b"0"])) else {
        panic!("the depth of 1 holds on the other VM")
    };
    assert!(nested.contains("excessive nesting"), "{nested}");
    let both = "math.randomseed(7) local a = math.random(1000000) return {a, math.random(1000000)}";
    let Reply::Array(drawn) = dispatch(&mut s, &request(&[b"eval", both.as_bytes(), b"0"])) else { panic!() };
    let mut expected = BytesMut::new();
    drawn[0].encode(s.protocol, &mut expected);
    assert_eq!((out, &drawn[1]), (expected, &next), "one sequence across VMs");
    // SCRIPT FLUSH starts afresh: default settings everywhere.
    dispatch(&mut s, &request(&[b"script", b"flush"]));
    let encoded = dispatch(&mut s, &request(&[b"eval", b"return cjson.encode({{1}})", b"0"]));
    assert_eq!(text(encoded), "[[1]]");
    assert!(s.exec.is_clear());
}
