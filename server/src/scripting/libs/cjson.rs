//! lua-cjson's `cjson` library: `encode`, `decode`, `null` and its settings
//! (`encode_max_depth`, `decode_max_depth`, `encode_number_precision`, `encode_keep_buffer`,
//! `encode_invalid_numbers`, `decode_invalid_numbers`, `encode_sparse_array`), with lua-cjson's rules — numbers printed with
//! `%.14g`, `/` escaped, an empty table is an object, a table whose keys are 1..n is an array
//! (a sparse one is refused), `null` decodes to `cjson.null`.

use std::sync::{Arc, Mutex};

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use super::{arg_error, check_number, check_string, lua_err};
use crate::scripting::api::{fail, lua_number, lua_text};

/// `cjson.null`: a light userdata no other value equals.
fn null() -> Value {
    static NULL: u8 = 0;
    Value::LightUserData(LightUserData(&NULL as *const u8 as *mut std::ffi::c_void))
}

/// lua-cjson's settings (its `json_config_t`), shared by the library's functions (and by the
/// VMs of one script cache, see [`crate::scripting::Shared`]).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    encode_max_depth: i64,
    decode_max_depth: i64,
    /// 0 off (an error), 1 on (`nan`, `inf`), 2 `null`.
    encode_invalid_numbers: usize,
    decode_invalid_numbers: bool,
    encode_number_precision: i64,
    encode_keep_buffer: bool,
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            encode_number_precision: 14,
            encode_keep_buffer: true,
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
        }
    }
}

pub(crate) type Shared = Arc<Mutex<Config>>;

