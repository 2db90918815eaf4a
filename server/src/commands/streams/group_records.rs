//! Consumer-group records: a group's state, its pending entries (by group and by consumer) and
//! its consumers, the [`Groups`] view commands change them through, Redis 7.0's entries-read
//! and lag arithmetic, and their RDB form (record layout: see `groups`).

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::model::*;
use crate::storage::{now_ms, prefix_end, View};

/// `entries_read` when it is not known (Redis's `SCG_INVALID_ENTRIES_READ`).
pub(super) const UNKNOWN_READS: i64 = -1;

pub(super) fn id_bytes(id: StreamId) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&id.ms.to_be_bytes());
    b[8..].copy_from_slice(&id.seq.to_be_bytes());
    b
}

pub(super) fn id_of(b: &[u8]) -> Option<StreamId> {
    Some(StreamId {
        ms: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
        seq: u64::from_be_bytes(b.get(8..16)?.try_into().ok()?),
    })
}

pub(super) fn word(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i * 8..i * 8 + 8)?.try_into().ok()?))
}

/// `tag | len | name`.
pub(super) fn named(tag: u8, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + name.len() + 40);
    k.push(tag);
    k.extend_from_slice(&(name.len() as u32).to_be_bytes());
    k.extend_from_slice(name);
    k
}

pub(super) fn group_field(name: &[u8]) -> Vec<u8> {
    let mut k = vec![b'g'];
    k.extend_from_slice(name);
    k
}

pub(super) fn pel_field(group: &[u8], id: StreamId) -> Vec<u8> {
    let mut k = named(b'p', group);
    k.extend_from_slice(&id_bytes(id));
    k
}

pub(super) fn consumer_field(group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut k = named(b'c', group);
    k.extend_from_slice(consumer);
    k
}

pub(super) fn consumer_pel_prefix(group: &[u8], consumer: &[u8]) -> Vec<u8> {
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
    pub(super) fn decode(name: Bytes, v: &[u8]) -> Option<Group> {
        Some(Group {
            name,
            last: StreamId { ms: word(v, 0)?, seq: word(v, 1)? },
            entries_read: word(v, 2)? as i64,
            pending: word(v, 3)?,
            consumers: word(v, 4)?,
        })
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(40);
        for w in [self.last.ms, self.last.seq, self.entries_read as u64, self.pending, self.consumers] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// A pending (delivered, not acknowledged) entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Nack {
    pub(super) time: u64,
    pub(super) deliveries: u64,
    pub(super) consumer: Bytes,
}

impl Nack {
    pub(super) fn decode(v: &Bytes) -> Option<Nack> {
        Some(Nack { time: word(v, 0)?, deliveries: word(v, 1)?, consumer: v.slice(16..) })
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = BytesMut::with_capacity(16 + self.consumer.len());
        b.put_u64_le(self.time);
        b.put_u64_le(self.deliveries);
        b.put_slice(&self.consumer);
        b.to_vec()
    }
}

/// A consumer's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Consumer {
    pub(super) seen: u64,
    pub(super) pending: u64,
}

impl Consumer {
    pub(super) fn decode(v: &[u8]) -> Option<Consumer> {
        Some(Consumer { seen: word(v, 0)?, pending: word(v, 1)? })
    }

    pub(super) fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.seen.to_le_bytes());
        b[8..].copy_from_slice(&self.pending.to_le_bytes());
        b
    }
}

/// A command's view of one stream's groups: reads go to the engine, changes are collected and
/// written to the batch at the end ([`Groups::write`]), so a record changed twice is written
/// once and later reads in the same command see the change.
pub(super) struct Groups<'v, 'a> {
    view: &'v View<'a>,
    uid: u64,
    consumers: BTreeMap<(Bytes, Bytes), Option<Consumer>>,
    pub(super) nacks: BTreeMap<(Bytes, StreamId), Option<Nack>>,
    pub(super) events: Vec<&'static str>,
}

impl<'v, 'a> Groups<'v, 'a> {
    pub(super) fn new(view: &'v View<'a>, uid: u64) -> Self {
        Groups { view, uid, consumers: BTreeMap::new(), nacks: BTreeMap::new(), events: Vec::new() }
    }

