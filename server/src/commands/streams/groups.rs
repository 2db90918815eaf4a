//! Consumer groups: XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, and what XINFO
//! shows of them.
//!
//! A group's state lives in element records beside the stream's entries, under the same
//! incarnation (so DEL, COPY, RENAME and MOVE take it along):
//!
//! ```text
//! group              'g' | name                                   -> last ID (ms, seq) | entries read i64 | pending | consumers
//! pending entry      'p' | len u32 BE | group | id                -> delivery time ms | deliveries | consumer
//! consumer           'c' | len u32 BE | group | consumer          -> seen time ms | pending
//! consumer's pending 'q' | len u32 BE | group | len u32 BE | consumer | id  -> (empty)
//! ```
//! (u64 LE numbers; IDs as 16 big-endian bytes, so the group's and each consumer's pending
//! entries are in ID order.) Each command reads what it needs by key and writes what it
//! changed in one batch: an XREADGROUP, XACK or XCLAIM of `n` entries costs O(n log N).

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    block_on, damaged, entry_reply, parse_id, parse_read, put, stream_at, streams_reply, strict_id, IdSyntax, StreamId,
    StreamMeta, NOT_INTEGER,
};
use crate::commands::collections::SYNTAX;
use crate::commands::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::STREAM;
use crate::state::ServerState;
use crate::storage::{now_ms, prefix_end, ExecContext, KeyType, Meta, View};

pub(in crate::commands) static COMMANDS: &[CommandSpec] = &[
    spec("xgroup", -2, &["write"], (2, 2, 1), xgroup),
    spec("xreadgroup", -7, &["write", "blocking"], (0, 0, 0), xreadgroup),
    spec("xack", -4, &["write", "fast"], ONE_KEY, xack),
    spec("xpending", -3, &["readonly"], ONE_KEY, xpending),
    spec("xclaim", -6, &["write", "fast"], ONE_KEY, xclaim),
    spec("xautoclaim", -6, &["write", "fast"], ONE_KEY, xautoclaim),
];

/// `entries_read` when it is not known (Redis's `SCG_INVALID_ENTRIES_READ`).
const UNKNOWN_READS: i64 = -1;

fn id_bytes(id: StreamId) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&id.ms.to_be_bytes());
    b[8..].copy_from_slice(&id.seq.to_be_bytes());
    b
}

fn id_of(b: &[u8]) -> Option<StreamId> {
    Some(StreamId {
        ms: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
        seq: u64::from_be_bytes(b.get(8..16)?.try_into().ok()?),
    })
}

fn word(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i * 8..i * 8 + 8)?.try_into().ok()?))
}

/// `tag | len | name`.
fn named(tag: u8, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + name.len() + 40);
    k.push(tag);
    k.extend_from_slice(&(name.len() as u32).to_be_bytes());
    k.extend_from_slice(name);
    k
}

fn group_field(name: &[u8]) -> Vec<u8> {
    let mut k = vec![b'g'];
    k.extend_from_slice(name);
    k
}

fn pel_field(group: &[u8], id: StreamId) -> Vec<u8> {
    let mut k = named(b'p', group);
    k.extend_from_slice(&id_bytes(id));
    k
}

fn consumer_field(group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut k = named(b'c', group);
    k.extend_from_slice(consumer);
    k
}

fn consumer_pel_prefix(group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut k = named(b'q', group);
    k.extend_from_slice(&(consumer.len() as u32).to_be_bytes());
    k.extend_from_slice(consumer);
    k
}

/// A consumer group.
#[derive(Debug, Clone)]
pub(super) struct Group {
    pub name: Bytes,
    /// The last ID delivered to the group.
    pub last: StreamId,
    /// Entries the group read (its logical position), or [`UNKNOWN_READS`].
    pub entries_read: i64,
    /// Entries delivered and not acknowledged.
    pub pending: u64,
    pub consumers: u64,
}

impl Group {
    fn decode(name: Bytes, v: &[u8]) -> Option<Group> {
        Some(Group {
            name,
            last: StreamId { ms: word(v, 0)?, seq: word(v, 1)? },
            entries_read: word(v, 2)? as i64,
            pending: word(v, 3)?,
            consumers: word(v, 4)?,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(40);
        for w in [self.last.ms, self.last.seq, self.entries_read as u64, self.pending, self.consumers] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// A pending (delivered, not acknowledged) entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Nack {
    time: u64,
    deliveries: u64,
    consumer: Bytes,
}

impl Nack {
    fn decode(v: &Bytes) -> Option<Nack> {
        Some(Nack { time: word(v, 0)?, deliveries: word(v, 1)?, consumer: v.slice(16..) })
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = BytesMut::with_capacity(16 + self.consumer.len());
        b.put_u64_le(self.time);
        b.put_u64_le(self.deliveries);
        b.put_slice(&self.consumer);
        b.to_vec()
    }
}

/// A consumer's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Consumer {
    seen: u64,
    pending: u64,
}

impl Consumer {
    fn decode(v: &[u8]) -> Option<Consumer> {
        Some(Consumer { seen: word(v, 0)?, pending: word(v, 1)? })
    }

    fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.seen.to_le_bytes());
        b[8..].copy_from_slice(&self.pending.to_le_bytes());
        b
    }
}

/// A command's view of one stream's groups: reads go to the engine, changes are collected and
/// written to the batch at the end ([`Groups::write`]), so a record changed twice is written
/// once and later reads in the same command see the change.
struct Groups<'v, 'a> {
    view: &'v View<'a>,
    uid: u64,
    consumers: BTreeMap<(Bytes, Bytes), Option<Consumer>>,
    nacks: BTreeMap<(Bytes, StreamId), Option<Nack>>,
    events: Vec<&'static str>,
}

impl<'v, 'a> Groups<'v, 'a> {
    fn new(view: &'v View<'a>, uid: u64) -> Self {
        Groups { view, uid, consumers: BTreeMap::new(), nacks: BTreeMap::new(), events: Vec::new() }
    }

    fn group(&self, name: &[u8]) -> lsm::Result<Option<Group>> {
        match self.view.element(self.uid, &group_field(name))? {
            Some(v) => Ok(Some(Group::decode(Bytes::copy_from_slice(name), &v).ok_or_else(damaged)?)),
            None => Ok(None),
        }
    }

    fn put_group(&self, b: &mut lsm::WriteBatch, g: &Group) {
        self.view.put_element(b, self.uid, &group_field(&g.name), &g.encode());
    }

