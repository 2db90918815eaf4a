//! `CLIENT TRACKING`, `CLIENT CACHING`, `CLIENT GETREDIR` and `CLIENT TRACKINGINFO`: the
//! commands of client-side caching (the table and the invalidations are
//! [`crate::services::tracking`]).

use bytes::Bytes;

use super::{parse_i64, Session};
use crate::resp::Reply;
use crate::services::tracking::Options;

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]… [BCAST] [OPTIN] [OPTOUT] [NOLOOP]`.
pub(super) fn tracking(s: &mut Session, args: &[Bytes]) -> Reply {
    let mut options = Options::default();
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        let a = &args[i];
        if is(a, "redirect") && more {
            i += 1;
            if options.redirect != 0 {
                return Reply::error("ERR A client can only redirect to a single other client");
            }
            let Some(id) = parse_i64(&args[i]) else {
                return Reply::error("ERR value is not an integer or out of range");
            };
            if id <= 0 || !s.state.storage.tracking.is_connected(id as u64) {
                return Reply::error("ERR The client ID you want redirect to does not exist");
            }
            options.redirect = id as u64;
        } else if is(a, "bcast") {
            options.bcast = true;
        } else if is(a, "optin") {
            options.optin = true;
        } else if is(a, "optout") {
            options.optout = true;
        } else if is(a, "noloop") {
            options.noloop = true;
        } else if is(a, "prefix") && more {
            i += 1;
            options.prefixes.push(args[i].clone());
        } else {
            return Reply::error("ERR syntax error");
        }
        i += 1;
    }
    if is(&args[2], "on") {
        if !options.bcast && !options.prefixes.is_empty() {
            return Reply::error("ERR PREFIX option requires BCAST mode to be enabled");
        }
        if let Err(why) = s.state.storage.tracking.enable(s.id, options) {
            return Reply::error(format!("ERR {why}"));
        }
        s.tracking = true;
    } else if is(&args[2], "off") {
        s.state.storage.tracking.disable(s.id);
        s.tracking = false;
        s.tracking_caching = false;
    } else {
        return Reply::error("ERR syntax error");
    }
    Reply::ok()
}

/// `CLIENT CACHING YES|NO`: whether the next command's keys are remembered (OPTIN / OPTOUT).
pub(super) fn caching(s: &mut Session, arg: &[u8]) -> Reply {
    let Some(info) = s.state.storage.tracking.info(s.id) else {
        return Reply::error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    };
    if is(arg, "yes") {
        if !info.options.optin {
            return Reply::error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.");
        }
    } else if is(arg, "no") {
        if !info.options.optout {
            return Reply::error("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.");
        }
    } else {
        return Reply::error("ERR syntax error");
    }
    s.tracking_caching = true;
    Reply::ok()
}

/// `CLIENT GETREDIR`: the redirect target, 0 for none, -1 when not tracking.
pub(super) fn getredir(s: &Session) -> Reply {
    Reply::Integer(s.state.storage.tracking.info(s.id).map_or(-1, |i| i.options.redirect as i64))
}

/// `CLIENT TRACKINGINFO`: flags, redirect and prefixes, as Redis 7.0 answers.
pub(super) fn trackinginfo(s: &Session) -> Reply {
    let info = s.state.storage.tracking.info(s.id);
    let mut flags = vec![if info.is_some() { "on" } else { "off" }];
    let mut redirect = -1;
    let mut prefixes = Vec::new();
    if let Some(info) = info {
        let o = &info.options;
        let caching = s.tracking_caching;
        for (on, name) in [
            (o.bcast, "bcast"),
            (o.optin, "optin"),
            (o.optin && caching, "caching-yes"),
            (o.optout, "optout"),
            (o.optout && caching, "caching-no"),
            (o.noloop, "noloop"),
            (info.broken_redirect, "broken_redirect"),
        ] {
            if on {
                flags.push(name);
            }
        }
        redirect = o.redirect as i64;
        prefixes = o.prefixes.iter().cloned().map(Reply::Bulk).collect();
    }
    Reply::Map(vec![
        (Reply::bulk(&b"flags"[..]), Reply::Set(flags.into_iter().map(|f| Reply::bulk(f.as_bytes())).collect())),
        (Reply::bulk(&b"redirect"[..]), Reply::Integer(redirect)),
        (Reply::bulk(&b"prefixes"[..]), Reply::Array(prefixes)),
    ])
}

/// CLIENT LIST's tracking flags (`t`, `R` broken redirect, `B` BCAST) and `redir=` of client `id`.
pub(super) fn list_fields(s: &Session, id: u64) -> (String, i64) {
    match s.state.storage.tracking.info(id) {
        None => (String::new(), -1),
        Some(info) => {
            let mut flags = String::from("t");
            if info.broken_redirect {
                flags.push('R');
            }
            if info.options.bcast {
                flags.push('B');
            }
            (flags, info.options.redirect as i64)
        }
    }
}
