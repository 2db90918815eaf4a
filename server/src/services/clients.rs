//! The registry of connected clients, for `CLIENT LIST`, `CLIENT INFO`, `CLIENT KILL` and INFO.
//!
//! Each connection owns an [`Arc<ClientHandle>`]; the fields other clients read (name, db, last
//! command, idle time) are atomics or short mutexes updated only when they change, so the
//! per-command cost is two relaxed stores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::Notify;

static NULL_CMD: &str = "NULL";

/// Milliseconds since the epoch, refreshed by [`tick_coarse_clock`] (the server calls it every
/// 100 ms), so per-command bookkeeping needs no clock call.
pub fn coarse_now_ms() -> u64 {
    let v = COARSE_NOW.load(Ordering::Relaxed);
    if v == 0 {
        tick_coarse_clock()
    } else {
        v
    }
}

/// Refreshes the coarse clock and returns it.
pub fn tick_coarse_clock() -> u64 {
    let now = crate::storage::now_ms();
    COARSE_NOW.store(now, Ordering::Relaxed);
    now
}

static COARSE_NOW: AtomicU64 = AtomicU64::new(0);

/// What kind of client a connection is (`CLIENT LIST TYPE`, `CLIENT KILL TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An ordinary client.
    Normal = 0,
    /// A client with pub/sub subscriptions.
    PubSub = 1,
    /// A replica of this node, streaming from it.
    Replica = 2,
    /// This replica's link to its primary.
    Master = 3,
}

impl Kind {
    /// The kind a `TYPE` word names (`slave` is `replica`); None if unknown.
    pub fn named(word: &str) -> Option<Kind> {
        match word.to_ascii_lowercase().as_str() {
            "normal" => Some(Kind::Normal),
            "pubsub" => Some(Kind::PubSub),
            "replica" | "slave" => Some(Kind::Replica),
            "master" => Some(Kind::Master),
            _ => None,
        }
    }

    /// The `flags=` letter of `CLIENT LIST`.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Normal => "N",
            Kind::PubSub => "P",
            Kind::Replica => "S",
            Kind::Master => "M",
        }
    }
}

/// What other clients can see of, and do to, one connection.
#[derive(Debug)]
pub struct ClientHandle {
    /// `CLIENT ID`.
    pub id: u64,
    /// Peer address (`ip:port`).
    pub addr: String,
    /// Local address (`ip:port`).
    pub laddr: String,
    /// When the connection was accepted.
    pub created: Instant,
    /// `CLIENT SETNAME`.
    pub name: Mutex<Option<Bytes>>,
    /// `CLIENT SETINFO lib-name` / `lib-ver`.
    pub lib: Mutex<(String, String)>,
    /// Selected database.
    pub db: AtomicU32,
    /// RESP version (2 or 3).
    pub resp: AtomicU8,
    /// Name of the last command run (a pointer to a `&'static str` in the command table).
    last_cmd: AtomicPtr<&'static str>,
    /// Coarse clock reading (see [`coarse_now_ms`]) at the last command.
    pub last_active_ms: AtomicU64,
    /// Set by `CLIENT KILL`; the connection closes at its next turn.
    pub killed: AtomicBool,
    /// Wakes the connection when it is killed.
    pub kill_signal: Notify,
    /// The ACL user it is authenticated as.
    user: Mutex<Arc<str>>,
    /// A [`Kind`] as a number.
    kind: AtomicU8,
    /// Bytes in its query buffer not yet run (CLIENT LIST `qbuf`), as of its last round.
    pub qbuf: AtomicUsize,
    /// Free space in its query buffer (`qbuf-free`).
    pub qbuf_free: AtomicUsize,
}

impl ClientHandle {
    /// A handle for a new connection.
    pub fn new(id: u64, addr: String, laddr: String) -> Self {
        ClientHandle {
            id,
            addr,
            laddr,
            created: Instant::now(),
            name: Mutex::new(None),
            lib: Mutex::new((String::new(), String::new())),
            db: AtomicU32::new(0),
            resp: AtomicU8::new(2),
            last_cmd: AtomicPtr::new(std::ptr::from_ref(&NULL_CMD).cast_mut()),
            last_active_ms: AtomicU64::new(coarse_now_ms()),
            killed: AtomicBool::new(false),
            kill_signal: Notify::new(),
            user: Mutex::new(Arc::from("default")),
            kind: AtomicU8::new(Kind::Normal as u8),
            qbuf: AtomicUsize::new(0),
            qbuf_free: AtomicUsize::new(0),
        }
    }

