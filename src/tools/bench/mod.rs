//! Load generators: `ringmq bench store` drives the embedded store in-process;
//! `ringmq bench produce` / `consume` (and the embedded `ringmq bench`) drive a node over
//! the network with the in-project client; `ringmq bench delayed`, `timers` and
//! `send-back` measure a node's delay levels, timer messages and CONSUMER_SEND_MSG_BACK
//! (`bench/delivery.rs`); `ringmq bench transactions` measures transactional sends and,
//! with `--pending`, the node's check-backs of undecided halves (`bench/transactions.rs`,
//! `bench/tx_pending.rs`).

mod counters;
pub mod delivery;
pub mod latency;
pub mod lateness;
mod produce_run;
pub mod store;
mod threads;
pub mod transactions;
mod tx_checker;
pub mod tx_pending;
pub mod tx_wire;
pub mod wire;

/// Why a pull body could not be read record by record.
#[derive(Debug, thiserror::Error)]
pub enum PullBodyError {
    /// A pull body holds records only; the end-of-segment marker has no place in it.
    #[error("a blank record in a pull body")]
    Blank,
    #[error("{0}")]
    Record(#[from] crate::store::record::DecodeError),
}
