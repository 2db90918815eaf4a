//! Watching the server work: MONITOR, SLOWLOG (GET, LEN, RESET, HELP) and LATENCY (LATEST,
//! HISTORY, RESET, GRAPH, DOCTOR, HELP), with Redis 7.0's replies. What they show is recorded
//! by the gate after every command ([`crate::exec`]) into [`crate::services::slowlog`] and the
//! pub/sub hub's MONITOR clients.

use std::fmt::Write as _;

use bytes::Bytes;

use super::{meta, parse_i64, spec, CommandSpec, Session, NO_KEYS};
use crate::resp::Reply;
use crate::services::pubsub::Limits;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("monitor", 1, &["admin", "noscript", "loading", "stale"], NO_KEYS, monitor),
    spec("slowlog", -2, &["admin", "random", "loading", "stale"], NO_KEYS, slowlog),
    spec("latency", -2, &["admin", "noscript", "loading", "stale"], NO_KEYS, latency),
];

/// One command as MONITOR shows it: `<unix time>.<µs> [<db> <addr>] "arg" …`, arguments
/// escaped as Redis's `sdscatrepr` escapes them, secrets redacted.
pub fn monitor_line(db: u32, addr: &str, args: &[Bytes]) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut line = format!("{}.{:06} [{db} {addr}]", now.as_secs(), now.subsec_micros());
    for arg in crate::services::slowlog::redacted(args) {
        line.push_str(" \"");
        for &b in arg.iter() {
            match b {
                b'\\' => line.push_str("\\\\"),
                b'"' => line.push_str("\\\""),
                b'\n' => line.push_str("\\n"),
                b'\r' => line.push_str("\\r"),
                b'\t' => line.push_str("\\t"),
                7 => line.push_str("\\a"),
                8 => line.push_str("\\b"),
                0x20..=0x7e => line.push(char::from(b)),
                _ => {
                    let _ = write!(line, "\\x{b:02x}");
                }
            }
        }
        line.push('"');
    }
    line
}

/// Sends a command that ran to every MONITOR client (not administrative ones, as in Redis).
pub(crate) fn feed_monitors(s: &Session, spec: &CommandSpec, args: &[Bytes]) {
    if super::meta::called(spec, args).categories & super::meta::C_ADMIN != 0 {
        return;
    }
    let line = monitor_line(s.db, if s.in_script { "lua" } else { &s.handle.addr }, args);
    let limits = Limits::for_monitors(s.state.config().get("client-output-buffer-limit").unwrap_or_default());
    s.state.pubsub.feed_monitors(&line, limits);
}

/// `MONITOR`: from now on this connection receives every command the server runs.
fn monitor(s: &mut Session, _: &[Bytes]) -> Reply {
    if s.in_exec {
        return Reply::error("ERR MONITOR isn't allowed for DENY BLOCKING client");
    }
    let sub = super::pubsub::subscriber(s);
    s.state.pubsub.add_monitor(s.id, &sub);
    Reply::ok()
}

/// A HELP reply: one status line per entry.
pub(super) fn help(lines: &[&str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::Simple((*l).into())).collect())
}

/// Redis's reply to an unknown subcommand (or a known one with the wrong arity).
pub(super) fn unknown_subcommand(command: &str, sub: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(sub),
        command.to_ascii_uppercase()
    ))
}

