use std::collections::BTreeSet;

use super::*;
use crate::controller::replicas::state::GroupState;

pub(crate) fn apply_id(state: &mut ReplicasInfo, name: &str, id: BrokerId) -> Response {
    state.apply_command(&Command::ApplyBrokerId {
        cluster_name: "c".into(),
        broker_name: name.into(),
        broker_id: id,
        address: format!("10.0.0.{id}:10911"),
        register_check_code: format!("10.0.0.{id}:10911;{id}"),
    })
}

fn elect(group: &GroupState, name: &str, winner: Option<BrokerId>) -> Command {
    Command::ElectMaster {
        broker_name: name.into(),
        new_master: winner,
        unclean: false,
        expected_master_epoch: group.master_epoch,
        expected_sync_state_set_epoch: group.sync_state_set_epoch,
    }
}

fn alter(group: &GroupState, name: &str, set: &[BrokerId]) -> Command {
    Command::AlterSyncStateSet {
        broker_name: name.into(),
        master_broker_id: group.master.expect("a master"),
        master_epoch: group.master_epoch,
        sync_state_set_epoch: group.sync_state_set_epoch,
        new_sync_state_set: set.iter().copied().collect(),
    }
}

/// Group `g` with brokers 1, 2, 3, master 1 and the set {1, 2, 3}.
fn three_in_sync() -> ReplicasInfo {
    let mut state = ReplicasInfo::new();
    for id in 1..=3 {
        assert!(matches!(
            apply_id(&mut state, "g", id),
            Response::BrokerIdApplied { .. }
        ));
    }
    let group = state.group("g").unwrap().clone();
    assert_eq!(state.apply_command(&elect(&group, "g", Some(1))).code(), 0);
    let group = state.group("g").unwrap().clone();
    assert_eq!(
        state.apply_command(&alter(&group, "g", &[1, 2, 3])).code(),
        0
    );
    state
}

