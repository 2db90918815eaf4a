//! Every configuration parameter: Redis 7's full list (so clients, tools and test harnesses
//! written for Redis can `CONFIG GET`/`CONFIG SET` their tunables) plus Shale's engine knobs.
//!
//! Most Redis tunables describe Redis's in-memory encodings, RDB/AOF persistence, clustering or
//! eviction, which Shale does not have; they are validated and stored exactly like Redis
//! (`CONFIG GET` returns what was set) and have no effect. [`Param::effective`] says which ones do;
//! the README lists the rest.

/// How a value is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `yes` / `no`.
    Bool,
    /// A signed integer.
    Int,
    /// A size with an optional unit (`64mb`, `1gb`, `100k`).
    Memory,
    /// One of a fixed set of words.
    Enum(&'static [&'static str]),
    /// Free text (may hold several words, like `save` or `bind`).
    Str,
}

/// One configuration parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Canonical name.
    pub name: &'static str,
    /// Value when nothing sets it.
    pub default: &'static str,
    /// Validation.
    pub kind: Kind,
    /// `CONFIG SET` may change it while the server runs.
    pub mutable: bool,
}

impl Param {
    /// True if Shale acts on the parameter (the others are stored for compatibility only).
    pub fn effective(&self) -> bool {
        EFFECTIVE.contains(&self.name) || crate::net::tls::DIRECTIVES.contains(&self.name)
    }
}

/// Parameters only their default value is accepted for: Shale cannot honour another, so
/// setting one stops the server at startup (or fails `CONFIG SET`) with the reason.
pub const DEFAULT_ONLY: &[&str] =
    &["cluster-enabled", "daemonize", "replica-read-only", "syslog-enabled", "tls-cluster", "unixsocket"];

/// Shale's own parameters that only take effect at startup. `CONFIG SET` of one to the value
/// it has succeeds and changes nothing (so a client can set back everything `CONFIG GET *`
/// returned); any other value fails as immutable.
pub const RESTART_ONLY: &[&str] = &["executor-threads", "table-read-mode", "worker-threads"];

/// Parameters Shale acts on (besides the TLS ones, [`crate::net::tls::DIRECTIVES`]).
pub const EFFECTIVE: &[&str] = &[
    "acl-pubsub-default",
    "aclfile",
    "acllog-max-len",
    "appendfsync",
    "bind",
    "block-cache-size",
    "busy-reply-threshold",
    "client-query-buffer-limit",
    "compaction-rate-limit",
    "compression",
    "databases",
    "dir",
    "disable-auto-compactions",
    "enable-debug-command",
    "enable-protected-configs",
    "executor-threads",
    "full-sync-rate-limit",
    "hash-max-listpack-entries",
    "hash-max-listpack-value",
    "jemalloc-bg-thread",
    "latency-monitor-threshold",
    "latency-tracking",
    "latency-tracking-info-percentiles",
    "lazyfree-lazy-user-del",
    "lazyfree-lazy-user-flush",
    "level0-slowdown-writes-trigger",
    "level0-stop-writes-trigger",
    "lfu-decay-time",
    "lfu-log-factor",
    "logfile",
    "loglevel",
    "masterauth",
    "masteruser",
    "maxclients",
    "maxmemory",
    "maxmemory-policy",
    "min-replicas-max-lag",
    "min-replicas-to-write",
    "notify-keyspace-events",
    "pidfile",
    "port",
    "protected-mode",
    "proto-max-bulk-len",
    "repl-backlog-size",
    "repl-timeout",
    "replica-announce-ip",
    "replica-announce-port",
    "replica-announced",
    "replica-priority",
    "replica-read-only",
    "replica-serve-stale-data",
    "replicaof",
    "requirepass",
    "row-cache-size",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "stream-node-max-bytes",
    "stream-node-max-entries",
    "supervised",
    "table-read-mode",
    "timeout",
    "tls-port",
    "tracking-table-max-keys",
    "worker-threads",
    "write-buffer-size",
];

const fn p(name: &'static str, default: &'static str, kind: Kind, mutable: bool) -> Param {
    Param { name, default, kind, mutable }
}

