//! What the server records about every command that ran — per-command statistics (INFO
//! commandstats/latencystats), the slow log, the latency monitor, MONITOR clients — called by
//! the gate after each command, including plain SETs batched without their handler.

use std::time::Duration;

use bytes::Bytes;

use super::session::Session;
use crate::commands::flag;
use crate::commands::{meta, CommandSpec};
use crate::resp::Reply;

/// The command-stats id (ACL universe id) of a call: its subcommand's for a container
/// command (`config|get`), else its command's — found without hashing for the latter.
pub(crate) fn stats_id(spec: &'static CommandSpec, args: &[Bytes]) -> usize {
    let top = spec.known().acl;
    if top.subcommands.is_empty() {
        top.id
    } else {
        meta::called(spec, args).id
    }
}

/// Counts the batched SETs and MSETs with command-stats `ids` as failed with `reply` (the
/// commit's error), which is returned.
pub(super) fn failed_sets(s: &Session, reply: Reply, ids: impl IntoIterator<Item = usize>) -> Reply {
    if let Reply::Error(why) = &reply {
        for id in ids {
            s.state.command_stats.failed(id, why);
        }
    }
    reply
}

/// What a script's command on a connection's task left to record, recorded only once the
/// script is known to count (see [`Session::observations`]).
#[derive(Debug)]
pub enum Observation {
    /// A command ran ([`observe`]): its stats id, and its arguments if the slow log or a
    /// MONITOR client wanted them when it ran (else empty: copying them was ~1 % of a short
    /// script's CPU).
    Called {
        spec: &'static CommandSpec,
        id: usize,
        args: Vec<Bytes>,
        error: Option<String>,
        counted: bool,
        took: Duration,
    },
    /// A command was refused before it ran (`CommandStats::rejected`).
    Rejected { id: Option<usize>, why: String },
    /// A keyspace hit (true) or miss.
    Hit(bool),
}

/// Records what `observations` hold, in order.
pub(crate) fn replay(s: &mut Session, observations: Vec<Observation>) {
    for observation in observations {
        match observation {
            Observation::Called { spec, id, args, error, counted, took } => {
                record(s, (spec, id), &args, error.as_deref(), counted, took);
            }
            Observation::Rejected { id, why } => s.state.command_stats.rejected(id, &why),
            Observation::Hit(found) => keyspace_hit(s, found),
        }
    }
}

/// Counts a command refused before it ran (see [`Observation::Rejected`]).
pub(crate) fn rejected(s: &mut Session, id: Option<usize>, why: &str) {
    match &mut s.observations {
        Some(later) => later.push(Observation::Rejected { id, why: why.to_string() }),
        None => s.state.command_stats.rejected(id, why),
    }
}

/// Counts a keyspace hit (`found`) or miss (`INFO stats`).
pub(crate) fn keyspace_hit(s: &mut Session, found: bool) {
    if let Some(later) = &mut s.observations {
        later.push(Observation::Hit(found));
        return;
    }
    let counter = if found { &s.state.keyspace_hits } else { &s.state.keyspace_misses };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// What the server records about a command that ran: its statistics, the slow log, the
/// latency monitor, and the MONITOR clients.
pub(super) fn observe(s: &mut Session, spec: &'static CommandSpec, args: &[Bytes], reply: &Reply, took: Duration) {
    let error = match reply {
        Reply::Error(why) => Some(why.as_str()),
        _ => None,
    };
    let counted = std::mem::take(&mut s.error_counted);
    if let Some(later) = &mut s.observations {
        let error = error.map(str::to_string);
        let id = stats_id(spec, args);
        let wanted = s.state.slowlog.wants(took.as_micros() as u64) || s.state.pubsub.has_monitors();
        let args = if wanted { args.to_vec() } else { Vec::new() };
        later.push(Observation::Called { spec, id, args, error, counted, took });
        return;
    }
    record(s, (spec, stats_id(spec, args)), args, error, counted, took);
}

/// Records a command that ran. `args` is empty for one observed while a script ran on a
/// connection's task when neither the slow log nor MONITOR wanted them then (see
/// [`Observation::Called`]); it is then left out of both.
fn record(
    s: &mut Session,
    (spec, id): (&'static CommandSpec, usize),
    args: &[Bytes],
    error: Option<&str>,
    counted: bool,
    took: Duration,
) {
    if counted && error.is_some() {
        s.state.command_stats.called_failed_counted(id, took);
    } else {
        s.state.command_stats.called(id, took, error);
    }
    if s.blocked.is_some() {
        s.blocked_stats = Some(id);
    }
    let micros = took.as_micros() as u64;
    // EXEC is not logged: the commands it ran are.
    if spec.name != "exec" && !args.is_empty() && s.state.slowlog.wants(micros) {
        if s.blocked.is_some() {
            s.blocked_log = Some((args.to_vec(), micros));
        } else {
            log_slow(s, args, micros);
        }
    }
    let event = if spec.has(flag::FAST) { "fast-command" } else { "command" };
    s.state.latency.sample(event, micros / 1000);
    // `skip_monitor` commands (EVAL, FCALL) feed MONITOR themselves, before what they run.
    if !args.is_empty() && s.state.pubsub.has_monitors() && !spec.has(flag::SKIP_MONITOR) {
        crate::commands::introspection::feed_monitors(s, spec, args);
    }
}

/// Adds a command that ran `micros` to the slow log.
pub fn log_slow(s: &Session, args: &[Bytes], micros: u64) {
    let name = s.handle.name.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default();
    s.state.slowlog.push(args, micros, &s.handle.addr, &String::from_utf8_lossy(&name));
}
