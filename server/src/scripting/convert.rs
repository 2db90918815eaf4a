//! Conversions between Redis replies and Lua values, as Redis 7 makes them.
//!
//! A command's reply reaches the script as its RESP2 or RESP3 encoding would parse
//! (`redis.setresp`): integers → numbers, bulk strings → strings, a missing value → `false`
//! (RESP2) or `nil` (RESP3), arrays → tables, status → `{ok=…}`, errors → `{err=…}`, and in
//! RESP3 maps → `{map={…}}`, sets → `{set={…}}`, doubles → `{double=…}`, booleans, big numbers
//! → `{big_number=…}`. A script's result goes back the other way: numbers are truncated to
//! integers, `true` → 1 (RESP2), `false`/`nil` → a null, tables by their fields, and an array
//! stops at its first `nil`.

use bytes::Bytes;
use mlua::{Lua, Table, Value};

use crate::resp::{format_double, Reply};

/// How deep a script's result may nest before the rest is an error (Redis's Lua stack limit).
const MAX_DEPTH: usize = 1000;

/// The Lua value of a command's reply for a script whose replies are RESP3 if `resp3`.
pub fn reply_to_lua(lua: &Lua, reply: Reply, resp3: bool) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Simple(s) => Value::Table(field(lua, "ok", Value::String(lua.create_string(s)?))?),
        Reply::Error(e) => Value::Table(super::api::error_table(lua, &format!("-{e}"))?),
        Reply::Integer(n) => Value::Number(n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Null | Reply::NullArray => {
            if resp3 {
                Value::Nil
            } else {
                Value::Boolean(false)
            }
        }
        Reply::Array(items) | Reply::Push(items) | Reply::Many(items) => array(lua, items, resp3)?,
        Reply::Bulks(bulks) => reply_to_lua(lua, bulks.into_reply(), resp3)?,
        Reply::Set(items) if resp3 => {
            let set = lua.create_table()?;
            for item in items {
                set.raw_set(reply_to_lua(lua, item, resp3)?, true)?;
            }
            Value::Table(field(lua, "set", Value::Table(set))?)
        }
        Reply::Set(items) => array(lua, items, resp3)?,
        Reply::Map(pairs) if resp3 => {
            let map = lua.create_table()?;
            for (k, v) in pairs {
                map.raw_set(reply_to_lua(lua, k, resp3)?, reply_to_lua(lua, v, resp3)?)?;
            }
            Value::Table(field(lua, "map", Value::Table(map))?)
        }
        Reply::Map(pairs) => array(lua, pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(), resp3)?,
        Reply::Pairs(pairs) if resp3 => {
            array(lua, pairs.into_iter().map(|(a, b)| Reply::Array(vec![a, b])).collect(), resp3)?
        }
        Reply::Pairs(pairs) => array(lua, pairs.into_iter().flat_map(|(a, b)| [a, b]).collect(), resp3)?,
        Reply::Double(d) | Reply::HumanDouble(d) if resp3 => Value::Table(field(lua, "double", Value::Number(d))?),
        Reply::Double(d) => Value::String(lua.create_string(format_double(d))?),
        Reply::HumanDouble(d) => Value::String(lua.create_string(crate::num::human_double(d))?),
        Reply::Boolean(b) if resp3 => Value::Boolean(b),
        Reply::Boolean(b) => Value::Number(if b { 1.0 } else { 0.0 }),
        Reply::Verbatim(text) if resp3 => {
            let inner = lua.create_table()?;
            inner.set("format", "txt")?;
            inner.set("string", lua.create_string(&text)?)?;
            Value::Table(field(lua, "verbatim_string", Value::Table(inner))?)
        }
        Reply::Verbatim(text) => Value::String(lua.create_string(&text)?),
        Reply::BigNumber(n) if resp3 => Value::Table(field(lua, "big_number", Value::String(lua.create_string(&n)?))?),
        Reply::BigNumber(n) => Value::String(lua.create_string(&n)?),
    })
}

