//! lua-cmsgpack's `cmsgpack` library (the version Redis bundles): `pack(v, …)` concatenates
//! the MessagePack encodings of its arguments, `unpack(s)` returns every value in `s`,
//! `unpack_one(s [, offset])` and `unpack_limit(s, limit [, offset])` return the offset to
//! continue from (-1 at the end) then the values.
//!
//! Its rules: a number that is an exact 64-bit integer packs as the smallest integer format,
//! else as a 32-bit float when that is exact, else a double; a table whose keys are exactly
//! 1..n packs as an array, any other as a map (in Lua's traversal order); tables nested
//! deeper than 16 and values MessagePack has no type for pack as nil. Strings use the str
//! formats (fixstr, str8/16/32); the old raw/str formats decode too. All numbers decode to
//! Lua numbers (doubles in Lua 5.1).

use mlua::{Lua, MultiValue, Table, Value};

use super::{arg_error, check_number, check_string, opt_integer};
use crate::scripting::api::{done, fail};

/// Tables nested deeper than this pack as nil (lua-cmsgpack's LUACMSGPACK_MAX_NESTING).
const MAX_NESTING: usize = 16;

/// Decoding deeper than this fails as lua-cmsgpack does when its Lua stack runs out.
const MAX_DECODE_DEPTH: usize = 1000;

/// The `cmsgpack` table.
pub(super) fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let pack = lua.create_function(|lua, args: MultiValue| {
        if args.is_empty() {
            return fail(lua, &arg_error(0, "pack", "MessagePack pack needs input."));
        }
        let mut out = Vec::new();
        for v in args.iter() {
            encode(v, &mut out, 0)?;
        }
        done(lua, lua.create_string(&out)?)
    })?;
    t.set("pack", crate::scripting::raising_at_caller(lua, pack)?)?;
    let unpack = lua.create_function(|lua, args: MultiValue| unpack_full(lua, &args, "unpack", 0, 0))?;
    t.set("unpack", crate::scripting::raising_at_caller(lua, unpack)?)?;
    let unpack_one = lua.create_function(|lua, args: MultiValue| {
        let offset = match opt_integer(&args, 1, "unpack_one", 0) {
            Ok(o) => o,
            Err(e) => return fail(lua, &e),
        };
        unpack_full(lua, &args, "unpack_one", 1, offset)
    })?;
    t.set("unpack_one", crate::scripting::raising_at_caller(lua, unpack_one)?)?;
    let unpack_limit = lua.create_function(|lua, args: MultiValue| {
        let limit = check_number(&args, 1, "unpack_limit").map(|n| n as i64);
        let (limit, offset) = match (limit, opt_integer(&args, 2, "unpack_limit", 0)) {
            (Ok(l), Ok(o)) => (l, o),
            (Err(e), _) | (_, Err(e)) => return fail(lua, &e),
        };
        unpack_full(lua, &args, "unpack_limit", limit, offset)
    })?;
    t.set("unpack_limit", crate::scripting::raising_at_caller(lua, unpack_limit)?)?;
    t.set("_NAME", "cmsgpack")?;
    t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

