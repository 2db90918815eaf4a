//! Replies and their encoding in RESP2 and RESP3.

use bytes::{BufMut, Bytes, BytesMut};

/// The protocol a connection speaks (`HELLO 3` switches to RESP3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, every client's default.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// A reply to a client. RESP3-only types fall back to RESP2 as Redis does.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …` (the text includes the error code, e.g. `WRONGTYPE …`).
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$5\r\nhello`.
    Bulk(Bytes),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Null,
    /// A missing array (e.g. EXEC after a failed WATCH): `*-1` in RESP2, `_` in RESP3.
    NullArray,
    /// `*n`.
    Array(Vec<Reply>),
    /// Bulk strings framed as they were read ([`BulkArray`]): equal to the `Array`, `Set` or
    /// `Map` of the same `Bulk`s, and encoded the same.
    Bulks(BulkArray),
    /// `%n` in RESP3; a flat array of key, value, … in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// `~n` in RESP3; an array in RESP2.
    Set(Vec<Reply>),
    /// `,1.5` in RESP3; a bulk string in RESP2.
    Double(f64),
    /// A double printed in Redis's "human" form (`%.17Lf`, trailing zeros cut: GEOPOS
    /// coordinates): `,` in RESP3, a bulk string in RESP2.
    HumanDouble(f64),
    /// `#t` in RESP3; `:1` / `:0` in RESP2.
    Boolean(bool),
    /// `=15\r\ntxt:Some string` in RESP3; a bulk string in RESP2.
    Verbatim(Bytes),
    /// `>n` in RESP3 (pub/sub messages); an array in RESP2.
    Push(Vec<Reply>),
    /// Pairs such as (member, score): an array of 2-element arrays in RESP3, a flat array in
    /// RESP2 (ZRANGE … WITHSCORES, HRANDFIELD … WITHVALUES).
    Pairs(Vec<(Reply, Reply)>),
    /// `(3492890328409238509324850943850943825024385` in RESP3; a bulk string in RESP2 (a
    /// script's `{big_number=…}`).
    BigNumber(String),
    /// Several replies to one command, one after another (SUBSCRIBE answers once per channel).
    Many(Vec<Reply>),
}

