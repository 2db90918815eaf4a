//! A user's ACL rules, Redis 7 semantics: flags, password hashes, and selectors (the root
//! selector plus any `(…)` ones, see [`super::selector`]). [`User::apply`] takes one
//! `ACL SETUSER` rule, [`User::describe`] gives the rules back in the form `ACL LIST` shows (and
//! `ACL SAVE` writes).

pub use super::selector::{KeyPattern, Selector};

/// Why a rule was refused (Redis's texts, [`RuleError::message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// A rule or pattern Redis does not understand.
    Syntax,
    /// `+cmd`/`-cmd`/`+@cat` naming nothing known.
    Unknown,
    /// A key pattern after `allkeys`.
    AfterAllKeys,
    /// A channel pattern after `allchannels`.
    AfterAllChannels,
    /// `<pass`/`!hash` of a password the user does not have.
    NoSuchPassword,
    /// `#hash`/`!hash` not 64 lower-case hex digits.
    BadHash,
    /// `+cmd|sub|arg`.
    SubcommandFirstArg,
}

impl RuleError {
    /// Redis's description.
    pub fn message(self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::AfterAllKeys => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::AfterAllChannels => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::SubcommandFirstArg => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// SHA-256 of a password, as lower-case hex (how Redis stores passwords).
pub fn hash_password(pass: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, pass);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The password hash a `>pass`/`<pass` (hashed here) or `#hash`/`!hash` (checked) rule names.
fn rule_hash(op: &[u8]) -> Result<String, RuleError> {
    let rest = &op[1..];
    if matches!(op[0], b'>' | b'<') {
        Ok(hash_password(rest))
    } else if valid_hash(rest) {
        Ok(String::from_utf8_lossy(rest).into_owned())
    } else {
        Err(RuleError::BadHash)
    }
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64 && h.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// Compares without an early exit, so timing does not tell how much of a hash matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A user's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `on`: may authenticate.
    pub enabled: bool,
    /// Any password works.
    pub nopass: bool,
    /// `skip-sanitize-payload` (RESTORE payloads are trusted); shown only when set.
    pub skip_sanitize: bool,
    sanitize_set: bool,
    /// SHA-256 hex of each password.
    pub passwords: Vec<String>,
    /// The rules outside parentheses.
    pub root: Selector,
    /// `(…)` selectors.
    pub selectors: Vec<Selector>,
}

impl User {
    /// A new user as `ACL SETUSER name` makes it: off, no passwords, nothing allowed.
    pub fn new(all_channels: bool) -> Self {
        User {
            enabled: false,
            nopass: false,
            skip_sanitize: false,
            sanitize_set: false,
            passwords: Vec::new(),
            root: Selector::new(all_channels),
            selectors: Vec::new(),
        }
    }

    /// The `default` user out of the box: on, no password, everything allowed.
    pub fn default_user() -> Self {
        let mut u = User::new(true);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            u.apply(op.as_bytes(), true).expect("valid rule");
        }
        u
    }

    /// Every selector, the root first.
    pub fn all_selectors(&self) -> impl Iterator<Item = &Selector> {
        std::iter::once(&self.root).chain(&self.selectors)
    }

    /// True if the user can run anything on any key and channel (no check needed).
    pub fn unrestricted(&self) -> bool {
        self.root.all_commands && self.root.all_keys && self.root.all_channels
    }

    /// True if `pass` is one of the user's passwords (or the user needs none).
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let hashed = hash_password(pass);
        // Every stored hash is compared, in constant time each.
        self.passwords.iter().fold(false, |ok, p| constant_time_eq(p.as_bytes(), hashed.as_bytes()) | ok)
    }

