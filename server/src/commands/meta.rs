//! What ACLs and `COMMAND` need to know about commands beyond the table: ACL categories, key
//! specs (which arguments are keys, and whether a key is read, written or both) and
//! subcommands.
//!
//! The facts come from Redis 7.0 itself ([`super::redis_meta`], generated from a real
//! redis-server's `COMMAND` output), so ACL rules mean in Shale what they mean in Redis. The
//! ACL universe ([`universe`]) is every Redis 7.0 command and subcommand plus the commands
//! only Shale has (LOCK, UNLOCK …), whose categories come from their table flags the way Redis
//! derives them (`write` → `@write`, `admin` → `@admin @dangerous`, no `fast` → `@slow` …).

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::Bytes;

use super::flag;
use super::redis_meta::REDIS_COMMANDS;
use super::CommandSpec;

/// The ACL categories in Redis's order (`ACL CAT`).
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

macro_rules! categories {
    ($($name:ident = $bit:expr),* $(,)?) => { $(#[doc = "An ACL category bit."] pub const $name: u32 = 1 << $bit;)* };
}
categories!(
    C_KEYSPACE = 0,
    C_READ = 1,
    C_WRITE = 2,
    C_SET = 3,
    C_SORTEDSET = 4,
    C_LIST = 5,
    C_HASH = 6,
    C_STRING = 7,
    C_BITMAP = 8,
    C_HYPERLOGLOG = 9,
    C_GEO = 10,
    C_STREAM = 11,
    C_PUBSUB = 12,
    C_ADMIN = 13,
    C_FAST = 14,
    C_SLOW = 15,
    C_BLOCKING = 16,
    C_DANGEROUS = 17,
    C_CONNECTION = 18,
    C_TRANSACTION = 19,
    C_SCRIPTING = 20,
);

macro_rules! key_flags {
    ($($name:ident = $bit:expr),* $(,)?) => { $(#[doc = "A key-spec flag."] pub const $name: u16 = 1 << $bit;)* };
}
key_flags!(
    K_RO = 0,
    K_RW = 1,
    K_OW = 2,
    K_RM = 3,
    K_ACCESS = 4,
    K_UPDATE = 5,
    K_INSERT = 6,
    K_DELETE = 7,
    K_NOT_KEY = 8,
    K_INCOMPLETE = 9,
    K_VARIABLE_FLAGS = 10,
);

/// Where a key spec's search starts.
#[derive(Debug, Clone, Copy)]
pub enum Begin {
    /// At this argument.
    Index(i32),
    /// After this keyword, searched from argument `startfrom` (negative: from the end, backwards).
    Keyword(&'static str, i32),
    /// Only the command's own code knows.
    Unknown,
}

/// How a key spec finds its keys from where the search began.
#[derive(Debug, Clone, Copy)]
pub enum Find {
    /// (last key relative to the first, or negative from the end; step; limit).
    Range(i32, i32, i32),
    /// (argument holding the key count, relative; first key relative to it; step).
    Keynum(i32, i32, i32),
    /// Only the command's own code knows.
    Unknown,
}

/// One Redis key spec.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    /// `K_*` flags.
    pub flags: u16,
    /// Where the search starts.
    pub begin: Begin,
    /// How keys are found.
    pub find: Find,
}

impl KeySpec {
    /// A key spec.
    pub const fn new(flags: u16, begin: Begin, find: Find) -> Self {
        KeySpec { flags, begin, find }
    }
}

/// A Redis command's metadata.
#[derive(Debug)]
pub struct RedisCommand {
    /// Full name (`config|get` for a subcommand).
    pub name: &'static str,
    /// Arity as Redis declares it.
    pub arity: i32,
    /// `C_*` bits.
    pub categories: u32,
    /// Key specs.
    pub key_specs: &'static [KeySpec],
    /// Subcommands (for containers like CONFIG and CLIENT).
    pub subcommands: &'static [RedisCommand],
}

/// A [`RedisCommand`] (used by the generated table).
pub const fn cmd(
    name: &'static str,
    arity: i32,
    categories: u32,
    key_specs: &'static [KeySpec],
    subcommands: &'static [RedisCommand],
) -> RedisCommand {
    RedisCommand { name, arity, categories, key_specs, subcommands }
}

/// Redis's metadata for a command by lower-case name (`get`, `config|get`).
pub fn redis_command(name: &str) -> Option<&'static RedisCommand> {
    static BY_NAME: LazyLock<HashMap<&'static str, &'static RedisCommand>> = LazyLock::new(|| {
        let mut map = HashMap::new();
        for c in REDIS_COMMANDS {
            map.insert(c.name, c);
            for sub in c.subcommands {
                map.insert(sub.name, sub);
            }
        }
        map
    });
    BY_NAME.get(name).copied()
}

/// One command or subcommand as ACL rules see it.
#[derive(Debug)]
pub struct AclCommand {
    /// Index into the universe (a bit in a user's command bitmap).
    pub id: usize,
    /// Full name.
    pub name: String,
    /// `C_*` bits.
    pub categories: u32,
    /// Ids of its subcommands (containers only).
    pub subcommands: Vec<usize>,
    /// True for a subcommand.
    pub is_sub: bool,
}

/// Every command ACL rules can name, ids in order.
pub fn universe() -> &'static [AclCommand] {
    &UNIVERSE.0
}

/// The full name of universe entry `id` (`client|list`), as a static reference for
/// [`crate::services::clients::ClientHandle::touch`].
pub fn static_name(id: usize) -> &'static &'static str {
    static NAMES: LazyLock<Vec<&'static str>> =
        LazyLock::new(|| universe().iter().map(|c| &*Box::leak(c.name.clone().into_boxed_str())).collect());
    NAMES.get(id).unwrap_or(&"")
}

/// A command of the universe by full lower-case name.
pub fn acl_command(name: &str) -> Option<&'static AclCommand> {
    UNIVERSE.1.get(name).map(|&id| &UNIVERSE.0[id])
}

static UNIVERSE: LazyLock<(Vec<AclCommand>, HashMap<String, usize>)> = LazyLock::new(|| {
    let mut list: Vec<AclCommand> = Vec::new();
    let push = |list: &mut Vec<AclCommand>, name: &str, categories: u32, is_sub: bool| {
        let id = list.len();
        list.push(AclCommand { id, name: name.to_string(), categories, subcommands: Vec::new(), is_sub });
        id
    };
    for c in REDIS_COMMANDS {
        let id = push(&mut list, c.name, c.categories, false);
        for sub in c.subcommands {
            let sid = push(&mut list, sub.name, sub.categories, true);
            list[id].subcommands.push(sid);
        }
    }
    for spec in super::all() {
        if redis_command(spec.name).is_none() {
            push(&mut list, spec.name, categories_from_flags(spec.flags), false);
        }
    }
    let by_name = list.iter().map(|c| (c.name.clone(), c.id)).collect();
    (list, by_name)
});

/// Redis's derivation of categories from command flags (for commands Redis does not have).
fn categories_from_flags(flags: &[&str]) -> u32 {
    let mut c = 0;
    for (flag, bits) in [
        ("write", C_WRITE),
        ("readonly", C_READ),
        ("admin", C_ADMIN | C_DANGEROUS),
        ("pubsub", C_PUBSUB),
        ("fast", C_FAST),
        ("blocking", C_BLOCKING),
    ] {
        if flags.contains(&flag) {
            c |= bits;
        }
    }
    if c & C_FAST == 0 {
        c |= C_SLOW;
    }
    c
}

/// What the ACL universe and Redis's command table say of a table command (see
/// [`CommandSpec::known`]).
#[derive(Debug, Clone, Copy)]
pub struct Known {
    /// Its universe entry (a container's own, not a subcommand's).
    pub acl: &'static AclCommand,
    /// Redis's description, if Redis has the command.
    pub redis: Option<&'static RedisCommand>,
}

impl Known {
    pub(super) fn of(name: &str) -> Known {
        Known {
            acl: acl_command(name).expect("every table command is in the ACL universe"),
            redis: redis_command(name),
        }
    }
}

/// The universe entry a call runs as: `config|get` for `CONFIG GET …` when the container has
/// that subcommand, else the command itself.
pub fn called(spec: &CommandSpec, args: &[Bytes]) -> &'static AclCommand {
    let top = spec.known().acl;
    if !top.subcommands.is_empty() {
        if let Some(sub) = args.get(1) {
            let full = format!("{}|{}", spec.name, String::from_utf8_lossy(sub).to_ascii_lowercase());
            if let Some(c) = acl_command(&full) {
                return c;
            }
        }
    }
    top
}

