//! The tools: programs built on the library, run from the `ringmq` binary.
//!
//! - [`admin`]: `ringmq admin`, mqadmin's everyday commands against a running node.
//! - [`mod@bench`]: the load generators (`ringmq bench`, `bench produce|consume`,
//!   `bench store`, `bench delayed|timers|send-back`).
//!
//! A tool uses the library as any program would (the client, the wire codec, the store,
//! an in-process node); nothing in the library imports a tool. That is one of the floors
//! `tests/alone/module_layering.rs` checks: the tools sit above every module of the
//! library, so a tool can change or go without the node noticing. (The in-project
//! client, `crate::client`, is a tool's library too and moves here later.)

pub mod admin;
pub mod bench;
