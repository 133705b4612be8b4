//! The slave's group commit (D14), as pure decisions: which of the plans
//! [`super::slave_state::SlaveStream`] gave for the messages already received go to the
//! store in one step, and what the log looks like once that step is done.
//!
//! A step ([`Batch`]) is a run of plans applied in order. Plans that only append bytes
//! (no truncation, no restart, no new epoch) and continue one another within one CommitLog
//! segment are joined into one append: one write and, under SYNC_FLUSH, one sync and one
//! report for every frame that arrived while the previous step was on the disk (the
//! master's appender does the same with puts, D6). Any other plan ends the step: the plans
//! after it are decided on the store's facts once it is applied. A step also ends once it
//! holds `haSlaveBatchBytesMax` appended bytes (the plan that reaches the limit is its
//! last, so a step always takes a plan, whatever the limit and the frames' sizes).
//!
//! Invariants (asserted): the appends of one step are contiguous, each starts where the
//! step's log ends ([`Batch::log_end`]), and a joined append never crosses a segment's end.

use super::slave_state::{Append, SlavePlan};

/// One step of the slave's work: plans in order.
#[derive(Debug)]
pub struct Batch {
    plans: Vec<SlavePlan>,
    segment_bytes: u64,
    /// `haSlaveBatchBytesMax`: the step closes once it appends this many bytes. It bounds
    /// one write and the memory a slave shard holds for the step on top of what it reads
    /// ahead (the same again, see [`super::slave_link`]).
    max_bytes: usize,
    appended: usize,
    /// Where the log ends once the step is applied, when a plan of it appends.
    end: Option<u64>,
    closed: bool,
}

impl Batch {
    /// An empty step for a log of `segment_bytes`-byte segments, closing once it appends
    /// `max_bytes`.
    pub fn new(segment_bytes: u64, max_bytes: usize) -> Batch {
        assert!(segment_bytes > 0, "segment size 0");
        assert!(max_bytes > 0, "step limit 0");
        Batch {
            plans: Vec::new(),
            segment_bytes,
            max_bytes,
            appended: 0,
            end: None,
            closed: false,
        }
    }

    /// Whether the step takes no more plans.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Where the log ends after the step, if a plan of it appends: what the next message
    /// is decided against.
    pub fn log_end(&self) -> Option<u64> {
        self.end
    }

    /// Whether a plan of the step asks for a report.
    pub fn reports(&self) -> bool {
        self.plans.iter().any(|plan| plan.report.is_some())
    }

    /// The first report a plan of the step asks for (the stream's start point, when the
    /// step holds the handshake reply).
    pub fn first_report(&self) -> Option<u64> {
        self.plans.iter().find_map(|plan| plan.report)
    }

    /// Ends the step after what it holds: the next plan needs the store's facts after it.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Adds the next plan; joins its append into the previous one when it only appends
    /// and continues it in the same segment.
    pub fn push(&mut self, plan: SlavePlan) {
        assert!(!self.closed, "a plan pushed into a closed step");
        if let Some(append) = &plan.append {
            if let Some(end) = self.end.filter(|_| plan.restart_at.is_none()) {
                assert_eq!(
                    append.offset, end,
                    "an append at {} in a step whose log ends at {end}",
                    append.offset
                );
            }
            self.end = Some(append.offset + append.body.len() as u64);
            self.appended += append.body.len();
        }
        if !only_appends(&plan) {
            self.closed = true;
            self.plans.push(plan);
            return;
        }
        if self.appended >= self.max_bytes {
            self.closed = true;
        }
        let joinable = match (self.plans.last(), &plan.append) {
            (Some(last), Some(append)) => self.joins(last, append),
            // A heartbeat (nothing to append) rides on the plan before it.
            (Some(last), None) => only_appends(last),
            (None, _) => false,
        };
        if !joinable {
            self.plans.push(plan);
            return;
        }
        let last = self.plans.last_mut().expect("joinable has a last plan");
        if let Some(append) = plan.append {
            let joined = last.append.as_mut().expect("joins() saw an append");
            joined.body.extend_from_slice(&append.body);
        }
        last.confirm_offset = plan.confirm_offset.or(last.confirm_offset);
        last.report = plan.report.or(last.report);
    }

