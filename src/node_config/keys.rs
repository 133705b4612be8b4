//! The key table: every setting with its broker.conf spellings, its default, its range,
//! its doc line, and how its value is parsed and printed. This is the one place a
//! single-key range is written, and the one place a default is written or (for the keys
//! of a lower layer, the store's, the wire's and the connections') named: the store's
//! defaults are `crate::config::defaults`, owned by the store so that it imports nothing
//! of the node; [`NodeConfig::default`], [`NodeConfig::validate`]
//! and `docs/configuration.md` are all read off it.

use std::time::Duration;

use super::error::ValueError;
use super::key::Preset::{Constant, Machine, Text};
use super::key::Range::{Number, Parsed, Rule};
use super::key::{Bounds, Key, Unit};
use super::parse::{
    broker_id, flag, flush_mode, group_names, home_dir, hours_of_day, io_name, ip, millis, name,
    optional_ip, port, reserved_time, root_dir, text, uint, Value,
};
use super::{default_shards, NodeConfig, CONTROLLER_ASSIGNED_ID, CQ_ENTRY_SIZE, MAX_SHARDS};
use crate::broker::naming::names::MAX_QUEUE_NUMS;
use crate::config::{defaults, MAX_SEGMENT_SIZE, MIN_BATCH_BYTES, PAGE_SIZE};
use crate::remoting::frame::DEFAULT_MAX_FRAME_LEN;

/// `registerNameServerPeriod`: RocketMQ's 30 s, a quarter of the name server's 120 s
/// heartbeat timeout, so three registrations may be lost before a broker expires.
pub const REGISTER_PERIOD: Duration = Duration::from_secs(30);
/// `registerBrokerTimeoutMills`: RocketMQ's 24 s, under the period so one slow name server
/// never delays the next round.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(24);
const _: () = assert!(REGISTER_TIMEOUT.as_millis() < REGISTER_PERIOD.as_millis());
/// `haSendHeartbeatInterval`: RocketMQ's 5 s.
pub const HA_HEARTBEAT: Duration = Duration::from_secs(5);
/// `haHousekeepingInterval`: RocketMQ's 20 s, four heartbeats.
pub const HA_HOUSEKEEPING: Duration = Duration::from_secs(20);
/// `haTransferBatchSize`: RocketMQ's 32 KiB.
pub const HA_BATCH: u32 = 32 * 1024;
/// `haSlaveFallbehindMax`: RocketMQ's 256 MiB.
pub const HA_FALLBEHIND_MAX: u64 = crate::config::defaults::HA_SLAVE_FALLBEHIND_MAX;
/// `slaveMetadataSyncInterval`: a second, against RocketMQ's 3 s (offsets) to 60 s (the
/// rest): what a promoted or reading slave may miss of its master's tables.
pub const METADATA_SYNC: Duration = Duration::from_secs(1);
/// `slaveMetadataRequestTimeout`: 3 s, well past a healthy master's answer, and short
/// enough that a hung master costs a few rounds of the table copy, not minutes.
pub const METADATA_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// `brokerHeartbeatInterval`: 300 ms, against RocketMQ's second: five beats fit the
/// timeout below, so one late beat never costs the broker its role.
pub const CONTROLLER_HEARTBEAT: Duration = Duration::from_millis(300);
/// `controllerHeartBeatTimeoutMills`: 1.5 s, against RocketMQ's 10 s: how long a master
/// that fell silent (a paused or cut-off host, its sockets open) keeps its group without
/// a master; its write lease is this less two beats (0.9 s).
pub const CONTROLLER_HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(1500);
/// `syncBrokerMetadataPeriod`: a second, against RocketMQ's 5 s: one small request, and
/// the bound on how late a broker that missed the controller's notice learns its role.
pub const REPLICA_INFO_POLL: Duration = Duration::from_secs(1);
/// `checkSyncStateSetPeriod`: a second, against RocketMQ's 5 s: after a promotion the
/// set holds the new master alone, and no other broker can be elected until a slave
/// that caught up is added, so this is how long the group stays without a candidate.
pub const SYNC_STATE_SET_CHECK: Duration = Duration::from_secs(1);
/// `haMaxTimeSlaveNotCatchup`: RocketMQ's 15 s.
pub const SLAVE_NOT_CATCHUP: Duration = Duration::from_secs(15);
/// `haSendBatchBytes`: 256 KiB, eight of RocketMQ's 32 KiB frames, so a catching-up slave
/// gets its bytes in few system calls while the copy each write costs stays bounded.
pub const HA_SEND_BATCH: usize = 256 * 1024;
/// The most `haSendBatchBytes` takes: a master holds this plus one frame per slave stream
/// while a write is under way.
const HA_SEND_BATCH_MAX: u64 = 16 << 20;
/// `haSlaveBatchBytesMax`: 4 MiB, 128 of RocketMQ's 32 KiB frames, so a catching-up slave
/// writes and syncs in large pieces while a step never waits on more than a few
/// milliseconds of a disk's sequential bandwidth.
pub const HA_SLAVE_BATCH_MAX: usize = 4 << 20;
/// The most `haSlaveBatchBytesMax` takes: a slave shard holds twice the value (the step on
/// the disk and the frames read ahead), so 64 shards at the bound hold 8 GiB.
const HA_SLAVE_BATCH_MAX_MAX: u64 = 64 << 20;
/// The least either batch setting takes: a page. Smaller still works (a write or a step
/// always takes at least one frame) but only adds system calls.
const HA_BATCH_BYTES_MIN: u64 = 4096;

macro_rules! key {
    (@ours rocketmq) => { false };
    (@ours ringmq) => { true };
    (
        $name:literal, $who:ident [$($conf:literal),+],
        default: $default:expr,
        range: $range:expr,
        meaning: $meaning:literal,
        set: |$c:ident, $v:ident| $set:expr,
        get: |$g:ident| $get:expr $(,)?
    ) => {
        Key {
            name: $name,
            conf: &[$($conf),+],
            ours: key!(@ours $who),
            default: $default,
            range: $range,
            meaning: $meaning,
            set: |$c: &mut NodeConfig, $v: Value| -> Result<(), ValueError> {
                $set;
                Ok(())
            },
            get: |$g: &NodeConfig| -> String { $get },
        }
    };
}

const AT_LEAST_1: Bounds = Bounds::at_least(1, Unit::Plain);
const AT_LEAST_1_MS: Bounds = Bounds::at_least(1, Unit::Millis);
/// Bounds of the IndexFile geometry (entry and slot numbers are Java ints in the file).
/// The slot table of the active file is in memory: 200 MB per shard at the bound.
const MAX_INDEX_SLOTS: u64 = 50_000_000;
/// A 4 GB file at the bound.
const MAX_INDEX_ENTRIES: u64 = 200_000_000;
const PORT: Bounds = Bounds::between(0, 65535, Unit::Plain);
// `file_reserved_time`'s default is printed in whole hours.
const _: () = assert!(defaults::FILE_RESERVED.as_secs().is_multiple_of(3600));

