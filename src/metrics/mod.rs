//! Node metrics (D15): per-shard counters, gauges and HDR latency histograms,
//! rendered in the Prometheus text format by [`render`] and served by [`http`].
//!
//! Ownership: each shard owns one [`ShardMetrics`] and is its only writer; the metrics
//! thread only reads. Counters and gauges are relaxed atomics (a scrape may see one
//! counter a few events ahead of another, never a torn value); the per-code counters are
//! an atomic per code the node knows and one shared by every other code, so what a peer
//! sends can never add a series ([`CodeCounts`]). Latency histograms are
//! HDR histograms behind [`Locked`]: the shard takes the lock once per recorded request
//! and a scrape once per histogram, so it is never contended on the data path.
//!
//! Some figures are sampled rather than counted where they happen: the store's own
//! counters (appends, fsyncs, stored messages and bytes) live on the shard thread in
//! `Cell`s, so each shard copies them into its `ShardMetrics` once a second
//! ([`ShardMetrics::set_store`]); a scrape can lag them by up to a second.
//!
//! Rates (TPS) and the per-topic and per-group figures are the shard's sampler's
//! ([`rates`]): it derives them once a second (the per-key ones every 10 s) and publishes
//! them here, where GET_BROKER_RUNTIME_INFO, GET_TOPIC_STATS_INFO, GET_CONSUME_STATS and
//! scrapes read them. The per-key tables are bounded by `metrics_max_topics` and
//! `metrics_max_groups` per shard; what the caps leave out is counted.
//!
//! Families (every one carries `shard="<n>"` but the per-topic and per-group ones, summed
//! over the shards, and `ringmq_build_info` and `process_*`, which are the process's):
//!
//! | name | type | what |
//! |---|---|---|
//! | `ringmq_requests_total{code,name}` | counter | requests received, by request code and its Java name; codes the node does not know under `code="unknown",name="unknown"` |
//! | `ringmq_responses_total{status,name}` | counter | responses sent, by response code and its Java name (errors included); others under `status="unknown",name="unknown"` |
//! | `ringmq_messages_in_total` | counter | messages stored (the store's puts) |
//! | `ringmq_messages_out_total` | counter | messages returned by pulls |
//! | `ringmq_bytes_in_total` | counter | bytes read from client connections |
//! | `ringmq_bytes_out_total` | counter | bytes written to client connections, all paths |
//! | `ringmq_bytes_out_zero_copy_total` | counter | of those, stored records sent from the segment files (sendfile or the mapping, D8) |
//! | `ringmq_bytes_out_mmap_total` | counter | of the zero-copy bytes, those written from the segment's mapping |
//! | `ringmq_bytes_out_copied_total` | counter | of those, bytes written from user-space buffers (headers, small responses) |
//! | `ringmq_store_bytes_total` | counter | record bytes stored |
//! | `ringmq_appends_total` | counter | CommitLog writes (one per group-commit batch) |
//! | `ringmq_fsyncs_total` | counter | CommitLog fdatasyncs |
//! | `ringmq_store_task_panics_total` | counter | store or shard tasks that panicked; each poisons the store |
//! | `ringmq_index_entries_total` | counter | IndexFile entries added (one per key of each stored record) |
//! | `ringmq_index_errors_total` | counter | stored records the index could not take (they are stored, not findable by key) |
//! | `ringmq_index_queries_total` | counter | QUERY_MESSAGE lookups this shard's index answered |
//! | `ringmq_index_query_seconds_total` | counter | time spent in those lookups |
//! | `ringmq_retention_segments_deleted_total` | counter | CommitLog segments retention deleted |
//! | `ringmq_retention_bytes_deleted_total` | counter | bytes of those segments |
//! | `ringmq_retention_files_deleted_total` | counter | ConsumeQueue and index files retention deleted |
//! | `ringmq_retention_segments_kept_for_consumers` | gauge | segments the last deleting run would have deleted (at most `deleteFileBatchMax`) but kept because a protected consumer group (a retention hold) had not consumed them |
//! | `ringmq_retention_unconsumed_lost_total{group}` | counter | messages a protected group had not consumed that forced cleanup deleted, by group (the groups are `retentionProtectedGroups`, fixed at start, so traffic adds no series) |
//! | `ringmq_puts_refused_for_space_total` | counter | puts refused at `diskSpaceWarningLevelRatio` or above |
//! | `ringmq_disk_used_percent` | gauge | use of the store's disk at the cleaner's last run |
//! | `ringmq_connections` | gauge | open client connections |
//! | `ringmq_connections_total` | counter | connections accepted |
//! | `ringmq_connections_refused_total` | counter | connections closed at accept because `max_connections` were open |
//! | `ringmq_connection_read_pauses_total` | counter | times a connection stopped reading because its requests in flight or queued responses reached their bound |
//! | `ringmq_connection_idle_closes_total` | counter | connections closed after the idle timeout |
//! | `ringmq_connection_frame_timeouts_total` | counter | connections closed because a frame did not complete within `frame_timeout` |
//! | `ringmq_connection_partial_frame_refusals_total` | counter | connections closed because the node held `max_partial_frame_bytes` of partial frames |
//! | `ringmq_requests_in_flight` | gauge | requests read and not yet answered, all connections |
//! | `ringmq_queued_response_bytes` | gauge | response bytes queued and not yet written, all connections |
//! | `ringmq_request_bytes_in_flight` | gauge | bytes held by requests in flight (frames, and 2 KiB each for header and task), all connections |
//! | `ringmq_parked_requests` | gauge | requests in flight that are parked long-polling pulls, all connections |
//! | `ringmq_parked_pulls` | gauge | long-polling pulls parked now |
//! | `ringmq_request_latency_seconds{family}` | histogram | time from request to response, `send`, `pull` (parked time included) and `query` (QUERY_MESSAGE and VIEW_MESSAGE_BY_ID, the fan-out over the shards included); buckets [`LATENCY_BUCKETS_MICROS`] (100 µs to 60 s), so they sum over shards and nodes |
//! | `ringmq_forwarded_total` | counter | requests sent to another shard's mailbox, and delayed messages coming due that a scheduler sent to another shard's queue |
//! | `ringmq_retries_total` | counter | messages a consumer handed back (CONSUMER_SEND_MSG_BACK) stored for a later retry, on the shard that read them |
//! | `ringmq_dead_letters_total` | counter | messages sent to a `%DLQ%` topic: handed back at their last try (or with `delayLevel` -1), or a retry send past its maximum |
//! | `ringmq_timer_pending` | gauge | timer messages indexed in the shard's timer store and not yet delivered |
//! | `ringmq_timer_delivered_total` | counter | timer messages delivered (their copy acknowledged) |
//! | `ringmq_timer_lateness_seconds_total` | counter | time from each delivered timer message's due time to its copy's acknowledgement, summed |
//! | `ringmq_timer_cancelled_total` | counter | timer messages a `TIMER_DEL_UNIQKEY` cancellation kept from delivery, plus the cancellations |
//! | `ringmq_timer_skipped_total` | counter | timer records that could not be delivered at all (no `REAL_TOPIC`, an illegal message) and were skipped, logged |
//! | `ringmq_pop_delivered_total` | counter | messages handed out by POP_MESSAGE, redeliveries included |
//! | `ringmq_pop_redelivered_total` | counter | POP deliveries of messages not acknowledged within their invisible time |
//! | `ringmq_pop_acks_total` | counter | POP deliveries acknowledged (ACK_MESSAGE, BATCH_ACK_MESSAGE) |
//! | `ringmq_pop_stale_acks_total` | counter | acks and invisible-time changes naming a delivery not in flight (acknowledged already, redelivered since, never popped) |
//! | `ringmq_pop_dead_letters_total` | counter | popped messages past their group's `retryMaxTimes` sent to `%DLQ%<group>` |
//! | `ringmq_subscription_groups_refused_total` | counter | subscription groups a heartbeat or pull did not auto-create because the table held `maxSubscriptionGroups` |
//! | `ringmq_heartbeats_refused_total` | counter | heartbeats refused because the client table held `maxClientRegistrations` |
//! | `ringmq_pop_inflight{group}` | gauge | POP deliveries not yet acknowledged, by group (names are validated group names; groups with none are left out), updated every second |
//! | `ringmq_delay_pending{level}` | gauge | delayed messages of the level waiting in `SCHEDULE_TOPIC_XXXX` (its queue's end minus the scheduler's cursor), on the shard whose scheduler runs the level |
//! | `ringmq_delay_delivered_total{level}` | counter | delayed messages of the level delivered (their copy acknowledged) |
//! | `ringmq_delay_lateness_seconds_total{level}` | counter | time from each delivered message's due time to its copy's acknowledgement, summed (divided by `ringmq_delay_delivered_total`: the mean lateness) |
//! | `ringmq_delay_skipped_total{level}` | counter | scheduled records that could not be delivered at all (no `REAL_TOPIC`, an illegal message) and were skipped, logged |
//! | `ringmq_store_size_bytes` | gauge | bytes of the shard's CommitLog segment files (the ConsumeQueue and index files, some tens of bytes a message, are not included) |
//! | `ringmq_commitlog_min_offset`, `ringmq_commitlog_max_offset` | gauge | the shard's first CommitLog offset still stored and one past its last byte written, without the shard id the node's offsets carry in their top byte (D4), so they stay exact as floats |
//! | `ringmq_topic_messages_in_total{topic}`, `ringmq_topic_bytes_in_total{topic}` | counter | messages and record bytes stored in the topic's queues since the node started (retries and DLQ topics are topics too; a delayed message counts under `SCHEDULE_TOPIC_XXXX` when stored and under its topic when delivered) |
//! | `ringmq_topic_messages_out_total{topic}`, `ringmq_topic_bytes_out_total{topic}` | counter | messages and record bytes of the topic returned by pulls since the node started, every group |
//! | `ringmq_group_messages_out_total{group,topic}`, `ringmq_group_bytes_out_total{group,topic}` | counter | the same for one group (pulls and POP deliveries) |
//! | `ringmq_consumer_lag_messages{group,topic}` | gauge | the group's lag on the topic: over the topic's read queues, the queue's end minus the group's committed offset (0 without one), summed; pairs with a committed offset only (RocketMQ 5's `rocketmq_consumer_lag_messages`, the exporter's `rocketmq_group_diff`) |
//! | `ringmq_stats_keys_over_cap{table}` | gauge | topics (`table="topics"`) or (group, topic) pairs (`table="groups"`) the shard left out of the per-key series at its last snapshot because `metrics_max_topics` / `metrics_max_groups` were tracked |
//! | `ringmq_stats_gets_uncounted_total` | counter | pulled messages not counted by group because the shard's table of pairs was full |
//! | `ringmq_build_info{version,arch,os}` | gauge | 1, with the running build in its labels |
//! | `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | gauge, counter | the process, from `/proc/self` at each scrape ([`process`]) |

