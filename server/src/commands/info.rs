//! INFO: Redis 7.0's sections — chosen as Redis chooses them (`default`, `all`, `everything`,
//! or names, case-insensitive, combined) — plus `lsm`, the engine's own.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{spec, CommandSpec, Session, NO_KEYS};
use crate::commands::connection::REDIS_COMPAT_VERSION;
use crate::resp::Reply;

pub(super) static COMMANDS: &[CommandSpec] = &[spec("info", -1, &["loading", "stale"], NO_KEYS, info)];

/// The sections `INFO` and `INFO default` show (Redis's, in its order, and `lsm`).
const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "lsm",
];

/// Sections only `all` and `everything` (or their names) add.
const MORE_SECTIONS: &[&str] = &["commandstats", "latencystats"];

/// Which sections `INFO args…` asks for.
fn selection(args: &[Bytes]) -> impl Fn(&str) -> bool {
    let mut wanted: Vec<String> = Vec::new();
    let words: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()).collect();
    let words = if words.is_empty() { vec!["default".to_string()] } else { words };
    for w in words {
        match w.as_str() {
            "default" => wanted.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string())),
            "all" | "everything" => wanted.extend(DEFAULT_SECTIONS.iter().chain(MORE_SECTIONS).map(|s| s.to_string())),
            // Redis's name for the modules section in a selection.
            "module_list" => wanted.push("modules".into()),
            _ => wanted.push(w),
        }
    }
    move |name: &str| wanted.iter().any(|w| w == name)
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

