//! CLUSTER, READONLY, READWRITE and ASKING as a standalone redis-server answers them: Shale
//! runs without cluster support, so they exist (clients probe them, COMMAND lists them) and
//! refuse with Redis's error.

use bytes::Bytes;

use super::{meta, spec, CommandSpec, Session, NO_KEYS};
use crate::resp::Reply;

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("cluster", -2, &[], NO_KEYS, cluster),
    spec("readonly", 1, &["loading", "stale", "fast"], NO_KEYS, disabled),
    spec("readwrite", 1, &["loading", "stale", "fast"], NO_KEYS, disabled),
    spec("asking", 1, &["fast"], NO_KEYS, disabled),
];

fn disabled(_: &mut Session, _: &[Bytes]) -> Reply {
    Reply::error("ERR This instance has cluster support disabled")
}

/// Every known subcommand (the gate checked its arity) gets the refusal; others the usual
/// unknown-subcommand error.
fn cluster(s: &mut Session, args: &[Bytes]) -> Reply {
    let name = format!("cluster|{}", String::from_utf8_lossy(&args[1]).to_ascii_lowercase());
    if meta::redis_command(&name).is_none() {
        return Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(&args[1])
        ));
    }
    disabled(s, args)
}