pub mod http;
pub mod process;
pub mod rates;
pub mod sections;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::remoting::codes::{request, response};
use crate::server::traffic::{Traffic, TrafficSnapshot};
use crate::store::StoreStats;
use crate::sync::Locked;

use rates::{KeyFigures, RateFigures, StatsCaps};

/// Latency families with a histogram each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Send,
    Pull,
    Query,
}

impl Family {
    const ALL: [Family; 3] = [Family::Send, Family::Pull, Family::Query];

    fn name(self) -> &'static str {
        match self {
            Family::Send => "send",
            Family::Pull => "pull",
            Family::Query => "query",
        }
    }

    /// The family of a request code, if it has a histogram.
    pub fn of(code: i32) -> Option<Family> {
        match code {
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => {
                Some(Family::Send)
            }
            request::PULL_MESSAGE | request::LITE_PULL_MESSAGE => Some(Family::Pull),
            request::QUERY_MESSAGE | request::VIEW_MESSAGE_BY_ID => Some(Family::Query),
            _ => None,
        }
    }
}

/// Counts by request or response code: one counter per code of a table the node knows
/// (`codes::request::ALL`, `codes::response::ALL`), and one for every other code.
///
/// A peer picks the request code, so a counter per code seen would let it add a label
/// value, and a line to every scrape, per request (100k distinct codes grew `/metrics`
/// from 4 KiB to 5 MiB): the series are fixed when the counts are made, never by traffic.
#[derive(Debug)]
pub struct CodeCounts {
    /// The known codes with their counters, sorted by code for a binary search.
    known: Box<[(i32, AtomicU64)]>,
    /// Every code outside `known`, custom or malformed ones a client sent.
    unknown: AtomicU64,
}

impl CodeCounts {
    /// The label value of the codes outside the table.
    pub const UNKNOWN: &'static str = "unknown";

    /// Counters for the codes of `table` (`(name, code)`, as `codes::*::ALL`).
    pub fn new(table: &[(&str, i32)]) -> CodeCounts {
        let mut codes: Vec<i32> = table.iter().map(|(_, code)| *code).collect();
        codes.sort_unstable();
        let before = codes.len();
        codes.dedup();
        assert!(
            codes.len() == before,
            "a code table lists a code twice: {} codes, {before} entries",
            codes.len()
        );
        CodeCounts {
            known: codes
                .into_iter()
                .map(|code| (code, AtomicU64::new(0)))
                .collect(),
            unknown: AtomicU64::new(0),
        }
    }

    fn counter(&self, code: i32) -> Option<&AtomicU64> {
        let index = self.known.binary_search_by_key(&code, |(c, _)| *c).ok()?;
        Some(&self.known[index].1)
    }

