//! Timer messages (reference-2 §1.5): a message sent with `TIMER_DELIVER_MS` (absolute ms),
//! `TIMER_DELAY_SEC` or `TIMER_DELAY_MS` waits in `rmq_sys_wheel_timer` until it is due,
//! then its shard's timer scheduler (`scheduler`) writes it to the topic and queue
//! it was sent to. Unlike delay levels, any delay up to `timerMaxDelaySec` is allowed, and
//! messages are delivered in due-time order whatever their delays.
//!
//! ```text
//!   send (topic T, queue q, TIMER_*)      routed as any send, to the owner of (T, q)
//!     └─▶ stored as rmq_sys_wheel_timer queue <this shard's>, TIMER_OUT_MS = due,
//!         REAL_TOPIC = T, REAL_QID = q; ConsumeQueue tags code = due (store::topic::timer_due)
//!   timer scheduler of the shard: indexes the queue into the timer store (`store`),
//!   takes the earliest due entry, delivers T/q (REAL_* removed) ─▶ acknowledged ─▶ next
//! ```
//!
//! This module is the pure part: what a send's properties ask for ([`requested_due`]), the
//! rewrite into the timer topic ([`schedule`]) and the delivered message ([`delivered`]).
//!
//! What Java does and this keeps (`HookUtils.transformTimerMessage`, `TimerMessageStore`):
//! - `TIMER_DELAY_SEC` wins over `TIMER_DELAY_MS`, which wins over `TIMER_DELIVER_MS`; a
//!   value that is not a whole number is refused (MESSAGE_ILLEGAL). A due time not after
//!   now is a plain send (delivered at once, as Java), except for a cancellation, which is
//!   refused. More than `timerMaxDelaySec` ahead is refused.
//! - A delay level (`DELAY`) wins over the timer properties (`delay::schedule` clears
//!   them); a prepared or rolled-back transaction message is never a timer message; a
//!   message that already carries `TIMER_OUT_MS` (a delivered timer message sent on) is not
//!   intercepted again.
//! - A cancellation is a timer message with `TIMER_DEL_UNIQKEY` = `<topic>+<uniqKey>` (or the
//!   bare unique key) and the due time of the message it cancels; it is never delivered,
//!   and the message it names is not delivered if it has not been yet.
//! - The delivered message: `REAL_TOPIC`, `REAL_QID` removed (unlike a delay level),
//!   `TIMER_OUT_MS` and the sender's `TIMER_*` kept, `TIMER_DEQUEUE_MS` added, `WAIT` false,
//!   its `UNIQ_KEY` the original's.
//!
//! Where ringmq differs on purpose: Java rounds the due time down to `timerPrecisionMs`
//! (1 s), so it may deliver up to a second early; ringmq keeps the millisecond asked for
//! and never delivers early (`timerPrecisionMs` is accepted and ignored).

pub mod copy;
pub mod errors;
pub mod holds;
pub mod progress_requests;
pub mod scheduler;
pub mod service;
pub mod store;

use crate::store::properties;

use self::errors::TimerRequestError;
use crate::store::record::{RecordInput, RecordView, RECORD_CRC_KEY};
pub use crate::store::topic::{TIMER_DEL_UNIQKEY, TIMER_OUT_MS, TIMER_TOPIC};

use crate::broker::delay::{
    REAL_QID, REAL_TOPIC, TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK,
};

/// `MessageConst.PROPERTY_TIMER_DELIVER_MS`: the absolute due time.
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// `MessageConst.PROPERTY_TIMER_DELAY_SEC`: seconds from the send.
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// `MessageConst.PROPERTY_TIMER_DELAY_MS`: milliseconds from the send.
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// `MessageConst.PROPERTY_TIMER_DEQUEUE_MS`: when the scheduler delivered it.
pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// RocketMQ's default `timerMaxDelaySec`: three days.
pub const DEFAULT_MAX_DELAY_SEC: u64 = 3 * 86_400;
/// The largest `timerMaxDelaySec`: ten years.
pub const MAX_MAX_DELAY_SEC: u64 = 3650 * 86_400;

