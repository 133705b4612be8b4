//! Node settings for `ringmq serve`: defaults, three sources, validation, and the per-shard
//! store settings derived from them (D3, D12, D13).
//!
//! # Sources
//!
//! Settings are read from up to three sources; a later one overrides an earlier one:
//!
//! 1. a TOML file: top-level `key = value` pairs, keys in snake_case (the first column
//!    below). Integers are TOML integers, flags TOML booleans, everything else a string.
//! 2. a RocketMQ `broker.conf`: Java properties (`key=value` or `key: value` lines, `#` and
//!    `!` comments, blank lines, whitespace around the separator ignored, a trailing `\`
//!    continues a line), keys in camelCase (the second column). Settings RocketMQ lacks have
//!    a camelCase name of ringmq's own, marked *(ringmq)*.
//! 3. command-line overrides, `key=value` strings naming a key in either style.
//!
//! [`NodeConfig::load`] applies them in that order and then [`NodeConfig::validate`]s the
//! result; [`ConfigLoader`] does the same one source at a time. Every mistake stops the load
//! with a [`ConfigError`] that reads `<source>: <key>: <what is wrong>`, the source being
//! the file's path, `command line`, or `defaults`.
//!
//! A key that is in no column below is an error, with two exceptions for files written
//! for RocketMQ: keys ringmq recognises but does not act on (`brokerIP2`, `haListenPort`,
//! thread-pool sizes, ...; see [`IGNORED_ROCKETMQ_KEYS`]) only log a warning, and keys whose
//! meaning ringmq cannot honour (`storePathCommitLog`, `enableDLegerCommitLog=true`, ...)
//! are errors that say why.
//!
//! # Keys
//!
//! | key | broker.conf key | default | meaning |
//! |---|---|---|---|
//! | `broker_name` | `brokerName` | `broker-a` | name in routes and cluster info |
//! | `broker_cluster_name` | `brokerClusterName` | `DefaultCluster` | cluster in routes and cluster info |
//! | `broker_id` | `brokerId` | 0 | 0 for a master, above 0 for a slave |
//! | `broker_role` | `brokerRole` | `ASYNC_MASTER` | `ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE`; only `ASYNC_MASTER` runs for now (replication is D14) |
//! | `broker_ip` | `brokerIP1` | `127.0.0.1` | address advertised in routes and written as STOREHOST; an IP, not a name |
//! | `bind_address` | `bindAddress` | `0.0.0.0` | address the remoting, name-server and metrics listeners bind |
//! | `listen_port` | `listenPort` | 10911 | remoting port clients send to and pull from; 0 picks a free one |
//! | `namesrv_port` | `namesrvPort` *(ringmq)* | 9876 | port of the embedded name server (D1); 0 picks a free one |
//! | `metrics_port` | `metricsPromExporterPort` | 9100 | Prometheus text endpoint (D15); 0 picks a free one |
//! | `namesrv_addr` | `namesrvAddr` | none | external name servers (`host:port;host:port`); kept for later, the embedded one answers routes |
//! | `store_path_root_dir` | `storePathRootDir` | `$HOME/store` | root of the shard stores (layout below); a leading `~` is `$HOME` |
//! | `shards` | `shards` *(ringmq)* | CPUs | shards (pinned threads, each with its own store), 1 to 64 |
//! | `io_backend` | `ioBackend` *(ringmq)* | `auto` | disk backend: `auto` (io_uring, else portable), `uring`, `portable` (D5) |
//! | `flush_disk_type` | `flushDiskType` | `ASYNC_FLUSH` | `SYNC_FLUSH`: acknowledge after fdatasync; `ASYNC_FLUSH`: after the write |
//! | `maped_file_size_commit_log` | `mapedFileSizeCommitLog` | 1073741824 | CommitLog segment bytes; a multiple of 4096 |
//! | `maped_file_size_consume_queue` | `mapedFileSizeConsumeQueue` | 6000000 | ConsumeQueue file bytes; a multiple of 20 (one entry) |
//! | `flush_interval_commit_log` | `flushIntervalCommitLog` | 500 | async flush period, ms |
//! | `flush_commit_log_least_pages` | `flushCommitLogLeastPages` | 4 | async flush only once this many 4 KiB pages are dirty... |
//! | `flush_commit_log_thorough_interval` | `flushCommitLogThoroughInterval` | 10000 | ...or once this many ms passed since the last flush |
//! | `sync_flush_timeout` | `syncFlushTimeout` | 5000 | a SYNC_FLUSH put waiting longer (ms) gets FLUSH_DISK_TIMEOUT |
//! | `flush_interval_consume_queue` | `flushIntervalConsumeQueue` | 1000 | ConsumeQueue write-out and checkpoint period, ms |
//! | `max_message_size` | `maxMessageSize` | 4194304 | largest message body accepted, bytes |
//! | `max_transfer_count` | `maxTransferCountOnMessageInDisk` | 32 | most messages one pull returns |
//! | `max_transfer_bytes` | `maxTransferBytesOnMessageInDisk` | 262144 | most bytes one pull returns |
//! | `max_batch_bytes` | `maxBatchBytes` *(ringmq)* | 4194304 | most bytes in one CommitLog write (one group commit) |
//! | `max_pending_puts` | `maxPendingPuts` *(ringmq)* | 65536 | puts waiting per shard before a send is refused as busy |
//! | `auto_create_topic_enable` | `autoCreateTopicEnable` | true | create a topic on its first send |
//! | `default_topic_queue_nums` | `defaultTopicQueueNums` | 8 | queues of an auto-created topic, 1 to 1024 |
//! | `file_reserved_time` | `fileReservedTime` | 72 | hours a CommitLog segment is kept after its last write (D12), at least 1 |
//! | `delete_when` | `deleteWhen` | `04` | hours of day (local time, `;`-separated, e.g. `03;04`) when expired files are deleted |
//! | `disk_max_used_space_ratio` | `diskMaxUsedSpaceRatio` | 75 | disk use (%) above which expired files go at any hour, 10 to 95 |
//! | `max_connections` | `maxConnections` *(ringmq)* | 10000 | client connections the node accepts, all shards together |
//! | `max_parked_pulls` | `maxParkedPulls` *(ringmq)* | 65536 | long-polling pulls parked at once, all shards together |
//! | `channel_expired_timeout` | `channelExpiredTimeout` | 120000 | a client silent (no heartbeat) this long, ms, leaves its groups |
//! | `client_sweep_interval` | `clientSweepInterval` *(ringmq)* | 10000 | how often expired clients are dropped, ms |
//! | `max_frame_size` | `maxFrameSize` *(ringmq)* | 16777216 | largest remoting frame, bytes; at least `max_message_size` + 64 KiB |
//! | `shard_mailbox_capacity` | `shardMailboxCapacity` *(ringmq)* | 4096 | requests queued for another shard before the sender waits (D3) |
//! | `max_requests_in_flight_per_connection` | `maxRequestsInFlightPerConnection` *(ringmq)* | 1024 | requests read and not yet answered on one connection before it stops reading (TCP backpressure) |
//! | `max_queued_response_bytes_per_connection` | `maxQueuedResponseBytesPerConnection` *(ringmq)* | 4194304 | response bytes queued and not yet written on one connection before it stops reading |
//! | `frame_timeout` | `frameTimeout` *(ringmq)* | 30000 | ms a frame may take from its first byte to its last before the connection is closed |
//! | `server_channel_max_idle_time_seconds` | `serverChannelMaxIdleTimeSeconds` | 120 | seconds a connection may go without a request (none in flight) before it is closed, at least 1 |
//! | `max_partial_frame_bytes` | `maxPartialFrameBytes` *(ringmq)* | 268435456 | bytes all connections together may hold of frames still arriving; at least `max_frame_size` |
//!
//! `mappedFileSizeCommitLog` and `mappedFileSizeConsumeQueue` (RocketMQ 5's spelling) are
//! accepted too.
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

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{FlushMode, StoreConfig, GIB, MIB, RECORD_OVERHEAD_MAX};
use crate::io::IoChoice;
use crate::remoting::connection;

