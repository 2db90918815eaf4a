//! `ACL CAT | DELUSER | DRYRUN | GENPASS | GETUSER | LIST | LOAD | LOG | SAVE | SETUSER | USERS |
//! WHOAMI | HELP`, over [`crate::acl`], with Redis 7's replies and errors; and the refusal the
//! gate answers for a call the user may not make.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::meta::{category, universe, CATEGORIES};
use super::{lookup, parse_i64, CommandSpec, Session};
use crate::acl::{check, Denied, LogEntry, Reason};
use crate::resp::Reply;

pub(super) static COMMANDS: &[CommandSpec] =
    &[super::spec("acl", -2, &["admin", "noscript", "loading", "stale"], super::NO_KEYS, acl)];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn acl(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = text(&args[1]).to_ascii_lowercase();
    let n = args.len();
    // Redis's errors for an unknown subcommand and for a known one's arity.
    let Some(meta) = super::meta::redis_command(&format!("acl|{sub}")) else {
        let shown: String = text(&args[1]).chars().take(128).collect();
        return Reply::error(format!("ERR unknown subcommand '{shown}'. Try ACL HELP."));
    };
    if (meta.arity > 0 && n as i32 != meta.arity) || (n as i32) < -meta.arity {
        return Reply::error(format!("ERR wrong number of arguments for '{}' command", meta.name));
    }
    let file = s.state.config().get("aclfile").unwrap_or_default().to_string();
    match sub.as_str() {
        "setuser" if n >= 3 => setuser(s, args),
        "deluser" if n >= 3 => deluser(s, &args[2..]),
        "getuser" if n == 3 => getuser(s, &text(&args[2])),
        "list" if n == 2 => Reply::Array(s.state.acl.list().into_iter().map(|l| Reply::bulk(Bytes::from(l))).collect()),
        "users" if n == 2 => Reply::Array(s.state.acl.names().into_iter().map(|u| Reply::bulk(Bytes::from(u))).collect()),
        "whoami" if n == 2 => Reply::bulk(Bytes::from(s.user.name.clone())),
        "load" | "save" if file.is_empty() => Reply::error(
            "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
        ),
        "load" if n == 2 => load(s, &file),
        "save" if n == 2 => match s.state.acl.save_file(&file) {
            Ok(()) => Reply::ok(),
            Err(e) => {
                tracing::warn!(target: "shale::acl", file = %file, error = %e, "ACL SAVE failed");
                Reply::error("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
            }
        },
        "cat" if n == 2 => Reply::Array(CATEGORIES.iter().map(|c| Reply::bulk(c.as_bytes())).collect()),
        "cat" if n == 3 => {
            let Some(bits) = category(&text(&args[2])) else {
                let name: String = text(&args[2]).chars().take(128).collect();
                return Reply::error(format!("ERR Unknown category '{name}'"));
            };
            let names = universe().iter().filter(|c| c.categories & bits != 0);
            Reply::Array(names.map(|c| Reply::bulk(Bytes::from(c.name.clone()))).collect())
        }
        "genpass" if n == 2 || n == 3 => genpass(args.get(2)),
        "log" if n == 2 || n == 3 => log(s, args.get(2)),
        "dryrun" if n >= 4 => dryrun(s, &args[2..]),
        "help" if n == 2 => help(),
        _ => Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
            text(&args[1])
        )),
    }
}

fn setuser(s: &mut Session, args: &[Bytes]) -> Reply {
    let name = text(&args[2]);
    let rules: Vec<Vec<u8>> = args[3..].iter().map(|a| a.to_vec()).collect();
    let all_channels = crate::acl::pubsub_default(&s.state.config());
    match s.state.acl.set_user(&name, &rules, all_channels) {
        Ok((entry, Some(_before))) => {
            kill_revoked_subscribers(s, &entry);
            Reply::ok()
        }
        Ok((_, None)) => Reply::ok(),
        Err(e) => Reply::error(format!("ERR {e}")),
    }
}

