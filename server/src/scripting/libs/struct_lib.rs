//! The `struct` library Redis bundles (Roberto Ierusalimschy's, Lua 5.1 era): `pack(fmt, …)`,
//! `unpack(fmt, data [, pos])` and `size(fmt)`, with the C library's sizes and alignment on
//! a 64-bit little-endian machine.
//!
//! Format options: `>`/`<` big/little endian, `![n]` maximum alignment (default 8), `x` a
//! zero byte, `b`/`B` (1), `h`/`H` (2), `l`/`L`/`T` (8), `i[n]`/`I[n]` (default 4, at most
//! 32) signed/unsigned integers, `f` float, `d` double, `c[n]` a fixed string (`c0`: its
//! length from the previous result when unpacking, the whole string when packing), `s` a
//! zero-terminated string, spaces ignored. Integers travel as Lua numbers (doubles).

use mlua::{Lua, MultiValue, Table, Value};

use super::{arg_error, check_number, check_string, lua_err, opt_integer};
use crate::scripting::api::{fail, lua_number};

/// The largest integer size (MAXINTSIZE).
const MAX_INT_SIZE: usize = 32;
/// The default for `!` (the C library's MAXALIGN on x86-64).
const MAX_ALIGN: usize = 8;

#[derive(Clone, Copy, PartialEq)]
enum Endian {
    Big,
    Little,
}

struct Header {
    endian: Endian,
    align: usize,
}

impl Header {
    fn new() -> Self {
        Header { endian: Endian::Little, align: 1 }
    }
}

/// The format string being read.
struct Format<'a> {
    fmt: &'a [u8],
    i: usize,
}

impl Format<'_> {
    fn next(&mut self) -> Option<u8> {
        let c = self.fmt.get(self.i).copied()?;
        self.i += 1;
        Some(c)
    }

    /// A decimal number at the cursor, or `default` when there is none.
    fn number(&mut self, default: usize) -> Result<usize, String> {
        if !self.fmt.get(self.i).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i32 = 0;
        while let Some(&d) = self.fmt.get(self.i).filter(|d| d.is_ascii_digit()) {
            let d = i32::from(d - b'0');
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err("integral size overflow".into());
            }
            a = a * 10 + d;
            self.i += 1;
        }
        Ok(a as usize)
    }

    /// The size of option `opt` (reading its count where it has one); 0 for the others.
    fn size(&mut self, opt: u8) -> Result<usize, String> {
        Ok(match opt {
            b'B' | b'b' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' => 8,
            b'f' => 4,
            b'd' => 8,
            b'x' => 1,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let sz = self.number(4)?;
                if sz > MAX_INT_SIZE {
                    return Err(format!("integral size {sz} is larger than limit of {MAX_INT_SIZE}"));
                }
                sz
            }
            _ => 0,
        })
    }

    /// A control option (`func`'s argument 1 is the format when it is invalid).
    fn control(&mut self, opt: u8, h: &mut Header, func: &str) -> Result<(), String> {
        match opt {
            b' ' => {}
            b'>' => h.endian = Endian::Big,
            b'<' => h.endian = Endian::Little,
            b'!' => {
                let a = self.number(MAX_ALIGN)?;
                if a == 0 || a & (a - 1) != 0 {
                    return Err(format!("alignment {a} is not a power of 2"));
                }
                h.align = a;
            }
            _ => return Err(arg_error(1, func, &format!("invalid format option '{}'", opt as char))),
        }
        Ok(())
    }
}

/// Padding before an item of `size` at offset `len` (the C library's `gettoalign`).
fn to_align(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    size.wrapping_sub(len & size.wrapping_sub(1)) & size.wrapping_sub(1)
}

/// `bytes` (native little-endian order) in `endian` order.
fn ordered(mut bytes: Vec<u8>, endian: Endian) -> Vec<u8> {
    if endian == Endian::Big {
        bytes.reverse();
    }
    bytes
}

