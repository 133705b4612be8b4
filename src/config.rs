//! Store settings: one shard's store's fields, their validation and the RocketMQ names of
//! the keys they come from.
//!
//! Every limit the store enforces is a named field here, and its default is a constant of
//! [`defaults`]: the store owns its defaults, and the node's key table
//! (`node_config/keys.rs`) reads them, so each is written once and this module imports
//! nothing above the store. [`StoreConfig::validate`] is the store's own check when it
//! opens, refusing a bad value with a message that names the key (the node checks the
//! same keys first, with the source that set them).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::io::DataWrites;

/// `flushDiskType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FlushMode {
    /// Acknowledge after the batch's `fdatasync` (group commit).
    #[serde(rename = "SYNC_FLUSH")]
    Sync,
    /// Acknowledge once the batch is in the page cache; flush in the background.
    #[serde(rename = "ASYNC_FLUSH")]
    Async,
}

/// A value that is none of a setting's names: what was given and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{prefix}'{given}' is not one of {choices}")]
pub struct UnknownValue {
    /// `flushDiskType: ` when the message names its key, else empty.
    prefix: &'static str,
    pub given: String,
    pub choices: &'static str,
}

/// The node's key table parses into `Result<_, String>` setters; the message is the text.
impl From<UnknownValue> for String {
    fn from(error: UnknownValue) -> String {
        error.to_string()
    }
}

impl std::str::FromStr for FlushMode {
    type Err = UnknownValue;
    fn from_str(text: &str) -> Result<Self, UnknownValue> {
        match text {
            "sync" | "SYNC_FLUSH" => Ok(FlushMode::Sync),
            "async" | "ASYNC_FLUSH" => Ok(FlushMode::Async),
            other => Err(UnknownValue {
                prefix: "flushDiskType: ",
                given: other.to_string(),
                choices: "SYNC_FLUSH, ASYNC_FLUSH (or sync, async)",
            }),
        }
    }
}

impl FlushMode {
    /// How a store flushed this way should make its data writes: mapped when syncs are
    /// rare (ASYNC_FLUSH), `pwrite` when every batch is synced (see [`DataWrites`]).
    pub fn data_writes(self) -> DataWrites {
        match self {
            FlushMode::Sync => DataWrites::Pwrite,
            FlushMode::Async => DataWrites::Mapped,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FlushMode::Sync => "SYNC_FLUSH",
            FlushMode::Async => "ASYNC_FLUSH",
        }
    }
}

/// `brokerRole`: what a node is in a replicated pair, and so what a put waits for (D14).
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
    type Err = UnknownValue;
    fn from_str(text: &str) -> Result<Self, UnknownValue> {
        match text {
            "ASYNC_MASTER" => Ok(BrokerRole::AsyncMaster),
            "SYNC_MASTER" => Ok(BrokerRole::SyncMaster),
            "SLAVE" => Ok(BrokerRole::Slave),
            other => Err(UnknownValue {
                prefix: "",
                given: other.to_string(),
                choices: "ASYNC_MASTER, SYNC_MASTER, SLAVE",
            }),
        }
    }
}

