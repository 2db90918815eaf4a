//! Lua scripting: EVAL scripts and FUNCTION libraries on embedded Lua 5.1 VMs.
//!
//! Redis embeds Lua 5.1; so does Shale, through `mlua` with its `lua51` and `vendored` features
//! (the interpreter's C sources, built by the machine's C compiler: the same language, the same
//! number formatting and table iteration order). On it, [`prelude.lua`](prelude.lua) builds
//! Redis's sandbox: no `os`, `io`, `loadfile`, `dofile`, `print` or `require`; the globals and
//! every library table are read-only (`Attempt to modify a readonly table`); reading a global
//! that does not exist fails (`Script attempted to access nonexistent global variable`);
//! errors are located by Redis's error handler (`script: <name>, on @user_script:<line>.`).
//! The libraries Redis bundles (`cjson`, `cmsgpack`, `bit`, `struct`) are written in Rust in
//! [`libs`]; `redis.*` is in [`api`].
//!
//! **Where scripts run.** Function libraries live on one VM, taken out of its slot by whoever
//! runs Lua on it ([`lease`]): a function (and an EVAL script sent to an executor thread) runs
//! from start to end on the executor thread of its client while it holds it (a pipeline of
//! scripts holds it from the first to the last). An EVAL script that a connection's own task
//! can run — its keys declared, in memory, free — runs there instead, inside the task's write
//! group, on one of a few *spare* VMs that hold only compiled EVAL scripts (what a script can
//! leave for later ones — `math.random`'s sequence, `cjson`'s settings — all VMs share; its
//! globals are read-only), never waiting for one; anything that would
//! make it wait or run long makes it void and it runs again on an executor (see [`call`]).
//! EVAL's cache of scripts is shared by all VMs ([`cache`]). **Isolation** comes from the key
//! stripes, as for EXEC (see [`call`]): the declared keys are locked before the script starts,
//! every key a command of the script names is locked before that command runs, and all writes
//! go into one transaction buffer committed as one engine batch when the script ends — no
//! client sees part of a script, and replication ships it whole. A script may name keys it did
//! not declare (Redis allows it outside cluster mode): their stripes are taken without
//! waiting; if one is busy, the run is abandoned (nothing it wrote is visible) and run again
//! with every key seen so far locked up front, in order, so two clients can never deadlock.
//! Time stands still for lookups too, as in Redis 7.0: a script's commands judge expiry by
//! the time it started (`ExecContext::now_ms`), so no key expires in the middle of a script.
//!
//! **Busy scripts.** A script that runs longer than `busy-reply-threshold` makes every other
//! client's command (but those Redis allows while busy: `SCRIPT KILL`, `FUNCTION KILL`,
//! `SHUTDOWN NOSAVE`, …) answer `-BUSY`; a count hook every 10,000 Lua instructions notices
//! the time and `SCRIPT KILL` / `FUNCTION KILL` (refused with `-UNKILLABLE` once the script
//! wrote). After a kill the hook runs at every instruction, so a `pcall` that catches the kill
//! error meets it again at once; a shutdown stops any script.
//!
//! **Function libraries persist** as one engine record ([`functions::RECORD`]) holding FUNCTION
//! DUMP's payload, rewritten by every change, loaded at start and by replicas whenever their
//! primary's stream changes it. EVAL's script cache lives in memory only, as in Redis.

pub(crate) mod api;
mod cache;
pub(crate) mod call;
pub(crate) mod convert;
pub(crate) mod functions;
pub(crate) mod lease;
mod libs;
mod noscript;
pub(crate) mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mlua::{Function, Lua, Table};

pub(crate) use cache::NotCompiled;
pub(crate) use lease::VmGuard;
use lease::{Spares, VmSlot};
pub use status::RunStatus;

/// The flags a script declares in its shebang (`#!lua flags=no-writes,allow-stale`) or a
/// function in `redis.register_function`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    /// An EVAL script without a shebang: Redis's pre-7 behaviour (its commands decide).
    pub compat: bool,
    /// `no-writes`.
    pub no_writes: bool,
    /// `allow-oom`.
    pub allow_oom: bool,
    /// `allow-stale`.
    pub allow_stale: bool,
    /// `no-cluster`.
    pub no_cluster: bool,
    /// `allow-cross-slot-keys`.
    pub allow_cross_slot: bool,
}