/// Every parameter, sorted by name.
pub static PARAMS: &[Param] = &[
    p("acl-pubsub-default", "resetchannels", Kind::Enum(&["allchannels", "resetchannels"]), true),
    p("aclfile", "", Kind::Str, false),
    p("acllog-max-len", "128", Kind::Int, true),
    p("active-defrag-cycle-max", "25", Kind::Int, true),
    p("active-defrag-cycle-min", "1", Kind::Int, true),
    p("active-defrag-ignore-bytes", "104857600", Kind::Memory, true),
    p("active-defrag-max-scan-fields", "1000", Kind::Int, true),
    p("active-defrag-threshold-lower", "10", Kind::Int, true),
    p("active-defrag-threshold-upper", "100", Kind::Int, true),
    p("active-expire-effort", "1", Kind::Int, true),
    p("activedefrag", "no", Kind::Bool, true),
    p("activerehashing", "yes", Kind::Bool, true),
    p("always-show-logo", "no", Kind::Bool, false),
    p("aof-disable-auto-gc", "no", Kind::Bool, true),
    p("aof-load-truncated", "yes", Kind::Bool, true),
    p("aof-rewrite-incremental-fsync", "yes", Kind::Bool, true),
    p("aof-timestamp-enabled", "no", Kind::Bool, true),
    p("aof-use-rdb-preamble", "yes", Kind::Bool, true),
    p("aof_rewrite_cpulist", "", Kind::Str, false),
    p("appenddirname", "appendonlydir", Kind::Str, false),
    p("appendfilename", "appendonly.aof", Kind::Str, false),
    p("appendfsync", "everysec", Kind::Enum(&["always", "everysec", "no"]), true),
    p("appendonly", "no", Kind::Bool, true),
    p("auto-aof-rewrite-min-size", "67108864", Kind::Memory, true),
    p("auto-aof-rewrite-percentage", "100", Kind::Int, true),
    p("bgsave_cpulist", "", Kind::Str, false),
    p("bind", "127.0.0.1", Kind::Str, true),
    p("bind-source-addr", "", Kind::Str, true),
    p("bio_cpulist", "", Kind::Str, false),
    p("block-cache-size", "268435456", Kind::Memory, true),
    p("busy-reply-threshold", "5000", Kind::Int, true),
    p(
        "client-output-buffer-limit",
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        Kind::Str,
        true,
    ),
    p("client-query-buffer-limit", "1073741824", Kind::Memory, true),
    p("cluster-allow-pubsubshard-when-down", "yes", Kind::Bool, true),
    p("cluster-allow-reads-when-down", "no", Kind::Bool, true),
    p("cluster-allow-replica-migration", "yes", Kind::Bool, true),
    p("cluster-announce-bus-port", "0", Kind::Int, true),
    p("cluster-announce-hostname", "", Kind::Str, true),
    p("cluster-announce-human-nodename", "", Kind::Str, true),
    p("cluster-announce-ip", "", Kind::Str, true),
    p("cluster-announce-port", "0", Kind::Int, true),
    p("cluster-announce-tls-port", "0", Kind::Int, true),
    p("cluster-config-file", "nodes.conf", Kind::Str, false),
    p("cluster-enabled", "no", Kind::Bool, false),
    p("cluster-link-sendbuf-limit", "0", Kind::Memory, true),
    p("cluster-migration-barrier", "1", Kind::Int, true),
    p("cluster-node-timeout", "15000", Kind::Int, true),
    p("cluster-port", "0", Kind::Int, false),
    p("cluster-preferred-endpoint-type", "ip", Kind::Enum(&["ip", "hostname", "unknown-endpoint"]), true),
    p("cluster-replica-no-failover", "no", Kind::Bool, true),
    p("cluster-replica-validity-factor", "10", Kind::Int, true),
    p("cluster-require-full-coverage", "yes", Kind::Bool, true),
    p("compaction-rate-limit", "0", Kind::Memory, true),
    p("compression", "snappy", Kind::Enum(&["none", "snappy", "zstd"]), true),
    p("crash-log-enabled", "yes", Kind::Bool, true),
    p("crash-memcheck-enabled", "yes", Kind::Bool, true),
    p("daemonize", "no", Kind::Bool, false),
    p("databases", "16", Kind::Int, false),
    p("dbfilename", "dump.rdb", Kind::Str, false),
    p("dir", "./data", Kind::Str, false),
    p("disable-auto-compactions", "no", Kind::Bool, true),
    p("disable-thp", "yes", Kind::Bool, false),
    p("dynamic-hz", "yes", Kind::Bool, true),
    p("enable-debug-command", "no", Kind::Enum(&["no", "yes", "local"]), false),
    p("enable-module-command", "no", Kind::Enum(&["no", "yes", "local"]), false),
    p("enable-protected-configs", "no", Kind::Enum(&["no", "yes", "local"]), false),
    p("executor-threads", "0", Kind::Int, false),
    p("full-sync-rate-limit", "0", Kind::Memory, true),
    p("hash-max-listpack-entries", "512", Kind::Int, true),
    p("hash-max-listpack-value", "64", Kind::Memory, true),
    p("hll-sparse-max-bytes", "3000", Kind::Memory, true),
    p("hz", "10", Kind::Int, true),
    p("ignore-warnings", "", Kind::Str, true),
    p("io-threads", "1", Kind::Int, false),
    p("io-threads-do-reads", "no", Kind::Bool, false),
    p("jemalloc-bg-thread", "yes", Kind::Bool, true),
    p("key-load-delay", "0", Kind::Int, true),
    p("latency-monitor-threshold", "0", Kind::Int, true),
    p("latency-tracking", "yes", Kind::Bool, true),
    p("latency-tracking-info-percentiles", "50 99 99.9", Kind::Str, true),
    p("lazyfree-lazy-eviction", "no", Kind::Bool, true),
    p("lazyfree-lazy-expire", "no", Kind::Bool, true),
    p("lazyfree-lazy-server-del", "no", Kind::Bool, true),
    p("lazyfree-lazy-user-del", "no", Kind::Bool, true),
    p("lazyfree-lazy-user-flush", "no", Kind::Bool, true),
    p("level0-slowdown-writes-trigger", "20", Kind::Int, true),
    p("level0-stop-writes-trigger", "36", Kind::Int, true),
    p("lfu-decay-time", "1", Kind::Int, true),
    p("lfu-log-factor", "10", Kind::Int, true),
    p("list-compress-depth", "0", Kind::Int, true),
    p("list-max-listpack-size", "-2", Kind::Int, true),
    p("loading-process-events-interval-bytes", "2097152", Kind::Int, true),
    p("locale-collate", "", Kind::Str, true),
    p("logfile", "", Kind::Str, false),
    p("loglevel", "notice", Kind::Enum(&["debug", "verbose", "notice", "warning", "nothing"]), true),
    p("masterauth", "", Kind::Str, true),
    p("masteruser", "", Kind::Str, true),
    p("maxclients", "10000", Kind::Int, true),
    p("maxmemory", "0", Kind::Memory, true),
    p("maxmemory-clients", "0", Kind::Memory, true),
    p("maxmemory-eviction-tenacity", "10", Kind::Int, true),
    p(
        "maxmemory-policy",
        "noeviction",
        Kind::Enum(&[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ]),
        true,
    ),
    p("maxmemory-samples", "5", Kind::Int, true),
    p("min-replicas-max-lag", "10", Kind::Int, true),
    p("min-replicas-to-write", "0", Kind::Int, true),
    p("no-appendfsync-on-rewrite", "no", Kind::Bool, true),
    p("notify-keyspace-events", "", Kind::Str, true),
    p("oom-score-adj", "no", Kind::Enum(&["no", "yes", "relative", "absolute"]), true),
    p("oom-score-adj-values", "0 200 800", Kind::Str, true),
    p("pidfile", "", Kind::Str, false),
    p("port", "6379", Kind::Int, true),
    p("proc-title-template", "{title} {listen-addr} {server-mode}", Kind::Str, true),
    p("propagation-error-behavior", "ignore", Kind::Enum(&["ignore", "panic", "panic-on-replicas"]), true),
    p("protected-mode", "yes", Kind::Bool, true),
    p("proto-max-bulk-len", "536870912", Kind::Memory, true),
    p("rdb-del-sync-files", "no", Kind::Bool, true),
    p("rdb-key-save-delay", "0", Kind::Int, true),
    p("rdb-save-incremental-fsync", "yes", Kind::Bool, true),
    p("rdbchecksum", "yes", Kind::Bool, false),
    p("rdbcompression", "yes", Kind::Bool, true),
    // Shale's backlog is the WAL kept on disk after flushes, so a larger default is cheap.
    p("repl-backlog-size", "268435456", Kind::Memory, true),
    p("repl-backlog-ttl", "3600", Kind::Int, true),
    p("repl-disable-tcp-nodelay", "no", Kind::Bool, true),
    p("repl-diskless-load", "disabled", Kind::Enum(&["disabled", "on-empty-db", "swapdb"]), true),
    p("repl-diskless-sync", "yes", Kind::Bool, true),
    p("repl-diskless-sync-delay", "5", Kind::Int, true),
    p("repl-diskless-sync-max-replicas", "0", Kind::Int, true),
    p("repl-ping-replica-period", "10", Kind::Int, true),
    p("repl-timeout", "60", Kind::Int, true),
    p("replica-announce-hostname", "", Kind::Str, true),
    p("replica-announce-ip", "", Kind::Str, true),
    p("replica-announce-port", "0", Kind::Int, true),
    p("replica-announced", "yes", Kind::Bool, true),
    p("replica-ignore-disk-write-errors", "no", Kind::Bool, true),
    p("replica-ignore-maxmemory", "yes", Kind::Bool, true),
    p("replica-lazy-flush", "no", Kind::Bool, true),
    p("replica-priority", "100", Kind::Int, true),
    p("replica-read-only", "yes", Kind::Bool, true),
    p("replica-serve-stale-data", "yes", Kind::Bool, true),
    p("replicaof", "", Kind::Str, false),
    p("requirepass", "", Kind::Str, true),
    p("row-cache-size", "16777216", Kind::Memory, true),
    p("sanitize-dump-payload", "no", Kind::Enum(&["no", "yes", "clients"]), true),
    p("save", "", Kind::Str, true),
    p("server_cpulist", "", Kind::Str, false),
    p("set-max-intset-entries", "512", Kind::Int, true),
    p("set-proc-title", "yes", Kind::Bool, false),
    p("shutdown-on-sigint", "default", Kind::Enum(&["default", "save", "nosave", "now", "force"]), true),
    p("shutdown-on-sigterm", "default", Kind::Enum(&["default", "save", "nosave", "now", "force"]), true),
    p("shutdown-timeout", "10", Kind::Int, true),
    p("slowlog-log-slower-than", "10000", Kind::Int, true),
    p("slowlog-max-len", "128", Kind::Int, true),
    p("socket-mark-id", "0", Kind::Int, false),
    p("stop-writes-on-bgsave-error", "yes", Kind::Bool, true),
    p("stream-node-max-bytes", "4096", Kind::Memory, true),
    p("stream-node-max-entries", "100", Kind::Int, true),
    p("supervised", "no", Kind::Enum(&["upstart", "systemd", "auto", "no"]), false),
    p("syslog-enabled", "no", Kind::Bool, false),
    p(
        "syslog-facility",
        "local0",
        Kind::Enum(&["user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"]),
        false,
    ),
    p("syslog-ident", "redis", Kind::Str, false),
    p("table-read-mode", "pread", Kind::Enum(&["pread", "mmap"]), false),
    p("tcp-backlog", "511", Kind::Int, false),
    p("tcp-keepalive", "300", Kind::Int, true),
    p("timeout", "0", Kind::Int, true),
    p("tls-auth-clients", "yes", Kind::Enum(&["yes", "no", "optional"]), true),
    p("tls-ca-cert-dir", "", Kind::Str, true),
    p("tls-ca-cert-file", "", Kind::Str, true),
    p("tls-cert-file", "", Kind::Str, true),
    p("tls-ciphers", "", Kind::Str, true),
    p("tls-ciphersuites", "", Kind::Str, true),
    p("tls-client-cert-file", "", Kind::Str, true),
    p("tls-client-key-file", "", Kind::Str, true),
    p("tls-client-key-file-pass", "", Kind::Str, true),
    p("tls-cluster", "no", Kind::Bool, true),
    p("tls-dh-params-file", "", Kind::Str, true),
    p("tls-key-file", "", Kind::Str, true),
    p("tls-key-file-pass", "", Kind::Str, true),
    p("tls-port", "0", Kind::Int, true),
    p("tls-prefer-server-ciphers", "no", Kind::Bool, true),
    p("tls-protocols", "", Kind::Str, true),
    p("tls-replication", "no", Kind::Bool, true),
    p("tls-session-cache-size", "20480", Kind::Int, true),
    p("tls-session-cache-timeout", "300", Kind::Int, true),
    p("tls-session-caching", "yes", Kind::Bool, true),
    p("tracking-table-max-keys", "1000000", Kind::Int, true),
    p("unixsocket", "", Kind::Str, false),
    p("unixsocketperm", "0", Kind::Int, false),
    p("worker-threads", "0", Kind::Int, false),
    p("write-buffer-size", "16777216", Kind::Memory, true),
    p("zset-max-listpack-entries", "128", Kind::Int, true),
    p("zset-max-listpack-value", "64", Kind::Memory, true),
];

