//! HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST. The value is a string
//! in Redis's own HLL layout (`crate::hyperloglog`), so GET/SET move it between servers.
//!
//! A dense HLL is 12,304 bytes. PFADD and PFCOUNT change only some of them: a register (one
//! or two bytes) and the header's stale-cache bit, or the cached cardinality. They edit a dense
//! HLL in place, as SETBIT edits a bitmap ([`StringEdit`]): the first such edit keeps the value
//! in 512-byte segments (see `storage::strings`), and from then on a PFADD that changes a
//! register writes the segment or two it touched, not the whole value, and a PFCOUNT whose
//! cached cardinality is valid reads the header's segment only — on the connection's own task
//! when memory holds it, as a read (it is one of `exec::in_memory::MEMORY_READS`), without
//! the key's lock.

use bytes::Bytes;

use super::strings::{done_event, string_at, string_meta_at};
use super::{engine_error, spec, CommandSpec, Session, NO_KEYS, ONE_KEY};
use crate::hyperloglog::{self, Corrupt, Hll, NotHll, DENSE_SIZE, HEADER, REGISTERS, STALE_BYTE};
use crate::resp::Reply;
use crate::services::notifications::STRING;
use crate::storage::{Meta, StringEdit, HLL_SEGMENT};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("pfadd", -2, &["write", "denyoom", "fast"], ONE_KEY, pfadd),
    spec("pfcount", -2, &["readonly", "may_replicate"], (1, -1, 1), pfcount),
    spec("pfmerge", -2, &["write", "denyoom"], (1, -1, 1), pfmerge),
    spec("pfdebug", 3, &["write", "denyoom", "admin"], (2, 2, 1), pfdebug),
    spec("pfselftest", 1, &["admin"], NO_KEYS, pfselftest),
];

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

impl From<NotHll> for Reply {
    fn from(_: NotHll) -> Reply {
        Reply::error(NOT_HLL)
    }
}

impl From<Corrupt> for Reply {
    fn from(_: Corrupt) -> Reply {
        Reply::error(CORRUPT)
    }
}

/// The HLL at `key` with its expiry: `Ok(None)` if absent.
fn hll_at(s: &Session, key: &[u8]) -> Result<Option<(Hll, u64)>, Reply> {
    match string_at(s, key)? {
        Some(m) => Ok(Some((Hll::from_bytes(m.body.to_vec())?, m.expire_at_ms))),
        None => Ok(None),
    }
}

fn sparse_max(s: &Session) -> usize {
    s.state.config().hll_sparse_max_bytes
}

/// Adds writing `hll` at `key` (keeping `expire_at`) to a batch and commits it.
fn store(s: &Session, key: &[u8], hll: Hll, expire_at: u64) -> lsm::Result<()> {
    let mut b = lsm::WriteBatch::new();
    s.state.storage.put_into(&mut b, s.db, key, &Meta::string(Bytes::from(hll.into_bytes()), expire_at));
    s.state.storage.write(&s.exec, b)
}

/// An edit of the dense HLL at `key`, with its header: `Ok(None)` if `key` holds no string of
/// a dense HLL's length or one whose header is not a dense HLL's (the caller reads it whole,
/// which also gives absent keys, sparse HLLs and errors their own answers).
fn dense_edit<'a>(s: &'a Session, key: &[u8]) -> Result<Option<(StringEdit<'a>, [u8; HEADER])>, Reply> {
    let Some(meta) = string_meta_at(s, key)?.filter(|m| m.string_len() == DENSE_SIZE as u64) else {
        return Ok(None);
    };
    let mut edit = StringEdit::new(s.state.storage.view(&s.exec, s.db), Some(meta));
    edit.prefer_segment(HLL_SEGMENT);
    let mut header = [0u8; HEADER];
    edit.read(0, &mut header).map_err(engine_error)?;
    Ok(hyperloglog::is_dense_header(&header).then_some((edit, header)))
}

