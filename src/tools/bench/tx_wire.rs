//! The wire of the transaction benchmarks (`ringmq bench transactions`), as a stock
//! transactional producer speaks it (reference §3.1): the half send, the
//! END_TRANSACTION (37) that decides it, what a half's send answer and a broker's
//! CHECK_TRANSACTION_STATE (39) carry, and the HEART_BEAT that registers the producer
//! group a check is sent to. Pure: no I/O, so the encoding is unit-tested.
//!
//! ```text
//! half send:  SEND_MESSAGE_V2, producerGroup (a) = group, sysFlag (f) |= 0x4,
//!             properties += TRAN_MSG=true, PGROUP=group, UNIQ_KEY=<key of seq>
//! answer:     msgId (offset msg id of the half), queueOffset (the half's), transactionId
//! END_TRANSACTION: producerGroup, tranStateTableOffset = queueOffset,
//!             commitLogOffset = msgId's last 16 hex digits, commitOrRollback 8/12/0,
//!             fromTransactionCheck, msgId = transactionId = UNIQ_KEY, topic
//! check:      header tranStateTableOffset, commitLogOffset, msgId, transactionId,
//!             offsetMsgId, topic; body the half in stored format (store size maybe 0)
//! ```
//!
//! The bench's UNIQ_KEYs name the message's sequence number ([`TxKeys`]), and its bodies
//! do too ([`super::lateness::body`]), so a check is tied back to the half it is about
//! with no table of keys.

use compact_str::ToCompactString;

use crate::client::send_request_v2;
use crate::remoting::codes::request as codes;
use crate::remoting::{ExtFields, RemotingCommand};
use crate::store::properties;
use crate::store::record::{decode, Decoded, Verify};

/// `MessageSysFlag.TRANSACTION_PREPARED_TYPE`: the send is a half message.
pub const TRANSACTION_PREPARED: i32 = 0x4;
/// `commitOrRollback` values of END_TRANSACTION.
pub const COMMIT: i32 = 0x8;
pub const ROLLBACK: i32 = 0xC;
pub const UNKNOWN: i32 = 0;
/// The properties a transactional producer adds.
pub const TRAN_MSG: &str = "TRAN_MSG";
pub const PGROUP: &str = "PGROUP";

/// UNIQ_KEYs naming a sequence number: 16 hex digits that tell this run's keys apart from
/// anyone else's, then the sequence number in 16 hex digits (32 in all, as Java's are).
#[derive(Clone, Debug)]
pub struct TxKeys {
    prefix: String,
}

impl TxKeys {
    /// Keys of this process started at `now_ms`.
    pub fn new(now_ms: i64) -> TxKeys {
        let pid = std::process::id() as u16;
        TxKeys::with_prefix(format!(
            "{pid:04X}{:012X}",
            now_ms as u64 & 0xFFFF_FFFF_FFFF
        ))
    }

    fn with_prefix(prefix: String) -> TxKeys {
        debug_assert_eq!(prefix.len(), 16);
        TxKeys { prefix }
    }

    pub fn key(&self, seq: u64) -> String {
        format!("{}{seq:016X}", self.prefix)
    }

    /// The sequence number a key of these names; `None` for any other key.
    pub fn seq_of(&self, key: &str) -> Option<u64> {
        let digits = key.strip_prefix(self.prefix.as_str())?;
        if digits.len() != 16 {
            return None;
        }
        u64::from_str_radix(digits, 16).ok()
    }
}

/// The half send of bench message `seq` by producer group `group`.
pub fn half_send(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    group: &str,
    uniq_key: &str,
) -> RemotingCommand {
    let mut cmd = send_request_v2(topic, queue_id, body, Some("TagA"), None);
    cmd.ext_fields.insert("a".into(), group);
    cmd.put_ext("f", TRANSACTION_PREPARED);
    let mut props = cmd.opt_str("i").unwrap_or("").to_owned();
    properties::push_pair(&mut props, properties::UNIQ_KEY, uniq_key);
    properties::push_pair(&mut props, TRAN_MSG, "true");
    properties::push_pair(&mut props, PGROUP, group);
    cmd.put_ext("i", props);
    cmd
}

