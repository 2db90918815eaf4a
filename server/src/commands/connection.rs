//! Connection and server-introspection commands: PING, ECHO, QUIT, SELECT, HELLO, RESET, COMMAND.

use bytes::Bytes;

use super::{all, lookup, parse_i64, spec, CommandSpec, Session};
use crate::resp::{Protocol, Reply};

/// The Redis version clients are told (feature detection in client libraries reads it).
pub const REDIS_COMPAT_VERSION: &str = "7.2.4";

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("ping", -1, &["fast"], (0, 0, 0), ping),
    spec("echo", 2, &["fast"], (0, 0, 0), echo),
    spec("quit", -1, &["fast", "noscript"], (0, 0, 0), quit),
    spec("select", 2, &["loading", "stale", "fast"], (0, 0, 0), select),
    spec("hello", -1, &["noscript", "loading", "stale", "fast", "no_auth"], (0, 0, 0), hello),
    spec("command", -1, &["loading", "stale"], (0, 0, 0), command),
    super::spec("reset", 1, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], super::NO_KEYS, reset),
];

fn ping(s: &mut Session, args: &[Bytes]) -> Reply {
    // A subscribed RESP2 client gets PING's answer in the shape of a message.
    if s.protocol == Protocol::Resp2 && s.subscribed() {
        let msg = args.get(1).cloned().unwrap_or_default();
        return Reply::Array(vec![Reply::bulk(&b"pong"[..]), Reply::Bulk(msg)]);
    }
    match args {
        [_] => Reply::Simple("PONG".into()),
        [_, msg] => Reply::Bulk(msg.clone()),
        _ => Reply::error("ERR wrong number of arguments for 'ping' command"),
    }
}

fn echo(_: &mut Session, args: &[Bytes]) -> Reply {
    Reply::Bulk(args[1].clone())
}

fn quit(s: &mut Session, _: &[Bytes]) -> Reply {
    s.closing = true;
    Reply::ok()
}

fn select(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(index) = parse_i64(&args[1]) else { return Reply::error("ERR value is not an integer or out of range") };
    if index < 0 || index >= i64::from(s.state.config().databases) {
        return Reply::error("ERR DB index is out of range");
    }
    s.select(index as u32);
    Reply::ok()
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
fn hello(s: &mut Session, args: &[Bytes]) -> Reply {
    let mut proto = s.protocol;
    if let Some(v) = args.get(1) {
        match parse_i64(v) {
            Some(2) => proto = Protocol::Resp2,
            Some(3) => proto = Protocol::Resp3,
            Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
            None => return Reply::error("ERR Protocol version is not an integer or out of range"),
        }
    }
    let mut i = 2;
    let mut name = None;
    let mut credentials = None;
    while i < args.len() {
        let opt = String::from_utf8_lossy(&args[i]).to_ascii_lowercase();
        match opt.as_str() {
            "setname" if i + 1 < args.len() => {
                name = Some(args[i + 1].clone());
                i += 2;
            }
            "auth" if i + 2 < args.len() => {
                credentials = Some((args[i + 1].clone(), args[i + 2].clone()));
                i += 3;
            }
            _ => {
                return Reply::error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                ));
            }
        }
    }
    let authed = credentials.is_some();
    if let Some((user, pass)) = credentials {
        if let Err(e) = super::server::check_credentials(s, &user, &pass) {
            return e;
        }
    }
    if !authed && !s.authenticated {
        return Reply::error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    s.set_protocol(proto);
    if name.is_some() {
        s.set_name(name);
    }
    let field = |k: &str, v: Reply| (Reply::bulk(Bytes::copy_from_slice(k.as_bytes())), v);
    Reply::Map(vec![
        field("server", Reply::bulk(&b"redis"[..])),
        field("version", Reply::bulk(REDIS_COMPAT_VERSION.as_bytes())),
        field("proto", Reply::Integer(if proto == Protocol::Resp3 { 3 } else { 2 })),
        field("id", Reply::Integer(s.id as i64)),
        field("mode", Reply::bulk(&b"standalone"[..])),
        field("role", Reply::bulk(if s.state.replication.is_replica() { &b"replica"[..] } else { &b"master"[..] })),
        field("modules", Reply::Array(Vec::new())),
    ])
}