/// Closes the user's subscribed connections holding a subscription the new rules no longer
/// allow (Redis 7.0 does the same after `ACL SETUSER`).
fn kill_revoked_subscribers(s: &Session, entry: &crate::acl::UserEntry) {
    use crate::services::pubsub::Kind;
    let user = entry.rules();
    for client in s.state.registry.snapshot() {
        if *client.user() != *entry.name {
            continue;
        }
        let revoked = s
            .state
            .pubsub
            .subscriptions_of(client.id)
            .into_iter()
            .any(|(kind, name)| !check::may_subscribe(&user, &name, kind == Kind::Pattern));
        if revoked {
            tracing::info!(target: "shale::acl", client = client.id, user = %entry.name, "closing a subscriber whose channels were revoked");
            client.kill();
        }
    }
}

fn deluser(s: &mut Session, names: &[Bytes]) -> Reply {
    let names: Vec<String> = names.iter().map(|n| text(n)).collect();
    if names.iter().any(|n| n == "default") {
        return Reply::error("ERR The 'default' user cannot be removed");
    }
    let removed = s.state.acl.delete_users(&names);
    for entry in &removed {
        // The caller, if it deleted its own user, answers this command, then closes.
        let me = entry.name == s.user.name;
        s.state.registry.kill_user(&entry.name, me.then_some(s.id));
        s.closing |= me;
    }
    Reply::Integer(removed.len() as i64)
}

fn getuser(s: &Session, name: &str) -> Reply {
    let Some(entry) = s.state.acl.user(name) else { return Reply::Null };
    let u = entry.rules();
    let field = |k: &str| Reply::bulk(Bytes::copy_from_slice(k.as_bytes()));
    let describe = |sel: &crate::acl::rules::Selector| {
        vec![
            (field("commands"), Reply::bulk(Bytes::from(sel.describe_commands()))),
            (field("keys"), Reply::bulk(Bytes::from(sel.describe_keys()))),
            (field("channels"), Reply::bulk(Bytes::from(sel.describe_channels()))),
        ]
    };
    let mut map = vec![
        (field("flags"), Reply::Set(u.flags().into_iter().map(|f| Reply::bulk(f.as_bytes())).collect())),
        (field("passwords"), Reply::Array(u.passwords.iter().map(|p| Reply::bulk(Bytes::from(p.clone()))).collect())),
    ];
    map.extend(describe(&u.root));
    map.push((field("selectors"), Reply::Array(u.selectors.iter().map(|sel| Reply::Map(describe(sel))).collect())));
    Reply::Map(map)
}

fn load(s: &mut Session, file: &str) -> Reply {
    let all_channels = crate::acl::pubsub_default(&s.state.config());
    match s.state.acl.load_file(file, all_channels) {
        Ok(replaced) => {
            for entry in replaced {
                let me = entry.name == s.user.name;
                s.state.registry.kill_user(&entry.name, me.then_some(s.id));
                if me {
                    s.closing = true;
                }
            }
            Reply::ok()
        }
        Err(e) => Reply::error(format!("ERR {e}")),
    }
}

fn genpass(bits: Option<&Bytes>) -> Reply {
    let bits = match bits {
        None => 256,
        Some(b) => match parse_i64(b) {
            Some(n) => n,
            None => return Reply::error("ERR value is not an integer or out of range"),
        },
    };
    if bits <= 0 || bits > 4096 {
        return Reply::error(
            "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
        );
    }
    let chars = (bits as usize).div_ceil(4);
    let mut random = vec![0u8; chars.div_ceil(2)];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random).expect("system randomness");
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Reply::bulk(Bytes::from(hex[..chars].to_string()))
}

fn log(s: &Session, arg: Option<&Bytes>) -> Reply {
    let count = match arg {
        None => 10,
        Some(a) if a.eq_ignore_ascii_case(b"reset") => {
            s.state.acl.reset_log();
            return Reply::ok();
        }
        Some(a) => match parse_i64(a) {
            Some(n) => n.max(0) as usize,
            None => return Reply::error("ERR value is not an integer or out of range"),
        },
    };
    let now = crate::storage::now_ms();
    let field = |k: &str| Reply::bulk(Bytes::copy_from_slice(k.as_bytes()));
    let entries = s.state.acl.log_entries(count).into_iter().map(|e| {
        Reply::Map(vec![
            (field("count"), Reply::Integer(e.count as i64)),
            (field("reason"), Reply::bulk(e.reason.name().as_bytes())),
            (field("context"), Reply::bulk(e.context.as_bytes())),
            (field("object"), Reply::bulk(Bytes::from(e.object))),
            (field("username"), Reply::bulk(Bytes::from(e.username))),
            (field("age-seconds"), Reply::Double(now.saturating_sub(e.at_ms) as f64 / 1000.0)),
            (field("client-info"), Reply::bulk(Bytes::from(e.client_info))),
        ])
    });
    Reply::Array(entries.collect())
}