/// What END_TRANSACTION needs of a stored half, from its send answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HalfReceipt {
    /// The half's offset msg id (`msgId` of the answer).
    pub offset_msg_id: String,
    /// The half's queue offset: END_TRANSACTION's `tranStateTableOffset`.
    pub queue_offset: i64,
    /// The half's CommitLog offset, decoded from `offset_msg_id`.
    pub commit_log_offset: i64,
    /// UNIQ_KEY: END_TRANSACTION's `msgId` and `transactionId`.
    pub transaction_id: String,
}

impl HalfReceipt {
    /// Reads a successful half-send answer; `sent_key` is the UNIQ_KEY the send carried,
    /// used when the answer names no `transactionId` (as a stock client falls back to
    /// the message's own key).
    pub fn from_answer(answer: &RemotingCommand, sent_key: &str) -> Result<HalfReceipt, String> {
        let offset_msg_id = answer
            .opt_str("msgId")
            .ok_or("the half's send answer has no msgId")?;
        let commit_log_offset = commit_log_offset(offset_msg_id)
            .ok_or_else(|| format!("msgId {offset_msg_id:?} is no offset msg id"))?;
        let queue_offset = answer
            .opt_str("queueOffset")
            .and_then(|value| value.parse().ok())
            .ok_or("the half's send answer has no queueOffset")?;
        let transaction_id = answer
            .opt_str("transactionId")
            .filter(|id| !id.is_empty())
            .unwrap_or(sent_key);
        Ok(HalfReceipt {
            offset_msg_id: offset_msg_id.to_owned(),
            queue_offset,
            commit_log_offset,
            transaction_id: transaction_id.to_owned(),
        })
    }
}

/// The CommitLog offset an offset msg id names: its last 16 hex digits (an i64, whatever
/// the length of the store host before it: 32 digits for IPv4, 56 for IPv6).
pub fn commit_log_offset(offset_msg_id: &str) -> Option<i64> {
    if offset_msg_id.len() != 32 && offset_msg_id.len() != 56 {
        return None;
    }
    let digits = offset_msg_id.get(offset_msg_id.len() - 16..)?;
    // Parsed as u64 and cast: the field is an i64 written as its 8 big-endian bytes.
    u64::from_str_radix(digits, 16)
        .ok()
        .map(|offset| offset as i64)
}

/// What identifies the half an END_TRANSACTION decides.
#[derive(Clone, Copy, Debug)]
pub struct Decision<'a> {
    pub group: &'a str,
    pub topic: &'a str,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub transaction_id: &'a str,
    /// 8 commit, 12 rollback, 0 unknown.
    pub state: i32,
    pub from_check: bool,
}

/// END_TRANSACTION (37) of `decision`. Sent oneway by stock clients; whether it is is the
/// sender's choice ([`crate::client::Client::oneway`] sets the flag).
pub fn end_transaction(decision: &Decision<'_>) -> RemotingCommand {
    let mut fields = ExtFields::with_capacity(8);
    fields.insert("producerGroup".into(), decision.group);
    fields.insert(
        "tranStateTableOffset".into(),
        decision.queue_offset.to_compact_string(),
    );
    fields.insert(
        "commitLogOffset".into(),
        decision.commit_log_offset.to_compact_string(),
    );
    fields.insert(
        "commitOrRollback".into(),
        decision.state.to_compact_string(),
    );
    fields.insert(
        "fromTransactionCheck".into(),
        decision.from_check.to_compact_string(),
    );
    fields.insert("msgId".into(), decision.transaction_id);
    fields.insert("transactionId".into(), decision.transaction_id);
    fields.insert("topic".into(), decision.topic);
    RemotingCommand::request(codes::END_TRANSACTION, fields)
}

/// The commit of a half whose send answered `receipt`.
pub fn commit_of(group: &str, topic: &str, receipt: &HalfReceipt) -> RemotingCommand {
    end_transaction(&Decision {
        group,
        topic,
        queue_offset: receipt.queue_offset,
        commit_log_offset: receipt.commit_log_offset,
        transaction_id: &receipt.transaction_id,
        state: COMMIT,
        from_check: false,
    })
}

