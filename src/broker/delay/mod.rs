//! Delay levels (reference-2 §1.4): a message sent with the property `DELAY` = n waits in
//! `SCHEDULE_TOPIC_XXXX` queue n-1 until its level's delay (`messageDelayLevel`) has
//! passed, then a scheduler writes it to the topic and queue it was sent to.
//!
//! ```text
//!   send (topic T, queue q, DELAY=n)        routed to the owner of (SCHEDULE_TOPIC_XXXX, n-1)
//!     └─▶ stored as SCHEDULE_TOPIC_XXXX queue n-1, REAL_TOPIC=T, REAL_QID=q, DELAY=n,
//!         ConsumeQueue tags code = store time + delay(n)      (store::topic::tags_code)
//!   scheduler of level n (on that same shard, `scheduler`), from its cursor (`offsets`):
//!     entries due ─▶ put T/q (DELAY removed) on the owner of (T, q), through its mailbox
//!        │           if it is another shard, up to a window of puts in flight
//!        │         ─▶ each acknowledged (durable), in queue order ─▶ cursor + 1
//!        └─ none due ─▶ sleep until one is (at most MAX_SLEEP; a new message wakes it)
//! ```
//!
//! What Java does and this keeps:
//! - `DELAY` above the last level is the last level (the property is rewritten to it); 0,
//!   a negative value or no `DELAY` is a plain send; a value that is not a number is
//!   refused (MESSAGE_ILLEGAL). A transaction's prepared or rollback message is never
//!   delayed. A delay level clears the timer properties (`TIMER_*`) first.
//! - The send response's `queueId` is the queue asked for; `queueOffset` and `msgId` are
//!   those of the record in `SCHEDULE_TOPIC_XXXX` (`SendMessageProcessor` l.483-486).
//! - The delivered message keeps body, flag, sysFlag, bornTimestamp, bornHost, storeHost
//!   and reconsumeTimes, and every property but `DELAY`, `TIMER_DELIVER_MS` and
//!   `TIMER_DELAY_SEC`; `REAL_TOPIC` and `REAL_QID` stay; `WAIT` is `false`. Its
//!   `UNIQ_KEY` is the original's, so clients see the msgId the producer got.
//! - Each level is FIFO: its scheduler stops at the first message not yet due. A due time
//!   more than one delay ahead of now (the clock went back) is taken as now.
//! - A batch whose header carries a `DELAY` above 0 is refused (MESSAGE_ILLEGAL), as
//!   Java's `CommitLog.putMessages` refuses it.
//!
//! Invariants:
//! - A level's cursor moves past a message only after that message's copy, and the copy
//!   of every message before it in the level's queue, was acknowledged by the store that
//!   owns the real queue (PUT_OK: durable as its flush mode requires, D7); a refused or failed put is tried again after [`RETRY_AFTER`]. So a
//!   delayed message is never lost, and it is never delivered before its time; after a
//!   crash or an abort mid-delivery it, and the rest of the window in flight with it, may
//!   be delivered twice (at-least-once, as Java).
//! - A scheduled record that cannot be delivered at all (no `REAL_TOPIC`, a `REAL_QID`
//!   that is not a queue id, a record the store calls illegal) is skipped, logged and
//!   counted, never retried for ever.
//! - A scheduler never spins: it sleeps until the next due time, at most [`MAX_SLEEP`],
//!   and a delayed send stored on its shard wakes it (its level's [`tokio::sync::Notify`]).
//!
//! Not here: `SCHEDULE_TOPIC_XXXX` may be pulled (as Java lets mqadmin browse it), its
//! tags codes are delivery times, so a tag filter on it matches nothing useful; slaves
//! do not exist yet (GET_ALL_DELAY_OFFSET, 45, answers the cursors they would copy,
//! [`self::offsets::get_all`]); 5.x timer messages (`TIMER_*`) are
//! `crate::broker::timer`'s.

pub mod errors;
pub mod holds;
pub mod offsets;
pub mod scheduler;
pub mod service;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::store::properties;
use crate::store::record::{RecordInput, RecordView, RECORD_CRC_KEY};
use crate::store::topic::SCHEDULE_TOPIC;

use self::errors::{DelayLevelsError, NotADelayLevel, Undeliverable};

