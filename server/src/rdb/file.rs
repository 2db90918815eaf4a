//! Whole RDB files: importing one Redis saved (`shale-server --import-rdb dump.rdb`), and
//! writing a snapshot of a Shale keyspace that redis-server loads (`redis-cli --rdb`).
//!
//! ```text
//! "REDIS" | version, 4 ASCII digits
//! then records, each an opcode byte:
//!   0xFA AUX            string key, string value
//!   0xFB RESIZEDB       length keys, length keys with an expiry
//!   0xFC EXPIRETIME_MS  u64 LE (of the next key)
//!   0xFD EXPIRETIME     u32 LE seconds (of the next key)
//!   0xFE SELECTDB       length db
//!   0xF9 FREQ u8, 0xF8 IDLE length   (of the next key; Shale ignores them)
//!   0xF5 FUNCTION2      string: a function library's code
//!   0xFF EOF            then CRC-64 u64 LE of everything before it (0: not computed)
//!   any other byte      a value type (see `rdb`): string key, value
//! ```
//! An import reads the file through a memory map, so one larger than RAM streams through the
//! page cache; it checks the whole file's CRC before it writes anything, then writes the keys
//! in batches. Keys already expired are skipped, as a Redis primary skips them when loading.

use std::io::Write;
use std::path::Path;

use bytes::Bytes;

use super::codec::{put_len, put_string, Reader};
use super::{crc64, load_value, save_value, RDB_VERSION};
use crate::storage::{now_ms, ExecContext, Storage};

/// What an import did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Keys written.
    pub keys: u64,
    /// Keys whose expiry time had passed (not written).
    pub expired: u64,
    /// The function libraries' code (`FUNCTION LOAD` text), loaded by the caller once the
    /// keys are in.
    pub functions: Vec<Bytes>,
    /// Databases that received keys.
    pub databases: std::collections::BTreeSet<u32>,
    /// The file's RDB version.
    pub version: u32,
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("not an RDB file this server reads: {0}")]
    Format(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("storage engine: {0}")]
    Engine(#[from] lsm::Error),
}

/// Keys per write batch.
const BATCH_KEYS: usize = 1000;
/// Bytes per write batch (roughly).
const BATCH_BYTES: usize = 4 << 20;

/// Imports the RDB file at `path` into `storage` (keys replace existing ones), calling
/// `progress(bytes read, file size, keys so far)` every few megabytes.
pub fn import(
    storage: &Storage,
    path: &Path,
    databases: u32,
    limits: crate::storage::ListpackLimits,
    mut progress: impl FnMut(u64, u64, u64),
) -> Result<Imported, ImportError> {
    let io = |source| ImportError::Io { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the file is only read; a concurrent writer could change what we read, which the
    // checksum (checked first) and the parser's bounds checks turn into an error.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let _ = map.advise(memmap2::Advice::Sequential);
    let data: &[u8] = &map;
    let bad = |what: &str, at: usize| ImportError::Format(format!("{what} at byte {at}"));
    if data.len() < 9 || &data[..5] != b"REDIS" {
        return Err(ImportError::Format("no REDIS header".into()));
    }
    let version: u32 =
        std::str::from_utf8(&data[5..9]).ok().and_then(|v| v.parse().ok()).ok_or_else(|| bad("a bad version", 5))?;
    if version == 0 || version > u32::from(RDB_VERSION) {
        return Err(ImportError::Unsupported(format!(
            "RDB version {version} (this server reads versions 1 to {RDB_VERSION}, as Redis 7.0 writes)"
        )));
    }
    // The checksum first: a damaged file must not leave half its keys behind.
    if version >= 5 && data.len() >= 17 && data[data.len() - 9] == 0xff {
        let stored = u64::from_le_bytes(data[data.len() - 8..].try_into().unwrap_or_default());
        if stored != 0 && stored != crc64::crc64(&data[..data.len() - 8]) {
            return Err(ImportError::Format(
                "the file's CRC-64 does not match its contents (damaged or truncated)".into(),
            ));
        }
    }
    let mut r = Reader::new(&data[9..]);
    let at = |r: &Reader<'_>| 9 + (data.len() - 9 - r.remaining());
    let cx = ExecContext::new();
    let mut out = Imported { version, ..Imported::default() };
    let (mut db, mut expire_at) = (0u32, 0u64);
    let mut batch = lsm::WriteBatch::new();
    let mut in_batch = 0;
    let mut last_report = 0;
    let now = now_ms();
    loop {
        let here = at(&r);
        let op = r.u8().map_err(|_| bad("the file ends without an EOF record", here))?;
        let fail = |_| bad("a malformed record", here);
        match op {
            0xfa => {
                r.string().map_err(fail)?;
                r.string().map_err(fail)?;
            }
            0xfb => {
                r.length().map_err(fail)?;
                r.length().map_err(fail)?;
            }
            0xfc => expire_at = u64::from_le_bytes(r.take(8).map_err(fail)?.try_into().unwrap_or_default()),
            0xfd => {
                let secs = u32::from_le_bytes(r.take(4).map_err(fail)?.try_into().unwrap_or_default());
                expire_at = u64::from(secs) * 1000;
            }
            0xfe => {
                let n = r.length().map_err(fail)?;
                if n >= u64::from(databases) {
                    return Err(ImportError::Unsupported(format!(
                        "the file has database {n}; this server has {databases} (raise `databases`)"
                    )));
                }
                db = n as u32;
            }
            0xf9 => {
                r.u8().map_err(fail)?;
            }
            0xf8 => {
                r.length().map_err(fail)?;
            }
            0xf5 => {
                out.functions.push(Bytes::copy_from_slice(&r.string().map_err(fail)?));
            }
            0xf6 | 0xf7 => {
                return Err(ImportError::Unsupported(format!(
                    "record type {op:#x} at byte {here} (module data or pre-release functions)"
                )))
            }
            0xff => break,
            kind => {
                let key = r.string().map_err(fail)?;
                let value = load_value(kind, &mut r).map_err(|_| match kind {
                    6 | 7 => ImportError::Unsupported(format!("key {} holds module data", show(&key))),
                    21 => ImportError::Unsupported(format!(
                        "key {} is a stream in Redis 7.2's form (type 21), newer than this server reads",
                        show(&key)
                    )),
                    _ => bad(&format!("a malformed value (type {kind}) for key {}", show(&key)), here),
                })?;
                if expire_at != 0 && expire_at <= now {
                    out.expired += 1;
                } else {
                    storage.view(&cx, db).write_value(&mut batch, &key, value, expire_at, limits);
                    out.keys += 1;
                    out.databases.insert(db);
                    in_batch += 1;
                }
                expire_at = 0;
                if in_batch >= BATCH_KEYS || batch.size_in_bytes() >= BATCH_BYTES {
                    storage.write(&cx, std::mem::take(&mut batch))?;
                    in_batch = 0;
                }
                let done = at(&r) as u64;
                if done - last_report >= 64 << 20 {
                    last_report = done;
                    progress(done, data.len() as u64, out.keys);
                }
            }
        }
    }
    if !batch.is_empty() {
        storage.write(&cx, batch)?;
    }
    progress(data.len() as u64, data.len() as u64, out.keys);
    Ok(out)
}

fn show(key: &Bytes) -> String {
    format!("'{}'", String::from_utf8_lossy(&key[..key.len().min(64)]))
}

/// A writer that keeps the CRC-64 and the length of what went through it.
struct Summed<W> {
    inner: W,
    crc: u64,
    len: u64,
}

impl<W: Write> Summed<W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.crc = crc64::update(self.crc, bytes);
        self.len += bytes.len() as u64;
        self.inner.write_all(bytes)
    }
}