/// A key argument found in a call: its position and its key-spec flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef {
    /// Argument index.
    pub pos: usize,
    /// `K_*` flags.
    pub flags: u16,
}

/// The keys of a call, as Redis's `getKeysFromCommandWithSpecs` finds them. A spec that cannot
/// be followed (bad key count, out of range, only the command knows) contributes nothing;
/// commands Redis does not have use the table's key positions (read for `readonly`, read and
/// write otherwise).
pub fn keys(spec: &CommandSpec, args: &[Bytes]) -> Vec<KeyRef> {
    keys_checked(spec, args, false).unwrap_or_default()
}

/// [`keys`]; with `strict`, None as soon as a key spec cannot be followed (a key count past
/// the arguments, a range out of bounds), as `COMMAND GETKEYS` answers such a call with an
/// error where ACL checks take the keys the other specs found.
pub fn keys_checked(spec: &CommandSpec, args: &[Bytes], strict: bool) -> Option<Vec<KeyRef>> {
    let mut out = Vec::new();
    let known = spec.known();
    let redis = if known.acl.subcommands.is_empty() { known.redis } else { redis_command(&called(spec, args).name) };
    let meta = match redis {
        Some(m) => m,
        None => {
            let flags = if spec.has(flag::READONLY) { K_RO | K_ACCESS } else { K_RW | K_ACCESS | K_UPDATE };
            out.extend(spec.key_positions(args.len()).map(|pos| KeyRef { pos, flags }));
            return Some(out);
        }
    };
    if meta.name == "set" {
        // SET's flags depend on GET (Redis's setGetKeys).
        let get = args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get"));
        let flags = if get { K_RW | K_ACCESS | K_UPDATE } else { K_OW | K_UPDATE };
        return Some(vec![KeyRef { pos: 1, flags }]);
    }
    if meta.name == "sort" {
        return Some(sort_keys(args));
    }
    let argc = args.len() as i32;
    for ks in meta.key_specs {
        if ks.flags & K_NOT_KEY != 0 {
            continue;
        }
        let first = match ks.begin {
            Begin::Index(pos) => pos,
            Begin::Keyword(keyword, startfrom) => {
                let (start, end) = if startfrom > 0 { (startfrom, argc - 1) } else { (argc + startfrom, 1) };
                let mut found = 0;
                let mut i = start;
                loop {
                    if i >= argc || i < 1 {
                        break;
                    }
                    if args[i as usize].eq_ignore_ascii_case(keyword.as_bytes()) {
                        found = i + 1;
                        break;
                    }
                    if i == end {
                        break;
                    }
                    i += if start <= end { 1 } else { -1 };
                }
                if found == 0 {
                    continue;
                }
                found
            }
            Begin::Unknown => continue,
        };
        let (first, last, step) = match ks.find {
            Find::Range(lastkey, step, limit) => {
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (first, last, step)
            }
            Find::Keynum(index, firstkey, step) => {
                let Some(n) = args.get((first + index) as usize).and_then(|a| crate::resp::parse_int(a)) else {
                    if strict {
                        return None;
                    }
                    continue;
                };
                if n < 0 || n > i64::from(argc) {
                    if strict {
                        return None;
                    }
                    continue;
                }
                let first = first + firstkey;
                (first, first + n as i32 - 1, step)
            }
            Find::Unknown => continue,
        };
        if last >= argc || last < first || first >= argc {
            if strict && (last >= argc || first >= argc) {
                return None;
            }
            continue;
        }
        let mut i = first;
        while i <= last {
            out.push(KeyRef { pos: i as usize, flags: ks.flags });
            i += step.max(1);
        }
    }
    Some(out)
}

