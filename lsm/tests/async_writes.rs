//! `Db::write_async`: batches queued without blocking are committed by the engine's commit
//! thread, in order with blocking writers, and their futures resolve once the writes are
//! visible.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use lsm::{Db, Options, WriteBatch, WriteOptions};

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` to completion on this thread, parking between polls.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn batch(pairs: &[(&str, &str)]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (k, v) in pairs {
        b.put(k, v);
    }
    b
}

#[test]
fn async_writes_commit_in_order_and_resolve_once_visible() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let opts = WriteOptions::default();
    let first = db.write_async(&mut batch(&[("a", "1"), ("b", "1")]), &opts).unwrap();
    db.put("a", "2").unwrap(); // a blocking write queued after it commits after it
    let second = db.write_async(&mut batch(&[("b", "2")]), &opts).unwrap();
    assert!(first.ticket() < second.ticket());
    let ticket = second.ticket();
    block_on(first).unwrap();
    block_on(second).unwrap();
    assert!(db.is_committed(ticket));
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"2"[..]));

    // A dropped future does not cancel its write; a reader can wait for it by ticket, blocking
    // or not (several at once), and the write's own result is not taken by them.
    let dropped = db.write_async(&mut batch(&[("c", "3")]), &opts).unwrap();
    let ticket = dropped.ticket();
    drop(dropped);
    db.wait_committed(ticket);
    assert_eq!(db.get("c").unwrap().as_deref(), Some(&b"3"[..]));
    let own = db.write_async(&mut batch(&[("d", "4")]), &opts).unwrap();
    let (w1, w2) = (db.committed(own.ticket()), db.committed(own.ticket()));
    block_on(w1);
    block_on(w2);
    assert_eq!(db.get("d").unwrap().as_deref(), Some(&b"4"[..]));
    block_on(own).unwrap();

    // Many writers at once, from many threads, none of them leading: all land.
    let db = Arc::new(db);
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                for i in 0..500 {
                    let k = format!("t{t}-{i}");
                    block_on(db.write_async(&mut batch(&[(&k, "v")]), &WriteOptions::default()).unwrap()).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(db.prefix("t").count(), 2000);
}

#[test]
fn async_writes_queued_before_closing_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        block_on(db.write_async(&mut batch(&[("k", "v")]), &WriteOptions::default()).unwrap()).unwrap();
        // Queued and never awaited: closing commits it before the WAL is closed.
        drop(db.write_async(&mut batch(&[("late", "v")]), &WriteOptions::default()).unwrap());
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(db.get("late").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn deferred_async_writes_commit_once_started_when_the_queue_fills_or_behind_a_blocking_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let opts = WriteOptions::default();
    // Started explicitly (what an event loop does at the end of its pass).
    let first = db.write_async_deferred(&mut batch(&[("a", "1")]), &opts).unwrap();
    db.start_deferred_commits();
    block_on(first).unwrap();
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]));

    // Never started: once 64 deferred batches wait, the queue wakes the commit thread by
    // itself, so a loop that forgot to start them does not grow the queue without bound. (How
    // many wait when it wakes depends on the commit thread's timing: if it was still busy with
    // the write above, it takes the first batches alone and the count starts again.)
    let mut commits = Vec::new();
    while commits.first().is_none_or(|c: &lsm::Commit| !db.is_committed(c.ticket())) {
        assert!(commits.len() < 10_000, "64 waiting deferred batches wake the commit thread");
        let key = format!("q{:05}", commits.len());
        commits.push(db.write_async_deferred(&mut batch(&[(&key, "v")]), &opts).unwrap());
        if commits.len() % 64 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let queued = commits.len();
    db.start_deferred_commits();
    for c in commits {
        block_on(c).unwrap();
    }
    assert_eq!(db.prefix("q").count(), queued);

    // A blocking writer commits the deferred batches queued before it, in order.
    let deferred = db.write_async_deferred(&mut batch(&[("b", "1")]), &opts).unwrap();
    db.put("b", "2").unwrap();
    assert!(db.is_committed(deferred.ticket()));
    block_on(deferred).unwrap();
    assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"2"[..]));

    // Closing commits what is still deferred.
    drop(db.write_async_deferred(&mut batch(&[("late", "v")]), &opts).unwrap());
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get("late").unwrap().as_deref(), Some(&b"v"[..]));
}
