use std::collections::BTreeSet;

use super::*;
use crate::controller::replicas::commands::Command;

fn registered(ids: &[BrokerId]) -> ReplicasInfo {
    let mut state = ReplicasInfo::new();
    for &id in ids {
        let command = Command::ApplyBrokerId {
            cluster_name: "c".into(),
            broker_name: "g".into(),
            broker_id: id,
            address: format!("a{id}"),
            register_check_code: format!("a{id};0"),
        };
        assert_eq!(state.apply_command(&command).code(), 0);
    }
    state
}

fn beat(id: Option<BrokerId>, epoch: i32, max_offset: i64) -> BrokerHeartbeatRequest {
    BrokerHeartbeatRequest {
        cluster_name: "c".into(),
        broker_addr: "a".into(),
        broker_name: "g".into(),
        broker_id: id,
        epoch: Some(epoch),
        max_offset: Some(max_offset),
        confirm_offset: Some(max_offset),
        heartbeat_timeout_mills: None,
        election_priority: None,
    }
}

fn key(id: BrokerId) -> BrokerKey {
    BrokerKey {
        cluster_name: "c".into(),
        broker_name: "g".into(),
        broker_id: id,
    }
}

#[test]
fn a_heartbeat_from_an_unregistered_broker_is_refused_and_not_kept() {
    let state = registered(&[1]);
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    let status = table.record(&state, &beat(Some(2), 1, 0), 0);
    assert_eq!(status, HeartbeatStatus::NotRegistered(key(2)));
    assert_eq!(status.code(), code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED);
    let mut other_cluster = beat(Some(1), 1, 0);
    other_cluster.cluster_name = "elsewhere".into();
    assert!(matches!(
        table.record(&state, &other_cluster, 0),
        HeartbeatStatus::NotRegistered(_)
    ));
    let status = table.record(&state, &beat(None, 1, 0), 0);
    assert_eq!(status.code(), code::CONTROLLER_INVALID_REQUEST);
    assert!(table.is_empty());
    assert_eq!(
        table.record(&state, &beat(Some(1), 1, 0), 0),
        HeartbeatStatus::Recorded
    );
    assert_eq!(table.len(), 1);
}

#[test]
fn a_broker_is_alive_until_its_timeout_passes() {
    let state = registered(&[1, 2]);
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    table.record(&state, &beat(Some(1), 1, 0), 1_000);
    let mut short = beat(Some(2), 1, 0);
    short.heartbeat_timeout_mills = Some(1); // raised to the 500 ms floor
    table.record(&state, &short, 1_000);
    assert!(table.is_alive(&key(2), 1_500));
    assert!(!table.is_alive(&key(2), 1_501));
    assert_eq!(table.expired(1_501), vec![key(2)]);
    assert_eq!(table.alive(11_000), vec![key(1)], "10 s default, inclusive");
    assert_eq!(table.alive(11_001), Vec::<BrokerKey>::new());
    let mut long = beat(Some(1), 1, 0);
    long.heartbeat_timeout_mills = Some(i64::MAX); // capped at 120 s
    table.record(&state, &long, 20_000);
    assert!(table.is_alive(&key(1), 140_000) && !table.is_alive(&key(1), 140_001));
    assert_eq!(table.remove_expired(30_000), vec![key(2)]);
    assert_eq!(table.len(), 1);
}

#[test]
fn log_facts_only_move_forward_and_feed_the_election() {
    let state = registered(&[1, 2]);
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    table.record(&state, &beat(Some(1), 3, 500), 0);
    table.record(&state, &beat(Some(1), 3, 400), 10);
    table.record(&state, &beat(Some(2), 2, 900), 10);
    let alive = table.alive_in_group("c", "g", 10);
    assert_eq!(
        alive[&1].max_offset, 500,
        "a lower report keeps the higher facts"
    );
    assert_eq!(
        alive[&1].election_priority,
        i32::MAX,
        "Java's default priority"
    );
    assert_eq!(alive[&2].epoch, 2);
    table.record(&state, &beat(Some(1), 4, 0), 20);
    assert_eq!(table.alive_in_group("c", "g", 20)[&1].epoch, 4);
}

/// Brokers 1 and 2 of group `g`, 1 elected master.
fn with_master_1() -> ReplicasInfo {
    let mut state = registered(&[1, 2]);
    let elect = Command::ElectMaster {
        broker_name: "g".into(),
        new_master: Some(1),
        unclean: false,
        expected_master_epoch: 0,
        expected_sync_state_set_epoch: 0,
    };
    assert_eq!(state.apply_command(&elect).code(), 0);
    state
}

