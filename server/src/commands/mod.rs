//! The command table: every command declared once with its arity, flags, key positions and
//! handler. Dispatch, arity errors, `COMMAND` and (later) key locking and WATCH read it.

mod connection;
mod keys;
mod server;
mod strings;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;

use crate::resp::{Protocol, Reply};
use crate::state::ServerState;

/// One client's connection state.
#[derive(Debug)]
pub struct Session {
    /// `CLIENT ID`.
    pub id: u64,
    /// RESP2 or RESP3 (`HELLO`).
    pub protocol: Protocol,
    /// Selected database.
    pub db: u32,
    /// `CLIENT SETNAME`.
    pub name: Option<Bytes>,
    /// Close the connection once the current replies are written (`QUIT`).
    pub closing: bool,
    /// Passed AUTH (always true without `requirepass`).
    pub authenticated: bool,
    /// The server.
    pub state: Arc<ServerState>,
}

impl Session {
    /// A new client of `state`.
    pub fn new(state: Arc<ServerState>) -> Self {
        let id = state.next_client_id.fetch_add(1, Ordering::Relaxed);
        let authenticated = state.config.requirepass.is_none();
        Session { id, protocol: Protocol::Resp2, db: 0, name: None, closing: false, authenticated, state }
    }
}

/// A command implementation: the session and the full argument vector (name first).
pub type Handler = fn(&mut Session, &[Bytes]) -> Reply;

/// A command's declaration.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Argument count including the name; negative means "at least".
    pub arity: i32,
    /// Redis command flags (`readonly`, `write`, `fast`, …).
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i32,
    /// Last key argument (-1: the last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// The implementation.
    pub handler: Handler,
}

/// Every command, by name.
static TABLE: LazyLock<HashMap<&'static str, &'static CommandSpec>> = LazyLock::new(|| {
    [connection::COMMANDS, server::COMMANDS, strings::COMMANDS, keys::COMMANDS]
        .into_iter()
        .flatten()
        .map(|c| (c.name, c))
        .collect()
});

/// The reply for an engine failure (the engine logs the details).
pub fn engine_error(e: lsm::Error) -> Reply {
    tracing::error!(target: "shale::storage", error = %e, "engine error");
    Reply::error(format!("ERR storage engine: {e}"))
}

/// Looks a command up by name, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    TABLE.get(lower.as_str()).copied()
}

/// All commands, in name order.
pub fn all() -> Vec<&'static CommandSpec> {
    let mut v: Vec<_> = TABLE.values().copied().collect();
    v.sort_by_key(|c| c.name);
    v
}

/// Runs one request (a non-empty argument vector).
pub fn dispatch(session: &mut Session, args: &[Bytes]) -> Reply {
    let Some(name) = args.first() else { return Reply::error("ERR empty command") };
    session.state.commands_processed.fetch_add(1, Ordering::Relaxed);
    let spec = lookup(name);
    if !session.authenticated && !spec.is_some_and(|c| c.flags.contains(&"no_auth") || c.name == "quit") {
        return Reply::error("NOAUTH Authentication required.");
    }
    let Some(spec) = spec else { return unknown_command(args) };
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return Reply::error(format!("ERR wrong number of arguments for '{}' command", spec.name));
    }
    (spec.handler)(session, args)
}

/// Redis's reply to an unknown command: the name and the start of its arguments.
fn unknown_command(args: &[Bytes]) -> Reply {
    let mut shown = String::new();
    for a in &args[1..] {
        if shown.len() >= 128 {
            break;
        }
        let text = String::from_utf8_lossy(a);
        let room = 128 - shown.len();
        shown.push('\'');
        shown.extend(text.chars().take(room));
        shown.push_str("' ");
    }
    let name: String = String::from_utf8_lossy(&args[0]).chars().take(128).collect();
    Reply::error(format!("ERR unknown command '{name}', with args beginning with: {shown}"))
}

/// Parses an argument as a Redis integer (`string2ll` rules).
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    crate::resp::parse_int(arg)
}

#[cfg(test)]
mod tests;