/// Most shards a node runs (the shard id takes 8 bits of an offset; 64 leaves room).
pub const MAX_SHARDS: u8 = 64;
/// Room a remoting frame needs beyond the largest body, for its header.
pub const FRAME_HEADER_ROOM: usize = 64 * 1024;
/// Size of one ConsumeQueue entry.
pub const CQ_ENTRY_SIZE: u64 = 20;

/// `brokerRole`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerRole {
    /// Acknowledge after the local write; replicas catch up later.
    AsyncMaster,
    /// Acknowledge after a replica confirms (D7, D14).
    SyncMaster,
    /// A replica: follows a master, serves reads.
    Slave,
}

impl BrokerRole {
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

impl std::str::FromStr for BrokerRole {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "ASYNC_MASTER" => Ok(BrokerRole::AsyncMaster),
            "SYNC_MASTER" => Ok(BrokerRole::SyncMaster),
            "SLAVE" => Ok(BrokerRole::Slave),
            other => Err(format!(
                "'{other}' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"
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

/// Everything `ringmq serve` needs to start. See the module doc for every key.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    pub broker_name: String,
    pub broker_cluster_name: String,
    pub broker_id: u64,
    pub broker_role: BrokerRole,
    pub broker_ip: IpAddr,
    pub bind_address: IpAddr,
    pub listen_port: u16,
    pub namesrv_port: u16,
    pub metrics_port: u16,
    pub namesrv_addr: Option<String>,
    pub store_path_root_dir: PathBuf,
    pub shards: u8,
    pub io_backend: IoChoice,
    pub flush_disk_type: FlushMode,
    pub maped_file_size_commit_log: u64,
    pub maped_file_size_consume_queue: u64,
    pub flush_interval_commit_log: Duration,
    pub flush_commit_log_least_pages: u64,
    pub flush_commit_log_thorough_interval: Duration,
    pub sync_flush_timeout: Duration,
    pub flush_interval_consume_queue: Duration,
    pub max_message_size: usize,
    pub max_transfer_count: u32,
    pub max_transfer_bytes: usize,
    pub max_batch_bytes: usize,
    pub max_pending_puts: usize,
    pub auto_create_topic_enable: bool,
    pub default_topic_queue_nums: u32,
    /// `fileReservedTime`, configured in whole hours.
    pub file_reserved_time: Duration,
    /// `deleteWhen`: hours of the day, ascending, without repeats.
    pub delete_when: Vec<u8>,
    pub disk_max_used_space_ratio: u8,
    pub max_connections: usize,
    pub max_parked_pulls: usize,
    pub channel_expired_timeout: Duration,
    pub client_sweep_interval: Duration,
    pub max_frame_size: usize,
    pub shard_mailbox_capacity: usize,
    pub max_requests_in_flight_per_connection: usize,
    pub max_queued_response_bytes_per_connection: usize,
    pub frame_timeout: Duration,
    /// Configured in whole seconds, as RocketMQ's key is.
    pub server_channel_max_idle_time_seconds: Duration,
    pub max_partial_frame_bytes: usize,
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            broker_name: "broker-a".into(),
            broker_cluster_name: "DefaultCluster".into(),
            broker_id: 0,
            broker_role: BrokerRole::AsyncMaster,
            broker_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            listen_port: 10911,
            namesrv_port: 9876,
            metrics_port: 9100,
            namesrv_addr: None,
            store_path_root_dir: home_dir().map(|h| h.join("store")).unwrap_or_default(),
            shards: default_shards(),
            io_backend: IoChoice::Auto,
            flush_disk_type: FlushMode::Async,
            maped_file_size_commit_log: GIB,
            maped_file_size_consume_queue: 300_000 * CQ_ENTRY_SIZE,
            flush_interval_commit_log: Duration::from_millis(500),
            flush_commit_log_least_pages: 4,
            flush_commit_log_thorough_interval: Duration::from_secs(10),
            sync_flush_timeout: Duration::from_secs(5),
            flush_interval_consume_queue: Duration::from_secs(1),
            max_message_size: 4 * MIB as usize,
            max_transfer_count: 32,
            max_transfer_bytes: 256 * 1024,
            max_batch_bytes: 4 * MIB as usize,
            max_pending_puts: 65_536,
            auto_create_topic_enable: true,
            default_topic_queue_nums: 8,
            file_reserved_time: Duration::from_secs(72 * 3600),
            delete_when: vec![4],
            disk_max_used_space_ratio: 75,
            max_connections: 10_000,
            max_parked_pulls: 65_536,
            // Java's channel expiry (§9.7); clients heartbeat every 30 s.
            channel_expired_timeout: Duration::from_secs(120),
            client_sweep_interval: Duration::from_secs(10),
            max_frame_size: 16 * MIB as usize,
            shard_mailbox_capacity: 4096,
            // One source for the connection defaults: the connection module's constants.
            max_requests_in_flight_per_connection: connection::DEFAULT_MAX_REQUESTS_IN_FLIGHT,
            max_queued_response_bytes_per_connection: connection::DEFAULT_MAX_QUEUED_RESPONSE_BYTES,
            frame_timeout: connection::DEFAULT_FRAME_TIMEOUT,
            server_channel_max_idle_time_seconds: connection::DEFAULT_IDLE_TIMEOUT,
            max_partial_frame_bytes: 256 * MIB as usize,
        }
    }
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// One shard per available CPU, at most [`MAX_SHARDS`].
pub fn default_shards() -> u8 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(MAX_SHARDS as usize) as u8)
        .unwrap_or(1)
}

