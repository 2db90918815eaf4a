//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT, FCALL, FCALL_RO, FUNCTION — over
//! [`crate::scripting`].

use bytes::Bytes;

use super::introspection::{help, unknown_subcommand};
use super::{parse_i64, spec, CommandSpec, Session, NO_KEYS};
use crate::resp::Reply;
use crate::scripting::call::{run, Job};
use crate::scripting::functions::RestorePolicy;
use crate::scripting::status::{KillRefused, Running};
use crate::scripting::NotCompiled;

/// Key positions of EVAL and FCALL: a count at argument 2, then the keys (locked by EXEC and
/// write groups as "every argument").
const MOVABLE: (i32, i32, i32) = (0, 0, 0);

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("eval", -3, &["noscript", "skip_monitor", "may_replicate", "stale"], MOVABLE, eval),
    spec("evalsha", -3, &["noscript", "skip_monitor", "may_replicate", "stale"], MOVABLE, eval),
    spec("eval_ro", -3, &["noscript", "skip_monitor", "readonly", "stale"], MOVABLE, eval),
    spec("evalsha_ro", -3, &["noscript", "skip_monitor", "readonly", "stale"], MOVABLE, eval),
    spec("fcall", -3, &["noscript", "skip_monitor", "may_replicate", "stale"], MOVABLE, fcall),
    spec("fcall_ro", -3, &["noscript", "skip_monitor", "readonly", "stale"], MOVABLE, fcall),
    spec("script", -2, &["noscript"], NO_KEYS, script),
    spec("function", -2, &["noscript"], NO_KEYS, function),
];

/// The keys and arguments after EVAL/FCALL's key count; `Err` is the reply.
fn split_keys<'a>(args: &'a [Bytes], count_error: &str) -> Result<(&'a [Bytes], &'a [Bytes]), Reply> {
    let Some(n) = parse_i64(&args[2]) else { return Err(Reply::error(count_error.to_string())) };
    if n > (args.len() - 3) as i64 {
        return Err(Reply::error("ERR Number of keys can't be greater than number of args"));
    }
    if n < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    let n = n as usize;
    Ok((&args[3..3 + n], &args[3 + n..]))
}

/// Scripts' commands go to MONITOR after the script's own line (EVAL and FCALL are flagged
/// `skip_monitor` so the usual feed, after the command, leaves them out).
fn feed_monitors(s: &Session, args: &[Bytes]) {
    if s.state.pubsub.has_monitors() {
        if let Some(spec) = super::lookup(&args[0]) {
            super::introspection::feed_monitors(s, spec, args);
        }
    }
}

/// Most bytes of script source a VM compiles on a connection's task (longer ones compile on
/// an executor thread, once per VM).
const TASK_COMPILE_LIMIT: usize = 16 * 1024;

fn eval(s: &mut Session, args: &[Bytes]) -> Reply {
    feed_monitors(s, args);
    let name = &args[0][..];
    let by_sha = name.len() >= 7 && name[..7].eq_ignore_ascii_case(b"evalsha");
    let ro = name.len() >= 3 && name[name.len() - 3..].eq_ignore_ascii_case(b"_ro");
    let (keys, rest) = match split_keys(args, "ERR value is not an integer or out of range") {
        Ok(split) => split,
        Err(reply) => return reply,
    };
    if by_sha && args[1].len() != 40 {
        return Reply::error("NOSCRIPT No matching script. Please use EVAL.");
    }
    let state = std::sync::Arc::clone(&s.state);
    let scripting = &state.scripting;
    // On a connection's task (memory-only mode, see `scripting::call`) the script runs on a
    // spare VM, never waiting for one: without one it is void and runs on an executor.
    let task = s.exec.memory_only();
    let void = |s: &mut Session| {
        s.exec.void();
        Reply::Null
    };
    let vm = if task { scripting.spare() } else { Some(s.take_script_vm()) };
    let Some(mut vm) = vm else { return void(s) };
    let limit = if task { TASK_COMPILE_LIMIT } else { usize::MAX };
    let sha = if by_sha {
        String::from_utf8_lossy(&args[1]).to_ascii_lowercase()
    } else if args[1].len() > limit {
        return void(s);
    } else {
        match scripting.cache_script(&mut vm, &args[1]) {
            Ok(sha) => sha,
            Err(e) => return Reply::error(format!("ERR {e}")),
        }
    };
    let (func, flags) = match scripting.compiled(&mut vm, &sha, limit) {
        Ok(found) => found,
        Err(NotCompiled::Unknown) => return Reply::error("NOSCRIPT No matching script. Please use EVAL."),
        Err(NotCompiled::TooLong) => return void(s),
    };
    let job = Job { func, name: sha, flags, eval: true, ro, keys, args: rest, command: args };
    run(s, scripting, job, vm)
}

