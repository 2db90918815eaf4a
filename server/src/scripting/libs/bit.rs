//! LuaBitOp's `bit` library: 32-bit operations on Lua numbers.

use mlua::{Lua, MultiValue, Table, Value};

use crate::scripting::api::{done, fail, type_name};

/// A number as LuaBitOp reads it: rounded to an integer, wrapped to 32 bits.
fn arg(lua: &Lua, args: &MultiValue, i: usize, func: &str) -> Result<i32, mlua::Result<MultiValue>> {
    let v = args.get(i).unwrap_or(&Value::Nil);
    let n = match v {
        Value::Integer(n) => *n as f64,
        Value::Number(n) => *n,
        Value::String(s) => match s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok()) {
            Some(n) => n,
            None => {
                return Err(fail(lua, &format!("bad argument #{} to '{func}' (number expected, got string)", i + 1)))
            }
        },
        other => {
            let got = if matches!(other, Value::Nil) && i >= args.len() { "no value" } else { type_name(other) };
            let got = if matches!(other, Value::Nil) && i < args.len() { "nil" } else { got };
            return Err(fail(lua, &format!("bad argument #{} to '{func}' (number expected, got {got})", i + 1)));
        }
    };
    Ok(to_bit(n))
}

/// LuaBitOp's conversion: round half to even, keep the low 32 bits.
fn to_bit(n: f64) -> i32 {
    if !n.is_finite() {
        return 0;
    }
    let r = n.round_ties_even();
    (r.rem_euclid(4_294_967_296.0) as u64 as u32) as i32
}

macro_rules! ret {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(reply) => return reply,
        }
    };
}

/// The `bit` table.
pub(super) fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let add =
        |name: &'static str, f: fn(&Lua, MultiValue, &'static str) -> mlua::Result<MultiValue>| -> mlua::Result<()> {
            let func = lua.create_function(move |lua, args: MultiValue| f(lua, args, name))?;
            t.set(name, crate::scripting::raising_at_caller(lua, func)?)
        };
    add("tobit", |lua, a, n| done(lua, ret!(arg(lua, &a, 0, n)) as f64))?;
    add("bnot", |lua, a, n| done(lua, !ret!(arg(lua, &a, 0, n)) as f64))?;
    add("bswap", |lua, a, n| done(lua, ret!(arg(lua, &a, 0, n)).swap_bytes() as f64))?;
    fn fold(lua: &Lua, a: MultiValue, name: &'static str, op: fn(i32, i32) -> i32) -> mlua::Result<MultiValue> {
        let mut acc = ret!(arg(lua, &a, 0, name));
        for i in 1..a.len() {
            acc = op(acc, ret!(arg(lua, &a, i, name)));
        }
        done(lua, acc as f64)
    }
    add("band", |lua, a, n| fold(lua, a, n, |x, y| x & y))?;
    add("bor", |lua, a, n| fold(lua, a, n, |x, y| x | y))?;
    add("bxor", |lua, a, n| fold(lua, a, n, |x, y| x ^ y))?;
    fn shift(lua: &Lua, a: MultiValue, name: &'static str, op: fn(i32, u32) -> i32) -> mlua::Result<MultiValue> {
        let x = ret!(arg(lua, &a, 0, name));
        let by = ret!(arg(lua, &a, 1, name)) as u32 & 31;
        done(lua, op(x, by) as f64)
    }
    add("lshift", |lua, a, n| shift(lua, a, n, |x, b| ((x as u32) << b) as i32))?;
    add("rshift", |lua, a, n| shift(lua, a, n, |x, b| ((x as u32) >> b) as i32))?;
    add("arshift", |lua, a, n| shift(lua, a, n, |x, b| x >> b))?;
    add("rol", |lua, a, n| shift(lua, a, n, |x, b| (x as u32).rotate_left(b) as i32))?;
    add("ror", |lua, a, n| shift(lua, a, n, |x, b| (x as u32).rotate_right(b) as i32))?;
    add("tohex", |lua, a, name| {
        let x = ret!(arg(lua, &a, 0, name)) as u32;
        let mut n = if a.len() > 1 { ret!(arg(lua, &a, 1, name)) } else { 8 };
        let upper = n < 0;
        if upper {
            n = -n;
        }
        let n = n.clamp(1, 8) as usize;
        let text = if upper { format!("{x:08X}") } else { format!("{x:08x}") };
        done(lua, text[8 - n..].to_string())
    })?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_wrap_and_round_as_luabitop() {
        assert_eq!(to_bit(4294967295.0), -1);
        assert_eq!(to_bit(2147483648.0), i32::MIN);
        assert_eq!(to_bit(-1.0), -1);
        assert_eq!(to_bit(2.5), 2);
        assert_eq!(to_bit(3.5), 4);
        assert_eq!(to_bit(1e40), 0);
    }
}