/// A Lua array of `items` as strings (a script's KEYS or ARGV). Text (the usual case) is
/// pushed straight onto the Lua stack; other bytes go through one reference per string.
pub(crate) fn string_array(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    match items.iter().map(|item| std::str::from_utf8(item)).collect::<Result<Vec<&str>, _>>() {
        Ok(texts) => lua.create_sequence_from(texts),
        Err(_) => {
            lua.create_sequence_from(items.iter().map(|b| lua.create_string(b)).collect::<mlua::Result<Vec<_>>>()?)
        }
    }
}

fn field(lua: &Lua, name: &str, value: Value) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(name, value)?;
    Ok(t)
}

fn array(lua: &Lua, items: Vec<Reply>, resp3: bool) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.into_iter().enumerate() {
        t.raw_set(i + 1, reply_to_lua(lua, item, resp3)?)?;
    }
    Ok(Value::Table(t))
}

/// The reply for a script's result `value`; `resp3` is the script's `redis.setresp`.
pub fn lua_to_reply(value: &Value, resp3: bool) -> Reply {
    to_reply(value, resp3, 0)
}

fn to_reply(value: &Value, resp3: bool, depth: usize) -> Reply {
    if depth > MAX_DEPTH {
        return Reply::error("ERR reached lua stack limit");
    }
    match value {
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Boolean(b) if resp3 => Reply::Boolean(*b),
        Value::Boolean(true) => Reply::Integer(1),
        Value::Boolean(false) => Reply::Null,
        Value::Integer(n) => Reply::Integer(*n),
        Value::Number(n) => Reply::Integer(truncate(*n)),
        Value::Table(t) => table_reply(t, resp3, depth),
        _ => Reply::Null,
    }
}

