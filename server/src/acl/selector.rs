//! A selector: the command bitmap over [`crate::commands::meta::universe`] (with first-argument
//! exceptions), key patterns with read/write permissions, and channel patterns — one `(…)` of
//! `ACL SETUSER`, or the rules outside parentheses. [`Selector::describe_commands`] gives the
//! command rules back the way Redis prints them.

use std::collections::BTreeMap;

use super::rules::RuleError;
use crate::commands::meta::{acl_command, category, universe, AclCommand, CATEGORIES};

/// A key pattern and what it permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPattern {
    /// Glob pattern.
    pub pattern: Vec<u8>,
    /// Keys matching may be read.
    pub read: bool,
    /// Keys matching may be written.
    pub write: bool,
}

/// One selector: what commands, keys and channels it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    allowed: Vec<u64>,
    /// Set by `+@all`: commands added later are allowed too (kept by `-cmd`).
    future: bool,
    /// Every command allowed without looking at the bitmap (`+@all` and nothing removed).
    pub all_commands: bool,
    first_args: BTreeMap<usize, Vec<String>>,
    /// Every key allowed (`allkeys`, `~*`).
    pub all_keys: bool,
    /// Key patterns (when not `all_keys`).
    pub patterns: Vec<KeyPattern>,
    /// Every channel allowed (`allchannels`, `&*`).
    pub all_channels: bool,
    /// Channel patterns (when not `all_channels`).
    pub channels: Vec<Vec<u8>>,
}

impl Selector {
    /// A selector allowing nothing; channels as `acl-pubsub-default` says.
    pub fn new(all_channels: bool) -> Self {
        Selector {
            allowed: vec![0; universe().len().div_ceil(64)],
            future: false,
            all_commands: false,
            first_args: BTreeMap::new(),
            all_keys: false,
            patterns: Vec::new(),
            all_channels,
            channels: Vec::new(),
        }
    }

