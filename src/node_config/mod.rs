//! Node settings for `ringmq serve`: the key table, three sources, validation, and the
//! per-shard settings derived from them (D3, D12, D13).
//!
//! # Keys
//!
//! Every key, with its broker.conf spelling, default, range and meaning, is listed in
//! `docs/configuration.md`, which is rendered from the key table (`keys.rs`, printed by
//! `ringmq serve --help-keys`; a test fails when the file and the table differ). The
//! table is the one place a default or a key's range is written: [`NodeConfig::default`]
//! applies every key's default through the key's own parser, [`NodeConfig::validate`]
//! runs every key's range check and then the cross-key relations ([`relations`]), and
//! the store, broker and connection settings are derived by the pure functions of
//! [`mod@derive`].
//!
//! # Sources
//!
//! Settings are read from up to three sources; a later one overrides an earlier one:
//!
//! 1. a TOML file: top-level `key = value` pairs, keys in snake_case (the table's first
//!    column). Integers are TOML integers, flags TOML booleans, everything else a string.
//! 2. a RocketMQ `broker.conf`: Java properties (`key=value` or `key: value` lines, `#` and
//!    `!` comments, blank lines, whitespace around the separator ignored, a trailing `\`
//!    continues a line), keys in camelCase (the second column). Settings RocketMQ lacks have
//!    a camelCase name of ringmq's own, marked *(ringmq)*; some keys accept a second
//!    spelling (`mappedFileSizeCommitLog`, RocketMQ 5's, for `mapedFileSizeCommitLog`).
//! 3. command-line overrides, `key=value` strings naming a key in either style.
//!
//! [`NodeConfig::load`] applies them in that order and then [`NodeConfig::validate`]s the
//! result; [`ConfigLoader`] does the same one source at a time. Every mistake stops the load
//! with a [`ConfigError`] that reads `<source>: <key>: <what is wrong>`, the source being
//! the file's path, `command line`, or `defaults`.
//!
//! A key that is in no column of the table is an error, with two exceptions for files
//! written for RocketMQ: keys ringmq recognises but does not act on (`brokerIP2`,
//! `haListenPort`, thread-pool sizes, ...; see [`IGNORED_ROCKETMQ_KEYS`]) only log a
//! warning, and keys whose meaning ringmq cannot honour (`storePathCommitLog`,
//! `enableDLegerCommitLog=true`, ...) are errors that say why.
//!
//! # Store layout
//!
//! Each shard owns one store (D3) in its own directory under the root:
//!
//! ```text
//! <store_path_root_dir>/
//!   shard-0/      commitlog/, consumequeue/<topic>/<queueId>/, checkpoint, abort, ...
//!   shard-1/
//!   ...
//!   shard-<shards - 1>/
//! ```
//!
//! Inside `shard-<n>` the layout is RocketMQ's (`rocketmq-reference.md` section 0), so a
//! single-shard store can be inspected with the tools that read one. Physical offsets of
//! shard n start at n << 56 (D4). Changing `shards` on an existing root is not supported.

pub mod derive;
pub mod error;
mod key;
mod keys;
pub mod live;
mod live_config;
mod loader;
mod parse;
pub mod relations;
pub mod render;
mod rocketmq;
mod suggest;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{FlushMode, StoreConfig};
use crate::io::IoChoice;

pub use derive::{broker_config, connection_limits, http_limits, stats_caps, store_config};
pub use loader::ConfigLoader;
pub use rocketmq::IGNORED_ROCKETMQ_KEYS;

/// Most shards a node runs (the shard id takes 8 bits of an offset; 64 leaves room).
pub const MAX_SHARDS: u8 = 64;
/// Room a remoting frame needs beyond the largest body, for its header.
pub const FRAME_HEADER_ROOM: usize = 64 * 1024;
/// Size of one ConsumeQueue entry.
pub const CQ_ENTRY_SIZE: u64 = 20;
/// `brokerId=-1`, RocketMQ's spelling for an id the controllers assign (controller mode
/// only; the relations refuse it elsewhere). Never a real id: ids are at most `i64::MAX`.
pub const CONTROLLER_ASSIGNED_ID: u64 = u64::MAX;

