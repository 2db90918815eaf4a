//! Server commands: AUTH, INFO, TIME, SHUTDOWN, SAVE, BGSAVE, LASTSAVE, MEMORY, FUNCTION, DEBUG.
//!
//! Persistence maps onto the engine: every write is in the WAL (`aof_enabled:1`), so `SAVE` and
//! `BGSAVE` flush the memtables into tables (making restart replay short) and record the time
//! `LASTSAVE` reports.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{engine_error, CommandSpec, Session};
use crate::commands::connection::REDIS_COMPAT_VERSION;
use crate::resp::Reply;
use crate::storage::now_ms;

pub(super) static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "auth",
        arity: -2,
        flags: &["noscript", "loading", "stale", "fast", "no_auth"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: auth,
    },
    CommandSpec {
        name: "info",
        arity: -1,
        flags: &["loading", "stale"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: info,
    },
    CommandSpec {
        name: "time",
        arity: 1,
        flags: &["loading", "stale", "fast"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: time,
    },
    CommandSpec {
        name: "shutdown",
        arity: -1,
        flags: &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: shutdown,
    },
    CommandSpec {
        name: "save",
        arity: 1,
        flags: &["admin", "noscript", "no_async_loading", "no_multi"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: save,
    },
    CommandSpec {
        name: "bgsave",
        arity: -1,
        flags: &["admin", "noscript", "no_async_loading"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: bgsave,
    },
    CommandSpec {
        name: "lastsave",
        arity: 1,
        flags: &["loading", "stale", "fast"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: lastsave,
    },
    CommandSpec {
        name: "memory",
        arity: -2,
        flags: &["readonly"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: memory,
    },
    CommandSpec {
        name: "function",
        arity: -2,
        flags: &["noscript"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: function,
    },
    CommandSpec {
        name: "debug",
        arity: -2,
        flags: &["admin", "noscript", "loading", "stale"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: debug,
    },
];

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Logs in as `user` if `pass` is one of its passwords and it is on; a failure is logged
/// (server log and `ACL LOG`) and counted.
pub(super) fn check_credentials(s: &mut Session, user: &[u8], pass: &[u8]) -> Result<(), Reply> {
    match s.state.acl.authenticate(user, pass) {
        Some(entry) => {
            s.login(entry);
            Ok(())
        }
        None => {
            let name = String::from_utf8_lossy(user).into_owned();
            tracing::warn!(target: "shale::acl", client = s.id, addr = %s.handle.addr, user = %name, "AUTH failed");
            crate::commands::acl::log_refusal(s, crate::acl::Reason::Auth, "AUTH".into(), Some(name));
            Err(Reply::error(WRONGPASS))
        }
    }
}

fn auth(s: &mut Session, args: &[Bytes]) -> Reply {
    let (user, pass): (&[u8], &[u8]) = match args {
        [_, _] if s.state.acl.default_user().rules().nopass => {
            return Reply::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            )
        }
        [_, pass] => (b"default", pass),
        [_, user, pass] => (user, pass),
        _ => return Reply::error("ERR syntax error"),
    };
    match check_credentials(s, user, pass) {
        Ok(()) => Reply::ok(),
        Err(e) => e,
    }
}

fn time(_: &mut Session, _: &[Bytes]) -> Reply {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(Bytes::from(now.as_secs().to_string())),
        Reply::bulk(Bytes::from(now.subsec_micros().to_string())),
    ])
}

/// CPU seconds (user, system) of this process, from /proc/self/stat.
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (ticks(11), ticks(12))
}

/// Resident bytes in all, of anonymous memory (heap: memtables, block cache, buffers) and of
/// mapped files (the engine's tables and WAL), from `/proc/self/status`.
fn rss() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.2}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2}M", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.2}K", b as f64 / 1024.0),
        b => format!("{b}B"),
    }
}

