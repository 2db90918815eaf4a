//! The Redis serialization protocol: parsing requests, encoding replies.
//!
//! Requests arrive as RESP arrays of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or as
//! inline commands (`GET k\r\n`, split like `redis-cli` input with quotes and escapes). The
//! parser works in place on the connection's buffer and hands out arguments as [`bytes::Bytes`]
//! slices of it, without copying. Replies are [`Reply`] values encoded for RESP2 or, after
//! `HELLO 3`, RESP3 (maps, sets, doubles, nulls, booleans, pushes), with RESP2 fallbacks as Redis
//! makes them. A range read's many bulk strings (LRANGE, SMEMBERS, HGETALL, ZRANGE, …) are
//! framed into one buffer as the engine hands them out ([`BulkArray`]), not built as a `Reply`
//! each.

mod reply;
mod request;

pub use reply::{format_double, format_double_precision, BulkArray, Protocol, Reply};
pub use request::{parse_int, parse_request, split_args, Limits, ProtocolError};
