//! Whole values in and out of the keyspace, as RDB carries them (`crate::rdb::Value`): what
//! DUMP reads, and what RESTORE and an RDB import write.

use std::ops::Bound;

use bytes::Bytes;

use super::{decode_score, encode_score, with_order, Header, KeyType, ListpackLimits, Meta, View};
use crate::rdb::Value;

impl View<'_> {
    /// The whole value of the key `meta` describes.
    pub fn read_value(&self, meta: &Meta) -> lsm::Result<Value> {
        let elements = || -> lsm::Result<Vec<(Bytes, Bytes)>> { self.entries(meta, Bound::Unbounded).collect() };
        Ok(match meta.kind {
            KeyType::String => Value::String(self.inline_string(meta.clone())?.body),
            // A list's element keys are its positions, in order.
            KeyType::List => Value::List(elements()?.into_iter().map(|(_, v)| v).collect()),
            KeyType::Set => Value::Set(elements()?.into_iter().map(|(m, _)| m).collect()),
            // A compact hash in its order, as Redis serializes a listpack.
            KeyType::Hash => Value::Hash(self.hash_fields(meta)?),
            KeyType::ZSet => Value::ZSet(elements()?.into_iter().map(|(m, sc)| (m, decode_score(&sc))).collect()),
            // The stream layout belongs to its commands (`crate::commands::streams`).
            KeyType::Stream => Value::Stream(Box::new(crate::commands::stream_value(self, meta)?)),
        })
    }

    /// Adds writing `value` at `key` (replacing whatever it held) with expiry `expire_at`
    /// (0: none) to `b`. A collection gets a fresh incarnation; an empty one writes nothing
    /// but the deletion of `key`. A hash within `limits` is compact, its fields in the order
    /// given (as Redis loads one into a listpack).
    pub fn write_value(
        &self,
        b: &mut lsm::WriteBatch,
        key: &[u8],
        value: Value,
        expire_at: u64,
        limits: ListpackLimits,
    ) {
        let kind = match &value {
            Value::String(body) => return self.put_meta(b, key, &Meta::string(body.clone(), expire_at)),
            Value::List(_) => KeyType::List,
            Value::Set(_) => KeyType::Set,
            Value::Hash(_) => KeyType::Hash,
            Value::ZSet(_) => KeyType::ZSet,
            Value::Stream(v) => return crate::commands::write_stream_value(self, b, key, v, expire_at),
        };
        let mut meta = self.create(b, key, kind);
        meta.expire_at_ms = expire_at;
        let mut header = Header::of(&meta);
        let mut next = None;
        match value {
            Value::String(_) | Value::Stream(_) => {}
            Value::List(items) => {
                for v in &items {
                    self.put_element(b, meta.uid, &header.tail.to_be_bytes(), v);
                    header.tail += 1;
                }
                header.count = items.len() as u64;
            }
            Value::Set(members) => {
                members.iter().for_each(|m| self.add_member(b, meta.uid, m, b""));
                header.count = members.len() as u64;
            }
            Value::Hash(fields) => {
                header.count = fields.len() as u64;
                let compact =
                    header.count <= limits.entries && fields.iter().all(|(f, v)| limits.fits(f) && limits.fits(v));
                for (i, (f, v)) in fields.iter().enumerate() {
                    self.add_field(b, meta.uid, f, v, compact.then_some(i as u64));
                }
                next = compact.then_some(header.count);
            }
            Value::ZSet(items) => {
                for (m, sc) in &items {
                    self.add_member(b, meta.uid, m, &encode_score(*sc));
                    self.put_score(b, meta.uid, *sc, m);
                }
                header.count = items.len() as u64;
            }
        }
        if header.count == 0 {
            return self.delete_meta(b, key);
        }
        meta.body = header.body(kind);
        if kind == KeyType::Hash {
            meta = with_order(&meta, &header, next);
        }
        self.put_meta(b, key, &meta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{ExecContext, Storage};

    #[test]
    fn values_round_trip_through_the_keyspace() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        let b = |x: &str| Bytes::copy_from_slice(x.as_bytes());
        let values = [
            Value::String(b("s")),
            Value::List(vec![b("b"), b("a"), b("b")]),
            Value::Set(vec![b("x"), b("y")]),
            // A compact hash keeps the payload's order.
            Value::Hash(vec![(b("g"), b("2")), (b("f"), b("1"))]),
            Value::ZSet(vec![(b("hi"), 7.0), (b("lo"), -1.5)]),
            Value::Stream(Box::new(crate::rdb::stream::StreamValue {
                nodes: vec![
                    vec![((1, 0), vec![b("f"), b("v")]), ((2, 5), vec![b("g"), b("w")])],
                    vec![((9, 0), vec![b("f"), b("z")])],
                ],
                length: 3,
                last: (10, 0),
                first: (1, 0),
                max_deleted: (0, 0),
                added: 4,
                groups: vec![crate::rdb::stream::GroupValue {
                    name: b("g"),
                    last: (2, 5),
                    entries_read: 2,
                    pending: vec![((1, 0), 5, 1, b("c1"))],
                    consumers: vec![(b("c1"), 6), (b("c2"), 7)],
                }],
            })),
        ];
        for (i, value) in values.into_iter().enumerate() {
            let key = format!("k{i}");
            let mut batch = lsm::WriteBatch::new();
            v.write_value(&mut batch, key.as_bytes(), value.clone(), 99_999_999_999_999, LIMITS);
            s.write(&cx, batch).unwrap();
            let meta = v.get(key.as_bytes()).unwrap().unwrap();
            assert_eq!(meta.expire_at_ms, 99_999_999_999_999);
            // A set's or sorted set's members come back in pick order.
            let sorted = |value: Value| match value {
                Value::Set(mut items) => {
                    items.sort();
                    Value::Set(items)
                }
                Value::ZSet(mut items) => {
                    items.sort_by(|a, b| a.0.cmp(&b.0));
                    Value::ZSet(items)
                }
                other => other,
            };
            assert_eq!(sorted(v.read_value(&meta).unwrap()), sorted(value), "{key}");
        }
        assert_eq!(s.dbsize(0), 6);
    }

    const LIMITS: ListpackLimits = ListpackLimits { entries: 2, value: 64 };

    #[test]
    fn a_hash_past_the_limits_is_written_as_a_hash_table() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::new(lsm::Db::open(dir.path(), lsm::Options::default()).unwrap()).unwrap();
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        let pair = |f: &str, len: usize| (Bytes::copy_from_slice(f.as_bytes()), Bytes::from(vec![b'x'; len]));
        let cases = [
            ("long", vec![pair("b", 65), pair("a", 1)]),
            ("many", vec![pair("c", 1), pair("b", 1), pair("a", 1)]),
            ("fits", vec![pair("b", 64), pair("a", 1)]),
        ];
        for (key, fields) in cases {
            let mut batch = lsm::WriteBatch::new();
            v.write_value(&mut batch, key.as_bytes(), Value::Hash(fields.clone()), 0, LIMITS);
            s.write(&cx, batch).unwrap();
            let meta = v.get(key.as_bytes()).unwrap().unwrap();
            let Value::Hash(read) = v.read_value(&meta).unwrap() else { panic!("{key}: not a hash") };
            let compact = crate::storage::next_ordinal(&meta).is_some();
            assert_eq!(compact, key == "fits", "{key}");
            // A compact hash comes back in its order; a hash table's order is the pick order.
            let sorted = |mut f: Vec<(Bytes, Bytes)>| {
                f.sort();
                f
            };
            if compact {
                assert_eq!(read, fields, "{key}");
            } else {
                assert_eq!(sorted(read), sorted(fields), "{key}");
            }
        }
    }
}