impl NodeConfig {
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

    /// The store settings of shard `shard`: directory `<store_path_root_dir>/shard-<shard>`,
    /// STOREHOST `broker_ip:listen_port`, and the flush, size and limit settings.
    ///
    /// Panics if `shard` is not below `shards`.
    pub fn store_config_for_shard(&self, shard: u8) -> StoreConfig {
        assert!(
            shard < self.shards,
            "shard {shard} does not exist: the node has {} shards",
            self.shards
        );
        StoreConfig {
            dir: self.store_path_root_dir.join(format!("shard-{shard}")),
            shard_id: shard,
            flush_mode: self.flush_disk_type,
            commit_log_segment_size: self.maped_file_size_commit_log,
            consume_queue_entries_per_file: self.maped_file_size_consume_queue / CQ_ENTRY_SIZE,
            flush_interval: self.flush_interval_commit_log,
            flush_least_pages: self.flush_commit_log_least_pages,
            flush_thorough_interval: self.flush_commit_log_thorough_interval,
            sync_flush_timeout: self.sync_flush_timeout,
            checkpoint_interval: self.flush_interval_consume_queue,
            max_message_size: self.max_message_size,
            max_batch_bytes: self.max_batch_bytes,
            max_pending_puts: self.max_pending_puts,
            store_host: self.store_host(),
            max_transfer_count: self.max_transfer_count,
            max_transfer_bytes: self.max_transfer_bytes,
        }
    }

    /// `broker_ip:listen_port`: the address clients reach and STOREHOST records.
    pub fn store_host(&self) -> SocketAddr {
        SocketAddr::new(self.broker_ip, self.listen_port)
    }

    /// Every setting as `(key, value)` in the module doc's order, values spelled as a
    /// source would write them; for a startup log line or `--print-config`.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        KEYS.iter().map(|k| (k.name, (k.get)(self))).collect()
    }

    /// Checks every value and the relationships between them. Errors carry origin
    /// `config` and the snake_case key; [`ConfigLoader::finish`] replaces both with the
    /// source and spelling that set the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key: &str, message: String| Err(ConfigError::new("config", key, message));
        for (key, name) in [
            ("broker_name", &self.broker_name),
            ("broker_cluster_name", &self.broker_cluster_name),
        ] {
            if name.is_empty() {
                return fail(key, "must not be empty".into());
            }
            if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return fail(
                    key,
                    format!("'{name}' must not contain spaces or control characters"),
                );
            }
        }
        match self.broker_role {
            BrokerRole::AsyncMaster => {}
            role => {
                return fail(
                    "broker_role",
                    format!(
                        "{} is not supported yet (replication comes later); use ASYNC_MASTER",
                        role.as_str()
                    ),
                )
            }
        }
        if self.broker_id != 0 {
            return fail(
                "broker_id",
                format!(
                    "{} must be 0 for a master (ASYNC_MASTER, SYNC_MASTER)",
                    self.broker_id
                ),
            );
        }
        if self.broker_ip.is_unspecified() || self.broker_ip.is_multicast() {
            return fail(
                "broker_ip",
                format!(
                    "{} cannot be advertised to clients; give the address they reach this node at",
                    self.broker_ip
                ),
            );
        }
        // Port 0 asks the system for a free port at start (tests, side-by-side runs), so it
        // never collides with another setting.
        if self.namesrv_port != 0 && self.namesrv_port == self.listen_port {
            return fail(
                "namesrv_port",
                format!("{} is also listen_port", self.namesrv_port),
            );
        }
        if self.metrics_port != 0
            && (self.metrics_port == self.listen_port || self.metrics_port == self.namesrv_port)
        {
            let other = if self.metrics_port == self.listen_port {
                "listen_port"
            } else {
                "namesrv_port"
            };
            return fail(
                "metrics_port",
                format!("{} is also {other}", self.metrics_port),
            );
        }
        if let Some(addr) = &self.namesrv_addr {
            check_namesrv_addr(addr).or_else(|m| fail("namesrv_addr", m))?;
        }
        if self.store_path_root_dir.as_os_str().is_empty() {
            return fail(
                "store_path_root_dir",
                "is empty (the default is $HOME/store and HOME is not set)".into(),
            );
        }
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return fail(
                "shards",
                format!("{} must be between 1 and {MAX_SHARDS}", self.shards),
            );
        }
        let segment = self.maped_file_size_commit_log;
        if segment < 4096 || !segment.is_multiple_of(4096) {
            return fail(
                "maped_file_size_commit_log",
                format!("{segment} must be a multiple of 4096 and at least 4096"),
            );
        }
        if segment > 1 << 56 {
            return fail(
                "maped_file_size_commit_log",
                format!("{segment} exceeds the 56-bit offset space of a shard"),
            );
        }
        let cq = self.maped_file_size_consume_queue;
        if cq == 0 || !cq.is_multiple_of(CQ_ENTRY_SIZE) {
            return fail(
                "maped_file_size_consume_queue",
                format!("{cq} must be a positive multiple of {CQ_ENTRY_SIZE} (one entry)"),
            );
        }
        for (key, value) in [
            ("flush_interval_commit_log", self.flush_interval_commit_log),
            ("sync_flush_timeout", self.sync_flush_timeout),
            (
                "flush_interval_consume_queue",
                self.flush_interval_consume_queue,
            ),
            ("channel_expired_timeout", self.channel_expired_timeout),
            ("client_sweep_interval", self.client_sweep_interval),
        ] {
            if value.is_zero() {
                return fail(key, "must be at least 1 ms".into());
            }
        }
        if self.max_message_size == 0 {
            return fail("max_message_size", "must be at least 1".into());
        }
        if self.max_message_size as u64 + RECORD_OVERHEAD_MAX + 8 > segment {
            return fail(
                "max_message_size",
                format!(
                    "{} plus {RECORD_OVERHEAD_MAX} bytes of headers must fit a {segment}-byte \
                     CommitLog segment (maped_file_size_commit_log)",
                    self.max_message_size
                ),
            );
        }
        if self.max_batch_bytes < 4096 {
            return fail(
                "max_batch_bytes",
                format!("{} must be at least 4096", self.max_batch_bytes),
            );
        }
        for (key, value) in [
            ("max_transfer_count", self.max_transfer_count as usize),
            ("max_transfer_bytes", self.max_transfer_bytes),
            ("max_pending_puts", self.max_pending_puts),
            ("max_connections", self.max_connections),
            ("max_parked_pulls", self.max_parked_pulls),
            ("shard_mailbox_capacity", self.shard_mailbox_capacity),
            (
                "max_requests_in_flight_per_connection",
                self.max_requests_in_flight_per_connection,
            ),
            (
                "max_queued_response_bytes_per_connection",
                self.max_queued_response_bytes_per_connection,
            ),
        ] {
            if value == 0 {
                return fail(key, "must be at least 1".into());
            }
        }
        if self.frame_timeout.is_zero() {
            return fail("frame_timeout", "must be at least 1 ms".into());
        }
        if self.server_channel_max_idle_time_seconds < Duration::from_secs(1) {
            return fail(
                "server_channel_max_idle_time_seconds",
                "must be at least 1 second".into(),
            );
        }
        if self.max_partial_frame_bytes < self.max_frame_size {
            return fail(
                "max_partial_frame_bytes",
                format!(
                    "{} must be at least max_frame_size ({}): one whole frame must fit",
                    self.max_partial_frame_bytes, self.max_frame_size
                ),
            );
        }
        if self.max_frame_size < self.max_message_size + FRAME_HEADER_ROOM {
            return fail(
                "max_frame_size",
                format!(
                    "{} must be at least max_message_size ({}) + {FRAME_HEADER_ROOM} bytes of header",
                    self.max_frame_size, self.max_message_size
                ),
            );
        }
        if self.default_topic_queue_nums == 0 || self.default_topic_queue_nums > 1024 {
            return fail(
                "default_topic_queue_nums",
                format!(
                    "{} must be between 1 and 1024",
                    self.default_topic_queue_nums
                ),
            );
        }
        if self.file_reserved_time < Duration::from_secs(3600) {
            return fail("file_reserved_time", "must be at least 1 hour".into());
        }
        if self.delete_when.is_empty() {
            return fail(
                "delete_when",
                "must name at least one hour of the day".into(),
            );
        }
        if let Some(hour) = self.delete_when.iter().find(|&&h| h > 23) {
            return fail(
                "delete_when",
                format!("{hour} is not an hour of the day (0 to 23)"),
            );
        }
        if !(10..=95).contains(&self.disk_max_used_space_ratio) {
            return fail(
                "disk_max_used_space_ratio",
                format!(
                    "{} must be between 10 and 95 (percent)",
                    self.disk_max_used_space_ratio
                ),
            );
        }
        // Backstop: the store's own checks, on the settings every shard shares.
        if let Err(message) = self.store_config_for_shard(0).validate() {
            let (key, rest) = match message.split_once(": ") {
                Some((rocketmq_key, rest)) => match find_key(rocketmq_key) {
                    Some(k) => (k.name, rest.to_string()),
                    None => ("", message.clone()),
                },
                None => ("", message.clone()),
            };
            return fail(key, rest);
        }
        Ok(())
    }
}

