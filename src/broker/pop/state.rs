//! The in-flight table of POP consumption on one shard, pure (no I/O, the clock passed
//! in): for each (group, topic, queue) this shard owns, the next offset never popped
//! (`cursor`) and every popped offset not yet acknowledged, with the pop time its receipt
//! handle carries, when it becomes visible again, and the reconsume times it was
//! delivered with.
//!
//! How it is used ([`crate::broker::pop`]): a pop takes the offsets that are visible again first
//! (redelivered with reconsume times + 1), then new ones from the cursor; an ack removes
//! an offset whose pop time matches the handle's; CHANGE_INVISIBLETIME gives an offset a
//! new pop time and deadline. The same records are appended to the shard's revive log,
//! which [`PopTable::apply`] replays after a restart.
//!
//! Invariants (asserted):
//! - Every in-flight offset is below its queue's cursor, and is in the due index exactly
//!   once, under its deadline.
//! - The committed offset a queue reports ([`PopTable::watermark`]) is its lowest
//!   in-flight offset, or the cursor when none is: everything below it was acknowledged
//!   (or moved to the DLQ, or filtered out), so pull and pop share one committed offset.
//! - `ck_refs` counts, per revive log offset, the in-flight offsets whose latest
//!   checkpoint record is there; its lowest key bounds what a replay must read.

use std::collections::{BTreeMap, BTreeSet};

/// One queue of one group.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
}

impl QueueKey {
    pub fn new(group: &str, topic: &str, queue_id: i32) -> QueueKey {
        QueueKey {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
        }
    }
}

/// A popped, unacknowledged offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inflight {
    /// The pop time of its latest delivery (the handle's `popTime`); 0 when it was never
    /// handed out (a pop whose checkpoint could not be stored gave it back).
    pub pop_time: i64,
    /// When it becomes visible again.
    pub deadline: i64,
    /// The reconsume times of its latest delivery; -1 when never handed out.
    pub attempts: i32,
    /// The revive log offset of its latest checkpoint record, once stored.
    pub ck: Option<u64>,
}

/// The state of one queue.
#[derive(Clone, Debug, Default)]
pub struct QueueState {
    pub cursor: u64,
    /// The committed offset this table last reported, to notice an outside reset.
    pub committed: Option<u64>,
    inflight: BTreeMap<u64, Inflight>,
    due: BTreeSet<(i64, u64)>,
}

impl QueueState {
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    pub fn get(&self, offset: u64) -> Option<&Inflight> {
        self.inflight.get(&offset)
    }
}

/// An offset a pop hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub offset: u64,
    /// The reconsume times it is delivered with.
    pub attempts: i32,
}

/// An offset past the group's retry maximum, taken out of the table for the DLQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dead {
    pub offset: u64,
    /// The reconsume times of its last delivery.
    pub attempts: i32,
    /// The pop time of its last delivery (what the log's ack record names).
    pub pop_time: i64,
}

/// What one pop takes from a queue's redeliveries.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Revived {
    pub deliveries: Vec<Delivery>,
    /// Offsets past the group's retry maximum: out of the table, for the DLQ.
    pub dead: Vec<Dead>,
}

/// A record of the revive log, as [`PopTable::apply`] replays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRecord {
    /// A pop (or an invisible time change) handed out `offsets` at `pop_time`.
    Checkpoint {
        key: QueueKey,
        pop_time: i64,
        invisible_time: i64,
        deliveries: Vec<Delivery>,
    },
    /// `offsets`' deliveries at `pop_time` were acknowledged (or went to the DLQ).
    Ack {
        key: QueueKey,
        offsets: Vec<u64>,
        pop_time: i64,
    },
    /// The group's committed offset was moved from outside (an operator's reset, a
    /// commit): the queue starts over at `offset`, forgetting what was in flight.
    Reset { key: QueueKey, offset: u64 },
}