fn fcall(s: &mut Session, args: &[Bytes]) -> Reply {
    feed_monitors(s, args);
    let ro = args[0].eq_ignore_ascii_case(b"fcall_ro");
    let state = std::sync::Arc::clone(&s.state);
    let scripting = &state.scripting;
    let name = String::from_utf8_lossy(&args[1]).into_owned();
    let vm = s.take_script_vm();
    let found = vm.libraries.function(&name).map(|f| (f.func.clone(), f.flags));
    let Some((func, flags)) = found else { return Reply::error("ERR Function not found") };
    let (keys, rest) = match split_keys(args, "ERR Bad number of keys provided") {
        Ok(split) => split,
        Err(reply) => return reply,
    };
    run(s, scripting, Job { func, name, flags, eval: false, ro, keys, args: rest, command: args }, vm)
}

fn kill_reply(result: Result<(), KillRefused>, eval: bool) -> Reply {
    match result {
        Ok(()) => Reply::ok(),
        Err(KillRefused::NotBusy) => Reply::error("NOTBUSY No scripts in execution right now."),
        Err(KillRefused::Unkillable) => Reply::error("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."),
        Err(KillRefused::WrongKind) if eval => {
            Reply::error("BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.")
        }
        Err(KillRefused::WrongKind) => {
            Reply::error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
        }
    }
}

fn script(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let scripting = &s.state.scripting;
    match (sub.as_str(), args.len()) {
        ("help", 2) => help(&[
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DEBUG (YES|SYNC|NO)",
            "    Set the debug mode for subsequent scripts executed.",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache. Very dangerous on replicas.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the scripts cache.",
            "    * SYNC: Synchronously flush the scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "HELP",
            "    Prints this help.",
        ]),
        ("flush", 2) => {
            scripting.flush_scripts();
            Reply::ok()
        }
        ("flush", 3) if args[2].eq_ignore_ascii_case(b"sync") || args[2].eq_ignore_ascii_case(b"async") => {
            scripting.flush_scripts();
            Reply::ok()
        }
        ("flush", _) => Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        ("exists", n) if n >= 3 => Reply::Array(
            args[2..]
                .iter()
                .map(|sha| {
                    Reply::Integer(scripting.script_exists(&String::from_utf8_lossy(sha).to_ascii_lowercase()) as i64)
                })
                .collect(),
        ),
        ("load", 3) => match scripting.cache_script(&mut scripting.vm(), &args[2]) {
            Ok(sha) => Reply::bulk(sha),
            Err(e) => Reply::error(format!("ERR {e}")),
        },
        ("kill", 2) => kill_reply(scripting.status.kill(true), true),
        ("debug", 3) => {
            Reply::error("ERR SCRIPT DEBUG is not supported by this server (the Lua debugger is not built in)")
        }
        _ => unknown_subcommand("script", &args[1]),
    }
}

/// Saves every library in the engine (see [`crate::scripting::functions`]).
fn persist(s: &Session, payload: Vec<u8>) -> Result<(), Reply> {
    let mut batch = lsm::WriteBatch::new();
    batch.put(crate::scripting::functions::RECORD, &payload);
    s.state.storage.engine().write(batch, &lsm::WriteOptions::default()).map_err(super::engine_error)
}