    fn consumer(&mut self, group: &Bytes, name: &Bytes) -> lsm::Result<Option<Consumer>> {
        if let Some(c) = self.consumers.get(&(group.clone(), name.clone())) {
            return Ok(*c);
        }
        let c = match self.view.element(self.uid, &consumer_field(group, name))? {
            Some(v) => Some(Consumer::decode(&v).ok_or_else(damaged)?),
            None => None,
        };
        self.consumers.insert((group.clone(), name.clone()), c);
        Ok(c)
    }

    /// The consumer, created (and counted in `g`) if missing; its seen time is now (unless
    /// `refresh` is false for an existing one).
    fn consumer_or_create(&mut self, g: &mut Group, name: &Bytes, refresh: bool) -> lsm::Result<Consumer> {
        let now = now_ms();
        let c = match self.consumer(&g.name, name)? {
            Some(mut c) => {
                if refresh {
                    c.seen = now;
                }
                c
            }
            None => {
                g.consumers += 1;
                self.events.push("xgroup-createconsumer");
                Consumer { seen: now, pending: 0 }
            }
        };
        self.consumers.insert((g.name.clone(), name.clone()), Some(c));
        Ok(c)
    }

    fn set_consumer(&mut self, group: &Bytes, name: &Bytes, c: Option<Consumer>) {
        self.consumers.insert((group.clone(), name.clone()), c);
    }

    fn nack(&mut self, group: &Bytes, id: StreamId) -> lsm::Result<Option<Nack>> {
        if let Some(n) = self.nacks.get(&(group.clone(), id)) {
            return Ok(n.clone());
        }
        let n = match self.view.element(self.uid, &pel_field(group, id))? {
            Some(v) => Some(Nack::decode(&v).ok_or_else(damaged)?),
            None => None,
        };
        self.nacks.insert((group.clone(), id), n.clone());
        Ok(n)
    }

    /// Gives pending entry `id` to `consumer` (taking it from its previous owner), with
    /// `time` and `deliveries`; counts it in the group if it is new.
    fn assign(&mut self, g: &mut Group, id: StreamId, consumer: &Bytes, time: u64, deliveries: u64) -> lsm::Result<()> {
        match self.nack(&g.name, id)? {
            Some(old) if old.consumer != *consumer => {
                if let Some(mut c) = self.consumer(&g.name, &old.consumer)? {
                    c.pending = c.pending.saturating_sub(1);
                    self.set_consumer(&g.name, &old.consumer, Some(c));
                }
                self.bump(g, consumer, 1)?;
            }
            Some(_) => {}
            None => {
                g.pending += 1;
                self.bump(g, consumer, 1)?;
            }
        }
        self.nacks.insert((g.name.clone(), id), Some(Nack { time, deliveries, consumer: consumer.clone() }));
        Ok(())
    }

    fn bump(&mut self, g: &Group, consumer: &Bytes, by: u64) -> lsm::Result<()> {
        let mut c = self.consumer(&g.name, consumer)?.unwrap_or(Consumer { seen: now_ms(), pending: 0 });
        c.pending += by;
        self.set_consumer(&g.name, consumer, Some(c));
        Ok(())
    }

    /// Removes pending entry `id` (acknowledged, or its entry is gone).
    fn release(&mut self, g: &mut Group, id: StreamId) -> lsm::Result<bool> {
        let Some(old) = self.nack(&g.name, id)? else { return Ok(false) };
        if let Some(mut c) = self.consumer(&g.name, &old.consumer)? {
            c.pending = c.pending.saturating_sub(1);
            self.set_consumer(&g.name, &old.consumer, Some(c));
        }
        g.pending = g.pending.saturating_sub(1);
        self.nacks.insert((g.name.clone(), id), None);
        Ok(true)
    }

    /// Adds every change to `b`: pending entries (with their consumer's index) and consumers.
    fn write(&mut self, b: &mut lsm::WriteBatch) -> lsm::Result<()> {
        let nacks = std::mem::take(&mut self.nacks);
        for ((group, id), now) in nacks {
            // What is stored now decides which consumer index entry goes.
            let stored = match self.view.element(self.uid, &pel_field(&group, id))? {
                Some(v) => Some(Nack::decode(&v).ok_or_else(damaged)?),
                None => None,
            };
            if stored == now {
                continue;
            }
            if let Some(old) = &stored {
                let mut k = consumer_pel_prefix(&group, &old.consumer);
                k.extend_from_slice(&id_bytes(id));
                self.view.delete_element(b, self.uid, &k);
            }
            match &now {
                Some(n) => {
                    self.view.put_element(b, self.uid, &pel_field(&group, id), &n.encode());
                    let mut k = consumer_pel_prefix(&group, &n.consumer);
                    k.extend_from_slice(&id_bytes(id));
                    self.view.put_element(b, self.uid, &k, b"");
                }
                None => self.view.delete_element(b, self.uid, &pel_field(&group, id)),
            }
        }
        for ((group, name), c) in std::mem::take(&mut self.consumers) {
            match c {
                Some(c) => self.view.put_element(b, self.uid, &consumer_field(&group, &name), &c.encode()),
                None => self.view.delete_element(b, self.uid, &consumer_field(&group, &name)),
            }
        }
        Ok(())
    }

    /// Every group, in name order.
    fn all(&self) -> lsm::Result<Vec<Group>> {
        let mut out = Vec::new();
        for kv in self.view.elements_between(self.uid, b"g", b"h") {
            let (field, v) = kv?;
            out.push(Group::decode(field.slice(1..), &v).ok_or_else(damaged)?);
        }
        Ok(out)
    }

    /// The group's consumers in name order.
    fn consumers_of(&self, group: &[u8]) -> lsm::Result<Vec<(Bytes, Consumer)>> {
        let prefix = named(b'c', group);
        let mut out = Vec::new();
        for kv in self.view.elements_between(self.uid, &prefix, &prefix_end(&prefix)) {
            let (field, v) = kv?;
            out.push((field.slice(prefix.len()..), Consumer::decode(&v).ok_or_else(damaged)?));
        }
        Ok(out)
    }

    /// The group's pending entries with IDs in `[start, end]`, in ID order, at most `limit`
    /// (stored state: call before changing any).
    fn pending(
        &self,
        group: &[u8],
        start: StreamId,
        end: StreamId,
        limit: usize,
    ) -> lsm::Result<Vec<(StreamId, Nack)>> {
        let prefix = named(b'p', group);
        let from = pel_field(group, start);
        let to = end.incr().map_or_else(|| prefix_end(&prefix), |e| pel_field(group, e));
        let mut out = Vec::new();
        for kv in self.view.elements_between(self.uid, &from, &to) {
            if out.len() >= limit {
                break;
            }
            let (field, v) = kv?;
            let id = id_of(&field[prefix.len()..]).ok_or_else(damaged)?;
            out.push((id, Nack::decode(&v).ok_or_else(damaged)?));
        }
        Ok(out)
    }