/// Every queue's state on one shard.
#[derive(Debug, Default)]
pub struct PopTable {
    queues: BTreeMap<QueueKey, QueueState>,
    ck_refs: BTreeMap<u64, u32>,
    inflight: usize,
}

impl PopTable {
    pub fn queue(&self, key: &QueueKey) -> Option<&QueueState> {
        self.queues.get(key)
    }

    /// In-flight offsets on this shard.
    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// In-flight offsets per group.
    pub fn inflight_by_group(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (key, state) in &self.queues {
            if !state.inflight.is_empty() {
                *counts.entry(key.group.clone()).or_insert(0) += state.inflight.len();
            }
        }
        counts
    }

    /// Opens `key` at `cursor` if it is not open. Returns its state.
    pub fn open(&mut self, key: &QueueKey, cursor: u64) -> &mut QueueState {
        self.queues
            .entry(key.clone())
            .or_insert_with(|| QueueState {
                cursor,
                ..QueueState::default()
            })
    }

    /// Starts `key` over at `cursor`, forgetting what it had in flight (its committed
    /// offset was reset from outside).
    pub fn reset(&mut self, key: &QueueKey, cursor: u64) {
        if let Some(state) = self.queues.remove(key) {
            for entry in state.inflight.values() {
                self.release_ck(entry.ck);
            }
            self.inflight -= state.inflight.len();
        }
        self.open(key, cursor);
    }

    /// The lowest in-flight offset of `key`, or its cursor.
    pub fn watermark(&self, key: &QueueKey) -> Option<u64> {
        let state = self.queues.get(key)?;
        Some(
            state
                .inflight
                .keys()
                .next()
                .copied()
                .unwrap_or(state.cursor),
        )
    }

    /// Every open queue's watermark.
    pub fn watermarks(&self) -> Vec<(QueueKey, u64)> {
        self.queues
            .keys()
            .filter_map(|key| Some((key.clone(), self.watermark(key)?)))
            .collect()
    }

    /// Every open queue.
    pub fn keys(&self) -> Vec<QueueKey> {
        self.queues.keys().cloned().collect()
    }

    /// The earliest deadline of `key`'s in-flight offsets.
    pub fn next_deadline(&self, key: &QueueKey) -> Option<i64> {
        self.queues
            .get(key)?
            .due
            .first()
            .map(|(deadline, _)| *deadline)
    }

    /// The lowest revive log offset any in-flight offset's checkpoint is at.
    pub fn lowest_ck(&self) -> Option<u64> {
        self.ck_refs.keys().next().copied()
    }

    /// Takes up to `max` of `key`'s offsets that are visible again at `now`, delivering
    /// them at `pop_time` until `pop_time + invisible_time`; an offset whose next
    /// delivery would exceed `max_attempts` reconsume times leaves the table instead.
    pub fn take_due(
        &mut self,
        key: &QueueKey,
        now: i64,
        max: usize,
        pop_time: i64,
        invisible_time: i64,
        max_attempts: i32,
    ) -> Revived {
        let mut revived = Revived::default();
        let Some(state) = self.queues.get_mut(key) else {
            return revived;
        };
        while revived.deliveries.len() < max {
            let Some(&(deadline, offset)) = state.due.first() else {
                break;
            };
            if deadline > now {
                break;
            }
            state.due.pop_first();
            let entry = state
                .inflight
                .get_mut(&offset)
                .unwrap_or_else(|| panic!("due offset {offset} of {key:?} is not in flight"));
            let attempts = entry.attempts.saturating_add(1);
            if attempts > max_attempts {
                let entry = state.inflight.remove(&offset).expect("just seen");
                self.inflight -= 1;
                if let Some(ck) = entry.ck {
                    release(&mut self.ck_refs, ck);
                }
                revived.dead.push(Dead {
                    offset,
                    attempts: entry.attempts,
                    pop_time: entry.pop_time,
                });
                continue;
            }
            entry.attempts = attempts;
            entry.pop_time = pop_time;
            entry.deadline = pop_time + invisible_time;
            state.due.insert((entry.deadline, offset));
            revived.deliveries.push(Delivery { offset, attempts });
        }
        revived
    }

