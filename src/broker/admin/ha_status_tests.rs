use super::*;
use crate::metrics::{Lag, PeerFigures};

fn peer(addr: &str, slave_id: u64, ack: u64, lag: u64, in_sync: bool) -> PeerFigures {
    PeerFigures {
        addr: addr.into(),
        slave_id: Some(slave_id),
        streaming: true,
        from: 0,
        ack,
        lag: Lag {
            bytes: lag,
            millis: Some(lag / 10),
        },
        in_sync,
        bytes_per_second: 2048,
    }
}

fn master_shard(shard: u8, written: u64, peers: Vec<PeerFigures>) -> ShardPart {
    let figures = ReplicationFigures {
        peers,
        written,
        ..ReplicationFigures::default()
    };
    ShardPart::of(shard, &figures)
}

#[test]
fn a_master_lists_one_connection_per_slave_per_shard_in_java_shape() {
    let shard_1 = 1u64 << 56;
    let parts = [
        master_shard(0, 1_000, vec![peer("10.0.0.2:40001", 1, 400, 600, true)]),
        master_shard(
            1,
            shard_1 + 50,
            vec![peer("10.0.0.2:40002", 1, shard_1 + 50, 0, true)],
        ),
    ];
    let info = runtime_info(BrokerRole::SyncMaster, &parts);
    assert_eq!(info["master"], true);
    assert_eq!(info["masterCommitLogMaxOffset"], shard_1 + 50);
    assert_eq!(
        info["inSyncSlaveNums"], 1,
        "one slave, in sync on both shards"
    );
    assert_eq!(info["brokerRole"], "SYNC_MASTER");
    assert_eq!(info["shardCount"], 2);
    let connections = info["haConnectionInfo"].as_array().unwrap();
    assert_eq!(connections.len(), 2);
    let first = &connections[0];
    for (key, value) in [
        ("addr", serde_json::json!("10.0.0.2:40001")),
        ("slaveAckOffset", serde_json::json!(400)),
        ("diff", serde_json::json!(600)),
        ("inSync", serde_json::json!(true)),
        ("transferredByteInSecond", serde_json::json!(2048)),
        ("transferFromWhere", serde_json::json!(0)),
        ("shard", serde_json::json!(0)),
        ("slaveBrokerId", serde_json::json!(1)),
        ("lagMillis", serde_json::json!(60)),
    ] {
        assert_eq!(first[key], value, "{key} in {first}");
    }
    assert_eq!(connections[1]["shard"], 1);
    // A master's client info is Java's default: zeros, no master address.
    let client = &info["haClientRuntimeInfo"];
    assert_eq!(client["maxOffset"], 0);
    assert!(client.get("masterAddr").is_none());
    assert!(client.get("shards").is_none());
}

#[test]
fn a_slave_streaming_on_fewer_shards_than_the_master_has_or_behind_is_not_in_sync() {
    let one_shard = [
        master_shard(0, 100, vec![peer("a:1", 1, 100, 0, true)]),
        master_shard(1, 100, vec![]),
    ];
    assert_eq!(
        runtime_info(BrokerRole::AsyncMaster, &one_shard)["inSyncSlaveNums"],
        0
    );
    let behind = [master_shard(
        0,
        100,
        vec![peer("a:1", 1, 100, 0, true), peer("b:1", 2, 10, 90, false)],
    )];
    assert_eq!(
        runtime_info(BrokerRole::AsyncMaster, &behind)["inSyncSlaveNums"],
        1
    );
}

#[test]
fn a_stream_still_in_its_handshake_is_not_listed() {
    let mut waiting = peer("a:1", 1, 0, 100, false);
    waiting.streaming = false;
    let parts = [master_shard(0, 100, vec![waiting])];
    let info = runtime_info(BrokerRole::AsyncMaster, &parts);
    assert_eq!(info["haConnectionInfo"], serde_json::json!([]));
}

fn slave_shard(shard: u8, connected: bool, up: i64, appended: i64) -> ShardPart {
    let figures = ReplicationFigures {
        slave: true,
        connected,
        written: (u64::from(shard) << 56) + 70,
        bytes_per_second: 100,
        master: Some("10.0.0.1:10912".into()),
        last_up_ms: up,
        last_append_ms: appended,
        ..ReplicationFigures::default()
    };
    ShardPart::of(shard, &figures)
}

#[test]
fn a_slave_answers_its_client_info_over_every_shard() {
    let parts = [
        slave_shard(0, true, 9_000, 8_000),
        slave_shard(1, false, 5_000, 8_500),
    ];
    let info = runtime_info(BrokerRole::Slave, &parts);
    assert_eq!(info["master"], false);
    assert_eq!(info["masterCommitLogMaxOffset"], 0);
    assert_eq!(info["haConnectionInfo"], serde_json::json!([]));
    assert_eq!(info["brokerRole"], "SLAVE");
    let client = &info["haClientRuntimeInfo"];
    assert_eq!(client["masterAddr"], "10.0.0.1:10912");
    assert_eq!(client["maxOffset"], (1u64 << 56) + 70);
    assert_eq!(client["transferredByteInSecond"], 200);
    assert_eq!(
        client["lastReadTimestamp"], 5_000,
        "the stalest shard shows"
    );
    assert_eq!(client["lastWriteTimestamp"], 8_500, "the latest append");
    assert_eq!(client["masterFlushOffset"], 0);
    let shards = client["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2);
    assert_eq!(shards[1]["connected"], false);
}

#[test]
fn a_part_travels_between_shards_unchanged() {
    let part = master_shard(3, 77, vec![peer("a:1", 1, 7, 70, false)]);
    let answer = RemotingCommand::response_to(
        &RemotingCommand::request(
            crate::remoting::codes::request::GET_BROKER_HA_STATUS,
            Default::default(),
        ),
        response::SUCCESS,
        None,
    )
    .with_body(serde_json::to_vec(&part).unwrap());
    assert_eq!(read_part(3, &answer).unwrap(), part);
}

#[test]
fn a_shard_answer_that_is_refused_garbage_or_another_shards_is_an_error() {
    let request = RemotingCommand::request(
        crate::remoting::codes::request::GET_BROKER_HA_STATUS,
        Default::default(),
    );
    let refused = RemotingCommand::response_to(&request, response::SYSTEM_ERROR, Some("x".into()));
    let why = read_part(1, &refused).unwrap_err().to_string();
    assert!(why.contains("shard 1 answered with code 1: x"), "{why}");
    for body in [
        &b"{\"shard\":1"[..],
        b"",
        b"[]",
        b"{\"shard\":-1,\"written\":0}",
    ] {
        let garbage = RemotingCommand::response_to(&request, response::SUCCESS, None)
            .with_body(body.to_vec());
        let why = read_part(1, &garbage).unwrap_err().to_string();
        assert!(why.contains("shard 1's part does not read"), "{why}");
    }
    let other = master_shard(2, 0, Vec::new());
    let forged = RemotingCommand::response_to(&request, response::SUCCESS, None)
        .with_body(serde_json::to_vec(&other).unwrap());
    let why = read_part(1, &forged).unwrap_err().to_string();
    assert!(why.contains("shard 1 answered for shard 2"), "{why}");
}