/// The `struct` table.
pub(super) fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let wrap = |f: fn(&Lua, &MultiValue) -> Result<MultiValue, String>| {
        lua.create_function(move |lua, args: MultiValue| match f(lua, &args) {
            Ok(values) => {
                let mut out = values;
                out.push_front(Value::Boolean(true));
                Ok(out)
            }
            Err(e) => fail(lua, &e),
        })
    };
    t.set("pack", crate::scripting::raising_at_caller(lua, wrap(pack)?)?)?;
    t.set("unpack", crate::scripting::raising_at_caller(lua, wrap(unpack)?)?)?;
    t.set("size", crate::scripting::raising_at_caller(lua, wrap(size)?)?)?;
    Ok(t)
}

fn pack(lua: &Lua, args: &MultiValue) -> Result<MultiValue, String> {
    let fmt = check_string(args, 0, "pack")?;
    let mut f = Format { fmt: &fmt, i: 0 };
    let mut h = Header::new();
    let mut arg = 1;
    let mut out: Vec<u8> = Vec::new();
    while let Some(opt) = f.next() {
        let mut size = f.size(opt)?;
        let pad = to_align(out.len(), &h, opt, size);
        out.resize(out.len() + pad, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = check_number(args, arg, "pack")?;
                arg += 1;
                let mut value = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                let mut bytes = Vec::with_capacity(size);
                for _ in 0..size {
                    bytes.push(value as u8);
                    value = value.checked_shr(8).unwrap_or(0);
                }
                out.extend(ordered(bytes, h.endian));
            }
            b'x' => out.push(0),
            b'f' => {
                let n = check_number(args, arg, "pack")? as f32;
                arg += 1;
                out.extend(ordered(n.to_le_bytes().to_vec(), h.endian));
            }
            b'd' => {
                let n = check_number(args, arg, "pack")?;
                arg += 1;
                out.extend(ordered(n.to_le_bytes().to_vec(), h.endian));
            }
            b'c' | b's' => {
                let s = check_string(args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // The C library names the argument after the string (arg was advanced).
                    return Err(arg_error(arg + 1, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => f.control(opt, &mut h, "pack")?,
        }
    }
    let s = lua.create_string(&out).map_err(lua_err)?;
    Ok(MultiValue::from_iter([Value::String(s)]))
}

/// An integer of `bytes` (in `endian` order) as a Lua number.
fn integer(bytes: &[u8], endian: Endian, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut push = |b: u8| l = (l << 8) | u64::from(b);
    match endian {
        Endian::Big => bytes.iter().for_each(|&b| push(b)),
        Endian::Little => bytes.iter().rev().for_each(|&b| push(b)),
    }
    if !signed {
        return l as f64;
    }
    // As compiled C computes `~0 << (size*8 - 1)` on x86-64 (shift counts taken mod 64).
    let mask = u64::MAX.wrapping_shl(((bytes.len() * 8) as u32).wrapping_sub(1) & 63);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn unpack(lua: &Lua, args: &MultiValue) -> Result<MultiValue, String> {
    let fmt = check_string(args, 0, "unpack")?;
    let data = check_string(args, 1, "unpack")?;
    let start = opt_integer(args, 2, "unpack", 1)? as u64 as usize;
    if start == 0 {
        return Err(arg_error(3, "unpack", "offset must be 1 or greater"));
    }
    let ld = data.len();
    let mut pos = start - 1;
    let mut f = Format { fmt: &fmt, i: 0 };
    let mut h = Header::new();
    let mut out: Vec<Value> = Vec::new();
    let too_short = || arg_error(2, "unpack", "data string too short");
    while let Some(opt) = f.next() {
        let mut size = f.size(opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if size > ld || pos > ld - size {
            return Err(too_short());
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                out.push(Value::Number(integer(&data[pos..pos + size], h.endian, opt.is_ascii_lowercase())));
            }
            b'x' => {}
            b'f' => {
                let b: [u8; 4] = ordered(data[pos..pos + 4].to_vec(), h.endian).try_into().expect("4 bytes");
                out.push(Value::Number(f64::from(f32::from_le_bytes(b))));
            }
            b'd' => {
                let b: [u8; 8] = ordered(data[pos..pos + 8].to_vec(), h.endian).try_into().expect("8 bytes");
                out.push(Value::Number(f64::from_le_bytes(b)));
            }
            b'c' => {
                if size == 0 {
                    let Some(n) = out.last().and_then(lua_number) else {
                        return Err("format 'c0' needs a previous size".into());
                    };
                    size = n as usize;
                    out.pop();
                    if size > ld || pos > ld - size {
                        return Err(too_short());
                    }
                }
                out.push(Value::String(lua.create_string(&data[pos..pos + size]).map_err(lua_err)?));
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err("unfinished string in data".into());
                };
                out.push(Value::String(lua.create_string(&data[pos..pos + len]).map_err(lua_err)?));
                size = len + 1;
            }
            _ => f.control(opt, &mut h, "unpack")?,
        }
        pos += size;
    }
    out.push(Value::Number((pos + 1) as f64));
    Ok(MultiValue::from_iter(out))
}

fn size(_: &Lua, args: &MultiValue) -> Result<MultiValue, String> {
    let fmt = check_string(args, 0, "size")?;
    let mut f = Format { fmt: &fmt, i: 0 };
    let mut h = Header::new();
    let mut pos = 0usize;
    while let Some(opt) = f.next() {
        let size = f.size(opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if opt == b's' {
            return Err(arg_error(1, "size", "option 's' has no fixed size"));
        }
        if opt == b'c' && size == 0 {
            return Err(arg_error(1, "size", "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            f.control(opt, &mut h, "size")?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(MultiValue::from_iter([Value::Number(pos as f64)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        f: fn(&Lua, &MultiValue) -> Result<MultiValue, String>,
        lua: &Lua,
        args: Vec<Value>,
    ) -> Result<Vec<Value>, String> {
        f(lua, &MultiValue::from_iter(args)).map(|m| m.into_iter().collect())
    }

    fn s(lua: &Lua, b: &[u8]) -> Value {
        Value::String(lua.create_string(b).unwrap())
    }

    #[test]
    fn packs_with_endianness_and_alignment() {
        let lua = Lua::new();
        let out = call(pack, &lua, vec![s(&lua, b">!4 b i"), Value::Number(1.0), Value::Number(-2.0)]).unwrap();
        let Value::String(bytes) = &out[0] else { panic!("a string") };
        assert_eq!(&*bytes.as_bytes(), &[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe]);
        let back = call(unpack, &lua, vec![s(&lua, b">!4 b i"), out[0].clone()]).unwrap();
        assert_eq!(back, vec![Value::Number(1.0), Value::Number(-2.0), Value::Number(9.0)]);
        let sized = call(size, &lua, vec![s(&lua, b"!4 b i d")]).unwrap();
        assert_eq!(sized, vec![Value::Number(16.0)]);
    }

    #[test]
    fn strings_and_their_errors() {
        let lua = Lua::new();
        let out =
            call(pack, &lua, vec![s(&lua, b"Bc0s"), Value::Number(3.0), s(&lua, b"abc"), s(&lua, b"zz")]).unwrap();
        let back = call(unpack, &lua, vec![s(&lua, b"Bc0s"), out[0].clone()]).unwrap();
        assert_eq!(back, vec![s(&lua, b"abc"), s(&lua, b"zz"), Value::Number(8.0)]);
        assert_eq!(
            call(pack, &lua, vec![s(&lua, b"c5"), s(&lua, b"ab")]).unwrap_err(),
            "bad argument #3 to 'pack' (string too short)"
        );
        assert_eq!(
            call(unpack, &lua, vec![s(&lua, b"i"), s(&lua, b"ab")]).unwrap_err(),
            "bad argument #2 to 'unpack' (data string too short)"
        );
        assert_eq!(
            call(pack, &lua, vec![s(&lua, b"y")]).unwrap_err(),
            "bad argument #1 to 'pack' (invalid format option 'y')"
        );
        assert_eq!(
            call(size, &lua, vec![s(&lua, b"s")]).unwrap_err(),
            "bad argument #1 to 'size' (option 's' has no fixed size)"
        );
        assert_eq!(call(pack, &lua, vec![s(&lua, b"i33")]).unwrap_err(), "integral size 33 is larger than limit of 32");
    }
}
