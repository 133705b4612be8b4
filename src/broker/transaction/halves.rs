//! The records of a transaction, pure (reference-2 §3.2): a prepared send rewritten into
//! a half message, the real message a commit writes from a half, the op records that say
//! which halves are resolved or were checked, and the body a check-back carries.
//!
//! Invariants:
//! - A half keeps the message it was sent as (body, flags, timestamps, hosts, every
//!   property) plus `REAL_TOPIC`, `REAL_QID` and `__transactionId__`; its sysFlag's
//!   transaction bits are cleared (NOT_TYPE), so it is dispatched to its queue like any
//!   record and is never delayed or indexed as a rollback.
//! - A committed message is the half's message in its real topic and queue with
//!   `REAL_TOPIC`, `REAL_QID` and `TRAN_MSG` removed, `WAIT=false`, sysFlag COMMIT_TYPE and
//!   the half's CommitLog offset as its prepared transaction offset.
//! - An op body lists half queue offsets as RocketMQ's does: `"o1,o2,"`.

use bytes::Bytes;

use crate::broker::delay::{
    moved_to, real_queue, REAL_QID, REAL_TOPIC, TRANSACTION_PREPARED, TRANSACTION_TYPE_MASK,
};
use crate::store::properties;
use crate::store::record::{self, RecordInput, RecordView, RECORD_CRC_KEY};

/// `TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC`: where half messages wait (one queue per
/// shard here, reference-2 §3.4 item 1).
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// `TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC`: the op records (one queue per shard).
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// `TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC`: halves discarded after their
/// last check.
pub const CHECK_MAX_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// `TransactionalMessageUtil.buildConsumerGroup()`: the group whose committed offset on a
/// shard's half queue is the check service's cursor.
pub const CHECK_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// `MessageConst.PROPERTY_TRANSACTION_PREPARED`.
pub const TRAN_MSG: &str = "TRAN_MSG";
/// `MessageConst.PROPERTY_PRODUCER_GROUP`.
pub const PGROUP: &str = "PGROUP";
/// `MessageConst.PROPERTY_TRANSACTION_ID`.
pub const TRANSACTION_ID: &str = "__transactionId__";
/// `MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS`.
pub const CHECK_IMMUNITY: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
/// `MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES`: set on a discarded half.
pub const CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// `TransactionalMessageUtil.REMOVE_TAG`: an op record resolving halves.
pub const DECIDED_TAG: &str = "d";
/// ringmq's op tag for halves checked in one round (their check counts survive a restart).
pub const CHECKED_TAG: &str = "c";
/// sysFlag `TRANSACTION_COMMIT_TYPE`.
pub const TRANSACTION_COMMIT: i32 = 0x2 << 2;
/// Longest op body: RocketMQ's `transactionOpMsgMaxSize` default.
pub const MAX_OP_BODY: usize = 4096;

/// Whether a send is transactional: `TRAN_MSG=true` or the PREPARED sysFlag type.
pub fn is_prepared(own_properties: &str, sys_flag: i32) -> bool {
    sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED
        || properties::get(own_properties, TRAN_MSG).is_some_and(|value| value == "true")
}

/// Rewrites a prepared send into a half message of `half_queue`.
pub fn into_half(record: &mut RecordInput, half_queue: i32, uniq_key: &str) {
    let queue_text = record.queue_id.to_string();
    record.properties = properties::rewritten(
        &record.properties,
        &[],
        &[
            (TRANSACTION_ID, uniq_key),
            (REAL_TOPIC, &record.topic),
            (REAL_QID, &queue_text),
        ],
    );
    record.sys_flag &= !TRANSACTION_TYPE_MASK;
    record.topic = HALF_TOPIC.to_owned();
    record.queue_id = half_queue;
}

/// Why a stored record is not the half a decision names.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotTheHalf {
    #[error("the record at commit log offset {0} is a message of {1}, not a half message")]
    NotAHalf(i64, String),
    #[error("the half message belongs to producer group {stored:?}, not {asked:?}")]
    OtherGroup { stored: String, asked: String },
    #[error("the half message is at queue offset {stored}, not {asked}")]
    OtherQueueOffset { stored: i64, asked: i64 },
    #[error("the half message has no usable REAL_TOPIC and REAL_QID: {0}")]
    NoRealQueue(String),
}

/// Checks that `view` is the half a decision of `group` names at `queue_offset`
/// (`EndTransactionProcessor.checkPrepareMessage`).
pub fn check_half(view: &RecordView<'_>, group: &str, queue_offset: i64) -> Result<(), NotTheHalf> {
    if view.topic != HALF_TOPIC {
        return Err(NotTheHalf::NotAHalf(
            view.phys_offset,
            view.topic.to_owned(),
        ));
    }
    let stored = properties::get(view.properties, PGROUP).unwrap_or("");
    if stored != group {
        return Err(NotTheHalf::OtherGroup {
            stored: stored.to_owned(),
            asked: group.to_owned(),
        });
    }
    if view.queue_offset != queue_offset {
        return Err(NotTheHalf::OtherQueueOffset {
            stored: view.queue_offset,
            asked: queue_offset,
        });
    }
    Ok(())
}

