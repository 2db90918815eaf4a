//! Streams in RDB form: type 15 (`STREAM_LISTPACKS`, Redis 5 to 6.2) is read, type 19
//! (`STREAM_LISTPACKS_2`, Redis 7.0) is read and written.
//!
//! ```text
//! nodes       count, (master ID as a 16-byte string, listpack string)*
//! stream      length, last ID (ms, seq)
//!             [19: first ID (ms, seq), largest deleted ID (ms, seq), entries added]
//! groups      count, per group: name, last ID (ms, seq), [19: entries read (-1: unknown)],
//!             pending: count, (ID 16 raw bytes, delivery time u64 LE ms, deliveries)*,
//!             consumers: count, (name, seen time u64 LE ms, pending: count, ID 16 raw bytes*)*
//! ```
//! (numbers are RDB lengths.) A node's listpack starts with its master entry — live count,
//! deleted count, the master fields and a 0 — then each entry: flags (1 deleted, 2 same fields
//! as the master), ms and seq as differences from the master ID, the field count and fields
//! and values (or only the values with flag 2), and the number of listpack items the entry used.

use bytes::Bytes;

use super::codec::{put_len, put_string, BadFormat, Reader};
use super::packed;

/// A group's `entries_read` that type 15 does not record.
pub const ESTIMATE_READS: i64 = i64::MIN;

/// A stream ID (ms, seq).
pub type Id = (u64, u64);

/// One node's entries: ID and field, value, … list.
pub type Node = Vec<(Id, Vec<Bytes>)>;

/// A stream as RDB carries it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamValue {
    /// Live entries in ID order, in nodes: each node's entries with their field, value, … list.
    pub nodes: Vec<Node>,
    pub length: u64,
    pub last: Id,
    pub first: Id,
    pub max_deleted: Id,
    pub added: u64,
    pub groups: Vec<GroupValue>,
}

/// A consumer group as RDB carries it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupValue {
    pub name: Bytes,
    pub last: Id,
    /// -1: unknown; [`ESTIMATE_READS`]: not recorded (type 15), to be estimated as Redis 7.0
    /// does when it loads such a stream.
    pub entries_read: i64,
    /// Pending entries: ID, delivery time (ms), deliveries, owner.
    pub pending: Vec<(Id, u64, u64, Bytes)>,
    /// Consumers: name, seen time (ms).
    pub consumers: Vec<(Bytes, u64)>,
}

fn raw_id(b: &[u8]) -> Result<Id, BadFormat> {
    if b.len() != 16 {
        return Err(BadFormat);
    }
    let ms = u64::from_be_bytes(b[..8].try_into().map_err(|_| BadFormat)?);
    let seq = u64::from_be_bytes(b[8..].try_into().map_err(|_| BadFormat)?);
    Ok((ms, seq))
}

fn put_raw_id(out: &mut Vec<u8>, id: Id) {
    out.extend_from_slice(&id.0.to_be_bytes());
    out.extend_from_slice(&id.1.to_be_bytes());
}

fn ms_time(r: &mut Reader<'_>) -> Result<u64, BadFormat> {
    Ok(u64::from_le_bytes(r.take(8)?.try_into().map_err(|_| BadFormat)?))
}

fn integer(item: &Bytes) -> Result<i64, BadFormat> {
    std::str::from_utf8(item).ok().and_then(|t| t.parse().ok()).ok_or(BadFormat)
}

/// Reads one node: the live entries of a listpack whose master ID is `master`.
fn load_node(master: Id, lp: &[u8]) -> Result<Vec<(Id, Vec<Bytes>)>, BadFormat> {
    let items = packed::listpack(lp)?;
    let mut it = items.iter();
    let mut next = || it.next().ok_or(BadFormat);
    let _count = integer(next()?)?;
    let _deleted = integer(next()?)?;
    let master_fields = usize::try_from(integer(next()?)?).map_err(|_| BadFormat)?;
    let fields: Vec<Bytes> = (0..master_fields).map(|_| next().cloned()).collect::<Result<_, _>>()?;
    if integer(next()?)? != 0 {
        return Err(BadFormat);
    }
    let mut out = Vec::new();
    while let Some(flags) = it.next() {
        let flags = integer(flags)?;
        let mut next = || it.next().ok_or(BadFormat);
        let ms = master.0.checked_add(integer(next()?)? as u64).ok_or(BadFormat)?;
        let seq = master.1.wrapping_add(integer(next()?)? as u64);
        let mut pairs = Vec::new();
        if flags & 2 != 0 {
            for f in &fields {
                pairs.push(f.clone());
                pairs.push(next()?.clone());
            }
        } else {
            let n = usize::try_from(integer(next()?)?).map_err(|_| BadFormat)?;
            for _ in 0..2 * n {
                pairs.push(next()?.clone());
            }
        }
        let _lp_count = next()?;
        if flags & 1 == 0 {
            out.push(((ms, seq), pairs));
        }
    }
    Ok(out)
}