/// jemalloc's allocated, active and resident bytes (INFO's `allocator_*` fields, as Redis
/// reports them with jemalloc); `None` with another allocator.
fn allocator_stats() -> Option<(u64, u64, u64)> {
    #[cfg(feature = "jemalloc")]
    {
        let allocated = lsm::allocator::jemalloc_allocated()?;
        let (active, _) = lsm::allocator::jemalloc_active_and_metadata()?;
        let resident = lsm::allocator::jemalloc_resident()?;
        Some((allocated as u64, active as u64, resident as u64))
    }
    #[cfg(not(feature = "jemalloc"))]
    None
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
pub(super) fn info(s: &mut Session, args: &[Bytes]) -> Reply {
    let show = selection(&args[1..]);
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
                (
                    "blocked_clients",
                    (st.blocking.blocked_clients() + st.paused_clients.load(Ordering::Relaxed)).to_string(),
                ),
                ("tracking_clients", st.storage.tracking.stats().0.to_string()),
                ("pubsub_clients", "0".into()),
            ],
        );
    }
    if show("memory") {
        let used = st.used_memory();
        let (rss, anon, file) = rss();
        let lua = st.scripting.memory() as u64;
        let spares = st.scripting.spare_memory() as u64;
        let (scripts, libraries, functions) = st.scripting.counts();
        let allocator = allocator_stats();
        let ratio = |a: u64, b: u64| format!("{:.2}", a as f64 / b.max(1) as f64);
        let mut fields = vec![
            ("used_memory", used.to_string()),
            ("used_memory_human", human(used)),
            ("used_memory_rss", rss.to_string()),
            ("used_memory_rss_human", human(rss)),
        ];
        if let Some((allocated, active, resident)) = allocator {
            fields.extend([
                ("allocator_allocated", allocated.to_string()),
                ("allocator_active", active.to_string()),
                ("allocator_resident", resident.to_string()),
            ]);
        }
        fields.extend([
            ("maxmemory", cfg.get("maxmemory").unwrap_or("0").to_string()),
            ("maxmemory_policy", cfg.get("maxmemory-policy").unwrap_or("noeviction").to_string()),
        ]);
        if let Some((allocated, active, resident)) = allocator {
            // Redis's breakdown of RSS: free space in the allocator's used pages, its resident
            // pages beyond those, and what the process holds outside the allocator (here the
            // memtables' arenas, the WAL's and mapped tables' pages, the binary).
            let diff = |a: u64, b: u64| (a as i64 - b as i64).to_string();
            fields.extend([
                ("allocator_frag_ratio", ratio(active, allocated)),
                ("allocator_frag_bytes", diff(active, allocated)),
                ("allocator_rss_ratio", ratio(resident, active)),
                ("allocator_rss_bytes", diff(resident, active)),
                ("rss_overhead_ratio", ratio(rss, resident)),
                ("rss_overhead_bytes", diff(rss, resident)),
            ]);
        }
        fields.extend(vec![
            ("mem_fragmentation_ratio", ratio(rss, used)),
            ("mem_allocator", if cfg!(feature = "jemalloc") { "jemalloc" } else { "libc" }.into()),
            // UNLINK and FLUSHDB/FLUSHALL ASYNC leave nothing pending: a key, of any size,
            // goes with one metadata write, and compaction reclaims its records. Values
            // Redis would have freed in the background are counted as freed lazily.
            ("lazyfree_pending_objects", "0".into()),
            ("lazyfreed_objects", st.lazyfreed_objects.load(Ordering::Relaxed).to_string()),
            // One Lua VM runs functions and EVAL scripts; spare VMs run EVAL scripts on
            // connections' tasks (see `scripting::lease`), counted in the total only.
            ("used_memory_lua", lua.to_string()),
            ("used_memory_vm_eval", lua.to_string()),
            ("used_memory_lua_human", human(lua)),
            ("used_memory_vm_spares", spares.to_string()),
            ("used_memory_vm_total", (lua + spares).to_string()),
            ("used_memory_vm_total_human", human(lua + spares)),
            ("number_of_cached_scripts", scripts.to_string()),
            ("number_of_functions", functions.to_string()),
            ("number_of_libraries", libraries.to_string()),
            ("lsm_memtable_bytes", stats.memtable_bytes.to_string()),
            ("lsm_block_cache_bytes", stats.block_cache_bytes.to_string()),
            ("lsm_row_cache_bytes", stats.row_cache_bytes.to_string()),
            // Open tables' decoded indexes, bloom filters and range tombstones.
            ("lsm_table_readers_bytes", stats.table_readers_bytes.to_string()),
            // Members of collections random picks hit often (SPOP, SRANDMEMBER, …).
            ("pick_cache_bytes", s.state.storage.pick_cache_bytes().to_string()),
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
        ]);
        section("Memory", fields);
    }
    if show("persistence") {
        section(
            "Persistence",
            vec![
                ("loading", "0".into()),
                ("async_loading", "0".into()),
                (
                    "rdb_changes_since_last_save",
                    st.storage.changes().saturating_sub(st.changes_at_save.load(Ordering::Relaxed)).to_string(),
                ),
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
        let tracking = st.storage.tracking.stats();
        section(
            "Stats",
            [
                ("total_connections_received", st.connections_received.load(Ordering::Relaxed).to_string()),
                ("total_commands_processed", st.commands_processed.load(Ordering::Relaxed).to_string()),
                ("instantaneous_ops_per_sec", format!("{:.0}", st.ops_per_sec())),
                ("rejected_connections", st.rejected_connections.load(Ordering::Relaxed).to_string()),
                ("expired_keys", st.expired_keys.load(Ordering::Relaxed).to_string()),
                // MIGRATE opens a connection per call and keeps none.
                ("migrate_cached_sockets", "0".into()),
                ("total_error_replies", st.command_stats.total_errors().to_string()),
                ("evicted_keys", "0".into()),
                ("keyspace_hits", st.keyspace_hits.load(Ordering::Relaxed).to_string()),
                ("keyspace_misses", st.keyspace_misses.load(Ordering::Relaxed).to_string()),
                ("pubsub_channels", st.pubsub.channels(crate::services::pubsub::Kind::Channel, None).len().to_string()),
                ("pubsub_patterns", st.pubsub.pattern_count().to_string()),
                ("tracking_total_keys", tracking.1.to_string()),
                ("tracking_total_items", tracking.2.to_string()),
                ("tracking_total_prefixes", tracking.3.to_string()),
                // Shale's executor threads: how often every one was blocked (helpers started).
                ("executor_threads", st.executor.threads().to_string()),
                ("executor_helpers_active", st.executor.helpers().to_string()),
                ("executor_helpers_started", st.executor.helpers_started().to_string()),
                ("executor_queued_jobs", st.executor.queued().to_string()),
                // Single writes of different clients run as one group (`exec::combine`).
                ("combined_write_groups", st.combiner.groups.load(Ordering::Relaxed).to_string()),
                ("combined_writes", st.combiner.writes.load(Ordering::Relaxed).to_string()),
                // Requests the connections' own tasks ran (memory reads, queued SET batches).
                ("in_memory_reads", st.in_memory.reads.load(Ordering::Relaxed).to_string()),
                ("in_memory_reads_voided", st.in_memory.reads_voided.load(Ordering::Relaxed).to_string()),
                ("in_memory_set_batches", st.in_memory.set_batches.load(Ordering::Relaxed).to_string()),
                (
                    "in_memory_set_batches_handed_off",
                    st.in_memory.set_batches_handed_off.load(Ordering::Relaxed).to_string(),
                ),
                ("in_memory_write_groups", st.in_memory.write_groups.load(Ordering::Relaxed).to_string()),
                ("in_memory_writes_voided", st.in_memory.writes_voided.load(Ordering::Relaxed).to_string()),
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
    if show("modules") {
        section("Modules", Vec::new());
    }
    if show("commandstats") {
        let fields = st.command_stats.commandstats();
        section("Commandstats", fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
    }
    if show("errorstats") {
        let fields = st.command_stats.errorstats();
        section("Errorstats", fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
    }
    if show("latencystats") {
        let fields = st.command_stats.latencystats(&cfg.latency_percentiles);
        section("Latencystats", fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
    }
    if show("cluster") {
        section("Cluster", vec![("cluster_enabled", "0".into())]);
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
        fields.push(("lsm_row_cache_hits".into(), stats.row_cache_hits.to_string()));
        fields.push(("lsm_row_cache_misses".into(), stats.row_cache_misses.to_string()));
        fields.push(("lsm_iter_entries".into(), stats.iter_entries.to_string()));
        fields.push(("lsm_iter_tombstones".into(), stats.iter_tombstones.to_string()));
        fields.push(("lsm_iter_reseeks".into(), stats.iter_reseeks.to_string()));
        fields.push(("lsm_table_tombstones".into(), stats.table_tombstones.to_string()));
        fields.push(("lsm_tables_marked_for_compaction".into(), stats.tables_marked_for_compaction.to_string()));
        section("LSM", fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
    }
    Reply::Verbatim(Bytes::from(out))
}
