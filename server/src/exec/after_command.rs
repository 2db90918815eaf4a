//! What a command leaves for after it has run, before its reply: lazy expiry of the keys its
//! reads found expired, the access times of the keys it used, and the keys a `CLIENT TRACKING`
//! client read (see [`super::gate::run_command`]).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::session::Session;
use crate::commands::flag;
use crate::commands::{meta, CommandSpec};

/// Lazy expiry, after a command and before its reply: the keys its reads found expired are
/// deleted and counted as Redis deletes them on access — except on a replica (its primary's
/// deletes arrive through replication) and while `CLIENT PAUSE` is in force (the dataset must
/// not change); reads treat them as missing either way, and the active cycle deletes them
/// later.
pub(super) fn expire_seen(s: &mut Session) {
    if s.exec.voided() {
        return;
    }
    let seen = s.exec.take_expired_seen();
    if seen.is_empty() || s.state.replication.is_replica() || s.state.pause_remaining(true).is_some() {
        return;
    }
    match s.state.storage.expire_seen(&s.exec, seen) {
        Ok(n) => {
            s.state.expired_keys.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => tracing::warn!(target: "shale::expire", error = %e, "lazy expiry failed; the active cycle retries"),
    }
}

/// `CLIENT TRACKING` (default mode): remember the keys a read-only command read, as Redis does
/// after `call()`. A script's own commands are not remembered one by one: if one of them is a
/// read, the script's declared keys are, once it returns (EVAL_RO and FCALL_RO included).
pub(super) fn remember_keys(s: &mut Session, spec: &CommandSpec, args: &[Bytes]) {
    let read = spec.has(flag::READONLY);
    if s.in_script {
        s.tracking_script_read |= read;
        return;
    }
    let script = matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro");
    let remember = if script { std::mem::take(&mut s.tracking_script_read) } else { read };
    if !remember || spec.has(flag::PUBSUB) {
        return;
    }
    let keys = meta::keys(spec, args);
    let max_keys = s.state.config().tracking_table_max_keys;
    s.state.storage.tracking.remember(s.id, keys.iter().map(|k| &args[k.pos][..]), s.tracking_caching, max_keys);
}

/// A write may have deleted or replaced a key that clients wait on: their attempts run again
/// after it (a blocked XREADGROUP is then told that its stream or group is gone; other waiters
/// find nothing and keep waiting).
pub(super) fn wake_changed_keys(s: &mut Session, spec: &CommandSpec, args: &[Bytes]) {
    if !spec.has(flag::WRITE) || s.state.blocking.blocked_clients() == 0 {
        return;
    }
    match spec.name {
        "flushall" | "flushdb" | "swapdb" => {
            let waited = s.state.blocking.waited_keys(s.db);
            s.signals.extend(waited);
        }
        _ => {
            for k in meta::keys(spec, args) {
                let key = &args[k.pos];
                if s.state.blocking.has_waiters(s.db, key) {
                    s.signals.push(key.clone());
                }
            }
        }
    }
}

/// Records the use of the command's keys in the access-time table (`OBJECT IDLETIME | FREQ`),
/// unless it is one of the commands Redis runs without touching them (TYPE, TTL, EXISTS, …).
pub(super) fn touch_keys(s: &Session, spec: &CommandSpec, args: &[Bytes]) {
    if !crate::services::access_times::touches(spec.name) {
        return;
    }
    let access = &s.state.access;
    if spec.first_key > 0 {
        for i in spec.key_positions(args.len()) {
            access.touch(s.db, &args[i]);
        }
    } else if !spec.has(flag::PUBSUB) {
        // Keys found by the command's key specs (numkeys, STREAMS …).
        for k in meta::keys(spec, args) {
            access.touch(s.db, &args[k.pos]);
        }
    }
}