/// `MessageConst.PROPERTY_DELAY_TIME_LEVEL`.
pub const DELAY: &str = "DELAY";
/// `MessageConst.PROPERTY_REAL_TOPIC`: the topic a scheduled message is delivered to.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// `MessageConst.PROPERTY_REAL_QUEUE_ID`.
pub const REAL_QID: &str = "REAL_QID";
/// The 5.x timer properties a delay level clears.
pub const TIMER_PROPERTIES: [&str; 3] = ["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"];
/// RocketMQ's default `messageDelayLevel`.
pub const DEFAULT_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";
/// Most levels: one queue each, and a topic has at most this many queues.
pub const MAX_LEVELS: usize = crate::broker::naming::names::MAX_QUEUE_NUMS as usize;
/// Longest delay of a level: ten years.
pub const MAX_DELAY_MS: u64 = 3650 * 86_400_000;
/// Longest a scheduler sleeps before it looks at its queue again, whatever is due.
pub const MAX_SLEEP: Duration = Duration::from_secs(1);
/// How long a scheduler waits after the store refused or failed a delivery.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// sysFlag's transaction type bits (`MessageSysFlag.TRANSACTION_*`).
pub(crate) const TRANSACTION_TYPE_MASK: i32 = 0x3 << 2;
pub(crate) const TRANSACTION_PREPARED: i32 = 0x1 << 2;
pub(crate) const TRANSACTION_ROLLBACK: i32 = 0x3 << 2;
/// The sysFlag bits the encoder derives from the hosts.
const HOST_FAMILY_BITS: i32 = 0x10 | 0x20;

/// `messageDelayLevel`: the delay of each level, level 1 first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayLevels {
    delays_ms: Vec<u64>,
}

impl Default for DelayLevels {
    fn default() -> DelayLevels {
        DelayLevels::parse(DEFAULT_LEVELS).expect("the default levels parse")
    }
}

impl DelayLevels {
    /// Parses RocketMQ's form (`ScheduleMessageService.parseDelayLevel`): delays separated
    /// by spaces, each a whole number and a unit, `s`, `m`, `h` or `d`; ringmq also takes
    /// `ms`. The error names the level and what is wrong with it.
    pub fn parse(text: &str) -> Result<DelayLevels, DelayLevelsError> {
        let mut delays_ms = Vec::new();
        for (index, item) in text.split_whitespace().enumerate() {
            let level = index + 1;
            let digits = item
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(item.len());
            let (number, unit) = item.split_at(digits);
            if number.is_empty() {
                return Err(DelayLevelsError::NoNumber {
                    level,
                    item: item.to_owned(),
                });
            }
            let unit_ms: u64 = match unit {
                "ms" => 1,
                "s" => 1000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                "" => {
                    return Err(DelayLevelsError::NoUnit {
                        level,
                        item: item.to_owned(),
                    })
                }
                other => {
                    return Err(DelayLevelsError::UnknownUnit {
                        level,
                        item: item.to_owned(),
                        unit: other.to_owned(),
                    })
                }
            };
            let delay = number
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(unit_ms))
                .filter(|&ms| ms <= MAX_DELAY_MS)
                .ok_or_else(|| DelayLevelsError::TooLong {
                    level,
                    item: item.to_owned(),
                })?;
            if delay == 0 {
                return Err(DelayLevelsError::NoDelay {
                    level,
                    item: item.to_owned(),
                });
            }
            delays_ms.push(delay);
        }
        if delays_ms.is_empty() {
            return Err(DelayLevelsError::NoLevels);
        }
        if delays_ms.len() > MAX_LEVELS {
            return Err(DelayLevelsError::TooManyLevels(delays_ms.len()));
        }
        Ok(DelayLevels { delays_ms })
    }

    /// The delays in ms, level 1 first.
    pub fn as_millis(&self) -> &[u64] {
        &self.delays_ms
    }

    /// The last level (the number of levels).
    pub fn max_level(&self) -> u32 {
        self.delays_ms.len() as u32
    }

    /// The delay of `level` (1 to [`DelayLevels::max_level`]), in ms.
    pub fn delay_ms(&self, level: u32) -> Option<u64> {
        let index = usize::try_from(level).ok()?.checked_sub(1)?;
        self.delays_ms.get(index).copied()
    }

    /// The level a `DELAY` of `requested` stores at: none for 0 or less, the last level
    /// for one above it.
    pub fn level_of(&self, requested: i64) -> Option<u32> {
        (requested > 0).then(|| (requested.min(self.max_level() as i64)) as u32)
    }
}

