//! Well-formed requests with hostile contents: each is refused with a clear code and the
//! node keeps serving everyone else.
//!
//! - A physical offset that points inside a stored body at bytes forged to look like a
//!   record (magic, size, own offset, CRC) is no record: VIEW_MESSAGE_BY_ID finds nothing
//!   and CONSUMER_SEND_MSG_BACK writes nothing.

mod common;

use std::time::Duration;

use common::raw::Raw;
use common::{command, message};
use ringmq::broker::ids::decode_offset_msg_id;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, send_request_v2};
use ringmq::store::record;

/// Sends `body` to `topic` queue 0; its physical offset.
fn send(raw: &mut Raw, topic: &str, body: &[u8]) -> u64 {
    let answer = raw.call(send_request_v2(topic, 0, body, None, None));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    decode_offset_msg_id(&answer.ext_fields["msgId"]).unwrap().1
}

fn view(raw: &mut Raw, phys: u64) -> ringmq::remoting::RemotingCommand {
    raw.call(command(
        request::VIEW_MESSAGE_BY_ID,
        &[("offset", &phys.to_string())],
    ))
}

/// A record claiming to be `topic` queue 0 offset 0 at `phys`, valid in every byte.
fn forged_record(topic: &str, phys: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let input = message(topic, 0, b"forged", Some("Forged"), None);
    record::encode_into(&input, 0, phys as i64, 1_700_000_000_000, &mut out).unwrap();
    out
}

#[test]
fn an_offset_inside_a_body_that_mimics_a_record_is_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    let topic = "Carrier";
    // A carrier of the forged record's length tells where the next one (same length,
    // same headers) lands, and where its body starts inside it.
    let len = forged_record(topic, 0).len();
    let first = send(&mut raw, topic, &vec![b'x'; len]);
    let first_view = view(&mut raw, first);
    assert_eq!(first_view.code, response::SUCCESS, "{first_view:?}");
    let first_bytes = first_view.body.to_vec();
    let body_at = first_bytes
        .windows(len)
        .position(|w| w.iter().all(|b| *b == b'x'))
        .expect("the carrier's body inside its record");
    let second_at = first + first_bytes.len() as u64;
    let forged_at = second_at + body_at as u64;
    let second = send(&mut raw, topic, &forged_record(topic, forged_at));
    assert_eq!(second, second_at, "the carrier landed where predicted");

    let viewed = view(&mut raw, forged_at);
    assert_eq!(viewed.code, response::SYSTEM_ERROR, "{viewed:?}");
    let sent_back = raw.call(command(
        request::CONSUMER_SEND_MSG_BACK,
        &[
            ("offset", &forged_at.to_string()),
            ("group", "forger"),
            ("delayLevel", "-1"),
            ("originTopic", topic),
        ],
    ));
    assert_eq!(sent_back.code, response::SYSTEM_ERROR, "{sent_back:?}");
    assert!(
        sent_back
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("look message by offset failed"),
        "{sent_back:?}"
    );
    // Nothing went to the dead-letter queue, and the real records are still found.
    let mut pull = pull_request("%DLQ%forger", 0, 0, 32, Some(Duration::ZERO), None);
    pull.ext_fields.insert("consumerGroup".into(), "forger");
    let dlq = raw.call(pull);
    assert_ne!(dlq.code, response::SUCCESS, "{dlq:?}");
    assert_eq!(view(&mut raw, second).code, response::SUCCESS);
    node.shutdown().unwrap();
}
