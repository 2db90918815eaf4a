//! FUNCTION libraries: `#!lua name=<lib>` code that registers functions with
//! `redis.register_function` when it is loaded.
//!
//! While a library loads it sees only `redis.register_function`, `redis.log` and the version
//! constants (as in Redis 7); its functions, when called by FCALL, see the scripts' globals.
//! All libraries share one globals table, read-only like the scripts'. The set of libraries
//! is kept in the engine as one record (`S:functions`) holding Redis's `FUNCTION DUMP`
//! payload, rewritten on every change and loaded at start, so functions survive restarts and
//! reach replicas with the WAL.

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Table, Value};

use super::{ScriptFlags, Vm};
use crate::rdb::codec::{put_string, Reader};
use crate::rdb::{crc64, RDB_VERSION};

/// The engine record that holds every library (a FUNCTION DUMP payload).
pub const RECORD: &[u8] = b"S:functions";

/// RDB's opcode before each library in a FUNCTION DUMP payload.
const OPCODE_FUNCTION2: u8 = 245;

/// A registered function.
#[derive(Debug)]
pub(crate) struct FunctionDef {
    pub name: String,
    pub description: Option<String>,
    pub flags: ScriptFlags,
    pub func: Function,
}

/// A loaded library.
#[derive(Debug)]
pub(crate) struct Library {
    pub name: String,
    /// The code as loaded (shebang included), for WITHCODE and DUMP.
    pub code: Bytes,
    /// Its functions by name.
    pub functions: BTreeMap<String, FunctionDef>,
}

/// Every library, by name.
#[derive(Debug, Default)]
pub(crate) struct Libraries {
    libs: BTreeMap<String, Library>,
}

impl Libraries {
    pub fn len(&self) -> usize {
        self.libs.len()
    }

    pub fn function_count(&self) -> usize {
        self.libs.values().map(|l| l.functions.len()).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Library> {
        self.libs.values()
    }

    /// The function called `name` (case-insensitive, as in Redis).
    pub fn function(&self, name: &str) -> Option<&FunctionDef> {
        let key = name.to_ascii_lowercase();
        self.libs.values().find_map(|l| l.functions.get(&key))
    }

    pub fn remove(&mut self, name: &str) -> Option<Library> {
        self.libs.remove(name)
    }

    pub fn clear(&mut self) {
        self.libs.clear();
    }

    /// FUNCTION DUMP's payload of every library.
    pub fn dump(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for lib in self.libs.values() {
            out.push(OPCODE_FUNCTION2);
            put_string(&mut out, &lib.code);
        }
        crate::rdb::seal_payload(&mut out);
        out
    }
}

/// How FUNCTION RESTORE treats libraries that exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Fail on a name collision.
    Append,
    /// Replace the colliding libraries.
    Replace,
    /// Delete every library first.
    Flush,
}

/// The library codes in a FUNCTION DUMP payload.
pub fn parse_dump(payload: &[u8]) -> Result<Vec<Bytes>, String> {
    let bad = || "DUMP payload version or checksum are wrong".to_string();
    if payload.len() < 10 {
        return Err(bad());
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..10].try_into().unwrap_or_default());
    if version > RDB_VERSION || (crc != 0 && crc != crc64::crc64(&payload[..payload.len() - 8])) {
        return Err(bad());
    }
    let mut r = Reader::new(body);
    let mut codes = Vec::new();
    while r.remaining() > 0 {
        match r.u8() {
            Ok(OPCODE_FUNCTION2) => {
                codes.push(r.string().map_err(|_| "failed loading the given functions payload".to_string())?)
            }
            Ok(_) => return Err("given type is not a function".into()),
            Err(_) => return Err("can not read data type".into()),
        }
    }
    Ok(codes)
}