    /// A consumer's pending IDs from `start` on, at most `limit`.
    fn consumer_pending(
        &self,
        group: &[u8],
        consumer: &[u8],
        start: StreamId,
        limit: usize,
    ) -> lsm::Result<Vec<StreamId>> {
        let prefix = consumer_pel_prefix(group, consumer);
        let mut from = prefix.clone();
        from.extend_from_slice(&id_bytes(start));
        let mut out = Vec::new();
        for kv in self.view.elements_between(self.uid, &from, &prefix_end(&prefix)) {
            if out.len() >= limit {
                break;
            }
            out.push(id_of(&kv?.0[prefix.len()..]).ok_or_else(damaged)?);
        }
        Ok(out)
    }

    /// Adds deleting group `name` and everything it holds to `b`.
    fn destroy(&self, b: &mut lsm::WriteBatch, name: &[u8]) {
        self.view.delete_element(b, self.uid, &group_field(name));
        for tag in [b'p', b'c', b'q'] {
            let prefix = named(tag, name);
            self.view.delete_elements(b, self.uid, &prefix, &prefix_end(&prefix));
        }
    }
}

/// True if a deleted entry may lie in `[start, end]` (Redis's `streamRangeHasTombstones`).
fn has_tombstones(sm: &StreamMeta, start: StreamId, end: StreamId) -> bool {
    if sm.length == 0 || sm.max_deleted == StreamId::default() || sm.first > sm.max_deleted {
        return false;
    }
    start <= sm.max_deleted && sm.max_deleted <= end
}

/// How many entries were added up to `id`, when that can be known (Redis's
/// `streamEstimateDistanceFromFirstEverEntry`).
fn reads_up_to(sm: &StreamMeta, id: StreamId) -> Option<i64> {
    if sm.added == 0 {
        return Some(0);
    }
    if sm.length == 0 && id <= sm.last {
        return Some(sm.added as i64);
    }
    match id.cmp(&sm.last) {
        std::cmp::Ordering::Equal => return Some(sm.added as i64),
        std::cmp::Ordering::Greater => return None,
        std::cmp::Ordering::Less => {}
    }
    if sm.max_deleted == StreamId::default() || sm.max_deleted < sm.first {
        if id < sm.first {
            return Some((sm.added - sm.length) as i64);
        }
        if id == sm.first {
            return Some((sm.added - sm.length + 1) as i64);
        }
    }
    None
}

/// Entries the group has yet to read, when that can be known.
fn lag(sm: &StreamMeta, g: &Group) -> Option<i64> {
    if sm.added == 0 {
        return Some(0);
    }
    if g.entries_read != UNKNOWN_READS && !has_tombstones(sm, g.last, StreamId::MAX) {
        return Some(sm.added as i64 - g.entries_read);
    }
    reads_up_to(sm, g.last).map(|read| sm.added as i64 - read)
}

fn nogroup(key: &[u8], group: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

fn text(k: &str) -> Reply {
    Reply::bulk(Bytes::from(k.to_string()))
}

fn id_reply(id: StreamId) -> Reply {
    Reply::Bulk(id.text())
}

/// Where a command runs: the server, its execution context and its database.
type Place<'a> = (&'a ServerState, &'a ExecContext, u32);

fn place(s: &Session) -> Place<'_> {
    (&s.state, &s.exec, s.db)
}

