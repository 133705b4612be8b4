//! The admin requests (`ringmq admin`, mqadmin, the dashboard): creating and listing topics
//! and subscription groups, reading and changing the broker's settings, the node's figures,
//! consumer progress and connections, and moving committed offsets. Answered in Java's JSON
//! shapes ([`admin_json`]) with the whole node's view: [`fan_out`] asks every shard for its
//! part.
//!
//! - [`topic_requests`]: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21),
//!   DELETE_TOPIC_IN_BROKER (215); [`topic_config_request`]: GET_TOPIC_CONFIG (351).
//! - [`subscription_group_requests`]: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
//!   GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207).
//! - [`broker_config_requests`]: GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25).
//! - [`runtime_info`]: GET_BROKER_RUNTIME_INFO (28); [`topic_stats`]: GET_TOPIC_STATS_INFO
//!   (202); [`consume_stats`]: GET_CONSUME_STATS (208); [`broker_consume_stats`]:
//!   GET_BROKER_CONSUME_STATS (317); [`stats_data`]: VIEW_BROKER_STATS_DATA (315, no stats
//!   items kept: refused as Java refuses an item it lacks).
//! - [`consumer_connections`]: GET_CONSUMER_CONNECTION_LIST (203); [`producer_connections`]:
//!   GET_PRODUCER_CONNECTION_LIST (204); [`consume_by_who`]: QUERY_TOPIC_CONSUME_BY_WHO
//!   (300); [`consumer_running_info`]: GET_CONSUMER_RUNNING_INFO (307), relayed to the
//!   consumer and back.
//! - [`ha_status`]: GET_BROKER_HA_STATUS (907), the node's replication as
//!   `HARuntimeInfo`, one connection entry per slave per shard.
//! - [`reset_offset`]: INVOKE_BROKER_TO_RESET_OFFSET (222), with RESET_CONSUMER_CLIENT_OFFSET
//!   (220) to the live clients; [`clone_offset`]: CLONE_GROUP_OFFSET (314).
//!
//! What this folder owns: the admin requests' meaning and answers, Java's JSON shapes for
//! them, and the fan-out that gathers a node-wide answer from every shard. No state: what
//! they read and change is in [`super::tables`], [`super::state`] and the stores.
//!
//! May import: [`super::Broker`] and `broker/mod.rs`'s helpers, [`super::naming`],
//! [`super::tables`], [`super::state`], [`super::requests`] (the fan-out marker, shared
//! checks) and the engines (a reset moves the POP state too). Nothing in the broker
//! imports this folder but [`super::dispatch`].

pub mod admin_json;
pub mod broker_config_requests;
pub mod broker_consume_stats;
pub mod clone_offset;
pub mod consume_by_who;
pub mod consume_stats;
pub mod consumer_connections;
pub mod consumer_running_info;
pub mod fan_out;
pub mod ha_status;
pub mod producer_connections;
pub mod reset_offset;
pub mod runtime_info;
pub mod stats_data;
pub mod subscription_group_requests;
pub mod topic_config_request;
pub mod topic_requests;
pub mod topic_stats;