    pub fn add(&self, code: i32) {
        self.counter(code)
            .unwrap_or(&self.unknown)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The count of a known `code`; 0 for a code outside the table (see [`Self::unknown`]).
    pub fn get(&self, code: i32) -> u64 {
        self.counter(code)
            .map_or(0, |counter| counter.load(Ordering::Relaxed))
    }

    /// Codes outside the table, all together.
    pub fn unknown(&self) -> u64 {
        self.unknown.load(Ordering::Relaxed)
    }

    /// Every known code counted at least once, in code order.
    pub fn snapshot(&self) -> Vec<(i32, u64)> {
        self.known
            .iter()
            .filter_map(|(code, counter)| {
                let n = counter.load(Ordering::Relaxed);
                (n > 0).then_some((*code, n))
            })
            .collect()
    }
}

/// One shard's figures; written by the shard, read by the metrics thread.
#[derive(Debug)]
pub struct ShardMetrics {
    shard: u8,
    requests: CodeCounts,
    responses: CodeCounts,
    pub messages_out: AtomicU64,
    /// Bytes each way on this shard's connections, kept by the connections themselves.
    pub traffic: Arc<Traffic>,
    pub connections: AtomicI64,
    pub connections_total: AtomicU64,
    /// This shard's connections are served on its io_uring network ring (`network_io`).
    pub network_ring: std::sync::atomic::AtomicBool,
    pub parked_pulls: AtomicI64,
    pub forwarded: AtomicU64,
    /// Handed-back messages stored for a later retry.
    pub retries: AtomicU64,
    /// Messages sent to a dead-letter topic.
    pub dead_letters: AtomicU64,
    /// Timer messages indexed on this shard and not yet delivered (a gauge).
    pub timer_pending: AtomicU64,
    /// Timer messages delivered (their copy acknowledged).
    pub timer_delivered: AtomicU64,
    /// Sum over delivered timer messages of (acknowledged - due), ms.
    pub timer_lateness_ms: AtomicU64,
    /// Timer messages not delivered because a cancellation named them, and the
    /// cancellations themselves.
    pub timer_cancelled: AtomicU64,
    /// Timer records that could not be delivered at all and were skipped, logged.
    pub timer_skipped: AtomicU64,
    /// Messages handed out by POP_MESSAGE (first deliveries and redeliveries).
    pub pop_delivered: AtomicU64,
    /// Of those, redeliveries (not acknowledged within their invisible time).
    pub pop_redelivered: AtomicU64,
    /// POP deliveries acknowledged (ACK_MESSAGE, BATCH_ACK_MESSAGE).
    pub pop_acks: AtomicU64,
    /// Acks and invisible-time changes naming a delivery not in flight.
    pub pop_stale_acks: AtomicU64,
    /// Popped messages past their group's retries sent to its DLQ.
    pub pop_dead_letters: AtomicU64,
    /// Subscription groups not auto-created: the table was full.
    pub subscription_groups_refused: AtomicU64,
    /// Heartbeats refused: the client table was full.
    pub heartbeats_refused: AtomicU64,
    /// POP deliveries in flight by group, set by the shard every second.
    pop_inflight: Locked<std::collections::BTreeMap<String, usize>>,
    store: Locked<StoreStats>,
    /// Messages each protected consumer group lost to forced cleanup, by group: the
    /// configured groups, so the series are fixed at start.
    unconsumed_lost: Locked<Vec<(String, u64)>>,
    latency: [Locked<Histogram<u64>>; 3],
    /// The delay levels whose schedulers run on this shard, fixed at start.
    delay: Locked<Vec<DelayFigures>>,
    /// How many topics and groups the shard tracks (`metrics_max_topics`, `..._groups`).
    caps: StatsCaps,
    /// The broker's rates at the sampler's last second ([`rates`]).
    rates: Locked<RateFigures>,
    /// The per-topic and per-group figures at the sampler's last key snapshot.
    keys: Locked<KeyFigures>,
    /// The CommitLog's size and offsets at the sampler's last second.
    log: Locked<LogFigures>,
    /// Pulled messages not counted by group because the shard's table was full.
    pub gets_uncounted: AtomicU64,
    /// Set once the shard's store is open and recovered and the shard serves.
    ready: AtomicBool,
    /// The shard's replication at the sampler's last second (D14).
    replication: Locked<ReplicationFigures>,
    /// Time from a batch's write to the replica's confirmation covering it (SYNC_MASTER
    /// with a replica attached), µs.
    confirm_latency: Locked<Histogram<u64>>,
    /// The shard's transactions, as its transaction state last counted them.
    transactions: Locked<sections::transactions::TransactionFigures>,
}

/// One shard's replication at the sampler's last second.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicationFigures {
    /// `true` on a slave shard.
    pub slave: bool,
    /// A master: each slave's stream (streaming or still in its handshake). A slave: none
    /// (its own lag is the master's figure to watch).
    pub peers: Vec<PeerFigures>,
    /// A slave: whether its stream to its master is up.
    pub connected: bool,
    /// Bytes of log sent (master) or appended (slave) since the start.
    pub bytes: u64,
    /// Of those, per second over the last sample.
    pub bytes_per_second: u64,
    /// The replication watermark (master) or the slave's acknowledged end, within the shard.
    pub offset: u64,
    /// The log's written end: a physical offset, the shard id in its top byte (D4).
    pub written: u64,
    /// Truncations a slave made to agree with its master.
    pub truncations: u64,
    /// A slave: its master's HA address, once known.
    pub master: Option<String>,
    /// A slave: when (ms since the epoch) the sampler last saw its stream up, and last saw
    /// it append bytes; 0 for never.
    pub last_up_ms: i64,
    pub last_append_ms: i64,
}

/// One slave's stream on a master shard, at the sampler's last second.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerFigures {
    /// The stream's remote address (the slave's side of the HA connection).
    pub addr: String,
    /// The slave's `brokerId`, from its handshake.
    pub slave_id: Option<u64>,
    /// Whether the first report chose where the stream starts (before it, `ack` is 0).
    pub streaming: bool,
    /// Where the stream started, and what the slave holds by its last report (physical
    /// offsets, the shard id in their top byte).
    pub from: u64,
    pub ack: u64,
    /// How far behind the slave is: bytes of the written log it does not hold, and the
    /// age of the first record it does not hold (`None`: the record could not be read).
    pub lag: Lag,
    /// Within `haSlaveFallbehindMax` of the written end (what lets SYNC_MASTER wait on it).
    pub in_sync: bool,
    /// What the slave acknowledged per second over the last sample.
    pub bytes_per_second: u64,
}

/// How far a slave is behind its master on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lag {
    pub bytes: u64,
    /// Now minus the store time of the first record the slave does not hold; 0 when it
    /// holds everything written.
    pub millis: Option<u64>,
}

/// A shard's CommitLog at the sampler's last second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogFigures {
    /// Bytes of the CommitLog segment files.
    pub file_bytes: u64,
    /// The first offset still stored and one past the last written, within the shard
    /// (the shard id that the node's offsets carry in their top byte taken off, D4).
    pub min_offset: u64,
    pub max_offset: u64,
}

/// One delay level's figures, on the shard that runs its scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DelayFigures {
    pub level: u32,
    /// Messages in the level's queue from the cursor on.
    pub pending: u64,
    pub delivered: u64,
    /// Sum over the delivered messages of (acknowledged - due), ms.
    pub lateness_ms: u64,
    pub skipped: u64,
}