/// One shard's store settings.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The store's directory (`storePathRootDir` for a single shard).
    pub dir: PathBuf,
    /// Shard id, carried in the top 8 bits of every physical offset (D4).
    pub shard_id: u8,
    /// `flushDiskType`.
    pub flush_mode: FlushMode,
    /// `brokerRole`: with `flush_mode`, what a put waits for before it is visible and
    /// answered (`store/waiters.rs`): SYNC_MASTER also waits for a replica's confirmation.
    /// A SLAVE's store refuses puts: its master's stream writes it (`store/replica.rs`).
    pub broker_role: BrokerRole,
    /// `mapedFileSizeCommitLog`: CommitLog segment size in bytes.
    pub commit_log_segment_size: u64,
    /// ConsumeQueue entries per file (`mappedFileSizeConsumeQueue / 20`).
    pub consume_queue_entries_per_file: u64,
    /// `flushIntervalCommitLog`: async flush period.
    pub flush_interval: Duration,
    /// `flushCommitLogLeastPages`: async flush only once this many 4 KiB pages are dirty...
    pub flush_least_pages: u64,
    /// `flushCommitLogThoroughInterval`: ...unless this long has passed since the last flush.
    pub flush_thorough_interval: Duration,
    /// `syncFlushTimeout`: a put waiting longer for its flush gets FLUSH_DISK_TIMEOUT.
    pub sync_flush_timeout: Duration,
    /// `slaveTimeout`: a SYNC_MASTER put flushed but waiting longer for a replica's
    /// confirmation gets FLUSH_SLAVE_TIMEOUT.
    pub slave_timeout: Duration,
    /// `haSlaveFallbehindMax`: a SYNC_MASTER put made while the replication watermark is
    /// more than this many bytes behind the written end is answered SLAVE_NOT_AVAILABLE at
    /// once instead of waiting for a slave that cannot confirm it soon.
    pub replica_fallbehind_max: u64,
    /// `flushIntervalConsumeQueue`: ConsumeQueue write-out and checkpoint period.
    pub checkpoint_interval: Duration,
    /// `maxMessageSize`: largest body accepted.
    pub max_message_size: usize,
    /// Most bytes encoded into one CommitLog write (one group commit).
    pub max_batch_bytes: usize,
    /// SYNC_FLUSH: longest the appender waits, after answering a batch, for the
    /// producers it answered to come back before it takes the next (`gather.rs`); never
    /// more than half the measured fsync time. Zero turns the wait off.
    pub group_commit_max_wait: Duration,
    /// SYNC_FLUSH: zeros a batch's write adds past its end, up to a page boundary this far
    /// ahead, once the zeros written before are less than half of it ahead
    /// (`append.rs`). Zero turns it off.
    pub sync_zero_ahead_bytes: u64,
    /// Most puts waiting for the appender before `put` pushes back with StoreBusy.
    pub max_pending_puts: usize,
    /// Address written as STOREHOST (the broker's reachable `ip:port`).
    pub store_host: SocketAddr,
    /// `maxTransferCountOnMessageInDisk`: most messages one read returns.
    pub max_transfer_count: u32,
    /// `maxTransferBytesOnMessageInDisk`: most bytes one read returns.
    pub max_transfer_bytes: usize,
    /// How far behind the CommitLog's end a record still counts as in memory, bytes:
    /// `accessMessageInMemoryMaxRatio` percent of the machine's RAM. QUERY_CONSUMER_OFFSET
    /// starts a new group at 0 on a queue whose first record is that close (§9.5).
    pub in_memory_window_bytes: u64,
    /// `messageIndexEnable`: build IndexFiles (`store/index.rs`).
    pub message_index_enable: bool,
    /// `maxHashSlotNum` and `maxIndexNum`: the shape of every IndexFile.
    pub index_geometry: crate::store::index_file::Geometry,
    pub retention: crate::store::retention::RetentionConfig,
    /// `messageDelayLevel` in ms, level 1 first: the delivery time a
    /// `SCHEDULE_TOPIC_XXXX` record's ConsumeQueue entry carries is its store time plus
    /// the delay of its queue's level ([`crate::store::topic::tags_code`]).
    pub schedule_delays_ms: Vec<u64>,
}

pub const MIB: u64 = 1024 * 1024;
pub const GIB: u64 = 1024 * MIB;
/// Room a segment must leave beyond the largest body, for the record's headers, topic and
/// properties. A record whose properties push it past a whole segment is refused at put.
pub const RECORD_OVERHEAD_MAX: u64 = 4096;
/// A disk page: CommitLog segments are whole pages.
pub const PAGE_SIZE: u64 = 4096;
/// Largest CommitLog segment: a shard's physical offsets have 56 bits (D4).
pub const MAX_SEGMENT_SIZE: u64 = 1 << 56;
/// Smallest `max_batch_bytes` accepted: one page.
pub const MIN_BATCH_BYTES: usize = PAGE_SIZE as usize;