    /// Hands out `offsets` (each at or above `key`'s cursor, ascending) as new
    /// deliveries at `pop_time`, and moves the cursor to `next_cursor` (past offsets
    /// a filter skipped too).
    pub fn take_new(
        &mut self,
        key: &QueueKey,
        deliveries: &[Delivery],
        next_cursor: u64,
        pop_time: i64,
        invisible_time: i64,
    ) {
        let state = self
            .queues
            .get_mut(key)
            .unwrap_or_else(|| panic!("{key:?} is not open"));
        assert!(
            next_cursor >= state.cursor,
            "the cursor of {key:?} would move back from {} to {next_cursor}",
            state.cursor
        );
        for delivery in deliveries {
            assert!(
                delivery.offset >= state.cursor && delivery.offset < next_cursor,
                "new offset {} of {key:?} is outside [{}, {next_cursor})",
                delivery.offset,
                state.cursor
            );
            let deadline = pop_time + invisible_time;
            state.inflight.insert(
                delivery.offset,
                Inflight {
                    pop_time,
                    deadline,
                    attempts: delivery.attempts,
                    ck: None,
                },
            );
            state.due.insert((deadline, delivery.offset));
            self.inflight += 1;
        }
        state.cursor = next_cursor;
    }

    /// Records that `offsets`' deliveries at `pop_time` have their checkpoint at revive
    /// log offset `ck` (ignored for offsets delivered again since).
    pub fn set_ck(&mut self, key: &QueueKey, offsets: &[u64], pop_time: i64, ck: u64) {
        let Some(state) = self.queues.get_mut(key) else {
            return;
        };
        for offset in offsets {
            if let Some(entry) = state.inflight.get_mut(offset) {
                if entry.pop_time == pop_time {
                    if let Some(old) = entry.ck.replace(ck) {
                        release(&mut self.ck_refs, old);
                    }
                    *self.ck_refs.entry(ck).or_insert(0) += 1;
                }
            }
        }
    }

    /// Gives back `offsets` delivered at `pop_time` whose checkpoint could not be stored:
    /// visible again at once, as never handed out.
    pub fn give_back(&mut self, key: &QueueKey, offsets: &[u64], pop_time: i64, now: i64) {
        let Some(state) = self.queues.get_mut(key) else {
            return;
        };
        for offset in offsets {
            if let Some(entry) = state.inflight.get_mut(offset) {
                if entry.pop_time == pop_time {
                    state.due.remove(&(entry.deadline, *offset));
                    entry.deadline = now;
                    entry.pop_time = 0;
                    entry.attempts -= 1;
                    state.due.insert((now, *offset));
                }
            }
        }
    }

    /// Acknowledges `offset`'s delivery at `pop_time`; `false` if no such delivery is in
    /// flight (acknowledged already, delivered again since, or never popped).
    pub fn ack(&mut self, key: &QueueKey, offset: u64, pop_time: i64) -> bool {
        let Some(state) = self.queues.get_mut(key) else {
            return false;
        };
        match state.inflight.get(&offset) {
            Some(entry) if entry.pop_time == pop_time && pop_time != 0 => {
                let entry = state.inflight.remove(&offset).expect("just seen");
                state.due.remove(&(entry.deadline, offset));
                self.inflight -= 1;
                if let Some(ck) = entry.ck {
                    release(&mut self.ck_refs, ck);
                }
                true
            }
            _ => false,
        }
    }