fn check_namesrv_addr(addr: &str) -> Result<(), String> {
    for part in addr.split(';') {
        let part = part.trim();
        let port = part
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(port))) if !host.is_empty() && port != 0 => {}
            _ => return Err(format!("'{part}' is not host:port (list several with ';')")),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Keys

/// A value as a source gave it. TOML values carry their type; properties and command-line
/// values are untyped text, parsed by the key.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    /// Text from broker.conf or the command line.
    Raw(&'a str),
    /// A TOML string.
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

struct Key {
    /// snake_case: the field, the TOML key.
    name: &'static str,
    /// camelCase: RocketMQ's name (or ringmq's own), then accepted alternative spellings.
    camel: &'static [&'static str],
    set: fn(&mut NodeConfig, Value) -> Result<(), String>,
    get: fn(&NodeConfig) -> String,
}

fn text(value: Value<'_>) -> Result<&str, String> {
    match value {
        Value::Raw(s) | Value::Str(s) => Ok(s.trim()),
        Value::Int(_) => Err("expected a string, found an integer".into()),
        Value::Bool(_) => Err("expected a string, found a boolean".into()),
    }
}

fn name(value: Value) -> Result<String, String> {
    Ok(text(value)?.to_string())
}

fn uint(value: Value, max: u64) -> Result<u64, String> {
    let number = match value {
        Value::Int(n) if n < 0 => return Err(format!("{n} must not be negative")),
        Value::Int(n) => n as u64,
        Value::Raw(s) => {
            let s = s.trim();
            match s.parse::<u64>() {
                Ok(n) => n,
                Err(_) if s.parse::<i64>().is_ok() => {
                    return Err(format!("{s} must not be negative"))
                }
                Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(format!("{s} is too large (at most {max})"))
                }
                Err(_) => return Err(format!("'{s}' is not a whole number")),
            }
        }
        Value::Str(_) => return Err("expected an integer, found a string".into()),
        Value::Bool(_) => return Err("expected an integer, found a boolean".into()),
    };
    if number > max {
        return Err(format!("{number} is too large (at most {max})"));
    }
    Ok(number)
}

fn port(value: Value) -> Result<u16, String> {
    match uint(value, u64::MAX)? {
        n @ 0..=65535 => Ok(n as u16),
        n => Err(format!("{n} must be between 0 and 65535")),
    }
}

fn millis(value: Value) -> Result<Duration, String> {
    Ok(Duration::from_millis(uint(value, u64::MAX)?))
}

fn flag(value: Value) -> Result<bool, String> {
    match value {
        Value::Bool(b) => Ok(b),
        Value::Raw(s) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
        Value::Raw(s) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
        Value::Raw(s) => Err(format!("'{}' is not true or false", s.trim())),
        Value::Str(_) => Err("expected a boolean, found a string".into()),
        Value::Int(_) => Err("expected a boolean, found an integer".into()),
    }
}

fn ip(value: Value) -> Result<IpAddr, String> {
    let s = text(value)?;
    s.parse()
        .map_err(|_| format!("'{s}' is not an IP address (host names are not accepted)"))
}

fn hours_of_day(value: Value) -> Result<Vec<u8>, String> {
    let s = match value {
        Value::Int(_) => return Ok(vec![uint(value, 23)? as u8]),
        other => text(other)?,
    };
    let mut hours = Vec::new();
    for part in s.split(';') {
        let part = part.trim();
        match part.parse::<u8>() {
            Ok(h) if h <= 23 && !part.is_empty() => hours.push(h),
            _ => {
                return Err(format!(
                    "'{part}' is not an hour of the day (00 to 23); list several with ';'"
                ))
            }
        }
    }
    hours.sort_unstable();
    hours.dedup();
    Ok(hours)
}

fn root_dir(value: Value) -> Result<PathBuf, String> {
    let s = text(value)?;
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s == "~" || s.starts_with("~/") {
        let home = home_dir().ok_or_else(|| format!("'{s}' starts with ~ but HOME is not set"))?;
        return Ok(match s.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => home,
        });
    }
    Ok(PathBuf::from(s))
}

