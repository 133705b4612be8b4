//! The faults of the campaign, each drawn from a seed: which kind, which group, when, and
//! for how long. A kind is a process fault (SIGKILL, SIGSTOP), a damaged file, or a link
//! fault ([`super::proxy`]) on a master's links to the controllers or on its HA link to
//! its slave, or a stalled disk ([`super::frozen_disk`]). The loss of unsynced bytes is not
//! here (a real process's page cache survives its SIGKILL): the deterministic simulation
//! (`tests/node/failover_over_sim_net.rs`) loses them.

use std::fmt;
use std::time::Duration;

use ringmq::rng::SplitMix64;

/// One fault of an episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SIGKILL of a group's master; started again after the hold.
    KillMaster,
    /// SIGKILL of a group's slave; started again after the hold.
    KillSlave,
    /// SIGKILL of the controllers' leader; started again after the hold.
    KillControllerLeader,
    /// SIGKILL of a group's master and of the controllers' leader at once.
    KillMasterAndControllerLeader,
    /// SIGSTOP of a group's master past its lease (a zombie), then SIGCONT.
    PauseMaster,
    /// A master's links to every controller cut both ways, its clients' links kept.
    CutMasterFromControllers,
    /// A master's heartbeats and requests to the controllers lost, their answers kept.
    MasterUnheardByControllers,
    /// The controllers' answers to a master lost, its heartbeats kept.
    ControllersUnheardByMaster,
    /// SIGKILL of a group's slave, a bit flipped in the last 4 KiB of its CommitLog (odd
    /// draws) or those bytes zeroed as a torn write leaves them (even draws); started
    /// again after the hold, it must find the damage and copy the master's bytes again.
    DamageSlaveTail,
    /// The HA link between a master and its slave cut both ways (its clients and the
    /// controllers still reach both): SYNC_MASTER sends wait for the slave, then the master
    /// takes it out of the SyncStateSet once it lagged `haMaxTimeSlaveNotCatchup` and
    /// acknowledges alone; after the heal the slave catches up and joins again.
    CutMasterFromSlave,
    /// Only the slave's reports to its master lost: the stream flows, the master never
    /// learns what the slave holds.
    SlaveUnheardByMaster,
    /// The disk of a group's master (odd draws) or slave (even draws) stalls for 0.1-2 s:
    /// every write to its file system waits until the thaw.
    DiskStall,
}

pub const KINDS: [Kind; 12] = [
    Kind::KillMaster,
    Kind::KillSlave,
    Kind::KillControllerLeader,
    Kind::KillMasterAndControllerLeader,
    Kind::PauseMaster,
    Kind::CutMasterFromControllers,
    Kind::MasterUnheardByControllers,
    Kind::ControllersUnheardByMaster,
    Kind::DamageSlaveTail,
    Kind::CutMasterFromSlave,
    Kind::SlaveUnheardByMaster,
    Kind::DiskStall,
];

/// An episode's fault: `kind` on group `group`, `after` the load began, healed `hold`
/// later.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub kind: Kind,
    pub group: usize,
    pub after: Duration,
    pub hold: Duration,
    /// Drawn for the faults that need more: which damage, and where.
    pub draw: u64,
}

impl Plan {
    /// The plan of episode `seed`: the kinds in turn (so any run of [`KINDS`]`.len()`
    /// seeds covers every kind), the rest drawn.
    pub fn of(seed: u64, groups: usize) -> Plan {
        let kind = KINDS[(seed % KINDS.len() as u64) as usize];
        let mut rng = SplitMix64::new(seed.wrapping_mul(0x9e37_79b9).wrapping_add(7));
        let group = rng.below(groups);
        let after = Duration::from_millis(rng.range(500, 3000));
        // Past the lease and the controllers' timeout for the silent kinds, so they
        // elect; as short as half a second for a kill, a restart before anyone noticed.
        let hold_ms = match kind {
            Kind::PauseMaster
            | Kind::CutMasterFromControllers
            | Kind::MasterUnheardByControllers
            | Kind::ControllersUnheardByMaster
            | Kind::CutMasterFromSlave
            | Kind::SlaveUnheardByMaster => rng.range(2500, 6500),
            Kind::DiskStall => rng.range(100, 2000),
            _ => rng.range(500, 4000),
        };
        Plan {
            kind,
            group,
            after,
            hold: Duration::from_millis(hold_ms),
            draw: rng.next_u64(),
        }
    }
}

impl Plan {
    /// Whether a [`Kind::DiskStall`] stalls the master's disk (else the slave's).
    pub fn stalls_master(&self) -> bool {
        self.draw % 2 == 1
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} on group {} after {:?}, healed {:?} later",
            self.kind, self.group, self.after, self.hold
        )?;
        if self.kind == Kind::DamageSlaveTail {
            let damage = if self.draw % 2 == 1 {
                "a bit flipped"
            } else {
                "a torn tail"
            };
            write!(f, " ({damage})")?;
        }
        if self.kind == Kind::DiskStall {
            let whose = if self.stalls_master() {
                "master"
            } else {
                "slave"
            };
            write!(f, " (the {whose}'s disk)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_seeds_cover_every_kind_and_a_seed_always_plans_the_same() {
        let kinds: Vec<Kind> = (0..KINDS.len() as u64)
            .map(|s| Plan::of(s, 2).kind)
            .collect();
        assert_eq!(kinds, KINDS);
        for seed in 0..50 {
            let (one, two) = (Plan::of(seed, 2), Plan::of(seed, 2));
            assert_eq!(
                (one.group, one.after, one.hold),
                (two.group, two.after, two.hold)
            );
            assert!(one.group < 2);
        }
    }
}
