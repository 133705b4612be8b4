use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::metrics::PeerFigures;

fn shard(written: u64, peers: &[(u64, bool, u64)]) -> ReplicationFigures {
    ReplicationFigures {
        written,
        peers: peers
            .iter()
            .map(|&(id, streaming, ack)| PeerFigures {
                slave_id: Some(id),
                streaming,
                ack,
                ..PeerFigures::default()
            })
            .collect(),
        ..ReplicationFigures::default()
    }
}

const LONG: Duration = Duration::from_secs(15);

#[test]
fn a_slave_joins_in_two_looks_after_it_holds_what_was_written_when_the_gate_rose() {
    let mut keeper = SetKeeper::new(1, LONG);
    let me = BTreeSet::from([1]);
    let t = Instant::now();
    let first = [shard(100, &[(2, true, 100)]), shard(50, &[(2, true, 50)])];
    assert_eq!(
        keeper.look(&first, &me, t),
        Step::Nothing,
        "the first look adds nobody"
    );
    // Shard 1 is behind what it had written at the first look.
    let behind = [shard(200, &[(2, true, 150)]), shard(80, &[(2, true, 40)])];
    assert_eq!(keeper.look(&behind, &me, t), Step::Nothing);
    let held = [shard(300, &[(2, true, 200)]), shard(90, &[(2, true, 80)])];
    assert_eq!(
        keeper.look(&held, &me, t),
        Step::NeedReplicas(BTreeSet::from([2]))
    );
    // The gate rose at (300, 90): not yet held on shard 0.
    let later = [shard(400, &[(2, true, 299)]), shard(95, &[(2, true, 95)])];
    assert_eq!(keeper.look(&later, &me, t), Step::Nothing);
    let done = [shard(500, &[(2, true, 300)]), shard(99, &[(2, true, 90)])];
    assert_eq!(
        keeper.look(&done, &me, t),
        Step::Propose(BTreeSet::from([1, 2]))
    );
    keeper.proposed();
}

#[test]
fn an_expansion_whose_slave_stops_streaming_is_abandoned() {
    let mut keeper = SetKeeper::new(1, LONG);
    let me = BTreeSet::from([1]);
    let t = Instant::now();
    keeper.look(&[shard(10, &[(2, true, 10)])], &me, t);
    assert_eq!(
        keeper.look(&[shard(20, &[(2, true, 10)])], &me, t),
        Step::NeedReplicas(BTreeSet::from([2]))
    );
    assert_eq!(
        keeper.look(&[shard(30, &[(2, false, 15)])], &me, t),
        Step::Abandon
    );
    assert_eq!(keeper.look(&[shard(30, &[])], &me, t), Step::Nothing);
}

#[test]
fn a_slave_missing_on_one_shard_or_not_streaming_or_the_master_itself_does_not_join() {
    let mut keeper = SetKeeper::new(1, LONG);
    let me = BTreeSet::from([1]);
    let t = Instant::now();
    let look = [
        shard(10, &[(2, true, 10), (3, true, 10)]),
        shard(10, &[(2, true, 10)]),
    ];
    keeper.look(&look, &me, t);
    let now = [
        shard(10, &[(2, true, 10), (3, true, 10), (1, true, 10)]),
        shard(10, &[(2, false, 10)]),
    ];
    assert_eq!(keeper.look(&now, &me, t), Step::Nothing);
}

#[test]
fn a_member_behind_for_the_limit_is_proposed_out() {
    let mut keeper = SetKeeper::new(1, LONG);
    let set = BTreeSet::from([1, 2]);
    let t = Instant::now();
    let up = [shard(10, &[(2, true, 10)])];
    assert_eq!(keeper.look(&up, &set, t), Step::Nothing);
    assert_eq!(
        keeper.look(&up, &set, t + Duration::from_secs(10)),
        Step::Nothing
    );
    let gone = [shard(20, &[])];
    assert_eq!(
        keeper.look(&gone, &set, t + Duration::from_secs(20)),
        Step::Nothing,
        "caught up at 10 s"
    );
    assert_eq!(
        keeper.look(&gone, &set, t + Duration::from_secs(25)),
        Step::Propose(BTreeSet::from([1]))
    );
}

#[test]
fn the_gate_is_lowered_only_by_a_committed_set_newer_than_an_unsure_proposal() {
    let gate = crate::store::ReplicaGate::new(false);
    let mut keeper = GateKeeper::new(gate.clone(), 1, &BTreeSet::from([1, 2]), 4);
    assert!(gate.needed(), "a set with a slave needs it");
    keeper.follow(&BTreeSet::from([1]), 5, false);
    assert!(!gate.needed(), "a committed shrink lowers it");
    keeper.follow(&BTreeSet::from([1, 2]), 4, false);
    assert!(!gate.needed(), "an older view changes nothing");
    keeper.raise(&BTreeSet::from([2]));
    keeper.unsure(5, &BTreeSet::from([1, 2]));
    keeper.follow(&BTreeSet::from([1]), 5, false);
    assert!(
        gate.needed(),
        "a view from before the unsure proposal keeps it up"
    );
    keeper.follow(&BTreeSet::from([1, 2]), 6, false);
    assert!(gate.needed());
    keeper.follow(&BTreeSet::from([1]), 7, false);
    assert!(!gate.needed());
    keeper.raise(&BTreeSet::from([2]));
    keeper.follow(&BTreeSet::from([1]), 7, true);
    assert!(gate.needed(), "an expansion under way keeps it up");
}

#[test]
fn every_slave_the_controllers_may_hold_in_the_set_is_a_member_of_the_gate() {
    let gate = crate::store::ReplicaGate::new(false);
    let members = |gate: &crate::store::ReplicaGate| {
        gate.members()
            .map(|m| m.iter().copied().collect::<Vec<u64>>())
    };
    let mut keeper = GateKeeper::new(gate.clone(), 1, &BTreeSet::from([1, 2, 3]), 4);
    assert_eq!(
        members(&gate),
        Some(vec![2, 3]),
        "the set's slaves, not the master"
    );
    keeper.raise(&BTreeSet::from([4]));
    assert_eq!(members(&gate), Some(vec![2, 3, 4]), "and the joining ones");
    keeper.follow(&BTreeSet::from([1, 2]), 5, false);
    assert_eq!(
        members(&gate),
        Some(vec![2]),
        "a committed shrink, the expansion over"
    );
    keeper.unsure(5, &BTreeSet::from([1, 2, 3]));
    assert_eq!(members(&gate), Some(vec![2, 3]), "an unsure proposal's too");
    keeper.follow(&BTreeSet::from([1, 2]), 5, false);
    assert_eq!(members(&gate), Some(vec![2, 3]), "until a newer view");
    keeper.follow(&BTreeSet::from([1, 3]), 6, false);
    assert_eq!(members(&gate), Some(vec![3]));
    keeper.follow(&BTreeSet::from([1]), 7, false);
    assert_eq!(members(&gate), Some(vec![]));
    assert!(!gate.needed(), "no member: no replica needed");
}