/// `INFO [section …]`: the sections and fields monitoring tools read, plus `lsm` (engine stats).
fn info(s: &mut Session, args: &[Bytes]) -> Reply {
    let wanted: Vec<String> = args[1..].iter().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()).collect();
    let all = wanted.is_empty() || wanted.iter().any(|w| w == "all" || w == "everything" || w == "default");
    let show = |name: &str| all || wanted.iter().any(|w| w == name);
    let st = &s.state;
    let cfg = st.config().clone();
    let stats = st.storage.engine().stats();
    let uptime = st.started.elapsed().as_secs();
    let mut out = String::new();
    let mut section = |title: &str, fields: Vec<(&str, String)>| {
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {title}\r\n");
        for (k, v) in fields {
            let _ = write!(out, "{k}:{v}\r\n");
        }
    };
    if show("server") {
        let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros();
        let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
        section(
            "Server",
            vec![
                ("redis_version", REDIS_COMPAT_VERSION.to_string()),
                ("shale_version", env!("CARGO_PKG_VERSION").to_string()),
                ("redis_git_sha1", "00000000".into()),
                ("redis_git_dirty", "0".into()),
                ("redis_mode", "standalone".into()),
                ("os", format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)),
                ("arch_bits", "64".into()),
                ("multiplexing_api", "epoll".into()),
                ("process_id", std::process::id().to_string()),
                ("run_id", st.run_id.clone()),
                ("tcp_port", cfg.port.to_string()),
                ("server_time_usec", now_us.to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86400).to_string()),
                ("hz", cfg.get("hz").unwrap_or("10").to_string()),
                ("executable", exe),
                ("config_file", cfg.file.as_ref().map(|p| p.display().to_string()).unwrap_or_default()),
            ],
        );
    }
    if show("clients") {
        section(
            "Clients",
            vec![
                ("connected_clients", st.clients.load(Ordering::Relaxed).to_string()),
                ("cluster_connections", "0".into()),
                ("maxclients", cfg.maxclients.to_string()),
                ("blocked_clients", st.blocking.blocked_clients().to_string()),
                ("tracking_clients", "0".into()),
                ("pubsub_clients", "0".into()),
            ],
        );
    }
    if show("memory") {
        let used = (stats.memtable_bytes + stats.block_cache_bytes) as u64;
        let (rss, anon, file) = rss();
        section(
            "Memory",
            vec![
                ("used_memory", used.to_string()),
                ("used_memory_human", human(used)),
                ("used_memory_rss", rss.to_string()),
                ("used_memory_rss_human", human(rss)),
                ("maxmemory", cfg.get("maxmemory").unwrap_or("0").to_string()),
                ("maxmemory_policy", cfg.get("maxmemory-policy").unwrap_or("noeviction").to_string()),
                ("mem_fragmentation_ratio", format!("{:.2}", rss as f64 / used.max(1) as f64)),
                ("mem_allocator", if cfg!(feature = "jemalloc") { "jemalloc" } else { "libc" }.into()),
                ("lsm_memtable_bytes", stats.memtable_bytes.to_string()),
                ("lsm_block_cache_bytes", stats.block_cache_bytes.to_string()),
                // How tables are read. mmap: RSS counts the pages of mapped tables that were
                // touched (the kernel can drop them under memory pressure, unlike the anonymous
                // part); pread: table data is in memory only as block-cache blocks. The WAL is
                // mapped in both modes.
                ("lsm_table_read_mode", cfg.get("table-read-mode").unwrap_or("pread").to_string()),
                (
                    "lsm_mapped_table_bytes",
                    if cfg.get("table-read-mode") == Some("mmap") {
                        stats.levels.iter().map(|l| l.bytes).sum::<u64>()
                    } else {
                        0
                    }
                    .to_string(),
                ),
                ("used_memory_rss_anon", anon.to_string()),
                ("used_memory_rss_file", file.to_string()),
            ],
        );
    }
    if show("persistence") {
        section(
            "Persistence",
            vec![
                ("loading", "0".into()),
                ("async_loading", "0".into()),
                ("rdb_bgsave_in_progress", "0".into()),
                ("rdb_last_save_time", st.lastsave.load(Ordering::Relaxed).to_string()),
                ("rdb_last_bgsave_status", "ok".into()),
                ("aof_enabled", "1".into()),
                ("aof_rewrite_in_progress", "0".into()),
                ("aof_last_write_status", "ok".into()),
                ("lsm_last_sequence", stats.last_sequence.to_string()),
            ],
        );
    }
    if show("stats") {
        let acl_fields = super::acl::info_fields(s);
        let tls_failures = st.tls_handshake_failures.load(Ordering::Relaxed).to_string();
        section(
            "Stats",
            [
                ("total_connections_received", st.connections_received.load(Ordering::Relaxed).to_string()),
                ("total_commands_processed", st.commands_processed.load(Ordering::Relaxed).to_string()),
                ("instantaneous_ops_per_sec", format!("{:.0}", st.ops_per_sec())),
                ("rejected_connections", st.rejected_connections.load(Ordering::Relaxed).to_string()),
                ("expired_keys", st.expired_keys.load(Ordering::Relaxed).to_string()),
                ("evicted_keys", "0".into()),
                ("keyspace_hits", st.keyspace_hits.load(Ordering::Relaxed).to_string()),
                ("keyspace_misses", st.keyspace_misses.load(Ordering::Relaxed).to_string()),
                ("pubsub_channels", st.pubsub.channels(crate::services::pubsub::Kind::Channel, None).len().to_string()),
                ("pubsub_patterns", st.pubsub.pattern_count().to_string()),
                // Shale's executor threads: how often every one was blocked (helpers started).
                ("executor_threads", st.executor.threads().to_string()),
                ("executor_helpers_active", st.executor.helpers().to_string()),
                ("executor_helpers_started", st.executor.helpers_started().to_string()),
                ("executor_queued_jobs", st.executor.queued().to_string()),
                // Requests the connections' own tasks ran (memory reads, queued SET batches).
                ("in_memory_reads", st.in_memory.reads.load(Ordering::Relaxed).to_string()),
                ("in_memory_reads_voided", st.in_memory.reads_voided.load(Ordering::Relaxed).to_string()),
                ("in_memory_set_batches", st.in_memory.set_batches.load(Ordering::Relaxed).to_string()),
                (
                    "in_memory_set_batches_handed_off",
                    st.in_memory.set_batches_handed_off.load(Ordering::Relaxed).to_string(),
                ),
                ("sync_full", st.replication.sync_full.load(Ordering::Relaxed).to_string()),
                ("sync_partial_ok", st.replication.sync_partial_ok.load(Ordering::Relaxed).to_string()),
                ("sync_partial_err", st.replication.sync_partial_err.load(Ordering::Relaxed).to_string()),
                ("tls_handshake_failures", tls_failures),
            ]
            .into_iter()
            .chain(acl_fields)
            .collect(),
        );
    }
    if show("replication") {
        section("Replication", super::replication::info_fields(st));
    }
    if show("cpu") {
        let (user, sys) = cpu_seconds();
        section("CPU", vec![("used_cpu_sys", format!("{sys:.6}")), ("used_cpu_user", format!("{user:.6}"))]);
    }
    if show("keyspace") {
        let mut fields = Vec::new();
        for db in 0..cfg.databases {
            let c = st.storage.keyspace_counts(db);
            if c.keys > 0 {
                fields.push((db, format!("keys={},expires={},avg_ttl={}", c.keys, c.expires, c.avg_ttl_ms)));
            }
        }
        let names: Vec<String> = fields.iter().map(|(db, _)| format!("db{db}")).collect();
        section("Keyspace", names.iter().map(String::as_str).zip(fields.into_iter().map(|(_, v)| v)).collect());
    }
    if show("lsm") {
        let mut fields: Vec<(String, String)> = Vec::new();
        for (i, l) in stats.levels.iter().enumerate() {
            fields.push((format!("lsm_l{i}_files"), l.files.to_string()));
            fields.push((format!("lsm_l{i}_bytes"), l.bytes.to_string()));
        }
        fields.push(("lsm_write_amplification".into(), format!("{:.2}", stats.write_amplification)));
        fields.push(("lsm_compactions".into(), stats.compactions.to_string()));
        fields.push(("lsm_stall_micros".into(), stats.stall_micros.to_string()));
        fields.push(("lsm_block_cache_hits".into(), stats.block_cache_hits.to_string()));
        fields.push(("lsm_block_cache_misses".into(), stats.block_cache_misses.to_string()));
        fields.push(("lsm_iter_entries".into(), stats.iter_entries.to_string()));
        fields.push(("lsm_iter_tombstones".into(), stats.iter_tombstones.to_string()));
        fields.push(("lsm_table_tombstones".into(), stats.table_tombstones.to_string()));
        fields.push(("lsm_tables_marked_for_compaction".into(), stats.tables_marked_for_compaction.to_string()));
        section("LSM", fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
    }
    Reply::Verbatim(Bytes::from(out))
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: stop accepting, let connections finish, sync
/// the WAL, exit 0. Every write is already in the WAL, so SAVE and NOSAVE stop the same way.
fn shutdown(s: &mut Session, args: &[Bytes]) -> Reply {
    for a in &args[1..] {
        match String::from_utf8_lossy(a).to_ascii_lowercase().as_str() {
            "nosave" | "save" | "now" | "force" => {}
            "abort" => return Reply::error("ERR No shutdown in progress."),
            _ => return Reply::error("ERR syntax error"),
        }
    }
    tracing::info!(client = s.id, "SHUTDOWN requested by a client");
    s.state.shutdown.notify_one();
    s.closing = true;
    // Redis closes the connection without a reply when the shutdown goes ahead.
    s.suppress_current = true;
    Reply::ok()
}

fn flush_engine(s: &Session) -> Result<(), Reply> {
    s.state.storage.engine().flush().map_err(engine_error)?;
    s.state.lastsave.store(now_ms() / 1000, Ordering::Relaxed);
    Ok(())
}

fn save(s: &mut Session, _: &[Bytes]) -> Reply {
    match flush_engine(s) {
        Ok(()) => Reply::ok(),
        Err(e) => e,
    }
}

fn bgsave(s: &mut Session, args: &[Bytes]) -> Reply {
    match args {
        [_] => {}
        [_, opt] if opt.eq_ignore_ascii_case(b"schedule") => {}
        _ => return Reply::error("ERR syntax error"),
    }
    let state = std::sync::Arc::clone(&s.state);
    std::thread::spawn(move || match state.storage.engine().flush() {
        Ok(()) => state.lastsave.store(now_ms() / 1000, Ordering::Relaxed),
        Err(e) => tracing::error!(target: "shale::storage", error = %e, "BGSAVE (engine flush) failed"),
    });
    Reply::Simple("Background saving started".into())
}

fn lastsave(s: &mut Session, _: &[Bytes]) -> Reply {
    Reply::Integer(s.state.lastsave.load(Ordering::Relaxed) as i64)
}

/// `MEMORY USAGE key [SAMPLES n]`, `MEMORY STATS`, `MEMORY DOCTOR`, `MEMORY PURGE`, `MEMORY HELP`.
fn memory(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("usage", 3) | ("usage", 5) => {
            if args.len() == 5 && !args[3].eq_ignore_ascii_case(b"samples") {
                return Reply::error("ERR syntax error");
            }
            match s.state.storage.get(&s.exec, s.db, &args[2]) {
                // What the key costs on disk before compression: its record key and value.
                Ok(Some(m)) => Reply::Integer((3 + args[2].len() + 17 + m.body.len()) as i64),
                Ok(None) => Reply::Null,
                Err(e) => engine_error(e),
            }
        }
        ("stats", 2) => {
            let stats = s.state.storage.engine().stats();
            let used = (stats.memtable_bytes + stats.block_cache_bytes) as i64;
            let field = |k: &str, v: i64| (Reply::bulk(Bytes::copy_from_slice(k.as_bytes())), Reply::Integer(v));
            Reply::Map(vec![
                field("peak.allocated", used),
                field("total.allocated", used),
                field("keys.count", 0),
                field("dataset.bytes", stats.total_bytes() as i64),
            ])
        }
        ("doctor", 2) => Reply::Verbatim(Bytes::from_static(
            b"Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.",
        )),
        ("purge", 2) => Reply::ok(),
        ("help", 2) => Reply::Array(
            [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "USAGE <key> [SAMPLES <count>]",
                "STATS",
                "DOCTOR",
                "PURGE",
                "HELP",
            ]
            .iter()
            .map(|l| Reply::Simple((*l).into()))
            .collect(),
        ),
        ("usage" | "stats" | "doctor" | "purge" | "help", _) => {
            Reply::error(format!("ERR wrong number of arguments for 'memory|{sub}' command"))
        }
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try MEMORY HELP.", String::from_utf8_lossy(&args[1]))),
    }
}

