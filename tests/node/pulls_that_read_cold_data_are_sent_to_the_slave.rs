//! `slaveReadEnable` (reference part 2 §5.4): a pull whose records lie further behind the
//! log's end than `accessMessageInMemoryMaxRatio` of RAM is told to read from the group's
//! `whichBrokerWhenConsumeSlowly`; without `slaveReadEnable`, or for recent data, from the
//! master. A ratio of 0 makes every record but none "cold"; 100 makes none cold.

use crate::common;

use common::{node_config, run_local};
use ringmq::client::Client;
use ringmq::remoting::codes::response;

/// The `suggestWhichBrokerId` of a pull of the first message of a fresh node's topic, and
/// of a pull past its end.
fn suggestions(slave_read_enable: bool, in_memory_ratio: u8) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(dir.path());
    config.slave_read_enable = slave_read_enable;
    config.access_message_in_memory_max_ratio = in_memory_ratio;
    let node = ringmq::node::start(config).expect("node starts");
    let addr = node.addr();
    let answers = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for n in 0..3 {
            let sent = client
                .send_message("ColdTopic", 0, format!("m{n}").as_bytes(), None, None)
                .await
                .unwrap();
            assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
        }
        let found = client.pull("ColdTopic", 0, 0, 1, None).await.unwrap();
        assert_eq!(found.code, response::SUCCESS, "{found:?}");
        let nothing = client.pull("ColdTopic", 0, 3, 1, None).await.unwrap();
        assert_eq!(nothing.code, response::PULL_NOT_FOUND, "{nothing:?}");
        (
            found.ext_fields["suggestWhichBrokerId"].to_string(),
            nothing.ext_fields["suggestWhichBrokerId"].to_string(),
        )
    });
    node.shutdown().unwrap();
    answers
}

#[test]
fn a_pull_of_cold_data_is_sent_to_the_slave_only_with_slave_read_enable() {
    // Cold (a window of 0 bytes): the group's whichBrokerWhenConsumeSlowly, 1.
    assert_eq!(suggestions(true, 0), ("1".into(), "0".into()));
    // The same pull without slaveReadEnable: the master.
    assert_eq!(suggestions(false, 0), ("0".into(), "0".into()));
    // Recent data (a window of all of RAM): the master.
    assert_eq!(suggestions(true, 100), ("0".into(), "0".into()));
}
