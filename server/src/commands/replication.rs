//! Replication commands: `REPLICAOF`/`SLAVEOF`, `REPLCONF`, `PSYNC`, `SYNC`, `ROLE`, `WAIT`,
//! the gate's replication rules ([`refusal`]) and INFO's `# Replication` section.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::flag;
use super::{parse_i64, spec, BlockRequest, CommandSpec, Session, NO_KEYS};
use crate::replication::{primary, LinkState, Upstream};
use crate::resp::Reply;
use crate::state::ServerState;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("replicaof", 3, &["admin", "noscript", "stale", "no_async_loading"], NO_KEYS, replicaof),
    spec("slaveof", 3, &["admin", "noscript", "stale", "no_async_loading"], NO_KEYS, replicaof),
    spec("replconf", -1, &["admin", "noscript", "loading", "stale", "allow_busy"], NO_KEYS, replconf),
    spec("psync", -3, &["admin", "noscript", "no_async_loading", "no_multi"], NO_KEYS, psync),
    spec("sync", 1, &["admin", "noscript", "no_async_loading", "no_multi"], NO_KEYS, sync),
    spec("role", 1, &["noscript", "loading", "stale", "fast"], NO_KEYS, role),
    spec("wait", 3, &["noscript"], NO_KEYS, wait),
];

/// The gate's replication rules for a command that passed ACL: no writes on a replica
/// (`-READONLY`), none on a primary without `min-replicas-to-write` good replicas
/// (`-NOREPLICAS`), and with `replica-serve-stale-data no` no data commands while the link
/// to the primary is down (`-MASTERDOWN`).
pub(crate) fn refusal(s: &Session, spec: &CommandSpec) -> Option<Reply> {
    let write = spec.has(flag::WRITE);
    let repl = &s.state.replication;
    if repl.is_replica() {
        if write {
            return Some(Reply::error("READONLY You can't write against a read only replica."));
        }
        let data = spec.has(flag::READONLY) && !spec.has(flag::STALE);
        if data
            && repl.link_status().0 != LinkState::Connected
            && s.state.config().get("replica-serve-stale-data") == Some("no")
        {
            return Some(Reply::error(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            ));
        }
        return None;
    }
    if write && repl.too_few_replicas() {
        return Some(Reply::error("NOREPLICAS Not enough good replicas to write."));
    }
    None
}

fn replicaof(s: &mut Session, args: &[Bytes]) -> Reply {
    let upstream = if args[1].eq_ignore_ascii_case(b"no") && args[2].eq_ignore_ascii_case(b"one") {
        None
    } else {
        match parse_i64(&args[2]) {
            None => return Reply::error("ERR value is not an integer or out of range"),
            Some(p) if !(1..=65535).contains(&p) => return Reply::error("ERR Invalid master port"),
            Some(p) => Some(Upstream { host: String::from_utf8_lossy(&args[1]).into_owned(), port: p as u16 }),
        }
    };
    let state = Arc::clone(&s.state);
    if upstream.is_some() && upstream == state.replication.upstream() {
        return Reply::Simple("OK Already connected to specified master".into());
    }
    match state.replication.set_upstream(&state, upstream.clone()) {
        Ok(_) => {}
        Err(e) => return Reply::error(format!("ERR saving the replication state: {e}")),
    }
    // CONFIG GET / REWRITE show the role (sentinel rewrites the file after a failover).
    let mut cfg = state.config().clone();
    let value = upstream.as_ref().map(|u| format!("{} {}", u.host, u.port)).unwrap_or_default();
    if cfg.apply("replicaof", &[value]).is_ok() {
        let _ = state.replace_config(cfg);
    }
    match &upstream {
        Some(up) => {
            tracing::info!(target: "shale::replication", primary = %format!("{}:{}", up.host, up.port), client = s.id, "REPLICAOF: following a primary")
        }
        None => tracing::info!(target: "shale::replication", client = s.id, "REPLICAOF NO ONE: now a primary"),
    }
    Reply::ok()
}

fn replconf(s: &mut Session, args: &[Bytes]) -> Reply {
    if args.len().is_multiple_of(2) {
        return Reply::error("ERR syntax error");
    }
    for pair in args[1..].chunks_exact(2) {
        let option = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        match option.as_str() {
            "listening-port" => match parse_i64(&pair[1]) {
                Some(p) if (0..=65535).contains(&p) => s.replica_port = p as u16,
                _ => return Reply::error("ERR value is not an integer or out of range"),
            },
            "capa" => s.replica_is_shale |= pair[1].eq_ignore_ascii_case(b"shale"),
            "ip-address" => s.replica_ip = Some(String::from_utf8_lossy(&pair[1]).into_owned()),
            // Accepted for compatibility; Shale streams the same way to every replica.
            "rdb-only" | "rdb-filter-only" => {}
            // Acknowledgements arrive on the replica link itself (see replication::primary).
            "ack" | "getack" => {}
            _ => {
                return Reply::error(format!("ERR Unrecognized REPLCONF option: {}", String::from_utf8_lossy(&pair[0])))
            }
        }
    }
    Reply::ok()
}

