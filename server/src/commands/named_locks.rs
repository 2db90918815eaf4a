//! `LOCK name [timeout-ms]` and `UNLOCK name` (SableDB's locking commands). Flagged readonly:
//! locks are ephemeral, so replicas serve them too.

use bytes::Bytes;

use super::{parse_i64, spec, BlockRequest, CommandSpec, Session, NO_KEYS};
use crate::resp::Reply;
use crate::services::named_locks::{Acquire, Release};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("lock", -2, &["readonly", "fast"], NO_KEYS, lock),
    spec("unlock", 2, &["readonly", "fast"], NO_KEYS, unlock),
];

fn name_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Takes the lock; with a timeout, waits for it in line (FIFO) up to that many milliseconds.
fn lock(s: &mut Session, args: &[Bytes]) -> Reply {
    let timeout = match args.len() {
        2 => None,
        3 => match parse_i64(&args[2]) {
            Some(ms) if ms >= 0 => Some(std::time::Duration::from_millis(ms as u64)),
            _ => return Reply::error("ERR timeout is not an integer or out of range"),
        },
        _ => return Reply::error("ERR syntax error"),
    };
    let wait = timeout.is_some() && !s.in_exec;
    match s.state.locks.acquire(&args[1], s.id, wait) {
        Acquire::Acquired => Reply::ok(),
        Acquire::Deadlock => {
            Reply::error(format!("DEADLOCK lock '{}' is already held by this client", name_of(&args[1])))
        }
        Acquire::Busy => Reply::error(format!("LOCKED lock '{}' is held by another client", name_of(&args[1]))),
        Acquire::Wait(rx) => s.block(BlockRequest {
            keys: Vec::new(),
            timeout,
            attempt: Box::new(|_| None),
            timeout_reply: Reply::Null,
            lock: Some((args[1].clone(), rx)),
            replicas: None,
        }),
    }
}

fn unlock(s: &mut Session, args: &[Bytes]) -> Reply {
    match s.state.locks.release(&args[1], s.id) {
        Release::Released => Reply::ok(),
        Release::NotLocked => Reply::error(format!("ERR lock '{}' is not locked", name_of(&args[1]))),
        Release::NotOwner => Reply::error(format!("ERR lock '{}' is held by another client", name_of(&args[1]))),
    }
}
