//! `CLIENT` subcommands: ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL, REPLY, PAUSE, UNPAUSE,
//! UNBLOCK, NO-EVICT, NO-TOUCH, HELP; TRACKING, CACHING, GETREDIR and TRACKINGINFO are in
//! [`super::client_tracking`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{client_tracking, parse_i64, spec, CommandSpec, ReplyMode, Session};
use crate::resp::Reply;
use crate::services::clients::{ClientHandle, Kind};
use crate::state::Pause;

pub(super) static COMMANDS: &[CommandSpec] = &[spec("client", -2, &["loading", "stale"], (0, 0, 0), client)];

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

fn arity_error(sub: &str) -> Reply {
    Reply::error(format!("ERR wrong number of arguments for 'client|{sub}' command"))
}

fn client(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = lower(&args[1]);
    let n = args.len();
    let ok_arity = match sub.as_str() {
        "id" | "getname" | "info" | "unpause" | "getredir" | "trackinginfo" | "help" => n == 2,
        "setname" | "reply" | "no-evict" | "no-touch" | "caching" => n == 3,
        "tracking" => n >= 3,
        "setinfo" => n == 4,
        "pause" => n == 3 || n == 4,
        "unblock" => n == 3 || n == 4,
        "kill" => n >= 3,
        "list" => n >= 2,
        _ => {
            return Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(&args[1])
            ))
        }
    };
    if !ok_arity {
        return arity_error(&sub);
    }
    match sub.as_str() {
        "id" => Reply::Integer(s.id as i64),
        "getname" => s.handle.name.lock().unwrap_or_else(|e| e.into_inner()).clone().map_or(Reply::Null, Reply::Bulk),
        "setname" => {
            if args[2].iter().any(|&b| b <= b' ' || b > b'~') {
                return Reply::error("ERR Client names cannot contain spaces, newlines or special characters.");
            }
            s.set_name((!args[2].is_empty()).then(|| args[2].clone()));
            Reply::ok()
        }
        "setinfo" => setinfo(s, &args[2], &args[3]),
        "info" => Reply::Verbatim(Bytes::from(format!("{}\n", line(s, &s.handle)))),
        "list" => list(s, &args[2..]),
        "kill" => kill(s, &args[2..]),
        "reply" => match lower(&args[2]).as_str() {
            "on" => {
                // Also ends a SKIP given just before: this reply is sent.
                s.reply_mode = ReplyMode::On;
                s.skip_next = false;
                s.suppress_current = false;
                Reply::ok()
            }
            "off" => {
                s.reply_mode = ReplyMode::Off;
                Reply::ok()
            }
            "skip" => {
                // Neither this command's reply nor the next one's is sent.
                if s.reply_mode == ReplyMode::On {
                    s.skip_next = true;
                    s.suppress_current = true;
                }
                Reply::ok()
            }
            _ => Reply::error("ERR syntax error"),
        },
        "pause" => pause(s, &args[2..]),
        "unpause" => {
            s.state.set_pause(None);
            Reply::ok()
        }
        "unblock" => {
            let Some(id) = parse_i64(&args[2]) else {
                return Reply::error("ERR value is not an integer or out of range");
            };
            let error = match args.get(3).map(|r| lower(r)) {
                None => false,
                Some(r) if r == "timeout" => false,
                Some(r) if r == "error" => true,
                Some(_) => return Reply::error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
            };
            Reply::Integer(i64::from(id > 0 && s.state.blocking.unblock(id as u64, error)))
        }
        "no-evict" | "no-touch" => match lower(&args[2]).as_str() {
            "on" | "off" => Reply::ok(),
            _ => Reply::error("ERR syntax error"),
        },
        "getredir" => client_tracking::getredir(s),
        "tracking" => client_tracking::tracking(s, args),
        "caching" => client_tracking::caching(s, &args[2]),
        "trackinginfo" => client_tracking::trackinginfo(s),
        _ => help(),
    }
}

fn setinfo(s: &Session, attr: &[u8], value: &[u8]) -> Reply {
    let attr = lower(attr);
    if attr != "lib-name" && attr != "lib-ver" {
        return Reply::error(format!("ERR Unrecognized option '{}'", String::from_utf8_lossy(attr.as_bytes())));
    }
    if value.iter().any(|&b| b <= b' ' || b > b'~') {
        return Reply::error(format!("ERR {attr} cannot contain spaces, newlines or special characters."));
    }
    let v = String::from_utf8_lossy(value).into_owned();
    let mut lib = s.handle.lib.lock().unwrap_or_else(|e| e.into_inner());
    if attr == "lib-name" {
        lib.0 = v;
    } else {
        lib.1 = v;
    }
    Reply::ok()
}

/// A client's `CLIENT LIST` line (its kind's flag; MULTI and subscription counts not shown).
fn line(s: &Session, c: &ClientHandle) -> String {
    let (tracking, redir) = client_tracking::list_fields(s, c.id);
    let kind = c.kind().flag();
    // Redis prints `N` only for a client with no flag at all.
    let flags = match (kind, tracking.is_empty()) {
        (k, true) => k.to_string(),
        ("N", false) => tracking,
        (k, false) => format!("{k}{tracking}"),
    };
    c.info_line(&flags, -1, 0, 0, redir)
}

