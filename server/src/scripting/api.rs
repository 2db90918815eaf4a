//! The `redis` table scripts see (and the smaller one a FUNCTION LOAD sees), and Redis's
//! `math.random`. `redis.call`/`pcall` are C closures (`super::call_api`) over the per-run
//! primitive of [`super::call`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mlua::{Function, Lua, MultiValue, Table, Value};

/// Redis's log levels (`redis.LOG_*`).
const LOG_LEVELS: [(&str, i64); 4] = [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)];

/// Fills the `redis` global and `library_api` (FUNCTION LOAD's `redis`), and replaces
/// `math.random`/`math.randomseed`. Rust functions answering (ok, …) are made into ones
/// that raises as a C library would (see [`super::raising`]).
pub(super) fn install(
    lua: &Lua,
    prim: &Table,
    library_api: &Table,
    resp3: &Arc<AtomicBool>,
    rng: &Rng,
) -> mlua::Result<()> {
    let redis = lua.create_table()?;
    let wrapped = |f: Function| super::raising(lua, f);
    // `redis.call` and `redis.pcall` are set once `prim.call` exists (`super::install_calls`).
    redis.set("acl_check_cmd", prim.get::<Function>("acl_check_api")?)?;
    redis.set(
        "sha1hex",
        wrapped(lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "wrong number of arguments");
            }
            let text = lua_text(&args[0]).unwrap_or_default();
            done(lua, super::sha1_hex(&text))
        })?)?,
    )?;
    redis.set(
        "error_reply",
        lua.create_function(|lua, args: MultiValue| match (args.len(), args.front()) {
            (1, Some(Value::String(s))) => {
                let text = s.to_str().map(|t| t.to_string()).unwrap_or_default();
                let raw = if text.starts_with('-') { text } else { format!("-{text}") };
                error_table(lua, &raw)
            }
            _ => error_table(lua, "wrong number or type of arguments"),
        })?,
    )?;
    redis.set(
        "status_reply",
        lua.create_function(|lua, args: MultiValue| match (args.len(), args.front()) {
            (1, Some(Value::String(s))) => {
                let t = lua.create_table()?;
                t.set("ok", s.clone())?;
                Ok(t)
            }
            _ => error_table(lua, "wrong number or type of arguments"),
        })?,
    )?;
    let log = wrapped(lua.create_function(redis_log)?)?;
    redis.set("log", log.clone())?;
    let resp = Arc::clone(resp3);
    redis.set(
        "setresp",
        wrapped(lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "redis.setresp() requires one argument.");
            }
            match lua_number(&args[0]).map(|n| n as i64) {
                Some(2) => resp.store(false, Ordering::Relaxed),
                Some(3) => resp.store(true, Ordering::Relaxed),
                _ => return fail(lua, "RESP version must be 2 or 3."),
            }
            done(lua, ())
        })?)?,
    )?;
    redis.set(
        "set_repl",
        wrapped(lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "redis.set_repl() requires two arguments.");
            }
            // Shale replicates a script's effects as one engine batch: the flags are checked
            // and accepted.
            match lua_number(&args[0]).map(|n| n as i64) {
                Some(f) if f & !3 == 0 => done(lua, ()),
                _ => fail(lua, "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."),
            }
        })?)?,
    )?;
    redis.set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    redis.set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
    redis.set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    for (name, value) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        redis.set(name, value)?;
    }
    for table in [&redis, library_api] {
        for (name, level) in LOG_LEVELS {
            table.set(name, level)?;
        }
        table.set("REDIS_VERSION", crate::commands::REDIS_COMPAT_VERSION)?;
        table.set("REDIS_VERSION_NUM", version_num(crate::commands::REDIS_COMPAT_VERSION))?;
    }
    library_api.set("log", log)?;
    library_api.set("register_function", prim.get::<Function>("register_api")?)?;
    lua.globals().set("redis", redis)?;
    install_random(lua, rng)
}

/// `7.2.4` → `0x070204`.
fn version_num(version: &str) -> i64 {
    version.split('.').fold(0, |acc, part| (acc << 8) | part.parse::<i64>().unwrap_or(0))
}

/// `redis.log(level, message, …)`.
fn redis_log(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() < 2 {
        return fail(lua, "redis.log() requires two arguments or more.");
    }
    let Some(level) = lua_number(&args[0]) else { return fail(lua, "First argument must be a number (log level).") };
    let level = level as i64;
    if !(0..=3).contains(&level) {
        return fail(lua, "Invalid debug level.");
    }
    let words: Vec<String> =
        args.iter().skip(1).filter_map(lua_text).map(|t| String::from_utf8_lossy(&t).into_owned()).collect();
    let line = words.join(" ");
    match level {
        0 => tracing::debug!(target: "shale::scripting", "{line}"),
        1 => tracing::info!(target: "shale::scripting", verbose = true, "{line}"),
        2 => tracing::info!(target: "shale::scripting", "{line}"),
        _ => tracing::warn!(target: "shale::scripting", "{line}"),
    }
    done(lua, ())
}

/// The generator behind `math.random`, shared by the VMs of one script cache (see
/// [`super::Shared`]), so scripts draw from one sequence as from Redis's one VM.
pub(crate) type Rng = Arc<Mutex<Rand48>>;

/// A generator with a random seed, as Redis's is at start.
pub(crate) fn new_rng() -> Rng {
    Arc::new(Mutex::new(Rand48::seeded(rand::random::<u32>() as i32)))
}

