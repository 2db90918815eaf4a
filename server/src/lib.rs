//! `shale-server`: the Redis/Valkey-protocol server on the `lsm` engine.
//!
//! Layout, in the order a request travels:
//! - [`net`]: the listeners (plain and TLS) and one tokio task per connection (network I/O
//!   only);
//! - [`resp`]: the RESP2/RESP3 request parser and reply encoder;
//! - [`exec`]: where commands run — the executor threads, the one command gate, the session
//!   and its per-command execution context (the execution model is stated there);
//! - [`acl`]: users, their rules and the permission check the gate makes;
//! - [`commands`]: the command table, one file per family;
//! - [`storage`]: Redis types encoded onto the engine, the execution context, key locks,
//!   keyspace counts, WATCH, and the compaction filter;
//! - [`scripting`]: the Lua VM for EVAL scripts and FUNCTION libraries, Redis's sandbox and
//!   libraries, and how a script runs isolated;
//! - [`services`]: what runs beside commands — the expiry cycle, blocked clients, the pub/sub
//!   hub, the client registry, named LOCKs, SCAN cursors;
//! - [`config`] and [`state`]: settings and the state every connection shares.

pub mod acl;
pub mod commands;
pub mod config;
pub mod exec;
pub mod geohash;
pub mod glob;
pub mod hyperloglog;
pub mod long_double;
pub mod net;
pub mod num;
pub mod rdb;
pub mod replication;
pub mod resp;
pub mod scripting;
pub mod services;
pub mod state;
pub mod storage;