#[test]
fn cleaned_brokers_leave_the_table_and_dead_masters_are_reported() {
    let mut state = with_master_1();
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    table.record(&state, &beat(Some(1), 1, 0), 0);
    table.record(&state, &beat(Some(2), 1, 0), 9_000);
    assert_eq!(
        table.groups_to_reelect(&state, 5_000, 0),
        Vec::<String>::new()
    );
    assert_eq!(
        table.groups_to_reelect(&state, 15_000, 0),
        vec!["g".to_owned()]
    );
    assert_eq!(
        table.groups_to_reelect(&state, 30_000, 0),
        Vec::<String>::new(),
        "all dead"
    );
    let clean = Command::CleanBrokerData {
        broker_name: "g".into(),
        broker_ids: Some(BTreeSet::from([2])),
    };
    assert_eq!(state.apply_command(&clean).code(), 0);
    table.retain_registered(&state);
    assert_eq!(table.len(), 1);
    assert!(table.entry(&key(2)).is_none());
}

#[test]
fn in_a_new_leaders_grace_only_a_master_heard_from_or_seen_closing_counts_dead() {
    let state = with_master_1();
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    table.record(&state, &beat(Some(2), 1, 0), 0);
    assert_eq!(
        table.groups_to_reelect(&state, 10, 0),
        Vec::<String>::new(),
        "master 1 is unheard"
    );
    table.record(&state, &beat(Some(1), 1, 0), 20);
    table.closed(&key(1));
    assert_eq!(
        table.groups_to_reelect(&state, 30, 0),
        vec!["g".to_owned()],
        "its connection closed"
    );
    table.record(&state, &beat(Some(1), 1, 0), 40);
    assert_eq!(
        table.groups_to_reelect(&state, 50, 0),
        Vec::<String>::new(),
        "it beats again"
    );
}

#[test]
fn an_unheard_master_counts_dead_one_of_its_registered_timeouts_into_a_leadership() {
    let mut state = with_master_1();
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    // The slave beats to the new leader, which began leading at 1 s; master 1 is silent.
    table.record(&state, &beat(Some(2), 1, 0), 1_000);
    let grace_of = |table: &BrokerLiveness, state: &ReplicasInfo, now| {
        table.groups_to_reelect(state, now, 1_000)
    };
    assert!(
        grace_of(&table, &state, 10_999).is_empty(),
        "10 s by default"
    );
    table.record(&state, &beat(Some(2), 1, 0), 10_900);
    assert_eq!(grace_of(&table, &state, 11_000), vec!["g".to_owned()]);

    // Registered with a 1.5 s timeout, the master counts dead 1.5 s into the leadership.
    let register = Command::UpdateBrokerAddress {
        cluster_name: "c".into(),
        broker_name: "g".into(),
        broker_id: 1,
        address: "a1".into(),
        heartbeat_timeout_ms: Some(1_500),
    };
    assert_eq!(state.apply_command(&register).code(), 0);
    let mut table = BrokerLiveness::new(LivenessLimits::default());
    table.record(&state, &beat(Some(2), 1, 0), 1_000);
    assert!(grace_of(&table, &state, 2_499).is_empty());
    assert_eq!(grace_of(&table, &state, 2_500), vec!["g".to_owned()]);

    // A register that names no timeout (a Java broker) keeps the one kept; a timeout
    // below the floor counts as the floor.
    let mut again = register.clone();
    if let Command::UpdateBrokerAddress {
        heartbeat_timeout_ms,
        ..
    } = &mut again
    {
        *heartbeat_timeout_ms = None;
    }
    assert_eq!(state.apply_command(&again).code(), 0);
    assert_eq!(
        state.group("g").unwrap().brokers[&1].heartbeat_timeout_ms,
        Some(1_500)
    );
    if let Command::UpdateBrokerAddress {
        heartbeat_timeout_ms,
        ..
    } = &mut again
    {
        *heartbeat_timeout_ms = Some(1);
    }
    assert_eq!(state.apply_command(&again).code(), 0);
    assert!(grace_of(&table, &state, 1_499).is_empty());
    assert_eq!(
        grace_of(&table, &state, 1_500),
        vec!["g".to_owned()],
        "the 500 ms floor"
    );
}
