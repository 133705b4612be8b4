use std::collections::BTreeSet;

use super::*;
use crate::controller::replicas::bodies::ElectMasterResponseBody;
use crate::controller::replicas::commands::{Command, Response};
use crate::controller::replicas::responses;
use crate::controller::replicas::state::ReplicasInfo;
use crate::remoting::codes::{request as request_code, response as code};
use crate::remoting::command::ExtFields;

fn request(code: i32, fields: &[(&str, &str)], body: &[u8]) -> RemotingCommand {
    let ext: ExtFields = fields.iter().map(|(k, v)| (*k, *v)).collect();
    RemotingCommand::request(code, ext).with_body(body.to_vec())
}

#[test]
fn alter_sync_state_set_reads_header_and_body() {
    let body = br#"{"syncStateSet":[2,1],"syncStateSetEpoch":4}"#;
    let fields = [
        ("brokerName", "g"),
        ("masterBrokerId", "1"),
        ("masterEpoch", "3"),
        ("invokeTime", "9"),
    ];
    let parsed = AlterSyncStateSetRequest::parse(&request(1001, &fields, body)).unwrap();
    assert_eq!(parsed.master_broker_id, 1);
    assert_eq!(parsed.master_epoch, 3);
    assert_eq!(
        parsed.new_sync_state_set.sync_state_set,
        BTreeSet::from([1, 2])
    );
    assert_eq!(parsed.new_sync_state_set.sync_state_set_epoch, 4);
}

#[test]
fn missing_and_bad_fields_are_named() {
    let fields = [("brokerName", "g"), ("masterEpoch", "3")];
    let error = AlterSyncStateSetRequest::parse(&request(1001, &fields, b"")).unwrap_err();
    assert_eq!(
        error,
        RequestError::Field(FieldError::Missing("masterBrokerId".into()))
    );
    let fields = [
        ("brokerName", "g"),
        ("masterBrokerId", "x"),
        ("masterEpoch", "3"),
    ];
    let error = AlterSyncStateSetRequest::parse(&request(1001, &fields, b"")).unwrap_err();
    assert!(error.to_string().contains("`masterBrokerId`"), "{error}");
    let fields = [
        ("brokerName", "g"),
        ("masterBrokerId", "1"),
        ("masterEpoch", "3"),
    ];
    let error = AlterSyncStateSetRequest::parse(&request(1001, &fields, b"{\"syncStateSet\":"))
        .unwrap_err();
    assert!(matches!(error, RequestError::Body(_)), "{error}");
    let error = AlterSyncStateSetRequest::parse(&request(1001, &fields, b"")).unwrap_err();
    assert!(error.to_string().contains("empty"), "{error}");
    let fields = [("clusterName", "c"), ("brokerName", "g"), ("brokerId", "1")];
    let error = RegisterBrokerRequest::parse(&request(1003, &fields, b"")).unwrap_err();
    assert_eq!(
        error,
        RequestError::Field(FieldError::Missing("brokerAddress".into()))
    );
    let fields = [("brokerName", "g"), ("brokerControllerIdsToClean", "1;x")];
    let error = CleanBrokerDataRequest::parse(&request(1011, &fields, b"")).unwrap_err();
    assert!(
        error.to_string().contains("brokerControllerIdsToClean"),
        "{error}"
    );
    let fields = [
        ("clusterName", "c"),
        ("brokerAddr", "a"),
        ("brokerName", "g"),
        ("epoch", "1.5"),
    ];
    let error = BrokerHeartbeatRequest::parse(&request(904, &fields, b"")).unwrap_err();
    assert!(error.to_string().contains("`epoch`"), "{error}");
}

#[test]
fn elect_master_defaults_and_triggers() {
    let parsed = ElectMasterRequest::parse(&request(1002, &[("brokerName", "g")], b"")).unwrap();
    assert_eq!(parsed.trigger(), ElectTrigger::Controller);
    let fields = [
        ("clusterName", "c"),
        ("brokerName", "g"),
        ("brokerId", "2"),
        ("designateElect", "false"),
    ];
    let parsed = ElectMasterRequest::parse(&request(1002, &fields, b"")).unwrap();
    assert_eq!(parsed.trigger(), ElectTrigger::Broker(2));
    let fields = [
        ("brokerName", "g"),
        ("brokerId", "3"),
        ("designateElect", "true"),
    ];
    let parsed = ElectMasterRequest::parse(&request(1002, &fields, b"")).unwrap();
    assert_eq!(parsed.trigger(), ElectTrigger::Designated(3));
}

