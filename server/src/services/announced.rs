//! Blocking commands announced before they run, so that a write from another client that
//! arrived after them cannot overtake them.
//!
//! Redis serves clients on one thread in arrival order: a client that sends `XREADGROUP … BLOCK`
//! and then, on another connection, `DEL` of the stream (without waiting) always has the
//! XREADGROUP block first and then woken with "the stream key no longer exists". Shale
//! parses on several runtime threads and runs commands on executor threads, and a plain SET
//! is written from the runtime thread without an executor hand-off at all, so the later write
//! could run before the blocking command had even looked at its keys.
//!
//! So a connection announces the blocking commands of a round (their keys and the arrival
//! stamp of the read that brought them; XREAD and XREADGROUP only with a BLOCK option, as
//! without one they answer at once like any read) before it runs anything, and withdraws the
//! announcement once they have run, or have registered as waiters ([`super::blocking`]). A
//! write of an announced key from another client whose request arrived later goes to an
//! executor and waits there, before it takes any lock, until the announcement is withdrawn
//! (at most [`MAX_WAIT`]: a safety bound, as the blocking command needs microseconds). Nothing
//! waits on a runtime thread, and with nothing announced a write pays one atomic load.
//!
//! Two requests read by different runtime threads at the same moment still race (whichever is
//! stamped first counts as first); that is as close as threads get to one event loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The longest a write waits for announcements.
pub const MAX_WAIT: Duration = Duration::from_millis(20);

/// Who announced a key: the client and the arrival stamp of its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Announcer {
    client: u64,
    arrival: u64,
}

/// Every announcement in force.
#[derive(Debug, Default)]
pub struct Announcements {
    keys: Mutex<HashMap<(u32, Bytes), Vec<Announcer>>>,
    /// Announced keys (0: nothing to check, without taking the lock).
    count: AtomicUsize,
    withdrawn: Condvar,
}

/// An announcement in force; dropping it withdraws it.
#[derive(Debug)]
pub struct Announcement<'a> {
    registry: &'a Announcements,
    by: Announcer,
    keys: Vec<(u32, Bytes)>,
}

impl Drop for Announcement<'_> {
    fn drop(&mut self) {
        if self.keys.is_empty() {
            return;
        }
        let mut map = self.registry.keys.lock().unwrap_or_else(|e| e.into_inner());
        for key in &self.keys {
            if let Some(list) = map.get_mut(key) {
                if let Some(i) = list.iter().position(|a| *a == self.by) {
                    list.swap_remove(i);
                    self.registry.count.fetch_sub(1, Ordering::Release);
                }
                if list.is_empty() {
                    map.remove(key);
                }
            }
        }
        drop(map);
        self.registry.withdrawn.notify_all();
    }
}

impl Announcements {
    /// Announces that `client` will run blocking commands on `keys` of `db`, read at `arrival`.
    pub fn announce(&self, client: u64, arrival: u64, keys: Vec<(u32, Bytes)>) -> Announcement<'_> {
        let by = Announcer { client, arrival };
        if !keys.is_empty() {
            let mut map = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            for key in &keys {
                map.entry(key.clone()).or_default().push(by);
            }
            self.count.fetch_add(keys.len(), Ordering::Release);
        }
        Announcement { registry: self, by, keys }
    }

    /// True if a client other than `client` announced `key` of `db`.
    pub fn announced_by_other(&self, client: u64, db: u32, key: &Bytes) -> bool {
        if !self.any() {
            return false;
        }
        let map = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(db, key.clone())).is_some_and(|list| list.iter().any(|a| a.client != client))
    }

    /// True if anything is announced (one atomic load: check this before gathering keys).
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Waits (at most [`MAX_WAIT`]) until no other client's announcement of one of `keys` of
    /// `db` made before `arrival` is in force. Only ever called on executor threads.
    pub fn wait_for_earlier(&self, client: u64, arrival: u64, db: u32, keys: &[&Bytes]) {
        if !self.any() {
            return;
        }
        let deadline = Instant::now() + MAX_WAIT;
        let mut map = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let earlier = keys.iter().any(|&k| {
                map.get(&(db, k.clone()))
                    .is_some_and(|list| list.iter().any(|a| a.client != client && a.arrival < arrival))
            });
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|_| earlier) else { return };
            map = self.withdrawn.wait_timeout(map, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn key(k: &str) -> (u32, Bytes) {
        (0, Bytes::copy_from_slice(k.as_bytes()))
    }

    #[test]
    fn a_later_write_waits_until_the_announcement_is_withdrawn() {
        let reg = Arc::new(Announcements::default());
        let announced = reg.announce(1, 10, vec![key("s")]);
        assert!(reg.announced_by_other(2, 0, &key("s").1));
        assert!(!reg.announced_by_other(1, 0, &key("s").1), "not for the announcer itself");
        assert!(!reg.announced_by_other(2, 1, &key("s").1), "another database");
        let waiter = {
            let reg = Arc::clone(&reg);
            std::thread::spawn(move || {
                let started = Instant::now();
                reg.wait_for_earlier(2, 11, 0, &[&key("s").1]);
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(5));
        drop(announced);
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(4), "waited {waited:?}");
        assert!(!reg.announced_by_other(2, 0, &key("s").1));
        assert_eq!(reg.count.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn earlier_writes_other_keys_and_the_announcer_do_not_wait() {
        let reg = Announcements::default();
        let _announced = reg.announce(1, 10, vec![key("s"), key("t")]);
        let started = Instant::now();
        reg.wait_for_earlier(2, 9, 0, &[&key("s").1]);
        reg.wait_for_earlier(2, 11, 0, &[&key("u").1]);
        reg.wait_for_earlier(1, 11, 0, &[&key("s").1]);
        assert!(started.elapsed() < MAX_WAIT, "none of them waited");
    }

    #[test]
    fn a_wait_is_bounded() {
        let reg = Announcements::default();
        let _announced = reg.announce(1, 10, vec![key("s")]);
        let started = Instant::now();
        reg.wait_for_earlier(2, 11, 0, &[&key("s").1]);
        assert!(started.elapsed() >= MAX_WAIT);
    }
}
