//! One client's connection state, owned by its connection and lent to the executor thread that
//! runs a batch of its commands.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::resp::{Protocol, Reply};
use crate::services::clients::ClientHandle;
use crate::state::ServerState;
use crate::storage::ExecContext;

/// A blocking command waiting for one of its keys.
pub struct BlockRequest {
    /// The keys (of the session's database) to wait on.
    pub keys: Vec<Bytes>,
    /// How long (None: forever).
    pub timeout: Option<std::time::Duration>,
    /// Retried when a key is signalled.
    pub attempt: crate::services::blocking::Attempt,
    /// The reply when the timeout passes.
    pub timeout_reply: Reply,
    /// LOCK waits for this handoff instead of for keys.
    pub lock: Option<(Bytes, tokio::sync::oneshot::Receiver<()>)>,
    /// WAIT waits for this many replicas to acknowledge this sequence instead.
    pub replicas: Option<(u64, usize)>,
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
    /// Passed AUTH (true from the start when the default user needs no password).
    pub authenticated: bool,
    /// The ACL user the connection runs as (`default` until AUTH names another).
    pub user: Arc<crate::acl::UserEntry>,
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
    /// When the requests being run arrived, in the order connections read them (see
    /// [`crate::services::blocking::Registry::next_arrival`]).
    pub arrival: u64,
    /// A blocked command's arguments and run time (µs), for the slow log once it is served
    /// or times out (as Redis logs blocked commands).
    pub blocked_log: Option<(Vec<Bytes>, u64)>,
    /// The command-stats id of the command this client is blocked in (an error that ends the
    /// wait counts as its failure).
    pub blocked_stats: Option<usize>,
    /// The error reply of the command just run was already counted in the error statistics
    /// (a script's error that came from a command it called): it counts only as this
    /// command's failure.
    pub error_counted: bool,
    /// Keys (of `db`) the command just run may have given elements (blocked clients are
    /// served once it has finished).
    pub signals: Vec<Bytes>,
    /// Commands queued since MULTI (None: not in a transaction).
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// A queued command was rejected: EXEC will abort.
    pub multi_error: bool,
    /// True while EXEC runs the queue (blocking commands do not block).
    pub in_exec: bool,
    /// True while a script or function runs this session's commands (MONITOR shows `lua`).
    pub in_script: bool,
    /// WATCHed keys.
    pub watched: Vec<crate::storage::Watched>,
    /// Set when a watched key changes.
    pub watch_flag: Arc<std::sync::atomic::AtomicBool>,
    /// This connection as a pub/sub subscriber (after its first subscription).
    pub subscriber: Option<Arc<crate::services::pubsub::Subscriber>>,
    /// Messages for this subscriber, written out by the connection.
    pub messages: Option<tokio::sync::mpsc::UnboundedReceiver<Reply>>,
    channels: std::collections::HashSet<Bytes>,
    patterns: std::collections::HashSet<Bytes>,
    shard_channels: std::collections::HashSet<Bytes>,
    /// Set by an accepted PSYNC: the connection becomes a replica link.
    pub handoff: Option<crate::replication::primary::Handoff>,
    /// A file to send as one bulk string, after which the connection closes (SYNC's RDB
    /// snapshot); the connection deletes it once sent.
    pub send_file: Option<std::path::PathBuf>,
    /// `REPLCONF listening-port` (a replica announcing itself before PSYNC).
    pub replica_port: u16,
    /// `REPLCONF ip-address` (`replica-announce-ip`): the address INFO and ROLE show for it.
    pub replica_ip: Option<String>,
    /// `REPLCONF capa shale`: the replica is a shale-server (the only kind that can follow).
    pub replica_is_shale: bool,
    /// `CLIENT TRACKING` is on (the table in [`crate::services::tracking`] has the options).
    pub tracking: bool,
    /// `CLIENT CACHING yes|no` was given for the next command (or transaction).
    pub tracking_caching: bool,
    /// The running script called a read-only command (its declared keys are then tracked).
    pub tracking_script_read: bool,
    /// The scripting VM, kept from one script of a pipeline to the next while the next request
    /// is a script too (see [`crate::scripting::lease`]); let go before anything else runs.
    pub(crate) script_vm: Option<crate::scripting::VmGuard>,
    /// Set by the gate before a command runs: the request after it is a script, so a script
    /// may keep the VM in [`Session::script_vm`] when it ends.
    pub script_next: bool,
    /// While a script runs on a connection's task, what its commands leave to record
    /// (statistics, slow log, keyspace hits), recorded when it ends — unless it turned out void
    /// and runs again on an executor thread, where they are recorded as they happen.
    pub observations: Option<Vec<super::observe::Observation>>,
    /// The running command's execution context (transaction buffer, read snapshot, held
    /// stripes), reset after every top-level command.
    pub exec: ExecContext,
    /// The server.
    pub state: Arc<ServerState>,
}