    /// What kind of client this is.
    pub fn kind(&self) -> Kind {
        match self.kind.load(Ordering::Relaxed) {
            1 => Kind::PubSub,
            2 => Kind::Replica,
            3 => Kind::Master,
            _ => Kind::Normal,
        }
    }

    /// Records what kind of client this is.
    pub fn set_kind(&self, kind: Kind) {
        self.kind.store(kind as u8, Ordering::Relaxed);
    }

    /// The ACL user name.
    pub fn user(&self) -> Arc<str> {
        Arc::clone(&self.user.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records the ACL user the connection now runs as.
    pub fn set_user(&self, name: &str) {
        *self.user.lock().unwrap_or_else(|e| e.into_inner()) = Arc::from(name);
    }

    /// Records that the command named by `cmd` (a field of a static command table) just ran.
    /// Two relaxed stores: this runs for every command.
    pub fn touch(&self, cmd: &'static &'static str) {
        self.last_cmd.store(std::ptr::from_ref(cmd).cast_mut(), Ordering::Relaxed);
        self.last_active_ms.store(coarse_now_ms(), Ordering::Relaxed);
    }

    /// The name of the last command run.
    pub fn last_cmd(&self) -> &'static str {
        // SAFETY: the pointer always comes from a `&'static &'static str` (see `touch`/`new`).
        unsafe { *self.last_cmd.load(Ordering::Relaxed) }
    }

    /// Seconds since the last command.
    pub fn idle_secs(&self) -> u64 {
        coarse_now_ms().saturating_sub(self.last_active_ms.load(Ordering::Relaxed)) / 1000
    }

    /// Asks the connection to close: wakes every wait of the connection registered on
    /// `kill_signal` (the connection keeps one registered for its whole life), and leaves a
    /// permit for a wait that starts later (every wait checks `killed` first, too).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill_signal.notify_waiters();
        self.kill_signal.notify_one();
    }

    /// The `CLIENT LIST` / `CLIENT INFO` line (Redis 7.2 field order), without the newline.
    pub fn info_line(&self, flags: &str, multi: i64, sub: usize, psub: usize, redir: i64) -> String {
        let name = self.name.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default();
        let (lib_name, lib_ver) = self.lib.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let cmd = self.last_cmd();
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle={} flags={flags} db={} sub={sub} psub={psub} ssub=0 \
             multi={multi} qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 \
             events=r cmd={} user={} redir={redir} resp={} lib-name={lib_name} lib-ver={lib_ver}",
            self.id,
            self.addr,
            self.laddr,
            String::from_utf8_lossy(&name),
            self.created.elapsed().as_secs(),
            self.idle_secs(),
            self.db.load(Ordering::Relaxed),
            self.qbuf.load(Ordering::Relaxed),
            self.qbuf_free.load(Ordering::Relaxed),
            cmd.replace(' ', "|"),
            self.user(),
            self.resp.load(Ordering::Relaxed),
        )
    }
}

/// Every connected client, by id.
#[derive(Debug, Default)]
pub struct Registry {
    clients: Mutex<HashMap<u64, Arc<ClientHandle>>>,
}

impl Registry {
    /// Adds a connection.
    pub fn register(&self, handle: Arc<ClientHandle>) {
        self.lock().insert(handle.id, handle);
    }

    /// Removes a connection that closed.
    pub fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// All clients, in id order.
    pub fn snapshot(&self) -> Vec<Arc<ClientHandle>> {
        let mut v: Vec<_> = self.lock().values().cloned().collect();
        v.sort_by_key(|c| c.id);
        v
    }

    /// One client.
    pub fn get(&self, id: u64) -> Option<Arc<ClientHandle>> {
        self.lock().get(&id).cloned()
    }

    /// Closes every connection authenticated as `user` (its user was deleted or replaced).
    pub fn kill_user(&self, user: &str, except: Option<u64>) -> usize {
        let mut n = 0;
        for c in self.lock().values() {
            if &*c.user() == user && Some(c.id) != except {
                c.kill();
                n += 1;
            }
        }
        n
    }

    /// Connected clients.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True with no clients connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ClientHandle>>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }
}
