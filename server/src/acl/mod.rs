//! Access control lists, as in Redis 7: users with passwords (SHA-256, compared in constant
//! time), command/key/channel rules ([`rules`]), the check every command passes in the gate
//! ([`check`]), the `ACL LOG` of refusals, and persistence in `aclfile` or as `user` lines of
//! the configuration file.
//!
//! Each connection holds an [`Arc<UserEntry>`]: `ACL SETUSER` changes the entry in place, so
//! clients see new rules at their next command; `ACL DELUSER` (and `ACL LOAD`, which replaces
//! every user) closes the connections of the users it removes. The `default` user's password
//! is `requirepass`. A user allowed everything (the default out of the box) skips the check:
//! one relaxed load per command.

pub mod check;
pub mod rules;
pub mod selector;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use check::Denied;
pub use rules::{RuleError, User};

/// A user by name, shared by the connections authenticated as it.
#[derive(Debug)]
pub struct UserEntry {
    /// The user name.
    pub name: String,
    rules: RwLock<Arc<User>>,
    unrestricted: AtomicBool,
}

impl UserEntry {
    fn new(name: &str, user: User) -> Arc<Self> {
        let unrestricted = AtomicBool::new(user.unrestricted());
        Arc::new(UserEntry { name: name.to_string(), rules: RwLock::new(Arc::new(user)), unrestricted })
    }

