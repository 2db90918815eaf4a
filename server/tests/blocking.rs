//! Blocking pops against a real `shale-server`: woken by a push from another client, FIFO among
//! waiters, timeout precision, BLMOVE atomicity, disconnects, CLIENT UNBLOCK, BZPOPMIN.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::Server;
use redis::{cmd, Value};

fn client_id(c: &mut redis::Connection) -> i64 {
    cmd("CLIENT").arg("ID").query(c).unwrap()
}

/// Waits until the server reports `n` blocked clients.
fn wait_blocked(c: &mut redis::Connection, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = cmd("INFO").arg("clients").query(c).unwrap();
        if info.contains(&format!("blocked_clients:{n}\r\n")) {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {n} blocked clients: {info}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn blpop_is_woken_by_a_push_from_another_client() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut admin = server.client();
    let t =
        thread::spawn(move || cmd("BLPOP").arg("q1").arg("q2").arg(0).query::<(String, String)>(&mut waiter).unwrap());
    wait_blocked(&mut admin, 1);
    assert_eq!(cmd("RPUSH").arg("q2").arg("job").query::<i64>(&mut admin).unwrap(), 1);
    assert_eq!(t.join().unwrap(), ("q2".to_string(), "job".to_string()));
    assert_eq!(cmd("EXISTS").arg("q2").query::<i64>(&mut admin).unwrap(), 0, "the element went to the waiter");
    wait_blocked(&mut admin, 0);
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut handles = Vec::new();
    for i in 0..3 {
        let mut c = server.client();
        handles
            .push(thread::spawn(move || cmd("BRPOP").arg("fifo").arg(5).query::<(String, String)>(&mut c).unwrap().1));
        // Arrival order is the order they blocked in.
        wait_blocked(&mut admin, i + 1);
    }
    // One push of three elements: the oldest waiter gets the first popped (RPUSH a b c, BRPOP
    // takes from the right: c, then b, then a).
    cmd("RPUSH").arg("fifo").arg("a").arg("b").arg("c").query::<i64>(&mut admin).unwrap();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, ["c", "b", "a"]);
}

#[test]
fn timeouts_are_precise_and_answer_null() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let t = Instant::now();
    assert_eq!(cmd("BLPOP").arg("empty").arg(0.3).query::<Value>(&mut c).unwrap(), Value::Nil);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_millis(800), "{waited:?}");
    let t = Instant::now();
    assert_eq!(
        cmd("BLMOVE").arg("empty").arg("d").arg("LEFT").arg("RIGHT").arg(0.1).query::<Value>(&mut c).unwrap(),
        Value::Nil
    );
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        cmd("BZPOPMIN").arg("empty").arg(0.05).query::<Value>(&mut c).unwrap(),
        Value::Nil,
        "and the connection keeps working afterwards"
    );
    let e = cmd("BLPOP").arg("k").arg(-1).query::<Value>(&mut c).unwrap_err();
    assert_eq!(e.detail(), Some("timeout is negative"));
}

#[test]
fn blmove_moves_atomically_and_wakes_the_destination_waiters() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut mover = server.client();
    let mut downstream = server.client();
    let a = thread::spawn(move || {
        cmd("BLMOVE").arg("src").arg("mid").arg("LEFT").arg("RIGHT").arg(5).query::<String>(&mut mover).unwrap()
    });
    wait_blocked(&mut admin, 1);
    let b = thread::spawn(move || cmd("BLPOP").arg("mid").arg(5).query::<(String, String)>(&mut downstream).unwrap());
    wait_blocked(&mut admin, 2);
    cmd("LPUSH").arg("src").arg("parcel").query::<i64>(&mut admin).unwrap();
    assert_eq!(a.join().unwrap(), "parcel");
    assert_eq!(b.join().unwrap(), ("mid".to_string(), "parcel".to_string()), "the moved element was served on");
    let left: i64 = cmd("LLEN").arg("src").query(&mut admin).unwrap();
    let mid: i64 = cmd("LLEN").arg("mid").query(&mut admin).unwrap();
    assert_eq!((left, mid), (0, 0), "exactly one copy existed at any time and it was consumed once");
}

