//! A timer store's progress as a slave copies it (issue 25 item 4/7): what a master's shard
//! answers RINGMQ_GET_TIMER_PROGRESS with ([`TimerStore::progress`]), the checks a slave
//! makes of it ([`TimerProgress::parse`]), and the checkpoint the slave writes from it
//! ([`TimerProgress::slave_checkpoint`]), which the store's own recovery
//! ([`TimerStore::open`], then [`TimerStore::index_recovered`] from
//! [`TimerStore::indexed`]) turns into the master's pending set.
//!
//! The progress is the master's checkpoint without its runs: the runs are files of the
//! master's disk, and a slave has only the timer queue, which it holds as a copy of the
//! master's log. So `runsCover` is not the master's but the lowest queue offset it still
//! needs ([`TimerStore::lowest_needed_offset`]): every key the master has not delivered is
//! at or above it (in its buffer, a run, in flight), or in the late lane the progress
//! carries. Recovery indexes the queue again from there under the progress's skip rule:
//! a key at or below `delivered` below `indexed` was delivered (keys are acknowledged in
//! order), a late-lane key is restored as it was, a late key delivered above `delivered`
//! is in `lateDone`; every other key is pending on the master, and pending again on the
//! slave. The store module's invariant for `runs_cover` ("every entry below it is in a run,
//! in the late lane, or at or below delivered") holds with no runs for that reason.
//!
//! Invariants:
//! - A checkpoint written from a progress never makes recovery skip a key its master has
//!   not delivered: [`TimerProgress::clamped`] only lowers `indexed`, `runsCover` and the
//!   skip rule's bound (what lies above is indexed again, so delivered keys there come
//!   again: duplicates, never a loss), and drops the late keys above the new bound with
//!   them (they are indexed again instead of restored).
//! - A checkpoint written from a clamped progress claims no more of the timer queue than
//!   the queue the clamp was given holds, so the slave started as a master opens it
//!   ([`crate::broker::timer::scheduler::Timers::check_against_queue`]).
//! - A master that is itself recovering sends the skip rule of the checkpoint it opened
//!   (`recovering`), as its own checkpoint would keep it: what it delivered since, of keys
//!   it has not indexed again, was not delivered by that rule's reckoning, and comes again
//!   on the slave too (duplicates, as after a crash of the master).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Checkpoint, SkipRule, TimerKey, TimerStore, CHECKPOINT_VERSION, DUE_GONE};

/// The wire version of [`TimerProgress`]; a slave refuses any other.
pub const PROGRESS_VERSION: u32 = 1;

/// One shard's timer progress: RINGMQ_GET_TIMER_PROGRESS's body (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimerProgress {
    version: u32,
    /// Every key at a lower queue offset is delivered or in `late`.
    runs_cover: u64,
    /// The next timer-queue offset the master indexes.
    indexed: u64,
    /// The last normal key whose delivery was acknowledged.
    delivered: Option<TimerKey>,
    /// The late lane, keys in flight first (as the master's checkpoint writes it).
    late: Vec<TimerKey>,
    /// Late keys delivered above `delivered`.
    late_done: Vec<TimerKey>,
    /// Cancelled unique keys and the due time each is kept until.
    cancelled: BTreeMap<String, i64>,
    /// The skip rule of the checkpoint the master opened, while it indexes again below it.
    recovering: Option<SkipRule>,
}

/// Why a master's progress was refused; nothing is written then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the master's timer progress is refused: {0}")]
pub struct InvalidProgress(String);

impl TimerStore {
    /// What a slave needs to rebuild this store's pending set (see the module doc).
    pub fn progress(&self) -> TimerProgress {
        let runs_cover = self.lowest_needed_offset();
        assert!(
            runs_cover <= self.indexed,
            "the lowest needed offset {runs_cover} is past indexed {}",
            self.indexed
        );
        TimerProgress {
            version: PROGRESS_VERSION,
            runs_cover,
            indexed: self.indexed,
            delivered: self.delivered,
            late: self.late_keys(),
            late_done: self.late_done.iter().copied().collect(),
            cancelled: self.cancelled.clone(),
            recovering: self.recovering_rule(),
        }
    }
}

/// Whether `due` can be a key's due time: a time (never negative: a timer send is due after
/// its send), or the mark of a queue entry retention took before it was indexed.
fn due_ok(due: i64) -> bool {
    due >= 0 || due == DUE_GONE
}

fn refuse(why: impl Into<String>) -> InvalidProgress {
    InvalidProgress(why.into())
}

impl TimerProgress {
    /// The progress in `body`, checked: well-formed JSON of this version, no negative
    /// count or offset (the parser refuses them for unsigned fields), every key one the
    /// master indexed (below `indexed`, or a recovering master's bound) with a due time a
    /// key can have, a late lane without repeats, late keys done above `delivered` and not
    /// also waiting, and a skip rule that can be a recovering master's. A master further on
    /// than this slave's queue is not refused: [`TimerProgress::clamped`] takes care of it.
    pub fn parse(body: &[u8]) -> Result<TimerProgress, InvalidProgress> {
        let progress: TimerProgress = serde_json::from_slice(body)
            .map_err(|error| refuse(format!("not a timer progress: {error}")))?;
        progress.check()?;
        Ok(progress)
    }

