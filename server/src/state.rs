//! State shared by every connection.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::{AppendFsync, Config, LogLevel};
use crate::services::clients::Registry;
use crate::storage::Storage;

/// A hook the binary installs to change the log filter at runtime (`CONFIG SET loglevel`).
pub type LogHook = Box<dyn Fn(LogLevel) + Send + Sync>;

/// `CLIENT PAUSE`: until when, and whether reads are paused too.
#[derive(Debug, Clone, Copy)]
pub struct Pause {
    /// When the pause ends.
    pub until: Instant,
    /// `ALL` (every command) rather than `WRITE`.
    pub all: bool,
}

/// The server: its configuration, its engine, and counters.
pub struct ServerState {
    config: RwLock<Config>,
    /// The keyspace, over the storage engine.
    pub storage: Storage,
    /// Next `CLIENT ID`.
    pub next_client_id: AtomicU64,
    /// Connected clients (a counter the accept loop checks against `maxclients`).
    pub clients: AtomicUsize,
    /// Connected clients, for `CLIENT LIST` / `CLIENT KILL`.
    pub registry: Registry,
    /// Commands processed since start (or `CONFIG RESETSTAT`).
    pub commands_processed: crate::services::counter::Counter,
    /// Requests run on connections' own tasks (see `exec::run_in_memory`).
    pub in_memory: crate::exec::InMemoryCounters,
    /// Connections accepted since start (or `CONFIG RESETSTAT`).
    pub connections_received: AtomicU64,
    /// Connections refused by `maxclients`.
    pub rejected_connections: AtomicU64,
    /// When the server started.
    pub started: Instant,
    /// 40 hex characters identifying this run (INFO `run_id`, `master_replid`).
    pub run_id: String,
    /// Reads that found their key.
    pub keyspace_hits: crate::services::counter::Counter,
    /// Reads that did not.
    pub keyspace_misses: crate::services::counter::Counter,
    /// Keys deleted because their TTL passed (lazily or by the active cycle).
    pub expired_keys: AtomicU64,
    /// Values UNLINK and FLUSH… ASYNC freed that Redis would free in the background (INFO
    /// `lazyfreed_objects`; see `commands::keys::inspect::free_effort`).
    pub lazyfreed_objects: AtomicU64,
    /// Unix time of the last successful `SAVE`/`BGSAVE` (engine flush), or of startup.
    pub lastsave: AtomicU64,
    /// `Storage::changes` when the last save (engine flush) began.
    pub changes_at_save: AtomicU64,
    /// Set by `SHUTDOWN`; the binary waits on it beside the signals.
    pub shutdown: Notify,
    /// `CLIENT PAUSE` in force (change it with [`ServerState::set_pause`]).
    pause: Mutex<Option<Pause>>,
    /// True while a pause may be in force: every command checks this, not the mutex.
    paused: std::sync::atomic::AtomicBool,
    /// Woken when a pause is lifted or changed, so held-back clients go on at once.
    pub pause_changed: Notify,
    /// Clients held back by `CLIENT PAUSE` right now (they count in INFO `blocked_clients`,
    /// as Redis's postponed clients do).
    pub paused_clients: AtomicUsize,
    /// Resume points of SCAN walks.
    pub cursors: crate::services::cursors::Cursors,
    /// Clients blocked on keys.
    pub blocking: crate::services::blocking::Registry,
    /// Channels, patterns and their subscribers.
    pub pubsub: crate::services::pubsub::Hub,
    /// SLOWLOG.
    pub slowlog: crate::services::slowlog::SlowLog,
    /// LATENCY.
    pub latency: crate::services::slowlog::LatencyMonitor,
    /// INFO commandstats, errorstats and latencystats.
    pub command_stats: crate::services::command_stats::CommandStats,
    /// When keys were last used, and how often (`OBJECT IDLETIME | FREQ`).
    pub access: crate::services::access_times::AccessTimes,
    /// The accept loops' side of `CONFIG SET port | bind | tls-port`.
    pub listeners: crate::net::ListenerControl,
    /// `maxmemory` in bytes (0: none), read by every write.
    maxmemory: AtomicU64,
    /// `notify-keyspace-events` as flags (read by every command, so kept apart from `config`).
    notify_flags: AtomicU32,
    /// LOCK / UNLOCK.
    pub locks: crate::services::named_locks::Locks,
    /// The threads commands run on.
    pub executor: crate::exec::Executor,
    /// Single writes of different clients waiting to run as one group.
    pub combiner: crate::exec::combine::Combiner,
    /// ACL users, the ACL log and refusal counters.
    pub acl: crate::acl::Acl,
    /// Role, replication ids, the link to a primary, connected replicas.
    pub replication: crate::replication::Replication,
    /// The Lua VM: EVAL scripts and FUNCTION libraries.
    pub scripting: crate::scripting::Scripting,
    log_hook: OnceLock<LogHook>,
    /// The TLS settings new `tls-port` connections use (None: TLS not configured).
    tls: RwLock<Option<Arc<rustls::ServerConfig>>>,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: AtomicU64,
    /// (when, commands processed, rate) at the last ops/sec sample.
    ops_sample: Mutex<(Instant, u64, f64)>,
}

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerState").field("config", &self.config).finish_non_exhaustive()
    }
}