impl fmt::Display for DelayLevels {
    /// Each delay in the largest unit that divides it, so the text parses back the same.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, &ms) in self.delays_ms.iter().enumerate() {
            if index > 0 {
                out.write_str(" ")?;
            }
            let (number, unit) = [
                (86_400_000, "d"),
                (3_600_000, "h"),
                (60_000, "m"),
                (1000, "s"),
            ]
            .into_iter()
            .find(|(unit_ms, _)| ms % unit_ms == 0)
            .map_or((ms, "ms"), |(unit_ms, unit)| (ms / unit_ms, unit));
            write!(out, "{number}{unit}")?;
        }
        Ok(())
    }
}

/// The level a message with `properties` and `sys_flag` is delayed at, if any; the error
/// is the refusal's remark. Java's rules: no delay for a prepared or rolled-back
/// transaction message, or for a `DELAY` of 0 or less; the last level for one above it.
pub fn requested_level(
    properties: &str,
    sys_flag: i32,
    levels: &DelayLevels,
) -> Result<Option<u32>, NotADelayLevel> {
    let Some(value) = properties::get(properties, DELAY) else {
        return Ok(None);
    };
    let kind = sys_flag & TRANSACTION_TYPE_MASK;
    if kind == TRANSACTION_PREPARED || kind == TRANSACTION_ROLLBACK {
        return Ok(None);
    }
    let requested: i32 = value
        .parse()
        .map_err(|_| NotADelayLevel(value.to_owned()))?;
    Ok(levels.level_of(requested as i64))
}

/// Rewrites a message to wait at `level`: topic `SCHEDULE_TOPIC_XXXX`, queue `level - 1`,
/// `REAL_TOPIC` and `REAL_QID` the topic and queue it was sent to, `DELAY` the level
/// (clamped), the timer properties cleared (`HookUtils.handleScheduleMessage`).
pub fn schedule(record: &mut RecordInput, level: u32) {
    assert!(level >= 1, "delay level {level} is not a level");
    let level_text = level.to_string();
    let queue_text = record.queue_id.to_string();
    record.properties = properties::rewritten(
        &record.properties,
        &TIMER_PROPERTIES,
        &[
            (DELAY, &level_text),
            (REAL_TOPIC, &record.topic),
            (REAL_QID, &queue_text),
        ],
    );
    record.topic = SCHEDULE_TOPIC.to_owned();
    record.queue_id = (level - 1) as i32;
}

/// The message a scheduled record is delivered as (`messageTimeUp`), or why it cannot be.
pub fn delivered(view: &RecordView<'_>) -> Result<RecordInput, Undeliverable> {
    let (topic, queue_id) = real_queue(view)?;
    if topic == "RMQ_SYS_TRANS_HALF_TOPIC" {
        return Err(Undeliverable::TransactionHalf);
    }
    let properties = properties::rewritten(
        view.properties,
        &[
            DELAY,
            TIMER_PROPERTIES[0],
            TIMER_PROPERTIES[1],
            RECORD_CRC_KEY,
        ],
        &[(properties::WAIT, "false")],
    );
    Ok(moved_to(view, topic, queue_id, properties))
}

/// The topic and queue a waiting record (delay level or timer) is delivered to: its
/// `REAL_TOPIC` and `REAL_QID`, checked.
pub(crate) fn real_queue<'a>(view: &RecordView<'a>) -> Result<(&'a str, i32), Undeliverable> {
    let topic = properties::get(view.properties, REAL_TOPIC).ok_or(Undeliverable::NoRealTopic)?;
    crate::broker::naming::names::validate_topic(topic).map_err(Undeliverable::RealTopic)?;
    let queue_id = properties::get(view.properties, REAL_QID)
        .and_then(|queue| queue.parse::<i32>().ok())
        .filter(|&queue| queue >= 0)
        .ok_or(Undeliverable::NoRealQueue)?;
    Ok((topic, queue_id))
}

