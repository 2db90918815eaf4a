//! `shale-server [config-file] [--directive value …]`, started like `redis-server`;
//! `shale-server [config-file] [--directive value …] --import-rdb dump.rdb` loads a Redis RDB
//! file into the data directory and exits.

use std::process::ExitCode;
use std::sync::Arc;

use shale_server::config::{Config, LogLevel};
use shale_server::state::{sync_mode, LogHook, ServerState};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: freed pages go back to the OS after a second
/// instead of ten (`jemalloc-bg-thread`'s threads hand them back), and none are kept lazily
/// freed (`muzzy` pages, which still count in RSS). Flushes and compactions
/// free tens of megabytes at a time: after three rounds of SET and GET over 1M keys, 148 MiB
/// RSS against 79 MB allocated with the default decay, 101 against 79 with this, at the same
/// throughput. `_RJEM_MALLOC_CONF` in the environment overrides it.
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: lsm::allocator::MallocConf =
    lsm::allocator::MallocConf::new(c"dirty_decay_ms:1000,muzzy_decay_ms:0");

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help" || a == "-v" || a == "--version") {
        eprintln!(
            "shale-server {} (Redis-protocol server on the lsm engine)\n\
             Usage: shale-server [/path/to/shale.conf] [--directive value …]\n\
             \x20      shale-server [/path/to/shale.conf] [--directive value …] --import-rdb dump.rdb\n\
             Examples: shale-server --port 7777 --dir /var/lib/shale\n\
             \x20         shale-server --dir /var/lib/shale --import-rdb /var/lib/redis/dump.rdb",
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }
    let import = match args.iter().position(|a| a == "--import-rdb") {
        Some(i) if i + 1 < args.len() => {
            let path = args.remove(i + 1);
            args.remove(i);
            Some(std::path::PathBuf::from(path))
        }
        Some(_) => {
            eprintln!("--import-rdb needs the path of an RDB file");
            return ExitCode::from(1);
        }
        None => None,
    };
    let mut config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    if import.is_some() {
        config.write_buffer_size = import_write_buffer(&config);
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level_filter(config.loglevel)));
    let (filter, reload) = tracing_subscriber::reload::Layer::new(filter);
    let log_hook: LogHook = Box::new(move |level| {
        let _ = reload.modify(|f| *f = tracing_subscriber::EnvFilter::new(level_filter(level)));
    });
    if let Err(e) = init_logging(filter, &config.logfile) {
        eprintln!("Can't open the log file: {e}");
        return ExitCode::from(1);
    }
    // TLS files are read before anything else: a bad one stops the server, naming it.
    let tls = if shale_server::net::tls::wanted(&config) {
        match shale_server::net::tls::server_config(&config) {
            Ok(tls) => Some(tls),
            Err(e) => {
                tracing::error!(target: "shale::tls", "Failed to configure TLS: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    // The engine opens (and later closes) here, off the runtime: only network I/O runs there.
    let dir = config.dir.clone();
    let (db, state) = match open(config, log_hook) {
        Ok(opened) => opened,
        Err(e) => {
            if matches!(e.downcast_ref::<lsm::Error>(), Some(lsm::Error::Corruption { .. })) {
                tracing::error!(
                    error = %e,
                    "the data directory is damaged; nothing was changed. Inspect it with `shale-ldb verify {d}`, rebuild it with `shale-ldb repair {d}`",
                    d = dir.display()
                );
            } else {
                tracing::error!(error = %e, "cannot start");
            }
            return ExitCode::from(1);
        }
    };
    if let Some(path) = import {
        return import_rdb(&path, state, db);
    }
    shale_server::commands::remove_stale_snapshots(&state.config().dir);
    state.set_tls_config(tls);
    let runtime = match runtime(state.config().worker_threads, &state) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return ExitCode::from(1);
        }
    };
    state.replication.set_runtime(runtime.handle().clone());
    state.replication.start(&state);
    let served = runtime.block_on(serve(Arc::clone(&state)));
    drop(runtime);
    let closed = state.storage.close().and_then(|()| {
        if let Err(e) = state.replication.close() {
            tracing::warn!(error = %e, "could not record the clean shutdown for replication");
        }
        drop(state);
        db.close()
    });
    match served.map_err(|e| e.to_string()).and(closed.map_err(|e| e.to_string())) {
        Ok(()) => {
            tracing::info!("shale-server stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "fatal");
            ExitCode::from(1)
        }
    }
}

/// The write buffer an import runs with: `write-buffer-size`, raised to 128 MB (or a quarter
/// of `maxmemory` if that is less). A bulk load of keys in Redis's hash order writes every part
/// of the key space at once, and fewer, larger L0 tables are merged into L1 fewer times: a 1 GB
/// RDB imported in 31 s with 16 MB buffers and in 19 s with 128 MB ones (64 MB: 23 s, 256 MB:
/// 20 s). Only the import process uses it; the server started afterwards uses its own.
fn import_write_buffer(config: &Config) -> u64 {
    const BULK: u64 = 128 << 20;
    let bulk = match config.maxmemory() {
        0 => BULK,
        max => BULK.min(max / 4),
    };
    config.write_buffer_size.max(bulk)
}

/// `--import-rdb`: loads the RDB file into the opened data directory, logs what it did, closes.
fn import_rdb(path: &std::path::Path, state: Arc<ServerState>, db: lsm::Db) -> ExitCode {
    let started = std::time::Instant::now();
    let databases = state.config().databases;
    tracing::info!(file = %path.display(), dir = %state.config().dir.display(), "importing an RDB file");
    let limits = shale_server::storage::ListpackLimits::of(&state.config());
    let result = shale_server::rdb::file::import(&state.storage, path, databases, limits, |done, total, keys| {
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        tracing::info!(
            percent = format!("{:.1}", 100.0 * done as f64 / total.max(1) as f64),
            keys,
            mb_per_s = format!("{:.1}", done as f64 / secs / 1e6),
            "importing"
        );
    });
    // Function libraries go in after the keys, as Redis loads them, all or none.
    let result = result.and_then(|done| {
        if !done.functions.is_empty() {
            state.scripting.import_libraries(state.storage.engine(), &done.functions).map_err(|e| {
                shale_server::rdb::file::ImportError::Unsupported(format!("the file's function libraries: {e}"))
            })?;
        }
        Ok(done)
    });
    let closed = state.storage.close().and_then(|()| {
        drop(state);
        db.close()
    });
    match (result, closed) {
        (Ok(done), Ok(())) => {
            tracing::info!(
                keys = done.keys,
                expired_skipped = done.expired,
                databases = ?done.databases,
                function_libraries = done.functions.len(),
                rdb_version = done.version,
                seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
                "RDB import done"
            );
            ExitCode::SUCCESS
        }
        (Err(e), _) => {
            tracing::error!(error = %e, "RDB import failed; keys before the failure were written");
            ExitCode::from(1)
        }
        (_, Err(e)) => {
            tracing::error!(error = %e, "closing the data directory after the import failed");
            ExitCode::from(1)
        }
    }
}

/// Runtime threads when `worker-threads` is 0: half the cores, at least one. The other half
/// is left to the executors, the engine's commit, flush and compaction threads (and, when
/// benchmarked on one machine, the client). Every runtime thread more is another that a wake-up
/// from those threads (a commit done, an executor's replies) may have to unpark, and that
/// steals the others' tasks. On 2 cores, one runtime thread instead of two (with long rounds
/// handed to the executors whole, see `net::round`): SET P1 +48 %, INCR P1 +27 %, SADD P1
/// +17 %, GET P1 +15 %; at P16 SET and GET over 1M keys +12 %, INCR +17 %, SADD +15 %; GET over
/// 100K keys and MSET 4 % slower (redis-benchmark, 50 clients, medians of two alternating runs).
fn default_workers() -> usize {
    (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1)
}

/// Task polls on a busy runtime between two starts of deferred commits (see `runtime`).
#[cfg(tokio_unstable)]
const DEFERRED_COMMIT_POLLS: u32 = 32;

/// The multi-threaded runtime serving connections, with `workers` threads (0: half the cores,
/// at least one: see [`default_workers`]).
fn runtime(workers: usize, state: &ServerState) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let threads = if workers > 0 { workers } else { default_workers() };
    builder.worker_threads(threads);
    // SETs queued from connections' tasks do not wake the engine's commit thread one by one
    // (`Storage::defer_async_commits`): a worker starts their commit once per pass over its
    // ready tasks — before it parks, and every `DEFERRED_COMMIT_POLLS` task polls while it
    // stays busy. Measured: SET P1 +7 %, P16 +5 % (one wake-up of the commit thread per pass
    // instead of one per connection). Without `tokio_unstable` there is no poll hook: a worker
    // that never parked would hold the SETs back, so they wake the commit thread themselves.
    #[cfg(tokio_unstable)]
    {
        // Only the last worker to park starts them: a worker still running tasks starts them
        // itself when it parks or after its next polls, with the SETs of both in one group.
        // `awake` counts the workers outside a park: tokio calls the two hooks around every
        // park of a worker thread (never for the blocking pool's threads), and the runtime has
        // exactly `threads` workers (the server never calls `block_in_place`, which would hand
        // a worker's place to another thread).
        let awake = Arc::new(std::sync::atomic::AtomicIsize::new(threads as isize));
        let (parked, unparked) = (Arc::clone(&awake), awake);
        let engine = state.storage.engine().clone();
        builder.on_thread_park(move || {
            if parked.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) <= 1 {
                engine.start_deferred_commits();
            }
        });
        builder.on_thread_unpark(move || {
            unparked.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        });
        let (engine, polls) = (state.storage.engine().clone(), std::sync::atomic::AtomicU32::new(0));
        builder.on_after_task_poll(move |_| {
            if polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % DEFERRED_COMMIT_POLLS == 0 {
                engine.start_deferred_commits();
            }
        });
        state.storage.defer_async_commits();
    }
    // Tasks woken together run in the order they were woken. With tokio's LIFO slot, the task
    // woken last runs first: when two clients' commands arrive in one poll of the sockets, the
    // later one would run first (a PUBLISH overtaking the other client's UNSUBSCRIBE sent before
    // it). Redis serves them in arrival order. The option is `tokio_unstable`, which
    // `.cargo/config.toml` sets; a build with its own RUSTFLAGS keeps tokio's default.
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.enable_all().build()
}

