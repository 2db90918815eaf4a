//! Parsing one request at a time from the front of a connection's buffer.

use bytes::{Bytes, BytesMut};

/// Limits on what a client may send, as Redis enforces them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest bulk argument (`proto-max-bulk-len`, default 512 MiB).
    pub max_bulk_len: usize,
    /// Longest inline command, or length line, without a newline (64 KiB in Redis).
    pub max_inline_len: usize,
    /// The client has not authenticated: Redis 7's stricter limits apply (at most
    /// [`UNAUTHENTICATED_MAX_ARGS`] arguments of at most [`UNAUTHENTICATED_MAX_BULK`] bytes).
    pub unauthenticated: bool,
}

/// Most arguments an unauthenticated client may send in one request.
pub const UNAUTHENTICATED_MAX_ARGS: i64 = 10;
/// Largest argument an unauthenticated client may send.
pub const UNAUTHENTICATED_MAX_BULK: i64 = 16 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bulk_len: 512 << 20, max_inline_len: 64 << 10, unauthenticated: false }
    }
}

/// A request the server must refuse; the connection is closed after the error is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

/// Parses the request at the front of `buf`.
///
/// - `Ok(Some(args))`: a complete request, removed from `buf` (an empty `args` is an empty
///   request such as a blank line or `*0`, which Redis ignores);
/// - `Ok(None)`: more bytes are needed (nothing is consumed);
/// - `Err(e)`: the client broke the protocol; reply `-ERR {e}` and close the connection.
pub fn parse_request(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits),
        Some(_) => parse_inline(buf, limits),
    }
}

/// Position of the `\r\n` ending the line that starts at `from`, if complete.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rel = buf.get(from..)?.iter().position(|&b| b == b'\r')?;
    let at = from + rel;
    (at + 1 < buf.len()).then_some(at)
}

/// Parses a decimal integer the way Redis's `string2ll` does (optional '-', no '+', no spaces,
/// no leading zeros except "0").
pub fn parse_int(digits: &[u8]) -> Option<i64> {
    let (neg, rest) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if rest.is_empty()
        || rest.len() > 19
        || (rest.len() > 1 && rest[0] == b'0')
        || (neg && rest == b"0")
        || !rest.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let v: i128 = std::str::from_utf8(rest).ok()?.parse().ok()?;
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

/// Requests of at most this many arguments are parsed without a vector of their spans.
const SHORT_REQUEST: usize = 8;

fn parse_multibulk(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = line_end(buf, 0) else {
        if buf.len() > limits.max_inline_len {
            return err("too big mbulk count string");
        }
        return Ok(None);
    };
    let count = match parse_int(&buf[1..nl]) {
        Some(n) if limits.unauthenticated && n > UNAUTHENTICATED_MAX_ARGS => {
            return err("unauthenticated multibulk length")
        }
        Some(n) if n <= i64::from(i32::MAX) => n,
        _ => return err("invalid multibulk length"),
    };
    let mut pos = nl + 2;
    if count <= 0 {
        let _ = buf.split_to(pos);
        return Ok(Some(Vec::new()));
    }
    // Find every argument before consuming anything: a request is taken whole or not at all.
    // The spans of a short request stay on the stack (one allocation a request, the
    // arguments' vector, instead of two).
    let mut short = [(0usize, 0usize); SHORT_REQUEST];
    let mut long = Vec::new();
    if count as usize > SHORT_REQUEST {
        long.reserve((count as usize).min(1024));
    }
    for found in 0..count as usize {
        let Some(&first) = buf.get(pos) else { return Ok(None) };
        if first != b'$' {
            return err(format!("expected '$', got '{}'", first as char));
        }
        let Some(nl) = line_end(buf, pos) else {
            if buf.len() - pos > limits.max_inline_len {
                return err("too big bulk count string");
            }
            return Ok(None);
        };
        let len = match parse_int(&buf[pos + 1..nl]) {
            Some(n) if limits.unauthenticated && n > UNAUTHENTICATED_MAX_BULK => {
                return err("unauthenticated bulk length")
            }
            Some(n) if n >= 0 && n as u64 <= limits.max_bulk_len as u64 => n as usize,
            _ => return err("invalid bulk length"),
        };
        let start = nl + 2;
        let end = start + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return err("invalid bulk terminator");
        }
        if let Some(slot) = short.get_mut(found).filter(|_| count as usize <= SHORT_REQUEST) {
            *slot = (start, end);
        } else {
            long.push((start, end));
        }
        pos = end + 2;
    }
    let spans = if count as usize <= SHORT_REQUEST { &short[..count as usize] } else { &long[..] };
    let frame = buf.split_to(pos).freeze();
    Ok(Some(spans.iter().map(|&(s, e)| frame.slice(s..e)).collect()))
}