/// The keys of SORT: the source, and the destination of the last STORE option, found by
/// skipping the other options' arguments as Redis's `sortGetKeys` does.
fn sort_keys(args: &[Bytes]) -> Vec<KeyRef> {
    let mut out = vec![KeyRef { pos: 1, flags: K_RO | K_ACCESS }];
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        match args[i].to_ascii_lowercase().as_slice() {
            b"limit" => i += 2,
            b"get" | b"by" => i += 1,
            b"store" if i + 1 < args.len() => store = Some(i + 1),
            _ => {}
        }
        i += 1;
    }
    if let Some(pos) = store {
        out.push(KeyRef { pos, flags: K_OW | K_UPDATE });
    }
    out
}

/// Whether Redis flags a command `movablekeys`: its key specs are not one plain run of
/// consecutive `Index` + `Range` specs of step 1 (or one of them is incomplete), so the
/// legacy (first, last, step) triple cannot name all its keys (Redis's
/// `populateCommandLegacyRangeSpec`).
pub fn movable_keys(name: &str) -> bool {
    let Some(meta) = redis_command(name) else { return false };
    let specs = meta.key_specs;
    if let [only] = specs {
        if matches!((only.begin, only.find), (Begin::Index(_), Find::Range(..))) {
            return only.flags & K_INCOMPLETE != 0;
        }
    }
    let mut prev_last = 0;
    let mut plain = 0;
    for ks in specs {
        let (Begin::Index(pos), Find::Range(last, step, _)) = (ks.begin, ks.find) else { return true };
        if step != 1 || (prev_last != 0 && prev_last != pos - 1) || ks.flags & K_INCOMPLETE != 0 {
            return true;
        }
        let last_abs = if last >= 0 { last + pos } else { last };
        // Redis compares as unsigned: a negative (from the end) last key is the largest.
        prev_last = if last_abs < 0 || prev_last < 0 { -1 } else { prev_last.max(last_abs) };
        plain += 1;
    }
    !specs.is_empty() && plain == 0
}

