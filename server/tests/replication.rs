//! Replication between real shale-server processes: full and partial resyncs, restarts,
//! killed links, promotion and the old primary rejoining, chained replicas, WAIT, read-only
//! replicas, PUBLISH, min-replicas-to-write. Databases are compared with `DEBUG DIGEST`
//! (every key's type, value and expiry) and DBSIZE per database.

mod common;

use std::time::Duration;

use common::sync::{assert_in_sync, try_info, wait_for};
use common::Server;
use rand::{Rng, SeedableRng};
use redis::Commands;

const DEBUG: [&str; 2] = ["--enable-debug-command", "yes"];

fn primary(extra: &[&str]) -> Server {
    Server::start(&[&DEBUG[..], extra].concat())
}

fn replica_of(p: &Server, extra: &[&str]) -> Server {
    let upstream = format!("127.0.0.1 {}", p.port);
    Server::start(&[&DEBUG[..], &["--replicaof", &upstream], extra].concat())
}

fn info(c: &mut redis::Connection, field: &str) -> String {
    try_info(c, field).unwrap_or_else(|| panic!("INFO has no {field}"))
}

fn digest(c: &mut redis::Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

/// A mix of every data type, TTLs, transactions and database-wide commands.
fn write_everything(c: &mut redis::Connection, round: u32) {
    let _: () = c.set(format!("s{round}"), "string").unwrap();
    let _: () = redis::cmd("SET").arg(format!("ttl{round}")).arg("v").arg("EX").arg(1000).query(c).unwrap();
    let _: () = c.rpush(format!("l{round}"), &["a", "b", "c", "d"]).unwrap();
    let _: String = c.lpop(format!("l{round}"), None).unwrap();
    let _: () = c.hset_multiple(format!("h{round}"), &[("f1", "v1"), ("f2", "v2")]).unwrap();
    let _: () = c.sadd(format!("set{round}"), &["x", "y", "z"]).unwrap();
    let _: () = c.zadd_multiple(format!("z{round}"), &[(1.5, "one"), (2.5, "two")]).unwrap();
    let _: () = c.incr(format!("n{round}"), 7).unwrap();
    let _: () = redis::pipe()
        .atomic()
        .set(format!("tx{round}"), 1)
        .incr(format!("tx{round}"), 1)
        .rpush(format!("txl{round}"), "e")
        .query(c)
        .unwrap();
    // Short TTLs: the primary's expiry cycle deletes them and the deletes replicate.
    let _: () = redis::cmd("SET").arg(format!("short{round}")).arg("v").arg("PX").arg(50).query(c).unwrap();
    redis::cmd("SELECT").arg(1).query::<()>(c).unwrap();
    let _: () = c.set(format!("db1-{round}"), round).unwrap();
    let _: () = c.hset(format!("db1h{round}"), "f", "v").unwrap();
    redis::cmd("SELECT").arg(3).query::<()>(c).unwrap();
    let _: () = c.set("doomed", 1).unwrap();
    let _: () = redis::cmd("FLUSHDB").query(c).unwrap();
    let _: () = c.set(format!("db3-{round}"), round).unwrap();
    redis::cmd("SELECT").arg(0).query::<()>(c).unwrap();
    let _: bool = redis::cmd("MOVE").arg(format!("s{round}")).arg(2).query(c).unwrap();
    let _: () = redis::cmd("SWAPDB").arg(1).arg(2).query(c).unwrap();
}

#[test]
fn a_replica_gets_every_type_and_stays_exact_under_random_commands() {
    let p = primary(&[]);
    let mut pc = p.client();
    write_everything(&mut pc, 0);
    // Full sync of existing data, then the live stream.
    let r = replica_of(&p, &[]);
    assert_in_sync(&p, &r);
    write_everything(&mut pc, 1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..2000 {
        let key = format!("k{}", rng.random_range(0..200));
        let v = rng.random_range(0..1000).to_string();
        let _: redis::RedisResult<redis::Value> = match rng.random_range(0..10) {
            0 => pc.set(&key, &v),
            1 => pc.del(&key),
            2 => pc.rpush(&key, &v),
            3 => pc.hset(&key, &v, &v),
            4 => pc.sadd(&key, &v),
            5 => pc.zadd(&key, &v, rng.random_range(0..100)),
            6 => pc.expire(&key, 100),
            7 => redis::cmd("RENAME").arg(&key).arg(format!("k{}", rng.random_range(0..200))).query(&mut pc),
            8 => pc.incr(&key, 1),
            _ => redis::cmd("SPOP").arg(&key).query(&mut pc),
        };
    }
    let confirmed: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut pc).unwrap();
    assert_eq!(confirmed, 1, "WAIT counts the replica once it applied everything");
    std::thread::sleep(Duration::from_millis(300)); // the short TTLs pass; the primary deletes them
    assert_in_sync(&p, &r);

    // A replica is read-only, and says what it is.
    let mut rc = r.client();
    let err = rc.set::<_, _, ()>("x", 1).unwrap_err();
    assert_eq!(err.code(), Some("READONLY"), "{err}");
    let err = redis::cmd("WAIT").arg(1).arg(0).query::<i64>(&mut rc).unwrap_err();
    assert!(err.to_string().contains("WAIT cannot be used with replica instances"), "{err}");
    let role: redis::Value = redis::cmd("ROLE").query(&mut rc).unwrap();
    let redis::Value::Array(parts) = role else { panic!("ROLE: {role:?}") };
    assert_eq!(parts[0], redis::Value::BulkString(b"slave".to_vec()));
    assert_eq!(parts[2], redis::Value::Int(i64::from(p.port)));
    assert_eq!(parts[3], redis::Value::BulkString(b"connected".to_vec()));
    let role: redis::Value = redis::cmd("ROLE").query(&mut pc).unwrap();
    let redis::Value::Array(parts) = role else { panic!("ROLE: {role:?}") };
    assert_eq!(parts[0], redis::Value::BulkString(b"master".to_vec()));
    assert!(matches!(&parts[2], redis::Value::Array(rs) if rs.len() == 1));
    assert_eq!(info(&mut pc, "connected_slaves"), "1");
    assert!(info(&mut pc, "slave0").contains("state=online"), "{}", info(&mut pc, "slave0"));
    assert_eq!(info(&mut pc, "sync_full"), "1");
    let first: u64 = info(&mut pc, "repl_backlog_first_byte_offset").parse().unwrap();
    let histlen: u64 = info(&mut pc, "repl_backlog_histlen").parse().unwrap();
    let offset: u64 = info(&mut pc, "master_repl_offset").parse().unwrap();
    assert!(first >= 1 && histlen > 0 && first + histlen == offset + 1, "{first} + {histlen} vs {offset}");
    // A Redis replica (which would wait for an RDB file) is told why it cannot follow.
    let err = redis::cmd("PSYNC").arg("?").arg(-1).query::<String>(&mut p.client()).unwrap_err();
    assert!(err.to_string().contains("only shale-server replicas can follow"), "{err}");
}

#[test]
fn restarts_and_killed_links_resume_with_partial_resyncs() {
    let p = primary(&[]);
    let mut pc = p.client();
    write_everything(&mut pc, 0);
    let r = replica_of(&p, &[]);
    assert_in_sync(&p, &r);
    let upstream = format!("127.0.0.1 {}", p.port);
    let args = [&DEBUG[..], &["--replicaof", &upstream]].concat();

    // Clean restart, with writes while it is down.
    let mut r = r;
    r.terminate();
    write_everything(&mut pc, 1);
    let r = r.restart(&args);
    assert_in_sync(&p, &r);
    // Killed with SIGKILL.
    write_everything(&mut pc, 2);
    let r = r.crash_restart(&args);
    write_everything(&mut pc, 3);
    assert_in_sync(&p, &r);
    // The link closed from the replica's side (CLIENT KILL TYPE master), then from the primary's.
    let mut rc = r.client();
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("master").query(&mut rc).unwrap();
    assert_eq!(killed, 1);
    write_everything(&mut pc, 4);
    assert_in_sync(&p, &r);
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut pc).unwrap();
    assert_eq!(killed, 1);
    write_everything(&mut pc, 5);
    assert_in_sync(&p, &r);
    assert_eq!(info(&mut pc, "sync_full"), "1", "only the first sync was full");
    assert_eq!(info(&mut pc, "sync_partial_ok"), "4");
}

