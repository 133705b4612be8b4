//! The requests clients send in their normal work: producing, consuming (pull, orderly
//! locks, offsets, heartbeats, assignment) and looking messages up. One file per request
//! family; each file's `//!` names its request codes, header fields and answers.
//!
//! - [`send`]: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).
//! - [`send_back`]: CONSUMER_SEND_MSG_BACK (36), retries and the dead-letter queue.
//! - [`pull`]: PULL_MESSAGE (11), LITE_PULL_MESSAGE (361), with long polling.
//! - [`read_from_slave`]: a pull's `suggestWhichBrokerId`, and a slave's answer past its end.
//! - [`query`]: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33).
//! - [`offsets`]: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29),
//!   GET_EARLIEST_MSG_STORETIME (32).
//! - [`consumer_offset_requests`]: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
//!   and the check a pull's `commitOffset` shares with them.
//! - [`consumers`]: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
//!   and the HEART_BEAT body's types.
//! - [`assignment`]: QUERY_ASSIGNMENT (400), server-side queue assignment.
//! - [`lock_requests`]: LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), for orderly consumers.
//! - [`request_mode_requests`]: SET_MESSAGE_REQUEST_MODE (401), pull or pop per group.
//!
//! What this folder owns: the meaning of these requests, the header and body checks, and
//! the answers (codes, remarks, header fields) clients see. It owns no state of its own:
//! what a request changes lives in [`super::tables`] (persisted) or [`super::state`] (in
//! memory) or in the shard's store.
//!
//! May import: [`super::Broker`] and the broker's shared helpers in `broker/mod.rs`,
//! [`super::naming`], [`super::tables`], [`super::state`], the engines ([`super::delay`],
//! [`super::timer`], [`super::pop`]: a send may be delayed or timed), and the crate's
//! `store`, `remoting`, `shard` and `metrics`. Not [`super::admin`] (admin requests build
//! on these, not the other way round) nor [`super::dispatch`].

pub mod assignment;
pub mod consumer_offset_requests;
pub mod consumers;
pub mod lock_requests;
pub mod offsets;
pub mod pull;
pub mod query;
pub mod read_from_slave;
pub mod request_mode_requests;
pub mod send;
pub mod send_back;
