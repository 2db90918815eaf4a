//! Running a script or function for a client: the checks Redis makes before it starts, its
//! keys' stripes, its commands through the script's own gate, and one engine batch at the end.
//!
//! **Locks.** The declared keys' stripes are locked (waiting, in stripe order) before the VM is
//! taken; whoever holds the VM only ever *tries* stripes, so a client holding stripes while it
//! waits for the VM (an EXEC that runs EVAL) can never deadlock with the script. Each command
//! a script calls has its keys' stripes tried first; if one is busy, the run is abandoned —
//! its writes were only buffered, its keyspace events and served-client signals are dropped —
//! and the script runs again with every key seen so far locked up front (after two such
//! retries, or for FLUSHALL/FLUSHDB/SWAPDB, every stripe). A script that already published a
//! message, or one run inside EXEC, cannot run again: it waits for the stripe instead, and
//! fails with an error (nothing written) if it stays busy for a second.
//!
//! **On a connection's task.** An EVAL script may run inside a write group on its
//! connection's task (`exec::queued`), which locked its declared keys and knows their counts;
//! it runs on a spare VM and in memory-only mode, and is *void* — its writes and events rolled
//! back, its commands' statistics (kept aside in [`Session::observations`] until it ends)
//! dropped, its reply discarded — as soon as it would need what the task cannot give: a VM
//! (all spares held), a key it did not declare, a command that may not run there
//! (`exec::queued::script_may_call`: no pub/sub, nothing that walks or waits), a read from
//! disk, or more than [`super::status::TASK_LIMIT`] of time (the count hook stops it, a
//! `pcall` cannot hold it). A void script runs again from the start on an executor thread,
//! as above; only what that run does is seen or counted.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::{Function, Lua, Table, Value};

use super::api::error_table;
use super::convert::{lua_to_reply, reply_to_lua, string_array};
use super::noscript::no_script;
use super::{ScriptFlags, Vm};
use crate::commands::flag;
use crate::commands::{engine_error, lookup, queued_keys};
use crate::exec::Session;
use crate::resp::{Protocol, Reply};
use crate::storage::{LockGuard, Storage};

/// What to run: a compiled script or function, with its name for errors and FUNCTION STATS.
#[derive(Debug)]
pub(crate) struct Job<'a> {
    /// The compiled body.
    pub func: Function,
    /// The script's SHA1 for EVAL, the function's name for FCALL.
    pub name: String,
    /// Its flags.
    pub flags: ScriptFlags,
    /// EVAL (true) or FCALL.
    pub eval: bool,
    /// EVAL_RO, EVALSHA_RO, FCALL_RO.
    pub ro: bool,
    /// KEYS.
    pub keys: &'a [Bytes],
    /// ARGV.
    pub args: &'a [Bytes],
    /// The calling command, for FUNCTION STATS.
    pub command: &'a [Bytes],
}

/// Redis's checks before a script starts (`scriptPrepareForRun`); `Err` is the reply.
fn prepare(s: &Session, job: &Job<'_>) -> Result<(), Reply> {
    let repl = &s.state.replication;
    let stale = repl.is_replica()
        && repl.link_status().0 != crate::replication::LinkState::Connected
        && s.state.config().get("replica-serve-stale-data") == Some("no");
    if job.flags.compat {
        if stale {
            return Err(Reply::error(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            ));
        }
        return Ok(());
    }
    if stale && !job.flags.allow_stale {
        return Err(Reply::error("MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to 'no' and 'allow-stale' flag is not set on the script."));
    }
    // A script declaring flags may write unless `no-writes`: Redis treats it as `denyoom`.
    if !job.flags.no_writes && !job.flags.allow_oom && s.state.out_of_memory() {
        return Err(Reply::error(crate::exec::gate::OOM));
    }
    if !job.flags.no_writes {
        if repl.is_replica() {
            return Err(Reply::error("READONLY Can not run script with write flag on readonly replica"));
        }
        if job.ro {
            return Err(Reply::error("ERR Can not execute a script with write flag using *_ro command."));
        }
        if repl.too_few_replicas() {
            return Err(Reply::error("NOREPLICAS Not enough good replicas to write."));
        }
    }
    Ok(())
}

/// A command table entry.
type Spec = &'static crate::commands::CommandSpec;