/// Reads a stream of RDB type 15 or 19.
pub fn load(kind: u8, r: &mut Reader<'_>) -> Result<StreamValue, BadFormat> {
    let mut v = StreamValue::default();
    for _ in 0..r.count()? {
        let master = raw_id(&r.string()?)?;
        let lp = r.string()?;
        let node = load_node(master, &lp)?;
        if !node.is_empty() {
            v.nodes.push(node);
        }
    }
    v.length = r.length()?;
    v.last = (r.length()?, r.length()?);
    if kind == 19 {
        v.first = (r.length()?, r.length()?);
        v.max_deleted = (r.length()?, r.length()?);
        v.added = r.length()?;
    } else {
        // Before 7.0: what 7.0 itself assumes when it loads such a stream.
        v.first = v.nodes.first().and_then(|n| n.first()).map_or((0, 0), |(id, _)| *id);
        v.added = v.length;
    }
    let live: usize = v.nodes.iter().map(Vec::len).sum();
    if live as u64 != v.length {
        return Err(BadFormat);
    }
    for _ in 0..r.count()? {
        let mut g = GroupValue { name: r.string()?, last: (r.length()?, r.length()?), ..GroupValue::default() };
        g.entries_read = if kind == 19 { r.length()? as i64 } else { ESTIMATE_READS };
        let mut owners: std::collections::HashMap<Id, Option<Bytes>> = std::collections::HashMap::new();
        let mut pending = Vec::new();
        for _ in 0..r.count()? {
            let id = raw_id(r.take(16)?)?;
            let time = ms_time(r)?;
            let count = r.length()?;
            owners.insert(id, None);
            pending.push((id, time, count));
        }
        for _ in 0..r.count()? {
            let name = r.string()?;
            let seen = ms_time(r)?;
            for _ in 0..r.count()? {
                let id = raw_id(r.take(16)?)?;
                // Every consumer's pending entry is one of the group's, owned once.
                match owners.get_mut(&id) {
                    Some(owner @ None) => *owner = Some(name.clone()),
                    _ => return Err(BadFormat),
                }
            }
            g.consumers.push((name, seen));
        }
        for (id, time, count) in pending {
            let owner = owners.remove(&id).flatten().ok_or(BadFormat)?;
            g.pending.push((id, time, count, owner));
        }
        v.groups.push(g);
    }
    Ok(v)
}

/// One listpack item.
enum Item<'a> {
    Int(i64),
    Str(&'a [u8]),
}

fn backlen(out: &mut Vec<u8>, l: usize) {
    let l = l as u64;
    let bytes: Vec<u8> = if l <= 127 {
        vec![l as u8]
    } else if l < 16383 {
        vec![(l >> 7) as u8, ((l & 127) | 128) as u8]
    } else if l < 2_097_151 {
        vec![(l >> 14) as u8, (((l >> 7) & 127) | 128) as u8, ((l & 127) | 128) as u8]
    } else if l < 268_435_455 {
        vec![(l >> 21) as u8, (((l >> 14) & 127) | 128) as u8, (((l >> 7) & 127) | 128) as u8, ((l & 127) | 128) as u8]
    } else {
        vec![
            (l >> 28) as u8,
            (((l >> 21) & 127) | 128) as u8,
            (((l >> 14) & 127) | 128) as u8,
            (((l >> 7) & 127) | 128) as u8,
            ((l & 127) | 128) as u8,
        ]
    };
    out.extend_from_slice(&bytes);
}

/// A listpack of `items` (Redis's encodings: the smallest integer form, else a string).
fn listpack(items: &[Item<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for item in items {
        let start = body.len();
        match *item {
            Item::Int(v) if (0..=127).contains(&v) => body.push(v as u8),
            Item::Int(v) if (-4096..=4095).contains(&v) => {
                let u = (v as u16) & 0x1fff;
                body.push(0xc0 | (u >> 8) as u8);
                body.push(u as u8);
            }
            Item::Int(v) if i16::try_from(v).is_ok() => {
                body.push(0xf1);
                body.extend_from_slice(&(v as i16).to_le_bytes());
            }
            Item::Int(v) if (-(1 << 23)..(1 << 23)).contains(&v) => {
                body.push(0xf2);
                body.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
            }
            Item::Int(v) if i32::try_from(v).is_ok() => {
                body.push(0xf3);
                body.extend_from_slice(&(v as i32).to_le_bytes());
            }
            Item::Int(v) => {
                body.push(0xf4);
                body.extend_from_slice(&v.to_le_bytes());
            }
            Item::Str(s) if s.len() < 64 => {
                body.push(0x80 | s.len() as u8);
                body.extend_from_slice(s);
            }
            Item::Str(s) if s.len() < 4096 => {
                body.push(0xe0 | (s.len() >> 8) as u8);
                body.push(s.len() as u8);
                body.extend_from_slice(s);
            }
            Item::Str(s) => {
                body.push(0xf0);
                body.extend_from_slice(&(s.len() as u32).to_le_bytes());
                body.extend_from_slice(s);
            }
        }
        let size = body.len() - start;
        backlen(&mut body, size);
    }
    let total = 6 + body.len() + 1;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&(items.len().min(65535) as u16).to_le_bytes());
    out.extend_from_slice(&body);
    out.push(0xff);
    out
}