impl Reply {
    /// True for pub/sub pushes (a message, or SUBSCRIBE's confirmations): Redis sends them even
    /// while `CLIENT REPLY OFF` or `SKIP` silences the client's replies.
    pub fn is_push(&self) -> bool {
        match self {
            Reply::Push(_) => true,
            Reply::Many(replies) => !replies.is_empty() && replies.iter().all(Reply::is_push),
            _ => false,
        }
    }

    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    /// An error reply; `msg` starts with its code (`ERR`, `WRONGTYPE`, …).
    pub fn error(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// A bulk string from anything byte-like.
    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// The items of an array or set reply (`Bulks` as `Bulk`s); `None` for any other.
    pub fn into_items(self) -> Option<Vec<Reply>> {
        match self {
            Reply::Array(items) | Reply::Set(items) => Some(items),
            Reply::Bulks(bulks) => bulks.into_reply().into_items(),
            _ => None,
        }
    }

    /// Appends the encoding of this reply for `proto` to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        let resp3 = proto == Protocol::Resp3;
        match self {
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(s) => line(out, b'-', s.as_bytes()),
            Reply::Integer(n) => header(out, b':', *n),
            Reply::Bulk(b) => bulk(out, b'$', b),
            Reply::Null if resp3 => out.put_slice(b"_\r\n"),
            Reply::Null => out.put_slice(b"$-1\r\n"),
            Reply::NullArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::NullArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(items) => aggregate(out, b'*', items, proto),
            Reply::Bulks(bulks) => bulks.encode(proto, out),
            Reply::Set(items) => aggregate(out, if resp3 { b'~' } else { b'*' }, items, proto),
            Reply::Push(items) => aggregate(out, if resp3 { b'>' } else { b'*' }, items, proto),
            Reply::Map(pairs) => {
                if resp3 {
                    header(out, b'%', pairs.len() as i64);
                } else {
                    header(out, b'*', 2 * pairs.len() as i64);
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Pairs(pairs) => {
                header(out, b'*', if resp3 { pairs.len() } else { 2 * pairs.len() } as i64);
                for (a, b) in pairs {
                    if resp3 {
                        out.put_slice(b"*2\r\n");
                    }
                    a.encode(proto, out);
                    b.encode(proto, out);
                }
            }
            Reply::Many(replies) => replies.iter().for_each(|r| r.encode(proto, out)),
            Reply::BigNumber(n) if resp3 => line(out, b'(', n.as_bytes()),
            Reply::BigNumber(n) => bulk(out, b'$', n.as_bytes()),
            Reply::Double(d) if resp3 => line(out, b',', format_double(*d).as_bytes()),
            Reply::Double(d) => bulk(out, b'$', format_double(*d).as_bytes()),
            Reply::HumanDouble(d) if resp3 => line(out, b',', crate::num::human_double(*d).as_bytes()),
            Reply::HumanDouble(d) => bulk(out, b'$', crate::num::human_double(*d).as_bytes()),
            Reply::Boolean(b) if resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Reply::Boolean(b) => header(out, b':', i64::from(*b)),
            Reply::Verbatim(text) if resp3 => {
                header(out, b'=', text.len() as i64 + 4);
                out.put_slice(b"txt:");
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
            Reply::Verbatim(text) => bulk(out, b'$', text),
        }
    }

    /// The encoding as a fresh buffer (tests, one-off replies).
    pub fn to_bytes(&self, proto: Protocol) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(proto, &mut out);
        out.freeze()
    }
}

impl PartialEq for Reply {
    /// Structural equality, except that a [`Reply::Bulks`] equals the `Array`, `Set` or `Map`
    /// of the same bulk strings (and, as before, `Double(NAN) != Double(NAN)`).
    fn eq(&self, other: &Reply) -> bool {
        use Reply::*;
        match (self, other) {
            (Bulks(a), Bulks(b)) => a == b,
            (Bulks(bulks), structured) | (structured, Bulks(bulks)) => bulks.clone().into_reply() == *structured,
            (Simple(a), Simple(b)) | (Error(a), Error(b)) | (BigNumber(a), BigNumber(b)) => a == b,
            (Integer(a), Integer(b)) => a == b,
            (Bulk(a), Bulk(b)) | (Verbatim(a), Verbatim(b)) => a == b,
            (Null, Null) | (NullArray, NullArray) => true,
            (Array(a), Array(b)) | (Set(a), Set(b)) | (Push(a), Push(b)) | (Many(a), Many(b)) => a == b,
            (Map(a), Map(b)) | (Pairs(a), Pairs(b)) => a == b,
            (Double(a), Double(b)) | (HumanDouble(a), HumanDouble(b)) => a == b,
            (Boolean(a), Boolean(b)) => a == b,
            _ => false,
        }
    }
}

/// Bulk strings built one at a time straight into their encoding (`$len\r\n…\r\n` each), as
/// an array, a set or a map of them: a range read (LRANGE, SMEMBERS, HGETALL, …) copies each
/// element once, from the engine's buffer into the reply, with no `Bytes` or `Reply` per
/// element to allocate and drop. Only the header depends on the protocol (`*`, or RESP3's `~`
/// and `%`): bulk strings read the same in RESP2 and RESP3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkArray {
    kind: Aggregate,
    count: usize,
    framed: BytesMut,
}

/// What a [`BulkArray`] is to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Array,
    Set,
    /// Keys and values alternating.
    Map,
}

impl Default for BulkArray {
    fn default() -> BulkArray {
        BulkArray::with_capacity(0)
    }
}

impl BulkArray {
    /// An empty array with room for about `bytes` bytes of elements.
    pub fn with_capacity(bytes: usize) -> BulkArray {
        BulkArray { kind: Aggregate::Array, count: 0, framed: BytesMut::with_capacity(bytes) }
    }

