//! Internal keys: a user key followed by an 8-byte trailer `(seq << 8) | kind`, little-endian.
//!
//! Ordering is user key ascending, then sequence number descending, so the newest version of a
//! key comes first and a seek to `(key, snapshot_seq)` lands on the newest version visible to the
//! snapshot.

use std::cmp::Ordering;

/// Largest sequence number an internal key can carry (56 bits).
pub const MAX_SEQUENCE: u64 = (1 << 56) - 1;

/// Bytes in an internal key's trailer.
pub const TRAILER_LEN: usize = 8;

/// What an internal-key record means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    /// A tombstone: the key is deleted as of this sequence number.
    Delete = 0,
    /// A value.
    Put = 1,
    /// A range tombstone: deletes `[key, value)`.
    RangeDelete = 2,
}

impl ValueKind {
    /// The highest kind; a seek key uses it so that it sorts before every entry of the same seq.
    pub const MAX: ValueKind = ValueKind::RangeDelete;

    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            2 => Some(ValueKind::RangeDelete),
            _ => None,
        }
    }
}

/// Packs a sequence number and kind into a trailer.
#[inline]
pub fn pack_trailer(seq: u64, kind: ValueKind) -> u64 {
    debug_assert!(seq <= MAX_SEQUENCE);
    (seq << 8) | kind as u64
}

/// Appends the internal key for `(user_key, seq, kind)` to `dst`.
#[inline]
pub fn append_internal_key(dst: &mut Vec<u8>, user_key: &[u8], seq: u64, kind: ValueKind) {
    dst.extend_from_slice(user_key);
    dst.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

/// Builds the internal key for `(user_key, seq, kind)`.
pub fn make_internal_key(user_key: &[u8], seq: u64, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, kind);
    v
}

/// The key that seeks to the newest version of `user_key` visible at `seq`.
pub fn seek_key(user_key: &[u8], seq: u64) -> Vec<u8> {
    make_internal_key(user_key, seq, ValueKind::MAX)
}

/// The user-key part of an internal key. Callers guarantee `ikey.len() >= 8` (checked on decode).
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// The trailer of an internal key (0 if the key is too short, which decoders reject earlier).
#[inline]
pub fn trailer(ikey: &[u8]) -> u64 {
    let n = ikey.len();
    if n < TRAILER_LEN {
        return 0;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&ikey[n - TRAILER_LEN..]);
    u64::from_le_bytes(b)
}

/// A parsed internal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user's key.
    pub user_key: &'a [u8],
    /// Sequence number of the write.
    pub seq: u64,
    /// What the record means.
    pub kind: ValueKind,
}

/// Splits an internal key into its parts; `None` if it is too short or the kind byte is unknown.
#[inline]
pub fn parse(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    if ikey.len() < TRAILER_LEN {
        return None;
    }
    let t = trailer(ikey);
    Some(ParsedKey { user_key: user_key(ikey), seq: t >> 8, kind: ValueKind::from_u8(t as u8)? })
}

/// Bytewise comparison, inlined: eight bytes at a time as big-endian words. Keys are short, and
/// a `memcmp` call per skip-list step was a quarter of the memtable's insert time. The last
/// (partial) word is compared as the common length's last eight bytes, whose leading part was
/// already found equal, so no comparison calls `memcmp` (whose call was still 8 % of an INCR's
/// executor time when only the tail went to it).
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let word = |s: &[u8], at: usize| u64::from_be_bytes(s[at..at + 8].try_into().unwrap_or_default());
    let mut at = 0;
    while at + 8 <= n {
        let (x, y) = (word(a, at), word(b, at));
        if x != y {
            return x.cmp(&y);
        }
        at += 8;
    }
    let tail = if at == n {
        Ordering::Equal
    } else if n >= 8 {
        word(a, n - 8).cmp(&word(b, n - 8))
    } else {
        a[at..n].iter().zip(&b[at..n]).map(|(x, y)| x.cmp(y)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
    };
    tail.then(a.len().cmp(&b.len()))
}