fn dryrun(s: &Session, args: &[Bytes]) -> Reply {
    let name = text(&args[0]);
    let Some(entry) = s.state.acl.user(&name) else { return Reply::error(format!("ERR User '{name}' not found")) };
    let call = &args[1..];
    let Some(spec) = lookup(&call[0]) else {
        return Reply::error(format!("ERR Command '{}' not found", text(&call[0])));
    };
    let fullname = &super::meta::called(spec, call).name;
    let n = call.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || n < -spec.arity {
        return Reply::error(format!("ERR wrong number of arguments for '{fullname}' command"));
    }
    match check::check(&entry.rules(), spec, call) {
        Ok(()) => Reply::ok(),
        Err(Denied::Command) => {
            Reply::bulk(Bytes::from(format!("This user has no permissions to run the '{fullname}' command")))
        }
        Err(Denied::Key(i)) => {
            Reply::bulk(Bytes::from(format!("This user has no permissions to access the '{}' key", text(&call[i]))))
        }
        Err(Denied::Channel(i)) => {
            Reply::bulk(Bytes::from(format!("This user has no permissions to access the '{}' channel", text(&call[i]))))
        }
    }
}

/// Checks a call against the session's user. `Err`: the `-NOPERM` reply, the refusal logged.
pub(crate) fn permit(s: &Session, spec: &'static CommandSpec, args: &[Bytes]) -> Result<(), Reply> {
    if s.user.unrestricted() {
        return Ok(());
    }
    let Err(denied) = check::check(&s.user.rules(), spec, args) else { return Ok(()) };
    let (reason, object, reply) = match denied {
        Denied::Command => {
            let full = super::meta::called(spec, args).name.clone();
            let reply = format!("NOPERM this user has no permissions to run the '{full}' command");
            (Reason::Command, full, reply)
        }
        Denied::Key(i) => (
            Reason::Key,
            text(&args[i]),
            "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
        ),
        Denied::Channel(i) => (
            Reason::Channel,
            text(&args[i]),
            "NOPERM this user has no permissions to access one of the channels used as arguments".into(),
        ),
    };
    log_refusal(s, reason, object, None);
    Err(Reply::error(reply))
}

/// Records a refusal in `ACL LOG` (`username`: the name tried, for AUTH).
pub(crate) fn log_refusal(s: &Session, reason: Reason, object: String, username: Option<String>) {
    let max = s.state.config().get("acllog-max-len").and_then(|v| v.parse().ok()).unwrap_or(128usize);
    let entry = LogEntry {
        count: 1,
        reason,
        context: if s.multi.is_some() || s.in_exec { "multi" } else { "toplevel" },
        object,
        username: username.unwrap_or_else(|| s.user.name.clone()),
        at_ms: crate::storage::now_ms(),
        client_info: s.handle.info_line("N", -1, 0, 0, -1),
    };
    s.state.acl.log(entry, max);
}

/// INFO stats lines for ACL refusals.
pub(crate) fn info_fields(s: &Session) -> Vec<(&'static str, String)> {
    let a = &s.state.acl;
    vec![
        ("acl_access_denied_auth", a.denied_auth.load(Ordering::Relaxed).to_string()),
        ("acl_access_denied_cmd", a.denied_cmd.load(Ordering::Relaxed).to_string()),
        ("acl_access_denied_key", a.denied_key.load(Ordering::Relaxed).to_string()),
        ("acl_access_denied_channel", a.denied_channel.load(Ordering::Relaxed).to_string()),
    ]
}

fn help() -> Reply {
    let lines = [
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(lines.iter().map(|l| Reply::Simple((*l).into())).collect())
}