/// Latencies are recorded in microseconds, up to an hour, 3 significant digits.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl ShardMetrics {
    pub fn new(shard: u8) -> ShardMetrics {
        ShardMetrics {
            shard,
            requests: CodeCounts::new(request::ALL),
            responses: CodeCounts::new(response::ALL),
            messages_out: AtomicU64::new(0),
            traffic: Arc::new(Traffic::new()),
            connections: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            network_ring: std::sync::atomic::AtomicBool::new(false),
            parked_pulls: AtomicI64::new(0),
            forwarded: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            timer_pending: AtomicU64::new(0),
            timer_delivered: AtomicU64::new(0),
            timer_lateness_ms: AtomicU64::new(0),
            timer_cancelled: AtomicU64::new(0),
            timer_skipped: AtomicU64::new(0),
            pop_delivered: AtomicU64::new(0),
            pop_redelivered: AtomicU64::new(0),
            pop_acks: AtomicU64::new(0),
            pop_stale_acks: AtomicU64::new(0),
            pop_dead_letters: AtomicU64::new(0),
            subscription_groups_refused: AtomicU64::new(0),
            heartbeats_refused: AtomicU64::new(0),
            pop_inflight: Locked::default(),
            store: Locked::default(),
            unconsumed_lost: Locked::default(),
            latency: std::array::from_fn(|_| Locked::new(latency_histogram())),
            delay: Locked::default(),
            replication: Locked::default(),
            confirm_latency: Locked::new(latency_histogram()),
            transactions: Locked::default(),
            caps: StatsCaps::default(),
            rates: Locked::default(),
            keys: Locked::default(),
            log: Locked::default(),
            gets_uncounted: AtomicU64::new(0),
            ready: AtomicBool::new(false),
        }
    }

    /// A shard's metrics tracking at most `caps` topics and groups.
    pub fn with_caps(shard: u8, caps: StatsCaps) -> ShardMetrics {
        ShardMetrics {
            caps,
            ..ShardMetrics::new(shard)
        }
    }

    pub fn caps(&self) -> StatsCaps {
        self.caps
    }

    /// The broker's rates (the shard's sampler, once a second).
    pub fn set_rates(&self, rates: RateFigures) {
        *self.rates.lock() = rates;
    }

    pub fn rates(&self) -> RateFigures {
        *self.rates.lock()
    }

    /// The per-key figures (the shard's sampler, every 10 s).
    pub fn set_keys(&self, keys: KeyFigures) {
        *self.keys.lock() = keys;
    }

    /// `topic`'s messages stored per second on this shard over the last minute (0 for a
    /// topic not tracked).
    pub fn topic_put_tps(&self, topic: &str) -> f64 {
        let keys = self.keys.lock();
        keys.topics
            .binary_search_by(|figures| figures.topic.as_str().cmp(topic))
            .map_or(0.0, |index| keys.topics[index].put_tps)
    }

    /// `group`'s messages pulled from `topic` per second on this shard over the last
    /// minute (0 for a pair not tracked).
    pub fn group_get_tps(&self, group: &str, topic: &str) -> f64 {
        let keys = self.keys.lock();
        keys.groups
            .binary_search_by(|figures| {
                (figures.group.as_str(), figures.topic.as_str()).cmp(&(group, topic))
            })
            .map_or(0.0, |index| keys.groups[index].get_tps)
    }

    /// The CommitLog's figures (the shard's sampler, once a second).
    pub fn set_replication(&self, figures: ReplicationFigures) {
        *self.replication.lock() = figures;
    }

    pub fn replication(&self) -> ReplicationFigures {
        self.replication.lock().clone()
    }

    pub fn set_transactions(&self, figures: sections::transactions::TransactionFigures) {
        *self.transactions.lock() = figures;
    }

    pub fn transactions(&self) -> sections::transactions::TransactionFigures {
        *self.transactions.lock()
    }

    /// A batch waited `latency` from its write to the replica's confirmation.
    pub fn replica_confirmed(&self, latency: Duration) {
        let micros = (latency.as_micros() as u64).clamp(1, 3_600_000_000);
        let _ = self.confirm_latency.lock().record(micros);
    }

    /// Batches timed from write to the replica's confirmation so far.
    pub fn replica_confirms(&self) -> u64 {
        self.confirm_latency.lock().len()
    }

    pub fn set_log(&self, log: LogFigures) {
        *self.log.lock() = log;
    }

    /// Marks the shard as serving: its store is open and recovered.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn shard(&self) -> u8 {
        self.shard
    }

    /// Counts one request of `code`.
    pub fn request(&self, code: i32) {
        self.requests.add(code);
    }

    /// Counts one response with status `code`, and its latency for `family`.
    pub fn response(&self, status: i32, family: Option<Family>, latency: Duration) {
        self.responses.add(status);
        if let Some(family) = family {
            let micros = (latency.as_micros() as u64).clamp(1, 3_600_000_000);
            let index = Family::ALL.iter().position(|f| *f == family).unwrap();
            let _ = self.latency[index].lock().record(micros);
        }
    }

    /// Copies the store's counters (once a second, from the shard).
    pub fn set_store(&self, stats: StoreStats) {
        *self.store.lock() = stats;
    }

    /// Starts a lost-message counter at 0 for each of `groups` (the protected groups),
    /// so each series exists before its first loss.
    pub fn protect_groups(&self, groups: &[String]) {
        let mut lost = self.unconsumed_lost.lock();
        for group in groups {
            if !lost.iter().any(|(known, _)| known == group) {
                lost.push((group.clone(), 0));
            }
        }
    }

    /// Counts `messages` a protected group lost to forced cleanup.
    ///
    /// Panics for a group [`ShardMetrics::protect_groups`] did not start: only the
    /// configured groups may add series.
    pub fn add_unconsumed_lost(&self, group: &str, messages: u64) {
        let mut lost = self.unconsumed_lost.lock();
        match lost.iter().position(|(known, _)| known == group) {
            Some(index) => lost[index].1 += messages,
            None => panic!("{group} is not a protected group: {:?}", *lost),
        }
    }

    /// Messages `group` lost to forced cleanup so far (0 for a group not protected).
    pub fn unconsumed_lost(&self, group: &str) -> u64 {
        self.unconsumed_lost
            .lock()
            .iter()
            .find(|(known, _)| known == group)
            .map_or(0, |(_, count)| *count)
    }

    /// Starts the series of delay level `level` at 0 (its scheduler starts on this shard).
    pub fn delay_level_started(&self, level: u32) {
        let mut delay = self.delay.lock();
        if !delay.iter().any(|figures| figures.level == level) {
            delay.push(DelayFigures {
                level,
                ..DelayFigures::default()
            });
            delay.sort_by_key(|figures| figures.level);
        }
    }

    fn with_delay_level(&self, level: u32, change: impl FnOnce(&mut DelayFigures)) {
        let mut delay = self.delay.lock();
        let figures = delay
            .iter_mut()
            .find(|figures| figures.level == level)
            .unwrap_or_else(|| panic!("delay level {level} has no scheduler on this shard"));
        change(figures);
    }

    /// The messages of `level` waiting now.
    /// The POP deliveries in flight on this shard, by group (groups with none are left
    /// out, so the series are bounded by the groups popping now).
    pub fn set_pop_inflight(&self, by_group: std::collections::BTreeMap<String, usize>) {
        *self.pop_inflight.lock() = by_group;
    }

    /// POP deliveries of `group` in flight on this shard at the last update.
    pub fn pop_inflight(&self, group: &str) -> usize {
        self.pop_inflight.lock().get(group).copied().unwrap_or(0)
    }

    pub fn set_delay_pending(&self, level: u32, pending: u64) {
        self.with_delay_level(level, |figures| figures.pending = pending);
    }

    /// One message of `level` delivered `late_ms` after its due time.
    pub fn delay_delivered(&self, level: u32, late_ms: u64) {
        self.with_delay_level(level, |figures| {
            figures.delivered += 1;
            figures.lateness_ms += late_ms;
        });
    }

    /// One scheduled record of `level` skipped as undeliverable.
    pub fn delay_skipped(&self, level: u32) {
        self.with_delay_level(level, |figures| figures.skipped += 1);
    }

    /// The figures of the delay levels scheduled on this shard, by level.
    pub fn delay_figures(&self) -> Vec<DelayFigures> {
        self.delay.lock().clone()
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Responses with status `code` so far (tests, benchmarks).
    pub fn responses_with(&self, code: i32) -> u64 {
        self.responses.get(code)
    }

    /// Requests whose code the node does not know, so far.
    pub fn unknown_requests(&self) -> u64 {
        self.requests.unknown()
    }
}

/// Every shard's metrics; cloning shares them.
#[derive(Clone, Debug)]
pub struct NodeMetrics {
    shards: Arc<Vec<Arc<ShardMetrics>>>,
}

impl NodeMetrics {
    pub fn new(shards: u8) -> NodeMetrics {
        NodeMetrics::with_caps(shards, StatsCaps::default())
    }

    /// Metrics whose shards each track at most `caps` topics and groups.
    pub fn with_caps(shards: u8, caps: StatsCaps) -> NodeMetrics {
        NodeMetrics {
            shards: Arc::new(
                (0..shards)
                    .map(|n| Arc::new(ShardMetrics::with_caps(n, caps)))
                    .collect(),
            ),
        }
    }

    /// Shards serving (store open and recovered), and shards.
    pub fn readiness(&self) -> (usize, usize) {
        let ready = self.shards.iter().filter(|s| s.is_ready()).count();
        (ready, self.shards.len())
    }

    pub fn shard(&self, shard: u8) -> Arc<ShardMetrics> {
        self.shards[shard as usize].clone()
    }

    pub fn shards(&self) -> &[Arc<ShardMetrics>] {
        &self.shards
    }

    /// The byte counters of every shard's connections, summed.
    pub fn traffic_total(&self) -> TrafficSnapshot {
        let mut total = TrafficSnapshot::default();
        for shard in self.shards.iter() {
            let one = shard.traffic.snapshot();
            total.bytes_in += one.bytes_in;
            total.bytes_out += one.bytes_out;
            total.bytes_out_zero_copy += one.bytes_out_zero_copy;
            total.bytes_out_mmap += one.bytes_out_mmap;
            total.bytes_out_copied += one.bytes_out_copied;
            total.requests_in_flight += one.requests_in_flight;
            total.queued_response_bytes += one.queued_response_bytes;
            total.request_bytes_in_flight += one.request_bytes_in_flight;
            total.parked_requests += one.parked_requests;
            total.read_pauses += one.read_pauses;
            total.idle_closes += one.idle_closes;
            total.frame_timeouts += one.frame_timeouts;
            total.partial_frame_refusals += one.partial_frame_refusals;
            total.connections_refused += one.connections_refused;
        }
        total
    }