    fn check(&self) -> Result<(), InvalidProgress> {
        if self.version != PROGRESS_VERSION {
            return Err(refuse(format!(
                "version {} (this build reads {PROGRESS_VERSION})",
                self.version
            )));
        }
        if self.runs_cover > self.indexed {
            return Err(refuse(format!(
                "runsCover {} is past indexed {}",
                self.runs_cover, self.indexed
            )));
        }
        // A recovering master restored keys from below the rule's bound that it has not
        // indexed again yet: the bound is the keys' limit then.
        let bound = self.claims();
        let key_ok = |what: &str, key: &TimerKey| {
            if key.offset >= bound {
                return Err(refuse(format!(
                    "{what} {key:?} is at or past what the master indexed ({bound})"
                )));
            }
            if !due_ok(key.due) {
                return Err(refuse(format!("{what} {key:?} has a negative due time")));
            }
            Ok(())
        };
        if let Some(delivered) = &self.delivered {
            key_ok("delivered", delivered)?;
        }
        let mut late = BTreeSet::new();
        for key in &self.late {
            key_ok("the late-lane key", key)?;
            if !late.insert(*key) {
                return Err(refuse(format!("the late-lane key {key:?} is there twice")));
            }
        }
        for key in &self.late_done {
            key_ok("the late key done", key)?;
            if self.delivered.is_some_and(|delivered| *key <= delivered) {
                return Err(refuse(format!(
                    "the late key done {key:?} is not above delivered {:?}",
                    self.delivered
                )));
            }
            if late.contains(key) {
                return Err(refuse(format!(
                    "the late key {key:?} is both waiting and done"
                )));
            }
        }
        if let Some((uniq_key, due)) = self.cancelled.iter().find(|(k, d)| k.is_empty() || **d < 0)
        {
            return Err(refuse(format!(
                "the cancellation '{uniq_key}' (kept until {due}) names no key or has a \
                 negative due time"
            )));
        }
        match &self.recovering {
            Some(rule) => self.check_rule(rule),
            None => Ok(()),
        }
    }

    /// A recovering master indexes again below the rule's bound, and its `delivered`
    /// started at the rule's.
    fn check_rule(&self, rule: &SkipRule) -> Result<(), InvalidProgress> {
        if rule.below <= self.indexed {
            return Err(refuse(format!(
                "recovering below {}, but indexed {} already",
                rule.below, self.indexed
            )));
        }
        if rule.delivered > self.delivered {
            return Err(refuse(format!(
                "recovering from delivered {:?}, past delivered {:?}",
                rule.delivered, self.delivered
            )));
        }
        if let Some(key) = rule
            .late
            .iter()
            .find(|key| key.offset >= rule.below || !due_ok(key.due))
        {
            return Err(refuse(format!(
                "the recovering late key {key:?} is at or past {} or has a negative due time",
                rule.below
            )));
        }
        if let Some(due) = rule
            .delivered
            .map(|key| key.due)
            .filter(|due| !due_ok(*due))
        {
            return Err(refuse(format!(
                "recovering from a delivered key due at {due}"
            )));
        }
        Ok(())
    }

    /// How far into the timer queue a checkpoint written from this progress claims to
    /// have indexed: what the slave's queue must hold for it to open as a master's.
    pub fn claims(&self) -> u64 {
        let below = self.recovering.as_ref().map_or(0, |rule| rule.below);
        self.indexed.max(below)
    }

    /// This progress for a slave whose copy of the timer queue ends at `queue_end`: if the
    /// master indexed past it (the slave is behind), recovery starts no later than
    /// `queue_end` and skips nothing at or above it, so every entry the slave receives
    /// later is indexed as new (the late keys there with them). What that costs is
    /// duplicates of what the master delivered up there, never a loss.
    pub fn clamped(mut self, queue_end: u64) -> TimerProgress {
        if self.claims() <= queue_end {
            return self;
        }
        self.indexed = self.indexed.min(queue_end);
        self.runs_cover = self.runs_cover.min(queue_end);
        self.late.retain(|key| key.offset < queue_end);
        self.late_done.retain(|key| key.offset < queue_end);
        if let Some(rule) = &mut self.recovering {
            rule.below = rule.below.min(queue_end);
            rule.late.retain(|key| key.offset < queue_end);
        }
        assert!(
            self.claims() <= queue_end && self.runs_cover <= self.indexed,
            "a clamped progress claims {} (runs cover {}, indexed {}) of a queue ending at \
             {queue_end}",
            self.claims(),
            self.runs_cover,
            self.indexed
        );
        self
    }

    /// The lowest timer-queue offset a store opened from this progress indexes again
    /// from: what a slave's retention must keep.
    pub fn runs_cover(&self) -> u64 {
        self.runs_cover
    }

    /// The checkpoint file a slave writes in its own timer store's directory: no runs, and
    /// the rest as the progress says (see the module doc for why recovery then rebuilds
    /// the master's pending set).
    pub fn slave_checkpoint(&self) -> Vec<u8> {
        let checkpoint = Checkpoint {
            version: CHECKPOINT_VERSION,
            runs: Vec::new(),
            runs_cover: self.runs_cover,
            indexed: self.indexed,
            delivered: self.delivered,
            recovering: self.recovering.clone(),
            late: self.late.clone(),
            late_done: self.late_done.clone(),
            cancelled: self.cancelled.clone(),
            // No run of the master's is named: the slave's own runs start again from 0
            // (an old one in the directory is an orphan the next open removes).
            next_seq: 0,
        };
        serde_json::to_vec(&checkpoint).expect("a checkpoint serializes")
    }
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