    /// Applies one `ACL SETUSER` rule; `all_channels` is `acl-pubsub-default` (for `reset` and
    /// new selectors).
    pub fn apply(&mut self, op: &[u8], all_channels: bool) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let lower = String::from_utf8_lossy(op).to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "skip-sanitize-payload" => (self.skip_sanitize, self.sanitize_set) = (true, false),
            "sanitize-payload" => (self.skip_sanitize, self.sanitize_set) = (false, true),
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "clearselectors" => self.selectors.clear(),
            "reset" => {
                *self = User::new(all_channels);
                self.sanitize_set = true;
            }
            _ => match op[0] {
                b'>' | b'#' => {
                    let hash = rule_hash(op)?;
                    if !self.passwords.contains(&hash) {
                        self.passwords.push(hash);
                    }
                    self.nopass = false;
                }
                b'<' | b'!' => {
                    let hash = rule_hash(op)?;
                    let at = self.passwords.iter().position(|p| *p == hash).ok_or(RuleError::NoSuchPassword)?;
                    self.passwords.remove(at);
                }
                b'(' if op.ends_with(b")") => {
                    let mut selector = Selector::new(all_channels);
                    let inner = &op[1..op.len() - 1];
                    let words = crate::resp::split_args(inner).ok_or(RuleError::Syntax)?;
                    for word in words {
                        selector.apply(&word)?;
                    }
                    self.selectors.push(selector);
                }
                _ => self.root.apply(op)?,
            },
        }
        Ok(())
    }

    /// The flags `ACL GETUSER` lists, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        if self.skip_sanitize {
            f.push("skip-sanitize-payload");
        } else if self.sanitize_set {
            f.push("sanitize-payload");
        }
        f
    }

    /// The rules that rebuild the user, as `ACL LIST` shows them after `user <name> `.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.flags().into_iter().map(str::to_string).collect();
        parts.extend(self.passwords.iter().map(|p| format!("#{p}")));
        parts.push(self.root.describe());
        for s in &self.selectors {
            parts.push(format!("({})", s.describe()));
        }
        parts.join(" ")
    }
}

/// Joins `(…)` rules split across arguments (`"(+get" "~k)"` → `"(+get ~k)"`). `Err(i)`: the
/// selector starting at argument `i` is never closed.
pub fn merge_selectors(args: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, op) in args.iter().enumerate() {
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(op);
            if op.ends_with(b")") {
                out.push(open.take().expect("open").1);
            }
            continue;
        }
        if op.first() == Some(&b'(') && !op.ends_with(b")") {
            open = Some((i, op.clone()));
            continue;
        }
        out.push(op.clone());
    }
    match open {
        Some((i, _)) => Err(i),
        None => Ok(out),
    }
}

/// A user with `rules` applied (tests).
#[cfg(test)]
pub(crate) fn user_with(rules: &[&str]) -> User {
    let mut u = User::new(false);
    for r in rules {
        u.apply(r.as_bytes(), false).unwrap();
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &[&str]) -> User {
        user_with(rules)
    }

    #[test]
    fn describe_matches_redis() {
        // Each expected line is what redis-server 7.0.15 prints for the same rules, except that
        // single commands come in name order (Redis prints them in its hash table's order).
        assert_eq!(User::default_user().describe(), "on nopass ~* &* +@all");
        assert_eq!(user(&[]).describe(), "off resetchannels -@all");
        assert_eq!(user(&["+@all", "-@dangerous"]).root.describe_commands(), "+@all -@dangerous");
        assert_eq!(user(&["-@all", "+@read", "-get"]).root.describe_commands(), "-@all +@read -get");
        let alice = user(&["on", ">p1", "~k*", "%R~r*", "&ch*", "-@all", "+get", "+@hash", "-hdel", "+select|0"]);
        assert_eq!(
            alice.describe(),
            "on #f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a ~k* %R~r* resetchannels &ch* -@all +@hash +get -hdel +select|0"
        );
    }

    #[test]
    fn rule_errors_match_redis() {
        let mut u = User::new(false);
        assert_eq!(u.apply(b"%X~a", false), Err(RuleError::Syntax));
        assert_eq!(u.apply(b"+config|get|a", false), Err(RuleError::SubcommandFirstArg));
        assert_eq!(u.apply(b"+config|", false), Err(RuleError::Syntax));
        assert_eq!(u.apply(b"+nosuch", false), Err(RuleError::Unknown));
        assert_eq!(u.apply(b"#abc", false), Err(RuleError::BadHash));
        assert_eq!(u.apply(b"<nope", false), Err(RuleError::NoSuchPassword));
        u.apply(b"allkeys", false).unwrap();
        assert_eq!(u.apply(b"~a", false), Err(RuleError::AfterAllKeys));
        assert_eq!(merge_selectors(&[b"(+get".to_vec()]), Err(0));
        assert_eq!(merge_selectors(&[b"(+get".to_vec(), b"~k)".to_vec()]).unwrap(), vec![b"(+get ~k)".to_vec()]);
    }

    #[test]
    fn passwords_are_hashed_and_checked() {
        let u = user(&[">secret", "on"]);
        assert!(u.password_ok(b"secret"));
        assert!(!u.password_ok(b"Secret"));
        assert_eq!(u.passwords[0], hash_password(b"secret"));
        let mut u = u;
        u.apply(b"<secret", false).unwrap();
        assert!(!u.password_ok(b"secret"));
        u.apply(b"nopass", false).unwrap();
        assert!(u.password_ok(b"anything"));
    }
}