/// What a send's properties ask of the timer: `Ok(None)` for a plain send (no timer
/// property, or a due time not after `now_ms`), `Ok(Some(due))` to wait until `due`, or the
/// refusal's remark. `now_ms` is called only for a message with a timer property: most
/// sends have none, and a clock read costs as much as the scan that says so.
pub fn requested_due(
    properties: &str,
    sys_flag: i32,
    now_ms: impl FnOnce() -> i64,
    max_delay_sec: u64,
) -> Result<Option<i64>, TimerRequestError> {
    if memchr::memmem::find(properties.as_bytes(), b"TIMER_").is_none() {
        // Most sends: one scan, no property lookups.
        return Ok(None);
    }
    let get = |key| properties::get(properties, key);
    let (sec, ms, at) = (
        get(TIMER_DELAY_SEC),
        get(TIMER_DELAY_MS),
        get(TIMER_DELIVER_MS),
    );
    if sec.is_none() && ms.is_none() && at.is_none() {
        return match get(TIMER_DEL_UNIQKEY) {
            Some(_) => Err(TimerRequestError::CancelWithoutDue),
            None => Ok(None),
        };
    }
    if get(TIMER_OUT_MS).is_some() {
        // Already a timer message once (Java's `checkIfTimerMessage`): not again.
        return Ok(None);
    }
    let kind = sys_flag & TRANSACTION_TYPE_MASK;
    if kind == TRANSACTION_PREPARED || kind == TRANSACTION_ROLLBACK {
        return Ok(None);
    }
    let now_ms = now_ms();
    let number = |key: &'static str, value: &str| {
        value
            .trim()
            .parse::<i64>()
            .map_err(|_| TimerRequestError::NotANumber {
                key,
                value: value.to_owned(),
            })
    };
    let due = if let Some(value) = sec {
        now_ms.saturating_add(number(TIMER_DELAY_SEC, value)?.saturating_mul(1000))
    } else if let Some(value) = ms {
        now_ms.saturating_add(number(TIMER_DELAY_MS, value)?)
    } else {
        number(TIMER_DELIVER_MS, at.expect("one of the three is set"))?
    };
    if due <= now_ms {
        if get(TIMER_DEL_UNIQKEY).is_some() {
            return Err(TimerRequestError::CancelPast { due, now_ms });
        }
        return Ok(None);
    }
    let max_ms = max_delay_sec.saturating_mul(1000).min(i64::MAX as u64) as i64;
    if due - now_ms > max_ms {
        return Err(TimerRequestError::TooFar {
            ahead_ms: due - now_ms,
            max_delay_sec,
        });
    }
    Ok(Some(due))
}

/// Rewrites a message to wait until `due` in [`TIMER_TOPIC`] queue `timer_queue`:
/// `TIMER_OUT_MS` the due time, `REAL_TOPIC` and `REAL_QID` where it was sent.
pub fn schedule(record: &mut RecordInput, due: i64, timer_queue: i32) {
    let due_text = due.to_string();
    let queue_text = record.queue_id.to_string();
    record.properties = properties::rewritten(
        &record.properties,
        &[],
        &[
            (TIMER_OUT_MS, &due_text),
            (REAL_TOPIC, &record.topic),
            (REAL_QID, &queue_text),
        ],
    );
    record.topic = TIMER_TOPIC.to_owned();
    record.queue_id = timer_queue;
}

/// The unique key a cancellation names: the part after `<topic>+`, or the whole value.
pub fn cancelled_key(properties: &str) -> Option<&str> {
    let value = properties::get(properties, TIMER_DEL_UNIQKEY)?;
    Some(value.rsplit_once('+').map_or(value, |(_, key)| key))
}

/// What the scheduler does with a due timer record.
#[derive(Debug)]
pub enum Due {
    /// Deliver this message; `uniq_key` is what a cancellation would name.
    Deliver {
        message: RecordInput,
        uniq_key: Option<String>,
    },
    /// A cancellation of the message with this unique key: remember it, deliver nothing.
    Cancel(String),
}

/// What the timer record `view` becomes when it is due at `now_ms`, or why it cannot be
/// delivered at all.
pub fn delivered(
    view: &RecordView<'_>,
    now_ms: i64,
) -> Result<Due, crate::broker::delay::errors::Undeliverable> {
    if let Some(key) = cancelled_key(view.properties) {
        return Ok(Due::Cancel(key.to_owned()));
    }
    let (topic, queue_id) = crate::broker::delay::real_queue(view)?;
    let now_text = now_ms.to_string();
    let props = properties::rewritten(
        view.properties,
        &[REAL_TOPIC, REAL_QID, RECORD_CRC_KEY],
        &[(TIMER_DEQUEUE_MS, &now_text), (properties::WAIT, "false")],
    );
    let uniq_key = properties::get(view.properties, properties::UNIQ_KEY).map(str::to_owned);
    Ok(Due::Deliver {
        message: crate::broker::delay::moved_to(view, topic, queue_id, props),
        uniq_key,
    })
}

