//! Keyspace notifications (`notify-keyspace-events`): what commands, the expiry cycle and
//! blocked-client serving record about the keys they change, published as Redis publishes it.
//!
//! An event is a class (the `notify-keyspace-events` letters), a name (`set`, `lpush`, `del`,
//! `expired`, …, exactly Redis 7.0's per command) and a key in a logical database. With `K`,
//! it goes to channel `__keyspace@<db>__:<key>` with the event name as the message; with `E`,
//! to `__keyevent@<db>__:<event>` with the key as the message.
//!
//! Commands record events in their [`ExecContext`](crate::storage::ExecContext) while they run;
//! the gate publishes them once the command is done (for EXEC and pipelined write groups, once
//! the whole batch is committed, and not at all if the commit fails), so a subscriber that
//! reads the key on an event always sees the change. Differences from Redis: `expired` comes
//! from the active expiry cycle (ten times a second) — a read of an expired key hides it but
//! does not delete it — and `evicted` never fires (Shale does not evict).

use bytes::Bytes;

use crate::services::pubsub::{Kind, Limits};
use crate::state::ServerState;

/// `K`: publish on `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: publish on `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, …).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted-set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key was evicted (never, in Shale).
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: a read missed its key (not part of `A`).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (none in Shale).
pub const MODULE: u32 = 1 << 13;
/// `n`: a key was created (not part of `A`).
pub const NEW: u32 = 1 << 14;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEvent {
    /// Its class (one of the constants above).
    pub class: u32,
    /// Redis's event name.
    pub event: &'static str,
    /// The logical database of the key.
    pub db: u32,
    /// The key.
    pub key: Bytes,
}

/// True if events of `class` are published under `flags`.
pub fn enabled(flags: u32, class: u32) -> bool {
    flags & class != 0 && flags & (KEYSPACE | KEYEVENT) != 0
}

/// Parses a `notify-keyspace-events` value; None if it holds a character that is no class.
pub fn parse(classes: &str) -> Option<u32> {
    classes.chars().try_fold(0, |flags, c| {
        Some(
            flags
                | match c {
                    'A' => ALL,
                    'g' => GENERIC,
                    '$' => STRING,
                    'l' => LIST,
                    's' => SET,
                    'h' => HASH,
                    'z' => ZSET,
                    'x' => EXPIRED,
                    'e' => EVICTED,
                    'K' => KEYSPACE,
                    'E' => KEYEVENT,
                    't' => STREAM,
                    'm' => KEY_MISS,
                    'd' => MODULE,
                    'n' => NEW,
                    _ => return None,
                },
        )
    })
}

/// The value `CONFIG GET notify-keyspace-events` shows for `flags`, spelled as Redis 7.0 does
/// (`A` for all of its classes, and then — as Redis — without `n`).
pub fn format(flags: u32) -> String {
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
    } else {
        for (class, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & class != 0 {
                out.push(c);
            }
        }
    }
    for (class, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & class != 0 {
            out.push(c);
        }
    }
    out
}

/// Publishes `events` (recorded under the flags then in force) to the pub/sub hub.
pub fn publish(state: &ServerState, events: Vec<KeyEvent>) {
    if events.is_empty() {
        return;
    }
    let flags = state.notify_flags();
    let limits = Limits::from_config(state.config().get("client-output-buffer-limit").unwrap_or_default());
    for e in events {
        if !enabled(flags, e.class) {
            continue;
        }
        let event = Bytes::from_static(e.event.as_bytes());
        if flags & KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{}__:", e.db).into_bytes();
            channel.extend_from_slice(&e.key);
            state.pubsub.publish(Kind::Channel, &Bytes::from(channel), &event, limits);
        }
        if flags & KEYEVENT != 0 {
            let channel = Bytes::from(format!("__keyevent@{}__:{}", e.db, e.event));
            state.pubsub.publish(Kind::Channel, &channel, &e.key, limits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_as_redis_spells_them() {
        for (set, shown) in
            [("gKE", "gKE"), ("$lshzxeKE", "$lshzxeKE"), ("KA", "AK"), ("EA", "AE"), ("", ""), ("Em", "Em")]
        {
            assert_eq!(format(parse(set).unwrap()), shown, "{set}");
        }
        // As Redis: `A` hides `n` when shown (the flag itself stays set).
        let an = parse("AnK").unwrap();
        assert!(an & NEW != 0);
        assert_eq!(format(an), "AK");
        assert_eq!(parse("Kq"), None);
    }

    #[test]
    fn a_class_needs_k_or_e_to_be_published() {
        let flags = parse("g$").unwrap();
        assert!(!enabled(flags, GENERIC));
        let flags = parse("g$K").unwrap();
        assert!(enabled(flags, GENERIC) && enabled(flags, STRING) && !enabled(flags, LIST));
        assert!(!enabled(parse("AE").unwrap(), KEY_MISS));
    }
}