fn parse_inline(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline_len {
            return err("too big inline request");
        }
        return Ok(None);
    };
    let line = buf.split_to(nl + 1);
    let text = line.strip_suffix(b"\n").unwrap_or(&line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    match split_args(text) {
        Some(args) => Ok(Some(args.into_iter().map(Bytes::from).collect())),
        None => err("unbalanced quotes in request"),
    }
}

/// Splits an inline command like Redis's `sdssplitargs`: spaces separate arguments; "double
/// quotes" allow `\n \r \t \b \a \\ \" \xHH` escapes; 'single quotes' allow `\'`; a closing quote
/// must be followed by a space or the end. `None` on unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            let Some(&c) = line.get(i) else {
                if in_dq || in_sq {
                    return None;
                }
                break;
            };
            if in_dq {
                if c == b'\\'
                    && line.get(i + 1) == Some(&b'x')
                    && line.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                    && line.get(i + 3).is_some_and(u8::is_ascii_hexdigit)
                {
                    let hex = std::str::from_utf8(&line[i + 2..i + 4]).ok()?;
                    cur.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 4;
                    continue;
                }
                if c == b'\\' && i + 1 < line.len() {
                    cur.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    i = after_closing_quote(line, i)?;
                    break;
                }
                cur.push(c);
                i += 1;
            } else if in_sq {
                if c == b'\\' && line.get(i + 1) == Some(&b'\'') {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    i = after_closing_quote(line, i)?;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        i += 1;
                        break;
                    }
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    other => cur.push(other),
                }
                i += 1;
            }
        }
        args.push(cur);
    }
}

