//! EVAL's script cache: the scripts' sources, shared by every VM, and each VM's compiled
//! copies.
//!
//! SCRIPT LOAD and EVAL keep a script's source here by its SHA1 (what SCRIPT EXISTS, `INFO`'s
//! `number_of_cached_scripts` and the `CLIENT PAUSE WRITE` check read); a VM compiles a script
//! the first time it runs it, from the source, and keeps the function. The one VM and the spare
//! VMs (see [`super::lease`]) therefore run the same scripts, and `SCRIPT FLUSH` forgets them
//! everywhere at once: the sources go, the one VM starts afresh and the spares are replaced.

use std::collections::HashMap;
use std::sync::RwLock;

use bytes::Bytes;
use mlua::Function;

use super::{eval_shebang, sha1_hex, Script, ScriptFlags, Scripting, Vm};

/// A cached script's source.
#[derive(Debug)]
struct Source {
    /// The whole body, shebang included.
    body: Bytes,
    flags: ScriptFlags,
    /// Where the code starts (after the shebang line).
    start: usize,
}

/// The sources of the cached scripts, by SHA1 (lower-case hex).
#[derive(Debug, Default)]
pub(crate) struct Sources(RwLock<HashMap<String, Source>>);

impl Sources {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Source>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Source>> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    pub(crate) fn clear(&self) {
        self.write().clear();
    }
}

/// Why [`Scripting::compiled`] has no function for a script that may be cached.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotCompiled {
    /// No such script in the cache (`NOSCRIPT`).
    Unknown,
    /// The VM would have to compile a source longer than the limit it was given.
    TooLong,
}

impl Scripting {
    /// The flags of cached script `sha` (lower-case hex).
    pub(crate) fn script_flags(&self, sha: &str) -> Option<ScriptFlags> {
        self.sources.read().get(sha).map(|source| source.flags)
    }

    /// True if script `sha` (lower-case hex) is cached (SCRIPT EXISTS).
    pub(crate) fn script_exists(&self, sha: &str) -> bool {
        self.sources.read().contains_key(sha)
    }

    /// Caches `body` (SCRIPT LOAD, EVAL of a new script), compiled on `vm`; its SHA1, or the
    /// error text (without `ERR`).
    pub(crate) fn cache_script(&self, vm: &mut Vm, body: &Bytes) -> Result<String, String> {
        let sha = sha1_hex(body);
        if vm.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, start) = eval_shebang(body)?;
        compile(vm, &sha, body, flags, start)?;
        self.sources.write().entry(sha.clone()).or_insert(Source { body: body.clone(), flags, start });
        Ok(sha)
    }

    /// Script `sha`'s function on `vm`, compiled there first if it is not yet, but only if its
    /// source is at most `limit` bytes long.
    pub(crate) fn compiled(
        &self,
        vm: &mut Vm,
        sha: &str,
        limit: usize,
    ) -> Result<(Function, ScriptFlags), NotCompiled> {
        if let Some(script) = vm.scripts.get(sha) {
            return Ok((script.func.clone(), script.flags));
        }
        let (body, flags, start) = {
            let sources = self.sources.read();
            let source = sources.get(sha).ok_or(NotCompiled::Unknown)?;
            (source.body.clone(), source.flags, source.start)
        };
        if body.len() > limit {
            return Err(NotCompiled::TooLong);
        }
        if let Err(e) = compile(vm, sha, &body, flags, start) {
            // It compiled when it was cached: the same source on another VM of the same Lua.
            tracing::error!(target: "shale::scripting", script = sha, error = %e, "a cached script failed to compile on another VM");
            return Err(NotCompiled::Unknown);
        }
        vm.scripts.get(sha).map(|script| (script.func.clone(), script.flags)).ok_or(NotCompiled::Unknown)
    }
}

/// Compiles `body` (code from `start`) into `vm`'s scripts as `sha`.
fn compile(vm: &mut Vm, sha: &str, body: &[u8], flags: ScriptFlags, start: usize) -> Result<(), String> {
    let env: mlua::Table = vm.prim.get("eval_globals").map_err(|e| e.to_string())?;
    let func =
        vm.lua.load(&body[start..]).set_name("@user_script").set_environment(env).into_function().map_err(|e| {
            let msg = match e {
                mlua::Error::SyntaxError { message, .. } => message,
                other => other.to_string(),
            };
            format!("Error compiling script (new function): {msg}")
        })?;
    vm.scripts.insert(sha.to_string(), Script { flags, func });
    Ok(())
}