/// Commits `b` with the stream's metadata, then records `events` for `key`.
fn commit(
    (state, cx, db): Place,
    view: &View,
    mut b: lsm::WriteBatch,
    (key, meta, sm): (&[u8], &Meta, &StreamMeta),
    events: &[&'static str],
) -> Result<(), Reply> {
    put(view, &mut b, key, meta, sm);
    state.storage.write(cx, b).map_err(engine_error)?;
    for e in events {
        cx.notify(STREAM, e, db, key);
    }
    Ok(())
}

/// `XGROUP CREATE | SETID | DESTROY | CREATECONSUMER | DELCONSUMER | HELP`.
fn xgroup(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let syntax = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
            String::from_utf8_lossy(&args[1])
        ))
    };
    if sub == "help" {
        return Reply::Array(
            [
                "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CREATE <key> <groupname> <id|$> [option]",
                "    Create a new consumer group. Options are:",
                "    * MKSTREAM",
                "      Create the empty stream if it does not exist.",
                "    * ENTRIESREAD entries_read",
                "      Set the group's entries_read counter (internal use).",
                "CREATECONSUMER <key> <groupname> <consumer>",
                "    Create a new consumer in the specified group.",
                "DELCONSUMER <key> <groupname> <consumer>",
                "    Remove the specified consumer.",
                "DESTROY <key> <groupname>",
                "    Remove the specified group.",
                "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
                "    Set the current group ID and entries_read counter.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|l| Reply::Simple((*l).into()))
            .collect(),
        );
    }
    if !matches!(sub.as_str(), "create" | "setid" | "destroy" | "createconsumer" | "delconsumer") {
        return Reply::error(format!(
            "ERR unknown subcommand '{}'. Try XGROUP HELP.",
            String::from_utf8_lossy(&args[1])
        ));
    }
    if args.len() < 4 {
        return syntax();
    }
    let (mut mkstream, mut entries_read) = (false, UNKNOWN_READS);
    let mut i = 5;
    while i < args.len() {
        if sub == "create" && args[i].eq_ignore_ascii_case(b"mkstream") {
            mkstream = true;
            i += 1;
        } else if (sub == "create" || sub == "setid")
            && args[i].eq_ignore_ascii_case(b"entriesread")
            && i + 1 < args.len()
        {
            match parse_i64(&args[i + 1]) {
                None => return Reply::error(NOT_INTEGER),
                Some(n) if n < 0 && n != UNKNOWN_READS => {
                    return Reply::error("ERR value for ENTRIESREAD must be positive or -1")
                }
                Some(n) => entries_read = n,
            }
            i += 2;
        } else {
            return syntax();
        }
    }
    let (key, name) = (&args[2], &args[3]);
    let guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let mut b = lsm::WriteBatch::new();
    let found = match stream_at(&view, key) {
        Ok(found) => found,
        Err(e) => return e,
    };
    let (meta, mut sm) = match found {
        Some(found) => found,
        None if mkstream => (view.create(&mut b, key, KeyType::Stream), StreamMeta::default()),
        None => {
            return Reply::error(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            )
        }
    };
    let mut groups = Groups::new(&view, meta.uid);
    let group = match groups.group(name) {
        Ok(g) => g,
        Err(e) => return engine_error(e),
    };
    let no_group = || {
        Reply::error(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(key)
        ))
    };
    let id_arg = |at: usize, strict: bool| -> Result<StreamId, Reply> {
        if args[at][..] == b"$"[..] {
            return Ok(sm.last);
        }
        Ok(parse_id(&args[at], IdSyntax { missing_seq: 0, strict, seq_star: false })?.0)
    };
    let (reply, event) = match (sub.as_str(), group) {
        ("create", _) if !(5..=8).contains(&args.len()) => return syntax(),
        ("create", Some(_)) => return Reply::error("BUSYGROUP Consumer Group name already exists"),
        ("create", None) => {
            let last = match id_arg(4, true) {
                Ok(id) => id,
                Err(e) => return e,
            };
            let g = Group { name: name.clone(), last, entries_read, pending: 0, consumers: 0 };
            groups.put_group(&mut b, &g);
            sm.groups += 1;
            (Reply::ok(), "xgroup-create")
        }
        ("setid", _) if args.len() != 5 && args.len() != 7 => return syntax(),
        ("setid", None) => return no_group(),
        ("setid", Some(mut g)) => {
            g.last = match id_arg(4, false) {
                Ok(id) => id,
                Err(e) => return e,
            };
            g.entries_read = entries_read;
            groups.put_group(&mut b, &g);
            (Reply::ok(), "xgroup-setid")
        }
        ("destroy", _) if args.len() != 4 => return syntax(),
        ("destroy", None) => return Reply::Integer(0),
        ("destroy", Some(_)) => {
            groups.destroy(&mut b, name);
            sm.groups = sm.groups.saturating_sub(1);
            (Reply::Integer(1), "xgroup-destroy")
        }
        ("createconsumer" | "delconsumer", _) if args.len() != 5 => return syntax(),
        ("createconsumer" | "delconsumer", None) => return no_group(),
        ("createconsumer", Some(mut g)) => {
            match groups.consumer(name, &args[4]) {
                Ok(Some(_)) => return Reply::Integer(0),
                Ok(None) => {}
                Err(e) => return engine_error(e),
            }
            if let Err(e) = groups.consumer_or_create(&mut g, &args[4], true) {
                return engine_error(e);
            }
            groups.events.clear();
            groups.put_group(&mut b, &g);
            (Reply::Integer(1), "xgroup-createconsumer")
        }
        ("delconsumer", Some(mut g)) => {
            let consumer = &args[4];
            let c = match groups.consumer(name, consumer) {
                Ok(Some(c)) => c,
                Ok(None) => return Reply::Integer(0),
                Err(e) => return engine_error(e),
            };
            let ids = match groups.consumer_pending(name, consumer, StreamId::default(), usize::MAX) {
                Ok(ids) => ids,
                Err(e) => return engine_error(e),
            };
            for id in &ids {
                if let Err(e) = groups.release(&mut g, *id) {
                    return engine_error(e);
                }
            }
            groups.set_consumer(name, consumer, None);
            g.consumers = g.consumers.saturating_sub(1);
            groups.put_group(&mut b, &g);
            (Reply::Integer(c.pending as i64), "xgroup-delconsumer")
        }
        _ => return syntax(),
    };
    if let Err(e) = groups.write(&mut b) {
        return engine_error(e);
    }
    if let Err(e) = commit(place(s), &view, b, (key, &meta, &sm), &[event]) {
        return e;
    }
    drop(guard);
    // A destroyed group answers its blocked readers with NOGROUP.
    if event == "xgroup-destroy" {
        s.signal(key);
    }
    reply
}

/// Delivers up to `count` (0: all) new entries of `key` to `consumer` of `group` (XREADGROUP
/// with `>`), writing the group's progress and the pending entries. `None` if there is nothing
/// new.
fn deliver_new(
    at: Place,
    view: &View,
    key: &[u8],
    (group, consumer): (&Bytes, &Bytes),
    count: usize,
    noack: bool,
) -> Result<Option<Reply>, Reply> {
    let Some((meta, sm)) = stream_at(view, key)? else { return Ok(None) };
    let mut groups = Groups::new(view, meta.uid);
    let Some(mut g) = groups.group(group).map_err(engine_error)? else { return Ok(None) };
    let Some(start) = g.last.incr() else { return Ok(None) };
    if sm.length == 0 || sm.last < start {
        return Ok(None);
    }
    let mut entries = Vec::new();
    let to = StreamId::MAX;
    let now = now_ms();
    let mut b = lsm::WriteBatch::new();
    groups.consumer_or_create(&mut g, consumer, true).map_err(engine_error)?;
    let mut it = view.elements_between(meta.uid, &start.max(sm.first).field(), super::ENTRIES_END);
    while count == 0 || entries.len() < count {
        let Some(kv) = it.next() else { break };
        let (field, value) = kv.map_err(engine_error)?;
        let id = StreamId::of_field(&field).ok_or_else(|| engine_error(damaged()))?;
        if id > to {
            break;
        }
        if g.entries_read != UNKNOWN_READS && !has_tombstones(&sm, id, StreamId::MAX) {
            g.entries_read += 1;
        } else if sm.added > 0 {
            g.entries_read = reads_up_to(&sm, id).unwrap_or(UNKNOWN_READS);
        }
        g.last = id;
        if !noack {
            groups.assign(&mut g, id, consumer, now, 1).map_err(engine_error)?;
        }
        entries.push(entry_reply(id, &value).map_err(engine_error)?);
    }
    if entries.is_empty() {
        return Ok(None);
    }
    groups.put_group(&mut b, &g);
    groups.write(&mut b).map_err(engine_error)?;
    let events = std::mem::take(&mut groups.events);
    commit(at, view, b, (key, &meta, &sm), &events)?;
    Ok(Some(Reply::Array(entries)))
}

