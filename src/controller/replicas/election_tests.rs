use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::controller::replicas::state::{BrokerEntry, GroupEpochs, ReplicasInfo};

/// Brokers 1..=4, master `master`, set `set`, epochs 5 and 7.
fn group(master: Option<BrokerId>, set: &[BrokerId]) -> GroupState {
    let mut group = GroupState::new(
        "c",
        GroupEpochs {
            master_epoch: 5,
            sync_state_set_epoch: 7,
        },
    );
    for id in 1..=4 {
        let entry = BrokerEntry {
            address: format!("a{id}"),
            register_check_code: format!("a{id};0"),
            heartbeat_timeout_ms: None,
        };
        group.brokers.insert(id, entry);
    }
    group.next_broker_id = 5;
    group.master = master;
    group.sync_state_set = set.iter().copied().collect();
    group
}

fn facts(list: &[(BrokerId, i32, i64, i32)]) -> BTreeMap<BrokerId, BrokerFacts> {
    list.iter()
        .map(|&(id, epoch, max_offset, election_priority)| {
            let fact = BrokerFacts {
                epoch,
                max_offset,
                election_priority,
            };
            (id, fact)
        })
        .collect()
}

fn winner(outcome: &ElectionOutcome) -> (Option<BrokerId>, bool) {
    match outcome {
        ElectionOutcome::Propose(Command::ElectMaster {
            new_master,
            unclean,
            expected_master_epoch,
            expected_sync_state_set_epoch,
            ..
        }) => {
            assert_eq!(
                (*expected_master_epoch, *expected_sync_state_set_epoch),
                (5, 7)
            );
            (*new_master, *unclean)
        }
        other => panic!("expected a proposal, got {other:?}"),
    }
}

#[test]
fn an_alive_valid_master_stays() {
    let group = group(Some(1), &[1, 2]);
    let alive = facts(&[(1, 5, 0, 0), (2, 5, 999, 0)]);
    let outcome = elect("g", &group, &alive, ElectTrigger::Broker(2), false);
    assert_eq!(outcome, ElectionOutcome::MasterStillExists { master: 1 });
}

#[test]
fn a_master_that_asks_is_elected_again_under_a_new_epoch_unless_a_member_is_ahead() {
    let group = group(Some(1), &[1, 2]);
    let alive = facts(&[(1, 5, 999, 0), (2, 5, 500, 0)]);
    let outcome = elect("g", &group, &alive, ElectTrigger::Broker(1), false);
    assert_eq!(winner(&outcome), (Some(1), false));
    let mut state = ReplicasInfo::new();
    state.groups.insert("g".into(), group.clone());
    let ElectionOutcome::Propose(command) = outcome else {
        unreachable!()
    };
    assert_eq!(
        state.apply_command(&command).code(),
        0,
        "applied: the master again"
    );
    let applied = state.group("g").unwrap();
    assert_eq!((applied.master, applied.master_epoch), (Some(1), 6));
    // Its restart lost a tail the slave holds: the slave wins.
    let ahead = facts(&[(1, 5, 0, 0), (2, 5, 999, 0)]);
    let outcome = elect("g", &group, &ahead, ElectTrigger::Broker(1), false);
    assert_eq!(winner(&outcome), (Some(2), false));
    let dead = facts(&[(2, 5, 999, 0)]);
    let outcome = elect("g", &group, &dead, ElectTrigger::Broker(1), false);
    assert_eq!(
        winner(&outcome),
        (Some(2), false),
        "a dead master is not kept"
    );
}

#[test]
fn the_best_alive_member_of_the_set_wins_by_epoch_offset_priority_then_id() {
    let group = group(Some(1), &[1, 2, 3, 4]);
    let cases = [
        // (alive facts, expected winner)
        (facts(&[(2, 4, 900, 0), (3, 5, 100, 0)]), 3), // higher epoch beats offset
        (facts(&[(2, 5, 100, 0), (3, 5, 200, 0)]), 3), // then the higher offset
        (facts(&[(2, 5, 200, 2), (3, 5, 200, 1)]), 3), // then the lower priority
        (facts(&[(4, 5, 200, 1), (3, 5, 200, 1)]), 3), // then the lower id
    ];
    for (alive, expected) in cases {
        let outcome = elect("g", &group, &alive, ElectTrigger::Controller, false);
        assert_eq!(winner(&outcome), (Some(expected), false), "{alive:?}");
    }
}

