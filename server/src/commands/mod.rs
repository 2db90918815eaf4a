//! The command table: every command declared once with its arity, flags, key positions and
//! handler. Dispatch, arity errors, `COMMAND` and (later) key locking and WATCH read it.

mod client;
mod coll;
mod config;
mod connection;
mod hash;
mod keys;
mod keyspace;
mod list;
mod list_blocking;
mod lock;
mod pubsub;
mod server;
mod set;
mod string_range;
mod strings;
mod txn;
mod zset;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;

use crate::clients::ClientHandle;
use crate::resp::{Protocol, Reply};
use crate::state::ServerState;

/// A blocking command waiting for one of its keys.
pub struct BlockRequest {
    /// The keys (of the session's database) to wait on.
    pub keys: Vec<Bytes>,
    /// How long (None: forever).
    pub timeout: Option<std::time::Duration>,
    /// Retried when a key is signalled.
    pub attempt: crate::blocking::Attempt,
    /// The reply when the timeout passes.
    pub timeout_reply: Reply,
    /// LOCK waits for this handoff instead of for keys.
    pub lock: Option<(Bytes, tokio::sync::oneshot::Receiver<()>)>,
}

impl std::fmt::Debug for BlockRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockRequest").field("keys", &self.keys).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// `CLIENT REPLY`: whether replies are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    /// Every reply is sent.
    On,
    /// No reply is sent.
    Off,
}

/// One client's connection state.
#[derive(Debug)]
pub struct Session {
    /// `CLIENT ID`.
    pub id: u64,
    /// RESP2 or RESP3 (`HELLO`).
    pub protocol: Protocol,
    /// Selected database (mirrored in `handle` for `CLIENT LIST`).
    pub db: u32,
    /// Close the connection once the current replies are written (`QUIT`).
    pub closing: bool,
    /// Passed AUTH (always true without `requirepass`).
    pub authenticated: bool,
    /// `CLIENT REPLY` mode.
    pub reply_mode: ReplyMode,
    /// Set by `CLIENT REPLY SKIP` for the command after it.
    pub skip_next: bool,
    /// Do not send the reply of the command being run (`CLIENT REPLY SKIP` itself).
    pub suppress_current: bool,
    /// What other clients see of this one.
    pub handle: Arc<ClientHandle>,
    /// Set by a blocking command that found nothing: the connection waits on it.
    pub blocked: Option<BlockRequest>,
    /// Keys (of `db`) the command just run may have given elements (blocked clients are
    /// served once it has finished).
    pub signals: Vec<Bytes>,
    /// Commands queued since MULTI (None: not in a transaction).
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// A queued command was rejected: EXEC will abort.
    pub multi_error: bool,
    /// True while EXEC runs the queue (blocking commands do not block).
    pub in_exec: bool,
    /// WATCHed keys.
    pub watched: Vec<crate::storage::Watched>,
    /// Set when a watched key changes.
    pub watch_flag: Arc<std::sync::atomic::AtomicBool>,
    /// This connection as a pub/sub subscriber (after its first subscription).
    pub subscriber: Option<Arc<crate::pubsub::Subscriber>>,
    /// Messages for this subscriber, written out by the connection.
    pub messages: Option<tokio::sync::mpsc::UnboundedReceiver<Reply>>,
    channels: std::collections::HashSet<Bytes>,
    patterns: std::collections::HashSet<Bytes>,
    shard_channels: std::collections::HashSet<Bytes>,
    /// The server.
    pub state: Arc<ServerState>,
}

impl Session {
    /// A new client of `state` without a socket (tests, internal use).
    pub fn new(state: Arc<ServerState>) -> Self {
        Session::connected(state, String::new(), String::new())
    }

    /// A new client of `state` connected from `addr` to `laddr`; registered until dropped.
    pub fn connected(state: Arc<ServerState>, addr: String, laddr: String) -> Self {
        let id = state.next_client_id.fetch_add(1, Ordering::Relaxed);
        let authenticated = state.config().requirepass.is_none();
        let handle = Arc::new(ClientHandle::new(id, addr, laddr));
        state.registry.register(Arc::clone(&handle));
        Session {
            id,
            protocol: Protocol::Resp2,
            db: 0,
            closing: false,
            authenticated,
            reply_mode: ReplyMode::On,
            skip_next: false,
            suppress_current: false,
            handle,
            blocked: None,
            signals: Vec::new(),
            multi: None,
            multi_error: false,
            in_exec: false,
            watched: Vec::new(),
            watch_flag: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            subscriber: None,
            messages: None,
            channels: Default::default(),
            patterns: Default::default(),
            shard_channels: Default::default(),
            state,
        }
    }

    /// Selects database `db`.
    pub fn select(&mut self, db: u32) {
        self.db = db;
        self.handle.db.store(db, Ordering::Relaxed);
    }

    /// Switches protocol version.
    pub fn set_protocol(&mut self, p: Protocol) {
        self.protocol = p;
        self.handle.resp.store(if p == Protocol::Resp3 { 3 } else { 2 }, Ordering::Relaxed);
    }

