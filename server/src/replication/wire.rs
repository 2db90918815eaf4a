//! The replication stream after `PSYNC`'s answer line: RESP arrays of bulk strings, so any
//! RESP reader can frame it.
//!
//! ```text
//! FILE <name> <size>      a checkpoint file follows, as CHUNK frames totalling <size> bytes
//! CHUNK <bytes>           up to 1 MiB of the current file
//! CHECKPOINT <seq>        every file was sent: install them; the stream goes on from <seq>+1
//! BATCH <payload>         one WAL record: an lsm WriteBatch (its header holds its sequence)
//! PUBLISH <channel> <msg> a message published on the primary
//! PING                    heartbeat, once a second when there is nothing else to send
//! ```
//! The replica answers `REPLCONF ACK <seq>` (its last applied sequence) after applying what
//! arrived, and at least once a second.

use bytes::{BufMut, Bytes, BytesMut};

/// Largest CHUNK the primary sends.
pub const CHUNK: usize = 1 << 20;

/// Appends a RESP array of bulk strings.
pub fn frame(out: &mut BytesMut, parts: &[&[u8]]) {
    out.reserve(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.put_u8(b'*');
    out.put_slice(parts.len().to_string().as_bytes());
    out.put_slice(b"\r\n");
    for p in parts {
        out.put_u8(b'$');
        out.put_slice(p.len().to_string().as_bytes());
        out.put_slice(b"\r\n");
        out.put_slice(p);
        out.put_slice(b"\r\n");
    }
}

/// A PUBLISH frame.
pub fn publish(channel: &[u8], message: &[u8]) -> Bytes {
    let mut out = BytesMut::new();
    frame(&mut out, &[b"PUBLISH", channel, message]);
    out.freeze()
}

/// `REPLCONF ACK <seq>`.
pub fn ack(seq: u64) -> Bytes {
    let mut out = BytesMut::new();
    frame(&mut out, &[b"REPLCONF", b"ACK", seq.to_string().as_bytes()]);
    out.freeze()
}

/// A frame the replica received.
#[derive(Debug)]
pub enum Frame {
    /// Start of a checkpoint file.
    File { name: String, size: u64 },
    /// Part of the current file.
    Chunk(Bytes),
    /// All files sent; install them (sequence of the checkpoint).
    Checkpoint(u64),
    /// One WAL record.
    Batch(Bytes),
    /// A published message.
    Publish(Bytes, Bytes),
    /// Heartbeat.
    Ping,
    /// `REPLCONF GETACK`: answer with an ACK now.
    GetAck,
}

impl Frame {
    /// The frame a parsed request spells; an error names what was wrong.
    pub fn parse(args: Vec<Bytes>) -> Result<Frame, String> {
        let name = args.first().map(|a| String::from_utf8_lossy(a).to_ascii_uppercase()).unwrap_or_default();
        let arg = |i: usize| args.get(i).cloned().ok_or_else(|| format!("{name} frame without argument {i}"));
        let number = |i: usize| -> Result<u64, String> {
            let a = arg(i)?;
            std::str::from_utf8(&a).ok().and_then(|s| s.parse().ok()).ok_or_else(|| format!("{name} frame: bad number"))
        };
        Ok(match name.as_str() {
            "FILE" => {
                let file = arg(1)?;
                let name = String::from_utf8(file.to_vec()).map_err(|_| "FILE frame: name is not UTF-8".to_string())?;
                // Only plain names: a file lands in the replica's incoming directory.
                if name.is_empty() || name.contains('/') || name.starts_with('.') {
                    return Err(format!("FILE frame: refusing file name {name:?}"));
                }
                Frame::File { name, size: number(2)? }
            }
            "CHUNK" => Frame::Chunk(arg(1)?),
            "CHECKPOINT" => Frame::Checkpoint(number(1)?),
            "BATCH" => Frame::Batch(arg(1)?),
            "PUBLISH" => Frame::Publish(arg(1)?, arg(2)?),
            "PING" => Frame::Ping,
            "REPLCONF" if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"GETACK")) => Frame::GetAck,
            _ => return Err(format!("unexpected replication frame {name:?}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{parse_request, Limits};

    #[test]
    fn frames_round_trip_through_the_resp_parser() {
        let mut out = BytesMut::new();
        frame(&mut out, &[b"FILE", b"000012.sst", b"4096"]);
        frame(&mut out, &[b"BATCH", b"\x00\x01\r\n\x02"]);
        out.extend_from_slice(&publish(b"ch", b"hi"));
        let limits = Limits::default();
        let mut frames = Vec::new();
        while let Some(args) = parse_request(&mut out, &limits).unwrap() {
            frames.push(Frame::parse(args).unwrap());
        }
        assert!(matches!(&frames[0], Frame::File { name, size: 4096 } if name == "000012.sst"));
        assert!(matches!(&frames[1], Frame::Batch(p) if &p[..] == b"\x00\x01\r\n\x02"));
        assert!(matches!(&frames[2], Frame::Publish(c, m) if &c[..] == b"ch" && &m[..] == b"hi"));
        let evil = vec![Bytes::from_static(b"FILE"), Bytes::from_static(b"../x"), Bytes::from_static(b"1")];
        assert!(Frame::parse(evil).is_err());
    }
}