fn io_name(choice: IoChoice) -> &'static str {
    match choice {
        IoChoice::Auto => "auto",
        IoChoice::Uring => "uring",
        IoChoice::Portable => "portable",
    }
}

macro_rules! key {
    ($name:literal, [$($camel:literal),+], |$c:ident, $v:ident| $set:expr, |$g:ident| $get:expr) => {
        Key {
            name: $name,
            camel: &[$($camel),+],
            set: |$c: &mut NodeConfig, $v: Value| -> Result<(), String> {
                $set;
                Ok(())
            },
            get: |$g: &NodeConfig| -> String { $get },
        }
    };
}

/// Every key, in the module doc's order.
static KEYS: &[Key] = &[
    key!(
        "broker_name",
        ["brokerName"],
        |c, v| c.broker_name = name(v)?,
        |c| c.broker_name.clone()
    ),
    key!(
        "broker_cluster_name",
        ["brokerClusterName"],
        |c, v| c.broker_cluster_name = name(v)?,
        |c| c.broker_cluster_name.clone()
    ),
    key!(
        "broker_id",
        ["brokerId"],
        |c, v| c.broker_id = uint(v, i64::MAX as u64)?,
        |c| c.broker_id.to_string()
    ),
    key!(
        "broker_role",
        ["brokerRole"],
        |c, v| c.broker_role = text(v)?.parse()?,
        |c| c.broker_role.as_str().into()
    ),
    key!(
        "broker_ip",
        ["brokerIP1"],
        |c, v| c.broker_ip = ip(v)?,
        |c| c.broker_ip.to_string()
    ),
    key!(
        "bind_address",
        ["bindAddress"],
        |c, v| c.bind_address = ip(v)?,
        |c| c.bind_address.to_string()
    ),
    key!(
        "listen_port",
        ["listenPort"],
        |c, v| c.listen_port = port(v)?,
        |c| c.listen_port.to_string()
    ),
    key!(
        "namesrv_port",
        ["namesrvPort"],
        |c, v| c.namesrv_port = port(v)?,
        |c| c.namesrv_port.to_string()
    ),
    key!(
        "metrics_port",
        ["metricsPromExporterPort", "metricsPort"],
        |c, v| c.metrics_port = port(v)?,
        |c| c.metrics_port.to_string()
    ),
    key!(
        "namesrv_addr",
        ["namesrvAddr"],
        |c, v| {
            let s = text(v)?;
            c.namesrv_addr = if s.is_empty() {
                None
            } else {
                Some(s.to_string())
            }
        },
        |c| c.namesrv_addr.clone().unwrap_or_default()
    ),
    key!(
        "store_path_root_dir",
        ["storePathRootDir"],
        |c, v| c.store_path_root_dir = root_dir(v)?,
        |c| c.store_path_root_dir.display().to_string()
    ),
    key!(
        "shards",
        ["shards"],
        |c, v| c.shards = uint(v, 255)? as u8,
        |c| c.shards.to_string()
    ),
    key!(
        "io_backend",
        ["ioBackend"],
        |c, v| c.io_backend = text(v)?.parse()?,
        |c| io_name(c.io_backend).into()
    ),
    key!(
        "flush_disk_type",
        ["flushDiskType"],
        |c, v| {
            let s = text(v)?;
            c.flush_disk_type = match s {
                "SYNC_FLUSH" => FlushMode::Sync,
                "ASYNC_FLUSH" => FlushMode::Async,
                other => return Err(format!("'{other}' is not one of SYNC_FLUSH, ASYNC_FLUSH")),
            }
        },
        |c| c.flush_disk_type.as_str().into()
    ),
    key!(
        "maped_file_size_commit_log",
        ["mapedFileSizeCommitLog", "mappedFileSizeCommitLog"],
        |c, v| c.maped_file_size_commit_log = uint(v, u64::MAX)?,
        |c| c.maped_file_size_commit_log.to_string()
    ),
    key!(
        "maped_file_size_consume_queue",
        ["mapedFileSizeConsumeQueue", "mappedFileSizeConsumeQueue"],
        |c, v| c.maped_file_size_consume_queue = uint(v, u64::MAX)?,
        |c| c.maped_file_size_consume_queue.to_string()
    ),
    key!(
        "flush_interval_commit_log",
        ["flushIntervalCommitLog"],
        |c, v| c.flush_interval_commit_log = millis(v)?,
        |c| c.flush_interval_commit_log.as_millis().to_string()
    ),
    key!(
        "flush_commit_log_least_pages",
        ["flushCommitLogLeastPages"],
        |c, v| c.flush_commit_log_least_pages = uint(v, u64::MAX)?,
        |c| c.flush_commit_log_least_pages.to_string()
    ),
    key!(
        "flush_commit_log_thorough_interval",
        ["flushCommitLogThoroughInterval"],
        |c, v| c.flush_commit_log_thorough_interval = millis(v)?,
        |c| c.flush_commit_log_thorough_interval.as_millis().to_string()
    ),
    key!(
        "sync_flush_timeout",
        ["syncFlushTimeout"],
        |c, v| c.sync_flush_timeout = millis(v)?,
        |c| c.sync_flush_timeout.as_millis().to_string()
    ),
    key!(
        "flush_interval_consume_queue",
        ["flushIntervalConsumeQueue"],
        |c, v| c.flush_interval_consume_queue = millis(v)?,
        |c| c.flush_interval_consume_queue.as_millis().to_string()
    ),
    key!(
        "max_message_size",
        ["maxMessageSize"],
        |c, v| c.max_message_size = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_message_size.to_string()
    ),
    key!(
        "max_transfer_count",
        ["maxTransferCountOnMessageInDisk"],
        |c, v| c.max_transfer_count = uint(v, u32::MAX as u64)? as u32,
        |c| c.max_transfer_count.to_string()
    ),
    key!(
        "max_transfer_bytes",
        ["maxTransferBytesOnMessageInDisk"],
        |c, v| c.max_transfer_bytes = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_transfer_bytes.to_string()
    ),
    key!(
        "max_batch_bytes",
        ["maxBatchBytes"],
        |c, v| c.max_batch_bytes = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_batch_bytes.to_string()
    ),
    key!(
        "max_pending_puts",
        ["maxPendingPuts"],
        |c, v| c.max_pending_puts = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_pending_puts.to_string()
    ),
    key!(
        "auto_create_topic_enable",
        ["autoCreateTopicEnable"],
        |c, v| c.auto_create_topic_enable = flag(v)?,
        |c| c.auto_create_topic_enable.to_string()
    ),
    key!(
        "default_topic_queue_nums",
        ["defaultTopicQueueNums"],
        |c, v| c.default_topic_queue_nums = uint(v, u32::MAX as u64)? as u32,
        |c| c.default_topic_queue_nums.to_string()
    ),
    key!(
        "file_reserved_time",
        ["fileReservedTime"],
        |c, v| c.file_reserved_time = Duration::from_secs(uint(v, u32::MAX as u64)? * 3600),
        |c| (c.file_reserved_time.as_secs() / 3600).to_string()
    ),
    key!(
        "delete_when",
        ["deleteWhen"],
        |c, v| c.delete_when = hours_of_day(v)?,
        |c| {
            c.delete_when
                .iter()
                .map(|h| format!("{h:02}"))
                .collect::<Vec<_>>()
                .join(";")
        }
    ),
    key!(
        "disk_max_used_space_ratio",
        ["diskMaxUsedSpaceRatio"],
        |c, v| c.disk_max_used_space_ratio =
            uint(v, 100).map_err(|e| format!("{e} (percent)"))? as u8,
        |c| c.disk_max_used_space_ratio.to_string()
    ),
    key!(
        "max_connections",
        ["maxConnections"],
        |c, v| c.max_connections = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_connections.to_string()
    ),
    key!(
        "max_parked_pulls",
        ["maxParkedPulls"],
        |c, v| c.max_parked_pulls = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_parked_pulls.to_string()
    ),
    key!(
        "channel_expired_timeout",
        ["channelExpiredTimeout"],
        |c, v| c.channel_expired_timeout = millis(v)?,
        |c| c.channel_expired_timeout.as_millis().to_string()
    ),
    key!(
        "client_sweep_interval",
        ["clientSweepInterval"],
        |c, v| c.client_sweep_interval = millis(v)?,
        |c| c.client_sweep_interval.as_millis().to_string()
    ),
    key!(
        "max_frame_size",
        ["maxFrameSize"],
        |c, v| c.max_frame_size = uint(v, i32::MAX as u64)? as usize,
        |c| c.max_frame_size.to_string()
    ),
    key!(
        "shard_mailbox_capacity",
        ["shardMailboxCapacity"],
        |c, v| c.shard_mailbox_capacity = uint(v, u32::MAX as u64)? as usize,
        |c| c.shard_mailbox_capacity.to_string()
    ),
    key!(
        "max_requests_in_flight_per_connection",
        ["maxRequestsInFlightPerConnection"],
        |c, v| c.max_requests_in_flight_per_connection = uint(v, u32::MAX as u64)? as usize,
        |c| c.max_requests_in_flight_per_connection.to_string()
    ),
    key!(
        "max_queued_response_bytes_per_connection",
        ["maxQueuedResponseBytesPerConnection"],
        |c, v| c.max_queued_response_bytes_per_connection = uint(v, i64::MAX as u64)? as usize,
        |c| c.max_queued_response_bytes_per_connection.to_string()
    ),
    key!(
        "frame_timeout",
        ["frameTimeout"],
        |c, v| c.frame_timeout = millis(v)?,
        |c| c.frame_timeout.as_millis().to_string()
    ),
    key!(
        "server_channel_max_idle_time_seconds",
        ["serverChannelMaxIdleTimeSeconds"],
        |c, v| c.server_channel_max_idle_time_seconds =
            Duration::from_secs(uint(v, u32::MAX as u64)?),
        |c| c.server_channel_max_idle_time_seconds.as_secs().to_string()
    ),
    key!(
        "max_partial_frame_bytes",
        ["maxPartialFrameBytes"],
        |c, v| c.max_partial_frame_bytes = uint(v, i64::MAX as u64)? as usize,
        |c| c.max_partial_frame_bytes.to_string()
    ),
];

