//! A shard's replication figures (D14), copied into its metrics once a second: what the
//! metrics page shows and what GET_BROKER_HA_STATUS (907, `broker::admin::ha_status`)
//! answers with, so both say the same thing.
//!
//! On a master, per slave stream: where it started, the slave's last ack, its lag and
//! whether it is within `haSlaveFallbehindMax`, and what it acknowledged per second. On a
//! slave: whether its stream is up, its master's address, what it appended and when.
//!
//! **Lag** ([`lag`]) is measured on the master, per slave and shard:
//! - in bytes: the master's written end minus the slave's last ack;
//! - in time: now (the node's clock) minus the store time of the first record the slave
//!   does not hold (the record at its ack, past a segment's closing blank), 0 when it holds
//!   everything written. It says how old the newest data a reader of the slave misses
//!   is, whatever the traffic: a slave 1 MiB behind on a busy log may be 10 ms late, on a
//!   quiet one an hour late. Acks arrive after every frame and heartbeat, so a slave that
//!   keeps up shows 0 between writes and the frame time during them.
//!
//! The figures are at most a second old (the sampler's period); an ack is the slave's
//! report, itself at most a frame behind. The master's reads of the CommitLog for the
//! time lag are three small reads per streaming slave a second, from the page cache, as a
//! VIEW_MESSAGE_BY_ID's are.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::watch;

use crate::broker::Broker;
use crate::metrics::{Lag, PeerFigures, ReplicationFigures};
use crate::replication::master_side::MasterSide;
use crate::replication::slave_link::SlaveSide;
use crate::shard::service::{ShardService, ShardTask};
use crate::store::record::{self, MAGIC_BLANK, MAGIC_V1, MAGIC_V2};
use crate::store::{Store, StoreError};

/// How often the figures are sampled.
pub const SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Offsets carry the shard id in their top byte (D4); some figures are within the shard.
pub(super) const WITHIN_SHARD: u64 = (1 << 56) - 1;

/// The side a shard's replication runs, for its figures.
#[derive(Clone)]
pub enum Side {
    Master(Rc<MasterSide>),
    Slave(Rc<SlaveSide>),
}

/// Copies a shard's replication figures into its metrics once a second.
pub struct Sampler {
    pub broker: Rc<Broker>,
    pub side: Side,
    /// A slave's master HA address, as the shard's service follows it.
    pub master: watch::Receiver<Option<SocketAddr>>,
    /// `haSlaveFallbehindMax`: a slave within it is in sync.
    pub fallbehind_max: u64,
}

impl ShardService for Sampler {
    fn name(&self) -> &'static str {
        "replication metrics"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        let (broker, side, master) = (self.broker.clone(), self.side.clone(), self.master.clone());
        let fallbehind_max = self.fallbehind_max;
        vec![ShardTask::new("replication metrics", async move {
            let mut ticks = tokio::time::interval(SAMPLE_PERIOD);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut before = Before::default();
            loop {
                ticks.tick().await;
                let now_ms = broker.now_ms();
                let figures = match &side {
                    Side::Master(side) => master_figures(side, now_ms, fallbehind_max, &before),
                    Side::Slave(side) => {
                        let master = master.borrow().map(|addr| addr.to_string());
                        slave_figures(side, master, now_ms, &before)
                    }
                };
                before = Before::after(&figures, now_ms);
                broker.metrics().set_replication(figures);
            }
        })]
    }
}

/// What the last sample saw, for the per-second figures and the slave's timestamps.
#[derive(Default)]
struct Before {
    at_ms: i64,
    bytes: u64,
    /// Each stream's ack, by its remote address.
    acks: BTreeMap<String, u64>,
    last_up_ms: i64,
    last_append_ms: i64,
}

impl Before {
    fn after(figures: &ReplicationFigures, now_ms: i64) -> Before {
        Before {
            at_ms: now_ms,
            bytes: figures.bytes,
            acks: figures
                .peers
                .iter()
                .map(|peer| (peer.addr.clone(), peer.ack))
                .collect(),
            last_up_ms: figures.last_up_ms,
            last_append_ms: figures.last_append_ms,
        }
    }

    /// `now - then` per second since the last sample (0 at the first, or for a counter
    /// that went back: a new stream, a restarted count).
    fn per_second(&self, now: u64, then: Option<u64>, now_ms: i64) -> u64 {
        let elapsed_ms = now_ms - self.at_ms;
        match then {
            Some(then) if self.at_ms > 0 && elapsed_ms > 0 && now >= then => {
                ((now - then) as u128 * 1000 / elapsed_ms as u128) as u64
            }
            _ => 0,
        }
    }
}

fn master_figures(
    side: &MasterSide,
    now_ms: i64,
    fallbehind_max: u64,
    before: &Before,
) -> ReplicationFigures {
    let store = side.store();
    let positions = store.log_positions();
    let peers = side
        .links()
        .into_iter()
        .map(|link| {
            let addr = link.peer.to_string();
            // A stream still in its handshake holds no ack yet: nothing to read for it.
            let missing = match link.streaming {
                true => first_missing_store_time(store, link.ack, positions.written).ok(),
                false => None,
            };
            let lag = lag(positions.written, link.ack, missing, now_ms);
            let then = before.acks.get(&addr).copied();
            PeerFigures {
                slave_id: link.slave_id,
                streaming: link.streaming,
                from: link.from,
                ack: link.ack,
                in_sync: link.streaming && lag.bytes <= fallbehind_max,
                bytes_per_second: before.per_second(link.ack, then, now_ms),
                lag,
                addr,
            }
        })
        .collect();
    let bytes = side.bytes_sent();
    ReplicationFigures {
        slave: false,
        peers,
        bytes,
        bytes_per_second: before.per_second(bytes, Some(before.bytes), now_ms),
        offset: positions.replicated & WITHIN_SHARD,
        written: positions.written,
        ..ReplicationFigures::default()
    }
}