fn psync(s: &mut Session, args: &[Bytes]) -> Reply {
    let repl = &s.state.replication;
    if repl.is_replica() && repl.link_status().0 != LinkState::Connected {
        return Reply::error("NOMASTERLINK Can't SYNC while not connected with my master");
    }
    if !s.replica_is_shale {
        // A Redis replica would wait for an RDB file: tell it (and its log) why not.
        return Reply::error(
            "ERR this is a Shale primary: it ships WAL records, which only shale-server replicas can follow",
        );
    }
    let replid = String::from_utf8_lossy(&args[1]).into_owned();
    let offset = match &args[2][..] {
        b"-1" => -1,
        raw => match parse_i64(raw) {
            Some(n) => n,
            None => return Reply::error("ERR value is not an integer or out of range"),
        },
    };
    match primary::psync(&s.state, &replid, offset) {
        Ok(primary::Plan::Rewind(seq)) => Reply::Simple(format!("REWIND {seq}")),
        Ok(plan) => {
            s.handoff = Some(primary::Handoff { plan, port: s.replica_port, ip: s.replica_ip.take() });
            Reply::Null // never sent: the link writes the answer line itself
        }
        Err(e) => super::engine_error(e),
    }
}

/// Deletes SYNC snapshot files a previous run left in the data directory `dir` (it stopped
/// while sending one); call at startup, before any client connects.
pub fn remove_stale_snapshots(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("sync-") && name.ends_with(".rdb") {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::info!(target: "shale::replication", file = %name, "removed a stale SYNC snapshot"),
                Err(e) => {
                    tracing::warn!(target: "shale::replication", file = %name, error = %e, "cannot remove a stale SYNC snapshot")
                }
            }
        }
    }
}

/// `SYNC`: an RDB snapshot of the whole keyspace (what `redis-cli --rdb` asks for), then the
/// connection closes. Shale replicas use PSYNC and the WAL stream instead. The snapshot is one
/// point in time, written to a file in the data directory here (an executor thread) and
/// streamed from it by the connection's task, so its size is bounded by the disk, not memory.
fn sync(s: &mut Session, _args: &[Bytes]) -> Reply {
    let path = s.state.config().dir.join(format!("sync-{}-{}.rdb", std::process::id(), s.id));
    let started = s.exec.begin_snapshot(s.state.storage.engine());
    let databases = s.state.config().databases;
    let functions = s.state.scripting.library_codes();
    let written = std::fs::File::create(&path).map_err(crate::rdb::file::SnapshotError::from).and_then(|f| {
        crate::rdb::file::write_snapshot(&s.state.storage, &s.exec, databases, &functions, std::io::BufWriter::new(f))
    });
    if started {
        s.exec.end_snapshot();
    }
    match written {
        Ok(bytes) => {
            tracing::info!(target: "shale::replication", bytes, "sending an RDB snapshot (SYNC)");
            s.send_file = Some(path);
            Reply::Null // never sent: the connection sends the file, then closes
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            tracing::error!(target: "shale::replication", error = %e, "cannot write an RDB snapshot for SYNC");
            Reply::error(format!("ERR cannot write the RDB snapshot: {e}"))
        }
    }
}

fn role(s: &mut Session, _args: &[Bytes]) -> Reply {
    let st = &s.state;
    let latest = st.storage.engine().latest_sequence() as i64;
    match st.replication.upstream() {
        None => {
            let replicas = st
                .replication
                .replicas()
                .into_iter()
                .filter(|r| r.phase.load(Ordering::Relaxed) == 2)
                .map(|r| {
                    Reply::Array(vec![
                        Reply::bulk(r.ip.clone().into_bytes()),
                        Reply::bulk(r.port.load(Ordering::Relaxed).to_string().into_bytes()),
                        Reply::bulk(r.acked.load(Ordering::Relaxed).to_string().into_bytes()),
                    ])
                })
                .collect();
            Reply::Array(vec![Reply::bulk(&b"master"[..]), Reply::Integer(latest), Reply::Array(replicas)])
        }
        Some(up) => {
            let (state, _, _) = st.replication.link_status();
            let offset = if state == LinkState::Connected { latest } else { -1 };
            Reply::Array(vec![
                Reply::bulk(&b"slave"[..]),
                Reply::bulk(up.host.into_bytes()),
                Reply::Integer(i64::from(up.port)),
                Reply::bulk(state.word().as_bytes()),
                Reply::Integer(offset),
            ])
        }
    }
}