    /// The Prometheus text exposition of every shard's metrics.
    pub fn render(&self) -> String {
        render(&self.shards)
    }
}

/// Writes one family's `# HELP`/`# TYPE` lines and a sample per shard.
fn family(
    out: &mut String,
    shards: &[Arc<ShardMetrics>],
    name: &str,
    kind: &str,
    help: &str,
    value: impl Fn(&ShardMetrics) -> i128,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for shard in shards {
        let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", shard.shard, value(shard));
    }
}

/// Writes a counter family of seconds, kept as whole µs, with one sample per shard.
fn seconds_family(
    out: &mut String,
    shards: &[Arc<ShardMetrics>],
    name: &str,
    help: &str,
    micros: impl Fn(&ShardMetrics) -> u64,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for shard in shards {
        let value = micros(shard);
        let _ = writeln!(
            out,
            "{name}{{shard=\"{}\"}} {}.{:06}",
            shard.shard,
            value / 1_000_000,
            value % 1_000_000
        );
    }
}

/// Writes a counter family with one sample per shard and known code, the code under
/// `label` and its Java name under `name`, and one per shard for all the other codes
/// (`label="unknown",name="unknown"`, even at 0, so the series exists before the first one
/// arrives).
fn by_code(
    out: &mut String,
    shards: &[Arc<ShardMetrics>],
    (name, help): (&str, &str),
    (label, names): (&str, fn(i32) -> Option<&'static str>),
    counts: impl Fn(&ShardMetrics) -> &CodeCounts,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for shard in shards {
        for (code, n) in counts(shard).snapshot() {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\",{label}=\"{code}\",name=\"{}\"}} {n}",
                shard.shard,
                names(code).unwrap_or(CodeCounts::UNKNOWN)
            );
        }
        let _ = writeln!(
            out,
            "{name}{{shard=\"{}\",{label}=\"{unknown}\",name=\"{unknown}\"}} {}",
            shard.shard,
            counts(shard).unknown(),
            unknown = CodeCounts::UNKNOWN,
        );
    }
}

/// A label value as the text format needs it: backslash, double quote and newline
/// escaped. Topic and group names are validated (`%|a-zA-Z0-9_-`), so this only guards.
pub fn escape_label(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(value);
    }
    let mut escaped = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// The upper bounds of the latency histogram's buckets, in µs (`+Inf` follows): 100 µs to
/// a minute, about three to a decade, so `histogram_quantile` over the sum of every
/// shard and node stays within a bucket's width of the truth.
pub const LATENCY_BUCKETS_MICROS: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// The latency histograms: cumulative buckets from the HDR histograms, so they sum across
/// shards and nodes (a summary's quantiles do not).
fn render_latency(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    let name = "ringmq_request_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from request to response.\n# TYPE {name} histogram"
    );
    for shard in shards {
        for (index, family) in Family::ALL.iter().enumerate() {
            let histogram = shard.latency[index].lock();
            let labels = format!("shard=\"{}\",family=\"{}\"", shard.shard, family.name());
            histogram_samples(out, name, &labels, &histogram);
        }
    }
}

/// One histogram's `_bucket`, `_sum` and `_count` samples under `labels`, from an HDR
/// histogram of µs: cumulative buckets at [`LATENCY_BUCKETS_MICROS`], in seconds.
pub(in crate::metrics) fn histogram_samples(
    out: &mut String,
    name: &str,
    labels: &str,
    histogram: &Histogram<u64>,
) {
    let mut buckets = [0u64; LATENCY_BUCKETS_MICROS.len()];
    let mut sum = 0f64;
    for value in histogram.iter_recorded() {
        let micros = value.value_iterated_to();
        let count = value.count_at_value();
        sum += micros as f64 * count as f64;
        if let Some(bucket) = LATENCY_BUCKETS_MICROS.iter().position(|le| micros <= *le) {
            buckets[bucket] += count;
        }
    }
    let mut cumulative = 0;
    for (le, count) in LATENCY_BUCKETS_MICROS.iter().zip(buckets) {
        cumulative += count;
        let le = *le as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let total = histogram.len();
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {total}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", sum / 1e6);
    let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
}

/// The CommitLog's size and offsets, per shard.
fn render_log(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    type Pick = fn(&LogFigures) -> u64;
    let families: [(&str, &str, Pick); 3] = [
        (
            "ringmq_store_size_bytes",
            "Bytes of the shard's CommitLog segment files.",
            |log| log.file_bytes,
        ),
        (
            "ringmq_commitlog_min_offset",
            "The shard's first CommitLog offset still stored (its shard id taken off).",
            |log| log.min_offset,
        ),
        (
            "ringmq_commitlog_max_offset",
            "One past the shard's last CommitLog byte written (its shard id taken off).",
            |log| log.max_offset,
        ),
    ];
    for (name, help, pick) in families {
        family(out, shards, name, "gauge", help, |s| {
            pick(&s.log.lock()) as i128
        });
    }
}

/// The per-topic and per-group families, summed over the shards (no shard label: a topic's
/// queues and a group's pulls spread over them), and what the caps left out.
fn render_keys(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    let sums = KeySums::of(shards);
    render_topic_keys(out, &sums.topics);
    render_group_keys(out, &sums);
    render_key_caps(out, shards);
}

/// The per-key figures of every shard, summed: by topic (messages and bytes in, then out),
/// by group and topic (messages and bytes out), and the lag by group and topic.
struct KeySums {
    topics: std::collections::BTreeMap<String, [u64; 4]>,
    groups: std::collections::BTreeMap<(String, String), [u64; 2]>,
    lags: std::collections::BTreeMap<(String, String), u64>,
}

impl KeySums {
    fn of(shards: &[Arc<ShardMetrics>]) -> KeySums {
        let mut topics: std::collections::BTreeMap<String, [u64; 4]> = Default::default();
        let mut groups: std::collections::BTreeMap<(String, String), [u64; 2]> = Default::default();
        let mut lags: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for shard in shards {
            let keys = shard.keys.lock();
            for figures in &keys.topics {
                let sums = topics.entry(figures.topic.clone()).or_default();
                sums[0] += figures.put.messages;
                sums[1] += figures.put.bytes;
                sums[2] += figures.got.messages;
                sums[3] += figures.got.bytes;
            }
            for figures in &keys.groups {
                let pair = (figures.group.clone(), figures.topic.clone());
                let sums = groups.entry(pair.clone()).or_default();
                sums[0] += figures.got.messages;
                sums[1] += figures.got.bytes;
                if let Some(lag) = figures.lag {
                    *lags.entry(pair).or_default() += lag;
                }
            }
        }
        KeySums {
            topics,
            groups,
            lags,
        }
    }
}

/// The per-topic series.
fn render_topic_keys(out: &mut String, topics: &std::collections::BTreeMap<String, [u64; 4]>) {
    let topic_families = [
        (
            "ringmq_topic_messages_in_total",
            "Messages stored in the topic's queues since the node started.",
        ),
        (
            "ringmq_topic_bytes_in_total",
            "Record bytes stored in the topic's queues since the node started.",
        ),
        (
            "ringmq_topic_messages_out_total",
            "Messages of the topic returned by pulls and pops since the node started, every group.",
        ),
        (
            "ringmq_topic_bytes_out_total",
            "Record bytes of the topic returned by pulls and pops since the node started, every group.",
        ),
    ];
    for (index, (name, help)) in topic_families.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (topic, sums) in topics {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\"}} {}",
                escape_label(topic),
                sums[index]
            );
        }
    }
}

