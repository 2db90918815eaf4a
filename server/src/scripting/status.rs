//! What the running script is doing, as other clients see it: BUSY replies once it passed
//! `busy-reply-threshold`, SCRIPT KILL / FUNCTION KILL, FUNCTION STATS.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

/// The running script (one at a time; see the module docs of [`super`]).
#[derive(Debug, Default)]
pub struct RunStatus {
    running: AtomicBool,
    /// Past `busy-reply-threshold`: other clients get `-BUSY`.
    timed_out: AtomicBool,
    killed: AtomicBool,
    /// The script ran a write command (SCRIPT KILL is then refused).
    wrote: AtomicBool,
    /// An EVAL script rather than a function.
    eval: AtomicBool,
    threshold_ms: AtomicU64,
    /// A FUNCTION LOAD is running its library (its own time limit applies).
    loading: AtomicBool,
    /// The script runs on a connection's task: past [`TASK_LIMIT`] it is stopped (and run
    /// again on an executor thread), never busy.
    on_task: AtomicBool,
    /// …and it ran past that.
    overran: AtomicBool,
    current: Mutex<Option<Current>>,
}

#[derive(Debug, Clone)]
struct Current {
    name: String,
    command: Vec<Bytes>,
    client: u64,
    started: Instant,
}

/// Why SCRIPT KILL / FUNCTION KILL could not kill.
/// What the VM runs (see [`RunStatus::running`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Running {
    Nothing,
    /// An EVAL script.
    Eval,
    /// A function: its name, the command that called it, milliseconds so far.
    Function {
        name: String,
        command: Vec<Bytes>,
        ms: u64,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum KillRefused {
    /// Nothing runs.
    NotBusy,
    /// The script already wrote.
    Unkillable,
    /// SCRIPT KILL of a function, or FUNCTION KILL of a script.
    WrongKind,
}

/// How long a library's load may run (Redis's `LOAD_TIMEOUT_MS`).
const LOAD_TIMEOUT_MS: u128 = 500;

/// How long a script may run on a connection's task, where every other client of that thread
/// waits for it.
pub(crate) const TASK_LIMIT: std::time::Duration = std::time::Duration::from_millis(1);

impl RunStatus {
    /// Marks a script as started (on a connection's task if `on_task`).
    pub(crate) fn begin(
        &self,
        name: String,
        command: Vec<Bytes>,
        client: u64,
        (eval, on_task): (bool, bool),
        threshold_ms: u64,
    ) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Current { name, command, client, started: Instant::now() });
        self.eval.store(eval, Ordering::Relaxed);
        self.threshold_ms.store(threshold_ms, Ordering::Relaxed);
        self.wrote.store(false, Ordering::Relaxed);
        self.killed.store(false, Ordering::Relaxed);
        self.timed_out.store(false, Ordering::Relaxed);
        self.on_task.store(on_task, Ordering::Relaxed);
        self.overran.store(false, Ordering::Relaxed);
        self.running.store(true, Ordering::Release);
    }

    /// Marks the script as finished.
    pub(crate) fn end(&self) {
        self.running.store(false, Ordering::Release);
        self.timed_out.store(false, Ordering::Release);
        self.killed.store(false, Ordering::Relaxed);
        self.on_task.store(false, Ordering::Relaxed);
        self.overran.store(false, Ordering::Relaxed);
        self.current.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Marks a library load as started or finished.
    pub(crate) fn loading(&self, on: bool) {
        if on {
            *self.current.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Current { name: String::new(), command: Vec::new(), client: 0, started: Instant::now() });
        } else {
            self.current.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        self.loading.store(on, Ordering::Release);
    }

    /// Notes that the script wrote.
    pub(crate) fn wrote(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    /// True once the run was killed.
    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// True once [`RunStatus::overran`] found the script past [`TASK_LIMIT`] (no clock read).
    pub(crate) fn found_overran(&self) -> bool {
        self.overran.load(Ordering::Relaxed)
    }

    /// True if the script runs on a connection's task and has run past [`TASK_LIMIT`] (it
    /// stays so until it ends).
    pub(crate) fn overran(&self) -> bool {
        if self.overran.load(Ordering::Relaxed) {
            return true;
        }
        if !self.on_task.load(Ordering::Relaxed) || !self.running.load(Ordering::Acquire) {
            return false;
        }
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let over = current.as_ref().is_some_and(|c| c.started.elapsed() >= TASK_LIMIT);
        if over {
            self.overran.store(true, Ordering::Relaxed);
        }
        over
    }

    /// `Some(is_eval)` while a script runs past the busy threshold, for a client other than
    /// `client` (the gate answers `-BUSY`).
    pub fn busy_for(&self, client: u64) -> Option<bool> {
        if !self.timed_out.load(Ordering::Acquire) {
            return None;
        }
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match current.as_ref() {
            Some(c) if c.client != client => Some(self.eval.load(Ordering::Relaxed)),
            _ => None,
        }
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL. Only a script past `busy-reply-threshold` can be
    /// killed: Redis's single thread reads another client's SCRIPT KILL only once the script is
    /// that slow (before, the kill waits for the script to end and finds nothing running), so a
    /// script is never killed in its first moments, before it could even have written.
    pub fn kill(&self, eval: bool) -> Result<(), KillRefused> {
        if !self.running.load(Ordering::Acquire) || !self.timed_out.load(Ordering::Acquire) {
            return Err(KillRefused::NotBusy);
        }
        if self.wrote.load(Ordering::Relaxed) {
            return Err(KillRefused::Unkillable);
        }
        if self.eval.load(Ordering::Relaxed) != eval {
            return Err(KillRefused::WrongKind);
        }
        self.killed.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the running script whatever it did (the server is shutting down).
    pub fn abort(&self) {
        if self.running.load(Ordering::Acquire) {
            self.killed.store(true, Ordering::Release);
        }
    }

    /// What runs now, for FUNCTION STATS' `running_script`.
    pub fn running(&self) -> Running {
        if !self.running.load(Ordering::Acquire) {
            return Running::Nothing;
        }
        if self.eval.load(Ordering::Relaxed) {
            return Running::Eval;
        }
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match current.as_ref() {
            Some(c) => Running::Function {
                name: c.name.clone(),
                command: c.command.clone(),
                ms: c.started.elapsed().as_millis() as u64,
            },
            None => Running::Nothing,
        }
    }

    /// Called by the VM's count hook: Err to abort the script (killed, or a load that ran too
    /// long).
    fn check(&self) -> Result<(), &'static str> {
        if self.loading.load(Ordering::Acquire) {
            let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if current.as_ref().is_some_and(|c| c.started.elapsed().as_millis() > LOAD_TIMEOUT_MS) {
                return Err("FUNCTION LOAD timeout");
            }
            return Ok(());
        }
        if !self.running.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.killed.load(Ordering::Acquire) {
            return Err("Script killed by user with SCRIPT KILL...");
        }
        if self.on_task.load(Ordering::Relaxed) {
            // Never busy: stopped instead, to run again on an executor thread.
            return if self.overran() { Err("the script ran too long for a connection's task") } else { Ok(()) };
        }
        if !self.timed_out.load(Ordering::Relaxed) {
            let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = current.as_ref() {
                let elapsed = c.started.elapsed().as_millis() as u64;
                let threshold = self.threshold_ms.load(Ordering::Relaxed);
                if threshold > 0 && elapsed >= threshold {
                    let kill = if self.eval.load(Ordering::Relaxed) { "SCRIPT KILL" } else { "FUNCTION KILL" };
                    tracing::warn!(target: "shale::scripting", script = %c.name, elapsed_ms = elapsed,
                        "Slow script detected: still in execution after {elapsed} milliseconds. You can try killing the script using the {kill} command.");
                    self.timed_out.store(true, Ordering::Release);
                }
            }
        }
        Ok(())
    }
}

/// Instructions between two checks of a running script.
const CHECK_EVERY: u32 = 10_000;

/// Installs the count hook that checks the running script every 10,000 instructions.
///
/// Once the script is killed (or overran its time on a connection's task), the hook checks at
/// every instruction and line, so the error is raised again right after any `pcall` that
/// caught it (as Redis's line hook does); the next check after the script ended goes back to
/// the normal pace.
pub(super) fn install_hook(lua: &mlua::Lua, status: Arc<RunStatus>) -> mlua::Result<()> {
    set_hook(lua, status, false)
}

fn set_hook(lua: &mlua::Lua, status: Arc<RunStatus>, eager: bool) -> mlua::Result<()> {
    let triggers = if eager {
        mlua::HookTriggers::new().every_nth_instruction(1).every_line()
    } else {
        mlua::HookTriggers::new().every_nth_instruction(CHECK_EVERY)
    };
    let own = Arc::clone(&status);
    lua.set_hook(triggers, move |lua, _| match own.check() {
        Ok(()) => {
            if eager && !own.killed() && !own.overran() {
                set_hook(lua, Arc::clone(&own), false)?;
            }
            Ok(mlua::VmState::Continue)
        }
        Err(why) => {
            if !eager && (own.killed() || own.overran()) {
                set_hook(lua, Arc::clone(&own), true)?;
            }
            Err(mlua::Error::runtime(why))
        }
    })
}
