//! Walking and inspecting keys: KEYS, SCAN, RANDOMKEY, TOUCH, EXPIRETIME, PEXPIRETIME, OBJECT.

use bytes::Bytes;

use super::{get, NOT_INTEGER};
use crate::commands::{engine_error, parse_i64, spec, CommandSpec, Session, NO_KEYS, ONE_KEY};
use crate::glob;
use crate::resp::Reply;
use crate::storage::KeyType;

pub(in crate::commands) static COMMANDS: &[CommandSpec] = &[
    spec("keys", 2, &["readonly"], NO_KEYS, keys),
    spec("scan", -2, &["readonly"], NO_KEYS, scan),
    spec("randomkey", 1, &["readonly"], NO_KEYS, randomkey),
    spec("touch", -2, &["readonly", "fast"], (1, -1, 1), touch),
    spec("expiretime", 2, &["readonly", "fast"], ONE_KEY, expiretime),
    spec("pexpiretime", 2, &["readonly", "fast"], ONE_KEY, pexpiretime),
    spec("object", -2, &["readonly"], (2, 2, 1), object),
];

/// `KEYS pattern`: every live key of the database matching the glob, in key order.
fn keys(s: &mut Session, args: &[Bytes]) -> Reply {
    let mut out = Vec::new();
    let mut cursor = Bytes::new();
    loop {
        let page = match s.state.storage.scan(&s.exec, s.db, &cursor, 4096) {
            Ok(p) => p,
            Err(e) => return engine_error(e),
        };
        out.extend(
            page.keys.into_iter().filter(|(k, _)| glob::matches(&args[1], k, false)).map(|(k, _)| Reply::Bulk(k)),
        );
        match page.next {
            Some(next) => cursor = next,
            None => return Reply::Array(out),
        }
    }
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
fn scan(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(cursor) = std::str::from_utf8(&args[1]).ok().and_then(|c| c.parse::<u64>().ok()) else {
        return Reply::error("ERR invalid cursor");
    };
    let (mut pattern, mut count, mut kind): (Option<&Bytes>, usize, Option<String>) = (None, 10, None);
    let mut i = 2;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else { return Reply::error("ERR syntax error") };
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "match" => pattern = Some(value),
            "count" => match parse_i64(value) {
                Some(n) if n >= 1 => count = n.min(1 << 20) as usize,
                Some(_) => return Reply::error("ERR syntax error"),
                None => return Reply::error(NOT_INTEGER),
            },
            "type" => kind = Some(String::from_utf8_lossy(value).to_ascii_lowercase()),
            _ => return Reply::error("ERR syntax error"),
        }
        i += 2;
    }
    let Some(position) = s.state.cursors.position(cursor) else { return Reply::error("ERR invalid cursor") };
    let page = match s.state.storage.scan(&s.exec, s.db, &position, count) {
        Ok(p) => p,
        Err(e) => return engine_error(e),
    };
    let next = page.next.map_or(0, |k| s.state.cursors.save(k));
    let keys = page
        .keys
        .into_iter()
        .filter(|(k, m)| {
            pattern.is_none_or(|p| glob::matches(p, k, false)) && kind.as_deref().is_none_or(|t| m.kind.name() == t)
        })
        .map(|(k, _)| Reply::Bulk(k))
        .collect();
    Reply::Array(vec![Reply::bulk(Bytes::from(next.to_string())), Reply::Array(keys)])
}

fn randomkey(s: &mut Session, _: &[Bytes]) -> Reply {
    match s.state.storage.random_key(&s.exec, s.db) {
        Ok(k) => k.map_or(Reply::Null, Reply::Bulk),
        Err(e) => engine_error(e),
    }
}

