//! Moving whole keys: RENAME, RENAMENX, COPY, MOVE, SWAPDB.
//!
//! A key's data is its metadata record plus, for collections, element, pick and score-index
//! records under its incarnation id, so RENAME within a database moves one record; COPY and
//! MOVE also copy the elements (a new incarnation for COPY) in the same batch.

use bytes::Bytes;

use super::{get, NOT_INTEGER};
use crate::commands::{engine_error, parse_i64, spec, CommandSpec, Session, NO_KEYS, ONE_KEY};
use crate::resp::Reply;
use crate::services::notifications::GENERIC;
use crate::storage::Meta;

pub(in crate::commands) static COMMANDS: &[CommandSpec] = &[
    spec("rename", 3, &["write"], (1, 2, 1), rename),
    spec("renamenx", 3, &["write", "fast"], (1, 2, 1), renamenx),
    spec("copy", -3, &["write", "denyoom"], (1, 2, 1), copy),
    spec("move", 3, &["write", "fast"], ONE_KEY, move_key),
    spec("swapdb", 3, &["write", "fast"], NO_KEYS, swapdb),
];

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
    // Collections and segmented strings keep records under their incarnation.
    if meta.uid != 0 {
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
    if let Err(e) = storage.write(&s.exec, b) {
        return engine_error(e);
    }
    s.notify(GENERIC, "rename_from", from);
    s.notify(GENERIC, "rename_to", to);
    done
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
    let meta = match s.exec.as_read(|| get(s, s.db, from)) {
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
    let written = storage.write(&s.exec, b);
    if written.is_ok() {
        s.exec.notify(GENERIC, "copy_to", to_db, to);
    }
    let reply = written.map_or_else(engine_error, |_| Reply::Integer(1));
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
    if let Err(e) = storage.write(&s.exec, b) {
        return engine_error(e);
    }
    s.notify(GENERIC, "move_from", key);
    s.exec.notify(GENERIC, "move_to", to_db, key);
    Reply::Integer(1)
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
    if let Err(e) = s.state.storage.swap_databases(&s.exec, a as u32, b as u32) {
        return engine_error(e);
    }
    // Clients blocked on keys of either database may be served by what was swapped in (as in
    // Redis). Inside EXEC only the session's own database is signalled, served after it.
    for db in [a as u32, b as u32] {
        for key in s.state.blocking.waited_keys(db) {
            if !s.in_exec {
                s.state.blocking.serve(db, &key);
            } else if db == s.db {
                s.signal(&key);
            }
        }
    }
    Reply::ok()
}
