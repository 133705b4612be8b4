use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::controller::replicas::commands::Response;
use crate::controller::replicas::election::ElectTrigger;
use crate::controller::replicas::headers::{
    AlterSyncStateSetRequest, ApplyBrokerIdRequest, BrokerHeartbeatRequest, ElectMasterRequest,
    GetNextBrokerIdRequest, RegisterBrokerRequest,
};
use crate::controller::replicas::state::{BrokerEntry, GroupEpochs, GroupState};
use crate::controller::replicas::{headers, responses};

fn name() -> BrokerName {
    BrokerName {
        cluster_name: "c".into(),
        broker_name: "g".into(),
    }
}

fn group() -> GroupState {
    let mut group = GroupState::new(
        "c",
        GroupEpochs {
            master_epoch: 4,
            sync_state_set_epoch: 6,
        },
    );
    for (id, address) in [(1, "10.0.0.1:10911"), (2, "10.0.0.2:10911")] {
        let entry = BrokerEntry {
            address: address.into(),
            register_check_code: format!("{address};1"),
            heartbeat_timeout_ms: None,
        };
        group.brokers.insert(id, entry);
    }
    group.master = Some(2);
    group.sync_state_set = BTreeSet::from([1, 2]);
    group
}

#[test]
fn every_request_is_what_the_controller_parses() {
    let next = GetNextBrokerIdRequest::parse(&name().next_broker_id()).unwrap();
    assert_eq!(
        (next.cluster_name.as_str(), next.broker_name.as_str()),
        ("c", "g")
    );

    let apply = ApplyBrokerIdRequest::parse(&name().apply_broker_id(3, "10.0.0.3:1;77")).unwrap();
    assert_eq!(apply.applied_broker_id, 3);
    assert_eq!(apply.register_check_code, "10.0.0.3:1;77");
    assert_eq!(apply.address(), "10.0.0.3:1");

    let register =
        RegisterBrokerRequest::parse(&name().register(3, "10.0.0.3:1", 1_500, 5)).unwrap();
    assert_eq!(
        (
            register.broker_id,
            register.broker_address.as_str(),
            register.heartbeat_timeout_ms
        ),
        (3, "10.0.0.3:1", Some(1_500))
    );
    let mut zero = name().register(3, "10.0.0.3:1", 1_500, 5);
    zero.put_ext("heartbeatTimeoutMills", "0");
    let refused = RegisterBrokerRequest::parse(&zero).unwrap_err().to_string();
    assert!(refused.contains("heartbeatTimeoutMills"), "{refused}");

    let elect = ElectMasterRequest::parse(&name().elect(3, 5)).unwrap();
    assert_eq!(elect.trigger(), ElectTrigger::Broker(3));

    let info = name().replica_info();
    assert_eq!(headers::parse_get_replica_info(&info).unwrap(), "g");

    let set = BTreeSet::from([1, 3]);
    let alter =
        AlterSyncStateSetRequest::parse(&name().alter_sync_state_set(3, 7, &set, 9)).unwrap();
    assert_eq!((alter.master_broker_id, alter.master_epoch), (3, 7));
    assert_eq!(alter.new_sync_state_set.sync_state_set, set);
    assert_eq!(alter.new_sync_state_set.sync_state_set_epoch, 9);

    let facts = HeartbeatFacts {
        id: 3,
        address: "10.0.0.3:1".into(),
        epoch: 7,
        max_offset: 1 << 40,
        confirm_offset: 12,
        timeout_ms: 1500,
        election_priority: 2,
    };
    let beat = BrokerHeartbeatRequest::parse(&name().heartbeat(&facts)).unwrap();
    assert_eq!(beat.broker_id, Some(3));
    assert_eq!(beat.broker_addr, "10.0.0.3:1");
    assert_eq!(beat.epoch, Some(7));
    assert_eq!(beat.max_offset, Some(1 << 40));
    assert_eq!(beat.confirm_offset, Some(12));
    assert_eq!(beat.heartbeat_timeout_mills, Some(1500));
    assert_eq!(beat.election_priority, Some(2));
}

#[test]
fn the_view_is_read_from_every_answer_that_carries_it() {
    let group = group();
    let expected = GroupView {
        master: Some(2),
        master_address: Some("10.0.0.2:10911".into()),
        master_epoch: 4,
        sync_state_set: BTreeSet::from([1, 2]),
        sync_state_set_epoch: 6,
    };
    let ask = name().register(1, "10.0.0.1:10911", 1_500, 0);
    let registered = responses::register_broker(&ask, "c", "g", &group, true);
    assert_eq!(GroupView::read(&registered).unwrap(), expected);

    let dead = responses::register_broker(&ask, "c", "g", &group, false);
    let view = GroupView::read(&dead).unwrap();
    assert_eq!(
        (view.master, view.master_address),
        (None, None),
        "a dead master is left out"
    );
    assert_eq!(view.sync_state_set, expected.sync_state_set);

    let info = responses::replica_info(&name().replica_info(), &group);
    assert_eq!(GroupView::read(&info).unwrap(), expected);

    let notice = responses::notify_broker_role_changed(&group);
    assert_eq!(GroupView::read(&notice).unwrap(), expected);

    let applied = Response::MasterElected {
        cluster_name: "c".into(),
        master: Some(1),
        master_address: Some("10.0.0.1:10911".into()),
        master_epoch: 5,
        sync_state_set: BTreeSet::from([1]),
        sync_state_set_epoch: 7,
        members: BTreeMap::new(),
    };
    let elected = responses::elect_master(&name().elect(1, 0), "g", &applied);
    let view = GroupView::read_election(&elected).unwrap();
    assert_eq!(view.master, Some(1));
    assert_eq!((view.master_epoch, view.sync_state_set_epoch), (5, 7));
    assert_eq!(view.sync_state_set, BTreeSet::from([1]));
    let stays = responses::master_still_exists(&name().elect(1, 0), &group);
    assert_eq!(GroupView::read_election(&stays).unwrap(), expected);
}

#[test]
fn an_answer_without_its_body_is_an_error() {
    let answer = RemotingCommand::response_to(&name().replica_info(), 0, None);
    assert!(GroupView::read(&answer).is_err());
    assert!(GroupView::read_election(&answer).is_err());
}
