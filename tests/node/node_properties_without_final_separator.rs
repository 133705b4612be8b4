//! A send whose properties string lacks the final `\x02` (`TAGS\x01tagA`) is normalised
//! before the node appends UNIQ_KEY and CLUSTER: the stored message has TAGS=tagA, the
//! UNIQ_KEY the send answered, the cluster, and a `tagA` subscriber gets it.

use crate::common;

use common::{pull_records, run_local, start_node};
use ringmq::client::{pull_request, send_request_v2, Client};
use ringmq::remoting::codes::response;
use ringmq::store::properties;

#[test]
fn a_message_whose_properties_lack_the_final_separator_keeps_its_tag_and_gets_a_uniq_key() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for (queue_id, props) in [(0, "TAGS\u{1}tagA"), (1, "KEYS\u{1}k1\u{2}TAGS\u{1}tagA")] {
            let mut send = send_request_v2("Unterminated", queue_id, b"hello", None, None);
            send.put_ext("i", props);
            let answer = client.request(send).await.unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            let uniq_key = answer.ext_fields.get("transactionId").unwrap().to_string();

            let pull = pull_request("Unterminated", queue_id, 0, 32, None, Some("tagA"));
            let answer = client.request(pull).await.unwrap();
            assert_eq!(
                answer.code,
                response::SUCCESS,
                "a tagA subscriber: {answer:?}"
            );
            let body = answer.body.clone();
            let records = pull_records(&body);
            assert_eq!(records.len(), 1);
            let stored = records[0].properties;
            assert_eq!(
                properties::get(stored, properties::TAGS),
                Some("tagA"),
                "{stored:?}"
            );
            assert_eq!(
                properties::get(stored, properties::UNIQ_KEY),
                Some(uniq_key.as_str()),
                "{stored:?}"
            );
            assert!(properties::get(stored, "CLUSTER").is_some(), "{stored:?}");
            if queue_id == 1 {
                assert_eq!(properties::get(stored, properties::KEYS), Some("k1"));
            }
        }
    });
    node.shutdown().unwrap();
}