/// Every key, in the order `--print-config` and the docs list them.
pub(super) static KEYS: &[Key] = &[
    key!(
        "broker_name", rocketmq ["brokerName"],
        default: Text("broker-a"),
        range: Rule { doc: "not empty; no spaces or control characters", check: |c| plain_name(&c.broker_name) },
        meaning: "name in routes and cluster info",
        set: |c, v| c.broker_name = name(v)?,
        get: |c| c.broker_name.clone(),
    ),
    key!(
        "broker_cluster_name", rocketmq ["brokerClusterName"],
        default: Text("DefaultCluster"),
        range: Rule { doc: "not empty; no spaces or control characters", check: |c| plain_name(&c.broker_cluster_name) },
        meaning: "cluster in routes and cluster info",
        set: |c, v| c.broker_cluster_name = name(v)?,
        get: |c| c.broker_cluster_name.clone(),
    ),
    key!(
        "broker_id", rocketmq ["brokerId"],
        default: Text("0"),
        range: Parsed("a whole number; 0 for a master (see the relations); -1 in controller mode"),
        meaning: "0 for a master, above 0 for a slave; in controller mode the controllers assign it and this one is not used (RocketMQ's quick-start files say -1)",
        set: |c, v| c.broker_id = broker_id(v)?,
        get: |c| match c.broker_id {
            CONTROLLER_ASSIGNED_ID => "-1".into(),
            id => id.to_string(),
        },
    ),
    key!(
        "broker_role", rocketmq ["brokerRole"],
        default: Text("ASYNC_MASTER"),
        range: Parsed("`ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE`"),
        meaning: "a master acknowledges on its own write (`ASYNC_MASTER`) or once a slave holds the message too (`SYNC_MASTER`, D14); a `SLAVE` copies its master's CommitLog per shard and refuses sends; in controller mode the controllers choose the role and this says how a master acknowledges (see `all_ack_in_sync_state_set`)",
        set: |c, v| c.broker_role = text(v)?.parse()?,
        get: |c| c.broker_role.as_str().into(),
    ),
    key!(
        "broker_ip", rocketmq ["brokerIP1"],
        default: Text("127.0.0.1"),
        range: Rule { doc: "an IP address clients can reach: not unspecified, not multicast", check: |c| advertisable(c.broker_ip) },
        meaning: "address advertised in routes and written as STOREHOST; an IP, not a name",
        set: |c, v| c.broker_ip = ip(v)?,
        get: |c| c.broker_ip.to_string(),
    ),
    key!(
        "broker_ip2", rocketmq ["brokerIP2"],
        default: Text(""),
        range: Rule { doc: "empty, or an IP address slaves can reach: not unspecified, not multicast", check: |c| c.broker_ip2.map_or(Ok(()), advertisable) },
        meaning: "address advertised for the HA port (`haServerAddr`, where slaves stream from), as in RocketMQ; empty: `brokerIP1`",
        set: |c, v| c.broker_ip2 = optional_ip(v)?,
        get: |c| c.broker_ip2.map(|ip| ip.to_string()).unwrap_or_default(),
    ),
    key!(
        "bind_address", rocketmq ["bindAddress"],
        default: Text("0.0.0.0"),
        range: Parsed("an IP address"),
        meaning: "address the remoting, name-server and metrics listeners bind",
        set: |c, v| c.bind_address = ip(v)?,
        get: |c| c.bind_address.to_string(),
    ),
    key!(
        "listen_port", rocketmq ["listenPort"],
        default: Text("10911"),
        range: Number(PORT),
        meaning: "remoting port clients send to and pull from; 0 picks a free one",
        set: |c, v| c.listen_port = port(v)?,
        get: |c| c.listen_port.to_string(),
    ),
    key!(
        "namesrv_port", ringmq ["namesrvPort"],
        default: Text("9876"),
        range: Number(PORT),
        meaning: "port of the embedded name server (D1); 0 picks a free one",
        set: |c, v| c.namesrv_port = port(v)?,
        get: |c| c.namesrv_port.to_string(),
    ),
    key!(
        "metrics_port", rocketmq ["metricsPromExporterPort", "metricsPort"],
        default: Text("5557"),
        range: Number(PORT),
        meaning: "Prometheus text endpoint (D15; `/metrics`, and `/health` for readiness), RocketMQ 5's exporter port; 0 picks a free one",
        set: |c, v| c.metrics_port = port(v)?,
        get: |c| c.metrics_port.to_string(),
    ),
    key!(
        "metrics_exporter_type", rocketmq ["metricsExporterType"],
        // RocketMQ's default is DISABLE; ringmq has served its endpoint from the start
        // (D15), so its default stays PROM.
        default: Text("PROM"),
        range: Parsed("`PROM` or `DISABLE` (RocketMQ's `OTLP_GRPC` and `LOG` are refused)"),
        meaning: "`PROM`: serve the Prometheus endpoint on `metrics_port`; `DISABLE`: serve none (the figures are still kept for the admin requests). RocketMQ's default is `DISABLE`, ringmq's `PROM`",
        set: |c, v| c.metrics_exporter_type = text(v)?.parse()?,
        get: |c| c.metrics_exporter_type.as_str().into(),
    ),
    key!(
        "metrics_max_connections", ringmq ["metricsMaxConnections"],
        default: Text("256"),
        range: Number(Bounds::between(1, 65536, Unit::Plain)),
        meaning: "connections the metrics endpoint holds at once; at the cap a new one closes the oldest that has not sent a request, so idle connections never lock a scrape out",
        set: |c, v| c.metrics_max_connections = uint(v, 65536)? as usize,
        get: |c| c.metrics_max_connections.to_string(),
    ),
    key!(
        "metrics_idle_timeout", ringmq ["metricsIdleTimeout"],
        default: Text("5000"),
        range: Number(Bounds::between(1, 30000, Unit::Millis)),
        meaning: "ms a metrics connection may take to send its whole request head before it is closed",
        set: |c, v| c.metrics_idle_timeout = millis(v)?,
        get: |c| c.metrics_idle_timeout.as_millis().to_string(),
    ),
    key!(
        "metrics_max_topics", ringmq ["metricsMaxTopics"],
        default: Text("1000"),
        range: Number(Bounds::between(0, 1_000_000, Unit::Plain)),
        meaning: "topics each shard keeps per-topic rates and series for (`topicPutTps`, `ringmq_topic_*`); more are left out and counted in `ringmq_stats_keys_over_cap`",
        set: |c, v| c.metrics_max_topics = uint(v, 1_000_000)? as usize,
        get: |c| c.metrics_max_topics.to_string(),
    ),
    key!(
        "metrics_max_groups", ringmq ["metricsMaxGroups"],
        default: Text("1000"),
        range: Number(Bounds::between(0, 1_000_000, Unit::Plain)),
        meaning: "(group, topic) pairs each shard keeps per-group rates and series for (`consumeTps`, `ringmq_group_*`, `ringmq_consumer_lag_messages`); more are left out and counted",
        set: |c, v| c.metrics_max_groups = uint(v, 1_000_000)? as usize,
        get: |c| c.metrics_max_groups.to_string(),
    ),
    key!(
        "namesrv_addr", rocketmq ["namesrvAddr"],
        default: Text(""),
        range: Rule { doc: "`host:port`, several `;`-separated; empty for none", check: |c| c.namesrv_addr.as_deref().map_or(Ok(()), host_ports) },
        meaning: "external name servers the broker registers with (every `registerNameServerPeriod`, at once when its topics change, unregistered at a clean stop); set, the embedded name server does not run",
        set: |c, v| {
            let s = text(v)?;
            c.namesrv_addr = if s.is_empty() {
                None
            } else {
                Some(s.to_string())
            }
        },
        get: |c| c.namesrv_addr.clone().unwrap_or_default(),
    ),
    key!(
        "register_name_server_period", rocketmq ["registerNameServerPeriod"],
        default: Constant(|| REGISTER_PERIOD.as_millis().to_string()),
        range: Number(Bounds::between(1000, 60_000, Unit::Millis)),
        meaning: "how often the broker registers with every name server of `namesrvAddr`, ms (RocketMQ clamps its value to 10-60 s; below 10 s is allowed here)",
        set: |c, v| c.register_name_server_period = millis(v)?,
        get: |c| c.register_name_server_period.as_millis().to_string(),
    ),
    key!(
        "register_broker_timeout_mills", rocketmq ["registerBrokerTimeoutMills"],
        default: Constant(|| REGISTER_TIMEOUT.as_millis().to_string()),
        range: Number(Bounds::between(100, 60_000, Unit::Millis)),
        meaning: "how long one registration with one name server may take (connect and answer), ms",
        set: |c, v| c.register_broker_timeout_mills = millis(v)?,
        get: |c| c.register_broker_timeout_mills.as_millis().to_string(),
    ),
    key!(
        "ha_listen_port", rocketmq ["haListenPort"],
        default: Text(""),
        range: Rule { doc: "a port; empty for `listenPort` + 1 (0 picks a free one)", check: |_| Ok(()) },
        meaning: "port a master's slaves replicate from (one stream per shard, all on this port); a master listens on it, a slave does not",
        set: |c, v| {
            let s = text(v)?;
            c.ha_listen_port = if s.trim().is_empty() { None } else { Some(port(Value::Raw(s))?) }
        },
        get: |c| c.ha_listen_port.map(|p| p.to_string()).unwrap_or_default(),
    ),
    key!(
        "ha_master_address", rocketmq ["haMasterAddress"],
        default: Text(""),
        range: Rule { doc: "`host:port`; empty to learn it from the name servers", check: |c| c.ha_master_address.as_deref().map_or(Ok(()), host_ports) },
        meaning: "a slave's master HA address (its `haListenPort`); when empty the slave learns it from the name servers' answer to its registration",
        set: |c, v| {
            let s = text(v)?;
            c.ha_master_address = if s.trim().is_empty() { None } else { Some(s.trim().to_string()) }
        },
        get: |c| c.ha_master_address.clone().unwrap_or_default(),
    ),
    key!(
        "ha_send_heartbeat_interval", rocketmq ["haSendHeartbeatInterval"],
        default: Constant(|| HA_HEARTBEAT.as_millis().to_string()),
        range: Number(Bounds::between(100, 60_000, Unit::Millis)),
        meaning: "a master sends an empty frame, and a slave its offset, after this long without one, ms",
        set: |c, v| c.ha_send_heartbeat_interval = millis(v)?,
        get: |c| c.ha_send_heartbeat_interval.as_millis().to_string(),
    ),
    key!(
        "ha_housekeeping_interval", rocketmq ["haHousekeepingInterval"],
        default: Constant(|| HA_HOUSEKEEPING.as_millis().to_string()),
        range: Number(Bounds::between(1000, 600_000, Unit::Millis)),
        meaning: "either side of an HA stream closes it after this long without hearing from the other, ms",
        set: |c, v| c.ha_housekeeping_interval = millis(v)?,
        get: |c| c.ha_housekeeping_interval.as_millis().to_string(),
    ),
    key!(
        "ha_transfer_batch_size", rocketmq ["haTransferBatchSize"],
        default: Constant(|| HA_BATCH.to_string()),
        range: Number(Bounds::between(4096, crate::replication::wire::FRAME_BODY_MAX as u64, Unit::Plain)),
        meaning: "largest frame of CommitLog bytes a master sends a slave",
        set: |c, v| c.ha_transfer_batch_size = uint(v, crate::replication::wire::FRAME_BODY_MAX as u64)? as u32,
        get: |c| c.ha_transfer_batch_size.to_string(),
    ),
    key!(
        "ha_send_batch_bytes", ringmq ["haSendBatchBytes"],
        default: Constant(|| HA_SEND_BATCH.to_string()),
        range: Number(Bounds::between(HA_BATCH_BYTES_MIN, HA_SEND_BATCH_MAX, Unit::Plain)),
        meaning: "a master gathers a slave's frames into one write until the write holds this many bytes (the frame that reaches it is the write's last, so a write always carries a whole frame): each slave stream holds up to this plus one frame while a write is under way",
        set: |c, v| c.ha_send_batch_bytes = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.ha_send_batch_bytes.to_string(),
    ),
    key!(
        "ha_slave_fallbehind_max", rocketmq ["haSlaveFallbehindMax"],
        default: Constant(|| HA_FALLBEHIND_MAX.to_string()),
        range: Number(AT_LEAST_1),
        meaning: "a SYNC_MASTER answers SLAVE_NOT_AVAILABLE at once while no slave is within this many bytes of its log",
        set: |c, v| c.ha_slave_fallbehind_max = uint(v, u64::MAX)?,
        get: |c| c.ha_slave_fallbehind_max.to_string(),
    ),
    key!(
        "ha_slave_batch_bytes_max", ringmq ["haSlaveBatchBytesMax"],
        default: Constant(|| HA_SLAVE_BATCH_MAX.to_string()),
        range: Number(Bounds::between(HA_BATCH_BYTES_MIN, HA_SLAVE_BATCH_MAX_MAX, Unit::Plain)),
        meaning: "a slave appends (and under SYNC_FLUSH syncs, then reports) the frames it received in steps, each closed by the frame that takes it to this many bytes (so a step always takes a whole frame), and reads this many bytes of frames ahead of the step on the disk: a slave shard holds about twice this",
        set: |c, v| c.ha_slave_batch_bytes_max = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.ha_slave_batch_bytes_max.to_string(),
    ),
    key!(
        "sync_from_last_file", rocketmq ["syncFromLastFile"],
        default: Text("false"),
        range: Parsed("`true` or `false`"),
        meaning: "an empty slave starts at its master's last CommitLog segment instead of its whole retained history",
        set: |c, v| c.sync_from_last_file = flag(v)?,
        get: |c| c.sync_from_last_file.to_string(),
    ),
    key!(
        "enable_controller_mode", rocketmq ["enableControllerMode"],
        default: Text("false"),
        range: Parsed("`true` or `false`"),
        meaning: "the controllers of `controller_addr` choose which broker of the group is master and give its epoch; the broker registers, beats and changes role as they decide (D18, docs/operations.md)",
        set: |c, v| c.enable_controller_mode = flag(v)?,
        get: |c| c.enable_controller_mode.to_string(),
    ),
    key!(
        "all_ack_in_sync_state_set", rocketmq ["allAckInSyncStateSet"],
        default: Text("false"),
        range: Parsed("`true` or `false`"),
        meaning: "controller mode: a master acknowledges a message once every member of the SyncStateSet holds it, whatever `broker_role` says; `false`: a `SYNC_MASTER` does so too, an `ASYNC_MASTER` or `SLAVE` acknowledges on its own write (RocketMQ's `inSyncReplicas=1`); unused outside controller mode, as in RocketMQ",
        set: |c, v| c.all_ack_in_sync_state_set = flag(v)?,
        get: |c| c.all_ack_in_sync_state_set.to_string(),
    ),
    key!(
        "controller_addr", rocketmq ["controllerAddr"],
        default: Text(""),
        range: Rule { doc: "`host:port` separated by `;`; empty without controller mode", check: |c| c.controller_addr.as_deref().map_or(Ok(()), host_ports) },
        meaning: "the controllers (each one's `controllerDLegerPeers` address) a broker in controller mode talks to",
        set: |c, v| {
            let s = text(v)?;
            c.controller_addr = if s.trim().is_empty() { None } else { Some(s.trim().to_string()) }
        },
        get: |c| c.controller_addr.clone().unwrap_or_default(),
    ),
    key!(
        "broker_heartbeat_interval", rocketmq ["brokerHeartbeatInterval"],
        default: Constant(|| CONTROLLER_HEARTBEAT.as_millis().to_string()),
        range: Number(Bounds::between(50, 10_000, Unit::Millis)),
        meaning: "a broker in controller mode beats to the controller leader this often, ms",
        set: |c, v| c.broker_heartbeat_interval = millis(v)?,
        get: |c| c.broker_heartbeat_interval.as_millis().to_string(),
    ),
    key!(
        "controller_heart_beat_timeout_mills", rocketmq ["controllerHeartBeatTimeoutMills"],
        default: Constant(|| CONTROLLER_HEARTBEAT_TIMEOUT.as_millis().to_string()),
        range: Number(Bounds::between(200, 120_000, Unit::Millis)),
        meaning: "sent with each beat: the controller counts this broker dead when it heard nothing for this long (it clamps the value to its own bounds), ms",
        set: |c, v| c.controller_heart_beat_timeout_mills = millis(v)?,
        get: |c| c.controller_heart_beat_timeout_mills.as_millis().to_string(),
    ),
    key!(
        "sync_broker_metadata_period", rocketmq ["syncBrokerMetadataPeriod"],
        default: Constant(|| REPLICA_INFO_POLL.as_millis().to_string()),
        range: Number(Bounds::between(100, 60_000, Unit::Millis)),
        meaning: "a broker in controller mode asks the controller for its group's master and SyncStateSet this often, besides the controller's role-change notices, ms",
        set: |c, v| c.sync_broker_metadata_period = millis(v)?,
        get: |c| c.sync_broker_metadata_period.as_millis().to_string(),
    ),
    key!(
        "check_sync_state_set_period", rocketmq ["checkSyncStateSetPeriod"],
        default: Constant(|| SYNC_STATE_SET_CHECK.as_millis().to_string()),
        range: Number(Bounds::between(100, 60_000, Unit::Millis)),
        meaning: "a master in controller mode looks this often at which slaves caught up on every shard and asks the controller to add them to the SyncStateSet, ms",
        set: |c, v| c.check_sync_state_set_period = millis(v)?,
        get: |c| c.check_sync_state_set_period.as_millis().to_string(),
    ),
    key!(
        "ha_max_time_slave_not_catchup", rocketmq ["haMaxTimeSlaveNotCatchup"],
        default: Constant(|| SLAVE_NOT_CATCHUP.as_millis().to_string()),
        range: Number(Bounds::between(1_000, 600_000, Unit::Millis)),
        meaning: "controller mode: a master asks the controllers to remove a SyncStateSet member that has not caught up for this long; until they did, its SYNC_MASTER batches wait for that member, after they did it acknowledges without it, ms",
        set: |c, v| c.ha_max_time_slave_not_catchup = millis(v)?,
        get: |c| c.ha_max_time_slave_not_catchup.as_millis().to_string(),
    ),
    key!(
        "slave_read_enable", rocketmq ["slaveReadEnable"],
        default: Text("false"),
        range: Parsed("`true` or `false`"),
        meaning: "a pull that reads further behind the log's end than `accessMessageInMemoryMaxRatio` of RAM is told to go to the group's `whichBrokerWhenConsumeSlowly` (a slave); off, consumers are sent to the master",
        set: |c, v| c.slave_read_enable = flag(v)?,
        get: |c| c.slave_read_enable.to_string(),
    ),
    key!(
        "slave_metadata_sync_interval", ringmq ["slaveMetadataSyncInterval"],
        default: Constant(|| METADATA_SYNC.as_millis().to_string()),
        range: Number(Bounds::between(100, 60_000, Unit::Millis)),
        meaning: "a slave copies its master's topics, subscription groups, consumer and delay offsets and request modes this often (the bound on how stale they are), ms",
        set: |c, v| c.slave_metadata_sync_interval = millis(v)?,
        get: |c| c.slave_metadata_sync_interval.as_millis().to_string(),
    ),
    key!(
        "slave_metadata_request_timeout", ringmq ["slaveMetadataRequestTimeout"],
        default: Constant(|| METADATA_REQUEST_TIMEOUT.as_millis().to_string()),
        range: Number(Bounds::between(100, 60_000, Unit::Millis)),
        meaning: "longest a slave waits for its master to connect or answer one request of the table copy before the round fails (it keeps what it has and tries again next interval), ms",
        set: |c, v| c.slave_metadata_request_timeout = millis(v)?,
        get: |c| c.slave_metadata_request_timeout.as_millis().to_string(),
    ),
    key!(
        "store_path_root_dir", rocketmq ["storePathRootDir"],
        default: Machine { shown: "`$HOME/store`", value: || home_dir().map(|_| "~/store".into()) },
        range: Rule { doc: "a path; a leading `~` is `$HOME`", check: |c| non_empty_root(c) },
        meaning: "root of the shard stores (`shard-0`, `shard-1`, ...)",
        set: |c, v| c.store_path_root_dir = root_dir(v)?,
        get: |c| c.store_path_root_dir.display().to_string(),
    ),
    key!(
        "shards", ringmq ["shards"],
        default: Machine { shown: "one per CPU, at most 64", value: || Some(default_shards().to_string()) },
        range: Number(Bounds::between(1, MAX_SHARDS as u64, Unit::Plain)),
        meaning: "shards (pinned threads, each with its own store); fixed once a store root is made",
        set: |c, v| c.shards = uint(v, u8::MAX as u64)? as u8,
        get: |c| c.shards.to_string(),
    ),
    key!(
        "pin_shard_threads", ringmq ["pinShardThreads"],
        default: Text("true"),
        range: Parsed("`true` or `false`"),
        meaning: "pin shard n's thread to the n-th CPU the process may use (best effort: a refusal is logged); `false` leaves placement to the scheduler, for nodes sharing CPUs with others (several nodes on one host, tests)",
        set: |c, v| c.pin_shard_threads = flag(v)?,
        get: |c| c.pin_shard_threads.to_string(),
    ),
    key!(
        "io_backend", ringmq ["ioBackend"],
        default: Text("auto"),
        range: Parsed("`auto`, `uring` or `portable`"),
        meaning: "disk backend: `auto` (io_uring, else portable), `uring`, `portable` (D5)",
        set: |c, v| c.io_backend = text(v)?.parse()?,
        get: |c| io_name(c.io_backend).into(),
    ),
    key!(
        "network_io", ringmq ["networkIo"],
        default: Text("epoll"),
        range: Parsed("`epoll`, `uring` or `auto`"),
        meaning: "what carries each shard's accepted connections: `epoll` (a readiness wakeup and a system call per read and write), `uring` (receives and sends on the shard's io_uring, submitted together once per turn; the start fails if the kernel refuses io_uring) or `auto` (io_uring, else epoll with a warning). Pulled file bodies leave with sendfile/writev either way",
        set: |c, v| c.network_io = text(v)?.parse()?,
        get: |c| c.network_io.as_str().into(),
    ),
    key!(
        "network_ring_entries", ringmq ["networkRingEntries"],
        default: Text("1024"),
        range: Number(Bounds::between(64, 32_768, Unit::Plain)),
        meaning: "submission queue entries of each shard's network ring (`network_io` `uring`); a full queue is submitted early, so this bounds the entries one system call carries",
        set: |c, v| c.network_ring_entries = uint(v, 32_768)? as u32,
        get: |c| c.network_ring_entries.to_string(),
    ),
    key!(
        "network_recv_buffers", ringmq ["networkRecvBuffers"],
        default: Text("256"),
        range: Number(Bounds::between(16, 32_768, Unit::Plain)),
        meaning: "receive buffers each shard's network ring lends the kernel (`network_io` `uring`); a receive takes one only while its data is copied out, so this bounds receives completing in one turn, not connections",
        set: |c, v| c.network_recv_buffers = uint(v, 32_768)? as u16,
        get: |c| c.network_recv_buffers.to_string(),
    ),
    key!(
        "network_recv_buffer_bytes", ringmq ["networkRecvBufferBytes"],
        default: Text("16384"),
        range: Number(Bounds::between(1024, 1 << 20, Unit::Plain)),
        meaning: "bytes of each receive buffer (`network_io` `uring`): the most one arrival brings in; a connection holds up to four of these read and not yet taken before its receive stops until its reader catches up",
        set: |c, v| c.network_recv_buffer_bytes = uint(v, 1 << 20)? as u32,
        get: |c| c.network_recv_buffer_bytes.to_string(),
    ),
    key!(
        "network_send_queue_bytes", ringmq ["networkSendQueueBytes"],
        default: Text("262144"),
        range: Number(Bounds::between(4096, 1 << 30, Unit::Plain)),
        meaning: "bytes a connection may have written and not yet sent on the ring (`network_io` `uring`), beyond the socket's own buffer; past it writes wait, as they wait for a full socket buffer on epoll",
        set: |c, v| c.network_send_queue_bytes = uint(v, 1 << 30)? as usize,
        get: |c| c.network_send_queue_bytes.to_string(),
    ),
    key!(
        "flush_disk_type", rocketmq ["flushDiskType"],
        default: Constant(|| defaults::FLUSH_MODE.as_str().into()),
        range: Parsed("`SYNC_FLUSH` or `ASYNC_FLUSH`"),
        meaning: "`SYNC_FLUSH`: acknowledge after fdatasync; `ASYNC_FLUSH`: after the write",
        set: |c, v| c.flush_disk_type = flush_mode(v)?,
        get: |c| c.flush_disk_type.as_str().into(),
    ),
    key!(
        "maped_file_size_commit_log", rocketmq ["mapedFileSizeCommitLog", "mappedFileSizeCommitLog"],
        default: Constant(|| defaults::COMMIT_LOG_SEGMENT_SIZE.to_string()),
        range: Number(Bounds::between(PAGE_SIZE, MAX_SEGMENT_SIZE, Unit::Plain).multiple_of(PAGE_SIZE)),
        meaning: "CommitLog segment bytes",
        set: |c, v| c.maped_file_size_commit_log = uint(v, u64::MAX)?,
        get: |c| c.maped_file_size_commit_log.to_string(),
    ),
    key!(
        "maped_file_size_consume_queue", rocketmq ["mapedFileSizeConsumeQueue", "mappedFileSizeConsumeQueue"],
        default: Constant(|| (defaults::CONSUME_QUEUE_ENTRIES_PER_FILE * CQ_ENTRY_SIZE).to_string()),
        range: Number(Bounds::at_least(CQ_ENTRY_SIZE, Unit::Plain).multiple_of(CQ_ENTRY_SIZE)),
        meaning: "ConsumeQueue file bytes, whole 20-byte entries",
        set: |c, v| c.maped_file_size_consume_queue = uint(v, u64::MAX)?,
        get: |c| c.maped_file_size_consume_queue.to_string(),
    ),
    key!(
        "flush_interval_commit_log", rocketmq ["flushIntervalCommitLog"],
        default: Constant(|| defaults::FLUSH_INTERVAL.as_millis().to_string()),
        range: Number(AT_LEAST_1_MS),
        meaning: "async flush period, ms",
        set: |c, v| c.flush_interval_commit_log = millis(v)?,
        get: |c| c.flush_interval_commit_log.as_millis().to_string(),
    ),
    key!(
        "flush_commit_log_least_pages", rocketmq ["flushCommitLogLeastPages"],
        default: Constant(|| defaults::FLUSH_LEAST_PAGES.to_string()),
        range: Parsed("a whole number"),
        meaning: "async flush only once this many 4 KiB pages are dirty...",
        set: |c, v| c.flush_commit_log_least_pages = uint(v, u64::MAX)?,
        get: |c| c.flush_commit_log_least_pages.to_string(),
    ),
    key!(
        "flush_commit_log_thorough_interval", rocketmq ["flushCommitLogThoroughInterval"],
        default: Constant(|| defaults::FLUSH_THOROUGH_INTERVAL.as_millis().to_string()),
        range: Parsed("a whole number (ms)"),
        meaning: "...or once this many ms passed since the last flush",
        set: |c, v| c.flush_commit_log_thorough_interval = millis(v)?,
        get: |c| c.flush_commit_log_thorough_interval.as_millis().to_string(),
    ),
    key!(
        "sync_flush_timeout", rocketmq ["syncFlushTimeout"],
        default: Constant(|| defaults::SYNC_FLUSH_TIMEOUT.as_millis().to_string()),
        range: Number(AT_LEAST_1_MS),
        meaning: "a SYNC_FLUSH put waiting longer (ms) gets FLUSH_DISK_TIMEOUT",
        set: |c, v| c.sync_flush_timeout = millis(v)?,
        get: |c| c.sync_flush_timeout.as_millis().to_string(),
    ),
    key!(
        "slave_timeout", rocketmq ["slaveTimeout"],
        default: Constant(|| defaults::SLAVE_TIMEOUT.as_millis().to_string()),
        range: Number(AT_LEAST_1_MS),
        meaning: "a SYNC_MASTER put flushed but waiting longer (ms) for its replica gets FLUSH_SLAVE_TIMEOUT",
        set: |c, v| c.slave_timeout = millis(v)?,
        get: |c| c.slave_timeout.as_millis().to_string(),
    ),
    key!(
        "flush_interval_consume_queue", rocketmq ["flushIntervalConsumeQueue"],
        default: Constant(|| defaults::CHECKPOINT_INTERVAL.as_millis().to_string()),
        range: Number(AT_LEAST_1_MS),
        meaning: "ConsumeQueue write-out and checkpoint period, ms",
        set: |c, v| c.flush_interval_consume_queue = millis(v)?,
        get: |c| c.flush_interval_consume_queue.as_millis().to_string(),
    ),
    key!(
        "max_message_size", rocketmq ["maxMessageSize"],
        default: Constant(|| defaults::MAX_MESSAGE_SIZE.to_string()),
        range: Number(AT_LEAST_1),
        meaning: "largest message body accepted, bytes",
        set: |c, v| c.max_message_size = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_message_size.to_string(),
    ),
    key!(
        "max_transfer_count", rocketmq ["maxTransferCountOnMessageInDisk"],
        default: Constant(|| defaults::MAX_TRANSFER_COUNT.to_string()),
        range: Number(AT_LEAST_1),
        meaning: "most messages one pull returns",
        set: |c, v| c.max_transfer_count = uint(v, u32::MAX as u64)? as u32,
        get: |c| c.max_transfer_count.to_string(),
    ),
    key!(
        "max_transfer_bytes", rocketmq ["maxTransferBytesOnMessageInDisk"],
        default: Constant(|| defaults::MAX_TRANSFER_BYTES.to_string()),
        range: Number(AT_LEAST_1),
        meaning: "most bytes one pull returns",
        set: |c, v| c.max_transfer_bytes = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_transfer_bytes.to_string(),
    ),
    key!(
        "access_message_in_memory_max_ratio", rocketmq ["accessMessageInMemoryMaxRatio"],
        default: Constant(|| defaults::IN_MEMORY_RATIO_PERCENT.to_string()),
        range: Number(Bounds::between(0, 100, Unit::Percent)),
        meaning: "percent of RAM behind the CommitLog's end counted as in memory: a new group's \
                  offset query answers 0 on a queue whose first message is that recent",
        set: |c, v| c.access_message_in_memory_max_ratio = uint(v, 100)? as u8,
        get: |c| c.access_message_in_memory_max_ratio.to_string(),
    ),
    key!(
        "max_batch_bytes", ringmq ["maxBatchBytes"],
        default: Constant(|| defaults::MAX_BATCH_BYTES.to_string()),
        range: Number(Bounds::at_least(MIN_BATCH_BYTES as u64, Unit::Plain)),
        meaning: "most bytes in one CommitLog write (one group commit)",
        set: |c, v| c.max_batch_bytes = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_batch_bytes.to_string(),
    ),
    key!(
        "group_commit_max_wait", ringmq ["groupCommitMaxWait"],
        default: Constant(|| defaults::GROUP_COMMIT_MAX_WAIT.as_micros().to_string()),
        range: Parsed("a whole number of µs, at most 1000000; 0 never waits"),
        meaning: "SYNC_FLUSH: longest a batch waits (µs, and never more than half the measured fsync time) for the producers the last fsync answered, so they share the next one",
        set: |c, v| c.group_commit_max_wait = Duration::from_micros(uint(v, 1_000_000)?),
        get: |c| c.group_commit_max_wait.as_micros().to_string(),
    ),
    key!(
        "sync_zero_ahead_bytes", ringmq ["syncZeroAheadBytes"],
        default: Constant(|| defaults::SYNC_ZERO_AHEAD_BYTES.to_string()),
        range: Parsed("a whole number of bytes, at most 1073741824; 0 turns it off"),
        meaning: "SYNC_FLUSH: zeros a batch write adds past its end, so later fsyncs overwrite written blocks instead of converting fallocated ones (about half the fsync time on ext4)",
        set: |c, v| c.sync_zero_ahead_bytes = uint(v, 1 << 30)?,
        get: |c| c.sync_zero_ahead_bytes.to_string(),
    ),
    key!(
        "max_pending_puts", ringmq ["maxPendingPuts"],
        default: Constant(|| defaults::MAX_PENDING_PUTS.to_string()),
        range: Number(AT_LEAST_1),
        meaning: "puts waiting per shard before a send is refused as busy",
        set: |c, v| c.max_pending_puts = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_pending_puts.to_string(),
    ),
    key!(
        "message_index_enable", rocketmq ["messageIndexEnable"],
        default: Constant(|| defaults::MESSAGE_INDEX_ENABLE.to_string()),
        range: Parsed("`true` or `false`"),
        meaning: "index messages by key and unique key (IndexFile) for QUERY_MESSAGE; turning it on does not index what was stored before",
        set: |c, v| c.message_index_enable = flag(v)?,
        get: |c| c.message_index_enable.to_string(),
    ),
    key!(
        "max_hash_slot_num", rocketmq ["maxHashSlotNum"],
        default: Constant(|| defaults::INDEX_SLOTS.to_string()),
        range: Number(Bounds::between(1, MAX_INDEX_SLOTS, Unit::Plain)),
        meaning: "hash slots per IndexFile (4 bytes each, held in memory for each shard's active file); existing files must keep the value they were built with",
        set: |c, v| c.max_hash_slot_num = uint(v, u32::MAX as u64)? as u32,
        get: |c| c.max_hash_slot_num.to_string(),
    ),
    key!(
        "max_index_num", rocketmq ["maxIndexNum"],
        default: Constant(|| defaults::INDEX_ENTRIES.to_string()),
        range: Number(Bounds::between(2, MAX_INDEX_ENTRIES, Unit::Plain)),
        meaning: "entries per IndexFile (20 bytes each) before a new file starts; existing files must keep the value they were built with",
        set: |c, v| c.max_index_num = uint(v, u32::MAX as u64)? as u32,
        get: |c| c.max_index_num.to_string(),
    ),
    key!(
        "auto_create_topic_enable", rocketmq ["autoCreateTopicEnable"],
        default: Text("true"),
        range: Parsed("`true` or `false`"),
        meaning: "create a topic on its first send",
        set: |c, v| c.auto_create_topic_enable = flag(v)?,
        get: |c| c.auto_create_topic_enable.to_string(),
    ),
    key!(
        "auto_create_subscription_group", rocketmq ["autoCreateSubscriptionGroup"],
        default: Text("true"),
        range: Parsed("`true` or `false`"),
        meaning: "create a consumer group's subscription group (RocketMQ's defaults) on its first heartbeat or pull; off: a pull of an unknown group is SUBSCRIPTION_GROUP_NOT_EXIST",
        set: |c, v| c.auto_create_subscription_group = flag(v)?,
        get: |c| c.auto_create_subscription_group.to_string(),
    ),
    key!(
        "max_subscription_groups", ringmq ["maxSubscriptionGroups"],
        // Every auto-creation rewrites the whole table: at the bound it is a few MB.
        default: Text("10000"),
        range: Number(AT_LEAST_1),
        meaning: "subscription groups the node holds before a heartbeat or pull stops creating new ones (an unknown group's pull is then SUBSCRIPTION_GROUP_NOT_EXIST); UPDATE_AND_CREATE_SUBSCRIPTIONGROUP is not bounded by it",
        set: |c, v| c.max_subscription_groups = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_subscription_groups.to_string(),
    ),
    key!(
        "default_topic_queue_nums", rocketmq ["defaultTopicQueueNums"],
        default: Text("8"),
        range: Number(Bounds::between(1, MAX_QUEUE_NUMS as u64, Unit::Plain)),
        meaning: "queues of an auto-created topic",
        set: |c, v| c.default_topic_queue_nums = uint(v, u32::MAX as u64)? as u32,
        get: |c| c.default_topic_queue_nums.to_string(),
    ),
    key!(
        "file_reserved_time", rocketmq ["fileReservedTime"],
        default: Constant(|| (defaults::FILE_RESERVED.as_secs() / 3600).to_string()),
        range: Parsed("whole hours (0: a closed segment expires at once), or a number with `s`, `m` or `h` (ringmq's finer unit, e.g. `90s`); at most ten years"),
        meaning: "how long a closed CommitLog segment is kept after its last write",
        set: |c, v| c.file_reserved_time = reserved_time(v)?,
        get: |c| {
            let seconds = c.file_reserved_time.as_secs();
            if seconds.is_multiple_of(3600) {
                (seconds / 3600).to_string()
            } else {
                format!("{seconds}s")
            }
        },
    ),
    key!(
        "delete_when", rocketmq ["deleteWhen"],
        default: Constant(|| hours_text(defaults::DELETE_WHEN)),
        range: Rule { doc: "hours `00` to `23`, `;`-separated, at least one", check: |c| hours(&c.delete_when) },
        meaning: "hours of the day (UTC, e.g. `03;04`) when expired files are deleted",
        set: |c, v| c.delete_when = hours_of_day(v)?,
        get: |c| hours_text(&c.delete_when),
    ),
    key!(
        "disk_max_used_space_ratio", rocketmq ["diskMaxUsedSpaceRatio"],
        default: Constant(|| defaults::MAX_USED_PERCENT.to_string()),
        range: Number(Bounds::between(10, 95, Unit::Percent)),
        meaning: "disk use (%) at which expired files go at any hour",
        set: |c, v| c.disk_max_used_space_ratio =
            uint(v, 100).map_err(|e| ValueError::Percent(Box::new(e)))? as u8,
        get: |c| c.disk_max_used_space_ratio.to_string(),
    ),
    key!(
        "disk_space_clean_forcibly_ratio", rocketmq ["diskSpaceCleanForciblyRatio"],
        default: Constant(|| defaults::CLEAN_FORCIBLY_PERCENT.to_string()),
        range: Number(Bounds::between(10, 100, Unit::Percent)),
        meaning: "disk use (%) at which the oldest segments go even before they expire",
        set: |c, v| c.disk_space_clean_forcibly_ratio =
            uint(v, 100).map_err(|e| ValueError::Percent(Box::new(e)))? as u8,
        get: |c| c.disk_space_clean_forcibly_ratio.to_string(),
    ),
    key!(
        "disk_space_warning_level_ratio", rocketmq ["diskSpaceWarningLevelRatio"],
        default: Constant(|| defaults::WARNING_PERCENT.to_string()),
        range: Number(Bounds::between(10, 100, Unit::Percent)),
        meaning: "disk use (%) at which sends are refused (SERVICE_NOT_AVAILABLE) until cleanup brings it below",
        set: |c, v| c.disk_space_warning_level_ratio =
            uint(v, 100).map_err(|e| ValueError::Percent(Box::new(e)))? as u8,
        get: |c| c.disk_space_warning_level_ratio.to_string(),
    ),
    key!(
        "delete_file_batch_max", rocketmq ["deleteFileBatchMax"],
        default: Constant(|| defaults::DELETE_BATCH_MAX.to_string()),
        range: Number(Bounds::between(1, 10_000, Unit::Plain)),
        meaning: "most CommitLog segments one cleanup run deletes",
        set: |c, v| c.delete_file_batch_max = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.delete_file_batch_max.to_string(),
    ),
    key!(
        "clean_resource_interval", rocketmq ["cleanResourceInterval"],
        default: Constant(|| defaults::CLEAN_INTERVAL.as_millis().to_string()),
        range: Number(AT_LEAST_1_MS),
        meaning: "how often (ms) the retention cleaner runs",
        set: |c, v| c.clean_resource_interval = millis(v)?,
        get: |c| c.clean_resource_interval.as_millis().to_string(),
    ),
    key!(
        "retention_protected_groups", ringmq ["retentionProtectedGroups"],
        default: Text(""),
        range: Rule { doc: "consumer group names, `;`-separated, each 1 to 255 of `a-zA-Z0-9`, `%`, `_`, `-` and the vertical bar; empty for none", check: |c| protected_groups(&c.retention_protected_groups) },
        meaning: "consumer groups whose unconsumed messages retention keeps below `diskSpaceCleanForciblyRatio`: a segment holding a message at or after a listed group's committed offset is not deleted, expired or not (a queue the group never committed on is not protected); above the ratio they go anyway, logged and counted per group; empty: RocketMQ's consumer-blind retention",
        set: |c, v| c.retention_protected_groups = group_names(v)?,
        get: |c| c.retention_protected_groups.join(";"),
    ),
    key!(
        "message_delay_level", rocketmq ["messageDelayLevel"],
        default: Text(crate::broker::delay::DEFAULT_LEVELS),
        range: Parsed("1 to 1024 delays separated by spaces, level 1 first; each a whole number above 0 with a unit: `s`, `m`, `h` or `d` (RocketMQ's), or `ms` (ringmq's own), at most 3650 days"),
        meaning: "the delay of each delay level: a message sent with the property `DELAY` = n waits in `SCHEDULE_TOPIC_XXXX` queue n-1 this long before it is delivered to its topic (a level above the last is the last)",
        set: |c, v| c.message_delay_level = crate::broker::delay::DelayLevels::parse(text(v)?)?,
        get: |c| c.message_delay_level.to_string(),
    ),
    key!(
        "flush_delay_offset_interval", rocketmq ["flushDelayOffsetInterval"],
        // Java's default is 10000: a crash there delivers up to 10 s of delayed messages
        // again. ringmq keeps 1 s, its constant before this key existed: the file is
        // written only when a cursor moved, so the shorter interval costs nothing on an
        // idle node and shrinks the redelivery after a crash tenfold.
        default: Constant(|| crate::broker::DELAY_OFFSET_FLUSH_INTERVAL.as_millis().to_string()),
        range: Number(Bounds::between(10, 3_600_000, Unit::Millis)),
        meaning: "how often (ms) moved delay-level cursors are written to `config/delayOffset.json` (RocketMQ's default is 10000; ringmq's 1000 redelivers at most about 1 s of delayed messages after a crash, and an unmoved table is never rewritten)",
        set: |c, v| c.flush_delay_offset_interval = millis(v)?,
        get: |c| c.flush_delay_offset_interval.as_millis().to_string(),
    ),
    key!(
        "timer_wheel_enable", rocketmq ["timerWheelEnable"],
        default: Text("true"),
        range: Parsed("`true` or `false`"),
        meaning: "deliver timer messages (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) when they are due; off: a timer send is refused with SYSTEM_ERROR, as RocketMQ's WHEEL_TIMER_NOT_ENABLE",
        set: |c, v| c.timer_wheel_enable = flag(v)?,
        get: |c| c.timer_wheel_enable.to_string(),
    ),
    key!(
        "timer_max_delay_sec", rocketmq ["timerMaxDelaySec"],
        default: Text("259200"),
        range: Number(Bounds::between(1, crate::broker::timer::MAX_MAX_DELAY_SEC, Unit::Plain)),
        meaning: "how far ahead (seconds) a timer message may be due; a later one is refused with MESSAGE_ILLEGAL",
        set: |c, v| c.timer_max_delay_sec = uint(v, crate::broker::timer::MAX_MAX_DELAY_SEC)?,
        get: |c| c.timer_max_delay_sec.to_string(),
    ),
    key!(
        "timer_max_pending", ringmq ["timerMaxPending"],
        default: Text("20000000"),
        range: Number(Bounds::between(1, 1 << 40, Unit::Plain)),
        meaning: "timer messages waiting at once, all shards together (split evenly between them); past it a timer send is refused with SYSTEM_ERROR, as RocketMQ's WHEEL_TIMER_FLOW_CONTROL. Each costs 16 bytes of disk in the timer store, not memory",
        set: |c, v| c.timer_max_pending = uint(v, 1 << 40)?,
        get: |c| c.timer_max_pending.to_string(),
    ),
    key!(
        "timer_memory_entries", ringmq ["timerMemoryEntries"],
        default: Text("65536"),
        range: Number(Bounds::between(16, 1 << 24, Unit::Plain)),
        meaning: "newly indexed timers each shard holds in memory (about 40 bytes each) before it writes them out as a sorted run of its timer store; with 512 keys of each run read ahead, this bounds the memory a million pending timers cost",
        set: |c, v| c.timer_memory_entries = uint(v, 1 << 24)? as usize,
        get: |c| c.timer_memory_entries.to_string(),
    ),
    key!(
        "schedule_delivery_window", ringmq ["scheduleDeliveryWindow"],
        default: Text("256"),
        range: Number(Bounds::between(1, 65_536, Unit::Plain)),
        meaning: "due messages a shard's schedulers put into their real queues at once: each delay level's, and the timer's. Under SYNC_FLUSH the puts of a window share fsyncs (with 1, a level delivers one message per fsync); a crash may deliver the ones in flight again",
        set: |c, v| c.schedule_delivery_window = uint(v, 65_536)? as usize,
        get: |c| c.schedule_delivery_window.to_string(),
    ),
    key!(
        "reject_transaction_message", rocketmq ["rejectTransactionMessage"],
        default: Text("false"),
        range: Parsed("`true` or `false`"),
        meaning: "refuse transactional (prepared) sends with NO_PERMISSION, as RocketMQ does; off, they are stored as half messages until committed or rolled back",
        set: |c, v| c.reject_transaction_message = flag(v)?,
        get: |c| c.reject_transaction_message.to_string(),
    ),
    key!(
        "transaction_time_out", rocketmq ["transactionTimeOut"],
        default: Text("6000"),
        range: Number(Bounds::between(100, 86_400_000, Unit::Millis)),
        meaning: "a half message without a decision is checked back with its producer group once it is this old (a message's own `CHECK_IMMUNITY_TIME_IN_SECONDS` makes it later), ms",
        set: |c, v| c.transaction_time_out = millis(v)?,
        get: |c| c.transaction_time_out.as_millis().to_string(),
    ),
    key!(
        "transaction_check_interval", rocketmq ["transactionCheckInterval"],
        default: Text("30000"),
        range: Number(Bounds::between(100, 86_400_000, Unit::Millis)),
        meaning: "how often the master's check service walks the undecided half messages and sends CHECK_TRANSACTION_STATE for the ones old enough, ms (RocketMQ 5's default; 4.x had 60000)",
        set: |c, v| c.transaction_check_interval = millis(v)?,
        get: |c| c.transaction_check_interval.as_millis().to_string(),
    ),
    key!(
        "transaction_check_max", rocketmq ["transactionCheckMax"],
        default: Text("15"),
        range: Number(Bounds::between(1, crate::broker::transaction::window::MAX_COUNTED_CHECKS as u64, Unit::Plain)),
        meaning: "checks a half message gets; one still undecided after them is moved to TRANS_CHECK_MAX_TIME_TOPIC and counted, never delivered",
        set: |c, v| c.transaction_check_max = uint(v, crate::broker::transaction::window::MAX_COUNTED_CHECKS as u64)? as u32,
        get: |c| c.transaction_check_max.to_string(),
    ),
    key!(
        "max_connections", ringmq ["maxConnections"],
        default: Text("10000"),
        range: Number(AT_LEAST_1),
        meaning: "client connections the node accepts, all shards together",
        set: |c, v| c.max_connections = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_connections.to_string(),
    ),
    key!(
        "max_heartbeat_subscriptions", ringmq ["maxHeartbeatSubscriptions"],
        default: Text("1024"),
        range: Number(AT_LEAST_1),
        meaning: "subscriptions one heartbeat may register, all its consumer groups together (and as many groups); past it the heartbeat is refused",
        set: |c, v| c.max_heartbeat_subscriptions = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_heartbeat_subscriptions.to_string(),
    ),
    key!(
        "max_subscription_expression_bytes", ringmq ["maxSubscriptionExpressionBytes"],
        default: Text("16384"),
        range: Number(AT_LEAST_1),
        meaning: "longest subscription expression a heartbeat may register (its tag list counted alike); past it the heartbeat is refused",
        set: |c, v| c.max_subscription_expression_bytes = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_subscription_expression_bytes.to_string(),
    ),
    key!(
        "max_client_registrations", ringmq ["maxClientRegistrations"],
        default: Text("100000"),
        range: Number(AT_LEAST_1),
        meaning: "client registrations (one client in one producer or consumer group) the node holds, all shards together; a heartbeat that would register more is refused with SYSTEM_BUSY, registering nothing",
        set: |c, v| c.max_client_registrations = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_client_registrations.to_string(),
    ),
    key!(
        "max_parked_pulls", ringmq ["maxParkedPulls"],
        default: Text("65536"),
        range: Number(AT_LEAST_1),
        meaning: "long-polling pulls parked at once, all shards together (split evenly between them)",
        set: |c, v| c.max_parked_pulls = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_parked_pulls.to_string(),
    ),
    key!(
        "max_batch_ack_entries", ringmq ["maxBatchAckEntries"],
        // A client acks what it received in batches of at most 32 messages a pop: room
        // for one that gathers many receives.
        default: Text("1024"),
        range: Number(Bounds::between(1, 1 << 20, Unit::Plain)),
        meaning: "entries (one pop of one queue each) one BATCH_ACK_MESSAGE may carry; past it the batch is refused whole",
        set: |c, v| c.max_batch_ack_entries = uint(v, 1 << 20)? as usize,
        get: |c| c.max_batch_ack_entries.to_string(),
    ),
    key!(
        "max_batch_ack_bitset_bytes", ringmq ["maxBatchAckBitsetBytes"],
        // Redelivered offsets can sit far below the new ones of the same pop: a wide span.
        default: Text("65536"),
        range: Number(Bounds::between(1, 1 << 24, Unit::Plain)),
        meaning: "bytes of acknowledgement bitsets one BATCH_ACK_MESSAGE may carry, all its entries together; past it the batch is refused whole",
        set: |c, v| c.max_batch_ack_bitset_bytes = uint(v, 1 << 24)? as usize,
        get: |c| c.max_batch_ack_bitset_bytes.to_string(),
    ),
    key!(
        "channel_expired_timeout", rocketmq ["channelExpiredTimeout"],
        // Java's channel expiry (reference §9.7); clients heartbeat every 30 s.
        default: Text("120000"),
        range: Number(AT_LEAST_1_MS),
        meaning: "a client silent (no heartbeat) this long, ms, leaves its groups",
        set: |c, v| c.channel_expired_timeout = millis(v)?,
        get: |c| c.channel_expired_timeout.as_millis().to_string(),
    ),
    key!(
        "client_sweep_interval", ringmq ["clientSweepInterval"],
        default: Text("10000"),
        range: Number(AT_LEAST_1_MS),
        meaning: "how often expired clients are dropped, ms",
        set: |c, v| c.client_sweep_interval = millis(v)?,
        get: |c| c.client_sweep_interval.as_millis().to_string(),
    ),
    key!(
        "client_call_timeout", ringmq ["clientCallTimeout"],
        // Java's broker waits 10 s for a client it calls (`Broker2Client.callClient`).
        default: Text("10000"),
        range: Number(Bounds::between(1, 60_000, Unit::Millis)),
        meaning: "longest the broker waits for a client to answer a request it relays to it (GET_CONSUMER_RUNNING_INFO), ms; the admin tool's own timeout must be longer",
        set: |c, v| c.client_call_timeout = millis(v)?,
        get: |c| c.client_call_timeout.as_millis().to_string(),
    ),
    key!(
        "max_frame_size", ringmq ["maxFrameSize"],
        // Java's frameMaxLength, which the wire codec (and so the client) also uses.
        default: Constant(|| DEFAULT_MAX_FRAME_LEN.to_string()),
        range: Parsed("at most 2147483647; at least `max_message_size` + header room (see the relations)"),
        meaning: "largest remoting frame, bytes",
        set: |c, v| c.max_frame_size = uint(v, i32::MAX as u64)? as usize,
        get: |c| c.max_frame_size.to_string(),
    ),
    key!(
        "shard_mailbox_capacity", ringmq ["shardMailboxCapacity"],
        default: Text("4096"),
        range: Number(AT_LEAST_1),
        meaning: "requests queued for another shard before the sender waits (D3)",
        set: |c, v| c.shard_mailbox_capacity = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.shard_mailbox_capacity.to_string(),
    ),
    key!(
        "max_requests_in_flight_per_connection", ringmq ["maxRequestsInFlightPerConnection"],
        default: Text("1024"),
        range: Number(AT_LEAST_1),
        meaning: "requests read and not yet answered on one connection before it stops reading (TCP backpressure)",
        set: |c, v| c.max_requests_in_flight_per_connection = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_requests_in_flight_per_connection.to_string(),
    ),
    key!(
        "max_parked_requests_per_connection", ringmq ["maxParkedRequestsPerConnection"],
        default: Text("256"),
        range: Number(AT_LEAST_1),
        meaning: "long-polling pulls and pops parked at once on one connection; past it a pop is POLLING_FULL and a pull answers at once",
        set: |c, v| c.max_parked_requests_per_connection = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_parked_requests_per_connection.to_string(),
    ),
    key!(
        "max_queued_response_bytes_per_connection", ringmq ["maxQueuedResponseBytesPerConnection"],
        default: Text("4194304"),
        range: Number(AT_LEAST_1),
        meaning: "bytes held for one connection (requests in flight: frame plus 2 KiB each; responses queued and not yet written) before it stops reading",
        set: |c, v| c.max_queued_response_bytes_per_connection = uint(v, i64::MAX as u64)? as usize,
        get: |c| c.max_queued_response_bytes_per_connection.to_string(),
    ),
    key!(
        "max_requests_in_flight", ringmq ["maxRequestsInFlight"],
        default: Text("131072"),
        range: Number(AT_LEAST_1),
        meaning: "requests in flight on all connections together (parked pulls not counted), split evenly between the shards; past it a connection with one in flight stops reading",
        set: |c, v| c.max_requests_in_flight = uint(v, u32::MAX as u64)? as usize,
        get: |c| c.max_requests_in_flight.to_string(),
    ),
    key!(
        "max_queued_response_bytes", ringmq ["maxQueuedResponseBytes"],
        default: Text("1073741824"),
        range: Number(AT_LEAST_1),
        meaning: "bytes held for all connections together, as for the per-connection bound, split evenly between the shards; past it a connection holding any stops reading",
        set: |c, v| c.max_queued_response_bytes = uint(v, i64::MAX as u64)? as usize,
        get: |c| c.max_queued_response_bytes.to_string(),
    ),
    key!(
        "frame_timeout", ringmq ["frameTimeout"],
        default: Text("30000"),
        range: Number(AT_LEAST_1_MS),
        meaning: "ms a frame still arriving may go without 64 KiB more of it before the connection is closed",
        set: |c, v| c.frame_timeout = millis(v)?,
        get: |c| c.frame_timeout.as_millis().to_string(),
    ),
    key!(
        "server_channel_max_idle_time_seconds", rocketmq ["serverChannelMaxIdleTimeSeconds"],
        default: Text("120"),
        range: Number(Bounds::at_least(1, Unit::Seconds)),
        meaning: "seconds a connection may go without a request (none in flight) before it is closed",
        set: |c, v| c.server_channel_max_idle_time_seconds =
            Duration::from_secs(uint(v, u32::MAX as u64)?),
        get: |c| c.server_channel_max_idle_time_seconds.as_secs().to_string(),
    ),
    key!(
        "max_partial_frame_bytes", ringmq ["maxPartialFrameBytes"],
        default: Text("268435456"),
        range: Parsed("at least `max_frame_size` (see the relations)"),
        meaning: "bytes all connections together may hold of frames still arriving",
        set: |c, v| c.max_partial_frame_bytes = uint(v, i64::MAX as u64)? as usize,
        get: |c| c.max_partial_frame_bytes.to_string(),
    ),
    key!(
        "server_socket_snd_buf_size", rocketmq ["serverSocketSndBufSize"],
        // RocketMQ 5's default (NettySystemConfig's) is 0 too: the system's size.
        default: Text("0"),
        range: Number(Bounds::between(0, 1 << 30, Unit::Plain)),
        meaning: "SO_SNDBUF (bytes) of each accepted connection, which the kernel may clamp; 0 keeps the system's autotuned size",
        set: |c, v| c.server_socket_snd_buf_size = uint(v, 1 << 30)? as usize,
        get: |c| c.server_socket_snd_buf_size.to_string(),
    ),
    key!(
        "body_send", ringmq ["bodySend"],
        default: Text("auto"),
        range: Parsed("`auto`, `sendfile` or `mmap`"),
        meaning: "how pulled records leave: `auto` (sendfile for large ranges, writev from a mapping of the segment for small ones), `sendfile` (every range; mmap where the kernel refuses it) or `mmap` (every range)",
        set: |c, v| c.body_send = text(v)?.parse()?,
        get: |c| c.body_send.as_str().into(),
    ),
    key!(
        "connection_warn_burst", ringmq ["connectionWarnBurst"],
        default: Constant(|| crate::server::connection::WARN_BURST.to_string()),
        range: Number(Bounds::between(1, 1_000_000, Unit::Plain)),
        meaning: "connection warnings (bad frames, closed or paused connections) each shard logs per `connection_warn_interval` before it only counts them, so a flood of bad clients cannot flood the log",
        set: |c, v| c.connection_warn_burst = uint(v, 1_000_000)? as u32,
        get: |c| c.connection_warn_burst.to_string(),
    ),
    key!(
        "connection_warn_interval", ringmq ["connectionWarnInterval"],
        default: Constant(|| crate::server::connection::WARN_INTERVAL.as_millis().to_string()),
        range: Number(Bounds::between(1, 86_400_000, Unit::Millis)),
        meaning: "ms over which `connection_warn_burst` applies; also how often refused connections (past `max_connections`) are reported",
        set: |c, v| c.connection_warn_interval = millis(v)?,
        get: |c| c.connection_warn_interval.as_millis().to_string(),
    ),
];

