//! How a master run keeps its SyncStateSet (reference-2 §6.5), decided from each shard's
//! replication figures at every look (`checkSyncStateSetPeriod`). Pure: the supervisor
//! sends the proposals and moves the store's replica gate.
//!
//! **Caught up**: a slave that, on every shard, is streaming and acknowledged at least
//! what that shard had written at the previous look ("acked past the master max seen at
//! the last transfer").
//!
//! **Expand, in two looks**, so that no message the master acknowledged is missing from
//! a slave the controllers may elect:
//! 1. a slave caught up and not in the set: the master needs a replica from now on (its
//!    gate goes up: under SYNC_MASTER every batch written after waits for a slave's
//!    confirmation), and notes each shard's written end;
//! 2. at a later look, once the slave acknowledged those ends on every shard (so it holds
//!    every batch the master acknowledged on its own before the gate went up), the master
//!    proposes the larger set. If the slave stops streaming first, the expansion is
//!    dropped (the gate goes back to what the set says).
//!
//! **Shrink**: a member that has not been caught up for `haMaxTimeSlaveNotCatchup` is
//! proposed out; only once the controllers committed the smaller set may the master
//! acknowledge without it (the gate follows the committed set).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::ReplicationFigures;

/// What the master should do after a look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Raise the replica gate now for these joining slaves; the expansion is proposed at a
    /// later look.
    NeedReplicas(BTreeSet<i64>),
    /// Drop a started expansion: the gate follows the set again.
    Abandon,
    /// Ask the controllers for this set.
    Propose(BTreeSet<i64>),
}

/// What a master run saw at its previous looks.
pub struct SetKeeper {
    /// This broker's own id, never a candidate.
    me: i64,
    not_catchup: Duration,
    previous_written: Option<Vec<u64>>,
    /// An expansion under way: who joins, and each shard's written end when the gate rose.
    pending: Option<(BTreeSet<i64>, Vec<u64>)>,
    /// When each member was last caught up (members are counted caught up when the run
    /// starts).
    last_caught_up: BTreeMap<i64, Instant>,
}

impl SetKeeper {
    pub fn new(me: i64, not_catchup: Duration) -> SetKeeper {
        SetKeeper {
            me,
            not_catchup,
            previous_written: None,
            pending: None,
            last_caught_up: BTreeMap::new(),
        }
    }

    /// One look: `shards` are every shard's figures now (in shard order), `set` the
    /// SyncStateSet the controllers hold.
    pub fn look(
        &mut self,
        shards: &[ReplicationFigures],
        set: &BTreeSet<i64>,
        now: Instant,
    ) -> Step {
        let caught_up = self.caught_up(shards);
        self.previous_written = Some(shards.iter().map(|f| f.written).collect());
        for member in set.iter().filter(|&&m| m != self.me) {
            let last = self.last_caught_up.entry(*member).or_insert(now);
            if caught_up.contains(member) {
                *last = now;
            }
        }
        self.last_caught_up.retain(|id, _| set.contains(id));
        if let Some((joining, written)) = &self.pending {
            let holds = joining.iter().all(|&id| holds_all(shards, written, id));
            let streaming = joining.iter().all(|&id| streams_all(shards, id));
            return match (holds, streaming) {
                (true, _) => Step::Propose(set.union(joining).copied().collect()),
                (false, true) => Step::Nothing,
                (false, false) => {
                    self.pending = None;
                    Step::Abandon
                }
            };
        }
        let lagging: Vec<i64> = self
            .last_caught_up
            .iter()
            .filter(|(_, &last)| now.duration_since(last) >= self.not_catchup)
            .map(|(&id, _)| id)
            .collect();
        if !lagging.is_empty() {
            return Step::Propose(
                set.iter()
                    .copied()
                    .filter(|id| !lagging.contains(id))
                    .collect(),
            );
        }
        let joining: BTreeSet<i64> = caught_up.difference(set).copied().collect();
        if joining.is_empty() {
            return Step::Nothing;
        }
        let written = shards.iter().map(|f| f.written).collect();
        self.pending = Some((joining.clone(), written));
        Step::NeedReplicas(joining)
    }

    /// The controllers answered a proposal (committed or not): nothing is pending now.
    pub fn proposed(&mut self) {
        self.pending = None;
    }

    /// The slaves caught up since the previous look.
    fn caught_up(&self, shards: &[ReplicationFigures]) -> BTreeSet<i64> {
        let Some(previous) = self
            .previous_written
            .as_ref()
            .filter(|p| p.len() == shards.len())
        else {
            return BTreeSet::new();
        };
        let ids: BTreeSet<i64> = shards
            .iter()
            .flat_map(|figures| figures.peers.iter().filter_map(|peer| peer.slave_id))
            .filter_map(|id| i64::try_from(id).ok())
            .collect();
        ids.into_iter()
            .filter(|&id| id != self.me && holds_all(shards, previous, id))
            .collect()
    }
}