/// A library's metadata line: (name, offset of the code).
fn metadata(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else { return Err("Invalid library metadata".into()) };
    let line = String::from_utf8_lossy(&code[..end]);
    let parts = super::split_args(&line).filter(|p| !p.is_empty()).ok_or("Invalid library metadata")?;
    let engine = &parts[0][2..];
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err("Invalid metadata value, name argument was given multiple times".into());
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("Invalid metadata value given: {part}"));
    }
    let Some(name) = name else { return Err("Library name was not given".into()) };
    if !valid_name(&name) {
        return Err(
            "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"
                .into(),
        );
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    Ok((name, end))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Vm {
    /// FUNCTION LOAD: compiles and runs the library's code, which registers its functions.
    /// Returns the library's name.
    pub(crate) fn load_library(
        &mut self,
        code: Bytes,
        replace: bool,
        status: &super::RunStatus,
    ) -> Result<String, String> {
        let (name, start) = metadata(&code)?;
        if self.libraries.libs.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let env: Table = self.prim.get("function_globals").map_err(|e| e.to_string())?;
        let chunk = self
            .lua
            .load(&code[start..])
            .set_name("@user_function")
            .set_environment(env)
            .into_function()
            .map_err(|e| format!("Error compiling function: {}", compile_message(&e)))?;
        let registered = RefCell::new(BTreeMap::<String, FunctionDef>::new());
        let outcome = self.lua.scope(|scope| {
            let register = scope.create_function(|lua, args: MultiValue| register(lua, args, &registered))?;
            self.prim.raw_set("register", register)?;
            self.prim.get::<Function>("loading")?.call::<()>(true)?;
            status.loading(true);
            let result = self.prim.get::<Function>("protected")?.call::<(bool, Value)>(chunk);
            status.loading(false);
            self.prim.get::<Function>("loading")?.call::<()>(false)?;
            self.prim.raw_set("register", Value::Nil)?;
            result
        });
        match outcome {
            Ok((true, _)) => {}
            Ok((false, error)) => return Err(format!("Error registering functions: {}", load_error(&error))),
            Err(e) => return Err(format!("Error registering functions: ERR {e}")),
        }
        let functions = registered.into_inner();
        if functions.is_empty() {
            return Err("No functions registered".into());
        }
        for (key, f) in &functions {
            if self.libraries.libs.values().any(|l| l.name != name && l.functions.contains_key(key)) {
                return Err(format!("Function {} already exists", f.name));
            }
        }
        self.libraries.libs.insert(name.clone(), Library { name: name.clone(), code, functions });
        Ok(name)
    }

    /// FUNCTION RESTORE (and loading the engine's record at start).
    pub(crate) fn restore_libraries(
        &mut self,
        payload: &[u8],
        policy: RestorePolicy,
        status: &super::RunStatus,
    ) -> Result<(), String> {
        let codes = parse_dump(payload)?;
        let saved = std::mem::take(&mut self.libraries.libs);
        if policy != RestorePolicy::Flush {
            self.libraries.libs = saved.iter().map(|(k, l)| (k.clone(), clone_library(l))).collect();
        }
        let mut failure = None;
        for code in codes {
            if policy == RestorePolicy::Append {
                if let Ok((name, _)) = metadata(&code) {
                    if self.libraries.libs.contains_key(&name) {
                        failure = Some(format!("Library {name} already exists"));
                        break;
                    }
                }
            }
            if let Err(e) = self.load_library(code, policy == RestorePolicy::Replace, status) {
                failure = Some(e);
                break;
            }
        }
        if let Some(e) = failure {
            self.libraries.libs = saved;
            return Err(e);
        }
        Ok(())
    }
}

fn clone_library(l: &Library) -> Library {
    Library {
        name: l.name.clone(),
        code: l.code.clone(),
        functions: l
            .functions
            .iter()
            .map(|(k, f)| {
                (
                    k.clone(),
                    FunctionDef {
                        name: f.name.clone(),
                        description: f.description.clone(),
                        flags: f.flags,
                        func: f.func.clone(),
                    },
                )
            })
            .collect(),
    }
}

/// A compile error's message as Lua printed it.
fn compile_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The text of an error a library's code raised while loading (Redis's
/// `luaExtractErrorInformation`).
fn load_error(error: &Value) -> String {
    match error {
        Value::String(s) => format!("ERR {}", s.to_string_lossy()),
        Value::Table(t) => match t.raw_get::<Value>("err") {
            Ok(Value::String(s)) => s.to_string_lossy().to_string(),
            _ => "ERR unknown error".into(),
        },
        other => format!("ERR {other:?}"),
    }
}

/// `redis.register_function(name, callback)` or `redis.register_function{function_name=…,
/// callback=…, flags={…}, description=…}`: (true) or (false, error text).
fn register(
    lua: &Lua,
    args: MultiValue,
    registered: &RefCell<BTreeMap<String, FunctionDef>>,
) -> mlua::Result<(bool, Value)> {
    let fail = |msg: &str| -> mlua::Result<(bool, Value)> {
        Ok((false, Value::String(lua.create_string(format!("ERR {msg}"))?)))
    };
    let def = match args.len() {
        1 => {
            let Some(Value::Table(named)) = args.front() else {
                return fail("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
            };
            let (mut name, mut description, mut callback, mut flags) = (None, None, None, ScriptFlags::default());
            for pair in named.pairs::<Value, Value>() {
                let (k, v) = pair?;
                let Value::String(k) = k else {
                    return fail("named argument key given to redis.register_function is not a string");
                };
                let key = k.to_string_lossy().to_ascii_lowercase();
                match key.as_str() {
                    "function_name" => match super::api::lua_text(&v) {
                        Some(t) => name = Some(String::from_utf8_lossy(&t).into_owned()),
                        None => {
                            return fail("function_name argument given to redis.register_function must be a string")
                        }
                    },
                    "description" => match super::api::lua_text(&v) {
                        Some(t) => description = Some(String::from_utf8_lossy(&t).into_owned()),
                        None => return fail("description argument given to redis.register_function must be a string"),
                    },
                    "callback" => match v {
                        Value::Function(f) => callback = Some(f),
                        _ => return fail("callback argument given to redis.register_function must be a function"),
                    },
                    "flags" => {
                        let Value::Table(list) = v else {
                            return fail(
                                "flags argument to redis.register_function must be a table representing function flags",
                            );
                        };
                        for i in 1.. {
                            match list.raw_get::<Value>(i)? {
                                Value::Nil => break,
                                v => match super::api::lua_text(&v) {
                                    Some(t) if flags.set(&String::from_utf8_lossy(&t), true) => {}
                                    _ => return fail("unknown flag given"),
                                },
                            }
                        }
                    }
                    _ => return fail("unknown argument given to redis.register_function"),
                }
            }
            let Some(name) = name else { return fail("redis.register_function must get a function name argument") };
            let Some(func) = callback else { return fail("redis.register_function must get a callback argument") };
            FunctionDef { name, description, flags, func }
        }
        2 => {
            let Some(name) = super::api::lua_text(&args[0]) else {
                return fail("first argument to redis.register_function must be a string");
            };
            let Value::Function(func) = &args[1] else {
                return fail("second argument to redis.register_function must be a function");
            };
            FunctionDef {
                name: String::from_utf8_lossy(&name).into_owned(),
                description: None,
                flags: ScriptFlags::default(),
                func: func.clone(),
            }
        }
        _ => return fail("wrong number of arguments to redis.register_function"),
    };
    if !valid_name(&def.name) {
        return fail("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long");
    }
    let mut registered = registered.borrow_mut();
    // Function names are case-insensitive, as in Redis: the map's keys are lower-cased.
    let key = def.name.to_ascii_lowercase();
    if registered.contains_key(&key) {
        return fail("Function already exists in the library");
    }
    registered.insert(key, def);
    Ok((true, Value::Nil))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_metadata_is_checked_as_redis_checks_it() {
        assert_eq!(
            metadata(b"#!lua name=mylib\nx").unwrap(),
            ("mylib".into(), 16),
            "the code keeps the newline, so lines count from the header"
        );
        assert_eq!(metadata(b"return 1").unwrap_err(), "Missing library metadata");
        assert_eq!(metadata(b"#!lua name=a").unwrap_err(), "Invalid library metadata");
        assert_eq!(metadata(b"#!lua\n").unwrap_err(), "Library name was not given");
        assert_eq!(
            metadata(b"#!lua name=a name=b\n").unwrap_err(),
            "Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(metadata(b"#!lua foo=bar\n").unwrap_err(), "Invalid metadata value given: foo=bar");
        assert_eq!(metadata(b"#!js name=a\n").unwrap_err(), "Engine 'js' not found");
        assert!(metadata(b"#!lua name=a-b\n").unwrap_err().starts_with("Library names can only contain"));
    }

    #[test]
    fn dump_payloads_round_trip_and_damage_is_refused() {
        let libs = Libraries::default();
        let empty = libs.dump();
        assert_eq!(parse_dump(&empty).unwrap(), Vec::<Bytes>::new());
        let mut out = Vec::new();
        out.push(OPCODE_FUNCTION2);
        put_string(&mut out, b"#!lua name=x\nredis.register_function('f', function() return 1 end)");
        out.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64::crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(parse_dump(&out).unwrap().len(), 1);
        let mut damaged = out.clone();
        damaged[3] ^= 1;
        assert_eq!(parse_dump(&damaged).unwrap_err(), "DUMP payload version or checksum are wrong");
    }
}