pub use crate::config::BrokerRole;

/// `metricsExporterType`: how the node's metrics leave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsExporter {
    /// The Prometheus text endpoint on `metrics_port` (ringmq's default, D15).
    Prom,
    /// No metrics endpoint; the figures are still kept (GET_BROKER_RUNTIME_INFO, the
    /// admin tool read them).
    Disable,
}

impl MetricsExporter {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsExporter::Prom => "PROM",
            MetricsExporter::Disable => "DISABLE",
        }
    }
}

impl std::str::FromStr for MetricsExporter {
    type Err = error::ValueError;
    fn from_str(text: &str) -> Result<Self, error::ValueError> {
        match text {
            "PROM" => Ok(MetricsExporter::Prom),
            "DISABLE" => Ok(MetricsExporter::Disable),
            "OTLP_GRPC" | "LOG" => Err(error::ValueError::UnsupportedExporter {
                given: text.to_string(),
            }),
            other => Err(error::ValueError::refused(
                other,
                "is not one of PROM, DISABLE",
            )),
        }
    }
}

/// A configuration mistake: where it was made, which key, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {}{message}", key_prefix(key))]
pub struct ConfigError {
    /// The file's path, `command line`, `defaults`, or `config` (from [`NodeConfig::validate`]).
    pub origin: String,
    /// The key as the source spells it; empty for a mistake that is not about one key
    /// (an unreadable file, a TOML syntax error).
    pub key: String,
    pub message: String,
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

impl ConfigError {
    fn new(origin: &str, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            origin: origin.to_string(),
            key: key.to_string(),
            message: message.into(),
        }
    }
}

