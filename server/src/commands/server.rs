//! Server commands: AUTH, INFO, TIME, CLIENT ID/SETNAME/GETNAME.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{engine_error, CommandSpec, Session};
use crate::commands::connection::REDIS_COMPAT_VERSION;
use crate::resp::Reply;

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
        name: "client",
        arity: -2,
        flags: &["loading", "stale"],
        first_key: 0,
        last_key: 0,
        step: 0,
        handler: client,
    },
];

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Checks `user`/`pass`: the only user is "default", whose password is `requirepass` (without
/// one, it takes any password, as Redis's `nopass` default user does).
pub(super) fn check_credentials(s: &Session, user: &[u8], pass: &[u8]) -> Result<(), Reply> {
    let ok = user == b"default" && s.state.config.requirepass.as_ref().is_none_or(|p| pass == p.as_bytes());
    if ok {
        Ok(())
    } else {
        Err(Reply::error(WRONGPASS))
    }
}

fn auth(s: &mut Session, args: &[Bytes]) -> Reply {
    let (user, pass): (&[u8], &[u8]) = match args {
        [_, _] if s.state.config.requirepass.is_none() => {
            return Reply::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            )
        }
        [_, pass] => (b"default", pass),
        [_, user, pass] => (user, pass),
        _ => return Reply::error("ERR syntax error"),
    };
    match check_credentials(s, user, pass) {
        Ok(()) => {
            s.authenticated = true;
            Reply::ok()
        }
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

fn client(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("id", 2) => Reply::Integer(s.id as i64),
        ("getname", 2) => s.name.clone().map_or(Reply::Null, Reply::Bulk),
        ("setname", 3) => {
            if args[2].iter().any(|&b| b <= b' ' || b > b'~') {
                return Reply::error("ERR Client names cannot contain spaces, newlines or special characters.");
            }
            s.name = (!args[2].is_empty()).then(|| args[2].clone());
            Reply::ok()
        }
        ("id" | "getname" | "setname", _) => {
            Reply::error(format!("ERR wrong number of arguments for 'client|{sub}' command"))
        }
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try CLIENT HELP.", String::from_utf8_lossy(&args[1]))),
    }
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

fn info(s: &mut Session, args: &[Bytes]) -> Reply {
    let wanted: Vec<String> = args[1..].iter().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()).collect();
    let all = wanted.is_empty() || wanted.iter().any(|w| w == "all" || w == "everything" || w == "default");
    let show = |name: &str| all || wanted.iter().any(|w| w == name);
    let st = &s.state;
    let stats = st.storage.engine().stats();
    let uptime = st.started.elapsed().as_secs();
    let mut out = String::new();
    let mut section = |title: &str, body: String| {
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {title}\r\n{body}");
    };
    if show("server") {
        section(
            "Server",
            format!(
                "redis_version:{REDIS_COMPAT_VERSION}\r\nshale_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::process::id(),
                st.config.port,
                uptime / 86400
            ),
        );
    }
    if show("clients") {
        section(
            "Clients",
            format!(
                "connected_clients:{}\r\nblocked_clients:0\r\nmaxclients:{}\r\n",
                st.clients.load(Ordering::Relaxed),
                st.config.maxclients
            ),
        );
    }
    if show("memory") {
        let used = stats.memtable_bytes + stats.block_cache_bytes;
        section("Memory", format!("used_memory:{used}\r\nused_memory_human:{:.2}M\r\n", used as f64 / 1048576.0));
    }
    if show("persistence") {
        section("Persistence", format!("loading:0\r\naof_enabled:1\r\nlsm_last_sequence:{}\r\n", stats.last_sequence));
    }
    if show("stats") {
        section(
            "Stats",
            format!(
                "total_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{:.0}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\nexpired_keys:0\r\n",
                st.next_client_id.load(Ordering::Relaxed) - 1,
                st.commands_processed.load(Ordering::Relaxed),
                st.ops_per_sec(),
                st.keyspace_hits.load(Ordering::Relaxed),
                st.keyspace_misses.load(Ordering::Relaxed),
            ),
        );
    }
    if show("replication") {
        section(
            "Replication",
            format!("role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:{}\r\n", stats.last_sequence),
        );
    }
    if show("cpu") {
        let (user, sys) = cpu_seconds();
        section("CPU", format!("used_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\n"));
    }
    if show("keyspace") {
        let mut body = String::new();
        let dbs = match st.storage.nonempty_databases() {
            Ok(d) => d,
            Err(e) => return engine_error(e),
        };
        for db in dbs {
            match st.storage.keyspace_counts(db) {
                Ok((0, _)) => {}
                Ok((keys, expires)) => {
                    let _ = write!(body, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
                }
                Err(e) => return engine_error(e),
            }
        }
        section("Keyspace", body);
    }
    if show("lsm") {
        let levels: String = stats
            .levels
            .iter()
            .enumerate()
            .map(|(i, l)| format!("lsm_l{i}_files:{}\r\nlsm_l{i}_bytes:{}\r\n", l.files, l.bytes))
            .collect();
        section(
            "LSM",
            format!(
                "{levels}lsm_write_amplification:{:.2}\r\nlsm_compactions:{}\r\nlsm_stall_micros:{}\r\nlsm_block_cache_hits:{}\r\nlsm_block_cache_misses:{}\r\n",
                stats.write_amplification, stats.compactions, stats.stall_micros, stats.block_cache_hits, stats.block_cache_misses
            ),
        );
    }
    Reply::Verbatim(Bytes::from(out))
}