    /// Whether `offset`'s delivery at `pop_time` is in flight (an ack of it would count).
    pub fn is_inflight(&self, key: &QueueKey, offset: u64, pop_time: i64) -> bool {
        pop_time != 0
            && self
                .queues
                .get(key)
                .and_then(|state| state.inflight.get(&offset))
                .is_some_and(|entry| entry.pop_time == pop_time)
    }

    /// Puts a dead offset back in flight, due at `due` (its DLQ copy could not be
    /// stored; it is tried again then).
    pub fn restore(&mut self, key: &QueueKey, dead: Dead, due: i64) {
        let state = self
            .queues
            .get_mut(key)
            .unwrap_or_else(|| panic!("{key:?} is not open"));
        assert!(
            dead.offset < state.cursor,
            "restored offset {} of {key:?} is not below the cursor {}",
            dead.offset,
            state.cursor
        );
        let entry = Inflight {
            pop_time: dead.pop_time,
            deadline: due,
            attempts: dead.attempts,
            ck: None,
        };
        if state.inflight.insert(dead.offset, entry).is_none() {
            self.inflight += 1;
        } else {
            panic!(
                "restored offset {} of {key:?} was still in flight",
                dead.offset
            );
        }
        state.due.insert((due, dead.offset));
    }

    /// Makes `offset`'s delivery at `pop_time` invisible until `now + invisible_time`,
    /// as a delivery at `now`; its reconsume times if it was in flight.
    pub fn change_invisible(
        &mut self,
        key: &QueueKey,
        offset: u64,
        pop_time: i64,
        now: i64,
        invisible_time: i64,
    ) -> Option<i32> {
        let state = self.queues.get_mut(key)?;
        let entry = state.inflight.get_mut(&offset)?;
        if entry.pop_time != pop_time || pop_time == 0 {
            return None;
        }
        state.due.remove(&(entry.deadline, offset));
        entry.pop_time = now;
        entry.deadline = now + invisible_time;
        state.due.insert((entry.deadline, offset));
        Some(entry.attempts)
    }

    /// Replays one revive log record at log offset `ck`. Offsets below `floor(key)` (the
    /// committed offset from before the restart) were acknowledged and are skipped.
    pub fn apply(&mut self, record: &LogRecord, ck: u64, floor: impl Fn(&QueueKey) -> u64) {
        match record {
            LogRecord::Checkpoint {
                key,
                pop_time,
                invisible_time,
                deliveries,
            } => {
                let low = floor(key);
                self.open(key, low);
                for delivery in deliveries {
                    let state = self.queues.get_mut(key).expect("opened");
                    if delivery.offset < low {
                        continue;
                    }
                    state.cursor = state.cursor.max(delivery.offset + 1);
                    let deadline = pop_time + invisible_time;
                    let previous = state.inflight.insert(
                        delivery.offset,
                        Inflight {
                            pop_time: *pop_time,
                            deadline,
                            attempts: delivery.attempts,
                            ck: Some(ck),
                        },
                    );
                    match previous {
                        Some(old) => {
                            state.due.remove(&(old.deadline, delivery.offset));
                            if let Some(old_ck) = old.ck {
                                release(&mut self.ck_refs, old_ck);
                            }
                        }
                        None => self.inflight += 1,
                    }
                    state.due.insert((deadline, delivery.offset));
                    *self.ck_refs.entry(ck).or_insert(0) += 1;
                }
            }
            LogRecord::Ack {
                key,
                offsets,
                pop_time,
            } => {
                for offset in offsets {
                    self.ack(key, *offset, *pop_time);
                }
            }
            LogRecord::Reset { key, offset } => {
                self.reset(key, *offset);
                self.open(key, *offset).committed = Some(*offset);
            }
        }
    }

