//! The history of one episode and its checker: every send (its group, the broker it went
//! to, its unique body, when it went out and when it was answered, and how), every read
//! a consumer made during the episode, and every master the controllers named, each
//! stamped with the harness's monotonic clock; then what the groups hold once the faults
//! healed and the slaves caught up.
//!
//! What the checker finds (each a list of examples; the episode holds when all are empty):
//! - lost: acknowledged, and not held where its acknowledgement said (group, queue,
//!   offset);
//! - unexpected: held or read, never sent (or sent to another group or queue);
//! - duplicated: one body held at two places (a producer never sends a body twice, so any
//!   is the broker's);
//! - shared offsets: two bodies at one (group, queue, offset), across the acknowledgements,
//!   the reads and what is held;
//! - read then lost: read during the episode, not held at the end;
//! - deposed acknowledgements: a SEND_OK from a broker whose last epoch as master is below
//!   that of another broker of the group that had already acknowledged a send before this
//!   one went out.
//!
//! Sends answered with an indeterminate status (a timeout, a broken connection,
//! FLUSH_SLAVE_TIMEOUT and the like) may or may not be held. A definite refusal that is
//! held anyway is counted apart (`stored_though_refused`): a client would send it again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ringmq::remoting::codes::response;

use crate::common::cluster::STORED_UNCONFIRMED;

/// How late the observer may see a master the controllers elected: it polls every
/// [`super::workload::OBSERVE_EVERY`], and a poll waits for a controller that may be
/// failing over itself.
pub const OBSERVE_SLACK: Duration = Duration::from_millis(1500);

/// What became of one send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// SEND_OK at this queue offset.
    Acked(u64),
    /// A definite failure status: not stored.
    Refused(i32),
    /// No answer, or a status saying it is stored without the replication asked for.
    Unknown(String),
}

impl Outcome {
    /// The outcome of an answer with `code` and `queue_offset`, or of a failed request.
    pub fn of(answer: Result<(i32, Option<u64>), String>) -> Outcome {
        match answer {
            Ok((response::SUCCESS, Some(offset))) => Outcome::Acked(offset),
            Ok((response::SUCCESS, None)) => Outcome::Unknown("SEND_OK without an offset".into()),
            Ok((code, _)) if STORED_UNCONFIRMED.contains(&code) => {
                Outcome::Unknown(format!("status {code}"))
            }
            Ok((code, _)) => Outcome::Refused(code),
            Err(why) => Outcome::Unknown(why),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Send {
    pub group: String,
    pub broker: SocketAddr,
    pub queue: i32,
    pub body: String,
    /// Since the episode began.
    pub started: Duration,
    pub ended: Duration,
    pub outcome: Outcome,
}

#[derive(Clone, Debug)]
pub struct Read {
    pub group: String,
    pub broker: SocketAddr,
    pub queue: i32,
    pub offset: u64,
    pub body: String,
    pub at: Duration,
}

/// The controllers' answer for a group at `at`.
#[derive(Clone, Debug)]
pub struct MasterSeen {
    pub group: String,
    pub master: SocketAddr,
    pub epoch: i32,
    pub at: Duration,
}

/// Every operation of an episode, recorded from any thread.
pub struct Recorder {
    start: Instant,
    sends: Mutex<Vec<Send>>,
    reads: Mutex<Vec<Read>>,
    masters: Mutex<Vec<MasterSeen>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            sends: Mutex::default(),
            reads: Mutex::default(),
            masters: Mutex::default(),
        }
    }

    /// The episode's clock.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    pub fn send(&self, send: Send) {
        self.sends.lock().unwrap().push(send);
    }

    pub fn read(&self, read: Read) {
        self.reads.lock().unwrap().push(read);
    }

    /// Records the master the controllers named, when it differs from the last one seen.
    pub fn master(&self, seen: MasterSeen) {
        let mut masters = self.masters.lock().unwrap();
        let last = masters.iter().rev().find(|m| m.group == seen.group);
        if last.is_none_or(|m| (m.master, m.epoch) != (seen.master, seen.epoch)) {
            masters.push(seen);
        }
    }

    pub fn acked(&self) -> usize {
        let sends = self.sends.lock().unwrap();
        sends
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Acked(_)))
            .count()
    }

    pub fn history(&self) -> History {
        History {
            sends: self.sends.lock().unwrap().clone(),
            reads: self.reads.lock().unwrap().clone(),
            masters: self.masters.lock().unwrap().clone(),
        }
    }
}