pub(super) fn find_snake(key: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == key)
}

pub(super) fn find_conf(key: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.conf.contains(&key))
}

/// A key in either spelling.
pub(super) fn find_key(key: &str) -> Option<&'static Key> {
    find_snake(key).or_else(|| find_conf(key))
}

// ---------------------------------------------------------------------------------------
// The rules of the keys whose range is not a number.

fn plain_name(name: &str) -> Result<(), ValueError> {
    if name.is_empty() {
        return Err(ValueError::Missing {
            what: "must not be empty",
        });
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ValueError::refused(
            name,
            "must not contain spaces or control characters",
        ));
    }
    Ok(())
}

fn advertisable(ip: std::net::IpAddr) -> Result<(), ValueError> {
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(ValueError::NotAdvertisable { ip });
    }
    Ok(())
}

fn host_ports(addr: &str) -> Result<(), ValueError> {
    for part in addr.split(';') {
        let part = part.trim();
        let port = part
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(port))) if !host.is_empty() && port != 0 => {}
            _ => {
                return Err(ValueError::refused(
                    part,
                    "is not host:port (list several with ';')",
                ))
            }
        }
    }
    Ok(())
}

fn non_empty_root(config: &NodeConfig) -> Result<(), ValueError> {
    if config.store_path_root_dir.as_os_str().is_empty() {
        return Err(ValueError::Missing {
            what: "is empty (the default is $HOME/store and HOME is not set)",
        });
    }
    Ok(())
}

fn protected_groups(groups: &[String]) -> Result<(), ValueError> {
    for group in groups {
        crate::broker::naming::names::validate_group(group)?;
    }
    if let Some(repeated) = groups
        .iter()
        .enumerate()
        .find_map(|(at, group)| groups[..at].contains(group).then_some(group))
    {
        return Err(ValueError::Repeated {
            group: repeated.clone(),
        });
    }
    Ok(())
}

/// `deleteWhen` as a source writes it: `03;04`.
fn hours_text(hours: &[u8]) -> String {
    hours
        .iter()
        .map(|h| format!("{h:02}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn hours(hours: &[u8]) -> Result<(), ValueError> {
    if hours.is_empty() {
        return Err(ValueError::Missing {
            what: "must name at least one hour of the day",
        });
    }
    if let Some(&hour) = hours.iter().find(|&&h| h > 23) {
        return Err(ValueError::NotAnHour { hour });
    }
    Ok(())
}