/// The field Redis sets on error tables of errors already counted in the error statistics.
const IGNORE_ERROR_STATS: &str = "ignore_error_stats_update";

/// How a command of the script that finds a stripe busy proceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnBusy {
    /// Abandon the run and run the script again with more locked up front.
    Retry,
    /// Wait for the stripe (a run that cannot be repeated).
    Wait,
    /// On a connection's task: any key but the declared ones (locked and counted up front by
    /// the task's write group), any command that may not run there, a read that needs the
    /// disk or a run past [`super::status::TASK_LIMIT`] makes the script void — nothing it
    /// did is kept or counted — and it runs again on an executor thread.
    Void,
}

/// One run of a script: what its commands need of the session and the locks.
struct Run<'s, 'g> {
    s: &'s mut Session,
    storage: &'g Storage,
    /// Stripes taken after the start.
    extra: Vec<LockGuard<'g>>,
    /// Keys those stripes were taken for (locked up front if the script runs again).
    touched: Vec<(u32, Bytes)>,
    read_only: bool,
    resp3: Arc<std::sync::atomic::AtomicBool>,
    status: Arc<super::RunStatus>,
    /// A write ran: later writes skip the pre-write checks (the script cannot stop halfway).
    dirty: bool,
    /// Over `maxmemory` when the script started (and not `allow-oom`).
    oom_at_start: bool,
    /// The error the last command returned was already counted in the error statistics.
    counted_error: bool,
    on_busy: OnBusy,
    /// The declared keys, the only ones a run on a connection's task may touch.
    declared: Vec<(u32, Bytes)>,
    /// Set when the run must be abandoned and repeated (see [`OnBusy::Retry`], [`OnBusy::Void`]).
    conflict: bool,
    /// …with every stripe locked.
    needs_everything: bool,
    /// Commands called (on a connection's task, where their time is checked every fourth).
    calls: u32,
}

