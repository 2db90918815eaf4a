//! `shale-server`: the Redis/Valkey-protocol server on the `lsm` engine.
//!
//! Built so far: the RESP protocol layer ([`resp`]). The network loop, command table, storage
//! layer and configuration are the work of the server-core issue and land on top of it.

pub mod resp;
