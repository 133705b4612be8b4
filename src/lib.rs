//! ringmq: a RocketMQ-compatible message storage node.
pub mod io;
pub mod store;