/// PFADD into a dense HLL, reading and writing only the registers' bytes (see the module docs).
fn pfadd_dense(s: &Session, key: &[u8], mut edit: StringEdit<'_>, header: [u8; HEADER], elements: &[Bytes]) -> Reply {
    let changed = (|| -> lsm::Result<bool> {
        let mut changed = false;
        for element in elements {
            let (i, count) = hyperloglog::pattern(element);
            let (at, fb) = hyperloglog::dense_position(i);
            let mut window = [0u8; 2];
            edit.read(at as u64, &mut window)?;
            if count > hyperloglog::window_get(window, fb) {
                hyperloglog::window_set(&mut window, fb, count);
                // The last register ends in the value's last byte.
                let n = if at + 1 < DENSE_SIZE { 2 } else { 1 };
                edit.write(at as u64, &window[..n])?;
                changed = true;
            }
        }
        if changed && header[STALE_BYTE] & 0x80 == 0 {
            edit.write(STALE_BYTE as u64, &[header[STALE_BYTE] | 0x80])?;
        }
        Ok(changed)
    })();
    match changed {
        Ok(false) => Reply::Integer(0),
        Ok(true) => {
            let mut b = lsm::WriteBatch::new();
            edit.finish(&mut b, key);
            done_event(s, s.state.storage.write(&s.exec, b), Reply::Integer(1), STRING, "pfadd", key)
        }
        Err(e) => engine_error(e),
    }
}

fn pfadd(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    match dense_edit(s, &args[1]) {
        Ok(Some((edit, header))) => return pfadd_dense(s, &args[1], edit, header, &args[2..]),
        Ok(None) => {}
        Err(e) => return e,
    }
    let (mut hll, expire_at, mut updated) = match hll_at(s, &args[1]) {
        Ok(Some((h, at))) => (h, at, false),
        Ok(None) => (Hll::new(), 0, true),
        Err(e) => return e,
    };
    let max = sparse_max(s);
    for element in &args[2..] {
        match hll.add(element, max) {
            Ok(changed) => updated |= changed,
            Err(e) => return e.into(),
        }
    }
    if !updated {
        return Reply::Integer(0);
    }
    hll.invalidate();
    done_event(s, store(s, &args[1], hll, expire_at), Reply::Integer(1), STRING, "pfadd", &args[1])
}

fn pfcount(s: &mut Session, args: &[Bytes]) -> Reply {
    if args.len() > 2 {
        // The union of several: merge their registers, count that.
        let mut max = Box::new([0u8; REGISTERS]);
        for key in &args[1..] {
            match hll_at(s, key) {
                Ok(Some((h, _))) => {
                    if let Err(e) = h.merge_into(&mut max) {
                        return e.into();
                    }
                }
                Ok(None) => {}
                Err(e) => return e,
            }
        }
        return Reply::Integer(hyperloglog::count_registers(&max) as i64);
    }
    if s.exec.memory_only() {
        // On a connection's own task (`exec::in_memory`), without the key's lock as any read
        // there: only a valid cached cardinality is answered. Anything else (a stale cache to
        // count again and write back, an absent key, a value that is no HLL) is void and runs
        // again on an executor thread.
        return match cached_count(s, &args[1]) {
            Some(card) => Reply::Integer(card as i64),
            None => {
                s.exec.void();
                Reply::Integer(0)
            }
        };
    }
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[1][..]]);
    // A dense HLL: a valid cached cardinality is read from the header alone, and a refreshed
    // one is written back into it.
    let mut dense = match dense_edit(s, &args[1]) {
        Ok(found) => found,
        Err(e) => return e,
    };
    if let Some(card) = dense.as_ref().and_then(|(_, header)| hyperloglog::cached_in_header(header, DENSE_SIZE)) {
        return Reply::Integer(card as i64);
    }
    // (A dense one is read whole through its edit, which keeps the segments it read.)
    let whole = match dense.as_mut() {
        Some((edit, _)) => {
            let mut bytes = vec![0u8; DENSE_SIZE];
            match edit.read(0, &mut bytes) {
                Ok(()) => Hll::from_bytes(bytes).map(|h| Some((h, 0))).map_err(Reply::from),
                Err(e) => Err(engine_error(e)),
            }
        }
        None => hll_at(s, &args[1]),
    };
    let (mut hll, expire_at) = match whole {
        Ok(Some(found)) => found,
        Ok(None) => return Reply::Integer(0),
        Err(e) => return e,
    };
    let (card, refreshed) = match hll.count() {
        Ok(c) => c,
        Err(e) => return e.into(),
    };
    // The cached cardinality is part of the value, as in Redis; a replica leaves its copy
    // alone (it applies its primary's writes only).
    if refreshed && !s.state.replication.is_replica() {
        let stored = match dense.take() {
            Some((mut edit, _)) => edit.write(8, &hll.as_bytes()[8..HEADER]).and_then(|()| {
                let mut b = lsm::WriteBatch::new();
                edit.finish(&mut b, &args[1]);
                s.state.storage.write(&s.exec, b)
            }),
            None => store(s, &args[1], hll, expire_at),
        };
        if let Err(e) = stored {
            return engine_error(e);
        }
    }
    Reply::Integer(card as i64)
}