/// Everything `ringmq serve` needs to start. `docs/configuration.md` describes every key.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    pub broker_name: String,
    pub broker_cluster_name: String,
    pub broker_id: u64,
    pub broker_role: BrokerRole,
    pub broker_ip: IpAddr,
    /// `brokerIP2`: the address advertised for the HA port; `None`: `broker_ip`.
    pub broker_ip2: Option<IpAddr>,
    pub bind_address: IpAddr,
    pub listen_port: u16,
    pub namesrv_port: u16,
    pub metrics_port: u16,
    /// `metricsExporterType`: serve the Prometheus endpoint or none.
    pub metrics_exporter_type: MetricsExporter,
    /// Connections the metrics endpoint holds at once.
    pub metrics_max_connections: usize,
    /// Time a metrics connection may take to send its request head.
    pub metrics_idle_timeout: Duration,
    /// Topics each shard keeps per-topic figures for.
    pub metrics_max_topics: usize,
    /// (group, topic) pairs each shard keeps per-group figures for.
    pub metrics_max_groups: usize,
    pub namesrv_addr: Option<String>,
    /// `registerNameServerPeriod`: how often the broker registers with each name server.
    pub register_name_server_period: Duration,
    /// `registerBrokerTimeoutMills`: how long one registration may take.
    pub register_broker_timeout_mills: Duration,
    /// `haListenPort`; `None` is `listen_port` + 1.
    pub ha_listen_port: Option<u16>,
    /// `haMasterAddress`: a slave's master HA address, else learned from the name servers.
    pub ha_master_address: Option<String>,
    pub ha_send_heartbeat_interval: Duration,
    pub ha_housekeeping_interval: Duration,
    pub ha_transfer_batch_size: u32,
    /// `haSendBatchBytes`: frames a master gathers into one write to a slave.
    pub ha_send_batch_bytes: usize,
    pub ha_slave_fallbehind_max: u64,
    /// `haSlaveBatchBytesMax`: the most a slave appends in one step, and reads ahead.
    pub ha_slave_batch_bytes_max: usize,
    pub sync_from_last_file: bool,
    /// `enableControllerMode`: the controllers of `controller_addr` choose this broker's
    /// role and epoch (D18).
    pub enable_controller_mode: bool,
    /// `allAckInSyncStateSet`: in controller mode a master acknowledges once every member
    /// of the SyncStateSet holds the message, whatever `brokerRole` says.
    pub all_ack_in_sync_state_set: bool,
    /// `controllerAddr`: the controllers, `host:port` separated by `;`.
    pub controller_addr: Option<String>,
    /// `brokerHeartbeatInterval`: how often the broker beats to the controller leader.
    pub broker_heartbeat_interval: Duration,
    /// `controllerHeartBeatTimeoutMills`: how long the controller waits for a beat before
    /// it counts the broker dead.
    pub controller_heart_beat_timeout_mills: Duration,
    /// `syncBrokerMetadataPeriod`: how often the broker asks the controller for its
    /// group's master and SyncStateSet (besides the controller's notices).
    pub sync_broker_metadata_period: Duration,
    /// `checkSyncStateSetPeriod`: how often a master looks at which slaves caught up.
    pub check_sync_state_set_period: Duration,
    /// `haMaxTimeSlaveNotCatchup`: a SyncStateSet member behind this long is removed.
    pub ha_max_time_slave_not_catchup: Duration,
    /// `slaveReadEnable`: cold pulls are sent to a slave.
    pub slave_read_enable: bool,
    /// `slaveMetadataSyncInterval`: how often a slave copies its master's tables.
    pub slave_metadata_sync_interval: Duration,
    /// `slaveMetadataRequestTimeout`: longest one request of the table copy may take.
    pub slave_metadata_request_timeout: Duration,
    pub store_path_root_dir: PathBuf,
    pub shards: u8,
    /// Pin shard n to the n-th CPU the process may use (best effort, logged when refused).
    pub pin_shard_threads: bool,
    pub io_backend: IoChoice,
    /// `networkIo`: epoll or the shard's network ring for accepted connections.
    pub network_io: crate::net::NetworkIo,
    pub network_ring_entries: u32,
    pub network_recv_buffers: u16,
    pub network_recv_buffer_bytes: u32,
    pub network_send_queue_bytes: usize,
    pub flush_disk_type: FlushMode,
    pub maped_file_size_commit_log: u64,
    pub maped_file_size_consume_queue: u64,
    pub flush_interval_commit_log: Duration,
    pub flush_commit_log_least_pages: u64,
    pub flush_commit_log_thorough_interval: Duration,
    pub sync_flush_timeout: Duration,
    /// `slaveTimeout`: how long a SYNC_MASTER put waits for a replica's confirmation.
    pub slave_timeout: Duration,
    pub flush_interval_consume_queue: Duration,
    pub max_message_size: usize,
    pub max_transfer_count: u32,
    pub max_transfer_bytes: usize,
    /// `accessMessageInMemoryMaxRatio`, percent of RAM.
    pub access_message_in_memory_max_ratio: u8,
    pub max_batch_bytes: usize,
    /// SYNC_FLUSH: longest a batch waits for the producers the last fsync answered.
    pub group_commit_max_wait: Duration,
    /// SYNC_FLUSH: zeros a batch write adds past its end (`store/append.rs`).
    pub sync_zero_ahead_bytes: u64,
    pub max_pending_puts: usize,
    pub message_index_enable: bool,
    pub max_hash_slot_num: u32,
    pub max_index_num: u32,
    pub auto_create_topic_enable: bool,
    pub auto_create_subscription_group: bool,
    pub max_subscription_groups: usize,
    pub default_topic_queue_nums: u32,
    /// `fileReservedTime`, configured in whole hours.
    pub file_reserved_time: Duration,
    /// `deleteWhen`: hours of the day, ascending, without repeats.
    pub delete_when: Vec<u8>,
    pub disk_max_used_space_ratio: u8,
    pub disk_space_clean_forcibly_ratio: u8,
    pub disk_space_warning_level_ratio: u8,
    pub delete_file_batch_max: usize,
    pub clean_resource_interval: Duration,
    /// `retentionProtectedGroups`: validated group names, in the order given, without
    /// repeats; empty for none.
    pub retention_protected_groups: Vec<String>,
    /// `messageDelayLevel`: the delay of each level, level 1 first.
    pub message_delay_level: crate::broker::delay::DelayLevels,
    /// `flushDelayOffsetInterval`: how often moved delay cursors are written.
    pub flush_delay_offset_interval: Duration,
    pub timer_wheel_enable: bool,
    pub timer_max_delay_sec: u64,
    /// `timerMaxPending`, node-wide.
    pub timer_max_pending: u64,
    pub timer_memory_entries: usize,
    /// `scheduleDeliveryWindow`: deliveries each scheduler keeps in flight.
    pub schedule_delivery_window: usize,
    pub reject_transaction_message: bool,
    pub transaction_time_out: Duration,
    pub transaction_check_interval: Duration,
    pub transaction_check_max: u32,
    pub max_connections: usize,
    pub max_heartbeat_subscriptions: usize,
    pub max_subscription_expression_bytes: usize,
    pub max_client_registrations: usize,
    pub max_parked_pulls: usize,
    pub max_batch_ack_entries: usize,
    pub max_batch_ack_bitset_bytes: usize,
    pub channel_expired_timeout: Duration,
    pub client_sweep_interval: Duration,
    /// `clientCallTimeout`: longest the broker waits for a client to answer a request it
    /// relays (GET_CONSUMER_RUNNING_INFO).
    pub client_call_timeout: Duration,
    pub max_frame_size: usize,
    pub shard_mailbox_capacity: usize,
    pub max_requests_in_flight_per_connection: usize,
    pub max_parked_requests_per_connection: usize,
    pub max_queued_response_bytes_per_connection: usize,
    pub max_requests_in_flight: usize,
    pub max_queued_response_bytes: usize,
    pub frame_timeout: Duration,
    /// Configured in whole seconds, as RocketMQ's key is.
    pub server_channel_max_idle_time_seconds: Duration,
    pub max_partial_frame_bytes: usize,
    /// `serverSocketSndBufSize`: SO_SNDBUF of each accepted connection; 0 keeps the
    /// system's (autotuned) size.
    pub server_socket_snd_buf_size: usize,
    /// How pulled records' file bodies are sent (`bodySend`).
    pub body_send: crate::server::body_send::BodySend,
    /// Connection warnings a shard logs per `connection_warn_interval` before it only
    /// counts them.
    pub connection_warn_burst: u32,
    pub connection_warn_interval: Duration,
}