/// The queue of [`TIMER_TOPIC`] that shard `shard` of `shards` owns: each shard keeps the
/// timers of the sends routed to it, so a timer never crosses shards on its way in.
pub fn queue_of_shard(shard: u8, shards: u8) -> i32 {
    crate::shard::routing::queue_of_shard(TIMER_TOPIC, shard, shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn props(pairs: &[(&str, &str)]) -> String {
        pairs
            .iter()
            .map(|(key, value)| format!("{key}\u{1}{value}\u{2}"))
            .collect()
    }

    #[test]
    fn the_due_time_is_read_as_java_reads_it() {
        let due = |pairs: &[(&str, &str)]| requested_due(&props(pairs), 0, || NOW, 10);
        assert_eq!(due(&[]), Ok(None));
        assert_eq!(due(&[(TIMER_DELAY_SEC, "3")]), Ok(Some(NOW + 3000)));
        assert_eq!(due(&[(TIMER_DELAY_MS, "250")]), Ok(Some(NOW + 250)));
        assert_eq!(due(&[(TIMER_DELIVER_MS, "1000500")]), Ok(Some(NOW + 500)));
        // Seconds win over milliseconds, which win over the absolute time.
        let all = [
            (TIMER_DELIVER_MS, "1000100"),
            (TIMER_DELAY_MS, "200"),
            (TIMER_DELAY_SEC, "3"),
        ];
        assert_eq!(due(&all), Ok(Some(NOW + 3000)));
        assert_eq!(due(&all[..2]), Ok(Some(NOW + 200)));
        // Not after now: a plain send.
        assert_eq!(due(&[(TIMER_DELAY_MS, "0")]), Ok(None));
        assert_eq!(due(&[(TIMER_DELAY_SEC, "-5")]), Ok(None));
        assert_eq!(due(&[(TIMER_DELIVER_MS, "5")]), Ok(None));
        // The maximum is inclusive.
        assert_eq!(due(&[(TIMER_DELAY_SEC, "10")]), Ok(Some(NOW + 10_000)));
        assert!(due(&[(TIMER_DELAY_MS, "10001")])
            .unwrap_err()
            .to_string()
            .contains("timerMaxDelaySec (10 s)"));
        assert!(due(&[(TIMER_DELAY_SEC, "9223372036854775807")]).is_err());
        assert!(due(&[(TIMER_DELAY_SEC, "soon")])
            .unwrap_err()
            .to_string()
            .contains("'soon' is not a whole number"));
        assert!(due(&[(TIMER_DELIVER_MS, "1.5")]).is_err());
        // Already delivered once, or a transaction's half: not a timer message.
        assert_eq!(
            due(&[(TIMER_DELAY_SEC, "3"), (TIMER_OUT_MS, "77")]),
            Ok(None)
        );
        assert_eq!(
            requested_due(&props(&[(TIMER_DELAY_SEC, "3")]), 0x4, || NOW, 10),
            Ok(None)
        );
        // A cancellation needs a due time still ahead.
        let cancel = [(TIMER_DEL_UNIQKEY, "T+K"), (TIMER_DELIVER_MS, "1000500")];
        assert_eq!(due(&cancel), Ok(Some(NOW + 500)));
        assert!(due(&cancel[..1])
            .unwrap_err()
            .to_string()
            .contains(TIMER_DELIVER_MS));
        assert!(due(&[(TIMER_DEL_UNIQKEY, "K"), (TIMER_DELIVER_MS, "7")])
            .unwrap_err()
            .to_string()
            .contains("already past"));
    }

    #[test]
    fn a_cancellation_names_the_unique_key_after_its_topic() {
        assert_eq!(
            cancelled_key(&props(&[(TIMER_DEL_UNIQKEY, "T+AB12")])),
            Some("AB12")
        );
        assert_eq!(
            cancelled_key(&props(&[(TIMER_DEL_UNIQKEY, "AB12")])),
            Some("AB12")
        );
        assert_eq!(cancelled_key(""), None);
    }

    #[test]
    fn every_shard_owns_one_timer_queue() {
        for shards in 1..=8u8 {
            let mut queues: Vec<i32> = (0..shards).map(|s| queue_of_shard(s, shards)).collect();
            queues.sort();
            queues.dedup();
            assert_eq!(queues.len(), shards as usize, "{shards} shards: {queues:?}");
            assert!(queues.iter().all(|&q| (0..shards as i32).contains(&q)));
        }
    }
}
