//! The controller Raft's timing and log bounds, checked before openraft sees them.
//!
//! Defaults are chosen for failover (issue 31: a new leader answering within 1 s of the
//! old one's SIGKILL). openraft's followers refuse to vote while the leader's lease, which
//! is `election_timeout_max` since its last heartbeat, runs; an election timer that fires
//! inside the lease is wasted and the candidate waits another timeout. So failover takes
//! up to about one lease plus one more timeout: with a 50 ms heartbeat and timeouts drawn
//! from 150-300 ms that is about 600 ms (the simulation measures it), where 100 ms and
//! 300-600 ms gave 0.9-1.9 s.

use std::time::Duration;

/// Heartbeat interval of the defaults.
pub const HEARTBEAT: Duration = Duration::from_millis(50);
/// Election timeout range of the defaults.
pub const ELECTION_MIN: Duration = Duration::from_millis(150);
pub const ELECTION_MAX: Duration = Duration::from_millis(300);
/// A snapshot is built once this many entries were applied since the last one; the log
/// before it is then purged (all but [`LOGS_KEPT`]), which bounds the log on disk.
pub const SNAPSHOT_EVERY_LOGS: u64 = 1000;
/// Entries kept below the snapshot, so a follower a little behind catches up from the log
/// instead of a whole snapshot.
pub const LOGS_KEPT: u64 = 100;
/// How long a proposal waits to be committed and applied.
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The settings of one controller node's Raft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftSettings {
    pub heartbeat: Duration,
    pub election_min: Duration,
    pub election_max: Duration,
    pub snapshot_every_logs: u64,
    pub logs_kept: u64,
    pub propose_timeout: Duration,
    /// The seed of openraft's randomness (election jitter); `None` draws one from the OS.
    /// Simulations set it, so a run replays.
    pub seed: Option<u64>,
}

impl Default for RaftSettings {
    fn default() -> RaftSettings {
        RaftSettings {
            heartbeat: HEARTBEAT,
            election_min: ELECTION_MIN,
            election_max: ELECTION_MAX,
            snapshot_every_logs: SNAPSHOT_EVERY_LOGS,
            logs_kept: LOGS_KEPT,
            propose_timeout: PROPOSE_TIMEOUT,
            seed: None,
        }
    }
}

impl RaftSettings {
    /// Refuses settings under which Raft cannot work or failover would be slow.
    pub fn validate(&self) -> Result<(), String> {
        let ms = Duration::from_millis;
        if !(ms(10)..=ms(1000)).contains(&self.heartbeat) {
            return Err(format!(
                "heartbeat {:?} is outside 10ms..=1s",
                self.heartbeat
            ));
        }
        if self.election_min < self.heartbeat * 3 {
            return Err(format!(
                "election_min {:?} is under three heartbeats ({:?})",
                self.election_min, self.heartbeat
            ));
        }
        if self.election_max <= self.election_min || self.election_max > ms(10_000) {
            return Err(format!(
                "election_max {:?} must exceed election_min {:?} and be at most 10s",
                self.election_max, self.election_min
            ));
        }
        if self.snapshot_every_logs == 0 {
            return Err("snapshot_every_logs must be at least 1".to_string());
        }
        if self.propose_timeout < self.election_max {
            return Err(format!(
                "propose_timeout {:?} is under election_max {:?}",
                self.propose_timeout, self.election_max
            ));
        }
        Ok(())
    }

    /// openraft's configuration for these settings (validated by openraft too).
    pub fn openraft_config(&self) -> Result<openraft::Config, String> {
        self.validate()?;
        let config = openraft::Config {
            cluster_name: "ringmq-controller".to_string(),
            heartbeat_interval: self.heartbeat.as_millis() as u64,
            election_timeout_min: self.election_min.as_millis() as u64,
            election_timeout_max: self.election_max.as_millis() as u64,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every_logs),
            max_in_snapshot_log_to_keep: self.logs_kept,
            // An RPC that outlives an election timeout is useless to Raft.
            install_snapshot_timeout: self.election_max.as_millis() as u64,
            ..Default::default()
        };
        config
            .validate()
            .map_err(|error| format!("openraft refuses the settings: {error}"))
    }
}