/// `SLOWLOG GET [count] | LEN | RESET | HELP`.
fn slowlog(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let log = &s.state.slowlog;
    match (sub.as_str(), args.len()) {
        ("help", 2) => help(&[
            "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
            "HELP",
            "    Prints this help.",
        ]),
        ("reset", 2) => {
            log.reset();
            Reply::ok()
        }
        ("len", 2) => Reply::Integer(log.len() as i64),
        ("get", 2 | 3) => {
            let count = match args.get(2).map(|a| parse_i64(a)) {
                None => Some(10),
                Some(Some(-1)) => None,
                Some(Some(n)) if n >= 0 => Some(n as usize),
                Some(Some(_)) => return Reply::error("ERR count should be greater than or equal to -1"),
                Some(None) => return Reply::error("ERR count should be greater than or equal to -1"),
            };
            let entries = log
                .newest(count)
                .into_iter()
                .map(|e| {
                    Reply::Array(vec![
                        Reply::Integer(e.id as i64),
                        Reply::Integer(e.time as i64),
                        Reply::Integer(e.micros as i64),
                        Reply::Array(e.args.into_iter().map(Reply::Bulk).collect()),
                        Reply::bulk(Bytes::from(e.addr)),
                        Reply::bulk(Bytes::from(e.name)),
                    ])
                })
                .collect();
            Reply::Array(entries)
        }
        _ => unknown_subcommand("slowlog", &args[1]),
    }
}

/// `LATENCY LATEST | HISTORY event | RESET [event …] | GRAPH event | DOCTOR | HELP`.
fn latency(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let monitor = &s.state.latency;
    match (sub.as_str(), args.len()) {
        ("help", 2) => help(&[
            "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
            "HELP",
            "    Prints this help.",
        ]),
        ("latest", 2) => Reply::Array(
            monitor
                .events()
                .into_iter()
                .filter_map(|(name, e)| {
                    let &(time, ms) = e.samples.back()?;
                    Some(Reply::Array(vec![
                        Reply::bulk(Bytes::from_static(name.as_bytes())),
                        Reply::Integer(time as i64),
                        Reply::Integer(ms as i64),
                        Reply::Integer(e.max as i64),
                    ]))
                })
                .collect(),
        ),
        ("history", 3) => {
            let samples = monitor.event(&String::from_utf8_lossy(&args[2])).map(|e| e.samples).unwrap_or_default();
            Reply::Array(
                samples
                    .into_iter()
                    .map(|(t, ms)| Reply::Array(vec![Reply::Integer(t as i64), Reply::Integer(ms as i64)]))
                    .collect(),
            )
        }
        ("reset", _) => {
            let names: Vec<String> = args[2..].iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            Reply::Integer(monitor.reset(&names) as i64)
        }
        ("graph", 3) => {
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            match monitor.event(&name) {
                Some(e) => Reply::Verbatim(Bytes::from(graph(&name, &e))),
                None => Reply::error(format!("ERR No samples available for event '{name}'")),
            }
        }
        ("doctor", 2) => Reply::Verbatim(Bytes::from(doctor(s))),
        ("histogram", _) => histogram(s, &args[2..]),
        _ => unknown_subcommand("latency", &args[1]),
    }
}

/// `LATENCY HISTOGRAM [command …]`: per command (and subcommand) with samples, its calls and
/// the cumulative distribution of their latencies (`latency-tracking`), as Redis 7.0 replies.
/// A named container stands for its subcommands too; unknown names are skipped.
fn histogram(s: &Session, names: &[Bytes]) -> Reply {
    let universe = meta::universe();
    let ids: Vec<usize> = if names.is_empty() {
        universe.iter().map(|c| c.id).collect()
    } else {
        names
            .iter()
            .filter_map(|n| meta::acl_command(&String::from_utf8_lossy(n).to_ascii_lowercase()))
            .flat_map(|c| std::iter::once(c.id).chain(c.subcommands.iter().copied()))
            .collect()
    };
    let entries = ids
        .into_iter()
        .filter_map(|id| {
            let (calls, levels) = s.state.command_stats.histogram(id)?;
            let cdf = levels.into_iter().map(|(us, n)| (Reply::Integer(us as i64), Reply::Integer(n as i64))).collect();
            Some((
                Reply::Bulk(Bytes::copy_from_slice(universe[id].name.as_bytes())),
                Reply::Map(vec![
                    (Reply::bulk(&b"calls"[..]), Reply::Integer(calls as i64)),
                    (Reply::bulk(&b"histogram_usec"[..]), Reply::Map(cdf)),
                ]),
            ))
        })
        .collect();
    Reply::Map(entries)
}

