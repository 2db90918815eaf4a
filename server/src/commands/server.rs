//! Server commands: AUTH, TIME, SHUTDOWN, SAVE, BGSAVE, LASTSAVE, MEMORY, FUNCTION, DEBUG.
//!
//! Persistence maps onto the engine: every write is in the WAL (`aof_enabled:1`), so `SAVE` and
//! `BGSAVE` flush the memtables into tables (making restart replay short) and record the time
//! `LASTSAVE` reports.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{engine_error, spec, CommandSpec, Session};
use crate::resp::Reply;
use crate::storage::now_ms;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("auth", -2, &["noscript", "loading", "stale", "fast", "no_auth"], (0, 0, 0), auth),
    spec("time", 1, &["loading", "stale", "fast"], (0, 0, 0), time),
    spec("shutdown", -1, &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"], (0, 0, 0), shutdown),
    spec("save", 1, &["admin", "noscript", "no_async_loading", "no_multi"], (0, 0, 0), save),
    spec("bgsave", -1, &["admin", "noscript", "no_async_loading"], (0, 0, 0), bgsave),
    spec("lastsave", 1, &["loading", "stale", "fast"], (0, 0, 0), lastsave),
    spec("memory", -2, &["readonly"], (0, 0, 0), memory),
    spec("debug", -2, &["admin", "noscript", "loading", "stale"], (0, 0, 0), debug),
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
    let changes = s.state.storage.changes();
    s.state.storage.engine().flush().map_err(engine_error)?;
    s.state.changes_at_save.store(changes, Ordering::Relaxed);
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
    let changes = state.storage.changes();
    std::thread::spawn(move || match state.storage.engine().flush() {
        Ok(()) => {
            state.changes_at_save.store(changes, Ordering::Relaxed);
            state.lastsave.store(now_ms() / 1000, Ordering::Relaxed);
        }
        Err(e) => tracing::error!(target: "shale::storage", error = %e, "BGSAVE (engine flush) failed"),
    });
    Reply::Simple("Background saving started".into())
}

fn lastsave(s: &mut Session, _: &[Bytes]) -> Reply {
    Reply::Integer(s.state.lastsave.load(Ordering::Relaxed) as i64)
}

/// `MEMORY USAGE key [SAMPLES n]`, `MEMORY STATS`, `MEMORY DOCTOR`, `MEMORY MALLOC-STATS`,
/// `MEMORY PURGE`, `MEMORY HELP`.
fn memory(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("usage", 3) | ("usage", 5) => {
            if args.len() == 5 && !args[3].eq_ignore_ascii_case(b"samples") {
                return Reply::error("ERR syntax error");
            }
            match s.state.storage.get(&s.exec, s.db, &args[2]) {
                // What the key costs on disk before compression: its record key and value.
                Ok(Some(m)) => {
                    let value =
                        if m.kind == crate::storage::KeyType::String { m.string_len() } else { m.body.len() as u64 };
                    Reply::Integer((3 + args[2].len() + 17) as i64 + value as i64)
                }
                Ok(None) => Reply::Null,
                Err(e) => engine_error(e),
            }
        }
        ("stats", 2) => {
            let stats = s.state.storage.engine().stats();
            let used = s.state.used_memory() as i64;
            let field = |k: &str, v: i64| (Reply::bulk(Bytes::copy_from_slice(k.as_bytes())), Reply::Integer(v));
            Reply::Map(vec![
                field("peak.allocated", used),
                field("total.allocated", used),
                field("keys.count", s.state.storage.keys_total() as i64),
                field("dataset.bytes", stats.total_bytes() as i64),
            ])
        }
        ("malloc-stats", 2) => Reply::Verbatim(Bytes::from(malloc_stats())),
        ("doctor", 2) => Reply::Verbatim(Bytes::from_static(
            b"Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.",
        )),
        ("purge", 2) => {
            purge_allocator();
            Reply::ok()
        }
        ("help", 2) => super::introspection::help(&[
            "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
            "HELP",
            "    Prints this help.",
        ]),
        ("usage" | "stats" | "doctor" | "purge" | "malloc-stats" | "help", _) => {
            Reply::error(format!("ERR wrong number of arguments for 'memory|{sub}' command"))
        }
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try MEMORY HELP.", String::from_utf8_lossy(&args[1]))),
    }
}

/// jemalloc's statistics report, as `MEMORY MALLOC-STATS` gives it with Redis's jemalloc
/// build; with the system allocator, Redis's answer for one it cannot ask.
#[cfg(feature = "jemalloc")]
fn malloc_stats() -> Vec<u8> {
    use std::ffi::{c_char, c_void, CStr};
    unsafe extern "C" fn append(out: *mut c_void, text: *const c_char) {
        // SAFETY: `out` is the `Vec` passed below, alive for the whole call, and jemalloc
        // hands a NUL-terminated string.
        unsafe { (*out.cast::<Vec<u8>>()).extend_from_slice(CStr::from_ptr(text).to_bytes()) }
    }
    let mut out: Vec<u8> = Vec::new();
    // SAFETY: the callback only appends to `out`, which outlives the call; no options string.
    unsafe { tikv_jemalloc_sys::malloc_stats_print(Some(append), (&mut out as *mut Vec<u8>).cast(), std::ptr::null()) };
    out
}

/// Hands the allocator's freed pages back to the OS (Redis's `MEMORY PURGE`): jemalloc's purge,
/// or glibc's `malloc_trim` without the `jemalloc` feature (see `lsm::allocator`). The engine
/// also runs it after each memtable flush and compaction.
pub fn purge_allocator() {
    #[cfg(feature = "jemalloc")]
    lsm::allocator::purge();
    #[cfg(all(target_env = "gnu", not(feature = "jemalloc")))]
    lsm::allocator::trim();
}

/// Applies `jemalloc-bg-thread` (Redis's default `yes`): jemalloc's background threads hand
/// freed pages back to the OS while the server is idle (see
/// `lsm::allocator::jemalloc_background_thread`). Nothing without the `jemalloc` feature.
pub fn configure_allocator(config: &crate::config::Config) {
    #[cfg(feature = "jemalloc")]
    {
        let on = config.get("jemalloc-bg-thread") != Some("no");
        if !lsm::allocator::jemalloc_background_thread(on) {
            tracing::warn!(target: "shale::server", on, "jemalloc refused to switch its background threads");
        }
    }
    #[cfg(not(feature = "jemalloc"))]
    let _ = config;
}

#[cfg(not(feature = "jemalloc"))]
fn malloc_stats() -> Vec<u8> {
    b"Stats not supported for the current allocator".to_vec()
}

/// `DEBUG OBJECT key` (see `keys::inspect::debug_object`), `DEBUG SLEEP seconds` (blocks this
/// client like Redis blocks its thread), `DEBUG RELOAD`/`FLUSH`
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
        "object" if args.len() == 3 => super::keys::inspect::debug_object(s, &args[2]),
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