/// Runs `job` for `s` on `vm`, which the caller took to find the job (or kept from the
/// script before). The declared keys' stripes are only *tried* while the VM is held; if one is
/// busy the VM goes back, the stripes are waited for, and the VM is taken again after them.
/// When the script ends the VM goes back, or stays in [`Session::script_vm`] if the next
/// request is a script too ([`Session::script_next`]).
pub(crate) fn run(s: &mut Session, scripting: &super::Scripting, job: Job<'_>, vm: super::VmGuard) -> Reply {
    if let Err(refused) = prepare(s, &job) {
        return refused;
    }
    let mut held = Some(vm);
    let state = Arc::clone(&s.state);
    let storage = &state.storage;
    let read_only = job.ro || (!job.flags.compat && job.flags.no_writes);
    // `lua-time-limit` is its alias, as in Redis 7.
    let threshold = state.config().busy_reply_threshold;
    // On a connection's task (the caller's write group runs in memory-only mode): see
    // `OnBusy::Void`.
    let task = s.exec.memory_only();
    let (caller_db, caller_protocol, caller_in_exec, caller_in_script) = (s.db, s.protocol, s.in_exec, s.in_script);
    // Inside EXEC (or a write group) the script joins the running transaction.
    let nested = s.exec.in_transaction();
    let oom_at_start = !job.flags.allow_oom && state.out_of_memory();
    // The keys to lock: none inside a transaction, which holds its own (and never runs the
    // script again, see `conflict`).
    let mut wanted: Vec<(u32, Bytes)> =
        if nested { Vec::new() } else { job.keys.iter().map(|k| (s.db, k.clone())).collect() };
    let mut everything = false;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let keys = || wanted.iter().map(|(db, k)| (*db, &k[..]));
        let guard = if nested {
            None
        } else if let Some(guard) =
            held.as_ref().filter(|_| !everything).and_then(|_| storage.try_lock_unheld(&s.exec, keys()))
        {
            Some(guard)
        } else {
            // Never wait for a stripe while holding the VM: its holder may be waiting for it.
            held = None;
            Some(if everything { storage.lock_all(&s.exec) } else { storage.lock_pairs(&s.exec, keys()) })
        };
        if let Some(guard) = &guard {
            storage.hold_for_exec(&s.exec, guard);
            s.exec.begin_transaction();
        }
        s.in_exec = true;
        s.in_script = true;
        // Lookups judge expiry by the time the script started, as in Redis 7.0.
        s.exec.freeze_time(crate::storage::now_ms());
        let vm = held.take().unwrap_or_else(|| scripting.vm());
        vm.resp3.store(false, std::sync::atomic::Ordering::Relaxed);
        let status = Arc::clone(&vm.status);
        // What FUNCTION STATS and BUSY replies show; a run on a connection's task (on a spare's
        // own status) is never shown.
        let (shown, command) =
            if task { (String::new(), Vec::new()) } else { (job.name.clone(), job.command.to_vec()) };
        status.begin(shown, command, s.id, (job.eval, task), threshold);
        if task {
            s.observations = Some(Vec::new());
        }
        let mut run = Run {
            s: &mut *s,
            storage,
            extra: Vec::new(),
            touched: Vec::new(),
            read_only,
            resp3: Arc::clone(&vm.resp3),
            status: Arc::clone(&status),
            dirty: false,
            oom_at_start,
            counted_error: false,
            on_busy: match (task, nested) {
                (true, _) => OnBusy::Void,
                (false, true) => OnBusy::Wait,
                (false, false) => OnBusy::Retry,
            },
            declared: if task { job.keys.iter().map(|k| (caller_db, k.clone())).collect() } else { Vec::new() },
            conflict: false,
            needs_everything: false,
            calls: 0,
        };
        let outcome = invoke(&vm, &mut run, &job);
        // An error table from a command (a raised `redis.call` error, or a `redis.pcall` result
        // returned) was counted when the command failed.
        let counted = match &outcome {
            Ok((_, Value::Table(t))) => t.raw_get::<bool>(IGNORE_ERROR_STATS).unwrap_or(false),
            _ => false,
        };
        let reply = match outcome {
            Ok((true, value)) => lua_to_reply(&value, vm.resp3.load(std::sync::atomic::Ordering::Relaxed)),
            Ok((false, error)) => super::convert::error_reply(&error, &job.name, status.killed()),
            Err(e) => Reply::error(format!("ERR Error running script {}, {e}", job.name)),
        };
        run.s.error_counted = counted && matches!(reply, Reply::Error(_));
        // A script that ended is not stopped for its time: only one the count hook or a call
        // found past the limit (and so failed) is void.
        let void = task && (run.conflict || run.s.exec.voided() || status.found_overran());
        status.end();
        vm.after_run();
        let Run { extra, touched, conflict, needs_everything, .. } = run;
        // Kept for the next script of a pipeline (through the commit below), else returned now.
        if s.script_next && !conflict && !vm.is_spare() {
            s.script_vm = Some(vm);
        } else {
            drop(vm);
        }
        s.exec.freeze_time(0);
        s.db = caller_db;
        s.protocol = caller_protocol;
        s.in_exec = caller_in_exec;
        s.in_script = caller_in_script;
        if task {
            let observations = s.observations.take().unwrap_or_default();
            if void {
                s.exec.void();
                s.error_counted = false;
                return Reply::Null;
            }
            crate::exec::observe::replay(s, observations);
        }
        if nested {
            return reply;
        }
        if conflict {
            // Nothing of this run is visible: drop its buffer, events and signals.
            drop(s.exec.finish_transaction());
            drop(s.exec.take_events());
            s.signals.clear();
            storage.end_exec(&s.exec);
            drop(extra);
            drop(guard);
            wanted.extend(touched);
            everything |= needs_everything || attempt >= 3;
            tracing::debug!(target: "shale::scripting", script = %job.name, attempt, "a key the script did not declare was busy; running it again with its keys locked first");
            continue;
        }
        let batch = s.exec.finish_transaction();
        let committed = if batch.is_empty() { Ok(()) } else { storage.commit_from(batch, s.id) };
        storage.end_exec(&s.exec);
        drop(extra);
        drop(guard);
        let events = s.exec.take_events();
        if committed.is_ok() {
            crate::services::notifications::publish(&state, events);
        }
        crate::exec::serve_signals(s);
        return match committed {
            Ok(()) => reply,
            Err(e) => engine_error(e),
        };
    }
}

