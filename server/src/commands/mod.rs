//! The command table: every command declared once with its arity, flags, key positions and
//! handler, by family (one file each). The gate ([`crate::exec::gate`]), arity errors,
//! `COMMAND`, EXEC's key locking and WATCH all read it.

pub(crate) mod acl;
mod bitfield;
mod bitmaps;
mod blocking_pops;
mod client;
mod client_tracking;
mod cluster;
mod collections;
mod config;
mod connection;
mod docs;
mod hashes;
mod hyperloglog;
mod info;
pub(crate) mod introspection;
mod keys;
mod lists;
pub mod meta;
mod named_locks;
mod pubsub;
mod redis_meta;
pub(crate) mod replication;
mod scripting;
mod server;
pub use server::{configure_allocator, purge_allocator};
mod sets;
mod sort;
mod sorted_sets;
mod streams;
mod string_range;
mod strings;
mod transactions;

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::Bytes;

pub use crate::exec::{dispatch, BlockRequest, ReplyMode, Session};
use crate::resp::Reply;
pub use connection::REDIS_COMPAT_VERSION;
pub(crate) use pubsub::{allowed_when_subscribed, subscriber};
pub use replication::remove_stale_snapshots;
pub(crate) use streams::{read_may_block, stream_value, write_stream_value};
pub(crate) use transactions::is_control as is_transaction_control;
pub(crate) use transactions::{clear_watches, command_keys, first_queued_key, queued_keys, run_buffered, Part};

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
    /// `flags` and the server's own traits of the command as [`flag`] bits, worked out when
    /// the table is compiled: the gate tests bits on every call, not strings.
    pub bits: u32,
}

/// The hasher of the command table's maps, keyed by command names and table entries'
/// addresses: FNV-1a over a name's few bytes, one multiplication for an address. The tables
/// are fixed at start, so a client's choice of names can only probe them, never fill one
/// bucket (SipHash's protection buys nothing here and cost a twentieth of a PING's CPU).
type TableHasher = std::hash::BuildHasherDefault<FastHasher>;

/// See [`TableHasher`].
struct FastHasher(u64);

impl Default for FastHasher {
    fn default() -> Self {
        FastHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Bits of [`CommandSpec::bits`].
pub mod flag {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const NO_AUTH: u32 = 1 << 3;
    pub const NO_MULTI: u32 = 1 << 4;
    pub const PUBSUB: u32 = 1 << 5;
    pub const FAST: u32 = 1 << 6;
    pub const SKIP_MONITOR: u32 = 1 << 7;
    pub const BLOCKING: u32 = 1 << 8;
    pub const NOSCRIPT: u32 = 1 << 9;
    pub const MAY_REPLICATE: u32 = 1 << 10;
    pub const STALE: u32 = 1 << 11;
    /// Not a Redis flag: pipelined calls may run as one write group (`exec::write_group`).
    pub const GROUPABLE: u32 = 1 << 16;
    /// Not a Redis flag: a groupable command that never runs on a connection's own task
    /// (`exec::queued`).
    pub const NOT_ON_TASK: u32 = 1 << 17;
    /// Not a Redis flag: a read that may run on a connection's own task with memory-only
    /// engine reads (`exec::in_memory`).
    pub const MEMORY_READ: u32 = 1 << 18;

    /// The Redis flags with a bit.
    pub(super) const NAMES: &[(&str, u32)] = &[
        ("write", WRITE),
        ("readonly", READONLY),
        ("denyoom", DENYOOM),
        ("no_auth", NO_AUTH),
        ("no_multi", NO_MULTI),
        ("pubsub", PUBSUB),
        ("fast", FAST),
        ("skip_monitor", SKIP_MONITOR),
        ("blocking", BLOCKING),
        ("noscript", NOSCRIPT),
        ("may_replicate", MAY_REPLICATE),
        ("stale", STALE),
    ];
}

/// `a == b`, at compile time.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether `list` holds `name`, at compile time.
const fn listed(list: &[&str], name: &str) -> bool {
    let mut i = 0;
    while i < list.len() {
        if same(list[i], name) {
            return true;
        }
        i += 1;
    }
    false
}

/// The [`flag`] bits of a command named `name` with Redis flags `flags`.
const fn bits_of(name: &str, flags: &[&str]) -> u32 {
    let mut bits = 0;
    let mut i = 0;
    while i < flag::NAMES.len() {
        if listed(flags, flag::NAMES[i].0) {
            bits |= flag::NAMES[i].1;
        }
        i += 1;
    }
    if listed(crate::exec::write_group::GROUPABLE, name) {
        bits |= flag::GROUPABLE;
    }
    if listed(crate::exec::queued::NOT_HERE, name) {
        bits |= flag::NOT_ON_TASK;
    }
    if listed(crate::exec::in_memory::MEMORY_READS, name) {
        bits |= flag::MEMORY_READ;
    }
    bits
}

impl CommandSpec {
    /// Its ACL universe entry and Redis's description: every call needs them (command stats,
    /// ACL checks, key specs), so they are looked up by name once per table entry and found
    /// by the entry's address.
    pub fn known(&self) -> meta::Known {
        static KNOWN: LazyLock<HashMap<usize, meta::Known, TableHasher>> = LazyLock::new(|| {
            TABLE.values().map(|c| (*c as *const CommandSpec as usize, meta::Known::of(c.name))).collect()
        });
        KNOWN.get(&(self as *const CommandSpec as usize)).copied().unwrap_or_else(|| meta::Known::of(self.name))
    }

    /// Whether the command has every bit of `bits` ([`flag`]).
    #[inline]
    pub const fn has(&self, bits: u32) -> bool {
        self.bits & bits == bits
    }

    /// Positions of the key arguments the table declares (`first_key` to `last_key` by
    /// `step`) within a call of `argc` arguments; none when `first_key` is 0 (commands that
    /// locate their keys by a count or a keyword).
    pub fn key_positions(&self, argc: usize) -> impl Iterator<Item = usize> {
        let last = if self.last_key < 0 { argc as i32 + self.last_key } else { self.last_key };
        let (first, last) = if self.first_key > 0 { (self.first_key as usize, last.max(0) as usize) } else { (1, 0) };
        (first..=last.min(argc.saturating_sub(1))).step_by(self.step.max(1) as usize)
    }
}

/// A table entry: name, arity, flags, first key, last key, key step, handler.
pub(super) const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    handler: Handler,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        handler,
        bits: bits_of(name, flags),
    }
}

