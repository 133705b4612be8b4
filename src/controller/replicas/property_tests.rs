//! Seeded random command sequences against the state's invariants: after every applied
//! command, at most one master per group per master epoch (over the whole history),
//! epochs never lower for a name (across cleans too), the master in its set; and every
//! election the policy proposes from random liveness stays inside the set unless unclean.

use std::collections::{BTreeMap, BTreeSet};

use super::commands::Command;
use super::election::{elect, BrokerFacts, ElectTrigger, ElectionOutcome};
use super::state::{BrokerId, GroupEpochs, ReplicasInfo};
use crate::rng::SplitMix64;

const NAMES: [&str; 2] = ["g0", "g1"];

/// A random epoch near the group's current one: mostly current, sometimes stale.
fn near(rng: &mut SplitMix64, current: i32) -> i32 {
    if rng.chance(75) {
        current
    } else {
        current - 1 + rng.below(3) as i32
    }
}

fn random_ids(rng: &mut SplitMix64) -> BTreeSet<BrokerId> {
    (0..rng.below(4))
        .map(|_| 1 + rng.below(5) as BrokerId)
        .collect()
}

fn random_command(rng: &mut SplitMix64, state: &ReplicasInfo) -> Command {
    let name = NAMES[rng.below(NAMES.len())];
    let epochs = state.group(name).map(|g| g.epochs()).unwrap_or_default();
    let master = state.group(name).and_then(|g| g.master);
    let id = 1 + rng.below(5) as BrokerId;
    match rng.below(10) {
        0..=2 => Command::ApplyBrokerId {
            cluster_name: "c".into(),
            broker_name: name.into(),
            broker_id: id,
            address: format!("a{id}"),
            register_check_code: format!("a{id};{}", rng.below(2)),
        },
        3..=5 => policy_or_random_election(rng, state, name, epochs),
        6..=8 => Command::AlterSyncStateSet {
            broker_name: name.into(),
            master_broker_id: master.filter(|_| rng.chance(80)).unwrap_or(id),
            master_epoch: near(rng, epochs.master_epoch),
            sync_state_set_epoch: near(rng, epochs.sync_state_set_epoch),
            new_sync_state_set: random_ids(rng).into_iter().chain(master).collect(),
        },
        _ => Command::CleanBrokerData {
            broker_name: name.into(),
            broker_ids: rng.chance(70).then(|| random_ids(rng)),
        },
    }
}

/// Mostly what the policy proposes from random liveness (checked to stay in the set),
/// sometimes an arbitrary decision with nearby epochs.
fn policy_or_random_election(
    rng: &mut SplitMix64,
    state: &ReplicasInfo,
    name: &str,
    epochs: GroupEpochs,
) -> Command {
    if let (Some(group), true) = (state.group(name), rng.chance(70)) {
        let mut alive = BTreeMap::new();
        for &id in group.brokers.keys() {
            if rng.chance(60) {
                let facts = BrokerFacts {
                    epoch: rng.below(3) as i32,
                    max_offset: rng.below(100) as i64,
                    election_priority: rng.below(3) as i32,
                };
                alive.insert(id, facts);
            }
        }
        let unclean = rng.chance(20);
        if let ElectionOutcome::Propose(command) =
            elect(name, group, &alive, ElectTrigger::Controller, unclean)
        {
            if let Command::ElectMaster {
                new_master: Some(winner),
                unclean: false,
                ..
            } = &command
            {
                assert!(
                    group.sync_state_set.contains(winner) || group.sync_state_set.is_empty(),
                    "clean winner {winner} outside {:?}",
                    group.sync_state_set
                );
            }
            return command;
        }
    }
    Command::ElectMaster {
        broker_name: name.into(),
        new_master: rng.chance(80).then(|| 1 + rng.below(5) as BrokerId),
        unclean: rng.chance(20),
        expected_master_epoch: near(rng, epochs.master_epoch),
        expected_sync_state_set_epoch: near(rng, epochs.sync_state_set_epoch),
    }
}

/// What the history must keep: one master per (name, epoch), epochs never lower.
#[derive(Default)]
struct History {
    masters: BTreeMap<(String, i32), BrokerId>,
    highest: BTreeMap<String, GroupEpochs>,
}

impl History {
    fn observe(&mut self, state: &ReplicasInfo, step: usize) {
        for (name, group) in state.groups() {
            // A group re-created after a clean continues at its old epoch with no master:
            // "no master" is not a second master, so only masters are compared.
            if let Some(master) = group.master {
                let seen = self
                    .masters
                    .entry((name.clone(), group.master_epoch))
                    .or_insert(master);
                assert_eq!(
                    *seen, master,
                    "step {step}: group {name} epoch {} had master {seen}, now {master}",
                    group.master_epoch
                );
            }
            let high = self.highest.entry(name.clone()).or_default();
            assert!(
                group.master_epoch >= high.master_epoch
                    && group.sync_state_set_epoch >= high.sync_state_set_epoch,
                "step {step}: group {name} epochs {:?} below {high:?}",
                group.epochs()
            );
            *high = group.epochs();
        }
    }
}

#[test]
fn random_command_sequences_keep_the_invariants() {
    for seed in 0..40 {
        let mut rng = SplitMix64::new(seed);
        let mut state = ReplicasInfo::new();
        let mut history = History::default();
        let mut applied = 0;
        for step in 0..300 {
            let command = random_command(&mut rng, &state);
            let before = state.clone();
            let response = state.apply_command(&command);
            if response.code() == 0 {
                applied += 1;
            } else {
                assert_eq!(
                    state, before,
                    "seed {seed} step {step}: refused {command:?}"
                );
            }
            state.assert_invariants();
            history.observe(&state, step);
        }
        assert!(applied > 30, "seed {seed}: only {applied} commands applied");
        let mut restored = ReplicasInfo::new();
        crate::controller::replicated::ReplicatedState::restore(
            &mut restored,
            &crate::controller::replicated::ReplicatedState::snapshot(&state),
        )
        .unwrap();
        assert_eq!(restored, state, "seed {seed}");
    }
}