impl Default for NodeConfig {
    /// Every key's default from the key table, applied through the key's own parser.
    fn default() -> NodeConfig {
        let mut config = NodeConfig::unset();
        for key in keys::KEYS {
            key.apply_default(&mut config);
        }
        config
    }
}

/// One shard per available CPU, at most [`MAX_SHARDS`].
pub fn default_shards() -> u8 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(MAX_SHARDS as usize) as u8)
        .unwrap_or(1)
}

impl NodeConfig {
    /// Placeholders that [`NodeConfig::default`] overwrites key by key; not a set of
    /// defaults (a test checks that every field is a key). A default this machine cannot
    /// work out (no `$HOME` for the store root) stays empty, and `validate` says so.
    #[allow(
        clippy::too_many_lines,
        reason = "one placeholder per field of a 95-field struct literal; cutting it would split the fields, not steps"
    )]
    fn unset() -> NodeConfig {
        NodeConfig {
            broker_name: String::new(),
            broker_cluster_name: String::new(),
            broker_id: 0,
            broker_role: BrokerRole::AsyncMaster,
            broker_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            broker_ip2: None,
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            listen_port: 0,
            namesrv_port: 0,
            metrics_port: 0,
            metrics_exporter_type: MetricsExporter::Prom,
            metrics_max_connections: 0,
            metrics_idle_timeout: Duration::ZERO,
            metrics_max_topics: 0,
            metrics_max_groups: 0,
            namesrv_addr: None,
            register_name_server_period: Duration::ZERO,
            register_broker_timeout_mills: Duration::ZERO,
            ha_listen_port: None,
            ha_master_address: None,
            ha_send_heartbeat_interval: Duration::ZERO,
            ha_housekeeping_interval: Duration::ZERO,
            ha_transfer_batch_size: 0,
            ha_send_batch_bytes: 0,
            ha_slave_fallbehind_max: 0,
            ha_slave_batch_bytes_max: 0,
            sync_from_last_file: false,
            enable_controller_mode: false,
            all_ack_in_sync_state_set: false,
            controller_addr: None,
            broker_heartbeat_interval: Duration::ZERO,
            controller_heart_beat_timeout_mills: Duration::ZERO,
            sync_broker_metadata_period: Duration::ZERO,
            check_sync_state_set_period: Duration::ZERO,
            ha_max_time_slave_not_catchup: Duration::ZERO,
            slave_read_enable: false,
            slave_metadata_sync_interval: Duration::ZERO,
            slave_metadata_request_timeout: Duration::ZERO,
            store_path_root_dir: PathBuf::new(),
            shards: 0,
            pin_shard_threads: false,
            io_backend: IoChoice::Auto,
            network_io: crate::net::NetworkIo::Epoll,
            network_ring_entries: 0,
            network_recv_buffers: 0,
            network_recv_buffer_bytes: 0,
            network_send_queue_bytes: 0,
            flush_disk_type: FlushMode::Async,
            maped_file_size_commit_log: 0,
            maped_file_size_consume_queue: 0,
            flush_interval_commit_log: Duration::ZERO,
            flush_commit_log_least_pages: 0,
            flush_commit_log_thorough_interval: Duration::ZERO,
            sync_flush_timeout: Duration::ZERO,
            slave_timeout: Duration::ZERO,
            flush_interval_consume_queue: Duration::ZERO,
            max_message_size: 0,
            max_transfer_count: 0,
            max_transfer_bytes: 0,
            access_message_in_memory_max_ratio: 0,
            max_batch_bytes: 0,
            group_commit_max_wait: Duration::ZERO,
            sync_zero_ahead_bytes: 0,
            max_pending_puts: 0,
            message_index_enable: false,
            max_hash_slot_num: 0,
            max_index_num: 0,
            auto_create_topic_enable: false,
            auto_create_subscription_group: false,
            max_subscription_groups: 0,
            default_topic_queue_nums: 0,
            file_reserved_time: Duration::ZERO,
            delete_when: Vec::new(),
            disk_max_used_space_ratio: 0,
            disk_space_clean_forcibly_ratio: 0,
            disk_space_warning_level_ratio: 0,
            delete_file_batch_max: 0,
            clean_resource_interval: Duration::ZERO,
            retention_protected_groups: Vec::new(),
            message_delay_level: crate::broker::delay::DelayLevels::default(),
            flush_delay_offset_interval: Duration::ZERO,
            timer_wheel_enable: false,
            timer_max_delay_sec: 0,
            timer_max_pending: 0,
            timer_memory_entries: 0,
            schedule_delivery_window: 0,
            reject_transaction_message: false,
            transaction_time_out: Duration::ZERO,
            transaction_check_interval: Duration::ZERO,
            transaction_check_max: 0,
            max_connections: 0,
            max_parked_pulls: 0,
            max_heartbeat_subscriptions: 0,
            max_subscription_expression_bytes: 0,
            max_client_registrations: 0,
            max_batch_ack_entries: 0,
            max_batch_ack_bitset_bytes: 0,
            channel_expired_timeout: Duration::ZERO,
            client_sweep_interval: Duration::ZERO,
            client_call_timeout: Duration::ZERO,
            max_frame_size: 0,
            shard_mailbox_capacity: 0,
            max_requests_in_flight_per_connection: 0,
            max_parked_requests_per_connection: 0,
            max_queued_response_bytes_per_connection: 0,
            max_requests_in_flight: 0,
            max_queued_response_bytes: 0,
            frame_timeout: Duration::ZERO,
            server_channel_max_idle_time_seconds: Duration::ZERO,
            max_partial_frame_bytes: 0,
            server_socket_snd_buf_size: 0,
            body_send: crate::server::body_send::BodySend::Auto,
            connection_warn_burst: 0,
            connection_warn_interval: Duration::ZERO,
        }
    }

    /// Defaults, then the TOML file, then the broker.conf, then the overrides; validated.
    pub fn load(
        toml_file: Option<&Path>,
        broker_conf: Option<&Path>,
        overrides: &[String],
    ) -> Result<NodeConfig, ConfigError> {
        let mut loader = ConfigLoader::new();
        if let Some(path) = toml_file {
            loader.toml_file(path)?;
        }
        if let Some(path) = broker_conf {
            loader.broker_conf_file(path)?;
        }
        for item in overrides {
            loader.override_arg(item)?;
        }
        loader.finish()
    }

    /// The store settings of shard `shard` (see [`derive::store_config`]).
    ///
    /// Panics if `shard` is not below `shards`.
    pub fn store_config_for_shard(&self, shard: u8) -> StoreConfig {
        derive::store_config(self, shard)
    }

    /// `broker_ip:listen_port`: the address clients reach and STOREHOST records.
    pub fn store_host(&self) -> SocketAddr {
        derive::store_host(self)
    }

    /// Every setting as `(key, value)` in the key table's order, values spelled as a
    /// source would write them; for a startup log line or `--print-config`.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        keys::KEYS.iter().map(|k| (k.name, (k.get)(self))).collect()
    }

    /// Checks every key's own range (in the table's order), then the relations between
    /// keys. Errors carry origin `config` and the snake_case key; [`ConfigLoader::finish`]
    /// replaces both with the source and spelling that set the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key: &str, message: String| ConfigError::new("config", key, message);
        for key in keys::KEYS {
            key.check(self)
                .map_err(|error| fail(key.name, error.to_string()))?;
        }
        for relation in relations::RELATIONS {
            (relation.check)(self).map_err(|error| fail(relation.keys[0], error.to_string()))?;
        }
        // Backstop: the store's own checks, on the settings every shard shares.
        if let Err(message) = self.store_config_for_shard(0).validate() {
            let (key, rest) = match message.split_once(": ") {
                Some((rocketmq_key, rest)) => match keys::find_key(rocketmq_key) {
                    Some(k) => (k.name, rest.to_string()),
                    None => ("", message.clone()),
                },
                None => ("", message.clone()),
            };
            return Err(fail(key, rest));
        }
        Ok(())
    }
}