#[test]
fn a_replica_beyond_the_backlog_gets_a_full_sync_while_writes_go_on() {
    // A small write buffer and backlog: the WAL the replica needs is gone after a while.
    let p = primary(&["--write-buffer-size", "65536", "--repl-backlog-size", "1mb", "--block-cache-size", "1mb"]);
    let mut pc = p.client();
    let r = replica_of(&p, &[]);
    assert_in_sync(&p, &r);
    let mut r = r;
    r.terminate();
    let value = "v".repeat(200);
    for i in 0..20_000 {
        let _: () = pc.set(format!("key{i}"), &value).unwrap();
    }
    // Restart it while a writer keeps writing: the full sync (data far beyond the block cache)
    // and the stream after it lose nothing.
    let port = p.port;
    let writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        for i in 0..3000 {
            let _: () = c.set(format!("during{i}"), i).unwrap();
        }
    });
    let upstream = format!("127.0.0.1 {}", p.port);
    let r = r.restart(&[&DEBUG[..], &["--replicaof", &upstream]].concat());
    writer.join().unwrap();
    assert_in_sync(&p, &r);
    assert_eq!(info(&mut pc, "sync_full"), "2", "the backlog no longer held the replica's offset");
    let mut rc = r.client();
    assert_eq!(rc.get::<_, String>("key19999").unwrap(), value);
    assert_eq!(rc.get::<_, i64>("during2999").unwrap(), 2999);
}

