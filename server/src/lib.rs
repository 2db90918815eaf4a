//! `shale-server`: the Redis/Valkey-protocol server on the `lsm` engine.
//!
//! Built so far: the RESP protocol layer ([`resp`]), the configuration loader ([`config`]), the
//! network layer ([`net`]: connections, pipelining, protocol errors, graceful shutdown) and the
//! command table ([`commands`]), the keyspace on the engine ([`storage`]), connection commands
//! and the first string and keyspace commands.

pub mod blocking;
pub mod clients;
pub mod commands;
pub mod config;
pub mod cursors;
pub mod expire;
pub mod glob;
pub mod locks;
pub mod net;
pub mod num;
pub mod pubsub;
pub mod resp;
pub mod state;
pub mod storage;