/// Old names Redis still accepts, and the parameter each stands for.
pub static ALIASES: &[(&str, &str)] = &[
    ("cluster-slave-no-failover", "cluster-replica-no-failover"),
    ("cluster-slave-validity-factor", "cluster-replica-validity-factor"),
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("lua-time-limit", "busy-reply-threshold"),
    ("min-slaves-max-lag", "min-replicas-max-lag"),
    ("min-slaves-to-write", "min-replicas-to-write"),
    ("repl-ping-slave-period", "repl-ping-replica-period"),
    ("slave-announce-ip", "replica-announce-ip"),
    ("slave-announce-port", "replica-announce-port"),
    ("slave-ignore-maxmemory", "replica-ignore-maxmemory"),
    ("slave-lazy-flush", "replica-lazy-flush"),
    ("slave-priority", "replica-priority"),
    ("slave-read-only", "replica-read-only"),
    ("slave-serve-stale-data", "replica-serve-stale-data"),
    ("slaveof", "replicaof"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
];

/// The parameter `name` (canonical or alias, any case) stands for.
pub fn find(name: &str) -> Option<&'static Param> {
    position(name).map(|i| &PARAMS[i])
}

/// Where the parameter `name` (canonical or alias, any case) stands in [`PARAMS`].
pub fn position(name: &str) -> Option<usize> {
    // The server's own lookups use canonical names: found without allocating.
    if let Ok(i) = PARAMS.binary_search_by(|p| p.name.cmp(name)) {
        return Some(i);
    }
    let lower = name.to_ascii_lowercase();
    let canonical = ALIASES.iter().find(|(a, _)| *a == lower).map_or(lower.as_str(), |(_, c)| c);
    PARAMS.binary_search_by(|p| p.name.cmp(canonical)).ok()
}