fn config(shared: &Shared) -> std::sync::MutexGuard<'_, Config> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// A configuration function's arguments: at most `max` (lua-cjson's `json_arg_init`).
fn check_count(args: &MultiValue, max: usize, func: &str) -> Result<(), String> {
    if args.len() > max {
        return Err(arg_error(max + 1, func, "found too many arguments"));
    }
    Ok(())
}

/// `json_integer_option`: sets `setting` from argument `i` unless it is nil; answers it.
fn integer_option(
    args: &MultiValue,
    i: usize,
    setting: &mut i64,
    min: i64,
    max: i64,
    func: &str,
) -> Result<Value, String> {
    if !matches!(args.get(i), None | Some(Value::Nil)) {
        let v = check_number(args, i, func)? as i64;
        if v < min || v > max {
            return Err(arg_error(1, func, &format!("expected integer between {min} and {max}")));
        }
        *setting = v;
    }
    Ok(Value::Number(*setting as f64))
}

/// `json_enum_option`: a boolean or one of `options` (index = value); answers the setting
/// as a boolean when it is off or `bool_true`, else by name.
fn enum_option(
    lua: &Lua,
    args: &MultiValue,
    i: usize,
    setting: &mut usize,
    options: &[&str],
    bool_true: usize,
    func: &str,
) -> Result<Value, String> {
    match args.get(i) {
        None | Some(Value::Nil) => {}
        Some(Value::Boolean(b)) => *setting = usize::from(*b) * bool_true,
        Some(v) => {
            let name = lua_text(v)
                .ok_or_else(|| arg_error(i + 1, func, &format!("string expected, got {}", v.type_name())))?;
            let name = String::from_utf8_lossy(&name).into_owned();
            *setting = options
                .iter()
                .position(|o| *o == name)
                .ok_or_else(|| arg_error(i + 1, func, &format!("invalid option '{name}'")))?;
        }
    }
    Ok(if *setting == 0 || *setting == bool_true {
        Value::Boolean(*setting != 0)
    } else {
        Value::String(lua.create_string(options[*setting]).map_err(lua_err)?)
    })
}

/// The `cjson` table.
pub(super) fn table(lua: &Lua, shared: &Shared) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let add = |name: &'static str,
               f: fn(&Lua, &MultiValue, &Shared, &'static str) -> Result<MultiValue, String>|
     -> mlua::Result<()> {
        let shared = Arc::clone(shared);
        let func = lua.create_function(move |lua, args: MultiValue| match f(lua, &args, &shared, name) {
            Ok(mut values) => {
                values.push_front(Value::Boolean(true));
                Ok(values)
            }
            Err(e) => fail(lua, &e),
        })?;
        t.set(name, crate::scripting::raising_at_caller(lua, func)?)
    };
    add("encode", |lua, args, shared, _| {
        if args.len() != 1 {
            return Err("bad argument #1 to 'encode' (expected 1 argument)".into());
        }
        let cfg = config(shared).clone();
        let mut out = Vec::new();
        encode_value(&args[0], &mut out, 0, &cfg)?;
        Ok(MultiValue::from_iter([Value::String(lua.create_string(&out).map_err(lua_err)?)]))
    })?;
    add("decode", |lua, args, shared, _| {
        if args.len() != 1 {
            return Err("bad argument #1 to 'decode' (expected 1 argument)".into());
        }
        let text = check_string(args, 0, "decode")?;
        let cfg = config(shared).clone();
        let mut p = Parser {
            s: &text,
            i: 0,
            lua,
            max_depth: cfg.decode_max_depth as usize,
            invalid_numbers: cfg.decode_invalid_numbers,
        };
        Ok(MultiValue::from_iter([p.document()?]))
    })?;
    t.set("null", null())?;
    add("encode_max_depth", |_, args, shared, name| {
        check_count(args, 1, name)?;
        Ok(MultiValue::from_iter([integer_option(
            args,
            0,
            &mut config(shared).encode_max_depth,
            1,
            i32::MAX.into(),
            name,
        )?]))
    })?;
    add("decode_max_depth", |_, args, shared, name| {
        check_count(args, 1, name)?;
        Ok(MultiValue::from_iter([integer_option(
            args,
            0,
            &mut config(shared).decode_max_depth,
            1,
            i32::MAX.into(),
            name,
        )?]))
    })?;
    add("encode_number_precision", |_, args, shared, name| {
        check_count(args, 1, name)?;
        Ok(MultiValue::from_iter([integer_option(args, 0, &mut config(shared).encode_number_precision, 1, 14, name)?]))
    })?;
    // Buffer reuse between calls is an allocation detail here: the setting is kept and shown.
    add("encode_keep_buffer", |lua, args, shared, name| {
        check_count(args, 1, name)?;
        let mut cfg = config(shared);
        let mut setting = usize::from(cfg.encode_keep_buffer);
        let v = enum_option(lua, args, 0, &mut setting, &["off", "on"], 1, name)?;
        cfg.encode_keep_buffer = setting != 0;
        Ok(MultiValue::from_iter([v]))
    })?;
    add("encode_invalid_numbers", |lua, args, shared, name| {
        check_count(args, 1, name)?;
        Ok(MultiValue::from_iter([enum_option(
            lua,
            args,
            0,
            &mut config(shared).encode_invalid_numbers,
            &["off", "on", "null"],
            1,
            name,
        )?]))
    })?;
    add("decode_invalid_numbers", |lua, args, shared, name| {
        check_count(args, 1, name)?;
        let mut cfg = config(shared);
        let mut setting = usize::from(cfg.decode_invalid_numbers);
        let v = enum_option(lua, args, 0, &mut setting, &["off", "on"], 1, name)?;
        cfg.decode_invalid_numbers = setting != 0;
        Ok(MultiValue::from_iter([v]))
    })?;
    add("encode_sparse_array", |lua, args, shared, name| {
        check_count(args, 3, name)?;
        let mut cfg = config(shared);
        let mut convert = usize::from(cfg.sparse_convert);
        let a = enum_option(lua, args, 0, &mut convert, &["off", "on"], 1, name)?;
        cfg.sparse_convert = convert != 0;
        let b = integer_option(args, 1, &mut cfg.sparse_ratio, 0, i32::MAX.into(), name)?;
        let c = integer_option(args, 2, &mut cfg.sparse_safe, 0, i32::MAX.into(), name)?;
        Ok(MultiValue::from_iter([a, b, c]))
    })?;
    Ok(t)
}

fn encode_number(n: f64, out: &mut Vec<u8>, cfg: &Config) -> Result<(), String> {
    if !n.is_finite() {
        match cfg.encode_invalid_numbers {
            0 => return Err("Cannot serialise number: must not be NaN or Inf".into()),
            1 if n.is_nan() => {
                out.extend_from_slice(b"nan");
                return Ok(());
            }
            1 => {
                out.extend_from_slice(if n > 0.0 { b"inf" } else { b"-inf" });
                return Ok(());
            }
            _ => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
        }
    }
    out.extend_from_slice(crate::resp::format_double_precision(n, cfg.encode_number_precision as usize).as_bytes());
    Ok(())
}

fn encode_value(v: &Value, out: &mut Vec<u8>, depth: usize, cfg: &Config) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(_) if *v == null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => encode_number(*n as f64, out, cfg)?,
        Value::Number(n) => encode_number(*n, out, cfg)?,
        Value::String(s) => encode_string(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth + 1 > cfg.encode_max_depth as usize {
                return Err(format!("Cannot serialise, excessive nesting ({})", depth + 1));
            }
            encode_table(t, out, depth + 1, cfg)?;
        }
        other => return Err(format!("Cannot serialise {}: type not supported", other.type_name())),
    }
    Ok(())
}

fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// lua-cjson's array test: every key a positive integer; the largest one (0 if none).
/// None: an object (so is an excessively sparse array when `encode_sparse_array` converts).
fn array_length(t: &Table, cfg: &Config) -> Result<Option<usize>, String> {
    let mut max = 0usize;
    let mut items = 0usize;
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair.map_err(lua_err)?;
        let n = match k {
            Value::Integer(n) if n >= 1 => n as usize,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n as usize,
            _ => return Ok(None),
        };
        max = max.max(n);
        items += 1;
    }
    let ratio = cfg.sparse_ratio as usize;
    if ratio > 0 && max > items.saturating_mul(ratio) && max > cfg.sparse_safe as usize {
        if cfg.sparse_convert {
            return Ok(None);
        }
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok(Some(max))
}

fn encode_table(t: &Table, out: &mut Vec<u8>, depth: usize, cfg: &Config) -> Result<(), String> {
    match array_length(t, cfg)? {
        Some(len) if len > 0 => {
            out.push(b'[');
            for i in 1..=len {
                if i > 1 {
                    out.push(b',');
                }
                let v: Value = t.raw_get(i).map_err(lua_err)?;
                encode_value(&v, out, depth, cfg)?;
            }
            out.push(b']');
        }
        _ => {
            out.push(b'{');
            let mut first = true;
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair.map_err(lua_err)?;
                if !first {
                    out.push(b',');
                }
                first = false;
                match &k {
                    Value::String(s) => encode_string(&s.as_bytes(), out),
                    Value::Integer(_) | Value::Number(_) => {
                        let mut text = Vec::new();
                        encode_number(lua_number(&k).unwrap_or_default(), &mut text, cfg)?;
                        encode_string(&text, out);
                    }
                    _ => return Err("Cannot serialise table: table key must be a number or string".into()),
                }
                out.push(b':');
                encode_value(&v, out, depth, cfg)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    lua: &'a Lua,
    max_depth: usize,
    /// `decode_invalid_numbers`: accept what C's strtod reads (hex, inf, nan, a leading +).
    invalid_numbers: bool,
}

impl Parser<'_> {
    fn document(&mut self) -> Result<Value, String> {
        let v = self.value(0)?;
        self.skip_ws();
        if self.i < self.s.len() {
            return Err(format!("Expected the end but found invalid token at character {}", self.i + 1));
        }
        Ok(v)
    }

    fn skip_ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn invalid(&self, expected: &str) -> String {
        if self.i >= self.s.len() {
            format!("Expected {expected} but found T_END at character {}", self.i + 1)
        } else {
            format!("Expected {expected} but found invalid token at character {}", self.i + 1)
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        self.skip_ws();
        let Some(&c) = self.s.get(self.i) else { return Err(self.invalid("value")) };
        match c {
            b'{' | b'[' => {
                if depth + 1 > self.max_depth {
                    return Err(format!(
                        "Found too many nested data structures ({}) at character {}",
                        depth + 1,
                        self.i + 1
                    ));
                }
                let t = self.lua.create_table().map_err(lua_err)?;
                self.i += 1;
                let close = if c == b'{' { b'}' } else { b']' };
                self.skip_ws();
                if self.s.get(self.i) == Some(&close) {
                    self.i += 1;
                    return Ok(Value::Table(t));
                }
                let mut n = 1;
                loop {
                    if c == b'{' {
                        self.skip_ws();
                        if self.s.get(self.i) != Some(&b'"') {
                            return Err(self.invalid("object key string"));
                        }
                        let key = self.string()?;
                        self.skip_ws();
                        if self.s.get(self.i) != Some(&b':') {
                            return Err(self.invalid("colon"));
                        }
                        self.i += 1;
                        let v = self.value(depth + 1)?;
                        t.raw_set(key, v).map_err(lua_err)?;
                    } else {
                        let v = self.value(depth + 1)?;
                        t.raw_set(n, v).map_err(lua_err)?;
                        n += 1;
                    }
                    self.skip_ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(&b) if b == close => {
                            self.i += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => {
                            return Err(self.invalid(if c == b'{' {
                                "comma or object end"
                            } else {
                                "comma or array end"
                            }))
                        }
                    }
                }
            }
            b'"' => self.string(),
            b't' if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Value::Boolean(true))
            }
            b'f' if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Value::Boolean(false))
            }
            b'n' if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(null())
            }
            b'-' | b'0'..=b'9' => self.number(),
            b'+' | b'i' | b'I' | b'n' | b'N' if self.invalid_numbers => self.number(),
            _ => Err(self.invalid("value")),
        }
    }

    /// A number token: JSON's grammar, or (with `invalid_numbers`) strtod's too.
    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        let invalid = {
            let rest = &self.s[start..];
            let p = if rest.first() == Some(&b'-') { &rest[1..] } else { rest };
            rest.first() == Some(&b'+')
                || (p.first() == Some(&b'0') && p.get(1).is_some_and(|c| (c | 0x20) == b'x' || c.is_ascii_digit()))
                || p.first().is_some_and(|c| *c > b'9')
        };
        if invalid && !self.invalid_numbers {
            return Err(format!("Expected value but found invalid number at character {}", start + 1));
        }
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || matches!(self.s[self.i], b'-' | b'+' | b'.'))
        {
            self.i += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        match strtod(text) {
            Some(n) => Ok(Value::Number(n)),
            None => {
                self.i = start;
                Err(self.invalid("value"))
            }
        }
    }

    fn string(&mut self) -> Result<Value, String> {
        let start = self.i;
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(format!("Expected value but found unexpected end of string at character {}", start + 1));
            };
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(format!("Expected value but found invalid escape code at character {}", start + 1));
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut code = self.hex4().ok_or_else(|| self.unicode_error(start))?;
                            if (0xD800..0xDC00).contains(&code) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(self.unicode_error(start));
                                }
                                self.i += 2;
                                let low = self.hex4().ok_or_else(|| self.unicode_error(start))?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(self.unicode_error(start));
                                }
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            }
                            let ch = char::from_u32(code).ok_or_else(|| self.unicode_error(start))?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => {
                            return Err(format!(
                                "Expected value but found invalid escape code at character {}",
                                start + 1
                            ))
                        }
                    }
                }
                _ => out.push(b),
            }
        }
        self.lua.create_string(&out).map(Value::String).map_err(lua_err)
    }

    fn unicode_error(&self, start: usize) -> String {
        format!("Expected value but found invalid unicode escape code at character {}", start + 1)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.i..self.i + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        let v = u32::from_str_radix(text, 16).ok()?;
        self.i += 4;
        Some(v)
    }
}