    /// Whether `append` may be written with `last`'s: `last` only appends, and `append`
    /// starts where it ends, in its segment.
    fn joins(&self, last: &SlavePlan, append: &Append) -> bool {
        let Some(previous) = last.append.as_ref().filter(|_| only_appends(last)) else {
            return false;
        };
        let previous_end = previous.offset + previous.body.len() as u64;
        previous_end == append.offset
            && previous.offset / self.segment_bytes == append.offset / self.segment_bytes
    }

    /// The plans to apply, in order.
    pub fn into_plans(self) -> Vec<SlavePlan> {
        self.plans
    }
}

/// A plan that appends (or only confirms and reports): nothing of the store or the history
/// changes but the log's end.
fn only_appends(plan: &SlavePlan) -> bool {
    plan.truncate_to.is_none() && plan.restart_at.is_none() && plan.append_epoch.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::epochs::EpochEntry;

    /// A step limit that the tests not about the limit never reach.
    const LIMIT: usize = 1 << 20;

    fn append(offset: u64, len: usize) -> SlavePlan {
        SlavePlan {
            append: Some(Append {
                offset,
                body: vec![offset as u8; len],
            }),
            confirm_offset: Some(offset),
            report: Some(offset + len as u64),
            ..SlavePlan::default()
        }
    }

    #[test]
    fn contiguous_appends_in_one_segment_become_one_append_reporting_the_last_end() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(append(100, 10));
        batch.push(append(110, 20));
        batch.push(append(130, 5));
        assert!(!batch.is_closed());
        assert_eq!(batch.log_end(), Some(135));
        let plans = batch.into_plans();
        assert_eq!(plans.len(), 1);
        let joined = plans[0].append.as_ref().unwrap();
        assert_eq!((joined.offset, joined.body.len()), (100, 35));
        assert_eq!(&joined.body[10..12], &[110, 110]);
        assert_eq!(plans[0].report, Some(135));
        assert_eq!(plans[0].confirm_offset, Some(130));
    }

    #[test]
    fn an_append_at_a_segment_start_is_not_joined_to_the_segment_before() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(append(990, 10));
        batch.push(append(1000, 10));
        assert_eq!(batch.into_plans().len(), 2);
    }

    #[test]
    fn a_new_epoch_ends_the_step_and_is_not_joined() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(append(0, 10));
        let mut opening = append(10, 10);
        opening.append_epoch = Some(EpochEntry {
            epoch: 2,
            start: 10,
        });
        batch.push(opening);
        assert!(batch.is_closed());
        assert_eq!(batch.log_end(), Some(20));
        assert_eq!(batch.into_plans().len(), 2);
    }

    #[test]
    fn a_truncation_ends_the_step() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(SlavePlan {
            truncate_to: Some(5),
            report: Some(5),
            ..SlavePlan::default()
        });
        assert!(batch.is_closed());
        assert_eq!(batch.first_report(), Some(5));
    }

    #[test]
    fn a_heartbeat_between_appends_does_not_split_them() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(append(0, 10));
        batch.push(SlavePlan {
            confirm_offset: Some(10),
            ..SlavePlan::default()
        });
        batch.push(append(10, 10));
        assert!(batch.reports());
        let plans = batch.into_plans();
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].append.as_ref().unwrap().body.len(), 20);
    }

    #[test]
    fn a_heartbeat_alone_is_a_step_of_its_own() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(SlavePlan {
            confirm_offset: Some(10),
            ..SlavePlan::default()
        });
        assert!(!batch.is_empty() && !batch.reports() && !batch.is_closed());
    }

    #[test]
    fn a_step_closes_once_it_holds_the_most_bytes() {
        let limit = 4 << 20;
        let mut batch = Batch::new(u64::MAX / 2, limit);
        let frame = 1 << 20;
        let mut at = 0;
        while !batch.is_closed() {
            batch.push(append(at, frame));
            at += frame as u64;
        }
        assert_eq!(at as usize, limit);
    }

    #[test]
    fn a_frame_past_the_limit_is_a_step_of_its_own() {
        let mut batch = Batch::new(u64::MAX / 2, 100);
        batch.push(append(0, 300));
        assert!(batch.is_closed());
        assert_eq!(batch.log_end(), Some(300));
        let plans = batch.into_plans();
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].append.as_ref().unwrap().body.len(), 300);
    }

    #[test]
    #[should_panic(expected = "an append at 30 in a step whose log ends at 20")]
    fn a_gap_between_appends_of_a_step_is_a_bug() {
        let mut batch = Batch::new(1000, LIMIT);
        batch.push(append(10, 10));
        batch.push(append(30, 10));
    }
}
