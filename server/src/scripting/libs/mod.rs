//! The libraries Redis bundles with its Lua, written in Rust with the behaviour scripts rely
//! on: `bit` (LuaBitOp), `cjson` (lua-cjson), `cmsgpack` (lua-cmsgpack) and `struct`
//! (Roberto Ierusalimschy's struct). Each function answers (ok, …) and is wrapped by
//! [`super::raising_at_caller`] so that errors are raised as a C library raises them.

mod bit;
pub(crate) mod cjson;
mod cmsgpack;
mod struct_lib;

use mlua::{Lua, MultiValue, Value};

use super::api::{lua_number, lua_text, type_name};

/// Adds the libraries to the globals; returns their names (the prelude seals them).
pub(super) fn install(lua: &Lua, cjson: &cjson::Shared) -> mlua::Result<Vec<&'static str>> {
    lua.globals().set("bit", bit::table(lua)?)?;
    lua.globals().set("cjson", cjson::table(lua, cjson)?)?;
    lua.globals().set("cmsgpack", cmsgpack::table(lua)?)?;
    lua.globals().set("struct", struct_lib::table(lua)?)?;
    Ok(vec!["bit", "cjson", "cmsgpack", "struct"])
}

/// A Lua error (allocation, a bad table key) as a library error's text.
fn lua_err(e: mlua::Error) -> String {
    e.to_string()
}

/// `luaL_argerror`'s message: "bad argument #n to 'func' (msg)".
fn arg_error(n: usize, func: &str, msg: &str) -> String {
    format!("bad argument #{n} to '{func}' ({msg})")
}

/// What `luaL_typerror` says argument `i` (0-based) was.
fn got(args: &MultiValue, i: usize) -> &'static str {
    match args.get(i) {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(v) => type_name(v),
    }
}

/// `luaL_checklstring`: a string, or a number as its text.
fn check_string(args: &MultiValue, i: usize, func: &str) -> Result<Vec<u8>, String> {
    args.get(i)
        .and_then(lua_text)
        .ok_or_else(|| arg_error(i + 1, func, &format!("string expected, got {}", got(args, i))))
}

/// `luaL_checknumber`: a number, or a string that reads as one.
fn check_number(args: &MultiValue, i: usize, func: &str) -> Result<f64, String> {
    args.get(i)
        .and_then(lua_number)
        .ok_or_else(|| arg_error(i + 1, func, &format!("number expected, got {}", got(args, i))))
}

/// `luaL_optinteger`: `default` when absent or nil, else a number truncated to an integer.
fn opt_integer(args: &MultiValue, i: usize, func: &str, default: i64) -> Result<i64, String> {
    match args.get(i) {
        None | Some(Value::Nil) => Ok(default),
        Some(_) => check_number(args, i, func).map(|n| n as i64),
    }
}