    /// True if the command bit `id` is set.
    pub fn bit(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or denies `cmd` (a container with all its subcommands).
    fn change(&mut self, cmd: &AclCommand, on: bool) {
        self.set_bit(cmd.id, on);
        self.first_args.remove(&cmd.id);
        for &sub in &cmd.subcommands {
            self.set_bit(sub, on);
        }
    }

    fn change_category(&mut self, bits: u32, on: bool) {
        for cmd in universe() {
            if cmd.categories & bits != 0 {
                self.change(cmd, on);
            }
        }
    }

    /// The first arguments allowed for an otherwise denied command.
    pub fn first_args(&self, id: usize) -> Option<&[String]> {
        self.first_args.get(&id).map(Vec::as_slice)
    }

    /// Applies one selector rule (keys, channels, commands).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let lower = String::from_utf8_lossy(op).to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" | "~*" => {
                self.all_keys = true;
                self.patterns.clear();
                return Ok(());
            }
            "resetkeys" => {
                self.all_keys = false;
                self.patterns.clear();
                return Ok(());
            }
            "allchannels" | "&*" => {
                self.all_channels = true;
                self.channels.clear();
                return Ok(());
            }
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
                return Ok(());
            }
            "allcommands" | "+@all" => {
                self.allowed.iter_mut().for_each(|w| *w = u64::MAX);
                self.future = true;
                self.all_commands = true;
                self.first_args.clear();
                return Ok(());
            }
            "nocommands" | "-@all" => {
                self.allowed.iter_mut().for_each(|w| *w = 0);
                self.future = false;
                self.all_commands = false;
                self.first_args.clear();
                return Ok(());
            }
            _ => {}
        }
        match op.first() {
            Some(b'~' | b'%') => self.add_key_pattern(op),
            Some(b'&') => {
                if self.all_channels {
                    return Err(RuleError::AfterAllChannels);
                }
                let pattern = &op[1..];
                if has_spaces(pattern) {
                    return Err(RuleError::Syntax);
                }
                if !self.channels.iter().any(|c| c == pattern) {
                    self.channels.push(pattern.to_vec());
                }
                Ok(())
            }
            Some(b'+' | b'-') if op.get(1) == Some(&b'@') => {
                let bits = category(&lower[2..]).ok_or(RuleError::Unknown)?;
                self.change_category(bits, op[0] == b'+');
                Ok(())
            }
            Some(b'+') => self.allow_command(&lower[1..]),
            Some(b'-') => {
                let cmd = acl_command(&lower[1..]).ok_or(RuleError::Unknown)?;
                self.change(cmd, false);
                Ok(())
            }
            _ => Err(RuleError::Syntax),
        }
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::AfterAllKeys);
        }
        let (mut read, mut write) = (false, false);
        let mut offset = 1;
        if op[0] == b'%' {
            loop {
                match op.get(offset).map(u8::to_ascii_uppercase) {
                    Some(b'R') if !read => read = true,
                    Some(b'W') if !write => write = true,
                    Some(b'~') => {
                        offset += 1;
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
                offset += 1;
            }
            // Redis accepts `%~pattern` as a pattern permitting nothing; keep the same.
        } else {
            (read, write) = (true, true);
        }
        let pattern = &op[offset..];
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|p| p.pattern == pattern) {
            Some(p) => {
                p.read |= read;
                p.write |= write;
            }
            None => self.patterns.push(KeyPattern { pattern: pattern.to_vec(), read, write }),
        }
        Ok(())
    }

    /// `+name`, `+container|sub` or `+command|first-arg`.
    fn allow_command(&mut self, name: &str) -> Result<(), RuleError> {
        let Some((container, sub)) = name.rsplit_once('|') else {
            let cmd = acl_command(name).ok_or(RuleError::Unknown)?;
            self.change(cmd, true);
            return Ok(());
        };
        let cmd = acl_command(container).ok_or(RuleError::Unknown)?;
        if cmd.is_sub {
            return Err(RuleError::SubcommandFirstArg);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !cmd.subcommands.is_empty() {
            let sub = acl_command(name).ok_or(RuleError::Unknown)?;
            self.change(sub, true);
            return Ok(());
        }
        tracing::warn!(target: "shale::acl", rule = %format!("+{name}"), "Deprecation warning: allowing a first arg of an otherwise blocked command is a misuse of ACL");
        let args = self.first_args.entry(cmd.id).or_default();
        if !args.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
            args.push(sub.to_string());
        }
        Ok(())
    }

    /// How many commands of a category the selector allows and denies.
    fn count_category(&self, bits: u32) -> (usize, usize) {
        let mut on_off = (0, 0);
        for cmd in universe().iter().filter(|c| c.categories & bits != 0) {
            if self.bit(cmd.id) {
                on_off.0 += 1;
            } else {
                on_off.1 += 1;
            }
        }
        on_off
    }

    /// The command rules that rebuild this selector's bitmap: `+@all` or `-@all` first, then
    /// the categories that fit best, then single commands and first args (Redis's algorithm).
    pub fn describe_commands(&self) -> String {
        let mut rules = Vec::new();
        let additive = !self.future;
        let mut fake = Selector::new(false);
        fake.apply(if additive { b"-@all" } else { b"+@all" }).expect("valid rule");
        rules.push(if additive { "-@all".to_string() } else { "+@all".to_string() });
        let mut temp = self.clone();
        let mut applied = vec![false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, _) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = temp.count_category(1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some(j);
                    min_diff = diff;
                    max_same = same;
                }
            }
            let Some(j) = best else { break };
            fake.change_category(1 << j, additive);
            temp.change_category(1 << j, !additive);
            rules.push(format!("{}@{}", if additive { '+' } else { '-' }, CATEGORIES[j]));
            applied[j] = true;
        }
        for cmd in universe().iter().filter(|c| !c.is_sub) {
            let want = self.bit(cmd.id);
            if want != fake.bit(cmd.id) {
                rules.push(format!("{}{}", if want { '+' } else { '-' }, cmd.name));
                fake.change(cmd, want);
            }
            for &sub in &cmd.subcommands {
                let want = self.bit(sub);
                if want != fake.bit(sub) {
                    rules.push(format!("{}{}", if want { '+' } else { '-' }, universe()[sub].name));
                    fake.set_bit(sub, want);
                }
            }
            if !want {
                for arg in self.first_args(cmd.id).unwrap_or_default() {
                    rules.push(format!("+{}|{arg}", cmd.name));
                }
            }
        }
        rules.join(" ")
    }

    /// Key patterns as `ACL GETUSER` shows them (`~*` for all keys).
    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        self.patterns.iter().map(describe_pattern).collect::<Vec<_>>().join(" ")
    }

    /// Channel patterns as `ACL GETUSER` shows them.
    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        self.channels.iter().map(|c| format!("&{}", String::from_utf8_lossy(c))).collect::<Vec<_>>().join(" ")
    }

    /// The whole selector as `ACL LIST` shows it.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.all_keys {
            out.push_str("~* ");
        } else {
            for p in &self.patterns {
                out.push_str(&describe_pattern(p));
                out.push(' ');
            }
        }
        if self.all_channels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for c in &self.channels {
                out.push('&');
                out.push_str(&String::from_utf8_lossy(c));
                out.push(' ');
            }
        }
        out.push_str(&self.describe_commands());
        out
    }
}

fn describe_pattern(p: &KeyPattern) -> String {
    let prefix = match (p.read, p.write) {
        (true, true) => "~",
        (true, false) => "%R~",
        (false, true) => "%W~",
        (false, false) => "%~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(&p.pattern))
}

fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|c| c.is_ascii_whitespace() || *c == 0)
}