/// C's `(long long)` of a Lua number (NaN and out-of-range values as x86 gives them).
fn truncate(n: f64) -> i64 {
    // 2^63 is the first value out of range; x86's conversion gives i64::MIN for all of them.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if (-LIMIT..LIMIT).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

fn table_reply(t: &Table, resp3: bool, depth: usize) -> Reply {
    let get = |name: &str| t.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(e) = get("err") {
        return Reply::Error(e.to_string_lossy().to_string());
    }
    if let Value::String(ok) = get("ok") {
        let text = ok.to_string_lossy().replace(['\r', '\n'], " ");
        return Reply::Simple(text);
    }
    if let v @ (Value::Number(_) | Value::Integer(_)) = get("double") {
        return Reply::Double(super::api::lua_number(&v).unwrap_or(0.0));
    }
    if let Value::String(n) = get("big_number") {
        return Reply::BigNumber(n.to_string_lossy().replace(['\r', '\n'], " "));
    }
    if let Value::Table(v) = get("verbatim_string") {
        if let (Ok(Value::String(_)), Ok(Value::String(text))) =
            (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
        {
            return Reply::Verbatim(Bytes::copy_from_slice(&text.as_bytes()));
        }
    }
    if let Value::Table(map) = get("map") {
        let pairs = map
            .pairs::<Value, Value>()
            .filter_map(Result::ok)
            .map(|(k, v)| (to_reply(&k, resp3, depth + 1), to_reply(&v, resp3, depth + 1)))
            .collect();
        return Reply::Map(pairs);
    }
    if let Value::Table(set) = get("set") {
        let items =
            set.pairs::<Value, Value>().filter_map(Result::ok).map(|(k, _)| to_reply(&k, resp3, depth + 1)).collect();
        return Reply::Set(items);
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(to_reply(&v, resp3, depth + 1)),
        }
    }
    Reply::Array(items)
}

/// The reply for a script that raised `error` (the handler's table, see `prelude.lua`).
pub(crate) fn error_reply(error: &Value, name: &str, killed: bool) -> Reply {
    let Value::Table(t) = error else {
        let text = match error {
            Value::String(s) => s.to_string_lossy().to_string(),
            _ => "execution failure".into(),
        };
        return Reply::error(format!(
            "ERR Error running script {name}, {}",
            text.chars().take(100).collect::<String>()
        ));
    };
    let mut msg = match t.raw_get::<Value>("err") {
        Ok(Value::String(s)) => s.to_string_lossy().to_string(),
        Ok(Value::Integer(n)) => n.to_string(),
        Ok(Value::Number(n)) => super::api::lua_number_text(n),
        _ => "ERR unknown error".into(),
    };
    if killed {
        msg = "ERR Script killed by user with SCRIPT KILL...".into();
    } else if let Some(runtime) = msg.strip_prefix("ERR runtime error: ") {
        // An error the VM's hook raised (a FUNCTION LOAD timeout).
        msg = format!("ERR {runtime}");
    }
    let source = t.raw_get::<Value>("source").ok().and_then(|v| match v {
        Value::String(s) => Some(s.to_string_lossy().to_string()),
        _ => None,
    });
    let line = t.raw_get::<Value>("line").ok().and_then(|v| super::api::lua_number(&v));
    if let (Some(source), Some(line)) = (source, line) {
        msg = format!("{msg} script: {name}, on {source}:{}.", line as i64);
    }
    Reply::Error(msg)
}

/// A script's command arguments (the first `n` values of `args`): strings, and numbers as
/// [`number_arg`] prints them.
pub(crate) fn script_args(lua: &Lua, n: usize, args: &Table) -> mlua::Result<super::call::Args> {
    let mut argv = Ok(Vec::new());
    // SAFETY: `exec_raw` puts `args` at stack index 1 with room for three more values; each
    // value is pushed, read and popped in turn by `table_args` (see its safety notes).
    unsafe {
        lua.exec_raw::<()>(args, |state| argv = table_args(state, n))?;
    }
    Ok(argv)
}

/// The first `n` values of the table at stack index 1 of `state`, as command arguments.
///
/// # Safety
/// `state` has a table at index 1 and room for one more value. `lua_rawgeti`, `lua_type`,
/// `lua_tonumber` and `lua_pop` raise no Lua error, and `lua_tolstring` is called on strings
/// only (no conversion, no allocation), so no error unwinds past this frame; the bytes are
/// copied before the value is popped.
unsafe fn table_args(state: *mut mlua::lua_State, n: usize) -> super::call::Args {
    // SAFETY: as the function's contract says.
    collect_args(n, |i| unsafe {
        mlua::ffi::lua_rawgeti(state, 1, i as _);
        let arg = stack_arg(state, -1);
        mlua::ffi::lua_pop(state, 1);
        arg
    })
}

/// Arguments 1 to `n`, each read by `arg` (`None`: not a string or number), as a command.
pub(crate) fn collect_args(n: usize, mut arg: impl FnMut(usize) -> Option<Bytes>) -> super::call::Args {
    if n == 0 {
        return Err("Please specify at least one argument for this redis lib call");
    }
    (1..=n).map(|i| arg(i).ok_or("Lua redis lib command arguments must be strings or integers")).collect()
}

/// The command argument at stack index `idx` of `state`: a string, or a number as
/// [`number_arg`] prints it (`None` for any other value).
///
/// # Safety
/// `idx` is a valid index of `state`'s stack. Nothing here raises a Lua error (see
/// [`table_args`]).
pub(crate) unsafe fn stack_arg(state: *mut mlua::lua_State, idx: std::ffi::c_int) -> Option<Bytes> {
    use mlua::ffi;
    // SAFETY: as the function's contract says; the string's bytes are copied at once.
    unsafe {
        match ffi::lua_type(state, idx) {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                let p = ffi::lua_tolstring(state, idx, &mut len);
                Some(Bytes::copy_from_slice(std::slice::from_raw_parts(p.cast::<u8>(), len)))
            }
            ffi::LUA_TNUMBER => Some(number_arg(ffi::lua_tonumber(state, idx))),
            _ => None,
        }
    }
}

