//! LOCK / UNLOCK (a SableDB extension): named, ephemeral, non-recursive locks in their own
//! namespace, with FIFO waiters. Nothing is persisted or replicated; a client's locks are
//! released when it disconnects.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::oneshot;

#[derive(Debug)]
struct Held {
    owner: u64,
    /// Clients waiting, oldest first, each with the channel that hands it the lock.
    waiters: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// What LOCK found.
#[derive(Debug)]
pub enum Acquire {
    /// The caller holds the lock now.
    Acquired,
    /// The caller already holds it (locks are not recursive).
    Deadlock,
    /// Someone else holds it; the receiver fires when the lock is handed to the caller.
    Wait(oneshot::Receiver<()>),
    /// Someone else holds it and the caller will not wait.
    Busy,
}

/// What UNLOCK found.
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// Released (and handed to the next waiter, if any).
    Released,
    /// Nobody holds it.
    NotLocked,
    /// Another client holds it.
    NotOwner,
}

/// Every held lock.
#[derive(Debug, Default)]
pub struct Locks {
    held: Mutex<HashMap<Bytes, Held>>,
}

impl Locks {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tries to take `name` for `client`; with `wait`, queues it behind the holder.
    pub fn acquire(&self, name: &Bytes, client: u64, wait: bool) -> Acquire {
        let mut t = self.table();
        match t.get_mut(name) {
            None => {
                t.insert(name.clone(), Held { owner: client, waiters: VecDeque::new() });
                Acquire::Acquired
            }
            Some(h) if h.owner == client => Acquire::Deadlock,
            Some(h) if wait => {
                let (tx, rx) = oneshot::channel();
                h.waiters.push_back((client, tx));
                Acquire::Wait(rx)
            }
            Some(_) => Acquire::Busy,
        }
    }

    /// Releases `name` if `client` holds it, handing it to the oldest waiter still waiting.
    pub fn release(&self, name: &Bytes, client: u64) -> Release {
        let mut t = self.table();
        let Some(h) = t.get_mut(name) else { return Release::NotLocked };
        if h.owner != client {
            return Release::NotOwner;
        }
        while let Some((next, tx)) = h.waiters.pop_front() {
            if tx.send(()).is_ok() {
                h.owner = next;
                return Release::Released;
            }
        }
        t.remove(name);
        Release::Released
    }

    /// Gives up waiting for `name` (timeout). True if the lock was handed over meanwhile: the
    /// caller holds it after all.
    pub fn cancel_wait(&self, name: &Bytes, client: u64) -> bool {
        let mut t = self.table();
        match t.get_mut(name) {
            Some(h) if h.owner == client => true,
            Some(h) => {
                h.waiters.retain(|(c, _)| *c != client);
                false
            }
            None => false,
        }
    }

    /// Releases everything `client` holds and withdraws its waits (it disconnected).
    pub fn release_all(&self, client: u64) {
        let owned: Vec<Bytes> = {
            let mut t = self.table();
            for h in t.values_mut() {
                h.waiters.retain(|(c, _)| *c != client);
            }
            t.iter().filter(|(_, h)| h.owner == client).map(|(n, _)| n.clone()).collect()
        };
        for name in owned {
            self.release(&name, client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_handoff_deadlock_and_release_on_disconnect() {
        let locks = Locks::default();
        let n = Bytes::from_static(b"job");
        assert!(matches!(locks.acquire(&n, 1, false), Acquire::Acquired));
        assert!(matches!(locks.acquire(&n, 1, true), Acquire::Deadlock));
        assert!(matches!(locks.acquire(&n, 2, false), Acquire::Busy));
        let Acquire::Wait(mut w2) = locks.acquire(&n, 2, true) else { panic!() };
        let Acquire::Wait(mut w3) = locks.acquire(&n, 3, true) else { panic!() };
        assert_eq!(locks.release(&n, 3), Release::NotOwner);
        assert_eq!(locks.release(&n, 1), Release::Released);
        assert!(w2.try_recv().is_ok() && w3.try_recv().is_err(), "the oldest waiter gets it");
        locks.release_all(2);
        assert!(w3.try_recv().is_ok(), "a disconnecting owner hands the lock on");
        assert_eq!(locks.release(&n, 3), Release::Released);
        assert_eq!(locks.release(&n, 3), Release::NotLocked);
    }
}