/// XREADGROUP with an ID: the consumer's own pending entries after it, each delivered again.
fn deliver_history(
    at: Place,
    view: &View,
    key: &[u8],
    (group, consumer): (&Bytes, &Bytes),
    after: StreamId,
    count: usize,
) -> Result<Reply, Reply> {
    let Some((meta, sm)) = stream_at(view, key)? else { return Ok(Reply::Array(Vec::new())) };
    let mut groups = Groups::new(view, meta.uid);
    let Some(mut g) = groups.group(group).map_err(engine_error)? else { return Ok(Reply::Array(Vec::new())) };
    let Some(start) = after.incr() else { return Ok(Reply::Array(Vec::new())) };
    groups.consumer_or_create(&mut g, consumer, true).map_err(engine_error)?;
    let limit = if count == 0 { usize::MAX } else { count };
    let ids = groups.consumer_pending(group, consumer, start, limit).map_err(engine_error)?;
    let now = now_ms();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match view.element(meta.uid, &id.field()).map_err(engine_error)? {
            Some(value) => {
                out.push(entry_reply(id, &value).map_err(engine_error)?);
                if let Some(mut n) = groups.nack(group, id).map_err(engine_error)? {
                    n.time = now;
                    n.deliveries += 1;
                    groups.nacks.insert((group.clone(), id), Some(n));
                }
            }
            // Pending, but deleted from the stream: the ID with a null entry.
            None => out.push(Reply::Array(vec![id_reply(id), Reply::NullArray])),
        }
    }
    let mut b = lsm::WriteBatch::new();
    groups.put_group(&mut b, &g);
    groups.write(&mut b).map_err(engine_error)?;
    let events = std::mem::take(&mut groups.events);
    commit(at, view, b, (key, &meta, &sm), &events)?;
    Ok(Reply::Array(out))
}

/// `XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK] STREAMS key … id …`.
fn xreadgroup(s: &mut Session, args: &[Bytes]) -> Reply {
    let read = match parse_read(s, args, true) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some((group, consumer)) = read.group.clone() else { return Reply::error(SYNTAX) };
    let (keys, id_args) = read.streams(args);
    let guard = s.state.storage.lock(&s.exec, s.db, keys.iter().map(|k| &k[..]));
    let view = s.state.storage.view(&s.exec, s.db);
    // Every key and group must exist, and every ID be valid, before anything is read.
    let mut history = Vec::with_capacity(keys.len());
    for (key, arg) in keys.iter().zip(id_args) {
        let exists = match stream_at(&view, key) {
            Ok(Some((meta, _))) => Groups::new(&view, meta.uid).group(&group).map(|g| g.is_some()),
            Ok(None) => Ok(false),
            Err(e) => return e,
        };
        match exists {
            Ok(true) => {}
            Ok(false) => {
                return Reply::error(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(&group)
                ))
            }
            Err(e) => return engine_error(e),
        }
        if arg[..] == b"$"[..] {
            return Reply::error("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.");
        }
        if arg[..] == b">"[..] {
            history.push(None);
            continue;
        }
        match strict_id(arg) {
            Ok(id) => history.push(Some(id)),
            Err(e) => return e,
        }
    }
    let mut found = Vec::new();
    for (key, from) in keys.iter().zip(&history) {
        let served = match from {
            Some(after) => deliver_history(place(s), &view, key, (&group, &consumer), *after, read.count).map(Some),
            None => deliver_new(place(s), &view, key, (&group, &consumer), read.count, read.noack),
        };
        match served {
            Ok(Some(entries)) => found.push((key.clone(), entries)),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    drop(guard);
    let resp3 = s.protocol == crate::resp::Protocol::Resp3;
    if !found.is_empty() {
        return streams_reply(found, resp3);
    }
    let Some(timeout) = read.block else { return Reply::NullArray };
    let db = s.db;
    let count = if read.count == 0 { 1000 } else { read.count };
    let noack = read.noack;
    block_on(s, keys.to_vec(), timeout, Reply::NullArray, move |state, cx: &ExecContext, key| {
        serve_blocked((state, cx, db), key, (&group, &consumer), (count, noack)).map(|r| {
            r.map(|r| match r {
                Reply::Error(_) => r,
                entries => streams_reply(vec![(key.clone(), entries)], resp3),
            })
        })
    })
}

/// A blocked XREADGROUP's attempt on `key`: new entries, or the error that ends its wait when
/// the stream or the group is gone.
fn serve_blocked(
    (state, cx, db): Place,
    key: &Bytes,
    (group, consumer): (&Bytes, &Bytes),
    (count, noack): (usize, bool),
) -> Result<Option<Reply>, Reply> {
    let _guard = state.storage.lock(cx, db, [&key[..]]);
    let view = state.storage.view(cx, db);
    let meta = match view.get(key) {
        Ok(Some(m)) if m.kind == KeyType::Stream => m,
        Ok(_) => return Ok(Some(Reply::error("UNBLOCKED the stream key no longer exists"))),
        Err(e) => return Err(engine_error(e)),
    };
    if Groups::new(&view, meta.uid).group(group).map_err(engine_error)?.is_none() {
        return Ok(Some(Reply::error("NOGROUP the consumer group this client was blocked on no longer exists")));
    }
    deliver_new((state, cx, db), &view, key, (group, consumer), count, noack)
}

/// Runs `f` on group `group` of the stream at `key` (locked for the command), then writes the
/// group, the records `f` changed and the stream's metadata in one batch — unless `f` answers
/// that nothing changed. `missing` answers when the key or the group does not exist.
fn change_group(
    s: &Session,
    (key, group): (&Bytes, &Bytes),
    missing: Reply,
    f: impl FnOnce(&View, &Meta, &mut Groups, &mut Group) -> Result<(Reply, bool), Reply>,
) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&key[..]]);
    let view = s.state.storage.view(&s.exec, s.db);
    let (meta, sm) = match stream_at(&view, key) {
        Ok(Some(found)) => found,
        Ok(None) => return missing,
        Err(e) => return e,
    };
    let mut groups = Groups::new(&view, meta.uid);
    let mut g = match groups.group(group) {
        Ok(Some(g)) => g,
        Ok(None) => return missing,
        Err(e) => return engine_error(e),
    };
    let (reply, changed) = match f(&view, &meta, &mut groups, &mut g) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if !changed {
        return reply;
    }
    let mut b = lsm::WriteBatch::new();
    groups.put_group(&mut b, &g);
    if let Err(e) = groups.write(&mut b) {
        return engine_error(e);
    }
    let events = std::mem::take(&mut groups.events);
    match commit(place(s), &view, b, (key, &meta, &sm), &events) {
        Ok(()) => reply,
        Err(e) => e,
    }
}

/// `XACK key group id …`: how many pending entries were acknowledged.
fn xack(s: &mut Session, args: &[Bytes]) -> Reply {
    change_group(s, (&args[1], &args[2]), Reply::Integer(0), |_, _, groups, g| {
        let mut ids = Vec::with_capacity(args.len() - 3);
        for arg in &args[3..] {
            ids.push(strict_id(arg)?);
        }
        let mut acked = 0;
        for id in ids {
            acked += i64::from(groups.release(g, id).map_err(engine_error)?);
        }
        Ok((Reply::Integer(acked), acked > 0))
    })
}