/// The internal-key order: user key ascending, then trailer (seq, kind) descending.
#[inline]
pub fn compare(a: &[u8], b: &[u8]) -> Ordering {
    match compare_bytes(user_key(a), user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// Shortest key `k` with `start <= k < limit` in internal-key order (used for index separators).
///
/// Works on user keys as LevelDB does: when a shorter user key separates the two, it is returned
/// with the largest trailer so that it sorts before every real entry for that user key.
pub fn shortest_separator(start: &[u8], limit: &[u8]) -> Vec<u8> {
    let (su, lu) = (user_key(start), user_key(limit));
    let common = su.iter().zip(lu).take_while(|(a, b)| a == b).count();
    if common < su.len().min(lu.len()) {
        let b = su[common];
        if b < 0xff && b + 1 < lu[common] {
            let mut sep = su[..=common].to_vec();
            sep[common] += 1;
            debug_assert!(sep.as_slice() > su && sep.as_slice() < lu);
            return make_internal_key(&sep, MAX_SEQUENCE, ValueKind::MAX);
        }
    }
    start.to_vec()
}

/// Shortest key `k >= start` (used for the last block of a table).
pub fn short_successor(start: &[u8]) -> Vec<u8> {
    let su = user_key(start);
    if let Some(i) = su.iter().position(|&b| b != 0xff) {
        let mut s = su[..=i].to_vec();
        s[i] += 1;
        return make_internal_key(&s, MAX_SEQUENCE, ValueKind::MAX);
    }
    start.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ik(k: &str, seq: u64) -> Vec<u8> {
        make_internal_key(k.as_bytes(), seq, ValueKind::Put)
    }

    #[test]
    fn order_is_user_key_then_newest_first() {
        assert_eq!(compare(&ik("a", 5), &ik("b", 1)), Ordering::Less);
        assert_eq!(compare(&ik("a", 5), &ik("a", 1)), Ordering::Less);
        assert_eq!(compare(&ik("a", 1), &ik("a", 5)), Ordering::Greater);
        assert_eq!(compare(&ik("ab", 1), &ik("a", 9)), Ordering::Greater);
        // A seek key at seq 5 sorts before the entry written at seq 5 and after seq 6.
        let s = seek_key(b"a", 5);
        assert_eq!(compare(&s, &ik("a", 5)), Ordering::Less);
        assert_eq!(compare(&s, &ik("a", 6)), Ordering::Greater);
    }

    #[test]
    fn parse_round_trip_and_rejects_garbage() {
        let k = make_internal_key(b"key", 42, ValueKind::Delete);
        let p = parse(&k).unwrap();
        assert_eq!((p.user_key, p.seq, p.kind), (&b"key"[..], 42, ValueKind::Delete));
        assert!(parse(b"short").is_none());
        let mut bad = k.clone();
        let n = bad.len();
        bad[n - 8] = 9; // unknown kind
        assert!(parse(&bad).is_none());
    }

    proptest::proptest! {
        #[test]
        fn fast_compare_matches_slice_order_for_any_bytes(
            prefix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20),
            a in proptest::collection::vec(0u8..3, 0..20),
            b in proptest::collection::vec(0u8..3, 0..20),
        ) {
            // A shared prefix of any length, then tails over a tiny alphabet: words that are
            // equal up to the last, partial one are common.
            let a = [prefix.as_slice(), &a].concat();
            let b = [prefix.as_slice(), &b].concat();
            proptest::prop_assert_eq!(compare_bytes(&a, &b), a.cmp(&b));
        }
    }

    #[test]
    fn fast_compare_matches_slice_order() {
        let samples: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefgi".to_vec(),
            b"abcdefghijklmnopq".to_vec(),
            b"abcdefghijklmnopr".to_vec(),
            vec![0xff; 9],
            vec![0x7f, 0xff],
            b"M\0\0key:000000012345".to_vec(),
            b"M\0\0key:000000012346".to_vec(),
            b"M\0\0key:00000001234".to_vec(),
            b"M\0\0key:000000012345\0".to_vec(),
            b"abc".to_vec(),
            b"abd".to_vec(),
            b"ab".to_vec(),
        ];
        for a in &samples {
            for b in &samples {
                assert_eq!(compare_bytes(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn separators_stay_between_bounds() {
        let cases = [("abc", "abz"), ("abc", "abd"), ("a", "b"), ("abc", "abcd"), ("\u{7f}x", "\u{7f}z"), ("x", "x")];
        for (a, b) in cases {
            let (s, l) = (ik(a, 7), ik(b, 3));
            let sep = shortest_separator(&s, &l);
            assert_ne!(compare(&sep, &s), Ordering::Less, "{a}..{b}");
            if a != b {
                assert_eq!(compare(&sep, &l), Ordering::Less, "{a}..{b}");
            }
        }
        assert_eq!(user_key(&shortest_separator(&ik("abc", 1), &ik("abz", 1))), b"abd");
        let succ = short_successor(&ik("abc", 1));
        assert_eq!(user_key(&succ), b"b");
        let all_ff = make_internal_key(&[0xff, 0xff], 1, ValueKind::Put);
        assert_eq!(short_successor(&all_ff), all_ff);
    }
}