/// Writes a node's listpack: master fields are its first entry's fields; entries with the
/// same fields use flag 2.
fn save_node(node: &[(Id, Vec<Bytes>)]) -> Vec<u8> {
    let master = node[0].0;
    let master_fields: Vec<&Bytes> = node[0].1.iter().step_by(2).collect();
    let mut items = vec![Item::Int(node.len() as i64), Item::Int(0), Item::Int(master_fields.len() as i64)];
    items.extend(master_fields.iter().map(|f| Item::Str(f)));
    items.push(Item::Int(0));
    for (id, pairs) in node {
        let fields: Vec<&Bytes> = pairs.iter().step_by(2).collect();
        let same = fields == master_fields;
        items.push(Item::Int(if same { 2 } else { 0 }));
        items.push(Item::Int(id.0.wrapping_sub(master.0) as i64));
        items.push(Item::Int(id.1.wrapping_sub(master.1) as i64));
        let used = if same {
            items.extend(pairs.iter().skip(1).step_by(2).map(|v| Item::Str(v)));
            3 + fields.len()
        } else {
            items.push(Item::Int(fields.len() as i64));
            items.extend(pairs.iter().map(|v| Item::Str(v)));
            4 + pairs.len()
        };
        items.push(Item::Int(used as i64));
    }
    listpack(&items)
}

/// Appends a stream as RDB type 19 (the type byte included).
pub fn save(out: &mut Vec<u8>, v: &StreamValue) {
    out.push(19);
    put_len(out, v.nodes.len() as u64);
    for node in &v.nodes {
        let mut master = Vec::with_capacity(16);
        put_raw_id(&mut master, node[0].0);
        put_string(out, &master);
        put_string(out, &save_node(node));
    }
    for n in [v.length, v.last.0, v.last.1, v.first.0, v.first.1, v.max_deleted.0, v.max_deleted.1, v.added] {
        put_len(out, n);
    }
    put_len(out, v.groups.len() as u64);
    for g in &v.groups {
        put_string(out, &g.name);
        put_len(out, g.last.0);
        put_len(out, g.last.1);
        put_len(out, g.entries_read as u64);
        put_len(out, g.pending.len() as u64);
        for (id, time, count, _) in &g.pending {
            put_raw_id(out, *id);
            out.extend_from_slice(&time.to_le_bytes());
            put_len(out, *count);
        }
        put_len(out, g.consumers.len() as u64);
        for (name, seen) in &g.consumers {
            put_string(out, name);
            out.extend_from_slice(&seen.to_le_bytes());
            let own: Vec<Id> = g.pending.iter().filter(|p| p.3 == *name).map(|p| p.0).collect();
            put_len(out, own.len() as u64);
            for id in own {
                put_raw_id(out, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn streams_round_trip_with_groups() {
        let v = StreamValue {
            nodes: vec![
                vec![
                    ((5, 0), vec![b("f"), b("1")]),
                    ((5, 1), vec![b("f"), b("-70000")]),
                    ((6, 0), vec![b("g"), b("x"), b("h"), b("")]),
                ],
                vec![((1 << 40, 7), vec![b("long"), Bytes::from(vec![b'z'; 5000])])],
            ],
            length: 4,
            last: (1 << 40, 9),
            first: (5, 0),
            max_deleted: (4, 0),
            added: 9,
            groups: vec![GroupValue {
                name: b("g1"),
                last: (5, 1),
                entries_read: -1,
                pending: vec![((5, 0), 123, 2, b("alice")), ((5, 1), 456, 1, b("bob"))],
                consumers: vec![(b("alice"), 77), (b("bob"), 88), (b("idle"), 99)],
            }],
        };
        let mut out = Vec::new();
        save(&mut out, &v);
        assert_eq!(out[0], 19);
        let mut r = Reader::new(&out[1..]);
        assert_eq!(load(19, &mut r).unwrap(), v);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn integers_take_redis_listpack_encodings() {
        let values =
            [0i64, 127, 128, -1, 4095, -4096, 4096, 32767, -32768, 1 << 20, -(1 << 23), 1 << 30, i64::MIN, i64::MAX];
        let items: Vec<Item> = values.iter().map(|&v| Item::Int(v)).collect();
        let decoded = packed::listpack(&listpack(&items)).unwrap();
        let back: Vec<i64> = decoded.iter().map(|d| integer(d).unwrap()).collect();
        assert_eq!(back, values);
        assert_eq!(listpack(&[Item::Int(5)]), [9, 0, 0, 0, 1, 0, 5, 1, 0xff]);
    }

    #[test]
    fn a_pending_entry_without_its_owner_is_bad_data() {
        let mut v = StreamValue { length: 0, ..StreamValue::default() };
        v.groups.push(GroupValue { name: b("g"), pending: vec![((1, 0), 1, 1, b("ghost"))], ..GroupValue::default() });
        let mut out = Vec::new();
        save(&mut out, &v);
        assert!(load(19, &mut Reader::new(&out[1..])).is_err());
    }
}