    pub(super) fn group(&self, name: &[u8]) -> lsm::Result<Option<Group>> {
        match self.view.element(self.uid, &group_field(name))? {
            Some(v) => Ok(Some(Group::decode(Bytes::copy_from_slice(name), &v).ok_or_else(damaged)?)),
            None => Ok(None),
        }
    }

    pub(super) fn put_group(&self, b: &mut lsm::WriteBatch, g: &Group) {
        self.view.put_element(b, self.uid, &group_field(&g.name), &g.encode());
    }

    pub(super) fn consumer(&mut self, group: &Bytes, name: &Bytes) -> lsm::Result<Option<Consumer>> {
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
    pub(super) fn consumer_or_create(&mut self, g: &mut Group, name: &Bytes, refresh: bool) -> lsm::Result<Consumer> {
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

    pub(super) fn set_consumer(&mut self, group: &Bytes, name: &Bytes, c: Option<Consumer>) {
        self.consumers.insert((group.clone(), name.clone()), c);
    }

    pub(super) fn nack(&mut self, group: &Bytes, id: StreamId) -> lsm::Result<Option<Nack>> {
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
    pub(super) fn assign(
        &mut self,
        g: &mut Group,
        id: StreamId,
        consumer: &Bytes,
        time: u64,
        deliveries: u64,
    ) -> lsm::Result<()> {
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

    pub(super) fn bump(&mut self, g: &Group, consumer: &Bytes, by: u64) -> lsm::Result<()> {
        let mut c = self.consumer(&g.name, consumer)?.unwrap_or(Consumer { seen: now_ms(), pending: 0 });
        c.pending += by;
        self.set_consumer(&g.name, consumer, Some(c));
        Ok(())
    }

    /// Removes pending entry `id` (acknowledged, or its entry is gone).
    pub(super) fn release(&mut self, g: &mut Group, id: StreamId) -> lsm::Result<bool> {
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
    pub(super) fn write(&mut self, b: &mut lsm::WriteBatch) -> lsm::Result<()> {
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
    pub(super) fn all(&self) -> lsm::Result<Vec<Group>> {
        let mut out = Vec::new();
        for kv in self.view.elements_between(self.uid, b"g", b"h") {
            let (field, v) = kv?;
            out.push(Group::decode(field.slice(1..), &v).ok_or_else(damaged)?);
        }
        Ok(out)
    }

    /// The first group in name order.
    pub(super) fn first_group(&self) -> lsm::Result<Option<Group>> {
        match self.view.elements_between(self.uid, b"g", b"h").next() {
            Some(kv) => {
                let (field, v) = kv?;
                Ok(Some(Group::decode(field.slice(1..), &v).ok_or_else(damaged)?))
            }
            None => Ok(None),
        }
    }

    /// The group's consumers in name order.
    pub(super) fn consumers_of(&self, group: &[u8]) -> lsm::Result<Vec<(Bytes, Consumer)>> {
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
    pub(super) fn pending(
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
    pub(super) fn consumer_pending(
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
    pub(super) fn destroy(&self, b: &mut lsm::WriteBatch, name: &[u8]) {
        self.view.delete_element(b, self.uid, &group_field(name));
        for tag in [b'p', b'c', b'q'] {
            let prefix = named(tag, name);
            self.view.delete_elements(b, self.uid, &prefix, &prefix_end(&prefix));
        }
    }
}

/// True if a deleted entry may lie in `[start, end]` (Redis's `streamRangeHasTombstones`).
pub(super) fn has_tombstones(sm: &StreamMeta, start: StreamId, end: StreamId) -> bool {
    if sm.length == 0 || sm.max_deleted == StreamId::default() || sm.first > sm.max_deleted {
        return false;
    }
    start <= sm.max_deleted && sm.max_deleted <= end
}

/// How many entries were added up to `id`, when that can be known (Redis's
/// `streamEstimateDistanceFromFirstEverEntry`).
pub(super) fn reads_up_to(sm: &StreamMeta, id: StreamId) -> Option<i64> {
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
pub(super) fn lag(sm: &StreamMeta, g: &Group) -> Option<i64> {
    if sm.added == 0 {
        return Some(0);
    }
    if g.entries_read != UNKNOWN_READS && !has_tombstones(sm, g.last, StreamId::MAX) {
        return Some(sm.added as i64 - g.entries_read);
    }
    reads_up_to(sm, g.last).map(|read| sm.added as i64 - read)
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