/// Redis's hidden parameters: hooks for Redis's own tests (slowing key loading and saving),
/// answered by `CONFIG GET` only when named, as Redis does, and without effect in Shale.
pub const HIDDEN: &[&str] = &["key-load-delay", "loading-process-events-interval-bytes", "rdb-key-save-delay"];

/// Every name a `CONFIG GET` pattern matches (canonical names and aliases, hidden parameters
/// left out) with its parameter.
pub fn all_names() -> impl Iterator<Item = (&'static str, &'static Param)> {
    PARAMS
        .iter()
        .filter(|p| !HIDDEN.contains(&p.name))
        .map(|p| (p.name, p))
        .chain(ALIASES.iter().filter_map(|(a, _)| Some((*a, find(a)?))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_aliases_resolve() {
        assert!(PARAMS.windows(2).all(|w| w[0].name < w[1].name), "binary search needs sorted names");
        assert!(ALIASES.iter().all(|(a, _)| find(a).is_some()));
        assert!(EFFECTIVE.iter().all(|n| find(n).is_some()));
        assert_eq!(find("HASH-MAX-ZIPLIST-ENTRIES").unwrap().name, "hash-max-listpack-entries");
        assert_eq!(find("slaveof").unwrap().name, "replicaof");
        assert!(find("no-such-thing").is_none());
        assert!(PARAMS.len() > 170, "the full Redis 7 list");
    }
}
