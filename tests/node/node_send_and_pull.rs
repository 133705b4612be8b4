//! A node in-process: messages sent with V1 and V2 headers come back from a pull (and a
//! LITE_PULL_MESSAGE) with the
//! same bodies and queue offsets; each send's msgId decodes to the store host and the
//! physical offset the pulled record carries; a tag subscription filters; the offset
//! queries (GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME) answer.

use crate::common;

use common::{pull_records as records, run_local, start_node};
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::client::{pull_request, queue_request, send_request_v1, send_request_v2, Client};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::RemotingCommand;
use ringmq::store::properties;

fn ext<'a>(cmd: &'a RemotingCommand, field: &str) -> &'a str {
    cmd.ext_fields
        .get(field)
        .unwrap_or_else(|| panic!("no {field} in {cmd:?}"))
}

#[test]
fn sent_messages_come_back_from_pull_with_their_ids_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let sent = send_six_with_both_headers(&client).await;
        let store_timestamps = pull_all_six(&client, addr, &sent).await;
        pull_from_the_middle_and_by_tag(&client).await;
        pull_outside_the_queue(&client).await;
        query_offsets(&client, &store_timestamps).await;
    });
    node.shutdown().unwrap();
}

/// Six sends to TopicTest queue 1, three with V1 headers and three with V2; each send's
/// (body, msgId, transactionId).
async fn send_six_with_both_headers(client: &Client) -> Vec<(String, String, String)> {
    let mut sent = Vec::new();
    for i in 0..6 {
        let body = format!("message {i}");
        let tags = if i % 2 == 0 { "TagA" } else { "TagB" };
        let cmd = if i < 3 {
            send_request_v1("TopicTest", 1, body.as_bytes(), Some(tags), Some("k1 k2"))
        } else {
            send_request_v2("TopicTest", 1, body.as_bytes(), Some(tags), None)
        };
        assert_eq!(
            cmd.code,
            if i < 3 {
                request::SEND_MESSAGE
            } else {
                request::SEND_MESSAGE_V2
            }
        );
        let answer = client.request(cmd).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert!(answer.is_response());
        assert_eq!(ext(&answer, "queueId"), "1");
        assert_eq!(ext(&answer, "queueOffset"), i.to_string());
        assert!(!ext(&answer, "transactionId").is_empty());
        let msg_id = ext(&answer, "msgId").to_string();
        assert_eq!(msg_id.len(), 32);
        assert!(msg_id
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
        sent.push((body, msg_id, ext(&answer, "transactionId").to_string()));
    }
    sent
}

/// The six come back whole from one pull; their store timestamps, in offset order.
async fn pull_all_six(
    client: &Client,
    addr: std::net::SocketAddr,
    sent: &[(String, String, String)],
) -> Vec<i64> {
    let answer = client.pull("TopicTest", 1, 0, 32, None).await.unwrap();
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(ext(&answer, "nextBeginOffset"), "6");
    assert_eq!(ext(&answer, "minOffset"), "0");
    assert_eq!(ext(&answer, "maxOffset"), "6");
    assert_eq!(ext(&answer, "suggestWhichBrokerId"), "0");
    let pulled = records(&answer.body);
    assert_eq!(pulled.len(), 6);
    for (i, (record, (body, msg_id, uniq_key))) in pulled.iter().zip(sent).enumerate() {
        assert_eq!(record.body, body.as_bytes());
        assert_eq!(record.queue_offset, i as i64);
        assert_eq!(record.topic, "TopicTest");
        assert_eq!(record.store_host, addr);
        let (host, phys) = decode_offset_msg_id(msg_id).expect("an offsetMsgId");
        assert_eq!(host, addr);
        assert_eq!(phys, record.phys_offset as u64);
        assert_eq!(
            properties::get(record.properties, properties::UNIQ_KEY),
            Some(uniq_key.as_str())
        );
        assert_eq!(record.born_host.ip(), addr.ip());
    }
    pulled.iter().map(|r| r.store_timestamp).collect()
}

async fn pull_from_the_middle_and_by_tag(client: &Client) {
    // From the middle, a limited count.
    let answer = client.pull("TopicTest", 1, 2, 3, None).await.unwrap();
    let offsets: Vec<i64> = records(&answer.body)
        .iter()
        .map(|r| r.queue_offset)
        .collect();
    assert_eq!(offsets, [2, 3, 4]);
    assert_eq!(ext(&answer, "nextBeginOffset"), "5");

    // A tag subscription keeps only the matching messages.
    let answer = client
        .request(pull_request("TopicTest", 1, 0, 32, None, Some("TagB")))
        .await
        .unwrap();
    assert_eq!(answer.code, response::SUCCESS);
    let bodies: Vec<&[u8]> = records(&answer.body).iter().map(|r| r.body).collect();
    assert_eq!(bodies, [&b"message 1"[..], b"message 3", b"message 5"]);
    let answer = client
        .request(pull_request(
            "TopicTest",
            1,
            0,
            32,
            None,
            Some("TagA || TagB"),
        ))
        .await
        .unwrap();
    assert_eq!(records(&answer.body).len(), 6);
    let answer = client
        .request(pull_request("TopicTest", 1, 0, 32, None, Some("TagC")))
        .await
        .unwrap();
    assert_eq!(answer.code, response::PULL_RETRY_IMMEDIATELY, "{answer:?}");
    assert_eq!(ext(&answer, "nextBeginOffset"), "6");
}

async fn pull_outside_the_queue(client: &Client) {
    // Past the end, before the start of an empty queue, too far.
    let answer = client.pull("TopicTest", 1, 6, 32, None).await.unwrap();
    assert_eq!(answer.code, response::PULL_NOT_FOUND);
    assert_eq!(ext(&answer, "nextBeginOffset"), "6");
    let answer = client.pull("TopicTest", 1, 9, 32, None).await.unwrap();
    assert_eq!(answer.code, response::PULL_OFFSET_MOVED);
    assert_eq!(ext(&answer, "nextBeginOffset"), "6");
    let answer = client.pull("TopicTest", 2, 0, 32, None).await.unwrap();
    assert_eq!(answer.code, response::PULL_NOT_FOUND);
    assert_eq!(ext(&answer, "maxOffset"), "0");
}

/// GET_MAX/MIN_OFFSET, GET_EARLIEST_MSG_STORETIME and SEARCH_OFFSET_BY_TIMESTAMP.
async fn query_offsets(client: &Client, store_timestamps: &[i64]) {
    // Offset queries.
    let answer = client
        .request(queue_request(request::GET_MAX_OFFSET, "TopicTest", 1))
        .await
        .unwrap();
    assert_eq!(
        (answer.code, ext(&answer, "offset")),
        (response::SUCCESS, "6")
    );
    let answer = client
        .request(queue_request(request::GET_MIN_OFFSET, "TopicTest", 1))
        .await
        .unwrap();
    assert_eq!(
        (answer.code, ext(&answer, "offset")),
        (response::SUCCESS, "0")
    );
    let answer = client
        .request(queue_request(
            request::GET_EARLIEST_MSG_STORETIME,
            "TopicTest",
            1,
        ))
        .await
        .unwrap();
    assert_eq!(answer.code, response::SUCCESS);
    let earliest: i64 = ext(&answer, "timestamp").parse().unwrap();
    assert_eq!(earliest, store_timestamps[0]);
    let answer = client
        .request(queue_request(
            request::GET_EARLIEST_MSG_STORETIME,
            "TopicTest",
            3,
        ))
        .await
        .unwrap();
    assert_eq!(ext(&answer, "timestamp"), "-1");

    let search = |timestamp: i64| {
        let mut cmd = queue_request(request::SEARCH_OFFSET_BY_TIMESTAMP, "TopicTest", 1);
        cmd.put_ext("timestamp", timestamp);
        cmd
    };
    let answer = client.request(search(0)).await.unwrap();
    assert_eq!(
        (answer.code, ext(&answer, "offset")),
        (response::SUCCESS, "0")
    );
    let answer = client.request(search(store_timestamps[4])).await.unwrap();
    let found: u64 = ext(&answer, "offset").parse().unwrap();
    // The first message stored at or after that time: offset 4, or earlier ones that
    // share its millisecond.
    assert!(found <= 4 && store_timestamps[found as usize] == store_timestamps[4]);
    let answer = client.request(search(i64::MAX)).await.unwrap();
    assert_eq!(ext(&answer, "offset"), "6");
}

#[test]
fn a_batch_is_stored_in_order_with_consecutive_offsets() {
    use ringmq::remoting::{encode_batch, BatchItem};
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        client
            .send_message("Batched", 0, b"before", None, None)
            .await
            .unwrap();
        let items: Vec<BatchItem> = (0..3)
            .map(|i| BatchItem {
                flag: 0,
                body: format!("batch {i}").into_bytes().into(),
                properties: properties::encode([(properties::TAGS, "T")]),
            })
            .collect();
        let mut body = Vec::new();
        encode_batch(&items, &mut body).unwrap();
        let mut cmd = send_request_v2("Batched", 0, &[], None, None);
        cmd.code = request::SEND_BATCH_MESSAGE;
        cmd.put_ext("m", true);
        let answer = client.request(cmd.with_body(body)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert_eq!(ext(&answer, "queueOffset"), "1");
        let ids: Vec<&str> = ext(&answer, "msgId").split(',').collect();
        assert_eq!(ids.len(), 3);
        let pulled = client.pull("Batched", 0, 1, 32, None).await.unwrap();
        let records = records(&pulled.body);
        assert_eq!(records.len(), 3);
        for (i, (record, id)) in records.iter().zip(&ids).enumerate() {
            assert_eq!(record.body, format!("batch {i}").as_bytes());
            assert_eq!(
                decode_offset_msg_id(id).unwrap().1,
                record.phys_offset as u64
            );
        }
    });
    node.shutdown().unwrap();
}

#[test]
fn a_lite_pull_returns_the_same_records_as_a_pull() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for i in 0..5 {
            let body = format!("lite {i}");
            let answer = client
                .request(send_request_v1(
                    "LiteTopic",
                    2,
                    body.as_bytes(),
                    Some("TagA"),
                    None,
                ))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        let mut lite = pull_request("LiteTopic", 2, 1, 32, None, None);
        lite.code = request::LITE_PULL_MESSAGE;
        let lite = client.request(lite).await.unwrap();
        assert_eq!(lite.code, response::SUCCESS, "{lite:?}");
        let pulled = client.pull("LiteTopic", 2, 1, 32, None).await.unwrap();
        assert_eq!(lite.body, pulled.body, "the same stored records");
        let bodies: Vec<Vec<u8>> = records(&lite.body)
            .iter()
            .map(|r| r.body.to_vec())
            .collect();
        let expected: Vec<Vec<u8>> = (1..5).map(|i| format!("lite {i}").into_bytes()).collect();
        assert_eq!(bodies, expected);
        assert_eq!(ext(&lite, "nextBeginOffset"), "5");
    });
    node.shutdown().unwrap();
}