/// Key positions of a command with one key, the first argument.
pub(super) const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
/// Key positions of a command without keys.
pub(super) const NO_KEYS: (i32, i32, i32) = (0, 0, 0);

/// Every command, by name.
static TABLE: LazyLock<HashMap<&'static str, &'static CommandSpec, TableHasher>> = LazyLock::new(|| {
    [
        connection::COMMANDS,
        server::COMMANDS,
        info::COMMANDS,
        introspection::COMMANDS,
        client::COMMANDS,
        cluster::COMMANDS,
        config::COMMANDS,
        strings::COMMANDS,
        strings::MORE,
        string_range::COMMANDS,
        bitmaps::COMMANDS,
        bitfield::COMMANDS,
        hyperloglog::COMMANDS,
        keys::COMMANDS,
        keys::relocate::COMMANDS,
        keys::inspect::COMMANDS,
        keys::dump::COMMANDS,
        keys::migrate::COMMANDS,
        hashes::COMMANDS,
        streams::COMMANDS,
        streams::GROUP_COMMANDS,
        sets::COMMANDS,
        sorted_sets::COMMANDS,
        sorted_sets::geo::COMMANDS,
        lists::COMMANDS,
        sort::COMMANDS,
        blocking_pops::COMMANDS,
        transactions::COMMANDS,
        pubsub::COMMANDS,
        named_locks::COMMANDS,
        acl::COMMANDS,
        replication::COMMANDS,
        scripting::COMMANDS,
    ]
    .into_iter()
    .flatten()
    .map(|c| (c.name, c))
    .collect()
});

/// The reply for an engine failure (the engine logs the details). A write the engine cannot
/// make durable (a full disk, an I/O error, the read-only state that follows) answers like
/// Redis's failed persistence, `-MISCONF`; reads keep working meanwhile.
pub fn engine_error(e: lsm::Error) -> Reply {
    tracing::error!(target: "shale::storage", error = %e, "engine error");
    match e {
        lsm::Error::Io(_) | lsm::Error::Poisoned(_) => Reply::error(format!(
            "MISCONF Errors writing to the storage engine: {e}. Writes are refused until it recovers; reads keep working."
        )),
        e => Reply::error(format!("ERR storage engine: {e}")),
    }
}