fn touch(s: &mut Session, args: &[Bytes]) -> Reply {
    let mut n = 0;
    for key in &args[1..] {
        match get(s, s.db, key) {
            Ok(Some(_)) => n += 1,
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    Reply::Integer(n)
}

fn expire_time(s: &Session, key: &[u8], unit_ms: u64) -> Reply {
    match get(s, s.db, key) {
        Ok(None) => Reply::Integer(-2),
        Ok(Some(m)) if m.expire_at_ms == 0 => Reply::Integer(-1),
        Ok(Some(m)) => Reply::Integer((m.expire_at_ms / unit_ms) as i64),
        Err(e) => e,
    }
}

fn expiretime(s: &mut Session, args: &[Bytes]) -> Reply {
    expire_time(s, &args[1], 1000)
}

fn pexpiretime(s: &mut Session, args: &[Bytes]) -> Reply {
    expire_time(s, &args[1], 1)
}

/// The encoding Redis would report for a string value.
fn string_encoding(v: &[u8]) -> &'static str {
    if v.len() <= 20 && parse_i64(v).is_some() {
        "int"
    } else if v.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

/// The encoding redis-server 7.0 would report, judged from the value's current size and
/// contents against the same `*-max-*` settings (Shale stores every type the same way).
fn collection_encoding(s: &Session, meta: &crate::storage::Meta) -> Result<&'static str, Reply> {
    let cfg = |name: &str, default: u64| s.state.config().get(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    let count = crate::storage::Header::of(meta).count;
    let view = s.state.storage.view(&s.exec, s.db);
    // Small collections: look at every element (at most a few hundred).
    let elements = |limit: u64| -> Result<Vec<(Bytes, Bytes)>, Reply> {
        if count > limit {
            return Ok(Vec::new());
        }
        view.entries(meta, std::ops::Bound::Unbounded).collect::<lsm::Result<_>>().map_err(engine_error)
    };
    Ok(match meta.kind {
        KeyType::String if meta.is_segmented() => "raw",
        KeyType::String => string_encoding(&meta.body),
        KeyType::List => "quicklist",
        KeyType::Stream => "stream",
        // A hash is compact exactly while it numbers its fields (converted for good after).
        KeyType::Hash if crate::storage::next_ordinal(meta).is_some() => "listpack",
        KeyType::Hash => "hashtable",
        KeyType::Set => {
            let max = cfg("set-max-intset-entries", 512);
            let ints = count <= max && elements(max)?.iter().all(|(m, _)| m.len() <= 20 && parse_i64(m).is_some());
            if ints {
                "intset"
            } else {
                "hashtable"
            }
        }
        KeyType::ZSet => {
            let (max_entries, max_value) = (cfg("zset-max-listpack-entries", 128), cfg("zset-max-listpack-value", 64));
            let small = count <= max_entries && elements(max_entries)?.iter().all(|(m, _)| m.len() as u64 <= max_value);
            if small {
                "listpack"
            } else {
                "skiplist"
            }
        }
    })
}

/// Above this free effort redis-server frees a value in the background (`LAZYFREE_THRESHOLD`).
pub(crate) const LAZYFREE_THRESHOLD: u64 = 64;

/// What freeing `meta`'s value would cost redis-server 7.0 (`lazyfreeGetFreeEffort`): its
/// element count for a hash table, skiplist or hashtable-encoded set, its quicklist nodes for a
/// list, its radix-tree nodes and consumer groups for a stream, 1 for anything in one
/// allocation. UNLINK and FLUSH… ASYNC count a value above [`LAZYFREE_THRESHOLD`] as freed
/// lazily (`lazyfreed_objects`), as Redis's background thread would: here its records go with
/// one metadata write and compaction reclaims them in the background.
pub(crate) fn free_effort(s: &Session, meta: &crate::storage::Meta) -> Result<u64, Reply> {
    let count = crate::storage::Header::of(meta).count;
    Ok(match meta.kind {
        KeyType::String => 1,
        // Fewer elements than the threshold cannot make a costly value.
        KeyType::Set | KeyType::Hash | KeyType::ZSet if count <= LAZYFREE_THRESHOLD => 1,
        KeyType::Set | KeyType::Hash | KeyType::ZSet => match collection_encoding(s, meta)? {
            "hashtable" | "skiplist" => count,
            _ => 1,
        },
        KeyType::List if count <= LAZYFREE_THRESHOLD => count.max(1),
        KeyType::List => {
            // Quicklist nodes: `list-max-listpack-size` entries each, or (negative) 4 KB << (n-1)
            // of them, judged from the first element's size.
            let fill: i64 = s.state.config().get("list-max-listpack-size").and_then(|v| v.parse().ok()).unwrap_or(-2);
            let per_node = if fill > 0 {
                fill as u64
            } else {
                let view = s.state.storage.view(&s.exec, s.db);
                let first =
                    view.elements(meta.uid, std::ops::Bound::Unbounded).next().transpose().map_err(engine_error)?;
                let entry = first.map_or(1, |(_, v)| v.len() as u64 + 2);
                (4096u64 << (fill.unsigned_abs().clamp(1, 5) - 1)) / entry
            };
            count.div_ceil(per_node.max(1))
        }
        KeyType::Stream => {
            let view = s.state.storage.view(&s.exec, s.db);
            crate::commands::streams::free_effort(&view, meta).map_err(engine_error)?
        }
    })
}

/// `OBJECT ENCODING | REFCOUNT | IDLETIME | FREQ key`, `OBJECT HELP`.
fn object(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("help", 2) => {
            return Reply::Array(
                [
                    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "ENCODING <key>",
                    "    Return the kind of internal representation used in order to store the value",
                    "    associated with a <key>.",
                    "FREQ <key>",
                    "    Return the access frequency index of the <key>. The returned integer is",
                    "    proportional to the logarithm of the recent access frequency of the key.",
                    "IDLETIME <key>",
                    "    Return the idle time of the <key>, that is the approximated number of",
                    "    seconds elapsed since the last access to the key.",
                    "REFCOUNT <key>",
                    "    Return the number of references of the value associated with the specified",
                    "    <key>.",
                    "HELP",
                    "    Prints this help.",
                ]
                .iter()
                .map(|l| Reply::Simple((*l).into()))
                .collect(),
            )
        }
        ("encoding" | "refcount" | "idletime" | "freq", 3) => {}
        ("encoding" | "refcount" | "idletime" | "freq" | "help", _) => {
            return Reply::error(format!("ERR wrong number of arguments for 'object|{sub}' command"))
        }
        _ => {
            return Reply::error(format!(
                "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                String::from_utf8_lossy(&args[1])
            ))
        }
    }
    let meta = match get(s, s.db, &args[2]) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Null,
        Err(e) => return e,
    };
    let lfu = s.state.access.lfu();
    match sub.as_str() {
        "encoding" => match collection_encoding(s, &meta) {
            Ok(enc) => Reply::bulk(enc.as_bytes()),
            Err(e) => e,
        },
        "refcount" => Reply::Integer(refcount(&meta)),
        "idletime" if lfu => Reply::error("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
        "idletime" => Reply::Integer(s.state.access.get(s.db, &args[2]).idle as i64),
        "freq" if lfu => Reply::Integer(i64::from(s.state.access.get(s.db, &args[2]).freq)),
        _ => Reply::error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
    }
}

/// Redis shares the integers 0..9999 (refcount INT_MAX); anything else has one owner.
fn refcount(meta: &crate::storage::Meta) -> i64 {
    let shared = meta.kind == KeyType::String
        && !meta.is_segmented()
        && meta.body.len() <= 20
        && parse_i64(&meta.body).is_some_and(|n| (0..10_000).contains(&n));
    if shared {
        i64::from(i32::MAX)
    } else {
        1
    }
}

/// `DEBUG OBJECT key`, in Redis 7.0's format: `Value at:… refcount:… encoding:…
/// serializedlength:… lru:… lru_seconds_idle:…`. The address is a stand-in (values have none
/// in memory), `serializedlength` is the size of the value's RDB encoding as Shale's DUMP writes
/// it (without its type byte and footer; Redis may pick another encoding, e.g. an intset), and `lru`/`lru_seconds_idle` come from the access-time
/// table. Redis's `ql_*` fields describe its quicklist nodes, which Shale's lists do not have,
/// so they are left out.
pub(in crate::commands) fn debug_object(s: &mut Session, key: &Bytes) -> Reply {
    let meta = match get(s, s.db, key) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::error("ERR no such key"),
        Err(e) => return e,
    };
    let encoding = match collection_encoding(s, &meta) {
        Ok(enc) => enc,
        Err(e) => return e,
    };
    let value = match s.state.storage.view(&s.exec, s.db).read_value(&meta) {
        Ok(v) => v,
        Err(e) => return engine_error(e),
    };
    // DUMP's payload: type byte, the value, RDB version (2 bytes) and CRC-64 (8 bytes).
    let serialized = crate::rdb::dump(&value).len().saturating_sub(11);
    let access = s.state.access.get(s.db, key);
    let address = 0x7f00_0000_0000u64 | (xxhash_rust::xxh3::xxh3_64(key) & 0xff_ffff_fff0);
    Reply::Simple(format!(
        "Value at:{address:#x} refcount:{} encoding:{encoding} serializedlength:{serialized} lru:{} lru_seconds_idle:{}",
        refcount(&meta),
        access.lru_field,
        access.lru_seconds_idle
    ))
}