/// The record `view` as a new message of `topic` queue `queue_id` with `properties`: the
/// body, flags, timestamps, hosts and reconsume times it had.
pub(crate) fn moved_to(
    view: &RecordView<'_>,
    topic: &str,
    queue_id: i32,
    properties: String,
) -> RecordInput {
    RecordInput {
        topic: topic.to_owned(),
        queue_id,
        flag: view.flag,
        sys_flag: view.sys_flag & !HOST_FAMILY_BITS,
        born_timestamp: view.born_timestamp,
        born_host: view.born_host,
        store_host: view.store_host,
        reconsume_times: view.reconsume_times,
        prepared_transaction_offset: view.prepared_transaction_offset,
        body_crc: view.body_crc,
        body: Bytes::copy_from_slice(view.body),
        properties,
    }
}

/// The levels whose schedulers run on shard `shard` of `shards`: those whose queue it owns.
pub fn levels_on_shard(levels: &DelayLevels, shard: u8, shards: u8) -> Vec<u32> {
    (1..=levels.max_level())
        .filter(|&level| {
            crate::shard::routing::queue_owner(SCHEDULE_TOPIC, (level - 1) as i32, shards) == shard
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::store::record::{self, body_crc, Decoded, Verify};

    fn encode_record_for_tests(
        input: &RecordInput,
        queue_offset: i64,
        phys_offset: i64,
        store_timestamp: i64,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        record::encode_into(input, queue_offset, phys_offset, store_timestamp, &mut out).unwrap();
        out
    }

    #[test]
    fn levels_parse_as_rocketmq_and_print_back() {
        let levels = DelayLevels::default();
        assert_eq!(levels.max_level(), 18);
        assert_eq!(levels.delay_ms(1), Some(1000));
        assert_eq!(levels.delay_ms(5), Some(60_000));
        assert_eq!(levels.delay_ms(18), Some(7_200_000));
        assert_eq!(levels.delay_ms(0), None);
        assert_eq!(levels.delay_ms(19), None);
        assert_eq!(levels.to_string(), DEFAULT_LEVELS);
        let ours = DelayLevels::parse("  100ms 1500ms\t2d 60s  ").unwrap();
        assert_eq!(ours.as_millis(), &[100, 1500, 172_800_000, 60_000]);
        assert_eq!(ours.to_string(), "100ms 1500ms 2d 1m");
        assert_eq!(DelayLevels::parse(&ours.to_string()).unwrap(), ours);
    }

    #[test]
    fn bad_levels_are_refused_naming_the_level() {
        for (text, why) in [
            ("", "no delay levels"),
            ("   ", "no delay levels"),
            ("1s 5", "level 2 '5' has no unit"),
            ("1s 5x", "level 2 '5x' has the unknown unit 'x'"),
            ("1S", "unknown unit 'S'"),
            ("s", "level 1 's' does not start with a whole number"),
            ("-1s", "does not start with a whole number"),
            ("1.5s", "unknown unit '.5s'"),
            ("0s", "level 1 '0s' is no delay"),
            ("3651d", "more than 3650 days"),
            ("99999999999999999999s", "more than 3650 days"),
        ] {
            let error = DelayLevels::parse(text).unwrap_err().to_string();
            assert!(error.contains(why), "{text:?}: {error}");
        }
        let many = vec!["1s"; MAX_LEVELS + 1].join(" ");
        assert!(DelayLevels::parse(&many)
            .unwrap_err()
            .to_string()
            .contains("at most 1024"));
        assert!(DelayLevels::parse(&vec!["1s"; MAX_LEVELS].join(" ")).is_ok());
    }

    #[test]
    fn the_requested_level_follows_java() {
        let levels = DelayLevels::parse("1s 2s 3s").unwrap();
        let props = |delay: &str| properties::encode([("TAGS", "a"), (DELAY, delay)]);
        assert_eq!(requested_level(&props("1"), 0, &levels), Ok(Some(1)));
        assert_eq!(requested_level(&props("3"), 0, &levels), Ok(Some(3)));
        assert_eq!(requested_level(&props("4"), 0, &levels), Ok(Some(3)));
        assert_eq!(requested_level(&props("99999"), 0, &levels), Ok(Some(3)));
        assert_eq!(requested_level(&props("0"), 0, &levels), Ok(None));
        assert_eq!(requested_level(&props("-2"), 0, &levels), Ok(None));
        assert_eq!(requested_level("TAGS\u{1}a\u{2}", 0, &levels), Ok(None));
        assert!(requested_level(&props("x"), 0, &levels)
            .unwrap_err()
            .to_string()
            .contains("'x' is not a delay level"));
        // Prepared and rolled-back transaction messages are not delayed; committed are.
        assert_eq!(requested_level(&props("2"), 0x4, &levels), Ok(None));
        assert_eq!(requested_level(&props("2"), 0xC, &levels), Ok(None));
        assert_eq!(requested_level(&props("2"), 0x8, &levels), Ok(Some(2)));
    }

    fn input(topic: &str, queue_id: i32, properties: String) -> RecordInput {
        let body = Bytes::from_static(b"payload");
        RecordInput {
            topic: topic.into(),
            queue_id,
            flag: 7,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
            store_host: SocketAddr::from(([10, 0, 0, 1], 10911)),
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            body_crc: body_crc(&body),
            body,
            properties,
        }
    }

    #[test]
    fn schedule_then_deliver_rewrites_the_properties_as_java() {
        let original = properties::encode([
            ("TAGS", "TagA"),
            (DELAY, "9"),
            ("TIMER_DELAY_SEC", "30"),
            ("UNIQ_KEY", "U1"),
            ("KEYS", "k1"),
        ]);
        let mut record = input("Orders", 3, original);
        schedule(&mut record, 4);
        assert_eq!(record.topic, SCHEDULE_TOPIC);
        assert_eq!(record.queue_id, 3);
        assert_eq!(
            properties::parse(&record.properties),
            vec![
                ("TAGS", "TagA"),
                ("UNIQ_KEY", "U1"),
                ("KEYS", "k1"),
                (DELAY, "4"),
                (REAL_TOPIC, "Orders"),
                (REAL_QID, "3"),
            ]
        );

        let stored = encode_record_for_tests(&record, 5, 1234, 1_700_000_000_500);
        let Ok(Decoded::Record(view)) = record::decode(&stored, Verify::Full) else {
            panic!("the record decodes");
        };
        let out = delivered(&view).unwrap();
        assert_eq!((out.topic.as_str(), out.queue_id), ("Orders", 3));
        assert_eq!(
            properties::parse(&out.properties),
            vec![
                ("TAGS", "TagA"),
                ("UNIQ_KEY", "U1"),
                ("KEYS", "k1"),
                (REAL_TOPIC, "Orders"),
                (REAL_QID, "3"),
                (properties::WAIT, "false"),
            ]
        );
        assert_eq!(&out.body[..], b"payload");
        assert_eq!(out.body_crc, record.body_crc);
        assert_eq!(
            (out.flag, out.born_timestamp, out.reconsume_times),
            (7, 1_700_000_000_000, 2)
        );
        assert_eq!(
            (out.born_host, out.store_host),
            (record.born_host, record.store_host)
        );
    }

    #[test]
    fn a_scheduled_record_without_its_real_queue_is_not_deliverable() {
        for (props, why) in [
            (properties::encode([(REAL_QID, "1")]), "no REAL_TOPIC"),
            (
                properties::encode([(REAL_TOPIC, "T"), (REAL_QID, "-1")]),
                "REAL_QID property is not a queue id",
            ),
            (properties::encode([(REAL_TOPIC, "T")]), "REAL_QID"),
            (
                properties::encode([(REAL_TOPIC, "a b"), (REAL_QID, "0")]),
                "REAL_TOPIC:",
            ),
        ] {
            let stored =
                encode_record_for_tests(&input(SCHEDULE_TOPIC, 0, props), 0, 0, 1_700_000_000_000);
            let Ok(Decoded::Record(view)) = record::decode(&stored, Verify::Full) else {
                panic!("the record decodes");
            };
            let error = delivered(&view).unwrap_err().to_string();
            assert!(error.contains(why), "{error}");
        }
    }

    #[test]
    fn each_level_runs_on_the_shard_owning_its_queue() {
        let levels = DelayLevels::default();
        assert_eq!(levels_on_shard(&levels, 0, 1), (1..=18).collect::<Vec<_>>());
        let mut all: Vec<u32> = (0..3)
            .flat_map(|shard| levels_on_shard(&levels, shard, 3))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (1..=18).collect::<Vec<_>>());
        for shard in 0..3 {
            for level in levels_on_shard(&levels, shard, 3) {
                assert_eq!(
                    crate::shard::routing::queue_owner(SCHEDULE_TOPIC, level as i32 - 1, 3),
                    shard
                );
            }
        }
    }
}