/// The per-group series: messages and bytes out, and the lag.
fn render_group_keys(out: &mut String, sums: &KeySums) {
    let (groups, lags) = (&sums.groups, &sums.lags);
    let group_families = [
        (
            "ringmq_group_messages_out_total",
            "Messages of the topic returned to the group's pulls and pops since the node started.",
        ),
        (
            "ringmq_group_bytes_out_total",
            "Record bytes of the topic returned to the group's pulls and pops since the node started.",
        ),
    ];
    for (index, (name, help)) in group_families.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for ((group, topic), sums) in groups {
            let _ = writeln!(
                out,
                "{name}{{group=\"{}\",topic=\"{}\"}} {}",
                escape_label(group),
                escape_label(topic),
                sums[index]
            );
        }
    }
    let name = "ringmq_consumer_lag_messages";
    let _ = writeln!(
        out,
        "# HELP {name} Messages of the topic the group has not committed: each queue's end minus the group's committed offset (0 without one), summed.\n# TYPE {name} gauge"
    );
    for ((group, topic), lag) in lags {
        let _ = writeln!(
            out,
            "{name}{{group=\"{}\",topic=\"{}\"}} {lag}",
            escape_label(group),
            escape_label(topic)
        );
    }
}

/// What the per-key series left out: keys over the caps, gets not counted by group.
fn render_key_caps(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    let name = "ringmq_stats_keys_over_cap";
    let _ = writeln!(
        out,
        "# HELP {name} Topics (table=topics) or group and topic pairs (table=groups) left out of the per-key series at the last snapshot because metrics_max_topics or metrics_max_groups were tracked.\n# TYPE {name} gauge"
    );
    for shard in shards {
        let keys = shard.keys.lock();
        for (table, count) in [
            ("topics", keys.topics_over_cap),
            ("groups", keys.groups_over_cap),
        ] {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\",table=\"{table}\"}} {count}",
                shard.shard
            );
        }
    }
    family(
        out,
        shards,
        "ringmq_stats_gets_uncounted_total",
        "counter",
        "Pulled messages not counted by group because metrics_max_groups pairs were tracked.",
        |s| s.gets_uncounted.load(Ordering::Relaxed) as i128,
    );
}

/// `ringmq_build_info`: 1, with the version and the target in labels.
fn render_build_info(out: &mut String) {
    let name = "ringmq_build_info";
    let _ = writeln!(
        out,
        "# HELP {name} The running ringmq's version and target, as labels.\n# TYPE {name} gauge\n{name}{{version=\"{}\",arch=\"{}\",os=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
    );
}

/// One part of the metrics page: a function of every shard's figures.
type Section = fn(&mut String, &[Arc<ShardMetrics>]);

/// The sections of the metrics page, in page order. A feature engine's figures are its
/// own section (a file in `sections/`) and one entry here: the page does not grow in one
/// function per feature.
const SECTIONS: &[Section] = &[
    requests_and_traffic,
    store_writes,
    index,
    retention,
    sections::delay::render,
    disk,
    connections,
    connection_bounds,
    delivery,
    sections::timer::render,
    sections::pop::render,
    sections::transactions::render,
    sections::replication::render,
    render_latency,
    render_log,
    render_keys,
    |out, _| render_build_info(out),
];

/// The Prometheus text format (version 0.0.4) of `shards`.
pub fn render(shards: &[Arc<ShardMetrics>]) -> String {
    let mut out = String::with_capacity(4096);
    for section in SECTIONS {
        section(&mut out, shards);
    }
    process::render(&mut out);
    out
}

/// A counter's value as a sample.
fn relaxed(counter: &AtomicU64) -> i128 {
    counter.load(Ordering::Relaxed) as i128
}

/// A shard's connection figures.
fn traffic(s: &ShardMetrics) -> TrafficSnapshot {
    s.traffic.snapshot()
}

/// Requests and responses by code, messages and bytes in and out.
fn requests_and_traffic(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    by_code(
        out,
        shards,
        (
            "ringmq_requests_total",
            "Requests received, by request code.",
        ),
        ("code", request::name),
        |s| &s.requests,
    );
    by_code(
        out,
        shards,
        (
            "ringmq_responses_total",
            "Responses sent, by response code.",
        ),
        ("status", response::name),
        |s| &s.responses,
    );
    family(
        out,
        shards,
        "ringmq_messages_in_total",
        "counter",
        "Messages stored.",
        |s| s.store.lock().puts as i128,
    );
    family(
        out,
        shards,
        "ringmq_messages_out_total",
        "counter",
        "Messages returned by pulls.",
        |s| relaxed(&s.messages_out),
    );
    for (name, help, pick) in [
        (
            "ringmq_bytes_in_total",
            "Bytes read from client connections.",
            (|t: TrafficSnapshot| t.bytes_in) as fn(TrafficSnapshot) -> u64,
        ),
        (
            "ringmq_bytes_out_total",
            "Bytes written to client connections.",
            |t| t.bytes_out,
        ),
        (
            "ringmq_bytes_out_zero_copy_total",
            "Stored records sent from the segment files (sendfile or mapping).",
            |t| t.bytes_out_zero_copy,
        ),
        (
            "ringmq_bytes_out_mmap_total",
            "Zero-copy bytes written from a segment mapping.",
            |t| t.bytes_out_mmap,
        ),
        (
            "ringmq_bytes_out_copied_total",
            "Bytes written from user-space buffers.",
            |t| t.bytes_out_copied,
        ),
    ] {
        family(out, shards, name, "counter", help, |s| {
            pick(traffic(s)) as i128
        });
    }
}

/// The CommitLog's writes: record bytes, appends, fsyncs, and store task panics.
fn store_writes(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_store_bytes_total",
        "counter",
        "Record bytes stored.",
        |s| s.store.lock().put_bytes as i128,
    );
    family(
        out,
        shards,
        "ringmq_appends_total",
        "counter",
        "CommitLog writes (group-commit batches).",
        |s| s.store.lock().batches as i128,
    );
    family(
        out,
        shards,
        "ringmq_fsyncs_total",
        "counter",
        "CommitLog fdatasyncs.",
        |s| s.store.lock().log_syncs as i128,
    );
    seconds_family(
        out,
        shards,
        "ringmq_fsync_seconds_total",
        "Time spent in CommitLog fdatasyncs (divided by ringmq_fsyncs_total: the mean fsync).",
        |s| s.store.lock().log_sync_micros,
    );
    family(
        out,
        shards,
        "ringmq_store_task_panics_total",
        "counter",
        "Store or shard tasks that panicked (each poisons the store).",
        |s| s.store.lock().task_panics as i128,
    );
}

/// The IndexFile: entries, errors, lookups.
fn index(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_index_entries_total",
        "counter",
        "IndexFile entries added (one per key of each stored record).",
        |s| s.store.lock().index_entries as i128,
    );
    family(
        out,
        shards,
        "ringmq_index_errors_total",
        "counter",
        "Stored records the index could not take (stored, but not findable by key).",
        |s| s.store.lock().index_errors as i128,
    );
    family(
        out,
        shards,
        "ringmq_index_queries_total",
        "counter",
        "QUERY_MESSAGE lookups this shard's index answered.",
        |s| s.store.lock().index_queries as i128,
    );
    seconds_family(
        out,
        shards,
        "ringmq_index_query_seconds_total",
        "Time spent in index lookups (divided by ringmq_index_queries_total: the mean lookup).",
        |s| s.store.lock().index_query_micros,
    );
}