/// `(snake_case key, broker.conf key)` for every setting, in the key table's order.
pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
    keys::KEYS.iter().map(|k| (k.name, k.conf[0]))
}

#[cfg(test)]
mod tests {
    use super::key::Range;
    use super::keys::{find_key, find_snake, KEYS};
    use super::parse::Value;
    use super::rocketmq::{DERIVED_STORE_PATHS, UNSUPPORTED_ROCKETMQ_KEYS};
    use super::*;

    /// The defaults, with a root that does not depend on `$HOME`.
    fn base() -> NodeConfig {
        NodeConfig {
            store_path_root_dir: "/srv/store".into(),
            ..NodeConfig::default()
        }
    }

    #[test]
    fn every_default_passes_its_own_range_check() {
        let config = base();
        for key in KEYS {
            key.check(&config)
                .unwrap_or_else(|e| panic!("default of {}: {e}", key.name));
        }
        config.validate().unwrap();
    }

    #[test]
    fn every_field_is_a_key_in_table_order() {
        // `{:#?}` puts each field of the struct on its own line, indented four spaces.
        let fields: Vec<String> = format!("{:#?}", NodeConfig::default())
            .lines()
            .filter_map(|line| line.strip_prefix("    "))
            .filter(|line| !line.starts_with(' '))
            .filter_map(|line| line.split_once(':').map(|(name, _)| name.to_string()))
            .collect();
        let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        assert_eq!(fields, names);
    }