    /// `CLIENT SETNAME`.
    pub fn set_name(&self, name: Option<Bytes>) {
        *self.handle.name.lock().unwrap_or_else(|e| e.into_inner()) = name;
    }

    /// The subscriptions of one kind.
    pub fn subscriptions(&mut self, kind: crate::pubsub::Kind) -> &mut std::collections::HashSet<Bytes> {
        match kind {
            crate::pubsub::Kind::Channel => &mut self.channels,
            crate::pubsub::Kind::Pattern => &mut self.patterns,
            crate::pubsub::Kind::Shard => &mut self.shard_channels,
        }
    }

    /// Channel and pattern subscriptions (the count SUBSCRIBE replies carry).
    pub fn subscription_count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// True while the connection has any subscription.
    pub fn subscribed(&self) -> bool {
        self.subscription_count() + self.shard_channels.len() > 0
    }

    /// Drops every subscription.
    pub fn unsubscribe_all(&mut self) {
        use crate::pubsub::Kind;
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in std::mem::take(self.subscriptions(kind)) {
                self.state.pubsub.unsubscribe(kind, &name, self.id);
            }
        }
    }

    /// Notes that `key` may have gained elements (pushes, moves, stores).
    pub fn signal(&mut self, key: &Bytes) {
        self.signals.push(key.clone());
    }

    /// Asks the connection to block on `req`; the returned reply is never sent. Inside EXEC
    /// nothing blocks: the command answers as if it had timed out, as in Redis.
    pub fn block(&mut self, req: BlockRequest) -> Reply {
        if self.in_exec {
            return req.timeout_reply;
        }
        self.blocked = Some(req);
        Reply::Null
    }

    /// True if the reply to the command just run should be sent (and consumes a SKIP).
    pub fn take_reply_permission(&mut self) -> bool {
        let suppressed = std::mem::take(&mut self.suppress_current);
        if std::mem::take(&mut self.skip_next) {
            self.suppress_current = true;
        }
        !suppressed && self.reply_mode == ReplyMode::On
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.state.registry.unregister(self.id);
        if !self.watched.is_empty() {
            self.state.storage.watches.unwatch(&self.watched, &self.watch_flag);
        }
        self.unsubscribe_all();
        self.state.locks.release_all(self.id);
    }
}

/// A command implementation: the session and the full argument vector (name first).
pub type Handler = fn(&mut Session, &[Bytes]) -> Reply;

/// A command's declaration.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Argument count including the name; negative means "at least".
    pub arity: i32,
    /// Redis command flags (`readonly`, `write`, `fast`, …).
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i32,
    /// Last key argument (-1: the last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// The implementation.
    pub handler: Handler,
}

/// A table entry: name, arity, flags, first key, last key, key step, handler.
pub(super) const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    handler: Handler,
) -> CommandSpec {
    CommandSpec { name, arity, flags, first_key: keys.0, last_key: keys.1, step: keys.2, handler }
}

/// Key positions of a command with one key, the first argument.
pub(super) const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
/// Key positions of a command without keys.
pub(super) const NO_KEYS: (i32, i32, i32) = (0, 0, 0);

/// Every command, by name.
static TABLE: LazyLock<HashMap<&'static str, &'static CommandSpec>> = LazyLock::new(|| {
    [
        connection::COMMANDS,
        server::COMMANDS,
        client::COMMANDS,
        config::COMMANDS,
        strings::COMMANDS,
        strings::MORE,
        string_range::COMMANDS,
        keys::COMMANDS,
        keyspace::COMMANDS,
        hash::COMMANDS,
        set::COMMANDS,
        zset::COMMANDS,
        list::COMMANDS,
        list_blocking::COMMANDS,
        txn::COMMANDS,
        pubsub::COMMANDS,
        lock::COMMANDS,
    ]
    .into_iter()
    .flatten()
    .map(|c| (c.name, c))
    .collect()
});

/// The reply for an engine failure (the engine logs the details).
pub fn engine_error(e: lsm::Error) -> Reply {
    tracing::error!(target: "shale::storage", error = %e, "engine error");
    Reply::error(format!("ERR storage engine: {e}"))
}

/// Looks a command up by name, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    let mut buf = [0u8; 32];
    let lower = buf.get_mut(..name.len())?;
    for (d, c) in lower.iter_mut().zip(name) {
        *d = c.to_ascii_lowercase();
    }
    TABLE.get(std::str::from_utf8(lower).ok()?).copied()
}

/// All commands, in name order.
pub fn all() -> Vec<&'static CommandSpec> {
    let mut v: Vec<_> = TABLE.values().copied().collect();
    v.sort_by_key(|c| c.name);
    v
}