fn function(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let state = std::sync::Arc::clone(&s.state);
    let scripting = &state.scripting;
    let status = &scripting.status;
    match sub.as_str() {
        "help" if args.len() == 2 => help(&[
            "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "LOAD [REPLACE] <FUNCTION CODE>",
            "    Create a new library with the given library name and code.",
            "DELETE <LIBRARY NAME>",
            "    Delete the given library.",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "    Return general information on all the libraries:",
            "    * Library name",
            "    * The engine used to run the Library",
            "    * Library description",
            "    * Functions list",
            "    * Library code (if WITHCODE is given)",
            "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
            "STATS",
            "    Return information about the current function running:",
            "    * Function name",
            "    * Command used to run the function",
            "    * Duration in MS that the function is running",
            "    If no function is running, return nil",
            "    In addition, returns a list of available engines.",
            "KILL",
            "    Kill the current running function.",
            "FLUSH [ASYNC|SYNC]",
            "    Delete all the libraries.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the libraries.",
            "    * SYNC: Synchronously flush the libraries.",
            "DUMP",
            "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
            "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
            "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
            "    control how to handle existing libraries (default APPEND):",
            "    * FLUSH: delete all existing libraries.",
            "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
            "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
            "      libraries with the new libraries (notice that even on this option there is a chance of failure",
            "      in case of functions name collision with another library).",
            "HELP",
            "    Prints this help.",
        ]),
        "load" if args.len() >= 3 => {
            let mut replace = false;
            let mut i = 2;
            while i < args.len() - 1 {
                if args[i].eq_ignore_ascii_case(b"replace") {
                    replace = true;
                    i += 1;
                    continue;
                }
                return Reply::error(format!("ERR Unknown option given: {}", String::from_utf8_lossy(&args[i])));
            }
            let mut vm = scripting.vm();
            match vm.load_library(args[args.len() - 1].clone(), replace, status) {
                Ok(name) => match persist(s, vm.libraries.dump()) {
                    Ok(()) => Reply::bulk(name),
                    Err(reply) => reply,
                },
                Err(e) => Reply::error(format!("ERR {e}")),
            }
        }
        "delete" if args.len() == 3 => {
            let mut vm = scripting.vm();
            if vm.libraries.remove(&String::from_utf8_lossy(&args[2])).is_none() {
                return Reply::error("ERR Library not found");
            }
            persist(s, vm.libraries.dump()).err().unwrap_or_else(Reply::ok)
        }
        "flush" if args.len() <= 3 => {
            if args.len() == 3 && !args[2].eq_ignore_ascii_case(b"sync") && !args[2].eq_ignore_ascii_case(b"async") {
                return Reply::error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
            }
            let mut vm = scripting.vm();
            vm.libraries.clear();
            persist(s, vm.libraries.dump()).err().unwrap_or_else(Reply::ok)
        }
        "list" => function_list(s, args),
        "dump" if args.len() == 2 => Reply::bulk(scripting.vm().libraries.dump()),
        "restore" if args.len() == 3 || args.len() == 4 => {
            let policy = match args.get(3).map(|a| a.to_ascii_lowercase()) {
                None => RestorePolicy::Append,
                Some(p) if p == b"append" => RestorePolicy::Append,
                Some(p) if p == b"replace" => RestorePolicy::Replace,
                Some(p) if p == b"flush" => RestorePolicy::Flush,
                Some(_) => {
                    return Reply::error("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
                }
            };
            let mut vm = scripting.vm();
            match vm.restore_libraries(&args[2], policy, status) {
                Ok(()) => persist(s, vm.libraries.dump()).err().unwrap_or_else(Reply::ok),
                Err(e) => Reply::error(format!("ERR {e}")),
            }
        }
        "stats" if args.len() == 2 => {
            let running = match status.running() {
                Running::Eval => {
                    return Reply::error(
                        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
                    )
                }
                Running::Nothing => Reply::Null,
                Running::Function { name, command, ms } => Reply::Map(vec![
                    (Reply::bulk("name"), Reply::bulk(name)),
                    (Reply::bulk("command"), Reply::Array(command.into_iter().map(Reply::Bulk).collect())),
                    (Reply::bulk("duration_ms"), Reply::Integer(ms as i64)),
                ]),
            };
            let (_, libraries, functions) = scripting.counts();
            Reply::Map(vec![
                (Reply::bulk("running_script"), running),
                (
                    Reply::bulk("engines"),
                    Reply::Map(vec![(
                        Reply::bulk("LUA"),
                        Reply::Map(vec![
                            (Reply::bulk("libraries_count"), Reply::Integer(libraries as i64)),
                            (Reply::bulk("functions_count"), Reply::Integer(functions as i64)),
                        ]),
                    )]),
                ),
            ])
        }
        "kill" if args.len() == 2 => kill_reply(status.kill(false), false),
        _ => unknown_subcommand("function", &args[1]),
    }
}

fn function_list(s: &Session, args: &[Bytes]) -> Reply {
    let (mut with_code, mut pattern) = (false, None);
    let mut i = 2;
    while i < args.len() {
        if !with_code && args[i].eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && args[i].eq_ignore_ascii_case(b"libraryname") {
            if i + 1 >= args.len() {
                return Reply::error("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(args[i].clone());
        } else {
            return Reply::error(format!("ERR Unknown argument {}", String::from_utf8_lossy(&args[i])));
        }
        i += 1;
    }
    let vm = s.state.scripting.vm();
    let mut out = Vec::new();
    for lib in vm.libraries.iter() {
        if pattern.as_ref().is_some_and(|p| !crate::glob::matches(p, lib.name.as_bytes(), true)) {
            continue;
        }
        let functions = lib
            .functions
            .values()
            .map(|f| {
                Reply::Map(vec![
                    (Reply::bulk("name"), Reply::bulk(f.name.clone())),
                    (Reply::bulk("description"), f.description.clone().map_or(Reply::Null, Reply::bulk)),
                    (
                        Reply::bulk("flags"),
                        Reply::Set(f.flags.names().into_iter().map(|n| Reply::Simple(n.to_string())).collect()),
                    ),
                ])
            })
            .collect();
        let mut fields = vec![
            (Reply::bulk("library_name"), Reply::bulk(lib.name.clone())),
            (Reply::bulk("engine"), Reply::bulk("LUA")),
            (Reply::bulk("functions"), Reply::Array(functions)),
        ];
        if with_code {
            fields.push((Reply::bulk("library_code"), Reply::Bulk(lib.code.clone())));
        }
        out.push(Reply::Map(fields));
    }
    Reply::Array(out)
}