    #[test]
    fn every_key_round_trips_through_its_text() {
        let changed = NodeConfig {
            namesrv_addr: Some("10.0.0.1:9876;10.0.0.2:9876".into()),
            delete_when: vec![3, 4],
            retention_protected_groups: vec!["CG_a".into(), "CG_b".into()],
            flush_disk_type: FlushMode::Sync,
            broker_role: BrokerRole::Slave,
            io_backend: IoChoice::Portable,
            auto_create_topic_enable: false,
            auto_create_subscription_group: false,
            file_reserved_time: Duration::from_secs(5 * 3600),
            server_channel_max_idle_time_seconds: Duration::from_secs(7),
            ..base()
        };
        for config in [base(), changed] {
            // Each key alone: get, then set, changes nothing.
            for key in KEYS {
                let mut copy = config.clone();
                (key.set)(&mut copy, Value::Raw(&(key.get)(&config))).unwrap();
                assert_eq!(copy, config, "{}", key.name);
            }
            // Every key onto blank placeholders: the keys cover every field.
            let mut copy = NodeConfig::unset();
            for (name, value) in config.settings() {
                (find_snake(name).unwrap().set)(&mut copy, Value::Raw(&value)).unwrap();
            }
            assert_eq!(copy, config);
        }
    }

    /// Per key with a numeric range: the bounds pass the key's check, and a value just
    /// outside each bound is refused, naming the key and the bound.
    #[test]
    fn message_delay_level_is_read_in_both_spellings_and_a_bad_one_names_the_level() {
        let config =
            NodeConfig::load(None, None, &["messageDelayLevel=100ms 2s 1h".into()]).unwrap();
        assert_eq!(
            config.message_delay_level.as_millis(),
            &[100, 2000, 3_600_000]
        );
        assert_eq!(
            NodeConfig::default().message_delay_level.to_string(),
            crate::broker::delay::DEFAULT_LEVELS
        );
        let config = NodeConfig::load(None, None, &["message_delay_level=1d".into()]).unwrap();
        assert_eq!(config.message_delay_level.max_level(), 1);
        let error = NodeConfig::load(None, None, &["messageDelayLevel=1s 5x".into()]).unwrap_err();
        assert_eq!(error.key, "messageDelayLevel");
        assert!(
            error
                .message
                .contains("level 2 '5x' has the unknown unit 'x'"),
            "{error}"
        );
    }