/// HEART_BEAT (34) of client `client_id` producing as `group`: what makes the broker send
/// that group's checks over this connection.
pub fn producer_heartbeat(client_id: &str, group: &str) -> RemotingCommand {
    let body = serde_json::json!({
        "clientID": client_id,
        "producerDataSet": [{"groupName": group}],
        "consumerDataSet": [],
    });
    RemotingCommand::request(codes::HEART_BEAT, ExtFields::new()).with_body(body.to_string())
}

/// A CHECK_TRANSACTION_STATE (39) as the bench reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub topic: String,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    /// UNIQ_KEY (`transactionId`, else `msgId`).
    pub transaction_id: String,
    /// What the body says, when it has a record.
    pub record: Option<CheckedRecord>,
}

/// The figures of a check's body (the half in stored format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedRecord {
    pub store_timestamp: i64,
    pub body_seq: Option<u64>,
    pub producer_group: Option<String>,
    pub topic: String,
}

impl Check {
    pub fn parse(request: &RemotingCommand) -> Result<Check, String> {
        let long = |field: &str| -> Result<i64, String> {
            request
                .opt_str(field)
                .and_then(|value| value.parse().ok())
                .ok_or_else(|| format!("the check has no number in {field}"))
        };
        let transaction_id = request
            .opt_str("transactionId")
            .filter(|id| !id.is_empty())
            .or_else(|| request.opt_str("msgId"))
            .ok_or("the check names no transactionId or msgId")?;
        Ok(Check {
            topic: request.opt_str("topic").unwrap_or("").to_owned(),
            queue_offset: long("tranStateTableOffset")?,
            commit_log_offset: long("commitLogOffset")?,
            transaction_id: transaction_id.to_owned(),
            record: checked_record(&request.body),
        })
    }

    /// The oneway answer a producer whose local transaction committed gives.
    pub fn commit(&self, group: &str) -> RemotingCommand {
        let group = self
            .record
            .as_ref()
            .and_then(|record| record.producer_group.as_deref())
            .unwrap_or(group);
        let topic = match &self.record {
            Some(record) if self.topic.is_empty() => record.topic.as_str(),
            _ => self.topic.as_str(),
        };
        end_transaction(&Decision {
            group,
            topic,
            queue_offset: self.queue_offset,
            commit_log_offset: self.commit_log_offset,
            transaction_id: &self.transaction_id,
            state: COMMIT,
            from_check: true,
        })
    }
}