    /// Checks the invariants of the module doc; panics naming the broken one.
    pub fn check(&self) {
        let mut total = 0;
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        for (key, state) in &self.queues {
            assert_eq!(
                state.inflight.len(),
                state.due.len(),
                "{key:?}: in flight and due differ"
            );
            for (offset, entry) in &state.inflight {
                assert!(
                    *offset < state.cursor,
                    "{key:?}: in-flight offset {offset} is not below the cursor {}",
                    state.cursor
                );
                assert!(
                    state.due.contains(&(entry.deadline, *offset)),
                    "{key:?}: offset {offset} is not due at {}",
                    entry.deadline
                );
                if let Some(ck) = entry.ck {
                    *refs.entry(ck).or_insert(0) += 1;
                }
            }
            total += state.inflight.len();
        }
        assert_eq!(total, self.inflight, "the in-flight count drifted");
        assert_eq!(refs, self.ck_refs, "the checkpoint references drifted");
    }

    fn release_ck(&mut self, ck: Option<u64>) {
        if let Some(ck) = ck {
            release(&mut self.ck_refs, ck);
        }
    }
}

fn release(refs: &mut BTreeMap<u64, u32>, ck: u64) {
    let count = refs
        .get_mut(&ck)
        .unwrap_or_else(|| panic!("checkpoint {ck} has no references to release"));
    *count -= 1;
    if *count == 0 {
        refs.remove(&ck);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> QueueKey {
        QueueKey::new("g", "T", 1)
    }

    fn new(offsets: &[u64]) -> Vec<Delivery> {
        offsets
            .iter()
            .map(|&offset| Delivery {
                offset,
                attempts: 0,
            })
            .collect()
    }

    #[test]
    fn acknowledged_offsets_raise_the_watermark_and_unacknowledged_come_back() {
        let mut table = PopTable::default();
        table.open(&key(), 0);
        table.take_new(&key(), &new(&[0, 1, 2]), 3, 1000, 500);
        table.set_ck(&key(), &[0, 1, 2], 1000, 7);
        assert_eq!(table.watermark(&key()), Some(0));
        assert!(table.ack(&key(), 0, 1000));
        assert!(!table.ack(&key(), 0, 1000), "twice");
        assert!(!table.ack(&key(), 1, 999), "another pop time");
        assert!(table.ack(&key(), 2, 1000));
        assert_eq!(table.watermark(&key()), Some(1));
        assert_eq!(table.lowest_ck(), Some(7));
        table.check();
        // Not visible before its deadline, then redelivered with one more attempt.
        let early = table.take_due(&key(), 1499, 32, 1499, 500, 16);
        assert!(early.deliveries.is_empty());
        let late = table.take_due(&key(), 1500, 32, 1500, 500, 16);
        assert_eq!(
            late.deliveries,
            vec![Delivery {
                offset: 1,
                attempts: 1
            }]
        );
        assert!(!table.ack(&key(), 1, 1000), "the old handle is stale");
        assert!(table.ack(&key(), 1, 1500));
        assert_eq!(table.watermark(&key()), Some(3));
        assert_eq!(table.lowest_ck(), None);
        table.check();
    }

    #[test]
    fn past_the_retry_maximum_an_offset_leaves_for_the_dlq() {
        let mut table = PopTable::default();
        table.open(&key(), 5);
        table.take_new(&key(), &new(&[5]), 6, 0, 10);
        let mut now = 0;
        for attempt in 1..=2 {
            now += 10;
            let revived = table.take_due(&key(), now, 32, now, 10, 2);
            assert_eq!(revived.deliveries[0].attempts, attempt);
        }
        now += 10;
        let revived = table.take_due(&key(), now, 32, now, 10, 2);
        assert!(revived.deliveries.is_empty());
        assert_eq!(
            revived.dead,
            vec![Dead {
                offset: 5,
                attempts: 2,
                pop_time: 20
            }]
        );
        assert_eq!(table.watermark(&key()), Some(6));
        table.check();
        // A DLQ copy that could not be stored puts it back, due again.
        table.restore(&key(), revived.dead[0], 100);
        assert_eq!(table.watermark(&key()), Some(5));
        assert!(table.take_due(&key(), 99, 32, 99, 10, 2).dead.is_empty());
        assert_eq!(table.take_due(&key(), 100, 32, 100, 10, 2).dead.len(), 1);
        table.check();
    }

    #[test]
    fn a_changed_invisible_time_gives_a_new_handle() {
        let mut table = PopTable::default();
        table.open(&key(), 0);
        table.take_new(&key(), &new(&[0]), 1, 100, 1000);
        assert_eq!(table.change_invisible(&key(), 0, 100, 200, 5000), Some(0));
        assert_eq!(table.change_invisible(&key(), 0, 100, 300, 5000), None);
        assert!(table
            .take_due(&key(), 1100, 32, 1100, 1, 16)
            .deliveries
            .is_empty());
        assert_eq!(table.next_deadline(&key()), Some(5200));
        assert!(!table.ack(&key(), 0, 100));
        assert!(table.ack(&key(), 0, 200));
        table.check();
    }

    #[test]
    fn a_given_back_pop_is_delivered_again_as_new() {
        let mut table = PopTable::default();
        table.open(&key(), 0);
        table.take_new(&key(), &new(&[0, 1]), 2, 100, 1000);
        table.give_back(&key(), &[0, 1], 100, 150);
        assert!(!table.ack(&key(), 0, 100));
        let again = table.take_due(&key(), 150, 32, 150, 1000, 16);
        assert_eq!(again.deliveries, new(&[0, 1]));
        table.check();
    }

    #[test]
    fn replaying_the_log_rebuilds_what_was_in_flight() {
        let mut live = PopTable::default();
        let mut log: Vec<LogRecord> = Vec::new();
        live.open(&key(), 10);
        live.take_new(&key(), &new(&[10, 11, 12]), 13, 100, 1000);
        log.push(LogRecord::Checkpoint {
            key: key(),
            pop_time: 100,
            invisible_time: 1000,
            deliveries: new(&[10, 11, 12]),
        });
        live.set_ck(&key(), &[10, 11, 12], 100, 0);
        assert!(live.ack(&key(), 10, 100));
        log.push(LogRecord::Ack {
            key: key(),
            offsets: vec![10],
            pop_time: 100,
        });
        live.change_invisible(&key(), 12, 100, 300, 50).unwrap();
        log.push(LogRecord::Checkpoint {
            key: key(),
            pop_time: 300,
            invisible_time: 50,
            deliveries: vec![Delivery {
                offset: 12,
                attempts: 0,
            }],
        });
        live.set_ck(&key(), &[12], 300, 2);

        let mut replayed = PopTable::default();
        for (at, record) in log.iter().enumerate() {
            replayed.apply(record, at as u64, |_| 10);
        }
        replayed.check();
        let (a, b) = (live.queue(&key()).unwrap(), replayed.queue(&key()).unwrap());
        assert_eq!(a.cursor, b.cursor);
        assert_eq!(a.inflight, b.inflight);
        assert_eq!(live.lowest_ck(), replayed.lowest_ck());
        // A floor above an offset (its ack reached the offsets file) skips it.
        let mut floored = PopTable::default();
        for (at, record) in log.iter().enumerate() {
            floored.apply(record, at as u64, |_| 12);
        }
        assert_eq!(floored.watermark(&key()), Some(12));
        assert_eq!(floored.queue(&key()).unwrap().cursor, 13);
    }

    #[test]
    fn a_reset_forgets_what_was_in_flight() {
        let mut table = PopTable::default();
        table.open(&key(), 0);
        table.take_new(&key(), &new(&[0, 1]), 2, 100, 1000);
        table.set_ck(&key(), &[0, 1], 100, 4);
        table.reset(&key(), 50);
        assert_eq!(table.watermark(&key()), Some(50));
        assert_eq!(table.inflight(), 0);
        assert_eq!(table.lowest_ck(), None);
        table.check();
    }
}