/// A copy of a [`Recorder`]'s lists.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub sends: Vec<Send>,
    pub reads: Vec<Read>,
    pub masters: Vec<MasterSeen>,
}

/// Where a message is: (group, queue, offset).
pub type Place = (String, i32, u64);

/// What the groups hold at the end: place to body.
pub type Held = BTreeMap<Place, String>;

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub sends: usize,
    pub acked: usize,
    pub refused: usize,
    /// The refusals by status.
    pub refused_codes: BTreeMap<i32, usize>,
    pub unknown: usize,
    pub reads: usize,
    pub elections: usize,
    pub lost: Vec<String>,
    pub unexpected: Vec<String>,
    pub duplicated: Vec<String>,
    pub shared_offsets: Vec<String>,
    pub read_then_lost: Vec<String>,
    pub deposed_acks: Vec<String>,
    /// Filled by the episode: replicas whose logs differ once caught up.
    pub divergent: Vec<String>,
    pub stored_though_refused: Vec<String>,
}

impl Report {
    pub fn holds(&self) -> bool {
        [
            &self.lost,
            &self.unexpected,
            &self.duplicated,
            &self.shared_offsets,
            &self.read_then_lost,
            &self.deposed_acks,
            &self.divergent,
        ]
        .iter()
        .all(|found| found.is_empty())
    }

    /// One line of counts, then the first examples of each finding.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "sends {} (acked {}, refused {} {:?}, unknown {}), reads {}, masters seen {}; \
             lost {}, unexpected {}, duplicated {}, shared offsets {}, read then lost {}, \
             deposed acks {}, divergent {}, stored though refused {}",
            self.sends,
            self.acked,
            self.refused,
            self.refused_codes,
            self.unknown,
            self.reads,
            self.elections,
            self.lost.len(),
            self.unexpected.len(),
            self.duplicated.len(),
            self.shared_offsets.len(),
            self.read_then_lost.len(),
            self.deposed_acks.len(),
            self.divergent.len(),
            self.stored_though_refused.len(),
        );
        let lists = [
            ("lost", &self.lost),
            ("unexpected", &self.unexpected),
            ("duplicated", &self.duplicated),
            ("shared offset", &self.shared_offsets),
            ("read then lost", &self.read_then_lost),
            ("deposed ack", &self.deposed_acks),
            ("divergent", &self.divergent),
            ("stored though refused", &self.stored_though_refused),
        ];
        for (name, list) in lists {
            for example in list.iter().take(5) {
                text.push_str(&format!("\n  {name}: {example}"));
            }
        }
        text
    }
}

/// Holds `history` against `held`.
pub fn check(history: &History, held: &Held) -> Report {
    let mut report = Report {
        sends: history.sends.len(),
        reads: history.reads.len(),
        elections: history.masters.len(),
        ..Report::default()
    };
    let sent: HashMap<&str, &Send> = history
        .sends
        .iter()
        .map(|send| (send.body.as_str(), send))
        .collect();
    let mut places: HashMap<&str, Vec<&Place>> = HashMap::new();
    for (place, body) in held {
        places.entry(body.as_str()).or_default().push(place);
    }
    check_sends(history, &places, &mut report);
    check_held(held, &sent, &places, &mut report);
    check_reads(history, held, &sent, &mut report);
    check_shared_offsets(history, held, &mut report);
    report.deposed_acks = deposed_acks(history);
    report
}

fn check_sends(history: &History, places: &HashMap<&str, Vec<&Place>>, report: &mut Report) {
    for send in &history.sends {
        let held_at = places.get(send.body.as_str());
        match &send.outcome {
            Outcome::Acked(offset) => {
                report.acked += 1;
                let place = (send.group.clone(), send.queue, *offset);
                if !held_at.is_some_and(|at| at.contains(&&place)) {
                    report.lost.push(format!(
                        "{} acked by {} at {place:?} ({:?}), held at {held_at:?}",
                        send.body, send.broker, send.ended
                    ));
                }
            }
            Outcome::Refused(code) => {
                report.refused += 1;
                *report.refused_codes.entry(*code).or_default() += 1;
                if let Some(at) = held_at {
                    report.stored_though_refused.push(format!(
                        "{} refused by {} with {code}, held at {at:?}",
                        send.body, send.broker
                    ));
                }
            }
            Outcome::Unknown(_) => report.unknown += 1,
        }
    }
}