/// Decodes a check's body. The broker sends it with a store size of 0 (Java's
/// `MessageDecoder.encode` leaves it so), which the store's decoder refuses: the body is
/// one record, so its length is put in the size field first.
fn checked_record(body: &[u8]) -> Option<CheckedRecord> {
    if body.len() < 8 {
        return None;
    }
    let mut record = body.to_vec();
    let len = i32::try_from(record.len()).ok()?;
    record[..4].copy_from_slice(&len.to_be_bytes());
    let Ok(Decoded::Record(view)) = decode(&record, Verify::Structure) else {
        return None;
    };
    Some(CheckedRecord {
        store_timestamp: view.store_timestamp,
        body_seq: super::lateness::body_seq(view.body),
        producer_group: properties::get(view.properties, PGROUP).map(str::to_owned),
        topic: view.topic.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{body_crc, encode_into, RecordInput};

    fn field<'a>(cmd: &'a RemotingCommand, name: &str) -> &'a str {
        cmd.opt_str(name)
            .unwrap_or_else(|| panic!("no {name} in {cmd:?}"))
    }

    #[test]
    fn keys_name_their_sequence_number_and_no_one_elses() {
        let keys = TxKeys::with_prefix("0A0B0C0D0E0F1011".into());
        let key = keys.key(0x0012_3456_789A);
        assert_eq!(key, "0A0B0C0D0E0F1011000000123456789A");
        assert_eq!(keys.seq_of(&key), Some(0x0012_3456_789A));
        assert_eq!(keys.seq_of("0A0B0C0D0E0F1011000000123456789"), None);
        assert_eq!(keys.seq_of("FFFF0C0D0E0F10110000001234567890"), None);
        assert_eq!(TxKeys::new(1_700_000_000_000).key(1).len(), 32);
    }

    #[test]
    fn a_half_send_is_prepared_for_its_group_with_its_key() {
        let cmd = half_send("TxT", 3, b"body", "PG", "KEY1");
        assert_eq!(cmd.code, codes::SEND_MESSAGE_V2);
        assert_eq!(field(&cmd, "a"), "PG");
        assert_eq!(field(&cmd, "b"), "TxT");
        assert_eq!(field(&cmd, "e"), "3");
        assert_eq!(field(&cmd, "f"), "4");
        let props = field(&cmd, "i");
        assert_eq!(properties::get(props, TRAN_MSG), Some("true"));
        assert_eq!(properties::get(props, PGROUP), Some("PG"));
        assert_eq!(properties::get(props, properties::UNIQ_KEY), Some("KEY1"));
        assert_eq!(properties::get(props, properties::TAGS), Some("TagA"));
        assert_eq!(&cmd.body[..], b"body");
    }

    #[test]
    fn the_commit_log_offset_is_the_last_16_hex_digits_of_the_msg_id() {
        // 127.0.0.1:10911, offset 0x1234.
        let v4 = "7F00000100002A9F0000000000001234";
        assert_eq!(commit_log_offset(v4), Some(0x1234));
        let v6 = format!("{}00002A9F00000001000000FF", "00".repeat(16));
        assert_eq!(commit_log_offset(&v6), Some(0x1_0000_00FF));
        // Shard bits high in the offset stay in the i64's bits.
        assert_eq!(
            commit_log_offset("7F00000100002A9F8000000000000001"),
            Some(i64::MIN + 1)
        );
        assert_eq!(commit_log_offset("7F00000100002A9F00000000000012"), None);
        assert_eq!(commit_log_offset("7F00000100002A9F000000000000123G"), None);
        assert_eq!(commit_log_offset(""), None);
        // The broker's own encoder agrees.
        let addr = "127.0.0.1:10911".parse().unwrap();
        let id = crate::broker::naming::ids::offset_msg_id(addr, 987_654_321);
        assert_eq!(commit_log_offset(&id), Some(987_654_321));
    }

    #[test]
    fn a_send_answer_gives_the_half_receipt() {
        let mut answer = RemotingCommand::request(0, ExtFields::new());
        answer.put_ext("msgId", "7F00000100002A9F00000000000000FF");
        answer.put_ext("queueOffset", 42);
        answer.put_ext("transactionId", "UNIQ");
        let receipt = HalfReceipt::from_answer(&answer, "SENT").unwrap();
        assert_eq!(
            receipt,
            HalfReceipt {
                offset_msg_id: "7F00000100002A9F00000000000000FF".into(),
                queue_offset: 42,
                commit_log_offset: 255,
                transaction_id: "UNIQ".into(),
            }
        );
        answer.ext_fields.remove("transactionId");
        let fallback = HalfReceipt::from_answer(&answer, "SENT").unwrap();
        assert_eq!(fallback.transaction_id, "SENT");
        answer.put_ext("msgId", "nonsense");
        assert!(HalfReceipt::from_answer(&answer, "SENT").is_err());
    }

    #[test]
    fn a_commit_names_the_half_by_its_offsets_and_key() {
        let receipt = HalfReceipt {
            offset_msg_id: "7F00000100002A9F00000000000000FF".into(),
            queue_offset: 42,
            commit_log_offset: 255,
            transaction_id: "UNIQ".into(),
        };
        let cmd = commit_of("PG", "TxT", &receipt);
        assert_eq!(cmd.code, 37);
        assert_eq!(field(&cmd, "producerGroup"), "PG");
        assert_eq!(field(&cmd, "tranStateTableOffset"), "42");
        assert_eq!(field(&cmd, "commitLogOffset"), "255");
        assert_eq!(field(&cmd, "commitOrRollback"), "8");
        assert_eq!(field(&cmd, "fromTransactionCheck"), "false");
        assert_eq!(field(&cmd, "msgId"), "UNIQ");
        assert_eq!(field(&cmd, "transactionId"), "UNIQ");
        assert_eq!(field(&cmd, "topic"), "TxT");
        assert!(!cmd.is_oneway(), "the sender chooses");
        let rollback = end_transaction(&Decision {
            state: ROLLBACK,
            ..Decision {
                group: "PG",
                topic: "TxT",
                queue_offset: 1,
                commit_log_offset: 2,
                transaction_id: "U",
                state: UNKNOWN,
                from_check: true,
            }
        });
        assert_eq!(field(&rollback, "commitOrRollback"), "12");
        assert_eq!(field(&rollback, "fromTransactionCheck"), "true");
    }

    #[test]
    fn a_heartbeat_registers_the_producer_group() {
        let cmd = producer_heartbeat("bench@1", "PG");
        assert_eq!(cmd.code, codes::HEART_BEAT);
        let body: serde_json::Value = serde_json::from_slice(&cmd.body).unwrap();
        assert_eq!(body["clientID"], "bench@1");
        assert_eq!(body["producerDataSet"][0]["groupName"], "PG");
    }

    /// The stored-format half a broker puts in a check's body, store size zeroed.
    fn stored_half(seq: u64, store_timestamp: i64) -> Vec<u8> {
        let body = bytes::Bytes::from(super::super::lateness::body(seq, 64));
        let input = RecordInput {
            topic: "TxT".into(),
            queue_id: 2,
            flag: 0,
            sys_flag: 0,
            born_timestamp: store_timestamp - 1,
            born_host: "127.0.0.1:5000".parse().unwrap(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: body_crc(&body),
            body,
            properties: properties::encode([(PGROUP, "PG-BODY"), (TRAN_MSG, "true")]),
        };
        let mut out = Vec::new();
        encode_into(&input, 7, 4096, store_timestamp, &mut out).unwrap();
        out[..4].copy_from_slice(&0i32.to_be_bytes());
        out
    }

    fn check_request(body: Vec<u8>) -> RemotingCommand {
        let mut cmd = RemotingCommand::request(codes::CHECK_TRANSACTION_STATE, ExtFields::new());
        cmd.put_ext("topic", "TxT");
        cmd.put_ext("tranStateTableOffset", 77);
        cmd.put_ext("commitLogOffset", 8192);
        cmd.put_ext("msgId", "UNIQ");
        cmd.put_ext("transactionId", "UNIQ");
        cmd.put_ext("offsetMsgId", "7F00000100002A9F0000000000002000");
        cmd.with_body(body)
    }

    #[test]
    fn a_check_is_read_with_its_stored_half_and_answered_with_a_commit() {
        let check = Check::parse(&check_request(stored_half(9, 1_700_000_000_123))).unwrap();
        assert_eq!(check.queue_offset, 77);
        assert_eq!(check.commit_log_offset, 8192);
        assert_eq!(check.transaction_id, "UNIQ");
        let record = check.record.clone().expect("the body decodes");
        assert_eq!(record.store_timestamp, 1_700_000_000_123);
        assert_eq!(record.body_seq, Some(9));
        assert_eq!(record.producer_group.as_deref(), Some("PG-BODY"));
        let answer = check.commit("PG-ARG");
        assert_eq!(answer.code, codes::END_TRANSACTION);
        assert_eq!(field(&answer, "producerGroup"), "PG-BODY", "PGROUP wins");
        assert_eq!(field(&answer, "tranStateTableOffset"), "77");
        assert_eq!(field(&answer, "commitLogOffset"), "8192");
        assert_eq!(field(&answer, "commitOrRollback"), "8");
        assert_eq!(field(&answer, "fromTransactionCheck"), "true");
        assert_eq!(field(&answer, "msgId"), "UNIQ");
        assert_eq!(field(&answer, "topic"), "TxT");
    }

    #[test]
    fn a_check_without_a_body_is_still_answered() {
        let check = Check::parse(&check_request(Vec::new())).unwrap();
        assert_eq!(check.record, None);
        assert_eq!(field(&check.commit("PG-ARG"), "producerGroup"), "PG-ARG");
        let garbage = Check::parse(&check_request(vec![0u8; 40])).unwrap();
        assert_eq!(garbage.record, None);
        let mut no_offset = check_request(Vec::new());
        no_offset.ext_fields.remove("commitLogOffset");
        assert!(Check::parse(&no_offset).is_err());
    }
}