/// An interval bound of XPENDING / XAUTOCLAIM: `(id` is exclusive.
fn interval(arg: &[u8], missing_seq: u64, start: bool) -> Result<StreamId, Reply> {
    if arg.len() > 1 && arg[0] == b'(' {
        let id = parse_id(&arg[1..], IdSyntax { missing_seq, strict: true, seq_star: false })?.0;
        return if start {
            id.incr().ok_or_else(|| Reply::error("ERR invalid start ID for the interval"))
        } else {
            id.decr().ok_or_else(|| Reply::error("ERR invalid end ID for the interval"))
        };
    }
    Ok(parse_id(arg, IdSyntax { missing_seq, strict: false, seq_star: false })?.0)
}

/// `XPENDING key group [[IDLE min-idle] start end count [consumer]]`.
fn xpending(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, group) = (&args[1], &args[2]);
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return Reply::error(SYNTAX);
    }
    let mut range_args = None;
    if args.len() >= 6 {
        let mut at = 3;
        let mut min_idle = 0;
        if args[3].eq_ignore_ascii_case(b"idle") {
            match parse_i64(&args[4]) {
                Some(n) => min_idle = n,
                None => return Reply::error(NOT_INTEGER),
            }
            if args.len() < 8 {
                return Reply::error(SYNTAX);
            }
            at += 2;
        }
        let Some(count) = args.get(at + 2).and_then(|a| parse_i64(a)) else { return Reply::error(NOT_INTEGER) };
        let start = match interval(&args[at], 0, true) {
            Ok(id) => id,
            Err(e) => return e,
        };
        let end = match interval(&args[at + 1], u64::MAX, false) {
            Ok(id) => id,
            Err(e) => return e,
        };
        if at + 4 < args.len() {
            return Reply::error(SYNTAX);
        }
        range_args = Some((min_idle, start, end, count.max(0) as usize, args.get(at + 3).cloned()));
    }
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match stream_at(&view, key) {
        Ok(Some((meta, _))) => meta,
        Ok(None) => return nogroup(key, group),
        Err(e) => return e,
    };
    let groups = Groups::new(&view, meta.uid);
    let g = match groups.group(group) {
        Ok(Some(g)) => g,
        Ok(None) => return nogroup(key, group),
        Err(e) => return engine_error(e),
    };
    let result = (|| -> lsm::Result<Reply> {
        let Some((min_idle, start, end, count, consumer)) = range_args else {
            if g.pending == 0 {
                return Ok(Reply::Array(vec![Reply::Integer(0), Reply::Null, Reply::Null, Reply::NullArray]));
            }
            let first = groups.pending(group, StreamId::default(), StreamId::MAX, 1)?;
            let prefix = named(b'p', group);
            let last = match view.elements_between(meta.uid, &prefix, &prefix_end(&prefix)).next_back() {
                Some(kv) => id_of(&kv?.0[prefix.len()..]).ok_or_else(damaged)?,
                None => StreamId::default(),
            };
            let owners: Vec<Reply> = groups
                .consumers_of(group)?
                .into_iter()
                .filter(|(_, c)| c.pending > 0)
                .map(|(name, c)| Reply::Array(vec![Reply::Bulk(name), Reply::bulk(Bytes::from(c.pending.to_string()))]))
                .collect();
            return Ok(Reply::Array(vec![
                Reply::Integer(g.pending as i64),
                first.first().map_or(Reply::Null, |(id, _)| id_reply(*id)),
                id_reply(last),
                Reply::Array(owners),
            ]));
        };
        let now = now_ms();
        let mut out = Vec::new();
        let idle_enough = |n: &Nack| min_idle <= 0 || now.saturating_sub(n.time) as i64 >= min_idle;
        let row = |id: StreamId, n: &Nack| {
            Reply::Array(vec![
                id_reply(id),
                Reply::Bulk(n.consumer.clone()),
                Reply::Integer(now.saturating_sub(n.time) as i64),
                Reply::Integer(n.deliveries as i64),
            ])
        };
        if count == 0 {
            return Ok(Reply::Array(out));
        }
        match consumer {
            Some(c) => {
                for id in groups.consumer_pending(group, &c, start, usize::MAX)? {
                    if id > end || out.len() >= count {
                        break;
                    }
                    let Some(v) = view.element(meta.uid, &pel_field(group, id))? else { continue };
                    let n = Nack::decode(&v).ok_or_else(damaged)?;
                    if idle_enough(&n) {
                        out.push(row(id, &n));
                    }
                }
            }
            None => {
                for (id, n) in groups.pending(group, start, end, usize::MAX)? {
                    if out.len() >= count {
                        break;
                    }
                    if idle_enough(&n) {
                        out.push(row(id, &n));
                    }
                }
            }
        }
        Ok(Reply::Array(out))
    })();
    result.unwrap_or_else(engine_error)
}