/// Retention: what it deleted, what it kept for protected consumer groups, what they lost.
fn retention(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_retention_segments_deleted_total",
        "counter",
        "CommitLog segments retention deleted.",
        |s| s.store.lock().retention.segments_deleted as i128,
    );
    family(
        out,
        shards,
        "ringmq_retention_bytes_deleted_total",
        "counter",
        "Bytes of CommitLog segments retention deleted.",
        |s| s.store.lock().retention.bytes_deleted as i128,
    );
    family(
        out,
        shards,
        "ringmq_retention_files_deleted_total",
        "counter",
        "ConsumeQueue and index files retention deleted.",
        |s| {
            let retention = s.store.lock().retention;
            (retention.queue_files_deleted + retention.index_files_deleted) as i128
        },
    );
    family(
        out,
        shards,
        "ringmq_retention_segments_kept_for_consumers",
        "gauge",
        "Segments the last deleting retention run would have deleted (at most deleteFileBatchMax) but kept because a protected consumer group had not consumed them.",
        |s| s.store.lock().retention.segments_kept_for_holds as i128,
    );
    let name = "ringmq_retention_unconsumed_lost_total";
    let _ = writeln!(
        out,
        "# HELP {name} Messages a protected consumer group had not consumed that forced cleanup deleted.\n# TYPE {name} counter"
    );
    for shard in shards {
        // Group names are validated (`%|a-zA-Z0-9_-`): nothing to escape in the label.
        for (group, lost) in shard.unconsumed_lost.lock().iter() {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\",group=\"{group}\"}} {lost}",
                shard.shard
            );
        }
    }
}

/// The store's disk: use, and puts refused for space.
fn disk(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_puts_refused_for_space_total",
        "counter",
        "Puts refused because the disk was at diskSpaceWarningLevelRatio or above.",
        |s| s.store.lock().retention.puts_refused_for_space as i128,
    );
    family(
        out,
        shards,
        "ringmq_disk_used_percent",
        "gauge",
        "Use of the store's disk at the cleaner's last run, percent.",
        |s| s.store.lock().retention.used_percent as i128,
    );
}

/// Client connections and their backlogs.
fn connections(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_connections",
        "gauge",
        "Open client connections.",
        |s| s.connections.load(Ordering::Relaxed) as i128,
    );
    family(
        out,
        shards,
        "ringmq_connections_total",
        "counter",
        "Connections accepted.",
        |s| relaxed(&s.connections_total),
    );
}

/// The connection bounds at work: refusals, pauses, closes, and the backlogs they bound.
fn connection_bounds(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    for (name, kind, help, pick) in [
        (
            "ringmq_connections_refused_total",
            "counter",
            "Connections closed at accept because max_connections were open.",
            (|t: TrafficSnapshot| t.connections_refused as i128) as fn(TrafficSnapshot) -> i128,
        ),
        (
            "ringmq_connection_read_pauses_total",
            "counter",
            "Times a connection stopped reading until its backlog drained.",
            |t| t.read_pauses as i128,
        ),
        (
            "ringmq_connection_idle_closes_total",
            "counter",
            "Connections closed after the idle timeout.",
            |t| t.idle_closes as i128,
        ),
        (
            "ringmq_connection_frame_timeouts_total",
            "counter",
            "Connections closed because a frame did not complete in time.",
            |t| t.frame_timeouts as i128,
        ),
        (
            "ringmq_connection_partial_frame_refusals_total",
            "counter",
            "Connections closed at the node-wide bound on partial-frame bytes.",
            |t| t.partial_frame_refusals as i128,
        ),
        (
            "ringmq_requests_in_flight",
            "gauge",
            "Requests read and not yet answered.",
            |t| t.requests_in_flight as i128,
        ),
        (
            "ringmq_queued_response_bytes",
            "gauge",
            "Response bytes queued and not yet written.",
            |t| t.queued_response_bytes as i128,
        ),
        (
            "ringmq_request_bytes_in_flight",
            "gauge",
            "Bytes held by requests in flight: their frames and a fixed cost each.",
            |t| t.request_bytes_in_flight as i128,
        ),
        (
            "ringmq_parked_requests",
            "gauge",
            "Requests in flight that are parked (long-polling pulls).",
            |t| t.parked_requests as i128,
        ),
    ] {
        family(out, shards, name, kind, help, |s| pick(traffic(s)));
    }
}