    /// The user's rules now.
    pub fn rules(&self) -> Arc<User> {
        Arc::clone(&self.rules.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn set(&self, user: User) {
        self.unrestricted.store(user.unrestricted(), Ordering::Release);
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(user);
    }

    /// True if the user may run anything (no per-command check needed).
    pub fn unrestricted(&self) -> bool {
        self.unrestricted.load(Ordering::Acquire)
    }
}

/// What an `ACL LOG` entry is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A command was refused.
    Command,
    /// A key was refused.
    Key,
    /// A channel was refused.
    Channel,
    /// AUTH failed.
    Auth,
}

impl Reason {
    /// Redis's name.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// One `ACL LOG` entry (repeats within a minute are counted in the same entry).
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// How many times.
    pub count: u64,
    /// What was refused.
    pub reason: Reason,
    /// `toplevel` or `multi`.
    pub context: &'static str,
    /// The command, key or channel name.
    pub object: String,
    /// The user.
    pub username: String,
    /// Milliseconds since the epoch of the last occurrence.
    pub at_ms: u64,
    /// The client's `CLIENT LIST` line at the last occurrence.
    pub client_info: String,
}

/// Every user, the log, and the refusal counters INFO shows.
#[derive(Debug)]
pub struct Acl {
    users: RwLock<BTreeMap<String, Arc<UserEntry>>>,
    log: Mutex<VecDeque<LogEntry>>,
    /// Refused AUTHs (`acl_access_denied_auth`).
    pub denied_auth: AtomicU64,
    /// Refused commands (`acl_access_denied_cmd`).
    pub denied_cmd: AtomicU64,
    /// Refused keys (`acl_access_denied_key`).
    pub denied_key: AtomicU64,
    /// Refused channels (`acl_access_denied_channel`).
    pub denied_channel: AtomicU64,
}

/// Redis's startup error when both ways of defining users are used.
const BOTH_SOURCES: &str = "Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.";

impl Acl {
    /// The users at startup: `default` (its password `requirepass`), then the configuration's
    /// `user` lines or the `aclfile`. The error is Redis's reason to refuse to start.
    pub fn new(cfg: &crate::config::Config) -> Result<Acl, String> {
        let acl = Acl {
            users: RwLock::new(BTreeMap::new()),
            log: Mutex::new(VecDeque::new()),
            denied_auth: AtomicU64::new(0),
            denied_cmd: AtomicU64::new(0),
            denied_key: AtomicU64::new(0),
            denied_channel: AtomicU64::new(0),
        };
        let mut default = User::default_user();
        set_password(&mut default, cfg.requirepass.as_deref());
        acl.write().insert("default".into(), UserEntry::new("default", default));
        let file = cfg.get("aclfile").unwrap_or_default();
        if !cfg.users.is_empty() && !file.is_empty() {
            return Err(BOTH_SOURCES.into());
        }
        let all_channels = pubsub_default(cfg);
        let mut seen = std::collections::HashSet::new();
        for line in &cfg.users {
            let (name, rules) = line.split_first().ok_or("user line without a name")?;
            if !seen.insert(name.clone()) {
                return Err(format!("Duplicate user '{name}' found in the configuration"));
            }
            let rules: Vec<Vec<u8>> = rules.iter().map(|r| r.as_bytes().to_vec()).collect();
            acl.set_user(name, &rules, all_channels).map_err(|e| format!("Error in user declaration '{name}': {e}"))?;
        }
        if !file.is_empty() {
            acl.load_file(file, all_channels)
                .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
        }
        Ok(acl)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<UserEntry>>> {
        self.users.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<UserEntry>>> {
        self.users.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A user by name.
    pub fn user(&self, name: &str) -> Option<Arc<UserEntry>> {
        self.read().get(name).cloned()
    }

    /// The `default` user.
    pub fn default_user(&self) -> Arc<UserEntry> {
        self.user("default").expect("the default user always exists")
    }

    /// The user `name` if `pass` is one of its passwords and it is on.
    pub fn authenticate(&self, name: &[u8], pass: &[u8]) -> Option<Arc<UserEntry>> {
        let entry = self.user(std::str::from_utf8(name).ok()?)?;
        let rules = entry.rules();
        (rules.enabled && rules.password_ok(pass)).then_some(entry)
    }

    /// `ACL SETUSER name rules…`: all rules or none (the error is Redis's reply text). Returns
    /// the entry and the user's rules before (None: created).
    pub fn set_user(
        &self,
        name: &str,
        rules: &[Vec<u8>],
        all_channels: bool,
    ) -> Result<(Arc<UserEntry>, Option<Arc<User>>), String> {
        if name.bytes().any(|c| c.is_ascii_whitespace() || c == 0) {
            return Err("Usernames can't contain spaces or null characters".into());
        }
        let merged = rules::merge_selectors(rules).map_err(|i| {
            format!("Unmatched parenthesis in acl selector starting at '{}'.", String::from_utf8_lossy(&rules[i]))
        })?;
        let mut users = self.write();
        let existing = users.get(name).cloned();
        let before = existing.as_ref().map(|e| e.rules());
        let mut user = before.as_deref().cloned().unwrap_or_else(|| User::new(all_channels));
        for op in &merged {
            user.apply(op, all_channels).map_err(|e| {
                format!("Error in ACL SETUSER modifier '{}': {}", String::from_utf8_lossy(op), e.message())
            })?;
        }
        let entry = match existing {
            Some(entry) => {
                entry.set(user);
                entry
            }
            None => {
                let entry = UserEntry::new(name, user);
                users.insert(name.to_string(), Arc::clone(&entry));
                entry
            }
        };
        Ok((entry, before))
    }

    /// Removes users (not `default`); returns the entries removed.
    pub fn delete_users(&self, names: &[String]) -> Vec<Arc<UserEntry>> {
        let mut users = self.write();
        names.iter().filter_map(|n| users.remove(n)).collect()
    }

    /// Every user name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// `ACL LIST`: each user as a configuration line.
    pub fn list(&self) -> Vec<String> {
        self.read().iter().map(|(name, e)| format!("user {name} {}", e.rules().describe())).collect()
    }

    /// `requirepass` changed: the default user's passwords become it (or `nopass`).
    pub fn set_default_password(&self, pass: Option<&str>) {
        let entry = self.default_user();
        let mut user = (*entry.rules()).clone();
        set_password(&mut user, pass);
        entry.set(user);
    }

    /// `ACL LOAD` (and startup): replaces every user with the file's. Nothing changes on an
    /// error. Returns the entries replaced (their clients must be closed), except `default`,
    /// whose entry keeps its clients and takes the new rules.
    pub fn load_file(&self, path: &str, all_channels: bool) -> Result<Vec<Arc<UserEntry>>, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("Error loading ACLs, opening file '{path}': {e}"))?;
        let mut errors = String::new();
        let mut loaded: BTreeMap<String, User> = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim_matches([' ', '\t', '\r']);
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
            let n = i + 1;
            if words.first() != Some(&"user") || words.len() < 2 {
                errors.push_str(&format!("{path}:{n} should start with user keyword followed by the username. "));
                continue;
            }
            let name = words[1];
            if loaded.contains_key(name) {
                errors.push_str(&format!("WARNING: Duplicate user '{name}' found on line {n}. "));
                continue;
            }
            let rules: Vec<Vec<u8>> = words[2..].iter().map(|w| w.as_bytes().to_vec()).collect();
            let Ok(merged) = rules::merge_selectors(&rules) else {
                errors.push_str(&format!("{path}:{n}: Unmatched parenthesis in selector definition."));
                continue;
            };
            let mut user = User::new(all_channels);
            for op in &merged {
                if let Err(e) = user.apply(op, all_channels) {
                    let op = String::from_utf8_lossy(op);
                    errors.push_str(&format!("{path}:{n}: Error in applying operation '{op}': {}. ", e.message()));
                }
            }
            loaded.insert(name.to_string(), user);
        }
        if !errors.is_empty() {
            errors.push_str("WARNING: ACL errors detected, no change to the previously active ACL rules was performed");
            return Err(errors);
        }
        let mut users = self.write();
        let default = users.get("default").cloned().expect("default user");
        default.set(loaded.remove("default").unwrap_or_else(User::default_user));
        let old = std::mem::take(&mut *users);
        users.insert("default".into(), default);
        for (name, user) in loaded {
            users.insert(name.clone(), UserEntry::new(&name, user));
        }
        Ok(old.into_iter().filter(|(n, _)| n != "default").map(|(_, e)| e).collect())
    }