/// Appends `v`'s encoding at nesting `level`.
fn encode(v: &Value, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    match v {
        Value::String(s) => encode_bytes(&s.as_bytes(), out),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => encode_int(*n, out),
        Value::Number(n) => encode_number(*n, out),
        Value::Table(t) if level < MAX_NESTING => encode_table(t, out, level)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn encode_number(n: f64, out: &mut Vec<u8>) {
    // An exact int64 (the C library's `(int64_t)n == n`).
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if (-LIMIT..LIMIT).contains(&n) && n.trunc() == n {
        encode_int(n as i64, out);
    } else if (n as f32) as f64 == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    match n {
        0..=127 => out.push(n as u8),
        128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        0x1_0000_0000.. => {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        -32..=-1 => out.push(n as i8 as u8),
        -128..=-33 => out.extend_from_slice(&[0xd0, n as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

fn encode_bytes(s: &[u8], out: &mut Vec<u8>) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// A header with a 4-bit fix form, then 16- and 32-bit forms (arrays and maps).
fn encode_header(n: usize, fix: u8, op16: u8, out: &mut Vec<u8>) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(op16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(op16 + 1);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode_table(t: &Table, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    // An array when every key is a positive integer (that fits a C int) and the largest
    // equals the count: then the keys are exactly 1..n.
    let (mut count, mut max, mut array) = (0usize, 0f64, true);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(n) => n as f64,
            Value::Number(n) => n,
            _ => {
                array = false;
                break;
            }
        };
        if n <= 0.0 || n > i32::MAX as f64 || n.trunc() != n {
            array = false;
            break;
        }
        max = max.max(n);
        count += 1;
    }
    if array && max == count as f64 {
        let len = t.raw_len();
        encode_header(len, 0x90, 0xdc, out);
        for i in 1..=len {
            encode(&t.get::<Value>(i)?, out, level + 1)?;
        }
        return Ok(());
    }
    // Counted first, then encoded pair by pair: Lua 5.1 lets Rust hold only ~8000 values.
    let mut len = 0;
    for pair in t.clone().pairs::<Value, Value>() {
        pair?;
        len += 1;
    }
    encode_header(len, 0x80, 0xde, out);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, v) = pair?;
        encode(&k, out, level + 1)?;
        encode(&v, out, level + 1)?;
    }
    Ok(())
}

/// Why decoding stopped (lua-cmsgpack's cursor errors).
enum DecodeError {
    /// "Missing bytes in input."
    Eof,
    /// "Bad data format in input."
    BadFormat,
    /// Nested deeper than [`MAX_DECODE_DEPTH`].
    TooDeep,
}

/// A cursor over the input.
struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.s.len()).ok_or(DecodeError::Eof)?;
        let bytes = &self.s[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn value(&mut self, lua: &Lua, depth: usize) -> Result<mlua::Result<Value>, DecodeError> {
        if depth > MAX_DECODE_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        let op = self.take(1)?[0];
        let number = |n: f64| Ok(Ok(Value::Number(n)));
        match op {
            0xcc => number(self.be(1)? as f64),
            0xcd => number(self.be(2)? as f64),
            0xce => number(self.be(4)? as f64),
            // The C library pushes it as a (signed) lua_Integer.
            0xcf => number(self.be(8)? as i64 as f64),
            0xd0 => number(self.be(1)? as u8 as i8 as f64),
            0xd1 => number(self.be(2)? as u16 as i16 as f64),
            0xd2 => number(self.be(4)? as u32 as i32 as f64),
            0xd3 => number(self.be(8)? as i64 as f64),
            0xc0 => Ok(Ok(Value::Nil)),
            0xc3 => Ok(Ok(Value::Boolean(true))),
            0xc2 => Ok(Ok(Value::Boolean(false))),
            0xca => number(f32::from_bits(self.be(4)? as u32) as f64),
            0xcb => number(f64::from_bits(self.be(8)?)),
            0xd9 => {
                let n = self.be(1)? as usize;
                self.string(lua, n)
            }
            0xda => {
                let n = self.be(2)? as usize;
                self.string(lua, n)
            }
            0xdb => {
                let n = self.be(4)? as usize;
                self.string(lua, n)
            }
            0xdc => {
                let n = self.be(2)? as usize;
                self.array(lua, n, depth)
            }
            0xdd => {
                let n = self.be(4)? as usize;
                self.array(lua, n, depth)
            }
            0xde => {
                let n = self.be(2)? as usize;
                self.map(lua, n, depth)
            }
            0xdf => {
                let n = self.be(4)? as usize;
                self.map(lua, n, depth)
            }
            _ if op & 0x80 == 0 => number(f64::from(op)),
            _ if op & 0xe0 == 0xe0 => number(f64::from(op as i8)),
            _ if op & 0xe0 == 0xa0 => self.string(lua, usize::from(op & 0x1f)),
            _ if op & 0xf0 == 0x90 => self.array(lua, usize::from(op & 0xf), depth),
            _ if op & 0xf0 == 0x80 => self.map(lua, usize::from(op & 0xf), depth),
            _ => Err(DecodeError::BadFormat),
        }
    }

    fn string(&mut self, lua: &Lua, n: usize) -> Result<mlua::Result<Value>, DecodeError> {
        let bytes = self.take(n)?;
        Ok(lua.create_string(bytes).map(Value::String))
    }

    fn array(&mut self, lua: &Lua, n: usize, depth: usize) -> Result<mlua::Result<Value>, DecodeError> {
        let t = match lua.create_table() {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        for i in 1..=n {
            let v = match self.value(lua, depth + 1)? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            if let Err(e) = t.raw_set(i, v) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(Value::Table(t)))
    }

    fn map(&mut self, lua: &Lua, n: usize, depth: usize) -> Result<mlua::Result<Value>, DecodeError> {
        let t = match lua.create_table() {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        for _ in 0..n {
            let k = match self.value(lua, depth + 1)? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            let v = match self.value(lua, depth + 1)? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            // A nil key (or NaN) cannot index a Lua table; lua_settable would raise too.
            if matches!(k, Value::Nil) {
                return Ok(Err(mlua::Error::runtime("table index is nil")));
            }
            if let Err(e) = t.raw_set(k, v) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(Value::Table(t)))
    }
}

/// lua-cmsgpack's `mp_unpack_full`: `limit` values from `offset` (both 0: all, and no offset
/// in the results).
fn unpack_full(lua: &Lua, args: &MultiValue, func: &str, limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    let s = match check_string(args, 0, func) {
        Ok(s) => s,
        Err(e) => return fail(lua, &e),
    };
    let all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        // The C library prints the input length where it means the limit.
        let msg = format!("Invalid request to unpack with offset of {offset} and limit of {}.", s.len());
        return fail(lua, &msg);
    }
    if offset as u64 > s.len() as u64 {
        return fail(lua, &format!("Start offset {offset} greater than input length {}.", s.len()));
    }
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut c = Cursor { s: &s, pos: offset as usize };
    let mut values = MultiValue::new();
    let mut count = 0;
    while c.pos < s.len() && count < limit {
        match c.value(lua, 0) {
            Ok(Ok(v)) => values.push_back(v),
            Ok(Err(e)) => return Err(e),
            Err(DecodeError::Eof) => return fail(lua, "Missing bytes in input."),
            Err(DecodeError::BadFormat) => return fail(lua, "Bad data format in input."),
            Err(DecodeError::TooDeep) => {
                return fail(
                    lua,
                    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)",
                );
            }
        }
        count += 1;
    }
    if !all {
        let next = if c.pos == s.len() { -1.0 } else { c.pos as f64 };
        values.push_front(Value::Number(next));
    }
    values.push_front(Value::Boolean(true));
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(v: Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&v, &mut out, 0).unwrap();
        out
    }

    #[test]
    fn numbers_take_the_smallest_exact_format() {
        assert_eq!(packed(Value::Number(5.0)), [5]);
        assert_eq!(packed(Value::Number(-1.0)), [0xff]);
        assert_eq!(packed(Value::Number(200.0)), [0xcc, 200]);
        assert_eq!(packed(Value::Number(-200.0)), [0xd1, 0xff, 0x38]);
        assert_eq!(packed(Value::Number(70000.0)), [0xce, 0, 1, 0x11, 0x70]);
        assert_eq!(packed(Value::Number(1.5)), [0xca, 0x3f, 0xc0, 0, 0]);
        assert_eq!(packed(Value::Number(0.1)), [0xcb, 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a]);
        assert_eq!(packed(Value::Number(f64::INFINITY)), [0xca, 0x7f, 0x80, 0, 0]);
    }

    #[test]
    fn tables_pack_as_arrays_or_maps_and_round_trip() {
        let lua = Lua::new();
        let arr: Table = lua.load("return {1, 'a', true}").eval().unwrap();
        assert_eq!(packed(Value::Table(arr)), [0x93, 1, 0xa1, b'a', 0xc3]);
        let map: Table = lua.load("return {x = 1}").eval().unwrap();
        assert_eq!(packed(Value::Table(map)), [0x81, 0xa1, b'x', 1]);
        let deep: Table = lua.load("local t = {} ; t[1] = t ; return t").eval().unwrap();
        let out = packed(Value::Table(deep));
        assert_eq!(out.len(), 17, "16 nested arrays, then nil");
        assert_eq!(out[16], 0xc0);
        let mut c = Cursor { s: &[0x92, 0xcd, 1, 0, 0x81, 0xa1, b'k', 0xc2], pos: 0 };
        let Ok(Ok(Value::Table(t))) = c.value(&lua, 0) else { panic!("decodes") };
        assert_eq!(t.get::<f64>(1).unwrap(), 256.0);
        let inner: Table = t.get(2).unwrap();
        assert!(!inner.get::<bool>("k").unwrap());
    }

    #[test]
    fn truncated_and_unknown_input_fail() {
        let lua = Lua::new();
        assert!(matches!(Cursor { s: &[0xcd, 1], pos: 0 }.value(&lua, 0), Err(DecodeError::Eof)));
        assert!(matches!(Cursor { s: &[0xc1], pos: 0 }.value(&lua, 0), Err(DecodeError::BadFormat)));
        let deep = vec![0x91u8; 5000];
        assert!(matches!(Cursor { s: &deep, pos: 0 }.value(&lua, 0), Err(DecodeError::TooDeep)));
    }
}