/// `XCLAIM key group consumer min-idle-time id … [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE]
/// [JUSTID] [LASTID id]`.
fn xclaim(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let missing = nogroup(key, group);
    change_group(s, (key, group), missing, |view, meta, groups, g| {
        let Some(min_idle) = parse_i64(&args[4]) else {
            return Err(Reply::error("ERR Invalid min-idle-time argument for XCLAIM"));
        };
        let mut ids = Vec::new();
        let mut j = 5;
        while j < args.len() {
            match strict_id(&args[j]) {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            j += 1;
        }
        let now = now_ms() as i64;
        let (mut force, mut justid, mut retry, mut time, mut last_id) = (false, false, None, None, StreamId::default());
        while j < args.len() {
            let more = args.len() - 1 - j;
            let opt = args[j].to_ascii_lowercase();
            let number = |what: &str| {
                parse_i64(&args[j + 1])
                    .ok_or_else(|| Reply::error(format!("ERR Invalid {what} option argument for XCLAIM")))
            };
            match opt.as_slice() {
                b"force" => force = true,
                b"justid" => justid = true,
                b"idle" if more > 0 => {
                    time = Some(now - number("IDLE")?);
                    j += 1;
                }
                b"time" if more > 0 => {
                    time = Some(number("TIME")?);
                    j += 1;
                }
                b"retrycount" if more > 0 => {
                    retry = Some(number("RETRYCOUNT")?);
                    j += 1;
                }
                b"lastid" if more > 0 => {
                    last_id = strict_id(&args[j + 1])?;
                    j += 1;
                }
                _ => {
                    return Err(Reply::error(format!(
                        "ERR Unrecognized XCLAIM option '{}'",
                        String::from_utf8_lossy(&args[j])
                    )))
                }
            }
            j += 1;
        }
        if last_id > g.last {
            g.last = last_id;
        }
        // A bogus delivery time (negative, or in the future) is now.
        let time = time.filter(|&t| (0..=now).contains(&t)).unwrap_or(now) as u64;
        let mut out = Vec::new();
        let result = (|| -> lsm::Result<()> {
            for id in ids {
                let entry = view.element(meta.uid, &id.field())?;
                let nack = groups.nack(group, id)?;
                let Some(value) = entry else {
                    // Pending but no longer in the stream: it leaves the PEL.
                    groups.release(g, id)?;
                    continue;
                };
                let nack = match nack {
                    Some(n) => {
                        if min_idle > 0 && (now as u64).saturating_sub(n.time) < min_idle as u64 {
                            continue;
                        }
                        Some(n)
                    }
                    None if force => None,
                    None => continue,
                };
                groups.consumer_or_create(g, consumer, true)?;
                // A new entry (FORCE) starts at one delivery, as Redis's NACKs do; then the count
                // is set (RETRYCOUNT >= 0) or goes up by one (unless JUSTID).
                let base = nack.as_ref().map_or(1, |n| n.deliveries);
                let deliveries = match retry {
                    Some(n) if n >= 0 => n as u64,
                    _ if justid => base,
                    _ => base + 1,
                };
                groups.assign(g, id, consumer, time, deliveries)?;
                out.push(if justid { id_reply(id) } else { entry_reply(id, &value)? });
            }
            Ok(())
        })();
        result.map_err(engine_error)?;
        Ok((Reply::Array(out), true))
    })
}

/// `XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]`.
fn xautoclaim(s: &mut Session, args: &[Bytes]) -> Reply {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let Some(min_idle) = parse_i64(&args[4]) else {
        return Reply::error("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let start = match interval(&args[5], 0, true) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let (mut count, mut justid) = (100usize, false);
    let mut j = 6;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                Some(n) if (1..=i64::MAX / 16).contains(&n) => count = n as usize,
                _ => return Reply::error("ERR COUNT must be > 0"),
            }
            j += 2;
        } else if args[j].eq_ignore_ascii_case(b"justid") {
            justid = true;
            j += 1;
        } else {
            return Reply::error(SYNTAX);
        }
    }
    let missing = nogroup(key, group);
    change_group(s, (key, group), missing, |view, meta, groups, g| {
        let now = now_ms();
        let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
        let mut next = StreamId::default();
        let result = (|| -> lsm::Result<()> {
            let mut attempts = count.saturating_mul(10);
            let mut left = count;
            // One more than can be visited, to know where the next call starts.
            let pending = groups.pending(group, start, StreamId::MAX, attempts.saturating_add(1))?;
            let mut it = pending.into_iter();
            for (id, n) in it.by_ref() {
                if attempts == 0 || left == 0 {
                    next = id;
                    return Ok(());
                }
                attempts -= 1;
                let Some(value) = view.element(meta.uid, &id.field())? else {
                    groups.release(g, id)?;
                    deleted.push(id_reply(id));
                    left -= 1;
                    continue;
                };
                if min_idle > 0 && now.saturating_sub(n.time) < min_idle as u64 {
                    continue;
                }
                groups.consumer_or_create(g, consumer, true)?;
                let deliveries = if justid { n.deliveries } else { n.deliveries + 1 };
                groups.assign(g, id, consumer, now, deliveries)?;
                claimed.push(if justid { id_reply(id) } else { entry_reply(id, &value)? });
                left -= 1;
            }
            Ok(())
        })();
        result.map_err(engine_error)?;
        Ok((Reply::Array(vec![id_reply(next), Reply::Array(claimed), Reply::Array(deleted)]), true))
    })
}

/// XINFO GROUPS: each group's name, consumers, pending, last delivered ID, entries read and lag.
pub(super) fn info_groups(view: &View, meta: &Meta, sm: &StreamMeta) -> lsm::Result<Reply> {
    let groups = Groups::new(view, meta.uid).all()?;
    Ok(Reply::Array(
        groups
            .iter()
            .map(|g| {
                Reply::Map(vec![
                    (text("name"), Reply::Bulk(g.name.clone())),
                    (text("consumers"), Reply::Integer(g.consumers as i64)),
                    (text("pending"), Reply::Integer(g.pending as i64)),
                    (text("last-delivered-id"), id_reply(g.last)),
                    (text("entries-read"), reads_reply(g.entries_read)),
                    (text("lag"), lag(sm, g).map_or(Reply::Null, Reply::Integer)),
                ])
            })
            .collect(),
    ))
}

fn reads_reply(entries_read: i64) -> Reply {
    if entries_read == UNKNOWN_READS {
        Reply::Null
    } else {
        Reply::Integer(entries_read)
    }
}

/// XINFO CONSUMERS: each consumer's name, pending count and idle time; `None` if the group
/// does not exist.
pub(super) fn info_consumers(view: &View, meta: &Meta, group: &[u8]) -> lsm::Result<Option<Reply>> {
    let groups = Groups::new(view, meta.uid);
    if groups.group(group)?.is_none() {
        return Ok(None);
    }
    let now = now_ms();
    Ok(Some(Reply::Array(
        groups
            .consumers_of(group)?
            .into_iter()
            .map(|(name, c)| {
                Reply::Map(vec![
                    (text("name"), Reply::Bulk(name)),
                    (text("pending"), Reply::Integer(c.pending as i64)),
                    (text("idle"), Reply::Integer(now.saturating_sub(c.seen) as i64)),
                ])
            })
            .collect(),
    )))
}

