//! Load generators: `ringmq bench store` drives the embedded store in-process;
//! `ringmq bench produce` / `consume` (and the embedded `ringmq bench`) drive a node over
//! the network with the in-project client.

mod counters;
pub mod latency;
mod produce_run;
pub mod store;
mod threads;
pub mod wire;
