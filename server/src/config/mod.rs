//! Server configuration, loaded the way `redis-server` loads it: an optional redis.conf-style
//! file (`directive arg…` per line, `#` comments, quoting as in `redis-cli`), then command-line
//! `--directive value…` pairs appended as if they were more lines. A bad line stops the server
//! with Redis's fatal-error report naming the line.
//!
//! This is the loader and the directives the server core needs first; `CONFIG GET/SET/REWRITE`
//! and the full Redis 7 parameter list build on it.

mod units;

use std::fmt;
use std::path::PathBuf;

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
    /// Engine block cache size.
    pub block_cache_size: u64,
    /// Engine block compression.
    pub compression: lsm::Compression,
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
            write_buffer_size: 64 << 20,
            block_cache_size: 256 << 20,
            compression: if lsm::Compression::Snappy.is_available() {
                lsm::Compression::Snappy
            } else {
                lsm::Compression::None
            },
        }
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
        Ok(Config::from_text(&text)?)
    }

    /// Parses configuration text on top of the defaults.
    pub fn from_text(text: &str) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
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
            cfg.apply(&name.to_ascii_lowercase(), args).map_err(fail)?;
        }
        Ok(cfg)
    }

    /// Sets one directive.
    pub fn apply(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        let one = || match args {
            [v] => Ok(v.as_str()),
            _ => Err("wrong number of arguments".to_string()),
        };
        match name {
            "bind" if !args.is_empty() => self.bind = args.to_vec(),
            "port" => self.port = parse_num(one()?, 0, 65535, "port")? as u16,
            "dir" => self.dir = PathBuf::from(one()?),
            "databases" => self.databases = parse_num(one()?, 1, 65536, "number of databases")? as u32,
            "requirepass" => {
                let v = one()?;
                self.requirepass = (!v.is_empty()).then(|| v.to_string());
            }
            "maxclients" => self.maxclients = parse_num(one()?, 1, u32::MAX as i64, "maxclients")? as u32,
            "timeout" => self.timeout = parse_num(one()?, 0, i64::from(i32::MAX), "timeout")? as u64,
            "loglevel" => {
                self.loglevel = match one()?.to_ascii_lowercase().as_str() {
                    "debug" => LogLevel::Debug,
                    "verbose" => LogLevel::Verbose,
                    "notice" => LogLevel::Notice,
                    "warning" => LogLevel::Warning,
                    "nothing" => LogLevel::Nothing,
                    other => return Err(format!("argument(s) must be one of the following: debug, verbose, notice, warning, nothing (got '{other}')")),
                }
            }
            "logfile" => self.logfile = one()?.to_string(),
            "appendfsync" => {
                self.appendfsync = match one()?.to_ascii_lowercase().as_str() {
                    "always" => AppendFsync::Always,
                    "everysec" => AppendFsync::EverySec,
                    "no" => AppendFsync::No,
                    other => return Err(format!("argument(s) must be one of the following: always, everysec, no (got '{other}')")),
                }
            }
            "proto-max-bulk-len" => self.proto_max_bulk_len = memory(one()?, 1 << 20)?,
            "client-query-buffer-limit" => self.client_query_buffer_limit = memory(one()?, 1 << 20)?,
            "write-buffer-size" => self.write_buffer_size = memory(one()?, 4096)?,
            "block-cache-size" => self.block_cache_size = memory(one()?, 0)?,
            "compression" => self.compression = one()?.parse().map_err(|e: lsm::Error| e.to_string())?,
            _ => return Err("Bad directive or wrong number of arguments".into()),
        }
        Ok(())
    }
}

fn parse_num(v: &str, min: i64, max: i64, what: &str) -> Result<i64, String> {
    match v.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("Invalid {what} (must be between {min} and {max}, got '{v}')")),
    }
}

fn memory(v: &str, min: u64) -> Result<u64, String> {
    match parse_memory(v) {
        Some(n) if n >= min => Ok(n),
        Some(_) => Err(format!("argument must be at least {min} bytes, got '{v}'")),
        None => Err(format!("argument must be a memory value, got '{v}'")),
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