/// Looks a command up by name, case-insensitively.
///
/// A request's name is looked up several times on its way (the connection's checks, the
/// gate, write groups), so names of up to [`SHORT_NAME`] bytes — all but a few — are found in
/// [`SHORT_TABLE`]: the name lowercased into two words, one multiplication, and a probe that
/// compares the words, where the map costs a byte-at-a-time hash, UTF-8 validation and a
/// string compare (every command's name in turn: ~22 ns a lookup instead of ~40).
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.len() <= SHORT_NAME {
        return SHORT_TABLE.get(name);
    }
    let mut buf = [0u8; 32];
    let lower = buf.get_mut(..name.len())?;
    for (d, c) in lower.iter_mut().zip(name) {
        *d = c.to_ascii_lowercase();
    }
    TABLE.get(std::str::from_utf8(lower).ok()?).copied()
}

/// Names this long or shorter are in [`SHORT_TABLE`] (all but a few: `zremrangebyscore` is
/// 16 bytes).
const SHORT_NAME: usize = 15;

/// The commands whose names are at most [`SHORT_NAME`] bytes, by their names' words (see
/// [`ShortTable::words`]), in an open-addressed table at most half full.
struct ShortTable {
    slots: Box<[Option<ShortEntry>]>,
    /// 64 minus the table size's bits: a slot is the top bits of a multiplicative hash.
    shift: u32,
}

/// A [`ShortTable`] entry: the name's words and the command.
type ShortEntry = (u64, u64, &'static CommandSpec);

impl ShortTable {
    /// A name of at most [`SHORT_NAME`] bytes as two words: its bytes lowercased and padded
    /// with zeros, and its length in the second word's top byte, which no name byte reaches
    /// (so "get" and "get\0" differ).
    /// Lowercased eight bytes at a time ([`lowercase_word`]), not byte by byte.
    #[inline]
    fn words(name: &[u8]) -> (u64, u64) {
        let mut bytes = [0u8; 16];
        bytes[..name.len()].copy_from_slice(name);
        let lo = u64::from_le_bytes(bytes[..8].try_into().expect("eight bytes"));
        let hi = u64::from_le_bytes(bytes[8..].try_into().expect("eight bytes"));
        (lowercase_word(lo), lowercase_word(hi) | (name.len() as u64) << 56)
    }

    #[inline]
    fn slot(&self, (lo, hi): (u64, u64)) -> usize {
        ((lo ^ hi.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot a probe goes on to from `i` (the size is a power of two).
    #[inline]
    fn after(&self, i: usize) -> usize {
        (i + 1) & (self.slots.len() - 1)
    }

    fn build(table: &HashMap<&'static str, &'static CommandSpec, TableHasher>) -> ShortTable {
        let size = (table.len() * 2).next_power_of_two();
        let mut t = ShortTable { slots: vec![None; size].into_boxed_slice(), shift: 64 - size.trailing_zeros() };
        for (name, spec) in table.iter().filter(|(n, _)| n.len() <= SHORT_NAME) {
            let words = Self::words(name.as_bytes());
            let mut i = t.slot(words);
            while t.slots[i].is_some() {
                i = t.after(i);
            }
            t.slots[i] = Some((words.0, words.1, spec));
        }
        t
    }

    #[inline]
    fn get(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        let words = Self::words(name);
        let mut i = self.slot(words);
        loop {
            match self.slots[i] {
                Some((lo, hi, spec)) if (lo, hi) == words => return Some(spec),
                Some(_) => i = self.after(i),
                None => return None,
            }
        }
    }
}

/// Each byte of `w` as `u8::to_ascii_lowercase` maps it: `A`-`Z` get bit 5 set, every other
/// byte (including those over 0x7f) stays. Per byte, with `h` its low seven bits: `h + 0x3f`
/// reaches 0x80 iff `h >= b'A'`, `h + 0x25` iff `h > b'Z'` (neither carries into the next
/// byte), and the byte's own top bit rules out non-ASCII bytes.
#[inline]
fn lowercase_word(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const TOP: u64 = 0x8080_8080_8080_8080;
    let h = w & LOW7;
    let at_least_a = h + 0x3f3f_3f3f_3f3f_3f3f;
    let past_z = h + 0x2525_2525_2525_2525;
    let upper = at_least_a & !past_z & !w & TOP;
    w | (upper >> 2)
}

static SHORT_TABLE: LazyLock<ShortTable> = LazyLock::new(|| ShortTable::build(&TABLE));

/// All commands, in name order.
pub fn all() -> Vec<&'static CommandSpec> {
    let mut v: Vec<_> = TABLE.values().copied().collect();
    v.sort_by_key(|c| c.name);
    v
}

/// Redis's reply to an unknown command: the name and the start of its arguments.
pub(crate) fn unknown_command(args: &[Bytes]) -> Reply {
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
mod range_reply_tests;
#[cfg(test)]
mod tests;