fn refusal_code(response: Response) -> i32 {
    match response {
        Response::Refused { code, .. } => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_election_raises_both_epochs_and_leaves_the_winner_alone_in_the_set() {
    let mut state = three_in_sync();
    let before = state.group("g").unwrap().clone();
    assert_eq!((before.master_epoch, before.sync_state_set_epoch), (1, 2));
    let response = state.apply_command(&elect(&before, "g", Some(2)));
    let after = state.group("g").unwrap();
    assert_eq!(after.master, Some(2));
    assert_eq!(after.master_epoch, before.master_epoch + 1);
    assert_eq!(after.sync_state_set_epoch, before.sync_state_set_epoch + 1);
    assert_eq!(after.sync_state_set, BTreeSet::from([2]));
    let Response::MasterElected {
        master_address,
        members,
        ..
    } = response
    else {
        panic!("{response:?}");
    };
    assert_eq!(master_address.as_deref(), Some("10.0.0.2:10911"));
    assert_eq!(members.len(), 3);
}

#[test]
fn the_second_of_two_racing_elections_is_refused_at_apply() {
    let mut state = three_in_sync();
    let seen = state.group("g").unwrap().clone();
    // Two leaders' decisions (or one leader deciding twice) from the same state.
    let first = elect(&seen, "g", Some(2));
    let second = elect(&seen, "g", Some(3));
    assert_eq!(state.apply_command(&first).code(), 0);
    let code = refusal_code(state.apply_command(&second));
    assert_eq!(code, response::CONTROLLER_FENCED_MASTER_EPOCH);
    assert_eq!(state.group("g").unwrap().master, Some(2));
}

#[test]
fn a_stale_alter_is_fenced_by_either_epoch_and_a_non_master_is_refused() {
    let mut state = three_in_sync();
    let seen = state.group("g").unwrap().clone();
    // The master shrinks the set while an election (from the same state) is committed.
    let shrink = alter(&seen, "g", &[1, 2]);
    assert_eq!(state.apply_command(&elect(&seen, "g", Some(2))).code(), 0);
    let code = refusal_code(state.apply_command(&shrink));
    assert_eq!(
        code,
        response::CONTROLLER_INVALID_MASTER,
        "1 is no longer the master"
    );
    // The new master's two racing alters: the second carries a stale set epoch.
    let now = state.group("g").unwrap().clone();
    let expand = alter(&now, "g", &[2, 3]);
    let other = alter(&now, "g", &[1, 2]);
    assert_eq!(state.apply_command(&expand).code(), 0);
    let code = refusal_code(state.apply_command(&other));
    assert_eq!(code, response::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH);
    // A master epoch from before the election.
    let mut stale = alter(state.group("g").unwrap(), "g", &[2]);
    if let Command::AlterSyncStateSet { master_epoch, .. } = &mut stale {
        *master_epoch -= 1;
    }
    let code = refusal_code(state.apply_command(&stale));
    assert_eq!(code, response::CONTROLLER_FENCED_MASTER_EPOCH);
}

#[test]
fn an_alter_with_unknown_ids_or_without_the_master_is_refused() {
    let mut state = three_in_sync();
    let group = state.group("g").unwrap().clone();
    let code = refusal_code(state.apply_command(&alter(&group, "g", &[1, 9])));
    assert_eq!(code, response::CONTROLLER_INVALID_REPLICAS);
    let code = refusal_code(state.apply_command(&alter(&group, "g", &[2, 3])));
    assert_eq!(code, response::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED);
    let code = refusal_code(state.apply_command(&alter(&group, "g", &[1, 2, 3])));
    assert_eq!(
        code,
        response::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
        "unchanged set"
    );
    assert_eq!(state.group("g").unwrap(), &group, "refusals change nothing");
}

#[test]
fn a_clean_election_outside_the_set_is_refused_and_an_unclean_one_applies() {
    let mut state = three_in_sync();
    let group = state.group("g").unwrap().clone();
    assert_eq!(state.apply_command(&alter(&group, "g", &[1])).code(), 0);
    let group = state.group("g").unwrap().clone();
    let code = refusal_code(state.apply_command(&elect(&group, "g", Some(3))));
    assert_eq!(code, response::CONTROLLER_INVALID_REPLICAS);
    let mut unclean = elect(&group, "g", Some(3));
    if let Command::ElectMaster { unclean: flag, .. } = &mut unclean {
        *flag = true;
    }
    assert_eq!(state.apply_command(&unclean).code(), 0);
    assert_eq!(state.group("g").unwrap().master, Some(3));
}

#[test]
fn an_election_without_winner_clears_the_master_and_keeps_the_set() {
    let mut state = three_in_sync();
    let before = state.group("g").unwrap().clone();
    assert_eq!(state.apply_command(&elect(&before, "g", None)).code(), 0);
    let after = state.group("g").unwrap().clone();
    assert_eq!(after.master, None);
    assert_eq!(after.master_epoch, before.master_epoch + 1);
    assert_eq!(after.sync_state_set, before.sync_state_set);
    assert_eq!(after.sync_state_set_epoch, before.sync_state_set_epoch);
    let code = refusal_code(state.apply_command(&elect(&after, "g", None)));
    assert_eq!(
        code,
        response::CONTROLLER_MASTER_NOT_AVAILABLE,
        "nothing to clear"
    );
}

#[test]
fn broker_ids_start_at_one_and_a_taken_id_needs_the_same_check_code() {
    let mut state = ReplicasInfo::new();
    let code = refusal_code(apply_id(&mut state, "g", 2));
    assert_eq!(code, response::CONTROLLER_BROKER_ID_INVALID);
    assert_eq!(state.next_broker_id("g"), 1);
    assert_eq!(apply_id(&mut state, "g", 1).code(), 0);
    assert_eq!(
        apply_id(&mut state, "g", 1).code(),
        0,
        "the same broker retrying"
    );
    let thief = Command::ApplyBrokerId {
        cluster_name: "c".into(),
        broker_name: "g".into(),
        broker_id: 1,
        address: "10.9.9.9:1".into(),
        register_check_code: "10.9.9.9:1;7".into(),
    };
    assert_eq!(
        refusal_code(state.apply_command(&thief)),
        response::CONTROLLER_BROKER_ID_INVALID
    );
    assert_eq!(apply_id(&mut state, "g", 5).code(), 0, "an id out of turn");
    assert_eq!(state.next_broker_id("g"), 6, "never handed out again");
}

#[test]
fn a_cleaned_group_comes_back_above_its_old_epochs() {
    let mut state = three_in_sync();
    let old = state.group("g").unwrap().epochs();
    let clean = Command::CleanBrokerData {
        broker_name: "g".into(),
        broker_ids: Some(BTreeSet::from([1])),
    };
    assert_eq!(state.apply_command(&clean).code(), 0);
    let group = state.group("g").unwrap();
    assert_eq!(group.master, None, "the cleaned master is no master");
    assert_eq!(group.master_epoch, old.master_epoch + 1);
    let all = Command::CleanBrokerData {
        broker_name: "g".into(),
        broker_ids: None,
    };
    assert_eq!(state.apply_command(&all).code(), 0);
    assert!(state.group("g").is_none());
    assert_eq!(apply_id(&mut state, "g", 1).code(), 0);
    let reborn = state.group("g").unwrap().epochs();
    assert_eq!(reborn.master_epoch, old.master_epoch + 1);
    assert_eq!(reborn.sync_state_set_epoch, old.sync_state_set_epoch);
}

#[test]
fn bytes_that_do_not_decode_are_refused_through_the_seam() {
    let mut state = three_in_sync();
    let before = state.clone();
    let answer = Response::decode(&state.apply(b"{\"nonsense\":{}}")).unwrap();
    assert_eq!(refusal_code(answer), response::CONTROLLER_INVALID_REQUEST);
    assert_eq!(state, before);
    let group = state.group("g").unwrap().clone();
    let bytes = elect(&group, "g", Some(2)).encode();
    let answer = Response::decode(&state.apply(&bytes)).unwrap();
    assert_eq!(answer.code(), 0);
}

#[test]
fn snapshot_restores_an_equal_state_and_garbage_is_refused_unchanged() {
    let state = three_in_sync();
    let mut restored = ReplicasInfo::new();
    restored.restore(&state.snapshot()).unwrap();
    assert_eq!(restored, state);
    assert_eq!(restored.snapshot(), state.snapshot(), "deterministic bytes");
    let before = restored.clone();
    for garbage in [&b""[..], b"{", b"[1,2]", b"{\"groups\":7}"] {
        let error = restored.restore(garbage).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{garbage:?}");
        assert_eq!(restored, before);
    }
    // Decodes, but its master is outside its set.
    let text = String::from_utf8(state.snapshot()).unwrap();
    let broken = text.replace("\"master\":1", "\"master\":9");
    assert_ne!(broken, text);
    let error = restored.restore(broken.as_bytes()).unwrap_err();
    assert!(error.to_string().contains("master 9"), "{error}");
    assert_eq!(restored, before);
}