fn find_snake(key: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == key)
}

fn find_camel(key: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.camel.contains(&key))
}

fn find_key(key: &str) -> Option<&'static Key> {
    find_snake(key).or_else(|| find_camel(key))
}

/// `(snake_case key, broker.conf key)` for every setting, in the module doc's order.
pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
    KEYS.iter().map(|k| (k.name, k.camel[0]))
}

/// RocketMQ broker.conf keys ringmq recognises but does not act on: they log a warning
/// instead of stopping the start, so a broker's existing file loads as it is.
pub const IGNORED_ROCKETMQ_KEYS: &[&str] = &[
    "brokerIP2",
    "haListenPort",
    "haMasterAddress",
    "haSendHeartbeatInterval",
    "haHousekeepingInterval",
    "haTransferBatchSize",
    "haMaxGapNotInSync",
    "slaveReadEnable",
    "slaveTimeout",
    "inSyncReplicas",
    "minInSyncReplicas",
    "totalReplicas",
    "brokerPermission",
    "enablePropertyFilter",
    "filterServerNums",
    "filterSupportRetry",
    "enableCalcFilterBitMap",
    "sendMessageThreadPoolNums",
    "pullMessageThreadPoolNums",
    "queryMessageThreadPoolNums",
    "adminBrokerThreadPoolNums",
    "clientManageThreadPoolNums",
    "consumerManageThreadPoolNums",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity",
    "serverWorkerThreads",
    "serverSelectorThreads",
    "serverCallbackExecutorThreads",
    "serverSocketSndBufSize",
    "serverSocketRcvBufSize",
    "clientWorkerThreads",
    "useEpollNativeSelector",
    "useReentrantLockWhenPutMessage",
    "waitTimeMillsInSendQueue",
    "osPageCacheBusyTimeOutMills",
    "putMessageTimeout",
    "warmMapedFileEnable",
    "flushLeastPagesWhenWarmMapedFile",
    "flushCommitLogTimed",
    "flushConsumeQueueLeastPages",
    "flushConsumeQueueThoroughInterval",
    "commitIntervalCommitLog",
    "commitCommitLogLeastPages",
    "commitCommitLogThoroughInterval",
    "checkCRCOnRecover",
    "cleanResourceInterval",
    "cleanFileForciblyEnable",
    "deleteCommitLogFilesInterval",
    "deleteConsumeQueueFilesInterval",
    "destroyMapedFileIntervalForcibly",
    "redeleteHangedFileInterval",
    "diskSpaceCleanForciblyRatio",
    "diskSpaceWarningLevelRatio",
    "deleteFileBatchMax",
    "accessMessageInMemoryMaxRatio",
    "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInMemory",
    "longPollingEnable",
    "shortPollingTimeMills",
    "notifyConsumerIdsChangedEnable",
    "messageIndexEnable",
    "messageIndexSafe",
    "maxHashSlotNum",
    "maxIndexNum",
    "defaultQueryMaxNum",
    "messageDelayLevel",
    "timerWheelEnable",
    "enableScheduleMessageStats",
    "autoCreateSubscriptionGroup",
    "clusterTopicEnable",
    "brokerTopicEnable",
    "traceTopicEnable",
    "msgTraceTopicName",
    "rejectTransactionMessage",
    "fetchNamesrvAddrByAddressServer",
    "registerBrokerTimeoutMills",
    "registerNameServerPeriod",
    "forceRegister",
    "aclEnable",
    "duplicationEnable",
    "enableConsumeQueueExt",
    "metricsExporterType",
];

