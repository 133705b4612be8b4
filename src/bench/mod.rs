//! Load generators: `ringmq bench store` drives the embedded store in-process.

pub mod latency;
pub mod store;