/// The categories of a table command, as `@name` strings (`COMMAND INFO`).
pub fn category_names(spec: &CommandSpec) -> Vec<&'static str> {
    let bits = acl_command(spec.name).map_or(0, |c| c.categories);
    CATEGORIES.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, n)| *n).collect()
}

/// The category bit for a name (`read`), if there is one.
pub fn category(name: &str) -> Option<u32> {
    CATEGORIES.iter().position(|c| c.eq_ignore_ascii_case(name)).map(|i| 1 << i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<Bytes> {
        words.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn positions(line: &str) -> Vec<(usize, u16)> {
        let a = args(line);
        let spec = super::super::lookup(&a[0]).unwrap();
        keys(spec, &a).into_iter().map(|k| (k.pos, k.flags)).collect()
    }

    #[test]
    fn keys_follow_redis_key_specs() {
        assert_eq!(positions("get k"), vec![(1, K_RO | K_ACCESS)]);
        assert_eq!(positions("set k v"), vec![(1, K_OW | K_UPDATE)]);
        assert_eq!(positions("set k v get"), vec![(1, K_RW | K_ACCESS | K_UPDATE)]);
        assert_eq!(positions("mset a 1 b 2"), vec![(1, K_OW | K_UPDATE), (3, K_OW | K_UPDATE)]);
        assert_eq!(positions("lmove src dst left right"), vec![(1, K_RW | K_ACCESS | K_DELETE), (2, K_RW | K_INSERT)]);
        assert_eq!(
            positions("zunionstore dst 2 a b weights 1 2"),
            vec![(1, K_OW | K_UPDATE), (3, K_RO | K_ACCESS), (4, K_RO | K_ACCESS)]
        );
        assert_eq!(
            positions("lmpop 2 a b left"),
            vec![(2, K_RW | K_ACCESS | K_DELETE), (3, K_RW | K_ACCESS | K_DELETE)]
        );
        assert_eq!(positions("blpop a b 0").len(), 2, "the timeout is not a key");
        assert_eq!(positions("lmpop x a left"), Vec::new(), "a bad key count finds nothing");
        assert_eq!(positions("ping"), Vec::new());
    }

    #[test]
    fn movable_keys_as_redis_flags_them() {
        for name in ["set", "get", "mset", "bitfield", "lmove", "lpop", "blpop", "ping", "rename", "georadius_ro"] {
            assert!(!movable_keys(name), "{name}");
        }
        for name in ["zunionstore", "xread", "eval", "sort", "sort_ro", "migrate", "georadius"] {
            assert!(movable_keys(name), "{name}");
        }
    }

    #[test]
    fn universe_has_subcommands_and_shale_commands() {
        assert!(acl_command("config|get").is_some_and(|c| c.is_sub));
        let config = acl_command("config").unwrap();
        assert!(config.subcommands.len() >= 4);
        let lock = acl_command("lock").expect("Shale's own commands are in the universe");
        assert_eq!(lock.categories, C_READ | C_FAST, "from its table flags");
        for spec in super::super::all() {
            assert!(acl_command(spec.name).is_some(), "{} missing", spec.name);
        }
        assert_eq!(category("SortedSet"), Some(C_SORTEDSET));
        let get = super::super::lookup(b"get").unwrap();
        assert_eq!(category_names(get), vec!["read", "string", "fast"]);
    }
}