/// RocketMQ keys whose meaning ringmq cannot honour: `(key, harmless value, why)`. The
/// harmless value (RocketMQ's default) is ignored with a warning; any other value, or any
/// value when there is none, stops the start.
const UNSUPPORTED_ROCKETMQ_KEYS: &[(&str, Option<&str>, &str)] = &[
    (
        "storePathCommitLog",
        None,
        "each shard keeps its CommitLog in <storePathRootDir>/shard-<n>/commitlog; remove this key",
    ),
    (
        "storePathConsumeQueue",
        None,
        "each shard keeps its ConsumeQueues under <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "storePathIndex",
        None,
        "each shard keeps its IndexFiles under <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "storeCheckpoint",
        None,
        "each shard keeps its checkpoint in <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "abortFile",
        None,
        "each shard keeps its abort marker in <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "enableDLegerCommitLog",
        Some("false"),
        "the DLedger CommitLog is not implemented",
    ),
    (
        "enableControllerMode",
        Some("false"),
        "controller mode is not implemented",
    ),
    (
        "transientStorePoolEnable",
        Some("false"),
        "the transient store pool is not implemented",
    ),
];

// ---------------------------------------------------------------------------------------
// Loading

/// Applies sources one at a time, remembering where each value came from so that a
/// validation error names the source and spelling that set the bad value.
///
/// Sources apply in call order: call them in the documented order (TOML file, broker.conf,
/// overrides), as [`NodeConfig::load`] does.
pub struct ConfigLoader {
    config: NodeConfig,
    /// snake_case key → (origin, key as spelled there).
    origins: HashMap<&'static str, (String, String)>,
    warnings: Vec<String>,
}

impl Default for ConfigLoader {
    fn default() -> Self {
        ConfigLoader::new()
    }
}

impl ConfigLoader {
    /// Starts from [`NodeConfig::default`].
    pub fn new() -> ConfigLoader {
        ConfigLoader::from_config(NodeConfig::default())
    }

    /// Starts from `config` (tests use a small one).
    pub fn from_config(config: NodeConfig) -> ConfigLoader {
        ConfigLoader {
            config,
            origins: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    /// The settings so far, not yet validated.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The warnings logged so far (ignored RocketMQ keys), each `<source>: <key>: <why>`.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn toml_file(&mut self, path: &Path) -> Result<&mut Self, ConfigError> {
        let text = read(path)?;
        self.toml_str(&path.display().to_string(), &text)
    }

    /// A TOML document; `origin` names it in errors.
    pub fn toml_str(&mut self, origin: &str, text: &str) -> Result<&mut Self, ConfigError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigError::new(origin, "", format!("not valid TOML: {}", e.message()))
        })?;
        for (key, value) in &table {
            let Some(def) = find_snake(key) else {
                let message = match (find_camel(key), value) {
                    (Some(def), _) => {
                        format!("unknown key; TOML keys are snake_case: use {}", def.name)
                    }
                    (None, toml::Value::Table(_)) => {
                        "unknown key (sections are not used; keys sit at the top level)".into()
                    }
                    (None, _) => "unknown key".into(),
                };
                return Err(ConfigError::new(origin, key, message));
            };
            let value = match value {
                toml::Value::String(s) => Value::Str(s),
                toml::Value::Integer(n) => Value::Int(*n),
                toml::Value::Boolean(b) => Value::Bool(*b),
                other => {
                    return Err(ConfigError::new(
                        origin,
                        key,
                        format!(
                            "expected a string, integer or boolean, found {}",
                            other.type_str()
                        ),
                    ))
                }
            };
            self.set(origin, key, def, value)?;
        }
        Ok(self)
    }

    pub fn broker_conf_file(&mut self, path: &Path) -> Result<&mut Self, ConfigError> {
        let text = read(path)?;
        self.broker_conf_str(&path.display().to_string(), &text)
    }

    /// A RocketMQ broker.conf (Java properties); `origin` names it in errors.
    pub fn broker_conf_str(&mut self, origin: &str, text: &str) -> Result<&mut Self, ConfigError> {
        for (key, value) in parse_properties(text) {
            match find_camel(&key) {
                Some(def) => self.set(origin, &key, def, Value::Raw(&value))?,
                None => {
                    let hint = find_snake(&key).map(|def| {
                        format!(
                            "unknown key; broker.conf keys are camelCase: use {}",
                            def.camel[0]
                        )
                    });
                    self.unknown_rocketmq(origin, &key, &value, hint)?
                }
            }
        }
        Ok(self)
    }

    /// One `key=value` override; the key in either style.
    pub fn override_arg(&mut self, item: &str) -> Result<&mut Self, ConfigError> {
        const ORIGIN: &str = "command line";
        let Some((key, value)) = item.split_once('=') else {
            return Err(ConfigError::new(ORIGIN, item.trim(), "expected key=value"));
        };
        let (key, value) = (key.trim(), value.trim());
        match find_key(key) {
            Some(def) => self.set(ORIGIN, key, def, Value::Raw(value))?,
            None => self.unknown_rocketmq(ORIGIN, key, value, None)?,
        }
        Ok(self)
    }

    /// Validates and hands over the settings.
    pub fn finish(self) -> Result<NodeConfig, ConfigError> {
        match self.config.validate() {
            Ok(()) => Ok(self.config),
            Err(mut error) => {
                match self.origins.get(error.key.as_str()) {
                    Some((origin, spelled)) => {
                        error.origin = origin.clone();
                        error.key = spelled.clone();
                    }
                    None => error.origin = "defaults".into(),
                }
                Err(error)
            }
        }
    }

    fn set(
        &mut self,
        origin: &str,
        spelled: &str,
        def: &'static Key,
        value: Value,
    ) -> Result<(), ConfigError> {
        (def.set)(&mut self.config, value)
            .map_err(|message| ConfigError::new(origin, spelled, message))?;
        self.origins
            .insert(def.name, (origin.to_string(), spelled.to_string()));
        Ok(())
    }

    fn unknown_rocketmq(
        &mut self,
        origin: &str,
        key: &str,
        value: &str,
        hint: Option<String>,
    ) -> Result<(), ConfigError> {
        if IGNORED_ROCKETMQ_KEYS.contains(&key) {
            self.warn(
                origin,
                key,
                "a RocketMQ setting ringmq does not use; ignored".into(),
            );
            return Ok(());
        }
        if let Some((_, harmless, why)) =
            UNSUPPORTED_ROCKETMQ_KEYS.iter().find(|(k, _, _)| *k == key)
        {
            if harmless.is_some_and(|h| h.eq_ignore_ascii_case(value)) {
                self.warn(
                    origin,
                    key,
                    format!("{value} is RocketMQ's default; ignored"),
                );
                return Ok(());
            }
            return Err(ConfigError::new(
                origin,
                key,
                format!("not supported: {why}"),
            ));
        }
        Err(ConfigError::new(
            origin,
            key,
            hint.unwrap_or_else(|| "unknown key".into()),
        ))
    }

    fn warn(&mut self, origin: &str, key: &str, why: String) {
        tracing::warn!("{origin}: {key}: {why}");
        self.warnings.push(format!("{origin}: {key}: {why}"));
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&path.display().to_string(), "", format!("cannot read: {e}")))
}

