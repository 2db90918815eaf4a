use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::config::Config;
use crate::resp::{Protocol, Reply};
use crate::state::ServerState;

fn session() -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let db = lsm::Db::open(dir.path(), lsm::Options::default()).unwrap();
    (dir, Session::new(Arc::new(ServerState::new(Config::default(), db).unwrap())))
}

fn run(s: &mut Session, args: &[&str]) -> Reply {
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
    dispatch(s, &args)
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