#[test]
fn a_promoted_replica_serves_the_others_and_the_old_primary_rejoins_partially() {
    let p = primary(&[]);
    let mut pc = p.client();
    write_everything(&mut pc, 0);
    let r1 = replica_of(&p, &[]);
    let r2 = replica_of(&p, &[]);
    assert_in_sync(&p, &r1);
    assert_in_sync(&p, &r2);
    let confirmed: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut pc).unwrap();
    assert_eq!(confirmed, 2);

    // The primary dies; r1 is promoted; r2 follows it.
    let p_port = p.port;
    let mut p_dir_holder = p; // its directory stays for the restart below
    let _ = p_dir_holder.child.kill();
    let _ = p_dir_holder.child.wait();
    let mut r1c = r1.client();
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r1c).unwrap();
    let mut r2c = r2.client();
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(r1.port).query(&mut r2c).unwrap();
    write_everything(&mut r1c, 1);
    assert_in_sync(&r1, &r2);
    assert_eq!(info(&mut r1c, "master_replid2").len(), 40);
    assert_eq!(info(&mut r1c, "sync_full"), "0", "r2 continued partially with the new primary");

    // The old primary comes back after a crash and is pointed at the new one.
    let upstream = format!("127.0.0.1 {}", r1.port);
    let old = p_dir_holder.crash_restart(&[&DEBUG[..], &["--replicaof", &upstream]].concat());
    assert_eq!(old.port, p_port);
    assert_in_sync(&r1, &old);
    assert_eq!(info(&mut r1c, "sync_full"), "0", "the old primary caught up with a partial resync");
    let mut oc = old.client();
    assert_eq!(oc.get::<_, String>("s1").ok(), None, "s1 was moved to db 2 on the new primary");
    assert_eq!(redis::cmd("CONFIG").arg("GET").arg("replicaof").query::<Vec<String>>(&mut r2c).unwrap()[1], upstream);
}

#[test]
fn a_diverged_replica_is_resynced_in_full_and_keeps_nothing_of_its_own() {
    let p = primary(&[]);
    let mut pc = p.client();
    write_everything(&mut pc, 0);
    // Another primary with its own history, then made a replica of p.
    let other = primary(&[]);
    let mut oc = other.client();
    for i in 0..100 {
        let _: () = oc.set(format!("mine{i}"), i).unwrap();
    }
    assert_ne!(digest(&mut oc), digest(&mut pc), "DEBUG DIGEST tells different data apart");
    let empty = primary(&[]);
    assert_eq!(digest(&mut empty.client()), "0".repeat(40));
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(p.port).query(&mut oc).unwrap();
    assert_in_sync(&p, &other);
    let mine: Option<String> = oc.get("mine5").unwrap();
    assert_eq!(mine, None, "its own writes are gone: it holds exactly the primary's data");
    assert_eq!(info(&mut pc, "sync_full"), "1");
}

#[test]
fn chained_replicas_and_publish_reach_the_end_of_the_chain() {
    let p = primary(&[]);
    let r1 = replica_of(&p, &[]);
    let r2 = replica_of(&r1, &[]);
    let mut pc = p.client();
    write_everything(&mut pc, 0);
    assert_in_sync(&p, &r1);
    assert_in_sync(&p, &r2);
    // Messages published on the primary reach subscribers of replicas, as in Redis.
    let mut sub = r2.client();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("news").unwrap();
    pubsub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _: i64 = pc.publish("news", "hello").unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "hello");
}

