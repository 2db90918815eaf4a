//! The command table through `lookup` and `dispatch`: names in any case, arity, key positions,
//! flags; per-family behaviour in `families`, the cost of pops and random picks in `costs`.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::config::Config;
use crate::resp::{Protocol, Reply};
use crate::state::ServerState;

mod costs;
mod families;

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