/// An ASCII chart of an event's samples: one column per sample, oldest left, 10 rows scaled
/// from 0 to the largest sample; under it each sample's age.
fn graph(name: &str, e: &crate::services::slowlog::LatencyEvent) -> String {
    let max = e.samples.iter().map(|&(_, ms)| ms).max().unwrap_or(0).max(1);
    let min = e.samples.iter().map(|&(_, ms)| ms).min().unwrap_or(0);
    let mut out = format!("{name} - high {max} ms, low {min} ms (all time high {} ms)\n", e.max);
    out.push_str(&"-".repeat(80));
    out.push('\n');
    const ROWS: u64 = 10;
    for row in (1..=ROWS).rev() {
        let line: String = e
            .samples
            .iter()
            .map(|&(_, ms)| {
                if ms * ROWS >= row * max {
                    '#'
                } else if row == 1 {
                    '_'
                } else {
                    ' '
                }
            })
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let now = crate::storage::now_ms() / 1000;
    let ages: Vec<String> = e.samples.iter().map(|&(t, _)| format!("{}s", now.saturating_sub(t))).collect();
    out.push_str(&format!("ages, oldest first: {}\n", ages.join(" ")));
    out
}

/// A human report on the latency events seen, with what usually helps.
fn doctor(s: &Session) -> String {
    let threshold = s.state.config().latency_monitor_threshold;
    let events = s.state.latency.events();
    if threshold == 0 {
        return "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n\
                Latency monitoring is disabled in this instance: set latency-monitor-threshold to the\n\
                number of milliseconds a command or event may take before it is sampled\n\
                (CONFIG SET latency-monitor-threshold <milliseconds>).\n"
            .to_string();
    }
    if events.is_empty() {
        return "Dave, no latency spike was observed during the lifetime of this instance, awesome! ;)\n".to_string();
    }
    let mut out = String::from(
        "Dave, I have observed latency spikes in this instance. You don't mind talking about it, do you Dave?\n\n",
    );
    for (i, (name, e)) in events.iter().enumerate() {
        let avg = e.samples.iter().map(|&(_, ms)| ms).sum::<u64>() / (e.samples.len() as u64).max(1);
        let _ = writeln!(
            out,
            "{}. {name}: {} latency spikes (average {avg}ms, mean deviation -, period -). Worst all time event {}ms.",
            i + 1,
            e.samples.len(),
            e.max
        );
    }
    out.push_str("\nI have a few advices for you:\n\n");
    for (name, _) in &events {
        let advice = match *name {
            "command" | "fast-command" => {
                "- Check your Slow Log (SLOWLOG GET) for the commands taking the longest: \
                 large ranges (LRANGE, ZRANGE, HGETALL, SMEMBERS of big collections) and commands over many keys \
                 are the usual suspects; data larger than the block cache makes reads wait for the disk \
                 (INFO memory, INFO lsm: lsm_block_cache_misses)."
            }
            "expire-cycle" => "- Many keys expire at the same moment: spread their TTLs.",
            _ => "- Look at INFO lsm for write stalls (lsm_stall_micros) and compactions.",
        };
        let _ = writeln!(out, "{advice}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_escape_arguments_as_redis_does() {
        let args: Vec<Bytes> =
            ["set", "k\"1\n", "\u{1}x\\", "secret"].iter().map(|a| Bytes::from(a.to_string())).collect();
        let line = monitor_line(3, "127.0.0.1:5000", &args);
        let (time, rest) = line.split_once(' ').unwrap();
        assert!(time.split_once('.').is_some_and(|(s, us)| s.len() >= 10 && us.len() == 6), "{time}");
        assert_eq!(rest, r#"[3 127.0.0.1:5000] "set" "k\"1\n" "\x01x\\" "secret""#);
        let auth: Vec<Bytes> = ["AUTH", "user", "pw"].iter().map(|a| Bytes::from(a.to_string())).collect();
        assert!(monitor_line(0, "a", &auth).ends_with(r#"[0 a] "AUTH" "(redacted)" "(redacted)""#));
    }
}