/// Why a snapshot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("storage engine: {0}")]
    Engine(#[from] lsm::Error),
    #[error("writing the snapshot: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes an RDB file (version 10) of the function libraries (`functions`, their code) and
/// every key of logical databases `0..databases`, as redis-server 7.0 loads it, to `out`, one
/// key at a time; returns its length.
pub fn write_snapshot(
    storage: &Storage,
    cx: &ExecContext,
    databases: u32,
    functions: &[Bytes],
    out: impl Write,
) -> Result<u64, SnapshotError> {
    let mut w = Summed { inner: out, crc: 0, len: 0 };
    let mut buf = format!("REDIS{RDB_VERSION:04}").into_bytes();
    for (k, v) in [("redis-ver", "7.0.15"), ("redis-bits", "64"), ("aof-base", "0")] {
        buf.push(0xfa);
        put_string(&mut buf, k.as_bytes());
        put_string(&mut buf, v.as_bytes());
    }
    for code in functions {
        buf.push(0xf5);
        put_string(&mut buf, code);
    }
    w.put(&buf)?;
    for db in 0..databases {
        let counts = storage.keyspace_counts(db);
        if counts.keys == 0 {
            continue;
        }
        buf.clear();
        buf.push(0xfe);
        put_len(&mut buf, u64::from(db));
        buf.push(0xfb);
        put_len(&mut buf, counts.keys);
        put_len(&mut buf, counts.expires);
        w.put(&buf)?;
        let view = storage.view(cx, db);
        let mut cursor = Bytes::new();
        loop {
            let page = storage.scan(cx, db, &cursor, 1024)?;
            for (key, meta) in &page.keys {
                buf.clear();
                if meta.expire_at_ms != 0 {
                    buf.push(0xfc);
                    buf.extend_from_slice(&meta.expire_at_ms.to_le_bytes());
                }
                // The type byte comes first, then the key, then the value.
                let mut body = Vec::new();
                save_value(&mut body, &view.read_value(meta)?);
                buf.push(body[0]);
                put_string(&mut buf, key);
                buf.extend_from_slice(&body[1..]);
                w.put(&buf)?;
            }
            match page.next {
                Some(next) => cursor = next,
                None => break,
            }
        }
    }
    w.put(&[0xff])?;
    let crc = w.crc;
    w.put(&crc.to_le_bytes())?;
    w.inner.flush()?;
    Ok(w.len)
}