/// A number argument as Redis prints it (`%.17g`, whatever the number): `3`, `3.5`, `-0`,
/// `1e+17`, `-nan`.
fn number_arg(n: f64) -> Bytes {
    if n.is_nan() {
        return Bytes::from_static(if n.is_sign_negative() { b"-nan" } else { b"nan" });
    }
    // A whole number below 2^53 prints as its digits under `%.17g` (`-0` aside): written
    // straight into the argument, not through a formatted string first.
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 && !(n == 0.0 && n.is_sign_negative()) {
        let mut digits = [0u8; 24];
        let mut cursor = std::io::Cursor::new(&mut digits[..]);
        if std::io::Write::write_fmt(&mut cursor, format_args!("{}", n as i64)).is_ok() {
            let len = cursor.position() as usize;
            return Bytes::copy_from_slice(&digits[..len]);
        }
    }
    Bytes::from(crate::resp::format_double(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_arguments_print_as_redis_prints_them() {
        // What redis-server 7.0 stores for `redis.call('set', 'k', <number>)`.
        let cases = [
            (3.0, "3"),
            (3.5, "3.5"),
            (-0.0, "-0"),
            (1e17, "1e+17"),
            (2f64.powi(63), "9.2233720368547758e+18"),
            (123_456_789_012_345_678.0, "1.2345678901234568e+17"),
            (-f64::NAN, "-nan"),
            (100.0, "100"),
            (-42.0, "-42"),
            (0.0, "0"),
            (9_007_199_254_740_991.0, "9007199254740991"),
            (9_007_199_254_740_992.0, "9007199254740992"),
            (-9_007_199_254_740_993.0, "-9007199254740992"),
        ];
        for (n, text) in cases {
            assert_eq!(number_arg(n), text, "{n}");
        }
    }

    #[test]
    fn results_convert_as_redis_converts_them() {
        let lua = Lua::new();
        let v: Value = lua.load("return {1, 'two', 3.99, true, false, nil, 'after nil'}").eval().unwrap();
        assert_eq!(
            lua_to_reply(&v, false),
            Reply::Array(vec![
                Reply::Integer(1),
                Reply::bulk(&b"two"[..]),
                Reply::Integer(3),
                Reply::Integer(1),
                Reply::Null
            ])
        );
        let v: Value = lua.load("return {err='My Error'}").eval().unwrap();
        assert_eq!(lua_to_reply(&v, false), Reply::error("My Error"));
        let v: Value = lua.load("return {ok='fine\\r\\nline'}").eval().unwrap();
        assert_eq!(lua_to_reply(&v, false), Reply::Simple("fine  line".into()));
        let v: Value = lua.load("return {double=3.5}").eval().unwrap();
        assert_eq!(lua_to_reply(&v, true), Reply::Double(3.5));
        let v: Value = lua.load("local a = {} a[1] = a return a").eval().unwrap();
        let mut r = lua_to_reply(&v, false);
        let mut depth = 0;
        while let Reply::Array(mut items) = r {
            r = items.pop().unwrap();
            depth += 1;
        }
        assert_eq!(r, Reply::error("ERR reached lua stack limit"));
        assert_eq!(depth, MAX_DEPTH + 1);
    }

    #[test]
    fn replies_reach_scripts_as_their_protocol_parses() {
        let lua = Lua::new();
        let map = Reply::Map(vec![(Reply::bulk(&b"a"[..]), Reply::Integer(1))]);
        let Value::Table(flat) = reply_to_lua(&lua, map.clone(), false).unwrap() else { panic!() };
        assert_eq!(flat.raw_len(), 2);
        let Value::Table(t) = reply_to_lua(&lua, map, true).unwrap() else { panic!() };
        let inner: Table = t.get("map").unwrap();
        assert_eq!(inner.get::<f64>("a").unwrap(), 1.0);
        assert_eq!(reply_to_lua(&lua, Reply::Null, false).unwrap(), Value::Boolean(false));
        assert_eq!(reply_to_lua(&lua, Reply::Null, true).unwrap(), Value::Nil);
        assert_eq!(reply_to_lua(&lua, Reply::Boolean(true), false).unwrap(), Value::Number(1.0));
    }
}