impl ScriptFlags {
    /// The flag names, in Redis's order.
    pub const NAMES: [&'static str; 5] =
        ["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"];

    /// Sets the flag called `name` (case-insensitively when `any_case`); false if unknown.
    pub fn set(&mut self, name: &str, any_case: bool) -> bool {
        let matches = |n: &str| if any_case { n.eq_ignore_ascii_case(name) } else { n == name };
        let slot = match Self::NAMES.iter().position(|n| matches(n)) {
            Some(0) => &mut self.no_writes,
            Some(1) => &mut self.allow_oom,
            Some(2) => &mut self.allow_stale,
            Some(3) => &mut self.no_cluster,
            Some(4) => &mut self.allow_cross_slot,
            _ => return false,
        };
        *slot = true;
        true
    }

    /// The names of the flags set, in Redis's order.
    pub fn names(&self) -> Vec<&'static str> {
        let set = [self.no_writes, self.allow_oom, self.allow_stale, self.no_cluster, self.allow_cross_slot];
        Self::NAMES.iter().zip(set).filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }
}

/// An EVAL script in the cache.
#[derive(Debug)]
pub(crate) struct Script {
    /// Its shebang flags.
    pub flags: ScriptFlags,
    /// The compiled body.
    pub func: Function,
}

/// What the VMs of one script cache share (until `SCRIPT FLUSH` starts afresh): `math.random`'s
/// generator and `cjson`'s settings, which Redis keeps in its one VM — so a script draws the
/// next number, and encodes with the settings an earlier script chose, whichever VM it runs on.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    rng: api::Rng,
    cjson: libs::cjson::Shared,
}

impl Default for Shared {
    fn default() -> Self {
        Shared { rng: api::new_rng(), cjson: Default::default() }
    }
}

/// The Lua VM and what is compiled in it.
pub(crate) struct Vm {
    pub lua: Lua,
    /// Primitives shared with the prelude (see `prelude.lua`).
    pub prim: Table,
    /// EVAL scripts compiled on this VM, by SHA1 (lower-case hex; see [`cache`]).
    pub scripts: HashMap<String, Script>,
    /// FUNCTION libraries and their functions.
    pub libraries: functions::Libraries,
    /// The RESP version scripts' commands reply in (`redis.setresp`), for the running script.
    pub resp3: Arc<std::sync::atomic::AtomicBool>,
    /// The run its `redis.call` serves.
    current: Arc<call::CurrentRun>,
    /// What its count hook checks: the server's [`Scripting::status`] for the one VM, its own
    /// for a spare.
    pub status: Arc<RunStatus>,
    /// The prelude's `prim.run` (sets an EVAL script's KEYS and ARGV, and calls a script
    /// under the error handler), looked up once.
    run_fn: Function,
    /// Scripts run since the last garbage-collection step.
    runs: std::sync::atomic::AtomicU32,
    /// The VM's memory when its last collection cycle ended (see [`Vm::after_run`]).
    collected_at: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm").field("scripts", &self.scripts.len()).finish_non_exhaustive()
    }
}

/// Scripting state of the server: the VM and what runs on it.
#[derive(Debug)]
pub struct Scripting {
    vm: Arc<VmSlot>,
    /// Spare VMs for EVAL scripts on connections' tasks (see [`lease`]).
    spares: Arc<Spares>,
    /// EVAL scripts' sources (see [`cache`]).
    sources: cache::Sources,
    /// The running script, for BUSY replies, SCRIPT KILL and FUNCTION STATS.
    pub status: Arc<RunStatus>,
    /// What [`Scripting::memory`] and [`Scripting::counts`] last saw, answered while a
    /// script holds the VM.
    seen: Mutex<(usize, (usize, usize))>,
}