fn check_held(
    held: &Held,
    sent: &HashMap<&str, &Send>,
    places: &HashMap<&str, Vec<&Place>>,
    report: &mut Report,
) {
    for ((group, queue, offset), body) in held {
        match sent.get(body.as_str()) {
            Some(send) if (&send.group, send.queue) == (group, *queue) => {}
            Some(send) => report.unexpected.push(format!(
                "{body} held at ({group}, {queue}, {offset}), sent to ({}, {})",
                send.group, send.queue
            )),
            None => report.unexpected.push(format!(
                "{body} held at ({group}, {queue}, {offset}), never sent"
            )),
        }
    }
    for (body, at) in places {
        if at.len() > 1 {
            report.duplicated.push(format!("{body} held at {at:?}"));
        }
    }
}

fn check_reads(history: &History, held: &Held, sent: &HashMap<&str, &Send>, report: &mut Report) {
    let held_bodies: BTreeSet<&str> = held.values().map(String::as_str).collect();
    for read in &history.reads {
        if !sent.contains_key(read.body.as_str()) {
            report.unexpected.push(format!(
                "{} read from {} at ({}, {}, {}), never sent",
                read.body, read.broker, read.group, read.queue, read.offset
            ));
        }
        if !held_bodies.contains(read.body.as_str()) {
            report.read_then_lost.push(format!(
                "{} read from {} at ({}, {}, {}) at {:?}, not held at the end",
                read.body, read.broker, read.group, read.queue, read.offset, read.at
            ));
        }
    }
}

/// Two bodies at one place, whoever said so: an acknowledgement, a read or the end state.
fn check_shared_offsets(history: &History, held: &Held, report: &mut Report) {
    let mut claims: BTreeMap<Place, BTreeMap<&str, &'static str>> = BTreeMap::new();
    for send in &history.sends {
        if let Outcome::Acked(offset) = send.outcome {
            let place = (send.group.clone(), send.queue, offset);
            claims.entry(place).or_default().insert(&send.body, "acked");
        }
    }
    for read in &history.reads {
        let place = (read.group.clone(), read.queue, read.offset);
        claims
            .entry(place)
            .or_default()
            .entry(&read.body)
            .or_insert("read");
    }
    for (place, body) in held {
        claims
            .entry(place.clone())
            .or_default()
            .entry(body)
            .or_insert("held");
    }
    for (place, bodies) in claims {
        if bodies.len() > 1 {
            report.shared_offsets.push(format!("{place:?}: {bodies:?}"));
        }
    }
}

