//! Clients blocked on keys (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP).
//!
//! A blocking command that finds nothing registers a [`Waiter`] on each of its keys, in arrival
//! order, and its connection awaits the waiter's reply. A command that may add elements to a key
//! notes it (see `Session::signal`); after that command has finished (its key locks released)
//! the dispatcher calls [`Registry::serve`], which runs the oldest waiter's operation on the key,
//! and the next one's while the key still has elements: the longest-waiting client is served
//! first and each element goes to exactly one client, before the pushing client sees its reply.
//! Timeouts, disconnects and `CLIENT UNBLOCK` withdraw a waiter.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::resp::Reply;

/// What a blocked client tries again when one of its keys may have elements: `Some(reply)` once
/// it got something (the reply to send), `None` to keep waiting.
pub type Attempt = Box<dyn Fn(&Bytes) -> Option<Reply> + Send + Sync>;

/// One blocked client.
pub struct Waiter {
    id: u64,
    /// When its command arrived (see [`Registry::next_arrival`]).
    arrival: u64,
    /// The blocked client's id (`CLIENT UNBLOCK`).
    pub client: u64,
    db: u32,
    keys: Vec<Bytes>,
    attempt: Attempt,
    timeout_reply: Reply,
    reply: Mutex<Option<oneshot::Sender<Reply>>>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").field("client", &self.client).field("db", &self.db).field("keys", &self.keys).finish()
    }
}

impl Waiter {
    /// Delivers `reply` unless the waiter was already answered; true if this call answered it.
    fn answer(&self, reply: Reply) -> bool {
        match self.reply.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(tx) => {
                let _ = tx.send(reply);
                true
            }
            None => false,
        }
    }
}

/// Waiters per (database, key), oldest first.
type Queues = HashMap<(u32, Bytes), VecDeque<Arc<Waiter>>>;

/// Every blocked client, by (database, key) in arrival order.
#[derive(Debug, Default)]
pub struct Registry {
    queues: Mutex<Queues>,
    by_client: Mutex<HashMap<u64, Arc<Waiter>>>,
    next_id: AtomicU64,
    /// Source of [`Registry::next_arrival`].
    arrivals: AtomicU64,
    /// Keys to serve, served by one thread at a time (see [`Registry::serve`]).
    serving: Mutex<Serving>,
    /// Blocking commands parsed and not yet run or registered ([`super::announced`]).
    pub announced: super::announced::Announcements,
}

/// Keys signalled and not yet served, and whether a thread is serving them.
#[derive(Debug, Default)]
struct Serving {
    pending: VecDeque<(u32, Bytes)>,
    active: bool,
}

/// Clears `active` if an attempt panics during the serving thread's turn (a normal end clears
/// it under the lock that saw the queue empty).
struct ServingTurn<'a>(&'a Mutex<Serving>);

impl Drop for ServingTurn<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).active = false;
        }
    }
}

/// A registration; dropping it withdraws the waiter.
#[derive(Debug)]
pub struct Registration<'a> {
    registry: &'a Registry,
    waiter: Arc<Waiter>,
}

impl Registration<'_> {
    /// Gives up waiting (timeout): true if the waiter was withdrawn unanswered; false if an
    /// answer is on its way (a pusher is serving it right now), which the caller must then take.
    pub fn cancel(&self) -> bool {
        let taken = self.waiter.reply.lock().unwrap_or_else(|e| e.into_inner()).take();
        if taken.is_some() {
            self.registry.withdraw(&self.waiter);
        }
        taken.is_some()
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.registry.withdraw(&self.waiter);
    }
}

impl Registry {
    /// Blocks client `client` of database `db` on `keys`; `attempt` is retried when one of them
    /// is signalled. The receiver gets the reply.
    pub fn block(
        &self,
        client: u64,
        arrival: u64,
        db: u32,
        keys: Vec<Bytes>,
        attempt: Attempt,
        timeout_reply: Reply,
    ) -> (Registration<'_>, oneshot::Receiver<Reply>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let waiter =
            Arc::new(Waiter { id, arrival, client, db, keys, attempt, timeout_reply, reply: Mutex::new(Some(tx)) });
        {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            for k in &waiter.keys {
                let queue = queues.entry((db, k.clone())).or_default();
                // In arrival order, not registration order: two clients' blocking commands run
                // on different threads and may register the other way round.
                let at = queue.iter().rposition(|w| w.arrival <= arrival).map_or(0, |i| i + 1);
                queue.insert(at, Arc::clone(&waiter));
            }
        }
        self.by_client.lock().unwrap_or_else(|e| e.into_inner()).insert(client, Arc::clone(&waiter));
        (Registration { registry: self, waiter }, rx)
    }

    /// A stamp for requests a connection has just read: blocked clients of one key are served
    /// in the order their commands arrived, as Redis's single thread serves them.
    pub fn next_arrival(&self) -> u64 {
        self.arrivals.fetch_add(1, Ordering::Relaxed)
    }