impl Session {
    /// The scripting VM: the one this session kept from its last script, else taken (waiting
    /// while another client's script runs).
    pub(crate) fn take_script_vm(&mut self) -> crate::scripting::VmGuard {
        self.script_vm.take().unwrap_or_else(|| self.state.scripting.vm())
    }

    /// A new client of `state` without a socket (tests, internal use).
    pub fn new(state: Arc<ServerState>) -> Self {
        Session::connected(state, String::new(), String::new())
    }

    /// A new client of `state` connected from `addr` to `laddr`; registered until dropped.
    pub fn connected(state: Arc<ServerState>, addr: String, laddr: String) -> Self {
        let id = state.next_client_id.fetch_add(1, Ordering::Relaxed);
        let user = state.acl.default_user();
        let authenticated = default_login(&user);
        let handle = Arc::new(ClientHandle::new(id, addr, laddr));
        state.registry.register(Arc::clone(&handle));
        Session {
            id,
            protocol: Protocol::Resp2,
            db: 0,
            closing: false,
            authenticated,
            user,
            reply_mode: ReplyMode::On,
            skip_next: false,
            suppress_current: false,
            handle,
            blocked: None,
            signals: Vec::new(),
            blocked_log: None,
            blocked_stats: None,
            error_counted: false,
            arrival: 0,
            multi: None,
            multi_error: false,
            in_exec: false,
            in_script: false,
            watched: Vec::new(),
            watch_flag: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            subscriber: None,
            messages: None,
            channels: Default::default(),
            patterns: Default::default(),
            shard_channels: Default::default(),
            handoff: None,
            send_file: None,
            replica_port: 0,
            replica_ip: None,
            replica_is_shale: false,
            tracking: false,
            tracking_caching: false,
            tracking_script_read: false,
            script_vm: None,
            script_next: false,
            observations: None,
            exec: ExecContext::for_client(id),
            state,
        }
    }

    /// Gives this connection its message queue (pub/sub messages, MONITOR lines, tracking
    /// invalidations) and makes it reachable as a `CLIENT TRACKING … REDIRECT` target. Every
    /// connection gets one when it opens.
    pub fn open_inbox(&mut self) {
        let sub = crate::commands::subscriber(self);
        self.state.storage.tracking.connect(self.id, &sub);
    }

    /// Runs as `user` from now on (AUTH, HELLO … AUTH).
    pub fn login(&mut self, user: Arc<crate::acl::UserEntry>) {
        self.handle.set_user(&user.name);
        self.user = user;
        self.authenticated = true;
    }

    /// Back to the default user, authenticated only if it needs no password (RESET).
    pub fn logout(&mut self) {
        let user = self.state.acl.default_user();
        self.authenticated = default_login(&user);
        self.handle.set_user(&user.name);
        self.user = user;
    }

    /// Whether a `no|yes|local` directive (`enable-debug-command`, `enable-protected-configs`)
    /// lets this client act (`local`: from the loopback interface only).
    pub fn allowed_by(&self, directive: &str) -> bool {
        match self.state.config().get(directive).unwrap_or_default() {
            "yes" => true,
            "local" => {
                self.handle.addr.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().to_canonical().is_loopback())
            }
            _ => false,
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
    pub fn subscriptions(&mut self, kind: crate::services::pubsub::Kind) -> &mut std::collections::HashSet<Bytes> {
        match kind {
            crate::services::pubsub::Kind::Channel => &mut self.channels,
            crate::services::pubsub::Kind::Pattern => &mut self.patterns,
            crate::services::pubsub::Kind::Shard => &mut self.shard_channels,
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

    /// Drops every subscription (and MONITOR mode).
    pub fn unsubscribe_all(&mut self) {
        use crate::services::pubsub::Kind;
        self.state.pubsub.remove_monitor(self.id);
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in std::mem::take(self.subscriptions(kind)) {
                self.state.pubsub.unsubscribe(kind, &name, self.id);
            }
        }
    }

    /// Records keyspace event `event` (of `class`, see [`crate::services::notifications`]) for
    /// `key` of the selected database; published once the command's writes are committed.
    pub fn notify(&self, class: u32, event: &'static str, key: &[u8]) {
        self.exec.notify(class, event, self.db, key);
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

/// True if a new connection is authenticated as `default` without AUTH (it is on and needs no
/// password).
fn default_login(user: &crate::acl::UserEntry) -> bool {
    let rules = user.rules();
    rules.enabled && rules.nopass
}

impl Drop for Session {
    fn drop(&mut self) {
        self.state.registry.unregister(self.id);
        self.state.storage.tracking.disconnect(self.id);
        if !self.watched.is_empty() {
            self.state.storage.watches.unwatch(&self.watched, &self.watch_flag);
        }
        self.unsubscribe_all();
        self.state.locks.release_all(self.id);
    }
}