/// The SEND_OKs of a broker that was no longer master: one whose latest epoch as master
/// (as the controllers were seen to name it by the acknowledgement's end, plus the
/// observer's slack) is below the epoch of another broker of the group that acknowledged a
/// send answered before this one went out.
pub fn deposed_acks(history: &History) -> Vec<String> {
    // The epoch under which a broker acked at `at`: the highest it was seen master with.
    let epoch_of = |group: &str, broker: SocketAddr, at: Duration| -> Option<i32> {
        history
            .masters
            .iter()
            .filter(|m| m.group == group && m.master == broker && m.at <= at + OBSERVE_SLACK)
            .map(|m| m.epoch)
            .max()
    };
    let mut acks: Vec<(&Send, Option<i32>)> = history
        .sends
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::Acked(_)))
        .map(|s| (s, epoch_of(&s.group, s.broker, s.ended)))
        .collect();
    acks.sort_by_key(|(s, _)| s.ended);
    let mut found = Vec::new();
    // Per group: the highest epoch any acknowledgement so far was made under, and by whom.
    let mut newest: HashMap<&str, Vec<(Duration, i32, SocketAddr)>> = HashMap::new();
    for (send, epoch) in &acks {
        let earlier = newest.entry(&send.group).or_default();
        let mine = epoch.unwrap_or(i32::MIN);
        let overtaken = earlier
            .iter()
            .filter(|(ended, _, broker)| *ended < send.started && *broker != send.broker)
            .find(|(_, theirs, _)| *theirs > mine);
        if let Some((ended, theirs, broker)) = overtaken {
            found.push(format!(
                "{} acked by {} (epoch {epoch:?}) in {:?}..{:?}, after {broker} acked under \
                 epoch {theirs} at {ended:?}",
                send.body, send.broker, send.started, send.ended
            ));
        }
        if let Some(epoch) = epoch {
            earlier.push((send.ended, *epoch, send.broker));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn send(body: &str, broker: u16, queue: i32, at: u64, outcome: Outcome) -> Send {
        Send {
            group: "a".into(),
            broker: addr(broker),
            queue,
            body: body.into(),
            started: ms(at),
            ended: ms(at + 5),
            outcome,
        }
    }

    fn read(body: &str, queue: i32, offset: u64) -> Read {
        Read {
            group: "a".into(),
            broker: addr(1),
            queue,
            offset,
            body: body.into(),
            at: ms(50),
        }
    }

    fn master(broker: u16, epoch: i32, at: u64) -> MasterSeen {
        MasterSeen {
            group: "a".into(),
            master: addr(broker),
            epoch,
            at: ms(at),
        }
    }

    fn held(entries: &[(i32, u64, &str)]) -> Held {
        entries
            .iter()
            .map(|(queue, offset, body)| (("a".to_string(), *queue, *offset), body.to_string()))
            .collect()
    }

    fn clean() -> History {
        History {
            sends: vec![
                send("x", 1, 0, 10, Outcome::Acked(0)),
                send("y", 1, 0, 20, Outcome::Unknown("timeout".into())),
                send(
                    "z",
                    1,
                    1,
                    30,
                    Outcome::Refused(response::SERVICE_NOT_AVAILABLE),
                ),
            ],
            reads: vec![read("x", 0, 0)],
            masters: vec![master(1, 1, 0)],
        }
    }

    #[test]
    fn a_clean_history_holds_whether_or_not_an_unknown_send_was_kept() {
        let report = check(&clean(), &held(&[(0, 0, "x")]));
        assert!(report.holds(), "{}", report.summary());
        let report = check(&clean(), &held(&[(0, 0, "x"), (0, 1, "y")]));
        assert!(report.holds(), "{}", report.summary());
        assert_eq!((report.acked, report.unknown, report.refused), (1, 1, 1));
    }

    #[test]
    fn an_acknowledged_send_missing_or_moved_is_lost() {
        assert_eq!(check(&clean(), &held(&[])).lost.len(), 1);
        let moved = check(&clean(), &held(&[(0, 1, "x")]));
        assert_eq!(moved.lost.len(), 1, "{}", moved.summary());
    }

    #[test]
    fn a_body_never_sent_or_held_twice_is_found() {
        let report = check(&clean(), &held(&[(0, 0, "x"), (0, 1, "w")]));
        assert_eq!(report.unexpected.len(), 1, "{}", report.summary());
        let report = check(&clean(), &held(&[(0, 0, "x"), (0, 1, "x")]));
        assert_eq!(report.duplicated.len(), 1, "{}", report.summary());
    }

    #[test]
    fn a_read_message_missing_at_the_end_is_read_then_lost() {
        let mut history = clean();
        history.reads.push(read("y", 0, 1));
        let report = check(&history, &held(&[(0, 0, "x")]));
        assert_eq!(report.read_then_lost.len(), 1, "{}", report.summary());
    }

    #[test]
    fn two_bodies_at_one_offset_are_found_from_reads_and_acks() {
        let mut history = clean();
        history.reads.push(read("y", 0, 1));
        // The end holds another message where y was read.
        history
            .sends
            .push(send("v", 2, 0, 40, Outcome::Unknown("t".into())));
        let report = check(&history, &held(&[(0, 0, "x"), (0, 1, "v")]));
        assert_eq!(report.shared_offsets.len(), 1, "{}", report.summary());
    }

    #[test]
    fn a_refusal_that_was_stored_is_counted_apart() {
        let report = check(&clean(), &held(&[(0, 0, "x"), (1, 0, "z")]));
        assert_eq!(report.stored_though_refused.len(), 1);
        assert!(report.holds(), "{}", report.summary());
    }

    #[test]
    fn an_ack_from_a_deposed_master_after_the_new_masters_first_is_found() {
        let mut history = clean();
        // Broker 2 is elected under epoch 2 at 3 s and acks at 3.1 s; broker 1, seen
        // master only under epoch 1, acks a send made at 3.2 s.
        history.masters.push(master(2, 2, 3000));
        history.sends.push(send("n", 2, 0, 3100, Outcome::Acked(1)));
        history.sends.push(send("o", 1, 0, 3200, Outcome::Acked(2)));
        let found = deposed_acks(&history);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("o acked by"), "{found:?}");
    }

    #[test]
    fn a_master_elected_again_acks_legitimately() {
        let mut history = clean();
        history.masters.push(master(2, 2, 3000));
        history.sends.push(send("n", 2, 0, 3100, Outcome::Acked(1)));
        history.masters.push(master(1, 3, 6000));
        history.sends.push(send("o", 1, 0, 6100, Outcome::Acked(2)));
        assert_eq!(deposed_acks(&history), Vec::<String>::new());
    }
}