impl ServerState {
    /// State for a server with `config` over `db`; starts the executor threads. Reads the
    /// engine (call it before serving, not on an async runtime worker). Fails on an engine
    /// error or ACL users that cannot be loaded (the `aclfile`, `user` lines).
    pub fn new(config: Config, db: lsm::Db) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let now_s = crate::storage::now_ms() / 1000;
        let acl = crate::acl::Acl::new(&config)?;
        let executor = crate::exec::Executor::start(config.executor_threads)?;
        let upstream = crate::replication::Upstream::parse(config.get("replicaof").unwrap_or_default())?;
        let replication =
            crate::replication::Replication::open(db.path().to_path_buf(), upstream, db.latest_sequence() + 1)?;
        replication.configure(&config);
        let scripting = crate::scripting::Scripting::new();
        scripting.load_saved_functions(&db)?;
        let access = crate::services::access_times::AccessTimes::default();
        configure_access_times(&access, &config);
        Ok(ServerState {
            maxmemory: AtomicU64::new(config.maxmemory()),
            listeners: crate::net::ListenerControl::default(),
            access,
            scripting,
            combiner: crate::exec::combine::Combiner::new(executor.threads()),
            executor,
            acl,
            replication,
            storage: Storage::new(db)?,
            notify_flags: AtomicU32::new(config.notify_keyspace_events),
            slowlog: {
                let log = crate::services::slowlog::SlowLog::default();
                log.configure(config.slowlog_log_slower_than, config.slowlog_max_len);
                log
            },
            latency: {
                let monitor = crate::services::slowlog::LatencyMonitor::default();
                monitor.set_threshold(config.latency_monitor_threshold);
                monitor
            },
            command_stats: {
                crate::services::command_stats::Stamp::calibrate();
                let stats = crate::services::command_stats::CommandStats::default();
                stats.set_latency_tracking(config.latency_tracking);
                stats
            },
            config: RwLock::new(config),
            next_client_id: AtomicU64::new(1),
            clients: AtomicUsize::new(0),
            registry: Registry::default(),
            commands_processed: Default::default(),
            in_memory: Default::default(),
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            started: Instant::now(),
            run_id: (0..40).map(|_| char::from(b"0123456789abcdef"[rand::random::<u8>() as usize % 16])).collect(),
            keyspace_hits: Default::default(),
            keyspace_misses: Default::default(),
            expired_keys: AtomicU64::new(0),
            lazyfreed_objects: AtomicU64::new(0),
            lastsave: AtomicU64::new(now_s),
            changes_at_save: AtomicU64::new(0),
            shutdown: Notify::new(),
            pause: Mutex::new(None),
            paused: std::sync::atomic::AtomicBool::new(false),
            pause_changed: Notify::new(),
            paused_clients: AtomicUsize::new(0),
            cursors: crate::services::cursors::Cursors::default(),
            blocking: crate::services::blocking::Registry::default(),
            pubsub: crate::services::pubsub::Hub::default(),
            locks: crate::services::named_locks::Locks::default(),
            log_hook: OnceLock::new(),
            tls: RwLock::new(None),
            tls_handshake_failures: AtomicU64::new(0),
            ops_sample: Mutex::new((Instant::now(), 0, 0.0)),
        })
    }

    /// Bytes of memory the server's data structures hold (INFO `used_memory`): the engine's
    /// memtables, block cache and row cache.
    pub fn used_memory(&self) -> u64 {
        self.storage.engine().memory_usage() as u64
    }

    /// True while `maxmemory` is set and `used_memory` is above it: commands that may grow
    /// memory (`denyoom`) are refused with `-OOM`, as in Redis. Shale evicts nothing (its data
    /// is on disk); it keeps under `maxmemory` by sizing its block cache, so this only happens
    /// when the write buffers alone need more.
    pub fn out_of_memory(&self) -> bool {
        let max = self.maxmemory.load(Ordering::Relaxed);
        max > 0 && self.used_memory() > max
    }

    /// The keyspace notification classes in force ([`crate::services::notifications`]).
    pub fn notify_flags(&self) -> u32 {
        self.notify_flags.load(Ordering::Relaxed)
    }

    /// The settings in force (hold the guard briefly).
    pub fn config(&self) -> RwLockReadGuard<'_, Config> {
        self.config.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs the hook that changes the log level at runtime.
    pub fn set_log_hook(&self, hook: LogHook) {
        let _ = self.log_hook.set(hook);
    }

    /// The TLS settings for a new TLS connection.
    pub fn tls_config(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.tls.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Installs TLS settings built by [`crate::net::tls::server_config`] (at startup).
    pub fn set_tls_config(&self, config: Option<Arc<rustls::ServerConfig>>) {
        *self.tls.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// Replaces the configuration (`CONFIG SET`) and applies what changes at runtime: the TLS
    /// settings (rebuilt from the files when a `tls-*` directive changed; if that fails nothing
    /// changes), the engine's tunables (write buffer, L0 triggers, auto compactions, compaction
    /// rate, compression, block cache, replication backlog: `lsm::Db::set_options`), the WAL
    /// sync policy and the log level. Other settings are read where they are used.
    pub fn replace_config(&self, new: Config) -> Result<(), String> {
        let mut cfg = self.config.write().unwrap_or_else(|e| e.into_inner());
        let tls_changed = crate::net::tls::DIRECTIVES.iter().any(|d| new.get(d) != cfg.get(d));
        if tls_changed && crate::net::tls::wanted(&new) {
            let tls = crate::net::tls::server_config(&new)?;
            self.set_tls_config(Some(tls));
            tracing::info!(target: "shale::tls", "TLS settings reloaded");
        }
        let engine_changes = engine_changes(&cfg, &new);
        if engine_changes != lsm::MutableOptions::default() {
            self.storage.engine().set_options(&engine_changes).map_err(|e| e.to_string())?;
        }
        if new.appendfsync != cfg.appendfsync {
            self.storage.engine().set_sync_mode(sync_mode(new.appendfsync)).map_err(|e| e.to_string())?;
        }
        if new.requirepass != cfg.requirepass {
            self.acl.set_default_password(new.requirepass.as_deref());
        }
        self.replication.configure(&new);
        self.notify_flags.store(new.notify_keyspace_events, Ordering::Relaxed);
        self.maxmemory.store(new.maxmemory(), Ordering::Relaxed);
        if new.get("jemalloc-bg-thread") != cfg.get("jemalloc-bg-thread") {
            crate::commands::configure_allocator(&new);
        }
        configure_access_times(&self.access, &new);
        self.command_stats.set_latency_tracking(new.latency_tracking);
        self.slowlog.configure(new.slowlog_log_slower_than, new.slowlog_max_len);
        self.latency.set_threshold(new.latency_monitor_threshold);
        if new.loglevel != cfg.loglevel {
            if let Some(hook) = self.log_hook.get() {
                hook(new.loglevel);
            }
        }
        *cfg = new;
        Ok(())
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset_stats(&self) {
        for counter in [&self.commands_processed, &self.keyspace_hits, &self.keyspace_misses] {
            counter.store(0, Ordering::Relaxed);
        }
        for counter in
            [&self.connections_received, &self.rejected_connections, &self.expired_keys, &self.lazyfreed_objects]
        {
            counter.store(0, Ordering::Relaxed);
        }
        self.command_stats.reset();
    }

    /// `CLIENT PAUSE` (merged with one in force: the longer and stricter wins, as in Redis)
    /// or `CLIENT UNPAUSE` (`None`).
    pub fn set_pause(&self, new: Option<Pause>) {
        let mut pause = self.pause.lock().unwrap_or_else(|e| e.into_inner());
        *pause = match (*pause, new) {
            (Some(p), Some(n)) => Some(Pause { until: p.until.max(n.until), all: p.all || n.all }),
            (_, n) => n,
        };
        self.paused.store(pause.is_some(), Ordering::Release);
        drop(pause);
        self.pause_changed.notify_waiters();
    }

    /// True while a `CLIENT PAUSE` may be in force (one atomic load).
    pub fn pause_in_force(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// How long a command must wait for a `CLIENT PAUSE` (None: run it now).
    pub fn pause_remaining(&self, is_write: bool) -> Option<Duration> {
        if !self.paused.load(Ordering::Acquire) {
            return None;
        }
        let mut pause = self.pause.lock().unwrap_or_else(|e| e.into_inner());
        let p = (*pause)?;
        let now = Instant::now();
        if now >= p.until {
            *pause = None;
            self.paused.store(false, Ordering::Release);
            return None;
        }
        (p.all || is_write).then(|| p.until - now)
    }

    /// Commands per second since the previous sample (taken at most every 100 ms).
    pub fn ops_per_sec(&self) -> f64 {
        let mut s = self.ops_sample.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.commands_processed.load(Ordering::Relaxed);
        let dt = s.0.elapsed().as_secs_f64();
        if dt >= 0.1 {
            s.2 = now.saturating_sub(s.1) as f64 / dt;
            *s = (Instant::now(), now, s.2);
        }
        s.2
    }
}

/// The engine's sync mode for an `appendfsync` setting.
pub fn sync_mode(a: AppendFsync) -> lsm::SyncMode {
    match a {
        AppendFsync::Always => lsm::SyncMode::Always,
        AppendFsync::EverySec => lsm::SyncMode::EverySec,
        AppendFsync::No => lsm::SyncMode::Never,
    }
}

/// The access-time table follows `maxmemory-policy`, `lfu-log-factor` and `lfu-decay-time`.
fn configure_access_times(access: &crate::services::access_times::AccessTimes, cfg: &Config) {
    let int = |name: &str, default: i64| cfg.get(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    access.configure(
        cfg.get("maxmemory-policy").unwrap_or_default(),
        int("lfu-log-factor", 10),
        int("lfu-decay-time", 1),
    );
}

/// The engine options `new` changes from `old` (`CONFIG SET` of the engine's directives, applied
/// with `lsm::Db::set_options` while the server runs).
fn engine_changes(old: &Config, new: &Config) -> lsm::MutableOptions {
    fn changed<T: PartialEq + Copy>(a: T, b: T) -> Option<T> {
        (a != b).then_some(b)
    }
    let backlog = |c: &Config| c.get("repl-backlog-size").and_then(|v| v.parse::<u64>().ok()).unwrap_or(256 << 20);
    lsm::MutableOptions {
        write_buffer_size: changed(old.write_buffer_size, new.write_buffer_size).map(|v| v as usize),
        level0_slowdown_writes_trigger: changed(old.level0_slowdown_writes_trigger, new.level0_slowdown_writes_trigger),
        level0_stop_writes_trigger: changed(old.level0_stop_writes_trigger, new.level0_stop_writes_trigger),
        disable_auto_compactions: changed(old.disable_auto_compactions, new.disable_auto_compactions),
        compaction_rate_limit: changed(old.compaction_rate_limit, new.compaction_rate_limit),
        compression: changed(old.compression, new.compression),
        block_cache_size: changed(old.effective_block_cache_size(), new.effective_block_cache_size())
            .map(|v| v as usize),
        row_cache_size: changed(old.effective_row_cache_size(), new.effective_row_cache_size()).map(|v| v as usize),
        wal_size_limit: changed(backlog(old), backlog(new)),
        ..Default::default()
    }
}
