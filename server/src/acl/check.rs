//! Whether a user may run a call: the command (or subcommand, or an allowed first argument),
//! every key it names with the access its key spec needs, and the channels of pub/sub
//! commands — Redis's `ACLCheckAllUserCommandPerm`, selector by selector.

use bytes::Bytes;

use super::rules::{Selector, User};
use crate::commands::flag;
use crate::commands::meta::{self, K_ACCESS, K_DELETE, K_INSERT, K_UPDATE};
use crate::commands::CommandSpec;
use crate::glob;

/// Why a call is refused, and the argument at fault (for keys and channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// The command or subcommand.
    Command,
    /// The key at this argument.
    Key(usize),
    /// The channel at this argument.
    Channel(usize),
}

impl Denied {
    fn rank(self) -> (u8, usize) {
        // Redis keeps the "most relevant" failure across selectors: channel > key > command,
        // and the later argument among equals.
        match self {
            Denied::Command => (1, 0),
            Denied::Key(p) => (2, p),
            Denied::Channel(p) => (4, p),
        }
    }
}

/// The channel arguments of a pub/sub call: (position, is a pattern).
fn channels(name: &str, args: &[Bytes]) -> Vec<(usize, bool)> {
    match name {
        "publish" | "spublish" => vec![(1, false)],
        "subscribe" | "ssubscribe" => (1..args.len()).map(|i| (i, false)).collect(),
        "psubscribe" => (1..args.len()).map(|i| (i, true)).collect(),
        _ => Vec::new(),
    }
}

/// Checks one selector.
fn check_selector(sel: &Selector, spec: &CommandSpec, args: &[Bytes]) -> Result<(), Denied> {
    let called = meta::called(spec, args);
    if !sel.all_commands && !spec.has(flag::NO_AUTH) && !sel.bit(called.id) {
        let idx = if called.is_sub { 2 } else { 1 };
        let allowed = sel.first_args(called.id).is_some_and(|list| {
            args.get(idx).is_some_and(|a| list.iter().any(|f| f.as_bytes().eq_ignore_ascii_case(a)))
        });
        if !allowed {
            return Err(Denied::Command);
        }
    }
    if !sel.all_keys {
        for key in meta::keys(spec, args) {
            if !key_allowed(sel, &args[key.pos], key.flags) {
                return Err(Denied::Key(key.pos));
            }
        }
    }
    if !sel.all_channels {
        for (pos, pattern) in channels(spec.name, args) {
            if !channel_allowed(sel, &args[pos], pattern) {
                return Err(Denied::Channel(pos));
            }
        }
    }
    Ok(())
}

/// True if a key pattern of `sel` grants the access `flags` (key-spec flags) ask for.
fn key_allowed(sel: &Selector, key: &[u8], flags: u16) -> bool {
    let read = flags & K_ACCESS != 0;
    let write = flags & (K_INSERT | K_DELETE | K_UPDATE) != 0;
    sel.patterns.iter().any(|p| (!read || p.read) && (!write || p.write) && glob::matches(&p.pattern, key, false))
}

/// A channel is matched against the patterns; a PSUBSCRIBE pattern only literally.
fn channel_allowed(sel: &Selector, channel: &[u8], is_pattern: bool) -> bool {
    sel.all_channels
        || sel
            .channels
            .iter()
            .any(|p| if is_pattern { p.as_slice() == channel } else { glob::matches(p, channel, false) })
}

/// Checks a call against every selector of `user`: allowed if one selector allows it.
pub fn check(user: &User, spec: &CommandSpec, args: &[Bytes]) -> Result<(), Denied> {
    let mut worst: Option<Denied> = None;
    for sel in user.all_selectors() {
        match check_selector(sel, spec, args) {
            Ok(()) => return Ok(()),
            Err(d) => {
                if worst.is_none_or(|w| d.rank() > w.rank()) {
                    worst = Some(d);
                }
            }
        }
    }
    Err(worst.unwrap_or(Denied::Command))
}

/// True if `user` may stay subscribed to `channel` (a pattern if `is_pattern`).
pub fn may_subscribe(user: &User, channel: &[u8], is_pattern: bool) -> bool {
    user.all_selectors().any(|s| channel_allowed(s, channel, is_pattern))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::lookup;

    use crate::acl::rules::user_with as user;

    fn run(u: &User, line: &str) -> Result<(), Denied> {
        let args: Vec<Bytes> = line.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect();
        check(u, lookup(&args[0]).unwrap(), &args)
    }

    #[test]
    fn commands_keys_and_channels() {
        let u = user(&["on", "+@read", "+set", "+config|get", "+select|0", "~app:*", "%R~ro:*", "%W~wo:*", "&news.*"]);
        assert_eq!(run(&u, "get app:1"), Ok(()));
        assert_eq!(run(&u, "get other"), Err(Denied::Key(1)));
        assert_eq!(run(&u, "del app:1"), Err(Denied::Command));
        assert_eq!(run(&u, "get ro:1"), Ok(()));
        assert_eq!(run(&u, "set ro:1 v"), Err(Denied::Key(1)), "read-only pattern");
        assert_eq!(run(&u, "set wo:1 v"), Ok(()), "a blind SET only writes");
        assert_eq!(run(&u, "set wo:1 v get"), Err(Denied::Key(1)), "SET … GET also reads");
        assert_eq!(run(&u, "config get maxmemory"), Ok(()));
        assert_eq!(run(&u, "config set maxmemory 1"), Err(Denied::Command));
        assert_eq!(run(&u, "select 0"), Ok(()));
        assert_eq!(run(&u, "select 1"), Err(Denied::Command));
        assert_eq!(run(&u, "mget app:1 other app:2"), Err(Denied::Key(2)));
        let p = user(&["on", "+@pubsub", "&news.*"]);
        assert_eq!(run(&p, "publish news.today hi"), Ok(()));
        assert_eq!(run(&p, "publish sport hi"), Err(Denied::Channel(1)));
        assert_eq!(run(&p, "psubscribe news.*"), Ok(()), "the same pattern, literally");
        assert_eq!(run(&p, "psubscribe news.t*"), Err(Denied::Channel(1)));
        assert_eq!(run(&p, "auth x"), Ok(()), "no_auth commands need no permission");
    }

    #[test]
    fn selectors_are_alternatives() {
        let u = user(&["on", "+get", "~a*", "(+set ~b*)"]);
        assert_eq!(run(&u, "get a1"), Ok(()));
        assert_eq!(run(&u, "set b1 v"), Ok(()));
        assert_eq!(run(&u, "set a1 v"), Err(Denied::Key(1)), "root allows a*, not SET; the selector SET, not a*");
        assert_eq!(run(&u, "get b1"), Err(Denied::Key(1)));
        assert_eq!(run(&u, "del a1"), Err(Denied::Command));
    }
}