/// The largest message body a `segment`-byte CommitLog segment holds: the record's
/// headers ([`RECORD_OVERHEAD_MAX`]) and the 8-byte end-of-segment marker must fit too.
pub fn largest_message_for_segment(segment: u64) -> u64 {
    segment.saturating_sub(RECORD_OVERHEAD_MAX + 8)
}

/// The store's defaults, RocketMQ's where the key is RocketMQ's. The node's key table
/// (`node_config/keys.rs`) takes each store key's default from here, and
/// `node_config::derive`'s test holds [`StoreConfig::new`] equal to the store settings
/// the node derives from its own defaults.
pub mod defaults {
    use std::time::Duration;

    use super::{BrokerRole, FlushMode, GIB, MIB};

    pub const FLUSH_MODE: FlushMode = FlushMode::Async;
    pub const BROKER_ROLE: BrokerRole = BrokerRole::AsyncMaster;
    pub const COMMIT_LOG_SEGMENT_SIZE: u64 = GIB;
    /// `mapedFileSizeConsumeQueue` is 6,000,000 bytes: 300,000 entries of 20.
    pub const CONSUME_QUEUE_ENTRIES_PER_FILE: u64 = 300_000;
    pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);
    pub const FLUSH_LEAST_PAGES: u64 = 4;
    pub const FLUSH_THOROUGH_INTERVAL: Duration = Duration::from_millis(10_000);
    pub const SYNC_FLUSH_TIMEOUT: Duration = Duration::from_millis(5000);
    pub const SLAVE_TIMEOUT: Duration = Duration::from_millis(3000);
    /// `haSlaveFallbehindMax`: RocketMQ's 256 MiB.
    pub const HA_SLAVE_FALLBEHIND_MAX: u64 = 256 * MIB;
    pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);
    pub const MAX_MESSAGE_SIZE: usize = 4 * MIB as usize;
    pub const MAX_BATCH_BYTES: usize = 4 * MIB as usize;
    pub const GROUP_COMMIT_MAX_WAIT: Duration = Duration::from_micros(1000);
    pub const SYNC_ZERO_AHEAD_BYTES: u64 = 256 * 1024;
    pub const MAX_PENDING_PUTS: usize = 65_536;
    pub const MAX_TRANSFER_COUNT: u32 = 32;
    pub const MAX_TRANSFER_BYTES: usize = 256 * 1024;
    /// `accessMessageInMemoryMaxRatio`: percent of RAM ([`super::in_memory_window_bytes`]).
    pub const IN_MEMORY_RATIO_PERCENT: u8 = 40;
    pub const MESSAGE_INDEX_ENABLE: bool = true;
    pub const INDEX_SLOTS: u32 = 5_000_000;
    pub const INDEX_ENTRIES: u32 = 20_000_000;
    /// `fileReservedTime`: 72 hours.
    pub const FILE_RESERVED: Duration = Duration::from_secs(72 * 3600);
    /// `deleteWhen`: 04.
    pub const DELETE_WHEN: &[u8] = &[4];
    pub const MAX_USED_PERCENT: u8 = 75;
    pub const CLEAN_FORCIBLY_PERCENT: u8 = 85;
    pub const WARNING_PERCENT: u8 = 90;
    pub const DELETE_BATCH_MAX: usize = 10;
    pub const CLEAN_INTERVAL: Duration = Duration::from_millis(10_000);
}

/// STOREHOST of a store made by [`StoreConfig::new`]: the node's default address
/// (`brokerIP1` 127.0.0.1, `listenPort` 10911, keys of the node, not of the store; the
/// node derives its stores' STOREHOST from them).
pub const DEFAULT_STORE_HOST: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 10911);