    /// An empty set (RESP3's `~`, an array in RESP2), as [`BulkArray::with_capacity`].
    pub fn set_with_capacity(bytes: usize) -> BulkArray {
        BulkArray { kind: Aggregate::Set, ..BulkArray::with_capacity(bytes) }
    }

    /// An empty map (RESP3's `%`, a flat array in RESP2) whose keys and values are pushed in
    /// turn, as [`BulkArray::with_capacity`].
    pub fn map_with_capacity(bytes: usize) -> BulkArray {
        BulkArray { kind: Aggregate::Map, ..BulkArray::with_capacity(bytes) }
    }

    /// Appends one bulk string (a map's key or value in turn).
    pub fn push(&mut self, item: &[u8]) {
        bulk(&mut self.framed, b'$', item);
        self.count += 1;
    }

    /// The number of strings (twice the number of a map's entries).
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if it holds no string.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        match (self.kind, proto) {
            (Aggregate::Set, Protocol::Resp3) => header(out, b'~', self.count as i64),
            (Aggregate::Map, Protocol::Resp3) => header(out, b'%', self.count as i64 / 2),
            _ => header(out, b'*', self.count as i64),
        }
        out.put_slice(&self.framed);
    }

    /// The strings, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut rest = &self.framed[..];
        std::iter::from_fn(move || {
            // Each item is `$<len>\r\n<len bytes>\r\n`, as `push` framed it.
            let digits_end = rest.iter().position(|&b| b == b'\r')?;
            let len: usize = std::str::from_utf8(&rest[1..digits_end]).ok()?.parse().ok()?;
            let item = &rest[digits_end + 2..digits_end + 2 + len];
            rest = &rest[digits_end + 2 + len + 2..];
            Some(item)
        })
    }

    /// The same reply built of `Bulk`s (scripts convert reply by reply).
    pub fn into_reply(self) -> Reply {
        let mut items = self.iter().map(|b| Reply::Bulk(Bytes::copy_from_slice(b)));
        match self.kind {
            Aggregate::Array => Reply::Array(items.collect()),
            Aggregate::Set => Reply::Set(items.collect()),
            Aggregate::Map => {
                Reply::Map(std::iter::from_fn(|| Some((items.next()?, items.next().unwrap_or(Reply::Null)))).collect())
            }
        }
    }
}

/// A double as Redis 7.0 prints scores and RESP3 doubles: C's `%.17g` (`1.1000000000000001`,
/// `1e+20`, `inf`, `-inf`, `nan`), checked against redis-server 7.0.15.
pub fn format_double(d: f64) -> String {
    format_double_precision(d, 17)
}