    /// `ACL SAVE`: every user to `path`, written to a temporary file and renamed over it.
    pub fn save_file(&self, path: &str) -> std::io::Result<()> {
        let mut text = String::new();
        for line in self.list() {
            text.push_str(&line);
            text.push('\n');
        }
        let tmp = format!("{path}.tmp-{}", std::process::id());
        std::fs::write(&tmp, text)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    /// Adds a refusal to the log (grouped with a matching entry of the last minute).
    pub fn log(&self, mut entry: LogEntry, max_len: usize) {
        match entry.reason {
            Reason::Auth => &self.denied_auth,
            Reason::Command => &self.denied_cmd,
            Reason::Key => &self.denied_key,
            Reason::Channel => &self.denied_channel,
        }
        .fetch_add(1, Ordering::Relaxed);
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let found = log.iter().take(10).position(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.object == entry.object
                && e.username == entry.username
                && entry.at_ms.abs_diff(e.at_ms) <= 60_000
        });
        if let Some(i) = found {
            let mut old = log.remove(i).expect("found");
            old.count += 1;
            old.at_ms = entry.at_ms;
            old.client_info = std::mem::take(&mut entry.client_info);
            log.push_front(old);
            return;
        }
        log.push_front(entry);
        log.truncate(max_len);
    }

    /// The newest `count` log entries.
    pub fn log_entries(&self, count: usize) -> Vec<LogEntry> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).iter().take(count).cloned().collect()
    }

    /// `ACL LOG RESET`.
    pub fn reset_log(&self) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// `acl-pubsub-default`: whether new users start with every channel.
pub fn pubsub_default(cfg: &crate::config::Config) -> bool {
    cfg.get("acl-pubsub-default") == Some("allchannels")
}

fn set_password(user: &mut User, pass: Option<&str>) {
    user.apply(b"resetpass", true).expect("valid rule");
    match pass {
        Some(p) => user.apply(format!(">{p}").as_bytes(), true).expect("valid rule"),
        None => user.apply(b"nopass", true).expect("valid rule"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_acl() -> Acl {
        Acl::new(&crate::config::Config::default()).unwrap()
    }

    #[test]
    fn users_authenticate_and_change_in_place() {
        let acl = new_acl();
        assert!(acl.authenticate(b"default", b"anything").is_some(), "default is nopass out of the box");
        let (entry, before) =
            acl.set_user("alice", &[b"on".to_vec(), b">pw".to_vec(), b"+get".to_vec()], false).unwrap();
        assert!(before.is_none());
        assert!(acl.authenticate(b"alice", b"pw").is_some());
        assert!(acl.authenticate(b"alice", b"nope").is_none());
        assert!(!entry.unrestricted());
        acl.set_user("alice", &[b"off".to_vec()], false).unwrap();
        assert!(acl.authenticate(b"alice", b"pw").is_none(), "a disabled user cannot log in");
        let err = acl.set_user("alice", &[b"on".to_vec(), b"+nosuch".to_vec()], false).unwrap_err();
        assert_eq!(err, "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL");
        assert!(!entry.rules().enabled, "a failed SETUSER changes nothing");
        acl.set_default_password(Some("secret"));
        assert!(acl.authenticate(b"default", b"secret").is_some());
        assert!(acl.authenticate(b"default", b"other").is_none());
        assert_eq!(acl.delete_users(&["alice".into(), "ghost".into()]).len(), 1);
    }

    #[test]
    fn acl_files_load_all_or_nothing_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.acl");
        let path = path.to_str().unwrap();
        let acl = new_acl();
        acl.set_user("bob", &[b"on".to_vec(), b">pw".to_vec(), b"~k*".to_vec(), b"+@read".to_vec()], false).unwrap();
        acl.save_file(path).unwrap();
        let saved = std::fs::read_to_string(path).unwrap();
        assert!(saved.contains("user bob on #") && saved.contains("user default on nopass ~* &* +@all"), "{saved}");
        let fresh = new_acl();
        fresh.load_file(path, false).unwrap();
        assert_eq!(fresh.list(), acl.list());
        std::fs::write(path, "user carol on +nosuch\nuser dave on\n").unwrap();
        let err = fresh.load_file(path, false).unwrap_err();
        assert!(err.contains(":1: Error in applying operation '+nosuch'"), "{err}");
        assert!(fresh.user("bob").is_some() && fresh.user("dave").is_none(), "nothing changed");
    }

    #[test]
    fn log_groups_repeats() {
        let acl = new_acl();
        let entry = |object: &str| LogEntry {
            count: 1,
            reason: Reason::Command,
            context: "toplevel",
            object: object.into(),
            username: "u".into(),
            at_ms: 1000,
            client_info: String::new(),
        };
        acl.log(entry("get"), 128);
        acl.log(entry("get"), 128);
        acl.log(entry("set"), 128);
        let log = acl.log_entries(10);
        assert_eq!((log.len(), log[0].object.as_str(), log[1].count), (2, "set", 2));
        acl.log(entry("x"), 2);
        assert_eq!(acl.log_entries(10).len(), 2, "acllog-max-len bounds the log");
    }
}