impl Scripting {
    /// A fresh VM with Redis's libraries and sandbox.
    pub fn new() -> Self {
        let status = Arc::new(RunStatus::default());
        let shared = Shared::default();
        let vm = Vm::new(Arc::clone(&status), &shared).expect("the Lua VM starts");
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Scripting {
            vm: VmSlot::new(vm),
            spares: Spares::new(cores, shared),
            sources: cache::Sources::default(),
            status,
            seen: Mutex::default(),
        }
    }

    /// The VM, for one script or library load at a time.
    pub(crate) fn vm(&self) -> VmGuard {
        self.vm.take()
    }

    /// A spare VM for an EVAL script, if one is idle or may be made (never waiting).
    pub(crate) fn spare(&self) -> Option<VmGuard> {
        self.spares.try_take()
    }

    /// `SCRIPT FLUSH`: forgets every cached script.
    ///
    /// As Redis's, it starts a fresh VM (scripts' leftovers and library settings such as
    /// `cjson.encode_max_depth` are gone); the function libraries are loaded into it again.
    pub fn flush_scripts(&self) {
        self.sources.clear();
        let shared = Shared::default();
        self.spares.flush(shared.clone());
        let mut vm = self.vm();
        let libraries = vm.libraries.dump();
        let fresh = Vm::new(Arc::clone(&self.status), &shared).map_err(|e| e.to_string()).and_then(|mut fresh| {
            fresh.restore_libraries(&libraries, functions::RestorePolicy::Flush, &self.status).map(|()| fresh)
        });
        match fresh {
            Ok(fresh) => *vm = fresh,
            Err(e) => {
                tracing::warn!(target: "shale::scripting", error = %e, "SCRIPT FLUSH kept the VM (a fresh one failed)");
                vm.scripts.clear();
                vm.lua.gc_collect().ok();
            }
        }
    }

    /// Loads the function libraries saved in `engine` (at start, and on a replica whenever
    /// its primary's writes change them), replacing those loaded. A record that cannot be
    /// read or loaded is an error, never an empty set of functions.
    pub fn load_saved_functions(&self, engine: &lsm::Db) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let saved = engine.get(functions::RECORD)?;
        let mut vm = self.vm();
        let Some(payload) = saved else {
            vm.libraries.clear();
            return Ok(());
        };
        vm.restore_libraries(&payload, functions::RestorePolicy::Flush, &self.status)
            .map_err(|e| format!("the saved FUNCTION libraries cannot be loaded: {e}"))?;
        tracing::info!(target: "shale::scripting", libraries = vm.libraries.len(), "function libraries loaded");
        Ok(())
    }

    /// Loads function libraries an RDB file carried (`--import-rdb`) and saves them in `engine`
    /// with the libraries already there: all or none (a clash or a bad library fails).
    pub fn import_libraries(&self, engine: &lsm::Db, codes: &[Bytes]) -> Result<(), String> {
        let mut vm = self.vm();
        let before = vm.libraries.dump();
        for code in codes {
            if let Err(e) = vm.load_library(code.clone(), false, &self.status) {
                let _ = vm.restore_libraries(&before, functions::RestorePolicy::Flush, &self.status);
                return Err(e);
            }
        }
        let mut batch = lsm::WriteBatch::new();
        batch.put(functions::RECORD, vm.libraries.dump());
        engine.write(batch, &lsm::WriteOptions::default()).map_err(|e| e.to_string())
    }

    /// True if `batch` changes the saved function libraries.
    pub fn touches_functions(batch: &lsm::WriteBatch) -> bool {
        batch.iter().flatten().any(|e| e.key == functions::RECORD)
    }

    /// Every function library's code, by name (what an RDB snapshot carries).
    pub fn library_codes(&self) -> Vec<Bytes> {
        self.vm().libraries.iter().map(|lib| lib.code.clone()).collect()
    }

    /// Bytes the one VM uses (`INFO memory` `used_memory_lua`).
    pub fn memory(&self) -> usize {
        self.observe().0
    }

    /// Bytes the idle spare VMs use (`INFO memory` `used_memory_vm_spares`).
    pub fn spare_memory(&self) -> usize {
        self.spares.memory()
    }

    /// (cached scripts, function libraries, functions).
    pub fn counts(&self) -> (usize, usize, usize) {
        let (_, (libraries, functions)) = self.observe();
        (self.sources.len(), libraries, functions)
    }

    /// The VM's memory and counts now, or as last seen if a script is running (INFO must not
    /// wait for it).
    fn observe(&self) -> (usize, (usize, usize)) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(vm) = self.vm.try_take() {
            *seen = (vm.lua.used_memory(), (vm.libraries.len(), vm.libraries.function_count()));
        }
        *seen
    }
}