/// The `EnvFilter` directive for a Redis `loglevel`.
fn level_filter(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Debug => "debug",
        LogLevel::Verbose | LogLevel::Notice => "info",
        LogLevel::Warning => "warn",
        LogLevel::Nothing => "off",
    }
}

/// Logs to stderr, or appends to `logfile` when one is configured (as redis-server does).
fn init_logging<L>(filter: L, logfile: &str) -> std::io::Result<()>
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let registry = tracing_subscriber::registry().with(filter);
    if logfile.is_empty() {
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi)).init();
    } else {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(logfile)?;
        registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::sync::Mutex::new(file)).with_ansi(false))
            .init();
    }
    Ok(())
}

/// Opens the engine and the server state.
fn open(config: Config, log_hook: LogHook) -> Result<(lsm::Db, Arc<ServerState>), Box<dyn std::error::Error>> {
    let filter = Arc::new(shale_server::storage::ShaleFilter::default());
    let opts = lsm::Options::default()
        .sync_mode(sync_mode(config.appendfsync))
        .write_buffer_size(config.write_buffer_size as usize)
        .block_cache_size(config.effective_block_cache_size() as usize)
        .row_cache_size(config.effective_row_cache_size() as usize)
        // Reads of just-flushed keys find their blocks in memory and stay on the connection's
        // task instead of going to an executor for a pread.
        .prepopulate_block_cache(true)
        .table_read_mode(config.table_read_mode)
        .compression(config.compression)
        .level0_slowdown_writes_trigger(config.level0_slowdown_writes_trigger)
        .level0_stop_writes_trigger(config.level0_stop_writes_trigger)
        .disable_auto_compactions(config.disable_auto_compactions)
        .compaction_rate_limit(config.compaction_rate_limit)
        // The replication backlog: flushed WAL kept for replicas' partial resyncs.
        .wal_size_limit(config.get("repl-backlog-size").and_then(|v| v.parse().ok()).unwrap_or(256 << 20))
        .compaction_filter(Arc::clone(&filter) as Arc<dyn lsm::CompactionFilter>)
        // A flushed memtable's memory goes back to the OS at once, not seconds later.
        .memory_release(Arc::new(shale_server::commands::purge_allocator));
    shale_server::commands::configure_allocator(&config);
    let db = lsm::Db::open(&config.dir, opts)?;
    filter.attach(&db);
    let state = Arc::new(ServerState::new(config, db.clone()).map_err(|e| e as Box<dyn std::error::Error>)?);
    state.set_log_hook(log_hook);
    Ok((db, state))
}