fn slave_figures(
    side: &SlaveSide,
    master: Option<String>,
    now_ms: i64,
    before: &Before,
) -> ReplicationFigures {
    let stats = side.store().replica_stats();
    let connected = side.connected();
    let appended = stats.bytes > before.bytes;
    ReplicationFigures {
        slave: true,
        connected,
        bytes: stats.bytes,
        bytes_per_second: before.per_second(stats.bytes, Some(before.bytes), now_ms),
        offset: side.store().replica_progress().ack & WITHIN_SHARD,
        written: side.store().log_positions().written,
        truncations: stats.truncations,
        master,
        last_up_ms: if connected { now_ms } else { before.last_up_ms },
        last_append_ms: if appended {
            now_ms
        } else {
            before.last_append_ms
        },
        ..ReplicationFigures::default()
    }
}

/// How far a slave that holds everything below `ack` is behind a master written up to
/// `written` at `now_ms`, given the store time of the first record it does not hold:
/// `Some(None)` when there is no record there (only a segment's closing blank),
/// `None` when it could not be read (the time lag is then unknown).
pub fn lag(written: u64, ack: u64, first_missing: Option<Option<i64>>, now_ms: i64) -> Lag {
    let bytes = written.saturating_sub(ack);
    let millis = match (bytes, first_missing) {
        (0, _) | (_, Some(None)) => Some(0),
        (_, Some(Some(stored_ms))) => Some(u64::try_from(now_ms - stored_ms).unwrap_or(0)),
        (_, None) => None,
    };
    Lag { bytes, millis }
}

/// The store time of the first record at or after `at` and below `written`, skipping a
/// segment's closing blank; `None` when none is there. Reads three small ranges of the
/// CommitLog (sizes and magic, the system flag, the store time), no whole record.
pub fn first_missing_store_time(
    store: &Store,
    at: u64,
    written: u64,
) -> Result<Option<i64>, StoreError> {
    let mut at = at.max(store.log_start());
    // A blank is followed by the next segment's first record: at most one hop.
    for _ in 0..2 {
        if at >= written {
            return Ok(None);
        }
        let head = store.read_log(at, 8)?;
        let size = be_i32(&head, record::TOTAL_SIZE_POS);
        match be_i32(&head, record::MAGIC_POS) {
            MAGIC_BLANK if size > 0 => at += size as u64,
            MAGIC_V1 | MAGIC_V2 => {
                let flags = store.read_log(at + record::SYSFLAG_POS as u64, 4)?;
                let stamp_at = record::store_timestamp_pos(be_i32(&flags, 0));
                let stamp = store.read_log(at + stamp_at as u64, 8)?;
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(stamp.get(..8).unwrap_or(&[0; 8]));
                return Ok(Some(i64::from_be_bytes(bytes)));
            }
            magic => {
                return Err(StoreError::Corrupt(format!(
                    "no record at {at} (below the written end {written}): size {size}, magic {magic:#x}"
                )))
            }
        }
    }
    Ok(None)
}

fn be_i32(bytes: &[u8], at: usize) -> i32 {
    let mut four = [0u8; 4];
    four.copy_from_slice(bytes.get(at..at + 4).unwrap_or(&[0; 4]));
    i32::from_be_bytes(four)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_up_slave_lags_nothing_whatever_the_record_says() {
        let none = lag(500, 500, None, 10_000);
        assert_eq!(
            none,
            Lag {
                bytes: 0,
                millis: Some(0)
            }
        );
        let ahead_of_stale_ack = lag(500, 700, Some(Some(1)), 10_000);
        assert_eq!(ahead_of_stale_ack.bytes, 0);
        assert_eq!(ahead_of_stale_ack.millis, Some(0));
    }

    #[test]
    fn a_slave_behind_lags_by_the_age_of_the_first_record_it_lacks() {
        let behind = lag(1_000, 400, Some(Some(7_500)), 10_000);
        assert_eq!(
            behind,
            Lag {
                bytes: 600,
                millis: Some(2_500)
            }
        );
        // Only a segment's blank is missing: the bytes lag, no record is late.
        assert_eq!(lag(1_000, 992, Some(None), 10_000).millis, Some(0));
        // The record could not be read: the time lag is unknown, never shown as 0.
        assert_eq!(lag(1_000, 400, None, 10_000).millis, None);
        // A store time ahead of the clock (another node's clock) is not a negative lag.
        assert_eq!(lag(1_000, 400, Some(Some(12_000)), 10_000).millis, Some(0));
    }

    #[test]
    fn rates_are_per_second_since_the_last_sample_and_zero_without_one() {
        let first = Before::default();
        assert_eq!(first.per_second(1_000, Some(0), 5_000), 0);
        let before = Before {
            at_ms: 4_000,
            ..Before::default()
        };
        assert_eq!(before.per_second(3_000, Some(1_000), 6_000), 1_000);
        assert_eq!(before.per_second(500, Some(1_000), 6_000), 0, "went back");
        assert_eq!(before.per_second(500, None, 6_000), 0, "a new stream");
    }
}
