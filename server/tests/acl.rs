//! ACL users against a real `shale-server` with real clients: a script of ACL commands and
//! refused calls sent side by side to Debian's redis-server 7.0 and to Shale (every reply must
//! be the same), then what the script cannot compare — the ACL log, live rule changes, deleted
//! users' connections, revoked subscribers, `aclfile` and `user` lines, `requirepass`, and the
//! limits on unauthenticated clients.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{roundtrip, start_redis, Server};
use redis::{cmd, Value};

/// A reply as text: errors with their code and message, nested values spelled out.
fn show(r: redis::RedisResult<Value>) -> String {
    fn value(v: &Value) -> String {
        match v {
            Value::Nil => "nil".into(),
            Value::Int(i) => format!("{i}"),
            Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
            Value::SimpleString(s) => s.clone(),
            Value::Okay => "OK".into(),
            Value::Array(items) | Value::Set(items) => {
                format!("[{}]", items.iter().map(value).collect::<Vec<_>>().join(", "))
            }
            Value::Map(pairs) => {
                format!(
                    "{{{}}}",
                    pairs.iter().map(|(k, v)| format!("{}: {}", value(k), value(v))).collect::<Vec<_>>().join(", ")
                )
            }
            other => format!("{other:?}"),
        }
    }
    match r {
        Ok(v) => value(&v),
        Err(e) if e.is_io_error() || e.is_connection_dropped() => "closed".into(),
        Err(e) => format!("ERR {} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

fn call(c: &mut redis::Connection, line: &[&str]) -> String {
    let mut command = cmd(line[0]);
    for a in &line[1..] {
        command.arg(*a);
    }
    show(command.query::<Value>(c))
}

/// (connection: 'a' admin or 'u' user, command) — replies compared with redis-server's.
const SCRIPT: &[(char, &[&str])] = &[
    ('a', &["ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "%R~ro:*", "&news.*", "-@all", "+@read", "+set"]),
    ('a', &["ACL", "SETUSER", "alice", "+config|get", "+select|0", "(+del", "~tmp:*)"]),
    ('u', &["AUTH", "alice", "wrong"]),
    ('u', &["AUTH", "alice", "pw"]),
    ('u', &["ACL", "WHOAMI"]),
    ('u', &["GET", "app:1"]),
    ('u', &["SET", "app:1", "v"]),
    ('u', &["GET", "other"]),
    ('u', &["SET", "ro:1", "v"]),
    ('u', &["GET", "ro:1"]),
    ('u', &["DEL", "app:1"]),
    ('u', &["DEL", "tmp:1"]),
    ('u', &["MGET", "app:1", "ro:2", "elsewhere"]),
    ('u', &["CONFIG", "SET", "maxmemory", "0"]),
    ('u', &["SELECT", "0"]),
    ('u', &["SELECT", "1"]),
    ('u', &["PUBLISH", "news.x", "hi"]),
    ('u', &["MULTI"]),
    ('u', &["DEL", "app:1"]),
    ('u', &["EXEC"]),
    ('a', &["ACL", "DRYRUN", "alice", "get", "other"]),
    ('a', &["ACL", "DRYRUN", "alice", "del", "app:1"]),
    ('a', &["ACL", "DRYRUN", "alice", "config", "set", "a", "b"]),
    ('a', &["ACL", "DRYRUN", "alice", "get", "app:1"]),
    ('a', &["ACL", "DRYRUN", "alice", "get"]),
    ('a', &["ACL", "DRYRUN", "nobody", "get", "a"]),
    ('a', &["ACL", "DRYRUN", "alice", "nosuch"]),
    ('a', &["ACL", "SETUSER", "x", "+nosuch"]),
    ('a', &["ACL", "SETUSER", "x", "(+get"]),
    ('a', &["ACL", "SETUSER", "x", "#abc"]),
    ('a', &["ACL", "SETUSER", "x", "%X~a"]),
    ('a', &["ACL", "SETUSER", "x", "+config|get|a"]),
    ('a', &["ACL", "SETUSER", "x", "allkeys", "~a"]),
    ('a', &["ACL", "SETUSER", "x", "<nope"]),
    ('a', &["ACL", "SETUSER", "sp ace"]),
    ('a', &["ACL", "USERS"]),
    ('a', &["ACL", "CAT"]),
    ('a', &["ACL", "CAT", "nosuch"]),
    ('a', &["ACL", "DELUSER", "default"]),
    ('a', &["ACL", "SETUSER", "bob", "reset"]),
    ('a', &["ACL", "GETUSER", "bob"]),
    ('a', &["ACL", "GETUSER", "default"]),
    ('a', &["ACL", "GETUSER", "nobody"]),
    ('a', &["ACL", "SETUSER", "carl", "on", "nopass", "+@all", "-@dangerous", "allkeys", "allchannels"]),
    ('a', &["ACL", "GETUSER", "carl"]),
    ('a', &["ACL", "SETUSER", "dave", "-@all", "+@read", "-get", "(~a* +set)"]),
    ('a', &["ACL", "GETUSER", "dave"]),
    ('a', &["ACL", "GENPASS", "0"]),
    ('a', &["ACL", "LOG", "x"]),
    ('a', &["ACL", "LOAD"]),
    ('a', &["ACL", "NOSUCH"]),
    ('a', &["AUTH", "nopass-default"]),
    ('a', &["HELLO", "3", "AUTH", "alice", "wrong"]),
    ('a', &["CLIENT", "KILL", "USER", "nobody"]),
    ('a', &["ACL", "DELUSER", "alice", "ghost"]),
    ('u', &["PING"]),
];

#[test]
fn acl_replies_match_redis() {
    let Some((_redis, mut redis_admin, redis_port)) = start_redis() else { return };
    let server = Server::start(&[]);
    let mut redis_user =
        redis::Client::open(format!("redis://127.0.0.1:{redis_port}/")).unwrap().get_connection().unwrap();
    let (mut admin, mut user) = (server.client(), server.client());
    for (who, line) in SCRIPT {
        let (theirs, ours) = match who {
            'a' => (call(&mut redis_admin, line), call(&mut admin, line)),
            _ => (call(&mut redis_user, line), call(&mut user, line)),
        };
        assert_eq!(ours, theirs, "{who}: {}", line.join(" "));
    }
    // Commands of a category: the same set as Redis 7.0's.
    for category in ["hash", "dangerous", "pubsub", "keyspace", "connection"] {
        let sorted = |c: &mut redis::Connection| {
            let mut v: Vec<String> = cmd("ACL").arg("CAT").arg(category).query(c).unwrap();
            v.sort();
            v
        };
        assert_eq!(sorted(&mut admin), sorted(&mut redis_admin), "ACL CAT {category}");
    }
}

fn log_entries(c: &mut redis::Connection) -> Vec<std::collections::HashMap<String, Value>> {
    cmd("ACL").arg("LOG").query(c).unwrap()
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[test]
fn log_live_changes_deleted_users_and_revoked_subscribers() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    cmd("ACL")
        .arg(&["SETUSER", "alice", "on", ">pw", "~app:*", "&news.*", "+@read", "+@pubsub"])
        .exec(&mut admin)
        .unwrap();
    let mut alice = server.client();
    cmd("AUTH").arg("alice").arg("pw").exec(&mut alice).unwrap();
    assert!(cmd("GET").arg("secret").query::<Value>(&mut alice).is_err());
    assert!(cmd("AUTH").arg("alice").arg("bad").query::<Value>(&mut admin).is_err());
    let log = log_entries(&mut admin);
    assert_eq!(log.len(), 2);
    assert_eq!(
        (text(&log[0]["reason"]), text(&log[0]["object"]), text(&log[0]["username"])),
        ("auth".into(), "AUTH".into(), "alice".into())
    );
    assert_eq!(
        (text(&log[1]["reason"]), text(&log[1]["object"]), text(&log[1]["context"])),
        ("key".into(), "secret".into(), "toplevel".into())
    );
    assert!(text(&log[1]["client-info"]).contains("user=alice"));
    let info: String = cmd("INFO").arg("stats").query(&mut admin).unwrap();
    assert!(info.contains("acl_access_denied_auth:1") && info.contains("acl_access_denied_key:1"), "{info}");
    let clients: String = cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    assert!(clients.contains("user=alice") && clients.contains("user=default"), "{clients}");

    // A change applies to the connection already authenticated.
    cmd("ACL").arg(&["SETUSER", "alice", "-get"]).exec(&mut admin).unwrap();
    let err = cmd("GET").arg("app:1").query::<Value>(&mut alice).unwrap_err();
    assert_eq!(err.detail(), Some("this user has no permissions to run the 'get' command"));

    // Revoking a channel closes alice's subscriber; her other connection stays.
    let mut sub = server.raw();
    roundtrip(&mut sub, b"AUTH alice pw\r\nSUBSCRIBE news.today\r\n", 5 + 40);
    cmd("ACL").arg(&["SETUSER", "alice", "resetchannels", "&sport"]).exec(&mut admin).unwrap();
    assert!(closed(&mut sub), "the subscriber to a revoked channel is closed");
    assert_eq!(cmd("EXISTS").arg("app:1").query::<i64>(&mut alice).unwrap(), 0);

    // CLIENT KILL USER closes the user's connections and counts them.
    let mut spare = server.client();
    cmd("AUTH").arg("alice").arg("pw").exec(&mut spare).unwrap();
    let killed: i64 = cmd("CLIENT").arg(&["KILL", "USER", "alice"]).query(&mut admin).unwrap();
    assert!(killed >= 2, "alice's connections: {killed}");
    let mut alice = server.client();
    cmd("AUTH").arg("alice").arg("pw").exec(&mut alice).unwrap();

    // Deleting the user closes its connections.
    assert_eq!(cmd("ACL").arg(&["DELUSER", "alice"]).query::<i64>(&mut admin).unwrap(), 1);
    assert!(cmd("EXISTS").arg("app:1").query::<i64>(&mut alice).is_err(), "a deleted user's connection is closed");
    assert_eq!(cmd("PING").query::<String>(&mut admin).unwrap(), "PONG");
}

/// True if the peer closed the connection (reads end) within a few seconds.
fn closed(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
        }
    }
}

#[test]
fn users_from_aclfile_and_config_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.acl");
    std::fs::write(&file, "user default on nopass ~* &* +@all\nuser ops on >opspw ~* +@all -@dangerous\n").unwrap();
    let server = Server::start(&["--aclfile", file.to_str().unwrap()]);
    let mut c = server.client();
    assert_eq!(cmd("AUTH").arg("ops").arg("opspw").query::<String>(&mut c).unwrap(), "OK");
    assert!(cmd("FLUSHALL").query::<Value>(&mut c).is_err(), "@dangerous is denied to ops");
    // ACL SAVE writes what ACL LIST shows; ACL LOAD replaces every user and closes their clients.
    let mut admin = server.client();
    cmd("ACL").arg(&["SETUSER", "new", "on", ">np", "+ping"]).exec(&mut admin).unwrap();
    cmd("ACL").arg("SAVE").exec(&mut admin).unwrap();
    let saved = std::fs::read_to_string(&file).unwrap();
    let listed: Vec<String> = cmd("ACL").arg("LIST").query(&mut admin).unwrap();
    assert_eq!(saved, listed.iter().map(|l| format!("{l}\n")).collect::<String>());
    std::fs::write(&file, "user default on nopass ~* &* +@all\nuser ops on >other +@all\n").unwrap();
    cmd("ACL").arg("LOAD").exec(&mut admin).unwrap();
    assert!(cmd("PING").query::<String>(&mut c).is_err(), "ops' connection closed by ACL LOAD");
    let users: Vec<String> = cmd("ACL").arg("USERS").query(&mut admin).unwrap();
    assert_eq!(users, ["default", "ops"]);
    std::fs::write(&file, "user ops on +nosuch\n").unwrap();
    let err = cmd("ACL").arg("LOAD").query::<Value>(&mut admin).unwrap_err();
    assert!(err.to_string().contains("no change to the previously active ACL rules"), "{err}");
    drop(server);

    // `user` lines in the configuration file, and CONFIG REWRITE keeps users there.
    let server = Server::start_with_config("user reader on >rpw ~* +@read\n", &[]);
    let mut c = server.client();
    cmd("AUTH").arg("reader").arg("rpw").exec(&mut c).unwrap();
    assert!(cmd("SET").arg("k").arg("v").query::<Value>(&mut c).is_err());
    let mut admin = server.client();
    cmd("ACL").arg(&["SETUSER", "writer", "on", ">wpw", "~*", "+@write"]).exec(&mut admin).unwrap();
    cmd("CONFIG").arg("REWRITE").exec(&mut admin).unwrap();
    let conf = std::fs::read_to_string(server.dir.path().join("shale.conf")).unwrap();
    assert!(conf.contains("user reader on #") && conf.contains("user writer on #"), "{conf}");
    let server = server.restart(&[]);
    let mut c = server.client();
    assert_eq!(cmd("AUTH").arg("writer").arg("wpw").query::<String>(&mut c).unwrap(), "OK", "users survive a restart");

    // Both sources at once, or a broken aclfile: the server refuses to start.
    let conf = dir.path().join("both.conf");
    std::fs::write(&conf, format!("user a on\naclfile {}\n", file.display())).unwrap();
    let log = common::refused_start(&[
        conf.to_str().unwrap(),
        "--port",
        "0",
        "--dir",
        dir.path().join("d").to_str().unwrap(),
    ]);
    assert!(log.contains("either an ACL file or declare users"), "{log}");
}

#[test]
fn requirepass_and_unauthenticated_limits() {
    let server = Server::start(&["--requirepass", "s3cret"]);
    let mut s = server.raw();
    // More than 10 arguments, or a bulk over 16 KiB, before AUTH: an error and the connection closes.
    let reply = roundtrip(&mut s, b"*11\r\n", 45);
    assert!(String::from_utf8_lossy(&reply).starts_with("-ERR Protocol error: unauthenticated multibulk length"));
    assert!(closed(&mut s));
    let mut s = server.raw();
    let reply = roundtrip(&mut s, b"*2\r\n$4\r\nAUTH\r\n$500000000\r\n", 40);
    assert!(String::from_utf8_lossy(&reply).starts_with("-ERR Protocol error: unauthenticated bulk length"));
    assert!(closed(&mut s));
    // AUTH and a big request in one write: the request after AUTH is parsed as authenticated.
    let mut s = server.raw();
    let big = vec![b'x'; 100_000];
    let mut req = b"AUTH s3cret\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n".to_vec();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    s.write_all(&req).unwrap();
    let reply = roundtrip(&mut s, b"", 10);
    assert_eq!(String::from_utf8_lossy(&reply), "+OK\r\n+OK\r\n");
    // requirepass is the default user's password, changed by CONFIG SET too.
    let mut c =
        redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", server.port)).unwrap().get_connection().unwrap();
    cmd("CONFIG").arg(&["SET", "requirepass", "n3w"]).exec(&mut c).unwrap();
    let mut other = server.raw();
    let reply = roundtrip(&mut other, b"AUTH s3cret\r\nAUTH default n3w\r\nACL WHOAMI\r\n", 70);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("-WRONGPASS") && reply.ends_with("+OK\r\n$7\r\ndefault\r\n"), "{reply}");
}

#[test]
fn a_user_deleting_itself_gets_the_reply_then_is_closed() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    cmd("ACL").arg(&["SETUSER", "ops", "on", ">pw", "+@all", "~*"]).exec(&mut admin).unwrap();
    let mut s = server.raw();
    let reply = roundtrip(&mut s, b"AUTH ops pw\r\nACL DELUSER ops\r\n", 9);
    assert_eq!(String::from_utf8_lossy(&reply), "+OK\r\n:1\r\n");
    assert!(closed(&mut s));
}