/// Whether slave `id` streams on every shard with an ack at least that shard's `written`.
fn holds_all(shards: &[ReplicationFigures], written: &[u64], id: i64) -> bool {
    shards.len() == written.len()
        && shards
            .iter()
            .zip(written)
            .all(|(figures, &written)| streams_past(figures, written, id))
}

/// Whether slave `id` streams on every shard.
fn streams_all(shards: &[ReplicationFigures], id: i64) -> bool {
    shards.iter().all(|figures| streams_past(figures, 0, id))
}

/// Whether slave `id` streams on the shard of `figures` with an ack at least `written`.
fn streams_past(figures: &ReplicationFigures, written: u64, id: i64) -> bool {
    let Ok(id) = u64::try_from(id) else {
        return false;
    };
    figures
        .peers
        .iter()
        .any(|peer| peer.slave_id == Some(id) && peer.streaming && peer.ack >= written)
}

#[cfg(test)]
#[path = "sync_state_tests.rs"]
mod tests;

/// The master run's replica gate, kept in step with the SyncStateSet the controllers
/// committed: up while the set holds a slave or an expansion is under way, and while the
/// outcome of a proposal is unknown (its answer was lost) until a view newer than the one
/// it was proposed from shows what became of it. It is lowered only from a committed set:
/// a view no newer than one already seen (an answer a stale leader gave) never lowers it.
///
/// The gate's members (the slaves every batch needs, `allAckInSyncStateSet`) are the
/// set's slaves, those joining it, and those of a proposal whose outcome is unknown: every
/// broker the controllers may hold in the set, and so may elect, holds what is confirmed.
pub struct GateKeeper {
    gate: crate::store::ReplicaGate,
    me: i64,
    /// The newest SyncStateSet epoch seen.
    seen_epoch: i32,
    /// A proposal made from this set epoch has an unknown outcome.
    unsure_from: Option<i32>,
    /// The committed set last followed, the slaves joining it, and the proposal of unknown
    /// outcome: together, whose confirmation a batch needs.
    set: BTreeSet<i64>,
    joining: BTreeSet<i64>,
    unsure_set: BTreeSet<i64>,
}

impl GateKeeper {
    pub fn new(
        gate: crate::store::ReplicaGate,
        me: i64,
        set: &BTreeSet<i64>,
        epoch: i32,
    ) -> GateKeeper {
        let keeper = GateKeeper {
            gate,
            me,
            seen_epoch: epoch,
            unsure_from: None,
            set: set.clone(),
            joining: BTreeSet::new(),
            unsure_set: BTreeSet::new(),
        };
        keeper.apply();
        keeper
    }

    /// Sets the gate's members and whether it is needed from what is kept.
    fn apply(&self) {
        let members: BTreeSet<u64> = self
            .set
            .iter()
            .chain(&self.joining)
            .chain(&self.unsure_set)
            .filter(|&&id| id != self.me)
            .filter_map(|&id| u64::try_from(id).ok())
            .collect();
        let needed = !members.is_empty();
        self.gate.set_members(members);
        self.gate.set_needed(needed);
    }

    pub fn gate(&self) -> &crate::store::ReplicaGate {
        &self.gate
    }

    /// A view of the committed set (a poll, or a proposal's answer); `expanding` while an
    /// expansion is under way (its slaves stay members).
    pub fn follow(&mut self, set: &BTreeSet<i64>, epoch: i32, expanding: bool) {
        if epoch < self.seen_epoch {
            return;
        }
        if let Some(from) = self.unsure_from {
            if epoch <= from {
                return;
            }
            self.unsure_from = None;
            self.unsure_set.clear();
        }
        self.seen_epoch = epoch;
        self.set = set.clone();
        if !expanding {
            self.joining.clear();
        }
        self.apply();
    }

    /// An expansion by `joining` began: batches need them from now on.
    pub fn raise(&mut self, joining: &BTreeSet<i64>) {
        self.joining = joining.clone();
        self.apply();
    }

    /// A proposal of `proposed`, made from set epoch `from`, got no answer: either set may
    /// be the committed one.
    pub fn unsure(&mut self, from: i32, proposed: &BTreeSet<i64>) {
        self.unsure_set.extend(proposed);
        self.unsure_from = Some(from);
        self.apply();
    }
}