/// Scripting is not built yet: FUNCTION answers for an empty library, as a fresh Redis does.
fn function(_: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "flush" if args.len() <= 3 => Reply::ok(),
        "list" => Reply::Array(Vec::new()),
        "stats" => Reply::Map(vec![
            (Reply::bulk(&b"running_script"[..]), Reply::Null),
            (Reply::bulk(&b"engines"[..]), Reply::Map(Vec::new())),
        ]),
        "dump" => Reply::bulk(Bytes::new()),
        "delete" if args.len() == 3 => Reply::error("ERR Library not found"),
        "load" | "restore" => Reply::error("ERR scripting is not supported by this server"),
        "kill" => Reply::error("NOTBUSY No scripts in execution right now."),
        _ => {
            Reply::error(format!("ERR unknown subcommand '{}'. Try FUNCTION HELP.", String::from_utf8_lossy(&args[1])))
        }
    }
}

/// `DEBUG SLEEP seconds` (blocks this client like Redis blocks its thread), `DEBUG RELOAD`/`FLUSH`
/// (an engine flush), `DEBUG SET-ACTIVE-EXPIRE` (accepted), `DEBUG DIGEST` (a checksum of
/// every database's contents, see `storage/digest.rs`), and Shale's `DEBUG COMPACT` (a full
/// compaction, e.g. to get the space of deleted collections back at once). The gate refuses
/// DEBUG unless `enable-debug-command` allows it.
fn debug(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "sleep" if args.len() == 3 => match String::from_utf8_lossy(&args[2]).parse::<f64>() {
            Ok(secs) if secs >= 0.0 && secs.is_finite() => {
                // Commands run on executor threads: this blocks no other client.
                std::thread::sleep(std::time::Duration::from_secs_f64(secs));
                Reply::ok()
            }
            _ => Reply::error("ERR value is not a valid float"),
        },
        "set-active-expire" if args.len() == 3 => Reply::ok(),
        "digest" if args.len() == 2 => {
            let databases = s.state.config().databases;
            match s.state.storage.digest(&s.exec, databases) {
                Ok(d) => Reply::Simple(d.iter().map(|b| format!("{b:02x}")).collect()),
                Err(e) => engine_error(e),
            }
        }
        // Shale: compact the whole keyspace now (reclaims deleted collections' elements).
        "compact" if args.len() == 2 => {
            s.state.storage.engine().compact_range::<&[u8], _>(..).map_or_else(engine_error, |_| Reply::ok())
        }
        // Shale: panic inside this command while it holds the key's lock and a read snapshot,
        // to prove the dispatch boundary (the client gets an error, nothing is left held).
        "panic-command" if args.len() == 3 => {
            let _guard = s.state.storage.lock(&s.exec, s.db, [&args[2][..]]);
            s.exec.begin_snapshot(s.state.storage.engine());
            panic!("DEBUG PANIC-COMMAND on key {:?}", String::from_utf8_lossy(&args[2]));
        }
        "flush" | "reload" => match flush_engine(s) {
            Ok(()) => Reply::ok(),
            Err(e) => e,
        },
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try DEBUG HELP.", String::from_utf8_lossy(&args[1]))),
    }
}