impl Default for Scripting {
    fn default() -> Self {
        Scripting::new()
    }
}

impl Vm {
    fn new(status: Arc<RunStatus>, shared: &Shared) -> mlua::Result<Vm> {
        use mlua::{LuaOptions, StdLib};
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG;
        // SAFETY: the debug library is loaded only for the prelude's error handler, which keeps
        // it in a local; the prelude removes the global before any script runs.
        let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::default()) };
        let prim = lua.create_table()?;
        let resp3 = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let prelude = lua.load(include_str!("prelude.lua")).set_name("=shale");
        let library_api = lua.create_table()?;
        prelude.call::<()>((prim.clone(), library_api.clone()))?;
        api::install(&lua, &prim, &library_api, &resp3, &shared.rng)?;
        let current = call::install(&lua, &prim)?;
        install_calls(&lua, &lua.globals().get("redis")?, &prim, &current)?;
        let mut sealed = vec!["redis", "string", "math", "table", "coroutine"];
        sealed.extend(libs::install(&lua, &shared.cjson)?);
        let seal: Function = prim.get("seal")?;
        seal.call::<()>(lua.create_sequence_from(sealed)?)?;
        status::install_hook(&lua, Arc::clone(&status))?;
        let run_fn = prim.get("run")?;
        Ok(Vm {
            lua,
            prim,
            scripts: HashMap::new(),
            libraries: functions::Libraries::default(),
            resp3,
            current,
            status,
            run_fn,
            runs: Default::default(),
            collected_at: Default::default(),
        })
    }

    /// After a script: every 50 runs, if the scripts since the last collection cycle left
    /// [`GC_SLACK`] of garbage, up to 50 incremental collection steps (Redis steps its
    /// collector every 50 scripts), so the garbage of short scripts never piles up. Redis
    /// steps whatever the garbage; stepping a VM that made little of it marks its live heap
    /// (the libraries and compiled scripts) over and over, which cost ~3 % of the CPU of a
    /// two-command script.
    pub(crate) fn after_run(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.runs.fetch_add(1, Relaxed) + 1 < 50 {
            return;
        }
        self.runs.store(0, Relaxed);
        if self.lua.used_memory() < self.collected_at.load(Relaxed) + GC_SLACK {
            return;
        }
        for _ in 0..50 {
            if self.lua.gc_step().unwrap_or(true) {
                self.collected_at.store(self.lua.used_memory(), Relaxed);
                break;
            }
        }
    }
}

/// Garbage a VM may hold before [`Vm::after_run`] steps its collector.
const GC_SLACK: usize = 32 << 10;

/// `redis.call` (`RAISE`) and `redis.pcall`, C functions as in Redis: each reads its arguments
/// off the Lua stack into the VM's [`call::CurrentRun`] (its second upvalue) and calls
/// `prim.call` (its first, which serves them and answers `ok, reply`). `redis.call` raises the
/// error table itself, so a failing call is located at the script's line even in a tail call
/// (`return redis.call(…)`), which Lua runs in place only for C functions; `redis.pcall`
/// returns it. No Lua function, table or registry reference is made per call.
///
/// # Safety
/// Called by Lua with its stack, as the closure [`install_calls`] makes (whose second upvalue
/// points at the VM's live `CurrentRun`). It holds no Rust value with a destructor when
/// `lua_call` or `lua_error` unwinds past it: the arguments are handed over before the call.
unsafe extern "C-unwind" fn call_api<const RAISE: bool>(state: *mut mlua::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: stack operations within the slots Lua guarantees a C function (LUA_MINSTACK);
    // reading the arguments raises nothing (see `convert::stack_arg`).
    unsafe {
        let n = ffi::lua_gettop(state).max(0) as usize;
        let args = convert::collect_args(n, |i| convert::stack_arg(state, i as std::ffi::c_int));
        let current = ffi::lua_touserdata(state, ffi::lua_upvalueindex(2)) as *const call::CurrentRun;
        (*current).put_args(args);
        ffi::lua_settop(state, 0);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_pushinteger(state, 0);
        ffi::lua_pushnil(state);
        ffi::lua_call(state, 2, 2);
        if RAISE && ffi::lua_toboolean(state, -2) == 0 {
            ffi::lua_error(state);
        }
        1
    }
}