#[test]
fn the_other_requests_parse() {
    let fields = [
        ("clusterName", "c"),
        ("brokerName", "g"),
        ("appliedBrokerId", "2"),
        ("registerCheckCode", "10.0.0.2:10911;1700"),
    ];
    let apply = ApplyBrokerIdRequest::parse(&request(1013, &fields, b"")).unwrap();
    assert_eq!(
        (apply.applied_broker_id, apply.address()),
        (2, "10.0.0.2:10911")
    );
    let fields = [
        ("brokerName", "g"),
        ("brokerControllerIdsToClean", "1; 3"),
        ("isCleanLivingBroker", "true"),
    ];
    let clean = CleanBrokerDataRequest::parse(&request(1011, &fields, b"")).unwrap();
    assert_eq!(clean.broker_ids, Some(BTreeSet::from([1, 3])));
    assert!(clean.is_clean_living_broker && clean.cluster_name.is_none());
    let names = parse_get_sync_state_data(&request(1006, &[], br#"["g","h"]"#)).unwrap();
    assert_eq!(names, ["g", "h"]);
    let fields = [("clusterName", "c"), ("brokerName", "g")];
    assert_eq!(
        GetNextBrokerIdRequest::parse(&request(1012, &fields, b""))
            .unwrap()
            .broker_name,
        "g"
    );
    assert_eq!(
        parse_get_replica_info(&request(1004, &fields, b"")).unwrap(),
        "g"
    );
    let fields = [
        ("clusterName", "c"),
        ("brokerAddr", "a"),
        ("brokerName", "g"),
        ("brokerId", "1"),
        ("maxOffset", "77"),
    ];
    let beat = BrokerHeartbeatRequest::parse(&request(904, &fields, b"")).unwrap();
    assert_eq!(
        (beat.broker_id, beat.max_offset, beat.epoch),
        (Some(1), Some(77), None)
    );
}

fn elected_state() -> ReplicasInfo {
    let mut state = ReplicasInfo::new();
    for id in 1..=2 {
        let command = Command::ApplyBrokerId {
            cluster_name: "c".into(),
            broker_name: "g".into(),
            broker_id: id,
            address: format!("a{id}"),
            register_check_code: format!("a{id};0"),
        };
        state.apply_command(&command);
    }
    state
}

#[test]
fn elect_and_notify_responses_carry_rocketmq_fields() {
    let mut state = elected_state();
    let elect = Command::ElectMaster {
        broker_name: "g".into(),
        new_master: Some(2),
        unclean: false,
        expected_master_epoch: 0,
        expected_sync_state_set_epoch: 0,
    };
    let applied = state.apply_command(&elect);
    let req = request(1002, &[("brokerName", "g")], b"");
    let answer = responses::elect_master(&req, "g", &applied);
    assert_eq!(answer.code, code::SUCCESS);
    assert_eq!(answer.get_i64("masterBrokerId"), Ok(2));
    assert_eq!(answer.get_str("masterAddress"), Ok("a2"));
    assert_eq!(answer.get_i32("masterEpoch"), Ok(1));
    assert_eq!(answer.get_i32("syncStateSetEpoch"), Ok(1));
    let body = ElectMasterResponseBody::decode(&answer.body).unwrap();
    assert_eq!(body.sync_state_set, BTreeSet::from([2]));
    assert_eq!(body.broker_member_group.unwrap().broker_addrs.len(), 2);
    let notice = responses::notify_broker_role_changed(state.group("g").unwrap());
    assert_eq!(notice.code, request_code::NOTIFY_BROKER_ROLE_CHANGED);
    assert!(notice.is_oneway());
    let parsed = RoleChangedNotice::parse(&notice).unwrap();
    assert_eq!((parsed.master_broker_id, parsed.master_epoch), (Some(2), 1));
    let refused = responses::elect_master(&req, "g", &Response::refused(2000, "fenced"));
    assert_eq!(
        (refused.code, refused.remark.as_deref()),
        (2000, Some("fenced"))
    );
}

#[test]
fn fastjson_integer_keys_read_in_member_groups() {
    let body = br#"{"brokerMemberGroup":{"brokerAddrs":{1:"a1",2:"a2"},"brokerName":"g","cluster":"c"},"syncStateSet":[1]}"#;
    let parsed = ElectMasterResponseBody::decode(body).unwrap();
    assert_eq!(parsed.broker_member_group.unwrap().broker_addrs[&2], "a2");
    let written = String::from_utf8(
        crate::controller::replicas::bodies::SyncStateSetBody {
            sync_state_set: BTreeSet::from([1, 2]),
            sync_state_set_epoch: 3,
        }
        .encode(),
    )
    .unwrap();
    assert_eq!(written, r#"{"syncStateSet":[1,2],"syncStateSetEpoch":3}"#);
}