fn wait(s: &mut Session, args: &[Bytes]) -> Reply {
    if s.state.replication.is_replica() {
        return Reply::error(
            "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.",
        );
    }
    let Some(wanted) = parse_i64(&args[1]) else {
        return Reply::error("ERR value is not an integer or out of range");
    };
    let timeout = match parse_i64(&args[2]) {
        Some(ms) if ms < 0 => return Reply::error("ERR timeout is negative"),
        Some(0) => None,
        Some(ms) => Some(std::time::Duration::from_millis(ms as u64)),
        None => return Reply::error("ERR timeout is not an integer or out of range"),
    };
    // Every write this client made is at or below the engine's last sequence now.
    let seq = s.state.storage.engine().latest_sequence();
    let count = s.state.replication.acked_count(seq);
    if wanted <= 0 || count >= wanted as usize || s.in_exec {
        return Reply::Integer(count as i64);
    }
    s.block(BlockRequest {
        keys: Vec::new(),
        timeout,
        attempt: Box::new(|_| None),
        timeout_reply: Reply::Integer(count as i64),
        lock: None,
        replicas: Some((seq, wanted as usize)),
    })
}

/// INFO's `# Replication` fields, Redis 7.0's names and order.
pub(crate) fn info_fields(st: &ServerState) -> Vec<(&'static str, String)> {
    let repl = &st.replication;
    let latest = st.storage.engine().latest_sequence();
    let ids = repl.ids();
    let cfg = st.config();
    let yes = |k: &str| if cfg.get(k) == Some("yes") { "1" } else { "0" }.to_string();
    let mut fields: Vec<(&'static str, String)> = Vec::new();
    match repl.upstream() {
        None => fields.push(("role", "master".into())),
        Some(up) => {
            let (state, last_io, down) = repl.link_status();
            let up_now = state == LinkState::Connected;
            fields.push(("role", "slave".into()));
            fields.push(("master_host", up.host));
            fields.push(("master_port", up.port.to_string()));
            fields.push(("master_link_status", if up_now { "up" } else { "down" }.into()));
            fields.push(("master_last_io_seconds_ago", last_io.map_or(-1, |s| s as i64).to_string()));
            fields.push(("master_sync_in_progress", u8::from(state == LinkState::Sync).to_string()));
            fields.push(("slave_read_repl_offset", latest.to_string()));
            fields.push(("slave_repl_offset", latest.to_string()));
            if state == LinkState::Sync {
                fields.push(("master_sync_read_bytes", repl.sync_bytes.load(Ordering::Relaxed).to_string()));
            }
            if let (false, Some(down)) = (up_now, down) {
                fields.push(("master_link_down_since_seconds", down.to_string()));
            }
            fields.push(("slave_priority", cfg.get("replica-priority").unwrap_or("100").to_string()));
            fields.push(("slave_read_only", yes("replica-read-only")));
            fields.push(("replica_announced", yes("replica-announced")));
        }
    }
    let replicas = repl.replicas();
    fields.push(("connected_slaves", replicas.len().to_string()));
    let names = ["slave0", "slave1", "slave2", "slave3", "slave4", "slave5", "slave6", "slave7"];
    for (i, r) in replicas.iter().enumerate() {
        // INFO names at most eight replicas (a static field name each); ROLE lists them all.
        let Some(name) = names.get(i) else { break };
        fields.push((
            name,
            format!(
                "ip={},port={},state={},offset={},lag={}",
                r.ip,
                r.port.load(Ordering::Relaxed),
                r.state_word(),
                r.acked.load(Ordering::Relaxed),
                r.lag_secs()
            ),
        ));
    }
    let second = if ids.second_offset == 0 { -1 } else { ids.second_offset as i64 };
    fields.push(("master_failover_state", "no-failover".into()));
    fields.push(("master_replid", ids.replid));
    fields.push(("master_replid2", ids.replid2));
    fields.push(("master_repl_offset", latest.to_string()));
    fields.push(("second_repl_offset", second.to_string()));
    fields.push(("repl_backlog_active", "1".into()));
    fields.push(("repl_backlog_size", cfg.get("repl-backlog-size").unwrap_or_default().to_string()));
    // The backlog is the WAL on disk: from its oldest write to the last one.
    let first = st.storage.engine().oldest_wal_sequence().ok().flatten().unwrap_or(latest + 1);
    fields.push(("repl_backlog_first_byte_offset", first.to_string()));
    fields.push(("repl_backlog_histlen", (latest + 1).saturating_sub(first).to_string()));
    fields
}
