//! `MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw] [AUTH2 user pw] [KEYS k…]`:
//! each key is sent as a RESTORE (DUMP payload, remaining TTL) to another server (Redis or
//! Shale) over one connection; keys the target acknowledged are then deleted here unless COPY.
//! The connection is opened for the call and closed after it (no socket cache: INFO's
//! `migrate_cached_sockets` stays 0). It blocks only the executor thread running the command.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;

use super::{get, parse_i64, NOT_INTEGER};
use crate::commands::{engine_error, spec, CommandSpec, Session};
use crate::rdb;
use crate::resp::Reply;
use crate::services::notifications::GENERIC;
use crate::storage::now_ms;

pub(in crate::commands) static COMMANDS: &[CommandSpec] = &[spec("migrate", -6, &["write"], (3, 3, 1), migrate)];

/// A RESP command as bytes.
fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn migrate(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut copy, mut replace) = (false, false);
    let mut auth: Option<(Option<Bytes>, Bytes)> = None;
    let mut keys: Vec<Bytes> = vec![args[3].clone()];
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - j - 1;
        match args[j].to_ascii_lowercase().as_slice() {
            b"copy" => copy = true,
            b"replace" => replace = true,
            b"auth" if more >= 1 => {
                auth = Some((None, args[j + 1].clone()));
                j += 1;
            }
            b"auth2" if more >= 2 => {
                auth = Some((Some(args[j + 1].clone()), args[j + 2].clone()));
                j += 2;
            }
            b"keys" => {
                if !args[3].is_empty() {
                    return Reply::error(
                        "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                    );
                }
                keys = args[j + 1..].to_vec();
                break;
            }
            _ => return Reply::error("ERR syntax error"),
        }
        j += 1;
    }
    let (Some(timeout), Some(db)) = (parse_i64(&args[5]), parse_i64(&args[4])) else {
        return Reply::error(NOT_INTEGER);
    };
    let timeout = Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 });
    let state = std::sync::Arc::clone(&s.state);
    let guard = state.storage.lock(&s.exec, s.db, keys.iter().map(|k| &k[..]));
    // The keys that exist here, with their payloads and remaining TTLs.
    let view = state.storage.view(&s.exec, s.db);
    let mut found = Vec::new();
    for key in &keys {
        let meta = match get(s, s.db, key) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => return e,
        };
        let value = match view.read_value(&meta) {
            Ok(v) => v,
            Err(e) => return engine_error(e),
        };
        let ttl = if meta.expire_at_ms == 0 { 0 } else { meta.expire_at_ms.saturating_sub(now_ms()).max(1) };
        found.push((key.clone(), ttl, rdb::dump(&value)));
    }
    if found.is_empty() {
        return Reply::Simple("NOKEY".into());
    }
    let mut req = Vec::new();
    if let Some((user, pass)) = &auth {
        match user {
            Some(u) => command(&mut req, &[b"AUTH", u, pass]),
            None => command(&mut req, &[b"AUTH", pass]),
        }
    }
    command(&mut req, &[b"SELECT", db.to_string().as_bytes()]);
    for (key, ttl, payload) in &found {
        let ttl = ttl.to_string();
        let mut restore: Vec<&[u8]> = vec![b"RESTORE", key, ttl.as_bytes(), payload];
        if replace {
            restore.push(b"REPLACE");
        }
        command(&mut req, &restore);
    }
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    let port = String::from_utf8_lossy(&args[2]).into_owned();
    let connect = || -> std::io::Result<TcpStream> {
        let addr = format!("{host}:{port}").to_socket_addrs()?.next().ok_or(std::io::ErrorKind::NotFound)?;
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(stream)
    };
    let Ok(mut stream) = connect() else {
        return Reply::error("IOERR error or timeout connecting to the client");
    };
    if stream.write_all(&req).is_err() {
        return Reply::error("IOERR error or timeout writing to target instance");
    }
    // One reply line per command sent: AUTH, SELECT, then a RESTORE per key.
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut read = |reader: &mut BufReader<TcpStream>| -> Option<String> {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 => Some(line.trim_end().to_string()),
            _ => None,
        }
    };
    let mut first_error: Option<String> = None;
    for _ in 0..usize::from(auth.is_some()) + 1 {
        match read(&mut reader) {
            Some(l) if l.starts_with('-') => {
                first_error.get_or_insert(l);
            }
            Some(_) => {}
            None => return Reply::error("IOERR error or timeout reading to target instance"),
        }
    }
    let mut moved = Vec::new();
    let mut socket_error = false;
    for (key, _, _) in &found {
        match read(&mut reader) {
            Some(l) if l.starts_with('-') || first_error.is_some() => {
                if l.starts_with('-') {
                    first_error.get_or_insert(l);
                }
            }
            Some(_) => moved.push(key.clone()),
            None => {
                socket_error = true;
                break;
            }
        }
    }
    let done = match &first_error {
        Some(e) => Reply::error(format!("ERR Target instance replied with error: {}", &e[1..])),
        None if socket_error => Reply::error("IOERR error or timeout reading to target instance"),
        None => Reply::ok(),
    };
    if copy || moved.is_empty() {
        return done;
    }
    // The keys the target acknowledged leave this server.
    let mut b = lsm::WriteBatch::new();
    for key in &moved {
        view.delete_meta(&mut b, key);
    }
    if let Err(e) = state.storage.write(&s.exec, b) {
        return engine_error(e);
    }
    drop(guard);
    for key in &moved {
        s.notify(GENERIC, "del", key);
    }
    done
}