/// Parked pulls, forwarded requests, retries and dead letters.
fn delivery(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_parked_pulls",
        "gauge",
        "Long-polling pulls parked now.",
        |s| s.parked_pulls.load(Ordering::Relaxed) as i128,
    );
    family(
        out,
        shards,
        "ringmq_forwarded_total",
        "counter",
        "Requests, and delayed messages coming due, sent to the shard that owns their queue.",
        |s| relaxed(&s.forwarded),
    );
    family(
        out,
        shards,
        "ringmq_retries_total",
        "counter",
        "Messages consumers handed back, stored for a later retry.",
        |s| relaxed(&s.retries),
    );
    family(
        out,
        shards,
        "ringmq_dead_letters_total",
        "counter",
        "Messages sent to a dead-letter (%DLQ%) topic.",
        |s| relaxed(&s.dead_letters),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_counts_count_known_codes_apart_in_code_order_and_the_rest_together() {
        let counts = CodeCounts::new(request::ALL);
        for code in [310, 11, 310, -1, 5000, 200050, 1024, 310, i32::MIN] {
            counts.add(code);
        }
        assert_eq!(counts.get(310), 3);
        assert_eq!(counts.get(request::POP_MESSAGE), 1);
        assert_eq!(counts.get(12), 0);
        assert_eq!(
            counts.get(5000),
            0,
            "an unknown code has no counter of its own"
        );
        assert_eq!(counts.unknown(), 4, "-1, 5000, 1024 and i32::MIN");
        assert_eq!(
            counts.snapshot(),
            vec![(11, 1), (310, 3), (request::POP_MESSAGE, 1)]
        );
    }

    #[test]
    fn unknown_request_codes_share_one_series_whatever_their_number() {
        let metrics = NodeMetrics::new(1);
        let shard = metrics.shard(0);
        // The process figures change from one render to the next: compare the rest.
        let requests = |text: &str| {
            text.lines()
                .filter(|line| line.starts_with("ringmq_requests_total"))
                .map(str::len)
                .sum::<usize>()
        };
        let before = requests(&metrics.render());
        for code in 0..20_000 {
            if request::name(code).is_none() {
                shard.request(code);
            }
        }
        let known = request::ALL.iter().filter(|(_, c)| (0..20_000).contains(c));
        let sent = 20_000 - known.count() as u64;
        assert_eq!(shard.unknown_requests(), sent);
        let text = metrics.render();
        let line = format!(
            "ringmq_requests_total{{shard=\"0\",code=\"unknown\",name=\"unknown\"}} {sent}"
        );
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
        // The one series grew only its digits.
        let after = requests(&text);
        assert!(after <= before + 8, "{before} -> {after} bytes");
    }

    #[test]
    fn the_unknown_series_is_there_before_any_unknown_code() {
        let text = NodeMetrics::new(1).render();
        for line in [
            "ringmq_requests_total{shard=\"0\",code=\"unknown\",name=\"unknown\"} 0",
            "ringmq_responses_total{shard=\"0\",status=\"unknown\",name=\"unknown\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn every_family_renders_per_shard_with_help_and_type() {
        let text = figures_of_every_kind().render();
        for line in [
            "ringmq_delay_pending{shard=\"1\",level=\"2\"} 4",
            "ringmq_delay_pending{shard=\"1\",level=\"3\"} 0",
            "ringmq_delay_delivered_total{shard=\"1\",level=\"2\"} 2",
            "ringmq_delay_lateness_seconds_total{shard=\"1\",level=\"2\"} 1.525",
            "ringmq_delay_skipped_total{shard=\"1\",level=\"3\"} 1",
            "ringmq_retention_segments_kept_for_consumers{shard=\"1\"} 3",
            "ringmq_retention_unconsumed_lost_total{shard=\"1\",group=\"CG_a\"} 0",
            "ringmq_retention_unconsumed_lost_total{shard=\"1\",group=\"CG_b\"} 17",
            "ringmq_requests_total{shard=\"1\",code=\"10\",name=\"SEND_MESSAGE\"} 2",
            "ringmq_responses_total{shard=\"1\",status=\"0\",name=\"SUCCESS\"} 1",
            "ringmq_responses_total{shard=\"1\",status=\"2\",name=\"SYSTEM_BUSY\"} 1",
            "ringmq_messages_in_total{shard=\"1\"} 2",
            "ringmq_messages_in_total{shard=\"0\"} 0",
            "ringmq_bytes_in_total{shard=\"1\"} 2048",
            "ringmq_connections_refused_total{shard=\"1\"} 1",
            "ringmq_queued_response_bytes{shard=\"1\"} 300",
            "ringmq_fsyncs_total{shard=\"1\"} 1",
            "ringmq_fsync_seconds_total{shard=\"1\"} 1.250042",
            "ringmq_fsync_seconds_total{shard=\"0\"} 0.000000",
            "ringmq_store_task_panics_total{shard=\"1\"} 1",
            "ringmq_index_entries_total{shard=\"1\"} 6",
            "ringmq_index_queries_total{shard=\"1\"} 3",
            "ringmq_index_query_seconds_total{shard=\"1\"} 0.001500",
            "ringmq_retention_segments_deleted_total{shard=\"1\"} 2",
            "ringmq_retention_bytes_deleted_total{shard=\"1\"} 2048",
            "ringmq_puts_refused_for_space_total{shard=\"1\"} 5",
            "ringmq_disk_used_percent{shard=\"1\"} 42",
            "ringmq_request_latency_seconds_count{shard=\"1\",family=\"send\"} 2",
            "ringmq_request_latency_seconds_count{shard=\"0\",family=\"pull\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // The histogram: 250 µs and 750 µs, cumulative, summing to the count.
        for line in [
            "ringmq_request_latency_seconds_bucket{shard=\"1\",family=\"send\",le=\"0.0001\"} 0",
            "ringmq_request_latency_seconds_bucket{shard=\"1\",family=\"send\",le=\"0.00025\"} 1",
            "ringmq_request_latency_seconds_bucket{shard=\"1\",family=\"send\",le=\"0.0005\"} 1",
            "ringmq_request_latency_seconds_bucket{shard=\"1\",family=\"send\",le=\"0.001\"} 2",
            "ringmq_request_latency_seconds_bucket{shard=\"1\",family=\"send\",le=\"60\"} 2",
            "ringmq_request_latency_seconds_bucket{shard=\"1\",family=\"send\",le=\"+Inf\"} 2",
            "ringmq_request_latency_seconds_sum{shard=\"1\",family=\"send\"} 0.001",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains("quantile="),
            "a summary's quantiles do not sum across shards"
        );
        every_sample_has_its_type_line(&text);
    }

    /// Two shards' metrics with figures of every kind on shard 1.
    fn figures_of_every_kind() -> NodeMetrics {
        let metrics = NodeMetrics::new(2);
        let shard = metrics.shard(1);
        shard.request(request::SEND_MESSAGE);
        shard.request(request::SEND_MESSAGE);
        shard.response(
            response::SUCCESS,
            Some(Family::Send),
            Duration::from_micros(250),
        );
        shard.response(
            response::SYSTEM_BUSY,
            Some(Family::Send),
            Duration::from_micros(750),
        );
        shard.traffic.add_in(2048);
        shard
            .traffic
            .count(crate::server::traffic::LimitEvent::ConnectionRefused);
        shard.traffic.add_queued_response_bytes(300);
        shard.set_store(StoreStats {
            puts: 2,
            put_bytes: 2400,
            batches: 1,
            log_syncs: 1,
            log_sync_micros: 1_250_042,
            put_errors: 0,
            task_panics: 1,
            index_entries: 6,
            index_errors: 0,
            index_queries: 3,
            index_query_micros: 1_500,
            retention: crate::store::retention::RetentionStats {
                segments_deleted: 2,
                bytes_deleted: 2048,
                queue_files_deleted: 1,
                index_files_deleted: 0,
                puts_refused_for_space: 5,
                used_percent: 42,
                segments_kept_for_holds: 3,
                messages_lost_from_holds: 0,
            },
        });
        shard.protect_groups(&["CG_a".into(), "CG_b".into()]);
        shard.add_unconsumed_lost("CG_b", 17);
        shard.delay_level_started(3);
        shard.delay_level_started(2);
        shard.set_delay_pending(2, 4);
        shard.delay_delivered(2, 1500);
        shard.delay_delivered(2, 25);
        shard.delay_skipped(3);
        assert_eq!(
            shard
                .delay_figures()
                .iter()
                .map(|f| f.level)
                .collect::<Vec<_>>(),
            [2, 3]
        );
        metrics
    }

    /// Every sample line of `text` belongs to a family announced by a TYPE line before it.
    fn every_sample_has_its_type_line(text: &str) {
        let mut announced = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                announced.insert(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let base = name
                    .trim_end_matches("_sum")
                    .trim_end_matches("_count")
                    .trim_end_matches("_bucket");
                assert!(
                    announced.contains(name) || announced.contains(base),
                    "{line}"
                );
            }
        }
    }

    #[test]
    fn topic_and_group_series_sum_over_the_shards_with_escaped_labels() {
        use rates::{Counts, GroupFigures, TopicFigures};
        let metrics = NodeMetrics::new(2);
        for shard in 0..2 {
            metrics.shard(shard).set_keys(KeyFigures {
                topics: vec![TopicFigures {
                    topic: "T".into(),
                    put: Counts {
                        messages: 3,
                        bytes: 300,
                    },
                    got: Counts {
                        messages: 2,
                        bytes: 200,
                    },
                    put_tps: 0.5,
                }],
                groups: vec![GroupFigures {
                    group: "G\"x".into(),
                    topic: "T".into(),
                    got: Counts {
                        messages: 2,
                        bytes: 200,
                    },
                    get_tps: 0.25,
                    lag: Some(4 + u64::from(shard)),
                }],
                topics_over_cap: u64::from(shard),
                groups_over_cap: 0,
            });
        }
        metrics.shard(1).set_log(LogFigures {
            file_bytes: 1 << 30,
            min_offset: 0,
            max_offset: 4096,
        });
        assert_eq!(metrics.shard(1).topic_put_tps("T"), 0.5);
        assert_eq!(metrics.shard(1).topic_put_tps("U"), 0.0);
        assert_eq!(metrics.shard(0).group_get_tps("G\"x", "T"), 0.25);
        let text = metrics.render();
        for line in [
            "ringmq_topic_messages_in_total{topic=\"T\"} 6",
            "ringmq_topic_bytes_in_total{topic=\"T\"} 600",
            "ringmq_topic_messages_out_total{topic=\"T\"} 4",
            "ringmq_topic_bytes_out_total{topic=\"T\"} 400",
            "ringmq_group_messages_out_total{group=\"G\\\"x\",topic=\"T\"} 4",
            "ringmq_consumer_lag_messages{group=\"G\\\"x\",topic=\"T\"} 9",
            "ringmq_stats_keys_over_cap{shard=\"1\",table=\"topics\"} 1",
            "ringmq_stats_gets_uncounted_total{shard=\"0\"} 0",
            "ringmq_store_size_bytes{shard=\"1\"} 1073741824",
            "ringmq_commitlog_max_offset{shard=\"1\"} 4096",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        let build = text
            .lines()
            .find(|l| l.starts_with("ringmq_build_info{"))
            .unwrap();
        assert!(
            build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
                && build.ends_with(" 1"),
            "{build}"
        );
    }

    #[test]
    fn labels_are_escaped_as_the_text_format_wants() {
        assert_eq!(escape_label("plain"), "plain");
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
