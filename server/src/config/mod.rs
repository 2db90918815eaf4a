//! Server configuration, loaded the way `redis-server` loads it: an optional redis.conf-style
//! file (`directive arg…` per line, `#` comments, quoting as in `redis-cli`), then command-line
//! `--directive value…` pairs appended as if they were more lines. A bad line stops the server
//! with Redis's fatal-error report naming the line.
//!
//! Every parameter lives in [`params::PARAMS`] (Redis 7's full list plus Shale's engine knobs);
//! [`Config`] keeps each one's canonical text for `CONFIG GET`/`CONFIG REWRITE`, and typed copies
//! of the ones Shale acts on.

pub mod params;
mod rewrite;
mod units;

use std::fmt;
use std::path::PathBuf;

pub use params::{Kind, Param};
pub use rewrite::rewrite;
pub use units::parse_memory;

use crate::resp::split_args;

/// How often the WAL is fsynced (Redis's `appendfsync`), mapped onto the engine's sync mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFsync {
    /// fsync before acknowledging every write.
    Always,
    /// fsync once a second.
    EverySec,
    /// leave it to the OS.
    No,
}

/// Log verbosity (Redis's `loglevel`); `RUST_LOG` overrides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Very verbose.
    Debug,
    /// Verbose.
    Verbose,
    /// Production default.
    Notice,
    /// Only warnings.
    Warning,
    /// Nothing.
    Nothing,
}

/// The server's settings. Defaults run out of the box: 127.0.0.1:6379, data in `./data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Addresses to listen on.
    pub bind: Vec<String>,
    /// TCP port (0: do not listen on TCP).
    pub port: u16,
    /// Data directory.
    pub dir: PathBuf,
    /// Number of logical databases (1..=65536).
    pub databases: u32,
    /// Password for `AUTH` (none: no authentication).
    pub requirepass: Option<String>,
    /// Most simultaneous clients.
    pub maxclients: u32,
    /// Close idle clients after this many seconds (0: never).
    pub timeout: u64,
    /// Log verbosity.
    pub loglevel: LogLevel,
    /// Log file ("" = stderr).
    pub logfile: String,
    /// WAL sync policy.
    pub appendfsync: AppendFsync,
    /// Largest bulk argument accepted.
    pub proto_max_bulk_len: u64,
    /// Largest unparsed input buffered per client.
    pub client_query_buffer_limit: u64,
    /// Engine memtable size.
    pub write_buffer_size: u64,
    /// `notify-keyspace-events` as flags ([`crate::services::notifications`]).
    pub notify_keyspace_events: u32,
    /// `latency-tracking`: per-command latency histograms (INFO latencystats).
    pub latency_tracking: bool,
    /// `latency-tracking-info-percentiles`.
    pub latency_percentiles: Vec<f64>,
    /// `slowlog-log-slower-than` (µs; negative: off).
    pub slowlog_log_slower_than: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: u64,
    /// `latency-monitor-threshold` (ms; 0: off).
    pub latency_monitor_threshold: u64,
    /// Runtime threads doing network I/O (0: one per core).
    pub worker_threads: usize,
    /// Executor threads running commands (0: one per core).
    pub executor_threads: usize,
    /// Engine: L0 tables at which writes slow down, and at which they stop until compaction
    /// catches up (RocksDB's `level0_slowdown/stop_writes_trigger`).
    pub level0_slowdown_writes_trigger: usize,
    /// See `level0_slowdown_writes_trigger`.
    pub level0_stop_writes_trigger: usize,
    /// Engine: no background compaction (bulk loads).
    pub disable_auto_compactions: bool,
    /// Engine: most bytes per second compactions write (0: unlimited).
    pub compaction_rate_limit: u64,
    /// Engine block cache size.
    pub block_cache_size: u64,
    /// Engine row cache size.
    pub row_cache_size: u64,
    /// Engine block compression.
    pub compression: lsm::Compression,
    /// Engine: tables read with pread into the block cache, or memory-mapped.
    pub table_read_mode: lsm::TableReadMode,
    /// `stream-node-max-entries`, `stream-node-max-bytes` (read by every XADD).
    pub stream_node_max_entries: u64,
    pub stream_node_max_bytes: u64,
    /// `hll-sparse-max-bytes` (read by every PFADD).
    pub hll_sparse_max_bytes: usize,
    /// `busy-reply-threshold` in milliseconds (read by every script).
    pub busy_reply_threshold: u64,
    /// `tracking-table-max-keys` (read after every tracked read).
    pub tracking_table_max_keys: usize,
    /// Every parameter's value as `CONFIG GET` shows it, at its place in [`params::PARAMS`].
    values: Vec<String>,
    /// The configuration file the server was started with (for `CONFIG REWRITE`).
    pub file: Option<PathBuf>,
    /// `user <name> <rule>…` lines, name first (ACL users declared in the configuration).
    pub users: Vec<Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: vec!["127.0.0.1".into()],
            port: 6379,
            dir: PathBuf::from("./data"),
            databases: 16,
            requirepass: None,
            maxclients: 10_000,
            timeout: 0,
            loglevel: LogLevel::Notice,
            logfile: String::new(),
            appendfsync: AppendFsync::EverySec,
            proto_max_bulk_len: 512 << 20,
            client_query_buffer_limit: 1 << 30,
            write_buffer_size: 16 << 20,
            notify_keyspace_events: 0,
            latency_tracking: true,
            latency_percentiles: vec![50.0, 99.0, 99.9],
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            worker_threads: 0,
            executor_threads: 0,
            level0_slowdown_writes_trigger: 20,
            level0_stop_writes_trigger: 36,
            disable_auto_compactions: false,
            compaction_rate_limit: 0,
            block_cache_size: 256 << 20,
            row_cache_size: 16 << 20,
            compression: default_compression(),
            table_read_mode: lsm::TableReadMode::Pread,
            stream_node_max_entries: 100,
            stream_node_max_bytes: 4096,
            hll_sparse_max_bytes: 3000,
            busy_reply_threshold: 5000,
            tracking_table_max_keys: 1_000_000,
            values: params::PARAMS.iter().map(|p| p.default.to_string()).collect(),
            file: None,
            users: Vec::new(),
        }
        .with_value("compression", default_compression().name())
    }
}