    fn withdraw(&self, waiter: &Arc<Waiter>) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for k in &waiter.keys {
            let slot = (waiter.db, k.clone());
            if let Some(q) = queues.get_mut(&slot) {
                q.retain(|w| w.id != waiter.id);
                if q.is_empty() {
                    queues.remove(&slot);
                }
            }
        }
        drop(queues);
        let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        if by_client.get(&waiter.client).is_some_and(|w| w.id == waiter.id) {
            by_client.remove(&waiter.client);
        }
    }

    /// Number of blocked clients (INFO `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.by_client.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True if anyone waits on `key` of `db` (a cheap check before serving).
    pub fn has_waiters(&self, db: u32, key: &Bytes) -> bool {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        !queues.is_empty() && queues.contains_key(&(db, key.clone()))
    }

    /// The keys of `db` that clients are blocked on.
    pub fn waited_keys(&self, db: u32) -> Vec<Bytes> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.keys().filter(|(d, _)| *d == db).map(|(_, k)| k.clone()).collect()
    }

    /// Serves the clients blocked on `key` of `db`, oldest first, while their attempts succeed.
    /// One thread serves at a time, so the oldest waiter of a key always gets the first chance
    /// (two pushers serving one key at once could hand an element to the second waiter while
    /// the first still waits): if another thread is serving, the key is queued for it and this
    /// returns at once; so is a key signalled by an attempt itself (BLMOVE's destination).
    pub fn serve(&self, db: u32, key: &Bytes) {
        {
            let mut st = self.serving.lock().unwrap_or_else(|e| e.into_inner());
            if !st.pending.iter().any(|(d, k)| *d == db && k == key) {
                st.pending.push_back((db, key.clone()));
            }
            if st.active {
                return;
            }
            st.active = true;
        }
        let _turn = ServingTurn(&self.serving);
        loop {
            let next = {
                let mut st = self.serving.lock().unwrap_or_else(|e| e.into_inner());
                match st.pending.pop_front() {
                    Some(next) => next,
                    None => {
                        // Cleared under the same lock that queues keys: none is left behind.
                        st.active = false;
                        return;
                    }
                }
            };
            self.serve_key(next.0, &next.1);
        }
    }

    /// Serves the waiters of one key (the serving thread's turn).
    fn serve_key(&self, db: u32, key: &Bytes) {
        loop {
            let waiters: Vec<Arc<Waiter>> = {
                let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
                match queues.get(&(db, key.clone())) {
                    Some(q) => q.iter().cloned().collect(),
                    None => return,
                }
            };
            let mut served = false;
            for w in waiters {
                // Hold the waiter's reply channel while trying: a timeout or CLIENT UNBLOCK that
                // comes meanwhile sees it taken and waits for the outcome.
                let Some(tx) = w.reply.lock().unwrap_or_else(|e| e.into_inner()).take() else { continue };
                match (w.attempt)(key) {
                    Some(reply) => {
                        let _ = tx.send(reply);
                        self.withdraw(&w);
                        served = true;
                        break;
                    }
                    None => {
                        *w.reply.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
                        // The key is empty (or of another type): nobody else can be served either.
                        return;
                    }
                }
            }
            if !served {
                return;
            }
        }
    }

    /// `CLIENT UNBLOCK`: answers the blocked client as if it timed out, or with an UNBLOCKED
    /// error; false if it is not blocked.
    pub fn unblock(&self, client: u64, error: bool) -> bool {
        let waiter = self.by_client.lock().unwrap_or_else(|e| e.into_inner()).get(&client).cloned();
        match waiter {
            Some(w) => {
                let reply = if error {
                    Reply::error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
                } else {
                    w.timeout_reply.clone()
                };
                let answered = w.answer(reply);
                self.withdraw(&w);
                answered
            }
            None => false,
        }
    }
}

/// Parses a blocking timeout in seconds (`0` = forever) into milliseconds, as Redis does.
pub fn parse_timeout(arg: &[u8]) -> Result<Option<std::time::Duration>, Reply> {
    let secs = crate::num::parse_float(arg)
        .filter(|v| v.is_finite())
        .ok_or_else(|| Reply::error("ERR timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(Reply::error("ERR timeout is negative"));
    }
    let ms = (secs * 1000.0).ceil();
    if ms > i64::MAX as f64 / 2.0 {
        return Err(Reply::error("ERR timeout is out of range"));
    }
    Ok((ms > 0.0).then(|| std::time::Duration::from_millis(ms as u64)))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[test]
    fn waiters_are_served_in_the_order_their_commands_arrived() {
        let registry = Registry::default();
        let key = Bytes::from_static(b"k");
        let taken = Arc::new(AtomicBool::new(false));
        // One element: the first attempt to run takes it, later ones find nothing.
        let attempt = |name: &'static str| -> Attempt {
            let taken = Arc::clone(&taken);
            Box::new(move |_: &Bytes| (!taken.swap(true, Ordering::SeqCst)).then(|| Reply::bulk(name.as_bytes())))
        };
        let (early, late) = (registry.next_arrival(), registry.next_arrival());
        // The later command registers first (its thread was faster).
        let (_r2, mut rx2) = registry.block(2, late, 0, vec![key.clone()], attempt("late"), Reply::Null);
        let (_r1, mut rx1) = registry.block(1, early, 0, vec![key.clone()], attempt("early"), Reply::Null);
        registry.serve(0, &key);
        assert_eq!(rx1.try_recv().ok(), Some(Reply::bulk(&b"early"[..])));
        assert!(rx2.try_recv().is_err(), "the later one still waits");
    }
}