/// C's `%.<digits>g` (`digits` ≥ 1): Redis's doubles use 17, Lua 5.1 prints numbers with 14.
pub fn format_double_precision(d: f64, digits: usize) -> String {
    if d.is_nan() {
        return if d.is_sign_negative() && digits != 17 { "-nan".into() } else { "nan".into() };
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // An integer below 2^53 has at most 16 digits, all exact: `%.17g` prints it as it is. (Scores
    // are often integers: counters, timestamps.)
    if d.fract() == 0.0 && d.abs() < 9_007_199_254_740_992.0 && digits >= 16 {
        return (d as i64).to_string();
    }
    // The `digits` significant digits, rounded once; `%g` then places the point (style `f` for
    // exponents in [-4, digits)) or keeps the exponent, and drops trailing zeros either way.
    let sci = format!("{:.*e}", digits - 1, d.abs()); // e.g. "1.1000000000000001e0" for 17 digits
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let significant: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::with_capacity(digits + 8);
    if d < 0.0 {
        out.push('-');
    }
    let point_after = if (-4..digits as i32).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&significant);
            None
        } else {
            Some(exp as usize + 1)
        }
    } else {
        Some(1)
    };
    if let Some(n) = point_after {
        out.push_str(&significant[..n]);
        out.push('.');
        out.push_str(&significant[n..]);
    }
    let trimmed = out.trim_end_matches('0').trim_end_matches('.').len();
    out.truncate(trimmed);
    if !(-4..digits as i32).contains(&exp) {
        out.push_str(&format!("e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs()));
    }
    out
}

/// `<prefix><text>\r\n`; a CR or LF inside a status or error line would break the framing, so
/// they become spaces (as Redis does).
fn line(out: &mut BytesMut, prefix: u8, text: &[u8]) {
    out.put_u8(prefix);
    out.extend(text.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    out.put_slice(b"\r\n");
}

fn header(out: &mut BytesMut, prefix: u8, n: i64) {
    out.put_u8(prefix);
    let mut buf = itoa_buf(n);
    out.put_slice(buf.as_bytes_mut());
    out.put_slice(b"\r\n");
}

fn bulk(out: &mut BytesMut, prefix: u8, data: &[u8]) {
    header(out, prefix, data.len() as i64);
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

fn aggregate(out: &mut BytesMut, prefix: u8, items: &[Reply], proto: Protocol) {
    header(out, prefix, items.len() as i64);
    for i in items {
        i.encode(proto, out);
    }
}

/// Decimal digits of `n` without allocating.
fn itoa_buf(n: i64) -> Digits {
    let mut d = Digits { buf: [0; 20], start: 20 };
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        d.start -= 1;
        d.buf[d.start] = b'-';
    }
    d
}

struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_bytes_mut(&mut self) -> &[u8] {
        &self.buf[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(r: &Reply) -> (String, String) {
        let s = |p| String::from_utf8(r.to_bytes(p).to_vec()).unwrap();
        (s(Protocol::Resp2), s(Protocol::Resp3))
    }

    #[test]
    fn scalar_replies() {
        assert_eq!(both(&Reply::ok()), ("+OK\r\n".into(), "+OK\r\n".into()));
        assert_eq!(both(&Reply::error("ERR bad\r\nthing")).0, "-ERR bad  thing\r\n");
        assert_eq!(both(&Reply::Integer(-42)).0, ":-42\r\n");
        assert_eq!(both(&Reply::Integer(i64::MIN)).0, ":-9223372036854775808\r\n");
        assert_eq!(both(&Reply::bulk(&b"hi"[..])).0, "$2\r\nhi\r\n");
        assert_eq!(both(&Reply::bulk(&b""[..])).0, "$0\r\n\r\n");
        assert_eq!(both(&Reply::Null), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(&Reply::NullArray), ("*-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(&Reply::Boolean(true)), (":1\r\n".into(), "#t\r\n".into()));
        assert_eq!(both(&Reply::Double(1.5)), ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into()));
        assert_eq!(
            both(&Reply::Verbatim(Bytes::from_static(b"ok"))),
            ("$2\r\nok\r\n".into(), "=6\r\ntxt:ok\r\n".into())
        );
    }

    #[test]
    fn aggregates_fall_back_in_resp2() {
        let map = Reply::Map(vec![(Reply::bulk(&b"a"[..]), Reply::Integer(1))]);
        assert_eq!(both(&map), ("*2\r\n$1\r\na\r\n:1\r\n".into(), "%1\r\n$1\r\na\r\n:1\r\n".into()));
        let set = Reply::Set(vec![Reply::bulk(&b"x"[..])]);
        assert_eq!(both(&set), ("*1\r\n$1\r\nx\r\n".into(), "~1\r\n$1\r\nx\r\n".into()));
        let push = Reply::Push(vec![Reply::bulk(&b"message"[..]), Reply::Null]);
        assert_eq!(both(&push), ("*2\r\n$7\r\nmessage\r\n$-1\r\n".into(), ">2\r\n$7\r\nmessage\r\n_\r\n".into()));
        assert_eq!(both(&Reply::Array(vec![])).0, "*0\r\n");
    }

    #[test]
    fn bulk_arrays_encode_and_compare_as_arrays_of_bulks() {
        let items: [&[u8]; 4] = [b"a", b"", b"with\r\ncrlf", &[0u8; 300]];
        let mut bulks = BulkArray::with_capacity(16);
        items.iter().for_each(|i| bulks.push(i));
        let array = Reply::Array(items.iter().map(|i| Reply::bulk(*i)).collect());
        let bulks = Reply::Bulks(bulks);
        assert_eq!(both(&bulks), both(&array));
        assert_eq!(bulks, array);
        assert_eq!(array, bulks);
        let Reply::Bulks(b) = &bulks else { unreachable!() };
        assert_eq!(b.iter().collect::<Vec<_>>(), items.to_vec());
        assert_eq!(b.clone().into_reply(), array);
        assert_ne!(bulks, Reply::Array(items[..3].iter().map(|i| Reply::bulk(*i)).collect()));
        assert_ne!(bulks, Reply::Array(items.iter().map(|_| Reply::Integer(1)).collect()));
        assert_eq!(both(&Reply::Bulks(BulkArray::default())).1, "*0\r\n");

        let mut set = BulkArray::set_with_capacity(0);
        set.push(b"x");
        assert_eq!(both(&Reply::Bulks(set.clone())), both(&Reply::Set(vec![Reply::bulk(&b"x"[..])])));
        assert_eq!(Reply::Bulks(set.clone()), Reply::Set(vec![Reply::bulk(&b"x"[..])]));
        assert_ne!(Reply::Bulks(set), Reply::Array(vec![Reply::bulk(&b"x"[..])]));
        let mut map = BulkArray::map_with_capacity(0);
        map.push(b"a");
        map.push(b"1");
        let pairs = Reply::Map(vec![(Reply::bulk(&b"a"[..]), Reply::bulk(&b"1"[..]))]);
        assert_eq!(both(&Reply::Bulks(map.clone())), both(&pairs));
        assert_eq!(Reply::Bulks(map), pairs);
    }

    /// C's own `%.<digits>g`.
    fn c_format(d: f64, digits: usize) -> String {
        extern "C" {
            fn snprintf(buf: *mut std::ffi::c_char, size: usize, format: *const std::ffi::c_char, ...) -> i32;
        }
        let mut buf = [0u8; 64];
        // SAFETY: a 64-byte buffer, its size passed; `%.*g` takes an int precision and a double.
        let n = unsafe { snprintf(buf.as_mut_ptr().cast(), buf.len(), c"%.*g".as_ptr(), digits as i32, d) };
        String::from_utf8(buf[..n as usize].to_vec()).unwrap()
    }

    proptest::proptest! {
        #[test]
        fn doubles_print_as_c_prints_them(bits: u64, int: i64, digits in 1usize..=17) {
            for d in [f64::from_bits(bits), int as f64, (int % 100_000) as f64 / 64.0] {
                if d.is_finite() {
                    proptest::prop_assert_eq!(format_double_precision(d, digits), c_format(d, digits), "{:e}", d);
                }
            }
        }
    }

    #[test]
    fn doubles_print_as_redis_prints_them() {
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(-0.5), "-0.5");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_double(f64::NEG_INFINITY), "-inf");
        // %.17g, as redis-server 7.0.15 prints ZSCORE replies.
        assert_eq!(format_double(1.1), "1.1000000000000001");
        assert_eq!(format_double(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(123456789012345678.0), "1.2345678901234568e+17");
        assert_eq!(format_double(1e-5), "1.0000000000000001e-05");
        assert_eq!(format_double(2.5), "2.5");
        assert_eq!(format_double(1e16), "10000000000000000");
        assert_eq!(format_double(1e300), "1.0000000000000001e+300");
        assert_eq!(format_double(-2.5e-7), "-2.4999999999999999e-07");
        assert_eq!(format_double(0.001), "0.001");
        assert_eq!(format_double(f64::NAN), "nan");
    }
}