/// The delays of RocketMQ's default `messageDelayLevel` in ms, level 1 first. The levels
/// are the broker's (`broker::delay::DEFAULT_LEVELS`, which the key table uses); the store
/// needs only their lengths, and `node_config::derive`'s test holds the two equal.
pub const DEFAULT_SCHEDULE_DELAYS_MS: &[u64] = &[
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// `accessMessageInMemoryMaxRatio` percent of the machine's RAM, in bytes: how far behind
/// the CommitLog's end a record still counts as in memory. Reads `/proc/meminfo` (once per
/// store config, at start, off every reactor); a machine whose RAM cannot be read gets an
/// empty window rather than a guessed one.
pub fn in_memory_window_bytes(ratio_percent: u8) -> u64 {
    physical_memory_bytes().saturating_mul(u64::from(ratio_percent)) / 100
}

/// The machine's RAM in bytes (`MemTotal` of `/proc/meminfo`), 0 when it cannot be read.
fn physical_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total_bytes(&text))
        .unwrap_or(0)
}

/// `MemTotal:  24563380 kB` in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

impl StoreConfig {
    /// The store's defaults ([`defaults`]) for shard 0 in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            dir: dir.into(),
            shard_id: 0,
            flush_mode: defaults::FLUSH_MODE,
            broker_role: defaults::BROKER_ROLE,
            commit_log_segment_size: defaults::COMMIT_LOG_SEGMENT_SIZE,
            consume_queue_entries_per_file: defaults::CONSUME_QUEUE_ENTRIES_PER_FILE,
            flush_interval: defaults::FLUSH_INTERVAL,
            flush_least_pages: defaults::FLUSH_LEAST_PAGES,
            flush_thorough_interval: defaults::FLUSH_THOROUGH_INTERVAL,
            sync_flush_timeout: defaults::SYNC_FLUSH_TIMEOUT,
            slave_timeout: defaults::SLAVE_TIMEOUT,
            replica_fallbehind_max: defaults::HA_SLAVE_FALLBEHIND_MAX,
            checkpoint_interval: defaults::CHECKPOINT_INTERVAL,
            max_message_size: defaults::MAX_MESSAGE_SIZE,
            max_batch_bytes: defaults::MAX_BATCH_BYTES,
            group_commit_max_wait: defaults::GROUP_COMMIT_MAX_WAIT,
            sync_zero_ahead_bytes: defaults::SYNC_ZERO_AHEAD_BYTES,
            max_pending_puts: defaults::MAX_PENDING_PUTS,
            store_host: DEFAULT_STORE_HOST,
            max_transfer_count: defaults::MAX_TRANSFER_COUNT,
            max_transfer_bytes: defaults::MAX_TRANSFER_BYTES,
            in_memory_window_bytes: in_memory_window_bytes(defaults::IN_MEMORY_RATIO_PERCENT),
            message_index_enable: defaults::MESSAGE_INDEX_ENABLE,
            index_geometry: crate::store::index_file::Geometry {
                slots: defaults::INDEX_SLOTS,
                entries: defaults::INDEX_ENTRIES,
            },
            retention: crate::store::retention::RetentionConfig {
                file_reserved: defaults::FILE_RESERVED,
                delete_when: defaults::DELETE_WHEN.to_vec(),
                max_used_percent: defaults::MAX_USED_PERCENT,
                clean_forcibly_percent: defaults::CLEAN_FORCIBLY_PERCENT,
                warning_percent: defaults::WARNING_PERCENT,
                delete_batch_max: defaults::DELETE_BATCH_MAX,
                clean_interval: defaults::CLEAN_INTERVAL,
            },
            schedule_delays_ms: DEFAULT_SCHEDULE_DELAYS_MS.to_vec(),
        }
    }

    /// Tiny files, so tests roll segments and ConsumeQueue files within a few messages.
    pub fn test_min(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            commit_log_segment_size: 64 * 1024,
            consume_queue_entries_per_file: 64,
            max_message_size: 8 * 1024,
            max_batch_bytes: 16 * 1024,
            index_geometry: crate::store::index_file::Geometry {
                slots: 64,
                entries: 256,
            },
            ..StoreConfig::new(dir)
        }
    }

    /// Checks every value and the relationships between them.
    pub fn validate(&self) -> Result<(), String> {
        let segment = self.commit_log_segment_size;
        if segment < PAGE_SIZE || !segment.is_multiple_of(PAGE_SIZE) {
            return Err(format!(
                "mapedFileSizeCommitLog: {segment} must be a multiple of {PAGE_SIZE} and at least {PAGE_SIZE}"
            ));
        }
        if segment > MAX_SEGMENT_SIZE {
            return Err(format!(
                "mapedFileSizeCommitLog: {segment} exceeds the 56-bit offset space"
            ));
        }
        if self.max_message_size == 0 {
            return Err("maxMessageSize: must be at least 1".into());
        }
        if self.max_message_size as u64 > largest_message_for_segment(segment) {
            return Err(format!(
                "maxMessageSize: {} plus {RECORD_OVERHEAD_MAX} bytes of headers must fit a \
                 {segment}-byte CommitLog segment (mapedFileSizeCommitLog)",
                self.max_message_size
            ));
        }
        if self.consume_queue_entries_per_file == 0 {
            return Err("mappedFileSizeConsumeQueue: must hold at least one 20-byte entry".into());
        }
        if self.flush_interval.is_zero() {
            return Err("flushIntervalCommitLog: must be at least 1 ms".into());
        }
        if self.checkpoint_interval.is_zero() {
            return Err("flushIntervalConsumeQueue: must be at least 1 ms".into());
        }
        if self.sync_flush_timeout.is_zero() {
            return Err("syncFlushTimeout: must be at least 1 ms".into());
        }
        if self.slave_timeout.is_zero() {
            return Err("slaveTimeout: must be at least 1 ms".into());
        }
        if self.max_batch_bytes < MIN_BATCH_BYTES {
            return Err(format!(
                "maxBatchBytes: {} must be at least {MIN_BATCH_BYTES}",
                self.max_batch_bytes
            ));
        }
        if self.max_pending_puts == 0 {
            return Err("maxPendingPuts: must be at least 1".into());
        }
        self.retention.validate()?;
        let geometry = self.index_geometry;
        if geometry.slots == 0 {
            return Err("maxHashSlotNum: must be at least 1".into());
        }
        if geometry.entries < 2 {
            return Err("maxIndexNum: must be at least 2 (entry 0 is never used)".into());
        }
        if self.max_transfer_count == 0 || self.max_transfer_bytes == 0 {
            return Err("maxTransferCountOnMessageInDisk / maxTransferBytesOnMessageInDisk: must be at least 1".into());
        }
        Ok(())
    }

    /// The first physical offset of this shard's log (D4).
    pub fn offset_base(&self) -> u64 {
        (self.shard_id as u64) << 56
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        let text = "MemFree:   100 kB\nMemTotal:       24563380 kB\nBuffers: 1 kB\n";
        assert_eq!(mem_total_bytes(text), Some(24_563_380 * 1024));
        assert_eq!(mem_total_bytes("MemTotal: 12\n"), Some(12));
        assert_eq!(mem_total_bytes("MemTotal: 12 MB\n"), None);
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn defaults_validate() {
        StoreConfig::new("/tmp/x").validate().unwrap();
        StoreConfig::test_min("/tmp/x").validate().unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut config = StoreConfig::new("/tmp/x");
        config.commit_log_segment_size = 1000;
        assert!(config
            .validate()
            .unwrap_err()
            .starts_with("mapedFileSizeCommitLog"));
        let mut config = StoreConfig::test_min("/tmp/x");
        config.max_message_size = 1 << 20;
        assert!(config.validate().unwrap_err().starts_with("maxMessageSize"));
        assert!("fast"
            .parse::<FlushMode>()
            .unwrap_err()
            .to_string()
            .starts_with("flushDiskType"));
    }

    #[test]
    fn a_store_runs_in_every_role() {
        let mut config = StoreConfig::test_min("/tmp/x");
        for role in [
            BrokerRole::AsyncMaster,
            BrokerRole::SyncMaster,
            BrokerRole::Slave,
        ] {
            config.broker_role = role;
            assert_eq!(config.validate(), Ok(()), "{role:?}");
        }
        config.broker_role = BrokerRole::SyncMaster;
        config.slave_timeout = Duration::ZERO;
        assert!(config.validate().unwrap_err().starts_with("slaveTimeout"));
    }
}