/// Java properties: `key=value`, `key: value` or `key value`; `#`/`!` comment lines;
/// a line ending in an odd number of `\` continues on the next (leading blanks dropped);
/// `\t \n \r \f \uXXXX` escapes, any other escaped character stands for itself. Trailing
/// whitespace of a value is dropped too (Java keeps it; here it is always a mistake).
fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let first = first.trim_start();
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::new();
        let mut line = first;
        loop {
            let trailing = line.len() - line.trim_end_matches('\\').len();
            if trailing % 2 == 1 {
                logical.push_str(&line[..line.len() - 1]);
                match lines.next() {
                    Some(next) => line = next.trim_start(),
                    None => break,
                }
            } else {
                logical.push_str(line);
                break;
            }
        }
        let logical = logical.trim_end_matches(['\r', ' ', '\t', '\x0c']);
        // The key ends at the first unescaped '=', ':' or blank.
        let bytes = logical.as_bytes();
        let mut end = 0;
        while end < bytes.len() {
            match bytes[end] {
                b'\\' => end += 2,
                b'=' | b':' | b' ' | b'\t' | b'\x0c' => break,
                _ => end += 1,
            }
        }
        let end = end.min(bytes.len());
        let rest = logical[end..].trim_start_matches([' ', '\t', '\x0c']);
        let rest = rest
            .strip_prefix(['=', ':'])
            .unwrap_or(rest)
            .trim_start_matches([' ', '\t', '\x0c']);
        pairs.push((unescape(&logical[..end]), unescape(rest)));
    }
    pairs
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.clone().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) if hex.len() == 4 => {
                        out.push(decoded);
                        chars.nth(3);
                    }
                    _ => out.push('u'),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_match_the_doc_table() {
        let config = NodeConfig {
            store_path_root_dir: "/srv/store".into(),
            ..NodeConfig::default()
        };
        config.validate().unwrap();
        let doc = include_str!("node_config.rs");
        for (name, value) in config.settings() {
            let def = find_snake(name).unwrap();
            let row_start = format!("//! | `{name}` | `{}` ", def.camel[0]);
            let row = doc
                .lines()
                .find(|l| l.starts_with(&row_start))
                .unwrap_or_else(|| panic!("no doc row for {name}"));
            let cells: Vec<&str> = row.split(" | ").collect();
            let documented = cells[3].trim_matches('`');
            match name {
                "store_path_root_dir" => assert_eq!(documented, "$HOME/store"),
                "shards" => assert_eq!(documented, "CPUs"),
                "namesrv_addr" => assert_eq!(documented, "none"),
                _ => assert_eq!(documented, value, "default of {name}"),
            }
        }
    }

    #[test]
    fn every_key_round_trips_through_its_text() {
        let config = NodeConfig {
            store_path_root_dir: "/srv/store".into(),
            namesrv_addr: Some("10.0.0.1:9876;10.0.0.2:9876".into()),
            delete_when: vec![3, 4],
            ..NodeConfig::default()
        };
        let mut copy = NodeConfig::default();
        for (name, value) in config.settings() {
            (find_snake(name).unwrap().set)(&mut copy, Value::Raw(&value)).unwrap();
        }
        assert_eq!(copy, config);
    }

    #[test]
    fn camel_names_are_unique_and_distinct_from_ignored_keys() {
        let mut seen = std::collections::HashSet::new();
        for key in KEYS {
            for camel in key.camel {
                assert!(seen.insert(camel), "{camel}");
                assert!(find_snake(camel).is_none_or(|k| k.name == key.name));
                assert!(!IGNORED_ROCKETMQ_KEYS.contains(camel), "{camel}");
            }
        }
        for (key, _, _) in UNSUPPORTED_ROCKETMQ_KEYS {
            assert!(!IGNORED_ROCKETMQ_KEYS.contains(key) && find_key(key).is_none());
        }
    }

    #[test]
    fn properties_syntax() {
        let text = "# comment\n! other comment\n\n  a = 1 \nb:2\nc 3\nd=\\\n    x\\\n  y\ne=x\\=y\\u0041\nf\n  g  =  spaced value  \r\nh==v\n";
        let pairs = parse_properties(text);
        let expect: Vec<(String, String)> = [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("d", "xy"),
            ("e", "x=yA"),
            ("f", ""),
            ("g", "spaced value"),
            ("h", "=v"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(pairs, expect);
    }

    #[test]
    fn values_parse_by_type() {
        assert_eq!(uint(Value::Raw(" 42 "), 100), Ok(42));
        assert!(uint(Value::Raw("-1"), 100)
            .unwrap_err()
            .contains("negative"));
        assert!(uint(Value::Int(-1), 100).unwrap_err().contains("negative"));
        assert!(uint(Value::Raw("1k"), 100)
            .unwrap_err()
            .contains("not a whole number"));
        assert!(uint(Value::Raw("101"), 100)
            .unwrap_err()
            .contains("at most 100"));
        assert!(uint(Value::Raw("99999999999999999999999"), 100)
            .unwrap_err()
            .contains("too large"));
        assert!(uint(Value::Str("5"), 100)
            .unwrap_err()
            .contains("found a string"));
        assert_eq!(flag(Value::Raw("TRUE")), Ok(true));
        assert!(flag(Value::Raw("yes")).is_err());
        assert_eq!(hours_of_day(Value::Raw("04;03; 04")), Ok(vec![3, 4]));
        assert!(hours_of_day(Value::Raw("24")).is_err());
        assert!(hours_of_day(Value::Raw("03;")).is_err());
        assert_eq!(port(Value::Raw("0")), Ok(0));
        assert!(port(Value::Raw("65536")).is_err());
        assert!(ip(Value::Raw("broker.local"))
            .unwrap_err()
            .contains("not an IP"));
    }

    #[test]
    fn error_display() {
        let e = ConfigError::new("a.conf", "listenPort", "bad");
        assert_eq!(e.to_string(), "a.conf: listenPort: bad");
        let e = ConfigError::new("a.toml", "", "not valid TOML");
        assert_eq!(e.to_string(), "a.toml: not valid TOML");
    }
}