/// Sets `redis.call` and `redis.pcall` in the `redis` table: [`call_api`] closed over
/// `prim.call` and the VM's `current` run.
fn install_calls(lua: &Lua, redis: &Table, prim: &Table, current: &Arc<call::CurrentRun>) -> mlua::Result<()> {
    let run = Arc::as_ptr(current) as *mut std::ffi::c_void;
    let functions: [(&str, mlua::ffi::lua_CFunction); 2] = [("call", call_api::<true>), ("pcall", call_api::<false>)];
    for (name, function) in functions {
        let serve: Function = prim.get("call")?;
        // SAFETY: pushes one C closure over `serve` (pushed by `exec_raw`) and a light
        // userdata pointing at `current`, which the VM keeps as long as its Lua state.
        let closure = unsafe {
            lua.exec_raw::<Function>(serve, |state| {
                mlua::ffi::lua_pushlightuserdata(state, run);
                mlua::ffi::lua_pushcclosure(state, function, 2);
            })?
        };
        redis.raw_set(name, closure)?;
    }
    Ok(())
}

/// Functions written in Rust answer `(true, results…)` or `(false, error)`; this wraps one in
/// a C closure that raises `error` as it is — as Redis's own API functions raise the error
/// tables they push — so the handler locates it at the script's line.
pub(crate) fn raising(lua: &Lua, f: Function) -> mlua::Result<Function> {
    wrap_raising::<false>(lua, f)
}

/// As [`raising`], for the bundled C libraries' functions (`cjson`, `bit`, `cmsgpack`,
/// `struct`, `math.random`): a message that is a string gets the caller's position in front
/// ("user_script:1: "), as their `luaL_error` and `luaL_argerror` put it there.
pub(crate) fn raising_at_caller(lua: &Lua, f: Function) -> mlua::Result<Function> {
    wrap_raising::<true>(lua, f)
}

fn wrap_raising<const LOCATE: bool>(lua: &Lua, f: Function) -> mlua::Result<Function> {
    unsafe extern "C-unwind" fn raise_on_failure<const LOCATE: bool>(state: *mut mlua::lua_State) -> std::ffi::c_int {
        use mlua::ffi;
        // SAFETY: as `call_api`: only the given stack, nothing to drop when it raises.
        unsafe {
            let n = ffi::lua_gettop(state);
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
            ffi::lua_insert(state, 1);
            ffi::lua_call(state, n, ffi::LUA_MULTRET);
            if ffi::lua_toboolean(state, 1) == 0 {
                ffi::lua_settop(state, 2);
                if LOCATE && ffi::lua_type(state, 2) == ffi::LUA_TSTRING {
                    ffi::luaL_where(state, 1);
                    ffi::lua_insert(state, 2);
                    ffi::lua_concat(state, 2);
                }
                ffi::lua_error(state);
            }
            ffi::lua_remove(state, 1);
            ffi::lua_gettop(state)
        }
    }
    // SAFETY: pushes one C closure with `f` as its upvalue, consuming `f` from the stack.
    unsafe { lua.exec_raw::<Function>(f, |state| mlua::ffi::lua_pushcclosure(state, raise_on_failure::<LOCATE>, 1)) }
}