fn list(s: &Session, opts: &[Bytes]) -> Reply {
    let mut clients = s.state.registry.snapshot();
    let mut i = 0;
    while i < opts.len() {
        match lower(&opts[i]).as_str() {
            "type" if i + 1 < opts.len() => {
                match Kind::named(&lower(&opts[i + 1])) {
                    Some(kind) => clients.retain(|c| c.kind() == kind),
                    None => {
                        return Reply::error(format!(
                            "ERR Unknown client type '{}'",
                            String::from_utf8_lossy(&opts[i + 1])
                        ))
                    }
                }
                i += 2;
            }
            "id" if i + 1 < opts.len() => {
                let mut ids = Vec::new();
                for a in &opts[i + 1..] {
                    match parse_i64(a) {
                        Some(id) if id > 0 => ids.push(id as u64),
                        _ => return Reply::error("ERR Invalid client ID"),
                    }
                }
                clients.retain(|c| ids.contains(&c.id));
                i = opts.len();
            }
            _ => return Reply::error("ERR syntax error"),
        }
    }
    let text: String = clients.iter().map(|c| line(s, c) + "\n").collect();
    Reply::Verbatim(Bytes::from(text))
}

/// A `CLIENT KILL` filter.
type Filter = Box<dyn Fn(&ClientHandle) -> bool>;

/// `CLIENT KILL ip:port` (old form: +OK or an error) or `CLIENT KILL filter value …` (a count).
fn kill(s: &mut Session, args: &[Bytes]) -> Reply {
    let clients = s.state.registry.snapshot();
    if args.len() == 1 {
        let addr = String::from_utf8_lossy(&args[0]);
        return match clients.iter().find(|c| c.addr == addr) {
            Some(c) if c.id == s.id => {
                s.closing = true; // the reply goes out, then the connection closes
                Reply::ok()
            }
            Some(c) => {
                c.kill();
                Reply::ok()
            }
            None => Reply::error("ERR No such client"),
        };
    }
    if !args.len().is_multiple_of(2) {
        return Reply::error("ERR syntax error");
    }
    let mut filters: Vec<Filter> = Vec::new();
    let mut skipme = true;
    for pair in args.chunks_exact(2) {
        let value = pair[1].clone();
        let text = String::from_utf8_lossy(&value).into_owned();
        match lower(&pair[0]).as_str() {
            "id" => match parse_i64(&value) {
                Some(id) if id > 0 => filters.push(Box::new(move |c| c.id == id as u64)),
                _ => return Reply::error("ERR client-id should be greater than 0"),
            },
            "addr" => filters.push(Box::new(move |c| c.addr == text)),
            "laddr" => filters.push(Box::new(move |c| c.laddr == text)),
            "user" => {
                if s.state.acl.user(&text).is_none() {
                    return Reply::error(format!("ERR No such user '{text}'"));
                }
                filters.push(Box::new(move |c| *c.user() == *text));
            }
            "type" => match Kind::named(&text) {
                Some(kind) => filters.push(Box::new(move |c| c.kind() == kind)),
                None => return Reply::error(format!("ERR Unknown client type '{text}'")),
            },
            "maxage" => match parse_i64(&value) {
                Some(age) => filters.push(Box::new(move |c| c.created.elapsed().as_secs() as i64 >= age)),
                None => return Reply::error("ERR syntax error"),
            },
            "skipme" => match text.to_ascii_lowercase().as_str() {
                "yes" => skipme = true,
                "no" => skipme = false,
                _ => return Reply::error("ERR syntax error"),
            },
            _ => return Reply::error("ERR syntax error"),
        }
    }
    let victims: Vec<&Arc<ClientHandle>> =
        clients.iter().filter(|c| !(skipme && c.id == s.id) && filters.iter().all(|f| f(c))).collect();
    for c in &victims {
        if c.id == s.id {
            s.closing = true; // as in Redis: this reply goes out, then the connection closes
        } else {
            c.kill();
        }
    }
    Reply::Integer(victims.len() as i64)
}

fn pause(s: &Session, args: &[Bytes]) -> Reply {
    let Some(ms) = parse_i64(&args[0]).filter(|&ms| ms >= 0) else {
        return Reply::error("ERR timeout is not an integer or out of range");
    };
    let all = match args.get(1).map(|m| lower(m)) {
        None => true,
        Some(m) if m == "all" => true,
        Some(m) if m == "write" => false,
        Some(_) => return Reply::error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let until = Instant::now() + Duration::from_millis(ms as u64);
    s.state.set_pause(Some(Pause { until, all }));
    Reply::ok()
}

/// Redis 7.0.15's `CLIENT HELP`, plus SETINFO and NO-TOUCH (Redis 7.2's, which Shale also has).
fn help() -> Reply {
    let lines = [
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CACHING (YES|NO)",
        "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
        "GETREDIR",
        "    Return the client ID we are redirecting to when tracking is enabled.",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username>.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "LIST [options ...]",
        "    Return information about client connections. Options:",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Return clients of specified type.",
        "UNPAUSE",
        "    Stop the current client pause, resuming traffic.",
        "PAUSE <timeout> [WRITE|ALL]",
        "    Suspend all, or just write, clients for <timeout> milliseconds.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "SETINFO <option> <value>",
        "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
        "UNBLOCK <clientid> [TIMEOUT|ERROR]",
        "    Unblock the specified blocked client.",
        "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
        "         [OPTIN] [OPTOUT] [NOLOOP]",
        "    Control server assisted client side caching.",
        "TRACKINGINFO",
        "    Report tracking status for the current connection.",
        "NO-EVICT (ON|OFF)",
        "    Protect current client connection from eviction.",
        "NO-TOUCH (ON|OFF)",
        "    Will not touch LRU/LFU stats when this mode is on.",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(lines.iter().map(|l| Reply::Simple((*l).into())).collect())
}