/// What C's `strtod` makes of a whole token: decimal, hex (`0x1f`), `inf`/`infinity`, `nan`.
fn strtod(text: &str) -> Option<f64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let v = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if lower == "nan" {
        f64::NAN
    } else if let Some(hex) = lower.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()? as f64
    } else if body.bytes().all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'-' | b'+')) {
        body.parse::<f64>().ok()?
    } else {
        return None;
    };
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(lua: &Lua, json: &str) -> String {
        let mut p = Parser { s: json.as_bytes(), i: 0, lua, max_depth: 1000, invalid_numbers: true };
        let v = p.document().unwrap();
        let mut out = Vec::new();
        encode_value(&v, &mut out, 0, &Config::default()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn encodes_and_decodes_as_lua_cjson() {
        let lua = Lua::new();
        assert_eq!(roundtrip(&lua, "[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]"), "[0,-5000,-1,0.0003,1023.2,0]");
        assert_eq!(roundtrip(&lua, r#"{"a":"x/y\u00e9"}"#), "{\"a\":\"x\\/y\u{e9}\"}");
        assert_eq!(roundtrip(&lua, "[1,null,3]"), "[1,null,3]");
        assert_eq!(roundtrip(&lua, "{}"), "{}");
        let mut p = Parser { s: b"[1,", i: 0, lua: &lua, max_depth: 1000, invalid_numbers: true };
        assert_eq!(p.document().unwrap_err(), "Expected value but found T_END at character 4");
        let sparse: Table = lua.load("return {[1]=1, [20]=2}").eval().unwrap();
        assert!(encode_table(&sparse, &mut Vec::new(), 1, &Config::default())
            .unwrap_err()
            .contains("excessively sparse"));
        // Invalid numbers decode by default (as strtod reads them); infinity does not encode.
        let mut p = Parser { s: b"[0x10, -inf, 007]", i: 0, lua: &lua, max_depth: 1000, invalid_numbers: true };
        let Value::Table(t) = p.document().unwrap() else { panic!("an array") };
        assert_eq!(
            (t.get::<f64>(1).unwrap(), t.get::<f64>(2).unwrap(), t.get::<f64>(3).unwrap()),
            (16.0, f64::NEG_INFINITY, 7.0)
        );
        let err = encode_value(&Value::Table(t), &mut Vec::new(), 0, &Config::default()).unwrap_err();
        assert_eq!(err, "Cannot serialise number: must not be NaN or Inf");
        let mut strict = Parser { s: b"[0x10]", i: 0, lua: &lua, max_depth: 1000, invalid_numbers: false };
        assert_eq!(strict.document().unwrap_err(), "Expected value but found invalid number at character 2");
    }
}
