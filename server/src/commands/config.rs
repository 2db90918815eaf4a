//! `CONFIG GET | SET | REWRITE | RESETSTAT | HELP`, over the parameter table in [`crate::config`].

use std::collections::HashSet;

use bytes::Bytes;

use super::{spec, CommandSpec, Session};
use crate::config::params;
use crate::glob;
use crate::resp::Reply;

pub(super) static COMMANDS: &[CommandSpec] =
    &[spec("config", -2, &["admin", "noscript", "loading", "stale"], (0, 0, 0), config)];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn config(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = text(&args[1]).to_ascii_lowercase();
    let arity_ok = match sub.as_str() {
        "get" => args.len() >= 3,
        "set" => args.len() >= 4 && args.len().is_multiple_of(2),
        "rewrite" | "resetstat" | "help" => args.len() == 2,
        _ => return Reply::error(format!("ERR unknown subcommand '{}'. Try CONFIG HELP.", text(&args[1]))),
    };
    if !arity_ok {
        return Reply::error(format!("ERR wrong number of arguments for 'config|{sub}' command"));
    }
    match sub.as_str() {
        "get" => get(s, &args[2..]),
        "set" => set(s, &args[2..]),
        "rewrite" => rewrite(s),
        "resetstat" => {
            s.state.reset_stats();
            Reply::ok()
        }
        _ => help(),
    }
}

/// `CONFIG GET pattern…`: a pattern without glob characters is looked up by name (canonical or
/// alias) and answered under the name as asked, like Redis; others are matched case-insensitively
/// against every name.
fn get(s: &Session, patterns: &[Bytes]) -> Reply {
    let cfg = s.state.config();
    let mut seen = HashSet::new();
    let mut pairs = Vec::new();
    for pattern in patterns {
        let pat = text(pattern);
        if !pat.contains(['*', '?', '[']) {
            if let (Some(p), true) = (params::find(&pat), seen.insert(pat.to_ascii_lowercase())) {
                pairs.push((pat.clone(), cfg.get(p.name).unwrap_or_default().to_string()));
            }
            continue;
        }
        for (name, p) in params::all_names() {
            if glob::matches(pattern, name.as_bytes(), true) && seen.insert(name.to_string()) {
                pairs.push((name.to_string(), cfg.get(p.name).unwrap_or_default().to_string()));
            }
        }
    }
    Reply::Map(pairs.into_iter().map(|(k, v)| (Reply::bulk(Bytes::from(k)), Reply::bulk(Bytes::from(v)))).collect())
}

/// `CONFIG SET name value [name value …]`: all or nothing. As in Redis, every name is checked
/// (unknown, protected, immutable, given twice) before any value is.
fn set(s: &Session, pairs: &[Bytes]) -> Reply {
    let mut next = s.state.config().clone();
    let mut names = HashSet::new();
    let mut params = Vec::new();
    let fail = |name: &str, why: &str| {
        Reply::error(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"))
    };
    for pair in pairs.chunks_exact(2) {
        let name = text(&pair[0]);
        let Some(param) = params::find(&name) else {
            return Reply::error(format!("ERR Unknown option or number of arguments for CONFIG SET - '{name}'"));
        };
        if PROTECTED.contains(&param.name) && !s.allowed_by("enable-protected-configs") {
            return fail(&name, "can't set protected config");
        }
        let unchanged = || {
            let mut probe = next.clone();
            probe.apply(param.name, &[text(&pair[1])]).is_ok() && probe.get(param.name) == next.get(param.name)
        };
        let restart_only_unchanged = params::RESTART_ONLY.contains(&param.name) && unchanged();
        if !param.mutable && !restart_only_unchanged {
            return fail(&name, "can't set immutable config");
        }
        if !names.insert(param.name) {
            return fail(&name, "duplicate parameter");
        }
        params.push((name, param, text(&pair[1])));
    }
    let given: Vec<&'static str> = params.iter().map(|(_, p, _)| p.name).collect();
    for (name, param, value) in params {
        if let Err(why) = next.apply(param.name, &[value]) {
            return fail(&name, &why);
        }
    }
    // Listeners move first (that can fail, as in Redis, when a port is taken); anything
    // failing after that moves them back.
    let old = s.state.config().clone();
    let mut moved = Vec::new();
    for (tls, names) in [(false, ["port", "bind"]), (true, ["tls-port", "bind"])] {
        let (from, to) = (endpoints(&old, tls), endpoints(&next, tls));
        if from == to {
            continue;
        }
        if let Err(why) = s.state.listeners.rebind(tls, &from, &to) {
            for (tls, from, to) in moved.into_iter().rev() {
                let _ = s.state.listeners.rebind(tls, &to, &from);
            }
            let blamed = given.iter().find(|n| names.contains(n)).copied().unwrap_or_default();
            return fail(blamed, &why);
        }
        moved.push((tls, from, to));
    }
    match s.state.replace_config(next) {
        Ok(()) => Reply::ok(),
        Err(e) => {
            for (tls, from, to) in moved.into_iter().rev() {
                let _ = s.state.listeners.rebind(tls, &to, &from);
            }
            Reply::error(format!("ERR CONFIG SET failed - {e}"))
        }
    }
}

/// Where the plain (or TLS) listeners of `cfg` listen.
fn endpoints(cfg: &crate::config::Config, tls: bool) -> crate::net::Endpoints {
    let port = if tls { cfg.get("tls-port").and_then(|p| p.parse().ok()).unwrap_or(0) } else { cfg.port };
    crate::net::Endpoints { bind: cfg.bind.clone(), port }
}

/// Parameters `CONFIG SET` may change only where `enable-protected-configs` allows it (as in
/// Redis: they name files the server writes).
const PROTECTED: &[&str] = &["dir", "dbfilename"];

fn rewrite(s: &Session) -> Reply {
    let cfg = s.state.config();
    let Some(path) = cfg.file.clone() else { return Reply::error("ERR The server is running without a config file") };
    // Users go into the configuration file unless they live in an aclfile.
    let users = cfg.get("aclfile").is_none_or(str::is_empty).then(|| s.state.acl.list());
    match crate::config::rewrite(&cfg, &path, users.as_deref()) {
        Ok(()) => Reply::ok(),
        Err(e) => {
            tracing::warn!(target: "shale::config", error = %e, path = %path.display(), "CONFIG REWRITE failed");
            Reply::error(format!("ERR Rewriting config file: {e}"))
        }
    }
}

fn help() -> Reply {
    let lines = [
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "REWRITE",
        "    Rewrite the configuration file.",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(lines.iter().map(|l| Reply::Simple((*l).into())).collect())
}