/// Listens and serves until SIGINT, SIGTERM or SHUTDOWN.
async fn serve(state: Arc<ServerState>) -> Result<(), Box<dyn std::error::Error>> {
    let mut listeners = Vec::new();
    let (port, tls_port, bind) = {
        let cfg = state.config();
        let tls_port: u16 = cfg.get("tls-port").and_then(|p| p.parse().ok()).unwrap_or(0);
        (cfg.port, tls_port, cfg.bind.clone())
    };
    for (port, tls) in [(port, false), (tls_port, true)] {
        let at = shale_server::net::Endpoints { bind: bind.clone(), port };
        listeners.extend(shale_server::net::bind(&at, tls).await?);
    }
    let expiry = tokio::spawn(shale_server::services::expiry_cycle::active_expiry(Arc::clone(&state)));
    let (pidfile, supervised) = {
        let cfg = state.config();
        (cfg.get("pidfile").unwrap_or_default().to_string(), cfg.get("supervised").unwrap_or_default().to_string())
    };
    if !pidfile.is_empty() {
        if let Err(e) = std::fs::write(&pidfile, format!("{}\n", std::process::id())) {
            tracing::warn!(file = %pidfile, error = %e, "cannot write the pidfile");
        }
    }
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "shale-server ready to accept connections");
    if supervised == "systemd" || supervised == "auto" {
        notify_systemd_ready();
    }
    let stop = {
        let state = Arc::clone(&state);
        async move {
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = state.shutdown.notified() => {}
            }
            // A script still running (even one that wrote: its writes are not committed) is
            // stopped, so the executors can drain, as Redis exits during a busy script.
            state.scripting.status.abort();
        }
    };
    shale_server::net::serve(listeners, Arc::clone(&state), stop).await;
    expiry.abort();
    if !pidfile.is_empty() {
        let _ = std::fs::remove_file(&pidfile);
    }
    Ok(())
}

/// `supervised systemd`: tells systemd (a `Type=notify` unit) the server is ready, through the
/// datagram socket in `$NOTIFY_SOCKET` (a path, or an abstract name starting with `@`).
fn notify_systemd_ready() {
    use std::os::linux::net::SocketAddrExt;
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let target = target.to_string_lossy().into_owned();
    let sent = (|| -> std::io::Result<()> {
        let socket = std::os::unix::net::UnixDatagram::unbound()?;
        let addr = match target.strip_prefix('@') {
            Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?,
            None => std::os::unix::net::SocketAddr::from_pathname(&target)?,
        };
        socket.send_to_addr(b"READY=1\n", &addr)?;
        Ok(())
    })();
    match sent {
        Ok(()) => tracing::info!("told systemd the server is ready"),
        Err(e) => tracing::warn!(socket = %target, error = %e, "cannot notify systemd"),
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