#[test]
fn a_clean_election_never_picks_outside_the_set() {
    let group = group(Some(1), &[1, 2]);
    // 3 and 4 are alive and far ahead; 2, the only other member, is dead.
    let alive = facts(&[(3, 9, 9_999, 0), (4, 9, 9_999, 0)]);
    let outcome = elect("g", &group, &alive, ElectTrigger::Controller, false);
    assert_eq!(
        winner(&outcome),
        (None, false),
        "the master is cleared instead"
    );
    let outcome = elect("g", &group, &alive, ElectTrigger::Broker(3), false);
    assert!(matches!(
        outcome,
        ElectionOutcome::Failed {
            code: code::CONTROLLER_ELECT_MASTER_FAILED,
            ..
        }
    ));
    // Unclean allowed: the best alive replica, flagged unclean.
    let outcome = elect("g", &group, &alive, ElectTrigger::Controller, true);
    assert_eq!(winner(&outcome), (Some(3), true));
    // Unclean allowed but a member is alive: it still wins, clean.
    let alive = facts(&[(2, 1, 0, 0), (3, 9, 9_999, 0)]);
    let outcome = elect("g", &group, &alive, ElectTrigger::Controller, true);
    assert_eq!(winner(&outcome), (Some(2), false));
}

#[test]
fn a_designated_broker_wins_only_if_alive_and_in_the_set_unless_unclean() {
    let group = group(Some(1), &[1, 2]);
    let alive = facts(&[(1, 5, 0, 0), (2, 5, 0, 0), (3, 5, 0, 0)]);
    let outcome = elect("g", &group, &alive, ElectTrigger::Designated(2), false);
    assert_eq!(
        winner(&outcome),
        (Some(2), false),
        "switches from an alive master"
    );
    let outcome = elect("g", &group, &alive, ElectTrigger::Designated(1), false);
    assert_eq!(outcome, ElectionOutcome::MasterStillExists { master: 1 });
    let outcome = elect("g", &group, &alive, ElectTrigger::Designated(3), false);
    let ElectionOutcome::Failed { code, message } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(code, code::CONTROLLER_ELECT_MASTER_FAILED);
    assert!(message.contains("designated broker 3"), "{message}");
    let outcome = elect("g", &group, &alive, ElectTrigger::Designated(3), true);
    assert_eq!(winner(&outcome), (Some(3), true));
    let dead = facts(&[(1, 5, 0, 0)]);
    let outcome = elect("g", &group, &dead, ElectTrigger::Designated(2), false);
    assert!(
        matches!(outcome, ElectionOutcome::Failed { .. }),
        "{outcome:?}"
    );
}

#[test]
fn the_first_election_makes_the_requester_master() {
    let group = group(None, &[]);
    let outcome = elect(
        "g",
        &group,
        &BTreeMap::new(),
        ElectTrigger::Broker(3),
        false,
    );
    assert_eq!(winner(&outcome), (Some(3), false));
    let outcome = elect(
        "g",
        &group,
        &BTreeMap::new(),
        ElectTrigger::Broker(8),
        false,
    );
    assert!(
        matches!(outcome, ElectionOutcome::Failed { .. }),
        "8 is not registered"
    );
    let outcome = elect(
        "g",
        &group,
        &BTreeMap::new(),
        ElectTrigger::Controller,
        false,
    );
    assert!(matches!(
        outcome,
        ElectionOutcome::Failed {
            code: code::CONTROLLER_MASTER_NOT_AVAILABLE,
            ..
        }
    ));
}

#[test]
fn a_proposal_applies_and_a_second_one_from_the_same_view_is_fenced() {
    let mut state = crate::controller::replicas::state::ReplicasInfo::new();
    for id in 1..=3 {
        let command = Command::ApplyBrokerId {
            cluster_name: "c".into(),
            broker_name: "g".into(),
            broker_id: id,
            address: format!("a{id}"),
            register_check_code: format!("a{id};0"),
        };
        assert_eq!(state.apply_command(&command).code(), 0);
    }
    let view = state.group("g").unwrap().clone();
    let ElectionOutcome::Propose(first) =
        elect("g", &view, &BTreeMap::new(), ElectTrigger::Broker(1), false)
    else {
        panic!("first election");
    };
    let ElectionOutcome::Propose(second) =
        elect("g", &view, &BTreeMap::new(), ElectTrigger::Broker(2), false)
    else {
        panic!("first election");
    };
    assert_eq!(state.apply_command(&first).code(), 0);
    assert_eq!(
        state.apply_command(&second).code(),
        code::CONTROLLER_FENCED_MASTER_EPOCH
    );
    let group = state.group("g").unwrap();
    assert_eq!(
        (group.master, &group.sync_state_set),
        (Some(1), &BTreeSet::from([1]))
    );
}