/// Runs one request (a non-empty argument vector).
pub fn dispatch(session: &mut Session, args: &[Bytes]) -> Reply {
    let Some(name) = args.first() else { return Reply::error("ERR empty command") };
    session.state.commands_processed.fetch_add(1, Ordering::Relaxed);
    let spec = lookup(name);
    if !session.authenticated && !spec.is_some_and(|c| c.flags.contains(&"no_auth") || c.name == "quit") {
        return Reply::error("NOAUTH Authentication required.");
    }
    if session.protocol == Protocol::Resp2
        && session.subscribed()
        && !spec.is_some_and(|c| pubsub::allowed_when_subscribed(c.name))
    {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        return Reply::error(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        ));
    }
    let queuing = session.multi.is_some() && !spec.is_some_and(|c| txn::is_control(c.name));
    let Some(spec) = spec else {
        session.multi_error |= queuing;
        return unknown_command(args);
    };
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        session.multi_error |= queuing;
        return Reply::error(format!("ERR wrong number of arguments for '{}' command", spec.name));
    }
    if queuing {
        if let Some(queue) = session.multi.as_mut() {
            queue.push(args.to_vec());
        }
        return Reply::Simple("QUEUED".into());
    }
    session.handle.touch(&spec.name);
    // A read of several keys sees them all as of one moment.
    let multi_key_read =
        spec.flags.contains(&"readonly") && args.len() > 2 && (spec.first_key != spec.last_key || spec.first_key == 0);
    let reply = if multi_key_read {
        let engine = session.state.storage.engine().clone();
        crate::storage::txn::with_snapshot(&engine, || (spec.handler)(session, args))
    } else {
        (spec.handler)(session, args)
    };
    if !session.in_exec {
        serve_signals(session);
    }
    reply
}

/// Serves clients blocked on the keys the last command signalled.
pub(super) fn serve_signals(session: &mut Session) {
    for key in std::mem::take(&mut session.signals) {
        if session.state.blocking.has_waiters(session.db, &key) {
            session.state.blocking.serve(session.db, &key);
        }
    }
}

/// Consecutive blind writes of one pipeline (plain `SET key value`), committed to the engine as
/// one batch instead of one write each. Their replies are produced in order when the batch is
/// committed, before the reply of any later command, so clients see exactly what they would
/// see had each been written alone (an engine failure answers every one of them with the error).
#[derive(Debug, Default)]
pub struct WriteCoalescer {
    batch: lsm::WriteBatch,
    /// The keys written (for their locks) and the database.
    keys: Vec<Bytes>,
    db: u32,
    /// For each deferred command, whether its reply is sent (`CLIENT REPLY`).
    replies: Vec<bool>,
}

impl WriteCoalescer {
    /// Defers `args` if it is a plain SET the session may run; false if it must be dispatched.
    pub fn try_defer(&mut self, s: &mut Session, args: &[Bytes]) -> bool {
        if args.len() != 3 || !s.authenticated || s.multi.is_some() || !args[0].eq_ignore_ascii_case(b"set") {
            return false;
        }
        s.state.commands_processed.fetch_add(1, Ordering::Relaxed);
        static SET: &str = "set";
        s.handle.touch(&SET);
        if !self.replies.is_empty() && self.db != s.db {
            return false;
        }
        self.db = s.db;
        self.keys.push(args[1].clone());
        s.state.storage.put_into(&mut self.batch, s.db, &args[1], &crate::storage::Meta::string(args[2].clone(), 0));
        let send = s.take_reply_permission();
        self.replies.push(send);
        true
    }

    /// True when the batch should be committed before more is added.
    pub fn is_full(&self) -> bool {
        self.replies.len() >= 1024 || self.batch.size_in_bytes() >= 4 << 20
    }

    /// Commits the deferred writes and appends their replies to `out`. The task waits for the
    /// engine without holding its thread: other connections run while another writer's group
    /// commits.
    pub async fn flush(&mut self, s: &Session, out: &mut bytes::BytesMut) {
        if self.replies.is_empty() {
            return;
        }
        let keys = std::mem::take(&mut self.keys);
        let queued = s.state.storage.write_queued(self.db, &keys, std::mem::take(&mut self.batch));
        let reply = match queued.await {
            Ok(()) => Reply::ok(),
            Err(e) => engine_error(e),
        };
        for send in self.replies.drain(..) {
            if send {
                reply.encode(s.protocol, out);
            }
        }
    }
}

/// Redis's reply to an unknown command: the name and the start of its arguments.
fn unknown_command(args: &[Bytes]) -> Reply {
    let mut shown = String::new();
    for a in &args[1..] {
        if shown.len() >= 128 {
            break;
        }
        let text = String::from_utf8_lossy(a);
        let room = 128 - shown.len();
        shown.push('\'');
        shown.extend(text.chars().take(room));
        shown.push_str("' ");
    }
    let name: String = String::from_utf8_lossy(&args[0]).chars().take(128).collect();
    Reply::error(format!("ERR unknown command '{name}', with args beginning with: {shown}"))
}

/// Parses an argument as a Redis integer (`string2ll` rules).
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    crate::resp::parse_int(arg)
}

#[cfg(test)]
mod tests;