/// The position after a closing quote at `i`; `None` unless the argument ends right there.
fn after_closing_quote(line: &[u8], i: usize) -> Option<usize> {
    if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
        None
    } else {
        Some(i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> (Result<Option<Vec<Bytes>>, ProtocolError>, usize) {
        let mut buf = BytesMut::from(input);
        let r = parse_request(&mut buf, &Limits::default());
        (r, buf.len())
    }

    fn args(v: &[&str]) -> Option<Vec<Bytes>> {
        Some(v.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect())
    }

    #[test]
    fn multibulk_requests_parse_whole_and_in_pieces() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n";
        let mut buf = BytesMut::from(&req[..]);
        assert_eq!(parse_request(&mut buf, &Limits::default()).unwrap(), args(&["SET", "k", "hello"]));
        assert_eq!(parse_request(&mut buf, &Limits::default()).unwrap(), args(&["PING"]));
        assert!(buf.is_empty());
        // Every prefix is incomplete and consumes nothing.
        let first = &req[..29];
        for cut in 0..first.len() {
            let (r, left) = parse(&first[..cut]);
            assert_eq!(r, Ok(None), "cut {cut}");
            assert_eq!(left, cut);
        }
        // Binary-safe arguments, empty arguments.
        let (r, _) = parse(b"*2\r\n$4\r\na\r\nb\r\n$0\r\n\r\n");
        assert_eq!(r.unwrap(), args(&["a\r\nb", ""]));
    }

    #[test]
    fn empty_requests_are_skipped() {
        for input in [&b"*0\r\n"[..], b"*-10\r\n", b"\r\n", b"   \n"] {
            let (r, left) = parse(input);
            assert_eq!(r, Ok(Some(Vec::new())), "{input:?}");
            assert_eq!(left, 0);
        }
    }

    #[test]
    fn protocol_errors_use_redis_wording() {
        let cases: &[(&[u8], &str)] = &[
            (b"*3000000000\r\n", "invalid multibulk length"),
            (b"*abc\r\n", "invalid multibulk length"),
            (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", "expected '$', got 'f'"),
            (b"*1\r\n$-5\r\n", "invalid bulk length"),
            (b"*1\r\n$x\r\n", "invalid bulk length"),
            (b"*1\r\n$3\r\nabcde\r\n", "invalid bulk terminator"),
            (b"SET \"unbalanced\r\n", "unbalanced quotes in request"),
            (b"SET \"a\"b\r\n", "unbalanced quotes in request"),
        ];
        for (input, msg) in cases {
            let (r, _) = parse(input);
            assert_eq!(r, Err(ProtocolError(msg.to_string())), "{:?}", String::from_utf8_lossy(input));
        }
        assert_eq!(ProtocolError("x".into()).to_string(), "Protocol error: x");
    }

    #[test]
    fn unauthenticated_clients_get_redis_7_limits() {
        let strict = Limits { unauthenticated: true, ..Limits::default() };
        let mut many = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(parse_request(&mut many, &strict), Err(ProtocolError("unauthenticated multibulk length".into())));
        let mut big = BytesMut::from(&b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"[..]);
        assert_eq!(parse_request(&mut big, &strict), Err(ProtocolError("unauthenticated bulk length".into())));
        let mut fine = BytesMut::from(&b"*2\r\n$4\r\nAUTH\r\n$4\r\npass\r\n"[..]);
        assert_eq!(parse_request(&mut fine, &strict).unwrap().unwrap().len(), 2);
        let mut big = BytesMut::from(&b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"[..]);
        assert_eq!(parse_request(&mut big, &Limits::default()), Ok(None), "authenticated: just incomplete");
    }

    #[test]
    fn oversized_inputs_are_refused_before_they_are_buffered() {
        let limits = Limits { max_bulk_len: 10, max_inline_len: 100, unauthenticated: false };
        let mut buf = BytesMut::from(&b"*1\r\n$11\r\n"[..]);
        assert_eq!(parse_request(&mut buf, &limits), Err(ProtocolError("invalid bulk length".into())));
        let mut buf = BytesMut::from(&vec![b'a'; 101][..]);
        assert_eq!(parse_request(&mut buf, &limits), Err(ProtocolError("too big inline request".into())));
        let mut long_count = b"*".to_vec();
        long_count.extend(std::iter::repeat_n(b'1', 101));
        let mut buf = BytesMut::from(&long_count[..]);
        assert_eq!(parse_request(&mut buf, &limits), Err(ProtocolError("too big mbulk count string".into())));
        let mut buf = BytesMut::from(&b"*1\r\n$1111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111"[..]);
        assert_eq!(parse_request(&mut buf, &limits), Err(ProtocolError("too big bulk count string".into())));
    }

    #[test]
    fn inline_commands_split_like_redis_cli() {
        let (r, _) = parse(b"SET key \"hello world\" 'it''s'\r\n");
        assert_eq!(r, Err(ProtocolError("unbalanced quotes in request".into())), "a quote must end its argument");
        let (r, _) = parse(b"SET key \"a\\x41\\n\\\"q\" 'it\\'s'  \n");
        assert_eq!(r.unwrap(), args(&["SET", "key", "aA\n\"q", "it's"]));
        let (r, _) = parse(b"PING\n");
        assert_eq!(r.unwrap(), args(&["PING"]));
        let (r, left) = parse(b"GET k");
        assert_eq!((r, left), (Ok(None), 5), "no newline yet");
    }

    #[test]
    fn integers_follow_string2ll() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b""[..], b"-", b"+1", b"01", b"-0", b" 1", b"1 ", b"9223372036854775808", b"1a"] {
            assert_eq!(parse_int(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panicking(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut buf = BytesMut::from(&data[..]);
            let limits = Limits { max_bulk_len: 64, max_inline_len: 64, unauthenticated: false };
            for _ in 0..10 {
                match parse_request(&mut buf, &limits) {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }

        /// Short requests (spans kept on the stack) and long ones alike.
        #[test]
        fn encoded_requests_round_trip(argv in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20), 1..3 * SHORT_REQUEST)) {
            let mut wire = format!("*{}\r\n", argv.len()).into_bytes();
            for a in &argv {
                wire.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                wire.extend_from_slice(a);
                wire.extend_from_slice(b"\r\n");
            }
            let mut buf = BytesMut::from(&wire[..]);
            let got = parse_request(&mut buf, &Limits::default()).unwrap().unwrap();
            proptest::prop_assert_eq!(got.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), argv);
            proptest::prop_assert!(buf.is_empty());
        }
    }
}