/// The real message a commit of the half `view` writes.
pub fn committed(view: &RecordView<'_>) -> Result<RecordInput, NotTheHalf> {
    let (topic, queue_id) =
        real_queue(view).map_err(|why| NotTheHalf::NoRealQueue(why.to_string()))?;
    let properties = properties::rewritten(
        view.properties,
        &[REAL_TOPIC, REAL_QID, TRAN_MSG, RECORD_CRC_KEY],
        &[(properties::WAIT, "false")],
    );
    let mut record = moved_to(view, topic, queue_id, properties);
    record.sys_flag = (record.sys_flag & !TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT;
    record.prepared_transaction_offset = view.phys_offset;
    Ok(record)
}

/// The copy of a half moved to [`CHECK_MAX_TOPIC`] after `checks` checks.
pub fn discarded(view: &RecordView<'_>, queue_id: i32, checks: u8) -> RecordInput {
    let checks = checks.to_string();
    let properties = properties::rewritten(
        view.properties,
        &[RECORD_CRC_KEY],
        &[(CHECK_TIMES, &checks)],
    );
    moved_to(view, CHECK_MAX_TOPIC, queue_id, properties)
}

/// The body of CHECK_TRANSACTION_STATE for the half `view`: the stored-format record as
/// the producer sent it, in its real topic and queue (clients read `PGROUP` and the
/// transaction id from it; reference-2 §3.4 item 4).
pub fn check_body(view: &RecordView<'_>) -> Result<Vec<u8>, NotTheHalf> {
    let (topic, queue_id) =
        real_queue(view).map_err(|why| NotTheHalf::NoRealQueue(why.to_string()))?;
    let properties = properties::rewritten(view.properties, &[RECORD_CRC_KEY], &[]);
    let input = moved_to(view, topic, queue_id, properties);
    let mut out = Vec::with_capacity(view.total_size as usize + 64);
    record::encode_into(
        &input,
        view.queue_offset,
        view.phys_offset,
        view.store_timestamp,
        &mut out,
    )
    .map_err(|why| NotTheHalf::NoRealQueue(format!("cannot encode it: {why}")))?;
    Ok(out)
}

/// How long a half is immune from checks: its `CHECK_IMMUNITY_TIME_IN_SECONDS` when that is
/// a positive number of seconds, else `timeout_ms` (`TransactionalMessageUtil.getImmunityTime`).
pub fn immunity_ms(properties_text: &str, timeout_ms: i64) -> i64 {
    properties::get(properties_text, CHECK_IMMUNITY)
        .and_then(|seconds| seconds.parse::<i64>().ok())
        .filter(|&seconds| seconds > 0)
        .map_or(timeout_ms, |seconds| seconds.saturating_mul(1000))
}

/// Op bodies listing `offsets`, each at most [`MAX_OP_BODY`] bytes.
pub fn op_bodies(offsets: &[u64]) -> Vec<Bytes> {
    let mut bodies = Vec::new();
    let mut body = String::new();
    for offset in offsets {
        let item = format!("{offset},");
        if body.len() + item.len() > MAX_OP_BODY && !body.is_empty() {
            bodies.push(Bytes::from(std::mem::take(&mut body)));
        }
        body.push_str(&item);
    }
    if !body.is_empty() {
        bodies.push(Bytes::from(body));
    }
    bodies
}

/// The half queue offsets an op body lists; a part that is not an offset is skipped (the
/// caller counts what it could not read).
pub fn parse_op_body(body: &[u8]) -> (Vec<u64>, usize) {
    let text = String::from_utf8_lossy(body);
    let mut offsets = Vec::new();
    let mut bad = 0;
    for part in text.split(',').filter(|part| !part.trim().is_empty()) {
        match part.trim().parse::<u64>() {
            Ok(offset) => offsets.push(offset),
            Err(_) => bad += 1,
        }
    }
    (offsets, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{body_crc, decode, Decoded, Verify};

    fn sent(properties_text: &str, sys_flag: i32) -> RecordInput {
        let body = Bytes::from_static(b"order 7");
        RecordInput {
            topic: "Orders".into(),
            queue_id: 3,
            flag: 0,
            sys_flag,
            born_timestamp: 1_000,
            born_host: "127.0.0.1:5000".parse().unwrap(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: body_crc(&body),
            body,
            properties: properties_text.into(),
        }
    }

    fn stored(input: &RecordInput, queue_offset: i64, phys: i64) -> Vec<u8> {
        let mut out = Vec::new();
        record::encode_into(input, queue_offset, phys, 2_000, &mut out).unwrap();
        out
    }

    fn view(bytes: &[u8]) -> RecordView<'_> {
        match decode(bytes, Verify::Structure).unwrap() {
            Decoded::Record(view) => view,
            other => panic!("{other:?}"),
        }
    }

    fn props(pairs: &[(&str, &str)]) -> String {
        properties::encode(pairs.iter().copied())
    }

    #[test]
    fn a_prepared_send_is_recognised_by_its_flag_or_its_property() {
        assert!(is_prepared("", TRANSACTION_PREPARED));
        assert!(is_prepared(&props(&[(TRAN_MSG, "true")]), 0));
        assert!(!is_prepared(&props(&[(TRAN_MSG, "false")]), 0));
        assert!(!is_prepared("", TRANSACTION_COMMIT));
    }

    #[test]
    fn a_half_keeps_the_message_and_a_commit_gives_it_back_in_its_queue() {
        let mut record = sent(
            &props(&[(TRAN_MSG, "true"), (PGROUP, "tx"), ("KEYS", "k1")]),
            TRANSACTION_PREPARED,
        );
        into_half(&mut record, 0, "UNIQ1");
        assert_eq!((record.topic.as_str(), record.queue_id), (HALF_TOPIC, 0));
        assert_eq!(record.sys_flag & TRANSACTION_TYPE_MASK, 0);
        let bytes = stored(&record, 5, 4096);
        let half = view(&bytes);
        check_half(&half, "tx", 5).unwrap();
        assert_eq!(
            check_half(&half, "other", 5),
            Err(NotTheHalf::OtherGroup {
                stored: "tx".into(),
                asked: "other".into()
            })
        );
        assert!(matches!(
            check_half(&half, "tx", 6),
            Err(NotTheHalf::OtherQueueOffset { .. })
        ));
        let real = committed(&half).unwrap();
        assert_eq!((real.topic.as_str(), real.queue_id), ("Orders", 3));
        assert_eq!(real.sys_flag & TRANSACTION_TYPE_MASK, TRANSACTION_COMMIT);
        assert_eq!(real.prepared_transaction_offset, 4096);
        assert_eq!(&real.body[..], b"order 7");
        for gone in [REAL_TOPIC, REAL_QID, TRAN_MSG] {
            assert_eq!(properties::get(&real.properties, gone), None, "{gone}");
        }
        assert_eq!(properties::get(&real.properties, "KEYS"), Some("k1"));
        assert_eq!(properties::get(&real.properties, PGROUP), Some("tx"));
        assert_eq!(
            properties::get(&real.properties, TRANSACTION_ID),
            Some("UNIQ1")
        );
        assert_eq!(
            properties::get(&real.properties, properties::WAIT),
            Some("false")
        );
    }

    #[test]
    fn a_check_body_is_the_record_in_its_real_topic_and_queue() {
        let mut record = sent(&props(&[(TRAN_MSG, "true"), (PGROUP, "tx")]), 0);
        into_half(&mut record, 0, "UNIQ2");
        let bytes = stored(&record, 9, 8192);
        let body = check_body(&view(&bytes)).unwrap();
        let back = view(&body);
        assert_eq!((back.topic, back.queue_id), ("Orders", 3));
        assert_eq!((back.queue_offset, back.phys_offset), (9, 8192));
        assert_eq!(properties::get(back.properties, PGROUP), Some("tx"));
    }

    #[test]
    fn a_record_of_another_topic_is_not_a_half() {
        let bytes = stored(&sent("", 0), 0, 0);
        assert!(matches!(
            check_half(&view(&bytes), "tx", 0),
            Err(NotTheHalf::NotAHalf(0, topic)) if topic == "Orders"
        ));
    }

    #[test]
    fn op_bodies_round_trip_and_split_at_the_size_limit() {
        let offsets: Vec<u64> = (0..2000).map(|i| i * 1_000_003).collect();
        let bodies = op_bodies(&offsets);
        assert!(bodies.len() > 1);
        let mut back = Vec::new();
        for body in &bodies {
            assert!(body.len() <= MAX_OP_BODY, "{}", body.len());
            let (offsets, bad) = parse_op_body(body);
            assert_eq!(bad, 0);
            back.extend(offsets);
        }
        assert_eq!(back, offsets);
        assert_eq!(parse_op_body(b"3,x,5,"), (vec![3, 5], 1));
    }

    #[test]
    fn immunity_is_the_messages_own_when_it_gives_one() {
        assert_eq!(immunity_ms("", 6000), 6000);
        assert_eq!(immunity_ms(&props(&[(CHECK_IMMUNITY, "20")]), 6000), 20_000);
        assert_eq!(immunity_ms(&props(&[(CHECK_IMMUNITY, "-1")]), 6000), 6000);
        assert_eq!(immunity_ms(&props(&[(CHECK_IMMUNITY, "x")]), 6000), 6000);
    }
}