/// SHA1 of `body` in lower-case hex (`redis.sha1hex`, script names).
pub fn sha1_hex(body: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, body);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Splits a shebang line (`#!lua flags=no-writes`) from an EVAL script: its flags and the
/// offset of the code. No shebang: compatibility mode.
pub fn eval_shebang(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((ScriptFlags { compat: true, ..ScriptFlags::default() }, 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else { return Err("Invalid script shebang".into()) };
    let line = String::from_utf8_lossy(&body[..end]);
    let parts = split_args(&line).ok_or("Invalid engine in script shebang")?;
    if parts.is_empty() {
        return Err("Invalid engine in script shebang".into());
    }
    if parts[0] != "#!lua" {
        return Err(format!("Unexpected engine in script shebang: {}", parts[0]));
    }
    let mut flags = ScriptFlags::default();
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix("flags=") else { return Err(format!("Unknown lua shebang option: {part}")) };
        for flag in list.split(',').filter(|f| !f.is_empty()) {
            if !flags.set(flag, false) {
                return Err(format!("Unexpected flag in script shebang: {flag}"));
            }
        }
    }
    Ok((flags, end))
}

/// Redis's `sdssplitargs` for a shebang line: words separated by spaces, quotes allowed.
pub(crate) fn split_args(line: &str) -> Option<Vec<String>> {
    let words = crate::resp::split_args(line.as_bytes())?;
    Some(words.into_iter().map(|w| String::from_utf8_lossy(&w).into_owned()).collect())
}

/// True for the commands Redis 7.0 flags `ALLOW_BUSY`, which run while a script is busy:
/// SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN NOSAVE, the transaction and
/// connection bookkeeping (MULTI, DISCARD, WATCH, UNWATCH, AUTH, HELLO, RESET, QUIT) and
/// REPLCONF.
pub fn allowed_while_busy(name: &str, args: &[Bytes]) -> bool {
    let sub = || args.get(1).map(|a| a.to_ascii_lowercase()).unwrap_or_default();
    match name {
        "script" => sub() == b"kill",
        "function" => matches!(sub().as_slice(), b"kill" | b"stats"),
        "shutdown" => args[1..].iter().any(|a| a.eq_ignore_ascii_case(b"nosave")),
        "multi" | "discard" | "watch" | "unwatch" | "auth" | "hello" | "reset" | "quit" | "replconf" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `after_run` for `rounds` times 50 scripts.
    fn after_runs(vm: &Vm, rounds: usize) {
        for _ in 0..rounds * 50 {
            vm.after_run();
        }
    }

    #[test]
    fn the_collector_steps_once_scripts_left_enough_garbage_and_takes_it_all() {
        let vm = Vm::new(Arc::new(RunStatus::default()), &Shared::default()).unwrap();
        // Lua's own collector would start only at ten times the live heap: what is collected
        // here, `after_run` collected.
        // SAFETY: sets a collector parameter; touches no stack slot.
        unsafe {
            vm.lua
                .exec_raw::<()>((), |state| {
                    mlua::ffi::lua_gc(state, mlua::ffi::LUA_GCSETPAUSE, 1000);
                })
                .unwrap();
        }
        let garbage = |tables: usize| {
            vm.lua.load(format!("local t = {{}} for i = 1, {tables} do t[i] = {{i}} end")).exec().unwrap();
        };
        // A fresh VM holds more than the slack: its first rounds finish a cycle.
        after_runs(&vm, 20);
        let live = vm.collected_at.load(std::sync::atomic::Ordering::Relaxed);
        assert!(live > 0 && vm.lua.used_memory() < live + 1024, "a cycle ended at {live}");
        // Little garbage: left for later, no step taken.
        garbage(100);
        let held = vm.lua.used_memory();
        assert!(held > live + 4096 && held < live + GC_SLACK, "{held} against {live}");
        after_runs(&vm, 4);
        assert_eq!(vm.lua.used_memory(), held, "no collection below the slack");
        // More than the slack: the next rounds take it all.
        garbage(1000);
        assert!(vm.lua.used_memory() > live + GC_SLACK);
        after_runs(&vm, 20);
        assert!(vm.lua.used_memory() < live + 1024, "{} against {live}", vm.lua.used_memory());
    }
}