#[test]
fn min_replicas_to_write_refuses_writes_without_enough_replicas() {
    let p = primary(&["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]);
    let mut pc = p.client();
    let err = pc.set::<_, _, ()>("k", 1).unwrap_err();
    assert_eq!(err.code(), Some("NOREPLICAS"), "{err}");
    let r = replica_of(&p, &[]);
    wait_for("a good replica", || pc.set::<_, _, ()>("k", 1).is_ok());
    drop(r);
    wait_for("the primary to notice the replica is gone", || pc.set::<_, _, ()>("k", 2).is_err());
    // Reads are never refused; the setting changes at runtime.
    assert_eq!(pc.get::<_, i64>("k").unwrap(), 1);
    redis::cmd("CONFIG").arg("SET").arg("min-replicas-to-write").arg(0).query::<()>(&mut pc).unwrap();
    let _: () = pc.set("k", 3).unwrap();
}

#[test]
fn an_old_primary_with_writes_the_new_one_never_saw_rewinds_them_and_continues_partially() {
    let p = primary(&[]);
    let mut pc = p.client();
    write_everything(&mut pc, 0);
    let r = replica_of(&p, &[]);
    assert_in_sync(&p, &r);
    // r is promoted while p, cut off from it, still takes a write.
    let mut rc = r.client();
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut rc).unwrap();
    let _: () = pc.set("lost", "p only").unwrap();
    let _: () = pc.rpush("l0", "p only").unwrap();
    let _: () = rc.set("kept", "r only").unwrap();
    // p follows r: its two writes are dropped, the rest continues partially.
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(r.port).query(&mut pc).unwrap();
    assert_in_sync(&r, &p);
    assert_eq!(pc.get::<_, Option<String>>("lost").unwrap(), None);
    assert_eq!(pc.get::<_, String>("kept").unwrap(), "r only");
    assert_eq!(info(&mut rc, "sync_full"), "0", "no full sync was needed");
    assert_eq!(info(&mut rc, "sync_partial_ok"), "1");
}

#[test]
fn replicas_authenticate_with_masterauth_and_can_refuse_stale_reads() {
    let p = primary(&["--requirepass", "s3cret"]);
    let upstream = format!("127.0.0.1 {}", p.port);
    let r = Server::start(
        &[&DEBUG[..], &["--replicaof", &upstream, "--masterauth", "s3cret", "--replica-serve-stale-data", "no"]]
            .concat(),
    );
    let mut pc =
        redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", p.port)).unwrap().get_connection().unwrap();
    let _: () = pc.set("k", "v").unwrap();
    let mut rc = r.client();
    wait_for("the write to arrive", || rc.get::<_, Option<String>>("k").ok().flatten().as_deref() == Some("v"));
    // The primary goes away: with replica-serve-stale-data no, data commands are refused.
    drop(p);
    wait_for("the link to go down", || try_info(&mut rc, "master_link_status").as_deref() == Some("down"));
    let err = rc.get::<_, Option<String>>("k").unwrap_err();
    assert_eq!(err.code(), Some("MASTERDOWN"), "{err}");
    assert!(try_info(&mut rc, "master_link_down_since_seconds").is_some());
}

#[test]
fn scripts_and_function_libraries_reach_replicas() {
    let p = primary(&[]);
    let mut pc = p.client();
    let load = |c: &mut redis::Connection, lib: &str, f: &str| -> String {
        let code = format!("#!lua name={lib}\nredis.register_function{{function_name='{f}', callback=function(keys) return redis.call('get', keys[1]) end, flags={{'no-writes'}}}}");
        redis::cmd("FUNCTION").arg("LOAD").arg(code).query(c).unwrap()
    };
    assert_eq!(load(&mut pc, "first", "read1"), "first");
    let _: () = pc.set("k", "v").unwrap();
    // The library travels with the full sync...
    let r = replica_of(&p, &[]);
    assert_in_sync(&p, &r);
    let mut rc = r.client();
    let got: String = redis::cmd("FCALL_RO").arg("read1").arg(1).arg("k").query(&mut rc).unwrap();
    assert_eq!(got, "v");
    // ...and later loads, deletes and script writes with the stream.
    assert_eq!(load(&mut pc, "second", "read2"), "second");
    let _: () = redis::cmd("FUNCTION").arg("DELETE").arg("first").query(&mut pc).unwrap();
    let n: i64 = redis::cmd("EVAL")
        .arg("redis.call('set', KEYS[1], 'a') redis.call('set', KEYS[2], 'b') return 2")
        .arg(2)
        .arg("s1")
        .arg("s2")
        .query(&mut pc)
        .unwrap();
    assert_eq!(n, 2);
    let confirmed: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut pc).unwrap();
    assert_eq!(confirmed, 1);
    let got: String = redis::cmd("FCALL_RO").arg("read2").arg(1).arg("s2").query(&mut rc).unwrap();
    assert_eq!(got, "b");
    let err = redis::cmd("FCALL_RO").arg("read1").arg(1).arg("k").query::<String>(&mut rc).unwrap_err();
    assert!(err.to_string().contains("Function not found"), "{err}");
    // A replica refuses scripts that write.
    let err = redis::cmd("EVAL").arg("return redis.call('set', 'x', 1)").arg(0).query::<String>(&mut rc).unwrap_err();
    assert_eq!(err.code(), Some("READONLY"), "{err}");
}