fn default_compression() -> lsm::Compression {
    if lsm::Compression::Snappy.is_available() {
        lsm::Compression::Snappy
    } else {
        lsm::Compression::None
    }
}

/// A configuration line the server cannot accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line number in the combined text (file, then command-line options).
    pub line: usize,
    /// The line as written.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n*** FATAL CONFIG FILE ERROR (shale {}) ***\nReading the configuration file, at line {}\n>>> '{}'\n{}",
            env!("CARGO_PKG_VERSION"),
            self.line,
            self.text,
            self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// `maxmemory` in bytes (0: no limit).
    pub fn maxmemory(&self) -> u64 {
        self.get("maxmemory").and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// The engine's block cache size: `block-cache-size`, made smaller where `maxmemory` needs
    /// it to fit beside two full memtables (the active one and one being flushed; a memtable's
    /// bloom filter and point index count against its `write-buffer-size`) and the row cache.
    pub fn effective_block_cache_size(&self) -> u64 {
        match self.cache_budget() {
            None => self.block_cache_size,
            Some(budget) => self.block_cache_size.min(budget - self.effective_row_cache_size()),
        }
    }

    /// The engine's row cache size: `row-cache-size`, but at most a quarter of what
    /// `maxmemory` leaves the caches.
    pub fn effective_row_cache_size(&self) -> u64 {
        match self.cache_budget() {
            None => self.row_cache_size,
            Some(budget) => self.row_cache_size.min(budget / 4),
        }
    }

    /// What `maxmemory` leaves the block and row caches beside two full memtables (`None`
    /// without a `maxmemory`).
    fn cache_budget(&self) -> Option<u64> {
        match self.maxmemory() {
            0 => None,
            max => Some(max.saturating_sub(2 * self.write_buffer_size)),
        }
    }

    /// Loads from the process arguments (without the program name): an optional config file
    /// path first, then `--directive value…` options. `--help`-style flags are the caller's.
    pub fn from_args(args: &[String]) -> Result<Config, Box<dyn std::error::Error>> {
        let (file, rest) = match args.first() {
            Some(first) if !first.starts_with("--") => (Some(first.as_str()), &args[1..]),
            _ => (None, args),
        };
        let mut text = match file {
            Some("-") => std::io::read_to_string(std::io::stdin())?,
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("Fatal error, can't open config file '{path}': {e}"))?,
            None => String::new(),
        };
        text.push('\n');
        text.push_str(&options_to_lines(rest)?);
        let mut config = Config::from_text(&text)?;
        config.file = file.filter(|f| *f != "-").map(|f| std::path::absolute(f).unwrap_or_else(|_| f.into()));
        Ok(config)
    }

    /// Parses configuration text on top of the defaults.
    pub fn from_text(text: &str) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        let mut saw_save = false;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fail = |reason: String| ConfigError { line: i + 1, text: line.to_string(), reason };
            let argv =
                split_args(line.as_bytes()).ok_or_else(|| fail("Unbalanced quotes in configuration line".into()))?;
            let argv: Vec<String> = argv.into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect();
            let Some((name, args)) = argv.split_first() else { continue };
            let name = name.to_ascii_lowercase();
            if name == "user" {
                if args.is_empty() {
                    return Err(fail("wrong number of arguments".into()));
                }
                cfg.users.push(args.to_vec());
                continue;
            }
            // Several `save` lines add up, as in redis.conf; `save ""` clears.
            if name == "save" && saw_save && !args.iter().all(|a| a.is_empty()) {
                let joined = format!("{} {}", cfg.get("save").unwrap_or_default(), args.join(" "));
                cfg.apply("save", &[joined.trim().to_string()]).map_err(fail)?;
                continue;
            }
            saw_save |= name == "save";
            cfg.apply(&name, args).map_err(fail)?;
        }
        Ok(cfg)
    }

    /// The value of parameter `name` (canonical or alias) as `CONFIG GET` shows it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(params::position(name)?).map(String::as_str)
    }

    /// Every parameter whose value differs from its default, in name order.
    pub fn changed(&self) -> impl Iterator<Item = (&'static str, &str)> {
        params::PARAMS.iter().zip(&self.values).filter(|(p, v)| *v != p.default).map(|(p, v)| (p.name, v.as_str()))
    }

    fn with_value(mut self, name: &'static str, value: &str) -> Self {
        if let Some(i) = params::position(name) {
            self.values[i] = value.to_string();
        }
        self
    }

    /// Sets one directive (a configuration line, or one `CONFIG SET` pair with `args` = [value]).
    /// The error is the reason Redis would give.
    pub fn apply(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        let at = params::position(name).ok_or("Bad directive or wrong number of arguments")?;
        let param = &params::PARAMS[at];
        let value = match (param.kind, args) {
            (Kind::Str, []) => return Err("wrong number of arguments".into()),
            (Kind::Str, _) => args.join(" "),
            (_, [v]) => v.clone(),
            _ => return Err("wrong number of arguments".into()),
        };
        let canonical = match param.kind {
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                v @ ("yes" | "no") => v.to_string(),
                _ => return Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Int => {
                value.parse::<i64>().map_err(|_| "argument couldn't be parsed into an integer".to_string())?.to_string()
            }
            // A share of `maxmemory` (Redis's percent configs), kept as given.
            Kind::Memory if param.name == "maxmemory-clients" && value.ends_with('%') => {
                let pct: u64 =
                    value[..value.len() - 1].parse().map_err(|_| "argument must be a memory or percent value")?;
                if pct > 100 {
                    return Err("percentage argument must be less or equal to 100".into());
                }
                format!("{pct}%")
            }
            Kind::Memory => parse_memory(&value).ok_or("argument must be a memory value")?.to_string(),
            Kind::Enum(words) => {
                let lower = value.to_ascii_lowercase();
                if !words.contains(&lower.as_str()) {
                    return Err(format!("argument(s) must be one of the following: {}", words.join(", ")));
                }
                lower
            }
            Kind::Str if param.name == "notify-keyspace-events" => {
                // Kept as given (with `n` under `A`), shown as Redis shows it (without).
                let flags = crate::services::notifications::parse(&value)
                    .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?;
                self.notify_keyspace_events = flags;
                crate::services::notifications::format(flags)
            }
            Kind::Str if param.name == "latency-tracking-info-percentiles" => {
                let percentiles = crate::services::command_stats::parse_percentiles(&value)?;
                let shown: Vec<String> =
                    percentiles.iter().map(|&p| crate::services::command_stats::trim_float(p)).collect();
                self.latency_percentiles = percentiles;
                shown.join(" ")
            }
            Kind::Str => value,
        };
        self.set_typed(param.name, &canonical)?;
        self.values[at] = canonical;
        Ok(())
    }

    /// Updates the typed copy of a parameter Shale acts on from its (already validated) text.
    fn set_typed(&mut self, name: &str, v: &str) -> Result<(), String> {
        let int = |min: i64, max: i64| -> Result<i64, String> {
            let n: i64 = v.parse().map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
            if (min..=max).contains(&n) {
                Ok(n)
            } else {
                Err(format!("argument must be between {min} and {max} inclusive"))
            }
        };
        let bytes = || v.parse::<u64>().map_err(|_| "argument must be a memory value".to_string());
        match name {
            "bind" => {
                let addrs: Vec<String> = v.split_whitespace().map(str::to_string).collect();
                if addrs.is_empty() {
                    return Err("wrong number of arguments".into());
                }
                self.bind = addrs;
            }
            "port" => self.port = int(0, 65535).map_err(|e| format!("Invalid port: {e}"))? as u16,
            "tls-port" => {
                int(0, 65535).map_err(|e| format!("Invalid tls-port: {e}"))?;
            }
            "dir" => self.dir = PathBuf::from(v),
            "databases" => {
                self.databases = int(1, 65536).map_err(|e| format!("Invalid number of databases: {e}"))? as u32
            }
            "requirepass" => self.requirepass = (!v.is_empty()).then(|| v.to_string()),
            "maxclients" => self.maxclients = int(1, i64::from(u32::MAX))? as u32,
            "timeout" => self.timeout = int(0, i64::from(i32::MAX))? as u64,
            "loglevel" => {
                self.loglevel = match v {
                    "debug" => LogLevel::Debug,
                    "verbose" => LogLevel::Verbose,
                    "notice" => LogLevel::Notice,
                    "warning" => LogLevel::Warning,
                    _ => LogLevel::Nothing,
                }
            }
            "logfile" => self.logfile = v.to_string(),
            "save" => {
                let words: Vec<&str> = v.split_whitespace().collect();
                if !words.len().is_multiple_of(2) || words.iter().any(|w| w.parse::<u64>().is_err()) {
                    return Err("Invalid save parameters".into());
                }
            }
            "appendfsync" => {
                self.appendfsync = match v {
                    "always" => AppendFsync::Always,
                    "everysec" => AppendFsync::EverySec,
                    _ => AppendFsync::No,
                }
            }
            "proto-max-bulk-len" => self.proto_max_bulk_len = at_least(bytes()?, 1 << 20)?,
            "client-query-buffer-limit" => self.client_query_buffer_limit = at_least(bytes()?, 1 << 20)?,
            "write-buffer-size" => self.write_buffer_size = at_least(bytes()?, 4096)?,
            "worker-threads" => self.worker_threads = int(0, 1024)? as usize,
            "executor-threads" => self.executor_threads = int(0, 1024)? as usize,
            "level0-slowdown-writes-trigger" => self.level0_slowdown_writes_trigger = int(1, 1 << 20)? as usize,
            "level0-stop-writes-trigger" => self.level0_stop_writes_trigger = int(1, 1 << 20)? as usize,
            "disable-auto-compactions" => self.disable_auto_compactions = v.eq_ignore_ascii_case("yes"),
            "latency-tracking" => self.latency_tracking = v == "yes",
            "slowlog-log-slower-than" => self.slowlog_log_slower_than = int(-1, i64::MAX)?,
            "slowlog-max-len" => self.slowlog_max_len = int(0, i64::from(u32::MAX))? as u64,
            "latency-monitor-threshold" => self.latency_monitor_threshold = int(0, i64::MAX)? as u64,
            "compaction-rate-limit" => self.compaction_rate_limit = bytes()?,
            "block-cache-size" => self.block_cache_size = bytes()?,
            "row-cache-size" => self.row_cache_size = bytes()?,
            // Parsed here once rather than by every command that reads them (validated above as
            // integers and memory sizes; Redis takes any value in range).
            "stream-node-max-entries" => self.stream_node_max_entries = int(0, i64::MAX)? as u64,
            "stream-node-max-bytes" => self.stream_node_max_bytes = bytes()?,
            "hll-sparse-max-bytes" => self.hll_sparse_max_bytes = bytes()? as usize,
            "busy-reply-threshold" => self.busy_reply_threshold = int(0, i64::MAX)? as u64,
            "tracking-table-max-keys" => self.tracking_table_max_keys = int(0, i64::MAX)? as usize,
            // Settings whose other values Shale cannot honour: refused, never stored and ignored.
            "daemonize" | "cluster-enabled" | "tls-cluster" | "syslog-enabled" if v == "yes" => {
                return Err(match name {
                    "daemonize" => "daemonize is not supported: run shale-server under a supervisor (systemd, a container)",
                    "syslog-enabled" => "syslog is not supported: log to stderr or set logfile",
                    _ => "cluster mode is not supported",
                }
                .into())
            }
            "unixsocket" if !v.is_empty() => {
                return Err("unix sockets are not supported: listen on TCP (bind, port) or TLS (tls-port)".into())
            }
            "replicaof" if !v.is_empty() => {
                crate::replication::Upstream::parse(v)?;
            }
            "replica-read-only" if v == "no" => {
                return Err("replica-read-only no is not supported: a replica applies its primary's WAL with the primary's sequence numbers, so it takes no writes of its own".into())
            }
            "supervised" if v == "upstart" => return Err("supervised upstart is not supported (systemd is)".into()),
            "table-read-mode" => self.table_read_mode = v.parse().map_err(|e: lsm::Error| e.to_string())?,
            "compression" => {
                let c: lsm::Compression = v.parse().map_err(|e: lsm::Error| e.to_string())?;
                if !c.is_available() {
                    return Err(format!("compression '{v}' is not compiled into this build"));
                }
                self.compression = c;
            }
            _ => {}
        }
        Ok(())
    }
}

fn at_least(n: u64, min: u64) -> Result<u64, String> {
    if n >= min {
        Ok(n)
    } else {
        Err(format!("argument must be at least {min} bytes"))
    }
}

/// `--port 7000 --bind a b` → "port 7000\nbind a b", as redis-server turns its options into
/// configuration lines. Arguments are quoted so spaces survive.
fn options_to_lines(args: &[String]) -> Result<String, String> {
    let mut out = String::new();
    for a in args {
        if let Some(name) = a.strip_prefix("--") {
            if name.is_empty() {
                return Err("Invalid option '--'".into());
            }
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(name);
        } else {
            if out.is_empty() {
                return Err(format!("Invalid argument '{a}': options start with --"));
            }
            out.push_str(" \"");
            for ch in a.chars() {
                match ch {
                    '"' | '\\' => {
                        out.push('\\');
                        out.push(ch);
                    }
                    '\n' => out.push_str("\\n"),
                    other => out.push(other),
                }
            }
            out.push('"');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