/// Redis's `math.random` and `math.randomseed`: its own `rand48` generator, so a seeded
/// script draws what it would on Redis.
fn install_random(lua: &Lua, rng: &Rng) -> mlua::Result<()> {
    let state = Arc::clone(rng);
    let math: Table = lua.globals().get("math")?;
    let rng = Arc::clone(&state);
    let random = lua.create_function(move |lua, args: MultiValue| {
        let r = rng.lock().unwrap_or_else(|e| e.into_inner()).next_fraction();
        let int = |v: &Value, n: usize, lua: &Lua| -> Result<i32, mlua::Result<MultiValue>> {
            match lua_number(v) {
                Some(x) => Ok(x as i32),
                None => {
                    Err(fail(lua, &format!("bad argument #{n} to 'random' (number expected, got {})", type_name(v))))
                }
            }
        };
        match args.len() {
            0 => done(lua, r),
            1 => {
                let u = match int(&args[0], 1, lua) {
                    Ok(u) => u,
                    Err(e) => return e,
                };
                if u < 1 {
                    return fail(lua, "bad argument #1 to 'random' (interval is empty)");
                }
                done(lua, (r * u as f64).floor() + 1.0)
            }
            2 => {
                let l = match int(&args[0], 1, lua) {
                    Ok(v) => v,
                    Err(e) => return e,
                };
                let u = match int(&args[1], 2, lua) {
                    Ok(v) => v,
                    Err(e) => return e,
                };
                if l > u {
                    return fail(lua, "bad argument #2 to 'random' (interval is empty)");
                }
                done(lua, (r * (u as f64 - l as f64 + 1.0)).floor() + l as f64)
            }
            _ => fail(lua, "wrong number of arguments"),
        }
    })?;
    let rng = state;
    let randomseed = lua.create_function(move |lua, args: MultiValue| {
        let Some(seed) = args.front().and_then(lua_number) else {
            return fail(lua, "bad argument #1 to 'randomseed' (number expected, got no value)");
        };
        *rng.lock().unwrap_or_else(|e| e.into_inner()) = Rand48::seeded(seed as i32);
        done(lua, ())
    })?;
    math.set("random", super::raising_at_caller(lua, random)?)?;
    math.set("randomseed", super::raising_at_caller(lua, randomseed)?)?;
    Ok(())
}

/// Redis's `redisLrand48`: the 48-bit linear congruential generator of `rand48`.
#[derive(Debug)]
pub(crate) struct Rand48(u64);

impl Rand48 {
    fn seeded(seed: i32) -> Self {
        Rand48((((seed as u32) as u64) << 16) | 0x330E)
    }

    fn next(&mut self) -> u32 {
        self.0 = (self.0.wrapping_mul(0x5DEE_CE66D).wrapping_add(0xB)) & ((1 << 48) - 1);
        (self.0 >> 17) as u32
    }

    /// `(lrand48() % INT32_MAX) / INT32_MAX`.
    fn next_fraction(&mut self) -> f64 {
        let max = i32::MAX as u32;
        (self.next() % max) as f64 / max as f64
    }
}

/// A Lua error table for `raw` in Redis's form (`luaPushErrorBuff`): "-CODE message" keeps
/// its code, anything else gets `ERR`; trailing newlines are cut.
pub(crate) fn error_table(lua: &Lua, raw: &str) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("err", error_text(raw))?;
    Ok(t)
}

/// The `err` text of [`error_table`].
pub(crate) fn error_text(raw: &str) -> String {
    let (code, msg) = match raw.strip_prefix('-') {
        Some(rest) => match rest.split_once(' ') {
            Some((code, msg)) => (code.to_string(), msg.to_string()),
            None => ("ERR".to_string(), rest.to_string()),
        },
        None => ("ERR".to_string(), raw.to_string()),
    };
    format!("{code} {}", msg.trim_matches(|c| c == '\r' || c == '\n'))
}

/// (true, values…) for a wrapped function.
pub(crate) fn done(lua: &Lua, values: impl mlua::IntoLuaMulti) -> mlua::Result<MultiValue> {
    let mut out = values.into_lua_multi(lua)?;
    out.push_front(Value::Boolean(true));
    Ok(out)
}

/// (false, message) for a wrapped function: the prelude raises `message`.
pub(crate) fn fail(lua: &Lua, message: &str) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([Value::Boolean(false), Value::String(lua.create_string(message)?)]))
}

/// A Lua number, or a string that reads as one (Lua's own coercion).
pub(crate) fn lua_number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok()),
        _ => None,
    }
}

/// A Lua string's bytes, or a number's text (`lua_tolstring`).
pub(crate) fn lua_text(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(i) => Some(i.to_string().into_bytes()),
        Value::Number(n) => Some(lua_number_text(*n).into_bytes()),
        _ => None,
    }
}

/// How Lua 5.1 prints a number (`%.14g`).
pub(crate) fn lua_number_text(n: f64) -> String {
    crate::resp::format_double_precision(n, 14)
}

/// Lua's name for a value's type.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "no value",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rand48_matches_the_c_library() {
        // srand48(0); lrand48() x3 with glibc.
        let mut r = Rand48::seeded(0);
        assert_eq!([r.next(), r.next(), r.next()], [366850414, 1610402240, 206956554]);
    }

    #[test]
    fn error_texts_keep_or_add_their_code() {
        assert_eq!(error_text("-WRONGTYPE Operation against a key\r\n"), "WRONGTYPE Operation against a key");
        assert_eq!(
            error_text("Unknown Redis command called from script"),
            "ERR Unknown Redis command called from script"
        );
        assert_eq!(error_text("-My Error"), "My Error");
        assert_eq!(version_num("7.2.4"), 0x070204);
    }
}