#[test]
fn disconnect_while_blocked_and_client_unblock() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    {
        let mut gone = server.raw();
        std::io::Write::write_all(&mut gone, b"BLPOP dropped 0\r\n").unwrap();
        wait_blocked(&mut admin, 1);
    }
    // The socket closed: the waiter is withdrawn and a push stays in the list.
    wait_blocked(&mut admin, 0);
    cmd("RPUSH").arg("dropped").arg("kept").query::<i64>(&mut admin).unwrap();
    assert_eq!(cmd("LLEN").arg("dropped").query::<i64>(&mut admin).unwrap(), 1);

    let mut c = server.client();
    let id = client_id(&mut c);
    let t = thread::spawn(move || cmd("BLPOP").arg("never").arg(0).query::<Value>(&mut c));
    wait_blocked(&mut admin, 1);
    assert_eq!(cmd("CLIENT").arg("UNBLOCK").arg(id).query::<i64>(&mut admin).unwrap(), 1);
    assert_eq!(t.join().unwrap().unwrap(), Value::Nil, "TIMEOUT (the default) answers like a timeout");
    assert_eq!(cmd("CLIENT").arg("UNBLOCK").arg(id).query::<i64>(&mut admin).unwrap(), 0, "no longer blocked");

    let mut c = server.client();
    let id = client_id(&mut c);
    let t = thread::spawn(move || cmd("BZPOPMAX").arg("z").arg(0).query::<Value>(&mut c));
    wait_blocked(&mut admin, 1);
    assert_eq!(cmd("CLIENT").arg("UNBLOCK").arg(id).arg("ERROR").query::<i64>(&mut admin).unwrap(), 1);
    let e = t.join().unwrap().unwrap_err();
    assert_eq!(e.code(), Some("UNBLOCKED"));
}

#[test]
fn bzpopmin_and_blmpop_are_served_by_writes() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut a = server.client();
    let mut b = server.client();
    let ta =
        thread::spawn(move || cmd("BZPOPMIN").arg("scores").arg(5).query::<(String, String, f64)>(&mut a).unwrap());
    wait_blocked(&mut admin, 1);
    cmd("ZADD").arg("scores").arg(2).arg("two").arg(1).arg("one").query::<i64>(&mut admin).unwrap();
    assert_eq!(ta.join().unwrap(), ("scores".to_string(), "one".to_string(), 1.0));
    let tb = thread::spawn(move || {
        cmd("BLMPOP").arg(5).arg(2).arg("l1").arg("l2").arg("RIGHT").arg("COUNT").arg(2).query::<Value>(&mut b).unwrap()
    });
    wait_blocked(&mut admin, 1);
    cmd("RPUSH").arg("l2").arg("x").arg("y").arg("z").query::<i64>(&mut admin).unwrap();
    let got = tb.join().unwrap();
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(got, Value::Array(vec![bulk("l2"), Value::Array(vec![bulk("z"), bulk("y")])]));
}

#[test]
fn a_blocked_brpoplpush_whose_destination_is_not_a_list_gets_wrongtype_and_the_element_stays() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut admin = server.client();
    cmd("SET").arg("target").arg("nolist").query::<()>(&mut admin).unwrap();
    let t = thread::spawn(move || {
        let err = cmd("BRPOPLPUSH").arg("src").arg("target").arg(0).query::<Value>(&mut waiter).unwrap_err();
        // The client goes on working after the error.
        let pong: String = cmd("PING").query(&mut waiter).unwrap();
        (err.code().map(str::to_string), pong)
    });
    wait_blocked(&mut admin, 1);
    cmd("RPUSH").arg("src").arg("a").arg("b").query::<()>(&mut admin).unwrap();
    assert_eq!(t.join().unwrap(), (Some("WRONGTYPE".to_string()), "PONG".to_string()));
    assert_eq!(cmd("LRANGE").arg("src").arg(0).arg(-1).query::<Vec<String>>(&mut admin).unwrap(), ["a", "b"]);
    wait_blocked(&mut admin, 0);
}

#[test]
fn swapdb_serves_clients_blocked_on_keys_the_swap_brings_in() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    cmd("SELECT").arg(1).query::<()>(&mut admin).unwrap();
    cmd("RPUSH").arg("k").arg("hello").query::<()>(&mut admin).unwrap();
    let mut waiter = server.client();
    cmd("SELECT").arg(9).query::<()>(&mut waiter).unwrap();
    let t = thread::spawn(move || cmd("BRPOP").arg("k").arg(5).query::<(String, String)>(&mut waiter).unwrap());
    wait_blocked(&mut admin, 1);
    cmd("SWAPDB").arg(1).arg(9).query::<()>(&mut admin).unwrap();
    assert_eq!(t.join().unwrap(), ("k".to_string(), "hello".to_string()));
    cmd("SELECT").arg(9).query::<()>(&mut admin).unwrap();
    assert_eq!(cmd("EXISTS").arg("k").query::<i64>(&mut admin).unwrap(), 0, "the element went to the waiter");
}
