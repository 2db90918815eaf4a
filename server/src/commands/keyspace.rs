//! Whole-key commands: RENAME, RENAMENX, COPY, MOVE, SWAPDB, KEYS, SCAN, RANDOMKEY, TOUCH,
//! EXPIRETIME, PEXPIRETIME, OBJECT.
//!
//! A key's data is its metadata record plus, for collections, element records under its
//! incarnation id, so RENAME within a database moves one record; COPY and MOVE also copy the
//! elements (a new incarnation for COPY) in the same batch.

use bytes::Bytes;

use super::{engine_error, parse_i64, spec, CommandSpec, Session, NO_KEYS, ONE_KEY};
use crate::glob;
use crate::resp::Reply;
use crate::storage::{KeyType, Meta};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("rename", 3, &["write"], (1, 2, 1), rename),
    spec("renamenx", 3, &["write", "fast"], (1, 2, 1), renamenx),
    spec("copy", -3, &["write", "denyoom"], (1, 2, 1), copy),
    spec("move", 3, &["write", "fast"], ONE_KEY, move_key),
    spec("swapdb", 3, &["write", "fast"], NO_KEYS, swapdb),
    spec("keys", 2, &["readonly"], NO_KEYS, keys),
    spec("scan", -2, &["readonly"], NO_KEYS, scan),
    spec("randomkey", 1, &["readonly"], NO_KEYS, randomkey),
    spec("touch", -2, &["readonly", "fast"], (1, -1, 1), touch),
    spec("expiretime", 2, &["readonly", "fast"], ONE_KEY, expiretime),
    spec("pexpiretime", 2, &["readonly", "fast"], ONE_KEY, pexpiretime),
    spec("object", -2, &["readonly"], (2, 2, 1), object),
];

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

fn get(s: &Session, db: u32, key: &[u8]) -> Result<Option<Meta>, Reply> {
    s.state.storage.get(&s.exec, db, key).map_err(engine_error)
}

/// A logical database index argument, checked against `databases`.
fn db_index(s: &Session, arg: &[u8]) -> Result<u32, Reply> {
    let n = parse_i64(arg).ok_or_else(|| Reply::error(NOT_INTEGER))?;
    if n < 0 || n >= i64::from(s.state.config().databases) {
        return Err(Reply::error("ERR DB index is out of range"));
    }
    Ok(n as u32)
}

/// Adds writing `meta` as `to_key` in `to_db` to `batch`; a collection gets its elements copied
/// under a new incarnation when `fresh_uid` (COPY) or when it changes database (MOVE).
fn place(
    s: &Session,
    batch: &mut lsm::WriteBatch,
    (from_db, meta): (u32, &Meta),
    (to_db, to_key): (u32, &[u8]),
    fresh_uid: bool,
) -> Result<(), Reply> {
    let storage = &s.state.storage;
    let mut placed = meta.clone();
    if meta.kind != KeyType::String {
        if fresh_uid || from_db != to_db {
            placed.uid = storage.new_uid();
            storage.copy_elements_into(&s.exec, batch, from_db, meta.uid, to_db, placed.uid).map_err(engine_error)?;
        }
        // The incarnation now belongs to the new key (compaction checks this owner record).
        storage.view(&s.exec, to_db).claim(batch, placed.uid, to_key);
    }
    storage.put_into(batch, to_db, to_key, &placed);
    Ok(())
}

fn rename_generic(s: &mut Session, args: &[Bytes], nx: bool) -> Reply {
    let (from, to) = (&args[1][..], &args[2][..]);
    let storage = &s.state.storage;
    let _guard = storage.lock(&s.exec, s.db, [from, to]);
    let meta = match get(s, s.db, from) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::error("ERR no such key"),
        Err(e) => return e,
    };
    let done = if nx { Reply::Integer(1) } else { Reply::ok() };
    if from == to {
        return if nx { Reply::Integer(0) } else { Reply::ok() };
    }
    if nx {
        match get(s, s.db, to) {
            Ok(Some(_)) => return Reply::Integer(0),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    let mut b = lsm::WriteBatch::new();
    storage.delete_into(&mut b, s.db, from);
    if let Err(e) = place(s, &mut b, (s.db, &meta), (s.db, to), false) {
        return e;
    }
    storage.write(&s.exec, b).map_or_else(engine_error, |_| done)
}

fn rename(s: &mut Session, args: &[Bytes]) -> Reply {
    let reply = rename_generic(s, args, false);
    // A list or sorted set arriving under a new name may serve clients blocked on that name.
    s.signal(&args[2]);
    reply
}

fn renamenx(s: &mut Session, args: &[Bytes]) -> Reply {
    let reply = rename_generic(s, args, true);
    s.signal(&args[2]);
    reply
}

/// `COPY source destination [DB destination-db] [REPLACE]`.
fn copy(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut to_db, mut replace) = (s.db, false);
    let mut i = 3;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i]).to_ascii_lowercase().as_str() {
            "replace" => replace = true,
            "db" if i + 1 < args.len() => {
                match db_index(s, &args[i + 1]) {
                    Ok(db) => to_db = db,
                    Err(e) => return e,
                }
                i += 1;
            }
            _ => return Reply::error("ERR syntax error"),
        }
        i += 1;
    }
    let (from, to) = (&args[1][..], &args[2][..]);
    if from == to && to_db == s.db {
        return Reply::error("ERR source and destination objects are the same");
    }
    let storage = &s.state.storage;
    let _guard = storage.lock_pairs(&s.exec, [(s.db, from), (to_db, to)]);
    let meta = match get(s, s.db, from) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    match get(s, to_db, to) {
        Ok(Some(_)) if !replace => return Reply::Integer(0),
        Ok(_) => {}
        Err(e) => return e,
    }
    let mut b = lsm::WriteBatch::new();
    if let Err(e) = place(s, &mut b, (s.db, &meta), (to_db, to), true) {
        return e;
    }
    let reply = storage.write(&s.exec, b).map_or_else(engine_error, |_| Reply::Integer(1));
    drop(_guard);
    if to_db == s.db {
        s.signal(&args[2]);
    }
    reply
}