/// The run a VM's `redis.call` and `redis.acl_check_cmd` serve: set by [`invoke`] for the
/// length of one call of a script, null otherwise (a call then answers that it is outside a
/// script invocation). The two Lua functions are made once per VM ([`install`]) rather than
/// once per script, which took ~4 % of the server's CPU per short script.
///
/// It also carries the arguments `redis.call` and `redis.pcall` read off the Lua stack (see
/// [`super::call_api`]) to the function that serves the call.
#[derive(Debug, Default)]
pub(crate) struct CurrentRun(std::sync::atomic::AtomicPtr<()>, std::sync::Mutex<Option<Args>>);

/// A call's arguments, or why they are not a command.
pub(crate) type Args = Result<Vec<Bytes>, &'static str>;

/// What a [`CurrentRun`] points at while a script runs.
type RunCell<'r, 's, 'g> = RefCell<&'r mut Run<'s, 'g>>;

impl CurrentRun {
    /// Calls `f` with the run in progress, if there is one.
    fn with<T>(&self, f: impl FnOnce(&RunCell<'_, '_, '_>) -> T) -> Option<T> {
        let p = self.0.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: a non-null pointer is the `RunCell` on `invoke`'s stack, which clears it
        // (also on a panic) before that cell goes; the script that calls back runs inside
        // `invoke`, on its thread. Nothing borrowed from the run outlives `f`.
        (!p.is_null()).then(|| f(unsafe { &*(p as *const RunCell<'_, '_, '_>) }))
    }

    /// Hands the arguments of a `redis.call` to the function that serves it.
    pub(crate) fn put_args(&self, args: Args) {
        *self.1.lock().unwrap_or_else(|e| e.into_inner()) = Some(args);
    }

    fn take_args(&self) -> Args {
        let args = self.1.lock().unwrap_or_else(|e| e.into_inner()).take();
        args.unwrap_or(Err("Please specify at least one argument for this redis lib call"))
    }
}

/// Puts the VM's `prim.call` and `prim.acl_check` in place for good: they serve whatever run
/// `current` points at.
pub(super) fn install(lua: &Lua, prim: &Table) -> mlua::Result<Arc<CurrentRun>> {
    let current = Arc::new(CurrentRun::default());
    let functions: [(&str, &'static str, Serve); 2] = [
        ("call", "ERR redis.call/pcall can only be called inside a script invocation", |cell, lua, argv| {
            cell.borrow_mut().call(lua, argv)
        }),
        ("acl_check", "ERR redis.acl_check_cmd can only be called inside a script invocation", |cell, lua, argv| {
            cell.borrow().acl_check(lua, argv)
        }),
    ];
    for (name, outside, serve) in functions {
        let current = Arc::clone(&current);
        // Arguments come as a count and a table (redis.acl_check_cmd), or, with
        // no table, from `redis.call` or `redis.pcall`, which read them off the stack into `current`.
        let f = lua.create_function(move |lua, (n, args): (usize, Option<Table>)| {
            let argv = match args {
                Some(args) => super::convert::script_args(lua, n, &args)?,
                None => current.take_args(),
            };
            current
                .with(|cell| serve(cell, lua, argv))
                .unwrap_or_else(|| Ok((false, Value::Table(error_table(lua, outside)?))))
        })?;
        prim.raw_set(name, f)?;
    }
    Ok(current)
}

/// What one of [`install`]'s functions does for the run in progress, given its arguments.
type Serve = fn(&RunCell<'_, '_, '_>, &Lua, Args) -> mlua::Result<(bool, Value)>;

/// Calls the job's function with `redis.call` bound to `run`.
fn invoke(vm: &Vm, run: &mut Run<'_, '_>, job: &Job<'_>) -> mlua::Result<(bool, Value)> {
    /// Points `current` back at what it pointed at before, when the call ends or unwinds.
    struct Bound<'c>(&'c CurrentRun, *mut ());
    impl Drop for Bound<'_> {
        fn drop(&mut self) {
            self.0 .0.store(self.1, std::sync::atomic::Ordering::Release);
        }
    }
    let lua = &vm.lua;
    let cell: RunCell<'_, '_, '_> = RefCell::new(run);
    let before = vm.current.0.swap(&cell as *const RunCell<'_, '_, '_> as *mut (), std::sync::atomic::Ordering::AcqRel);
    let _bound = Bound(&vm.current, before);
    let (keys, args) = (string_array(lua, job.keys)?, string_array(lua, job.args)?);
    vm.run_fn.call::<(bool, Value)>((job.func.clone(), keys, args, job.eval))
}

impl Run<'_, '_> {
    /// `redis.call`/`redis.pcall`: (true, reply) or (false, error table).
    fn call(&mut self, lua: &Lua, argv: Args) -> mlua::Result<(bool, Value)> {
        if self.conflict {
            return Err(mlua::Error::runtime("the script runs again"));
        }
        let argv = match argv {
            Ok(argv) => argv,
            Err(why) => return Ok((false, Value::Table(error_table(lua, why)?))),
        };
        self.counted_error = false;
        let reply = self.execute(&argv);
        if self.conflict {
            return Err(mlua::Error::runtime("the script runs again"));
        }
        let resp3 = self.resp3.load(std::sync::atomic::Ordering::Relaxed);
        match reply {
            Reply::Error(e) => {
                let t = error_table(lua, &format!("-{e}"))?;
                // Counted where it happened: the script's own error reply, if it is this one,
                // counts only as the script's failure (Redis's `ignore_error_stats_update`).
                if self.counted_error {
                    t.set(IGNORE_ERROR_STATS, true)?;
                }
                Ok((false, Value::Table(t)))
            }
            reply => Ok((true, reply_to_lua(lua, reply, resp3)?)),
        }
    }

    /// Redis's checks before a command of the script runs; a refusal names the command if
    /// it is known.
    fn admit_call(&mut self, argv: &[Bytes]) -> Result<Spec, (Option<Spec>, Reply)> {
        let plain = |msg: &str| Reply::Error(super::api::error_text(msg));
        let not_allowed = "This Redis command is not allowed from script";
        let Some(spec) = lookup(&argv[0]) else {
            let why = if no_script(argv) { not_allowed } else { "Unknown Redis command called from script" };
            return Err((None, plain(why)));
        };
        let refuse = |reply: Reply| Err((Some(spec), reply));
        // A command's own flag says it for itself; a container's subcommands are looked up.
        let subcommands = !spec.known().acl.subcommands.is_empty();
        if spec.has(flag::NOSCRIPT) || (subcommands && no_script(argv)) {
            return refuse(plain(not_allowed));
        }
        let n = argv.len() as i32;
        if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
            return refuse(plain("Wrong number of args calling Redis command from script"));
        }
        if let Err(Reply::Error(denied)) = crate::commands::acl::permit(self.s, spec, argv) {
            let what = if denied.contains("keys") {
                "can't access at least one of the keys mentioned in the command"
            } else if denied.contains("channels") {
                "can't publish to the channel mentioned in the command"
            } else {
                "can't run this command or subcommand"
            };
            return refuse(plain(&format!("The user executing the script {what}")));
        }
        let write = spec.has(flag::WRITE);
        // Redis's "may replicate" commands (PUBLISH, PFCOUNT) count as writes here, so a
        // read-only script can run during CLIENT PAUSE WRITE.
        if self.read_only && (write || spec.has(flag::MAY_REPLICATE)) {
            return refuse(plain("Write commands are not allowed from read-only scripts."));
        }
        if write && !self.dirty {
            if let Some(Reply::Error(refused)) = crate::commands::replication::refusal(self.s, spec) {
                return refuse(Reply::Error(refused));
            }
        }
        // Redis's `scriptVerifyOOM`: over `maxmemory` when the script started, its first write
        // that may grow memory is refused (a later one cannot be: the script cannot stop halfway).
        if self.oom_at_start && !self.dirty && spec.has(flag::DENYOOM) {
            return refuse(Reply::error(crate::exec::gate::OOM));
        }
        Ok(spec)
    }

    /// Runs one command of the script (Redis's `scriptCall` checks, then the command).
    fn execute(&mut self, argv: &[Bytes]) -> Reply {
        let spec = match self.admit_call(argv) {
            Ok(spec) => spec,
            Err((spec, refused)) => {
                // Counted here, as Redis's `scriptCall` counts a refusal: the command (if there
                // is one) as rejected, the error once.
                if let Reply::Error(why) = &refused {
                    let id = spec.map(|c| crate::exec::observe::stats_id(c, argv));
                    crate::exec::observe::rejected(self.s, id, why);
                }
                self.counted_error = true;
                return refused;
            }
        };
        let write = spec.has(flag::WRITE);
        if self.on_busy == OnBusy::Void {
            // Its keys are then held already (the task's group locked the declared ones).
            // The clock is read every fourth call: commands on the task are in memory, so
            // three of them take microseconds against the limit's millisecond.
            self.calls += 1;
            let overran = self.status.found_overran() || (self.calls.is_multiple_of(4) && self.status.overran());
            if overran || !crate::exec::queued::script_may_call(spec, argv) || !self.declares(spec, argv) {
                self.conflict = true;
                return Reply::Null;
            }
        } else if let Err(busy) = self.lock_keys(spec.name, argv) {
            return busy;
        }
        if self.conflict {
            return Reply::Null;
        }
        if write {
            self.dirty = true;
            self.status.wrote();
        }
        if matches!(spec.name, "publish" | "spublish") {
            // A message cannot be taken back: the script may no longer run again.
            self.on_busy = OnBusy::Wait;
        }
        let resp3 = self.resp3.load(std::sync::atomic::Ordering::Relaxed);
        self.s.protocol = if resp3 { Protocol::Resp3 } else { Protocol::Resp2 };
        let reply = crate::exec::run_command(self.s, spec, argv);
        if self.s.exec.voided() {
            // It needed the disk (on a connection's task): the script runs again elsewhere.
            self.conflict = true;
            return Reply::Null;
        }
        // The command's statistics counted its error.
        self.counted_error = matches!(reply, Reply::Error(_));
        reply
    }

    /// True if every key `argv` (a call of `spec`) names is one the script declared (see
    /// [`OnBusy::Void`]): as `queued_keys` finds them, every argument of a command that
    /// locates its keys by a count.
    fn declares(&self, spec: Spec, argv: &[Bytes]) -> bool {
        let db = self.s.db;
        let declared = |key: &Bytes| self.declared.iter().any(|(d, k)| *d == db && k == key);
        if spec.first_key == 0 {
            argv[1..].iter().all(declared)
        } else {
            spec.key_positions(argv.len()).all(|i| declared(&argv[i]))
        }
    }

    /// Takes the stripes of the keys `argv` names that the run does not hold yet.
    fn lock_keys(&mut self, name: &str, argv: &[Bytes]) -> Result<(), Reply> {
        let cx = &self.s.exec;
        if matches!(name, "flushdb" | "flushall" | "swapdb") {
            if self.storage.holds_all(cx) {
                return Ok(());
            }
            if self.on_busy == OnBusy::Retry {
                self.conflict = true;
                self.needs_everything = true;
                return Ok(());
            }
            return Err(Reply::error(format!(
                "ERR {} cannot run in this script: it needs every key locked (declare it in a script of its own)",
                name.to_ascii_uppercase()
            )));
        }
        let keys = queued_keys(self.s.db, std::slice::from_ref(&argv.to_vec()));
        if keys.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        loop {
            if let Some(guard) = self.storage.try_lock_unheld(cx, keys.iter().map(|(db, k)| (*db, &k[..]))) {
                self.extra.push(guard);
                self.touched.extend(keys);
                return Ok(());
            }
            if self.on_busy == OnBusy::Retry {
                self.conflict = true;
                self.touched.extend(keys);
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(1) {
                return Err(Reply::error(
                    "ERR a key this script did not declare stayed locked by another client; the script's writes were not applied",
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// `redis.acl_check_cmd(command, args…)`.
    fn acl_check(&self, lua: &Lua, argv: Args) -> mlua::Result<(bool, Value)> {
        let argv = match argv {
            Ok(argv) => argv,
            Err(why) => return Ok((false, Value::Table(error_table(lua, why)?))),
        };
        let Some(spec) = lookup(&argv[0]) else {
            return Ok((false, Value::Table(error_table(lua, "Invalid command passed to redis.acl_check_cmd()")?)));
        };
        let allowed = self.s.user.unrestricted() || crate::acl::check::check(&self.s.user.rules(), spec, &argv).is_ok();
        Ok((true, Value::Boolean(allowed)))
    }
}
