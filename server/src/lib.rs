//! `shale-server`: the Redis/Valkey-protocol server on the `lsm` engine.
//!
//! Built so far: the RESP protocol layer ([`resp`]) and the configuration loader ([`config`]).
//! The network loop, command table and storage layer are the work of the server-core issue and
//! land on top of them.

pub mod config;
pub mod resp;
