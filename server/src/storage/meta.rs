//! The metadata record of a key.

use bytes::{BufMut, Bytes, BytesMut};

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum KeyType {
    /// A string.
    String = 0,
    /// A list.
    List = 1,
    /// A hash.
    Hash = 2,
    /// A set.
    Set = 3,
    /// A sorted set.
    ZSet = 4,
    /// A stream.
    Stream = 5,
}

impl KeyType {
    /// The name `TYPE` answers.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::String => "string",
            KeyType::List => "list",
            KeyType::Hash => "hash",
            KeyType::Set => "set",
            KeyType::ZSet => "zset",
            KeyType::Stream => "stream",
        }
    }

    fn from_u8(b: u8) -> Option<KeyType> {
        Some(match b {
            0 => KeyType::String,
            1 => KeyType::List,
            2 => KeyType::Hash,
            3 => KeyType::Set,
            4 => KeyType::ZSet,
            5 => KeyType::Stream,
            _ => return None,
        })
    }
}

const HEADER: usize = 17;

/// A key's metadata: type, expiry (ms since the epoch, 0 = none), incarnation id, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// What the key holds.
    pub kind: KeyType,
    /// When it expires (0: never).
    pub expire_at_ms: u64,
    /// The incarnation's id (collections key their elements by it).
    pub uid: u64,
    /// A string's value; a collection's own fields.
    pub body: Bytes,
}

impl Meta {
    /// A string value.
    pub fn string(value: Bytes, expire_at_ms: u64) -> Meta {
        Meta { kind: KeyType::String, expire_at_ms, uid: 0, body: value }
    }

    /// True once the expiry time has passed.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at_ms != 0 && self.expire_at_ms <= now_ms
    }

    /// The stored bytes.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(HEADER + self.body.len());
        b.put_u8(self.kind as u8);
        b.put_u64_le(self.expire_at_ms);
        b.put_u64_le(self.uid);
        b.put_slice(&self.body);
        b.freeze()
    }

    /// The expiry time (0: none) of a stored record, without decoding the rest; `None` if the
    /// bytes are not a metadata record.
    pub fn expiry_of(raw: &[u8]) -> Option<u64> {
        if raw.len() < HEADER {
            return None;
        }
        KeyType::from_u8(raw[0])?;
        Some(u64::from_le_bytes(raw[1..9].try_into().ok()?))
    }

    /// Decodes stored bytes; `None` if they are not a metadata record.
    pub fn decode(raw: Bytes) -> Option<Meta> {
        if raw.len() < HEADER {
            return None;
        }
        let kind = KeyType::from_u8(raw[0])?;
        let expire_at_ms = u64::from_le_bytes(raw[1..9].try_into().ok()?);
        let uid = u64::from_le_bytes(raw[9..17].try_into().ok()?);
        Some(Meta { kind, expire_at_ms, uid, body: raw.slice(HEADER..) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let m = Meta { kind: KeyType::ZSet, expire_at_ms: 123, uid: 9, body: Bytes::from_static(b"body") };
        assert_eq!(Meta::decode(m.encode()), Some(m.clone()));
        assert_eq!(Meta::expiry_of(&m.encode()), Some(123));
        assert_eq!(Meta::expiry_of(b"\xff short"), None);
        assert_eq!(Meta::decode(Bytes::from_static(b"short")), None);
        let mut bad = Meta::string(Bytes::new(), 0).encode().to_vec();
        bad[0] = 77;
        assert_eq!(Meta::decode(Bytes::from(bad)), None);
        assert!(Meta::string(Bytes::new(), 5).is_expired(5));
        assert!(!Meta::string(Bytes::new(), 0).is_expired(u64::MAX));
    }
}