/// `MOVE key db`: 1 if moved, 0 if the key is missing here or present there.
fn move_key(s: &mut Session, args: &[Bytes]) -> Reply {
    let to_db = match db_index(s, &args[2]) {
        Ok(db) => db,
        Err(e) => return e,
    };
    if to_db == s.db {
        return Reply::error("ERR source and destination objects are the same");
    }
    let key = &args[1][..];
    let storage = &s.state.storage;
    let _guard = storage.lock_pairs(&s.exec, [(s.db, key), (to_db, key)]);
    let meta = match get(s, s.db, key) {
        Ok(Some(m)) => m,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    match get(s, to_db, key) {
        Ok(Some(_)) => return Reply::Integer(0),
        Ok(None) => {}
        Err(e) => return e,
    }
    let mut b = lsm::WriteBatch::new();
    storage.delete_into(&mut b, s.db, key);
    if let Err(e) = place(s, &mut b, (s.db, &meta), (to_db, key), false) {
        return e;
    }
    storage.write(&s.exec, b).map_or_else(engine_error, |_| Reply::Integer(1))
}

/// `SWAPDB a b`: swaps the two databases' contents for every client at once.
fn swapdb(s: &mut Session, args: &[Bytes]) -> Reply {
    let Some(a) = parse_i64(&args[1]) else { return Reply::error("ERR invalid first DB index") };
    let Some(b) = parse_i64(&args[2]) else { return Reply::error("ERR invalid second DB index") };
    let n = i64::from(s.state.config().databases);
    if !(0..n).contains(&a) || !(0..n).contains(&b) {
        return Reply::error("ERR DB index is out of range");
    }
    if a == b {
        return Reply::ok();
    }
    s.state.storage.swap_databases(&s.exec, a as u32, b as u32).map_or_else(engine_error, |_| Reply::ok())
}

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
        view.elements(meta.uid, std::ops::Bound::Unbounded).collect::<lsm::Result<_>>().map_err(engine_error)
    };
    Ok(match meta.kind {
        KeyType::String => string_encoding(&meta.body),
        KeyType::List => "quicklist",
        KeyType::Hash => {
            let (max_entries, max_value) = (cfg("hash-max-listpack-entries", 128), cfg("hash-max-listpack-value", 64));
            let small = count <= max_entries
                && elements(max_entries)?
                    .iter()
                    .all(|(f, v)| f.len() as u64 <= max_value && v.len() as u64 <= max_value);
            if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
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
                    "    Print this help.",
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
    let lfu = s.state.config().get("maxmemory-policy").is_some_and(|p| p.ends_with("lfu"));
    match sub.as_str() {
        "encoding" => match collection_encoding(s, &meta) {
            Ok(enc) => Reply::bulk(enc.as_bytes()),
            Err(e) => e,
        },
        // Redis shares the integers 0..9999 (refcount INT_MAX); anything else has one owner.
        "refcount" => {
            let shared = meta.kind == KeyType::String
                && meta.body.len() <= 20
                && parse_i64(&meta.body).is_some_and(|n| (0..10_000).contains(&n));
            Reply::Integer(if shared { i64::from(i32::MAX) } else { 1 })
        }
        // Access times are not tracked: every key counts as just used.
        "idletime" if lfu => Reply::error("ERR An LRU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
        "idletime" => Reply::Integer(0),
        "freq" if lfu => Reply::Integer(0),
        _ => Reply::error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
    }
}