/// The 10-element `COMMAND` entry Redis 7 returns for `spec`.
fn command_entry(spec: &CommandSpec) -> Reply {
    // `may_replicate` is internal (CLIENT PAUSE WRITE): Redis leaves it out of COMMAND too.
    let mut flags: Vec<Reply> =
        spec.flags.iter().filter(|f| **f != "may_replicate").map(|f| Reply::Simple((*f).into())).collect();
    if super::meta::movable_keys(spec.name) {
        flags.push(Reply::Simple("movablekeys".into()));
    }
    Reply::Array(vec![
        Reply::bulk(spec.name.as_bytes()),
        Reply::Integer(i64::from(spec.arity)),
        Reply::Set(flags),
        Reply::Integer(i64::from(spec.first_key)),
        Reply::Integer(i64::from(spec.last_key)),
        Reply::Integer(i64::from(spec.step)),
        Reply::Set(super::meta::category_names(spec).into_iter().map(|c| Reply::Simple(format!("@{c}"))).collect()),
        Reply::Set(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND LIST`, `COMMAND DOCS [name…]`.
fn command(_: &mut Session, args: &[Bytes]) -> Reply {
    let Some(sub) = args.get(1) else { return Reply::Array(all().into_iter().map(command_entry).collect()) };
    match String::from_utf8_lossy(sub).to_ascii_lowercase().as_str() {
        "count" if args.len() == 2 => Reply::Integer(all().len() as i64),
        "list" => command_list(&args[2..]),
        "getkeys" | "getkeysandflags" if args.len() >= 3 => {
            command_getkeys(&args[2..], args[1].eq_ignore_ascii_case(b"getkeysandflags"))
        }
        "info" => Reply::Array(args[2..].iter().map(|n| lookup(n).map_or(Reply::NullArray, command_entry)).collect()),
        "docs" => super::docs::command_docs(&args[2..]),
        "help" if args.len() == 2 => super::introspection::help(&[
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
            "HELP",
            "    Prints this help.",
        ]),
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try COMMAND HELP.", String::from_utf8_lossy(sub))),
    }
}

/// Every command name and subcommand (`config|get`) the server has.
fn command_names() -> Vec<String> {
    let mut names = Vec::new();
    for spec in all() {
        names.push(spec.name.to_string());
        if let Some(entry) = super::meta::acl_command(spec.name) {
            let universe = super::meta::universe();
            names.extend(entry.subcommands.iter().map(|&id| universe[id].name.clone()));
        }
    }
    names
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`.
fn command_list(rest: &[Bytes]) -> Reply {
    let names = command_names();
    let kept: Vec<String> = match rest {
        [] => names,
        [by, how, arg] if by.eq_ignore_ascii_case(b"filterby") => {
            match String::from_utf8_lossy(how).to_ascii_lowercase().as_str() {
                // Shale loads no modules.
                "module" => Vec::new(),
                "aclcat" => match super::meta::category(&String::from_utf8_lossy(arg).to_ascii_lowercase()) {
                    Some(bit) => names
                        .into_iter()
                        .filter(|n| super::meta::acl_command(n).is_some_and(|c| c.categories & bit != 0))
                        .collect(),
                    None => Vec::new(),
                },
                "pattern" => names.into_iter().filter(|n| crate::glob::matches(arg, n.as_bytes(), true)).collect(),
                _ => return Reply::error("ERR syntax error"),
            }
        }
        _ => return Reply::error("ERR syntax error"),
    };
    Reply::Array(kept.into_iter().map(|n| Reply::bulk(Bytes::from(n))).collect())
}

/// The names `COMMAND GETKEYSANDFLAGS` gives key-spec flags.
const KEY_FLAG_NAMES: &[(u16, &str)] = &[
    (super::meta::K_RO, "RO"),
    (super::meta::K_RW, "RW"),
    (super::meta::K_OW, "OW"),
    (super::meta::K_RM, "RM"),
    (super::meta::K_ACCESS, "access"),
    (super::meta::K_UPDATE, "update"),
    (super::meta::K_INSERT, "insert"),
    (super::meta::K_DELETE, "delete"),
    (super::meta::K_NOT_KEY, "not_key"),
    (super::meta::K_INCOMPLETE, "incomplete"),
    (super::meta::K_VARIABLE_FLAGS, "variable_flags"),
];

/// `COMMAND GETKEYS command arg…` / `GETKEYSANDFLAGS`: the keys a call names, found with the
/// command's key specs (and their flags), with Redis's errors.
fn command_getkeys(call: &[Bytes], with_flags: bool) -> Reply {
    let Some(spec) = lookup(&call[0]) else { return Reply::error("ERR Invalid command specified") };
    let has_keys = spec.first_key > 0
        || super::meta::redis_command(spec.name).is_some_and(|m| !m.key_specs.is_empty() || !m.subcommands.is_empty());
    if !has_keys {
        return Reply::error("ERR The command has no key arguments");
    }
    let n = call.len() as i32;
    if (spec.arity > 0 && spec.arity != n) || n < -spec.arity {
        return Reply::error("ERR Invalid number of arguments specified for command");
    }
    // Redis 7.0's NO_MANDATORY_KEYS commands (scripts and functions) may name no key.
    let keys_optional = matches!(spec.name, "eval" | "eval_ro" | "evalsha" | "evalsha_ro" | "fcall" | "fcall_ro");
    let keys = match super::meta::keys_checked(spec, call, true) {
        Some(keys) if !keys.is_empty() => keys,
        _ if keys_optional => Vec::new(),
        _ => return Reply::error("ERR Invalid arguments specified for command"),
    };
    Reply::Array(
        keys.into_iter()
            .map(|k| {
                let key = Reply::Bulk(call[k.pos].clone());
                if !with_flags {
                    return key;
                }
                let flags = KEY_FLAG_NAMES
                    .iter()
                    .filter(|(bit, _)| k.flags & bit != 0)
                    .map(|(_, name)| Reply::Simple((*name).into()))
                    .collect();
                Reply::Array(vec![key, Reply::Set(flags)])
            })
            .collect(),
    )
}

/// `RESET`: the connection as it was when it opened (database 0, RESP2, no name, replies on,
/// the default user, authenticated only if it needs no password).
fn reset(s: &mut Session, _: &[Bytes]) -> Reply {
    s.multi = None;
    s.multi_error = false;
    super::transactions::clear_watches(s);
    s.unsubscribe_all();
    s.state.storage.tracking.disable(s.id);
    s.tracking = false;
    s.tracking_caching = false;
    s.select(0);
    s.set_protocol(Protocol::Resp2);
    s.set_name(None);
    s.reply_mode = super::ReplyMode::On;
    s.skip_next = false;
    s.logout();
    Reply::Simple("RESET".into())
}
