//! `shale-server`: the Redis/Valkey-protocol server on the `lsm` engine.
//!
//! Built so far: the RESP protocol layer ([`resp`]), the configuration loader ([`config`]), the
//! network layer ([`net`]: connections, pipelining, protocol errors, graceful shutdown) and the
//! command table ([`commands`]) with the connection commands. Data commands, the storage layer
//! and the rest of the server core build on these.

pub mod commands;
pub mod config;
pub mod net;
pub mod resp;
pub mod state;