/// XINFO STREAM FULL's groups: everything about each, pending lists cut at `count` (0: all).
pub(super) fn info_full_groups(view: &View, meta: &Meta, sm: &StreamMeta, count: usize) -> lsm::Result<Reply> {
    let groups = Groups::new(view, meta.uid);
    let limit = if count == 0 { usize::MAX } else { count };
    let mut out = Vec::new();
    for g in groups.all()? {
        let pending: Vec<Reply> = groups
            .pending(&g.name, StreamId::default(), StreamId::MAX, limit)?
            .into_iter()
            .map(|(id, n)| {
                Reply::Array(vec![
                    id_reply(id),
                    Reply::Bulk(n.consumer),
                    Reply::Integer(n.time as i64),
                    Reply::Integer(n.deliveries as i64),
                ])
            })
            .collect();
        let mut consumers = Vec::new();
        for (name, c) in groups.consumers_of(&g.name)? {
            let mut own = Vec::new();
            for id in groups.consumer_pending(&g.name, &name, StreamId::default(), limit)? {
                let Some(v) = view.element(meta.uid, &pel_field(&g.name, id))? else { continue };
                let n = Nack::decode(&v).ok_or_else(damaged)?;
                own.push(Reply::Array(vec![
                    id_reply(id),
                    Reply::Integer(n.time as i64),
                    Reply::Integer(n.deliveries as i64),
                ]));
            }
            consumers.push(Reply::Map(vec![
                (text("name"), Reply::Bulk(name)),
                (text("seen-time"), Reply::Integer(c.seen as i64)),
                (text("pel-count"), Reply::Integer(c.pending as i64)),
                (text("pending"), Reply::Array(own)),
            ]));
        }
        out.push(Reply::Map(vec![
            (text("name"), Reply::Bulk(g.name.clone())),
            (text("last-delivered-id"), id_reply(g.last)),
            (text("entries-read"), reads_reply(g.entries_read)),
            (text("lag"), lag(sm, &g).map_or(Reply::Null, Reply::Integer)),
            (text("pel-count"), Reply::Integer(g.pending as i64)),
            (text("pending"), Reply::Array(pending)),
            (text("consumers"), Reply::Array(consumers)),
        ]));
    }
    Ok(Reply::Array(out))
}

/// Every group of incarnation `uid` as RDB carries it.
pub(super) fn rdb_groups(view: &View, uid: u64) -> lsm::Result<Vec<crate::rdb::stream::GroupValue>> {
    let groups = Groups::new(view, uid);
    let mut out = Vec::new();
    for g in groups.all()? {
        let pending = groups
            .pending(&g.name, StreamId::default(), StreamId::MAX, usize::MAX)?
            .into_iter()
            .map(|(id, n)| ((id.ms, id.seq), n.time, n.deliveries, n.consumer))
            .collect();
        let consumers = groups.consumers_of(&g.name)?.into_iter().map(|(name, c)| (name, c.seen)).collect();
        out.push(crate::rdb::stream::GroupValue {
            name: g.name,
            last: (g.last.ms, g.last.seq),
            entries_read: g.entries_read,
            pending,
            consumers,
        });
    }
    Ok(out)
}

/// Adds the records of `groups` (from RDB) under incarnation `uid` to `b`.
pub(super) fn write_rdb_groups(
    view: &View,
    b: &mut lsm::WriteBatch,
    (uid, sm): (u64, &StreamMeta),
    groups: &[crate::rdb::stream::GroupValue],
) {
    for gv in groups {
        let mut counts: BTreeMap<&Bytes, u64> = BTreeMap::new();
        for (id, time, deliveries, owner) in &gv.pending {
            let id = StreamId { ms: id.0, seq: id.1 };
            let n = Nack { time: *time, deliveries: *deliveries, consumer: owner.clone() };
            view.put_element(b, uid, &pel_field(&gv.name, id), &n.encode());
            let mut k = consumer_pel_prefix(&gv.name, owner);
            k.extend_from_slice(&id_bytes(id));
            view.put_element(b, uid, &k, b"");
            *counts.entry(owner).or_default() += 1;
        }
        for (name, seen) in &gv.consumers {
            let c = Consumer { seen: *seen, pending: counts.get(name).copied().unwrap_or(0) };
            view.put_element(b, uid, &consumer_field(&gv.name, name), &c.encode());
        }
        let last = StreamId { ms: gv.last.0, seq: gv.last.1 };
        let entries_read = match gv.entries_read {
            crate::rdb::stream::ESTIMATE_READS => reads_up_to(sm, last).unwrap_or(UNKNOWN_READS),
            n => n,
        };
        let g = Group {
            name: gv.name.clone(),
            last,
            entries_read,
            pending: gv.pending.len() as u64,
            consumers: gv.consumers.len() as u64,
        };
        view.put_element(b, uid, &group_field(&g.name), &g.encode());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_sort_by_id() {
        let g = Group {
            name: Bytes::from_static(b"g"),
            last: StreamId { ms: 3, seq: 1 },
            entries_read: -1,
            pending: 2,
            consumers: 1,
        };
        let back = Group::decode(g.name.clone(), &g.encode()).unwrap();
        assert_eq!((back.last, back.entries_read, back.pending, back.consumers), (g.last, -1, 2, 1));
        let n = Nack { time: 9, deliveries: 2, consumer: Bytes::from_static(b"alice") };
        assert_eq!(Nack::decode(&Bytes::from(n.encode())), Some(n));
        let a = pel_field(b"g", StreamId { ms: 1, seq: u64::MAX });
        let b = pel_field(b"g", StreamId { ms: 2, seq: 0 });
        assert!(a < b && b < prefix_end(&named(b'p', b"g")));
        assert!(named(b'p', b"g") < named(b'p', b"g\0"), "one group's records never run into another's");
        assert!(prefix_end(&named(b'p', b"g")) <= named(b'p', b"h"));
    }

    #[test]
    fn lag_and_read_counts_follow_redis() {
        let mut sm = StreamMeta {
            length: 3,
            last: StreamId { ms: 3, seq: 0 },
            added: 5,
            first: StreamId { ms: 1, seq: 0 },
            ..StreamMeta::default()
        };
        let g = |last: u64, read: i64| Group {
            name: Bytes::new(),
            last: StreamId { ms: last, seq: 0 },
            entries_read: read,
            pending: 0,
            consumers: 0,
        };
        assert_eq!(lag(&sm, &g(2, 4)), Some(1));
        assert_eq!(reads_up_to(&sm, StreamId { ms: 3, seq: 0 }), Some(5));
        assert_eq!(reads_up_to(&sm, StreamId { ms: 1, seq: 0 }), Some(3));
        assert_eq!(reads_up_to(&sm, StreamId { ms: 0, seq: 5 }), Some(2));
        assert_eq!(reads_up_to(&sm, StreamId { ms: 2, seq: 0 }), None, "in the middle");
        sm.max_deleted = StreamId { ms: 2, seq: 0 };
        assert_eq!(lag(&sm, &g(1, 3)), None, "a deleted entry ahead: unknown");
        assert_eq!(lag(&sm, &g(3, UNKNOWN_READS)), Some(0));
        assert_eq!(lag(&StreamMeta::default(), &g(0, UNKNOWN_READS)), Some(0));
    }
}