/// The valid cardinality cached in the header of the HLL at `key` (read from its first
/// segment only, if segmented); `None` if absent, not an HLL, stale, or a read failed.
fn cached_count(s: &Session, key: &[u8]) -> Option<u64> {
    let meta = string_meta_at(s, key).ok()??;
    let header = s.state.storage.view(&s.exec, s.db).string_range(&meta, 0, HEADER as u64).ok()?;
    hyperloglog::cached_in_header(&header, meta.string_len() as usize)
}

fn pfmerge(s: &mut Session, args: &[Bytes]) -> Reply {
    let _guard = s.state.storage.lock(&s.exec, s.db, args[1..].iter().map(|k| &k[..]));
    let mut max = Box::new([0u8; REGISTERS]);
    let mut dense = false;
    // The destination's own registers count too.
    for key in &args[1..] {
        match s.exec.as_read(|| hll_at(s, key)) {
            Ok(Some((h, _))) => {
                dense |= !h.is_sparse();
                if let Err(e) = h.merge_into(&mut max) {
                    return e.into();
                }
            }
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    let (mut hll, expire_at) = match hll_at(s, &args[1]) {
        Ok(Some(found)) => found,
        Ok(None) => (Hll::new(), 0),
        Err(e) => return e,
    };
    let sparse_max = sparse_max(s);
    let r: Result<(), Corrupt> = (|| {
        if dense {
            hll.to_dense()?;
        }
        for (i, &v) in max.iter().enumerate() {
            if v != 0 {
                hll.set_max(i, v, sparse_max)?;
            }
        }
        Ok(())
    })();
    if let Err(e) = r {
        return e.into();
    }
    hll.invalidate();
    done_event(s, store(s, &args[1], hll, expire_at), Reply::ok(), STRING, "pfadd", &args[1])
}

/// `PFDEBUG GETREG|DECODE|ENCODING|TODENSE key`.
fn pfdebug(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).into_owned();
    let _guard = s.state.storage.lock(&s.exec, s.db, [&args[2][..]]);
    let (mut hll, expire_at) = match hll_at(s, &args[2]) {
        Ok(Some(found)) => found,
        Ok(None) => return Reply::error("ERR The specified key does not exist"),
        Err(e) => return e,
    };
    match sub.to_ascii_lowercase().as_str() {
        "getreg" | "todense" => {
            let converted = match hll.to_dense() {
                Ok(c) => c,
                Err(e) => return e.into(),
            };
            let reply = if sub.eq_ignore_ascii_case("getreg") {
                Reply::Array(hll.registers().into_iter().map(|r| Reply::Integer(i64::from(r))).collect())
            } else {
                Reply::Integer(i64::from(converted))
            };
            if converted {
                if let Err(e) = store(s, &args[2], hll, expire_at) {
                    return engine_error(e);
                }
            }
            reply
        }
        "decode" if hll.is_sparse() => Reply::bulk(Bytes::from(hll.decode_sparse())),
        "decode" => Reply::error("ERR HLL encoding is not sparse"),
        "encoding" => Reply::Simple(if hll.is_sparse() { "sparse" } else { "dense" }.into()),
        _ => Reply::error(format!("ERR Unknown PFDEBUG subcommand '{sub}'")),
    }
}

fn pfselftest(s: &mut Session, _args: &[Bytes]) -> Reply {
    match hyperloglog::self_test(sparse_max(s)) {
        Ok(()) => Reply::ok(),
        Err(e) => Reply::error(format!("ERR {e}")),
    }
}
