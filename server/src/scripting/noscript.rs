//! The commands Redis refuses inside scripts.

use bytes::Bytes;

/// Redis 7.0's commands and subcommands flagged `NOSCRIPT` (its `src/commands/*.json`): a
/// script calling one gets "This Redis command is not allowed from script". Blocking
/// commands are among them; BLMPOP and BZMPOP are not (in a script they never block).
const NOSCRIPT: &[&str] = &[
    "acl|cat",
    "acl|deluser",
    "acl|dryrun",
    "acl|genpass",
    "acl|getuser",
    "acl|list",
    "acl|load",
    "acl|log",
    "acl|save",
    "acl|setuser",
    "acl|users",
    "acl|whoami",
    "auth",
    "bgrewriteaof",
    "bgsave",
    "blmove",
    "blpop",
    "brpop",
    "brpoplpush",
    "bzpopmax",
    "bzpopmin",
    "client|caching",
    "client|getname",
    "client|getredir",
    "client|id",
    "client|info",
    "client|kill",
    "client|list",
    "client|no-evict",
    "client|pause",
    "client|reply",
    "client|setname",
    "client|tracking",
    "client|trackinginfo",
    "client|unblock",
    "client|unpause",
    "cluster|reset",
    "config|get",
    "config|resetstat",
    "config|rewrite",
    "config|set",
    "debug",
    "discard",
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "exec",
    "failover",
    "fcall",
    "fcall_ro",
    "function|delete",
    "function|dump",
    "function|flush",
    "function|kill",
    "function|list",
    "function|load",
    "function|restore",
    "function|stats",
    "hello",
    "latency|doctor",
    "latency|graph",
    "latency|histogram",
    "latency|history",
    "latency|latest",
    "latency|reset",
    "module|list",
    "module|load",
    "module|loadex",
    "module|unload",
    "monitor",
    "multi",
    "psubscribe",
    "psync",
    "punsubscribe",
    "quit",
    "replconf",
    "replicaof",
    "reset",
    "role",
    "save",
    "script|debug",
    "script|exists",
    "script|flush",
    "script|kill",
    "script|load",
    "shutdown",
    "slaveof",
    "ssubscribe",
    "subscribe",
    "sunsubscribe",
    "sync",
    "unsubscribe",
    "unwatch",
    "wait",
    "watch",
];

/// True when Redis refuses `argv`'s command (or `command|subcommand`) inside scripts. Runs
/// for every command a script calls, so it allocates nothing.
pub(super) fn no_script(argv: &[Bytes]) -> bool {
    listed(&argv[0], None) || argv.get(1).is_some_and(|sub| listed(&argv[0], Some(sub)))
}

/// True if `name` (or `name|sub`), lowercased on the stack, is in the sorted table.
fn listed(name: &[u8], sub: Option<&[u8]>) -> bool {
    let mut buf = [0u8; 64];
    let len = name.len() + sub.map_or(0, |s| 1 + s.len());
    if len > buf.len() {
        return false; // longer than any entry
    }
    buf[..name.len()].copy_from_slice(name);
    if let Some(sub) = sub {
        buf[name.len()] = b'|';
        buf[name.len() + 1..len].copy_from_slice(sub);
    }
    let key = &mut buf[..len];
    key.make_ascii_lowercase();
    NOSCRIPT.binary_search_by(|entry| entry.as_bytes().cmp(key)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_for_its_binary_search() {
        assert!(NOSCRIPT.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()));
    }

    #[test]
    fn a_command_without_subcommands_is_listed_exactly_when_its_entry_is_flagged_noscript() {
        // `Run::admit_call` checks the flag, and looks up only containers here.
        for spec in crate::commands::all().into_iter().filter(|c| c.known().acl.subcommands.is_empty()) {
            let listed = listed(spec.name.as_bytes(), None);
            assert_eq!(spec.has(crate::commands::flag::NOSCRIPT), listed, "{}", spec.name);
        }
    }

    #[test]
    fn commands_and_subcommands_are_matched_in_any_case() {
        let argv = |a: &[&str]| a.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect::<Vec<_>>();
        assert!(no_script(&argv(&["WATCH", "k"])));
        assert!(no_script(&argv(&["client", "ID"])));
        assert!(!no_script(&argv(&["client", "help"])));
        assert!(!no_script(&argv(&["client"])));
        assert!(!no_script(&argv(&["get", "k"])));
        assert!(!no_script(&argv(&["watchers"])));
        assert!(!no_script(&argv(&[&"x".repeat(100), "id"])), "longer than any entry");
    }
}