    #[test]
    fn values_just_outside_each_range_are_refused() {
        let mut tried = 0;
        for key in KEYS {
            let Range::Number(bounds) = key.range else {
                continue;
            };
            let mut inside = vec![bounds.min];
            let mut outside = Vec::new();
            if bounds.min > 0 {
                outside.push((bounds.min - 1, bounds.min));
            }
            if let Some(max) = bounds.max {
                inside.push(max);
                outside.push((max + 1, max));
            }
            if bounds.step > 1 {
                outside.push((bounds.min + 1, bounds.step));
            }
            assert!(
                !outside.is_empty(),
                "{} has a range with no bound",
                key.name
            );
            for value in inside {
                let mut config = base();
                (key.set)(&mut config, Value::Raw(&value.to_string())).unwrap();
                key.check(&config)
                    .unwrap_or_else(|e| panic!("{}={value}: {e}", key.name));
            }
            for (value, bound) in outside {
                let mut loader = ConfigLoader::from_config(base());
                let error = match loader.override_arg(&format!("{}={value}", key.name)) {
                    Err(error) => error,
                    Ok(_) => loader
                        .finish()
                        .expect_err(&format!("{}={value} was accepted", key.name)),
                };
                assert_eq!(error.origin, "command line", "{error}");
                assert_eq!(error.key, key.name, "{error}");
                assert!(error.message.contains(&bound.to_string()), "{error}");
                tried += 1;
            }
        }
        assert!(tried >= 30, "only {tried} out-of-range values tried");
    }

    #[test]
    fn conf_names_are_unique_and_distinct_from_ignored_keys() {
        let mut seen = std::collections::HashSet::new();
        for key in KEYS {
            for conf in key.conf {
                assert!(seen.insert(conf), "{conf}");
                assert!(find_snake(conf).is_none_or(|k| k.name == key.name));
                assert!(!IGNORED_ROCKETMQ_KEYS.contains(conf), "{conf}");
            }
        }
        let refused = UNSUPPORTED_ROCKETMQ_KEYS.iter().map(|(key, _, _)| key);
        for key in refused.chain(DERIVED_STORE_PATHS.iter().map(|(key, _, _)| key)) {
            assert!(!IGNORED_ROCKETMQ_KEYS.contains(key) && find_key(key).is_none());
        }
    }

    #[test]
    fn error_display() {
        let e = ConfigError::new("a.conf", "listenPort", "bad");
        assert_eq!(e.to_string(), "a.conf: listenPort: bad");
        let e = ConfigError::new("a.toml", "", "not valid TOML");
        assert_eq!(e.to_string(), "a.toml: not valid TOML");
    }
}
