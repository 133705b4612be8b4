//! Deterministic crash simulation of the node-wide tables (`config/topics.json`,
//! `config/consumerOffset.json`, `config/subscriptionGroup.json`,
//! `config/delayOffset.json`) through the simulated disk's [`MetaFiles`].
//!
//! Each seed runs several lives. In each life the tables are loaded from the disk, a
//! random mix of topic and subscription-group puts and removes, offset commits and offset
//! writes, delay-cursor moves and cursor writes runs, and the
//! disk loses power after a random number of disk operations (so inside a table write:
//! before or after the temp file's write, its fsync, the rename, the directory sync).
//! Unsynced writes are then kept, dropped or torn and names not made durable by a
//! directory sync are lost. After every crash:
//! - each table loads (never torn, never empty when a version was stored) and is exactly
//!   its last stored version, or the version whose write the crash interrupted;
//! - every loaded committed offset is at most what the client last committed for that
//!   queue and at least what the last completed offset write stored;
//! - the delay cursors (with their dataVersion) are exactly the last completed write's
//!   table or the interrupted one's, never torn; each loaded cursor is at most where its
//!   scheduler last set it and at least what the last completed write stored (so a crash
//!   only ever redelivers, never skips, a delayed message).
//!
//! A failure names its seed. `RINGMQ_SIM_SEEDS=START..END cargo test --test
//! table_crash_simulation` runs other seeds; `scripts/crash_sweep.sh` runs a long sweep.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{sim_disk, sim_seeds, Rng};
use ringmq::broker::delay::offsets::DelayOffsets;
use ringmq::broker::tables::consumer_offsets::ConsumerOffsets;
use ringmq::broker::tables::subscription_groups::{
    SubscriptionGroupConfig, SubscriptionGroupWrapper, SubscriptionGroups, SYSTEM_GROUPS,
};
use ringmq::broker::tables::topics::{DataVersion, TopicConfig, TopicConfigWrapper, TopicTable};
use ringmq::io::meta::{replace_file, MetaFiles};

const STORE_DIR: &str = "/node";
const TOPICS: [&str; 4] = ["Orders", "Payments", "Audit", "%RETRY%billing"];
const GROUPS: [&str; 2] = ["billing", "search"];
const QUEUES: i32 = 3;
/// Delay levels whose cursors move.
const LEVELS: u64 = 3;

/// A topic table version: its topics and its data version.
type TopicVersion = (BTreeMap<String, TopicConfig>, DataVersion);

/// A subscription group table version: its groups and its data version.
type GroupVersion = (BTreeMap<String, SubscriptionGroupConfig>, DataVersion);

/// (group, topic, queue id) → offset.
type Offsets = BTreeMap<(String, String, i32), i64>;

/// The delay cursor table: level → cursor, and its data version.
type CursorVersion = (BTreeMap<u32, u64>, DataVersion);

/// What the model knows across lives.
#[derive(Default)]
struct Model {
    /// The topic table as of the last put or remove that returned `Ok`.
    topics: TopicVersion,
    /// The subscription group table, likewise.
    groups: GroupVersion,
    /// The last offset each queue's client committed (in memory, maybe not yet written).
    committed: Offsets,
    /// The offsets as of the last offset write that returned `Ok`.
    stored_offsets: Offsets,
    /// Where each level's scheduler last set its cursor (in memory, maybe not written).
    cursors_set: BTreeMap<u32, u64>,
    /// The cursor table as of the last cursor write that returned `Ok`.
    stored_cursors: CursorVersion,
}

/// What one life's crash may have left half done: the versions whose writes failed.
#[derive(Default)]
struct InFlight {
    topics: Option<TopicVersion>,
    groups: Option<GroupVersion>,
    offsets: Option<Offsets>,
    cursors: Option<CursorVersion>,
}

/// How the interrupted writes of a run of seeds ended, to show both outcomes are explored.
#[derive(Default)]
struct Outcomes {
    /// An interrupted write whose new version is what the crash left.
    landed: u64,
    /// An interrupted write whose old version is what the crash left.
    lost: u64,
}

#[test]
fn tables_after_any_crash_hold_their_old_or_new_version_and_offsets_within_what_was_committed() {
    let seeds = sim_seeds(0..500);
    let mut outcomes = Outcomes::default();
    for seed in seeds.clone() {
        let outcome = std::panic::catch_unwind(|| simulate(seed));
        match outcome {
            Ok(seen) => {
                outcomes.landed += seen.landed;
                outcomes.lost += seen.lost;
            }
            Err(_) => panic!(
                "table crash simulation failed for seed {seed}; rerun it alone with \
                 RINGMQ_SIM_SEEDS={seed}..{}",
                seed + 1
            ),
        }
    }
    println!(
        "{} seeds: {} interrupted table writes left the new version, {} the old one",
        seeds.end - seeds.start,
        outcomes.landed,
        outcomes.lost
    );
    if seeds.end - seeds.start >= 100 {
        assert!(
            outcomes.landed > 0 && outcomes.lost > 0,
            "the crashes must land both before and after a write's commit point \
             (new version {} times, old {} times)",
            outcomes.landed,
            outcomes.lost
        );
    }
}

fn simulate(seed: u64) -> Outcomes {
    let mut rng = Rng::new(seed);
    let sim = sim_disk(seed);
    let files: Arc<dyn MetaFiles> = Arc::new(sim.clone());
    let mut model = Model::default();
    // The system groups are in the table from the first load on.
    for group in SYSTEM_GROUPS {
        model
            .groups
            .0
            .insert(group.to_owned(), SubscriptionGroupConfig::new(group));
    }
    let lives = rng.range(3, 8);
    let mut clock = 1_000i64;
    let mut outcomes = Outcomes::default();
    for life in 0..lives {
        let (topics, offsets, groups, cursors) = load(&files, life);
        check(
            (&topics, &offsets, &groups, &cursors),
            &model,
            &InFlight::default(),
            life,
        );
        let ops = rng.range(5, 40);
        // About four disk operations per table write: crash anywhere in the life.
        sim.crash_after_ops(rng.range(1, 4 * ops + 4));
        let tables = (&topics, &offsets, &groups, &cursors);
        let in_flight = run_life(&mut rng, tables, &mut model, ops, &mut clock);
        if !sim.is_crashed() {
            sim.crash_now();
        }
        drop((topics, offsets, groups, cursors));
        sim.restart();
        let (topics, offsets, groups, cursors) = load(&files, life);
        check(
            (&topics, &offsets, &groups, &cursors),
            &model,
            &in_flight,
            life,
        );
        tally(
            &in_flight,
            (&topics, &offsets, &groups, &cursors),
            &model,
            &mut outcomes,
        );
        // What survived is the truth the next life starts from.
        model.topics = topic_version(&topics);
        model.stored_offsets = offsets_of(&offsets);
        model.groups = group_version(&groups);
        model.stored_cursors = cursor_version(&cursors);
    }
    outcomes
}

/// Counts each interrupted write of a life by what the crash left of it: its new version
/// (landed), or the old one.
fn tally(in_flight: &InFlight, survived: Tables<'_>, model: &Model, outcomes: &mut Outcomes) {
    let (topics, offsets, groups, cursors) = survived;
    let survived_topics = topic_version(topics);
    let survived_offsets = offsets_of(offsets);
    let survived_groups = group_version(groups);
    let survived_cursors = cursor_version(cursors);
    for landed in [
        in_flight
            .topics
            .as_ref()
            .map(|new| *new == survived_topics && *new != model.topics),
        in_flight
            .offsets
            .as_ref()
            .map(|new| *new == survived_offsets && *new != model.stored_offsets),
        in_flight
            .groups
            .as_ref()
            .map(|new| *new == survived_groups && *new != model.groups),
        in_flight
            .cursors
            .as_ref()
            .map(|new| *new == survived_cursors && *new != model.stored_cursors),
    ]
    .into_iter()
    .flatten()
    {
        if landed {
            outcomes.landed += 1;
        } else {
            outcomes.lost += 1;
        }
    }
}

/// The four tables as one life holds them.
type Tables<'a> = (
    &'a TopicTable,
    &'a ConsumerOffsets,
    &'a SubscriptionGroups,
    &'a DelayOffsets,
);

fn load(
    files: &Arc<dyn MetaFiles>,
    life: u64,
) -> (
    TopicTable,
    ConsumerOffsets,
    SubscriptionGroups,
    DelayOffsets,
) {
    let dir = Path::new(STORE_DIR);
    let topics = TopicTable::load_from(files.clone(), dir, true, 4)
        .unwrap_or_else(|error| panic!("life {life}: topics.json is torn or empty: {error:#}"));
    let offsets = ConsumerOffsets::load_from(files.clone(), dir).unwrap_or_else(|error| {
        panic!("life {life}: consumerOffset.json is torn or empty: {error:#}")
    });
    let groups = SubscriptionGroups::load_from(files.clone(), dir, true).unwrap_or_else(|error| {
        panic!("life {life}: subscriptionGroup.json is torn or empty: {error:#}")
    });
    let cursors = DelayOffsets::load_from(files.clone(), dir)
        .unwrap_or_else(|error| panic!("life {life}: delayOffset.json is torn: {error:#}"));
    (topics, offsets, groups, cursors)
}

/// Runs `ops` random table operations until the disk fails; returns the versions whose
/// writes failed (at most the first of each table can have reached the disk: every
/// later write fails before it changes anything).
fn run_life(
    rng: &mut Rng,
    tables: Tables<'_>,
    model: &mut Model,
    ops: u64,
    clock: &mut i64,
) -> InFlight {
    let mut life = Life {
        rng,
        tables,
        model,
        in_flight: InFlight::default(),
        now: *clock,
    };
    for _ in 0..ops {
        life.now += 1;
        let topic = TOPICS[life.rng.below(TOPICS.len())];
        match life.rng.range(0, 15) {
            0..=2 => life.put_topic(topic),
            3 => life.remove_topic(topic),
            4..=7 => life.commit_offsets(),
            8 | 9 => life.change_group(),
            12 | 13 => life.move_cursor(),
            14 => life.persist_cursors(),
            _ => life.persist_offsets(),
        }
    }
    *clock = life.now;
    life.in_flight
}

/// One life's operations on the tables, each followed in the model once its write
/// returned, or noted in flight when it failed.
struct Life<'a, 'r> {
    rng: &'r mut Rng,
    tables: Tables<'a>,
    model: &'r mut Model,
    in_flight: InFlight,
    /// The clock of the writes.
    now: i64,
}

impl Life<'_, '_> {
    fn put_topic(&mut self, topic: &str) {
        let topics = self.tables.0;
        let queues = self.rng.range(1, 17) as u32;
        let config = TopicConfig::new(topic, queues);
        let mut next = self.model.topics.clone();
        next.0.insert(topic.to_owned(), config.clone());
        next.1 = bumped(&next.1, self.now);
        match topics.put(config, self.now) {
            Ok(()) => {
                assert_eq!(topic_version(topics), next, "the model follows the table");
                self.model.topics = next;
            }
            Err(_) => {
                self.in_flight.topics.get_or_insert(next);
            }
        }
    }

    fn remove_topic(&mut self, topic: &str) {
        if !self.model.topics.0.contains_key(topic) {
            return;
        }
        let mut next = self.model.topics.clone();
        next.0.remove(topic);
        next.1 = bumped(&next.1, self.now);
        match self.tables.0.remove(topic, self.now) {
            Ok(removed) => {
                assert!(removed);
                self.model.topics = next;
            }
            Err(_) => {
                self.in_flight.topics.get_or_insert(next);
            }
        }
    }

    /// Consumers commit offsets (in memory; written by [`Life::persist_offsets`]).
    fn commit_offsets(&mut self) {
        let offsets = self.tables.1;
        for _ in 0..self.rng.range(1, 4) {
            let group = GROUPS[self.rng.below(GROUPS.len())];
            let topic = TOPICS[self.rng.below(TOPICS.len())];
            let queue = self.rng.range(0, QUEUES as u64) as i32;
            let key = (group.to_owned(), topic.to_owned(), queue);
            // A consumer only moves forward from what it resumed at.
            let from = offsets.query(group, topic, queue).unwrap_or(0);
            let offset = from + self.rng.range(1, 50) as i64;
            offsets.commit(group, topic, queue, offset);
            self.model.committed.insert(key, offset);
        }
    }

    /// Puts (mostly) or removes a subscription group.
    fn change_group(&mut self) {
        let groups = self.tables.2;
        let group = GROUPS[self.rng.below(GROUPS.len())];
        let mut next = self.model.groups.clone();
        let result = if self.rng.chance(70) {
            let mut config = SubscriptionGroupConfig::new(group);
            config.retry_max_times = self.rng.range(0, 20) as i32;
            next.0.insert(group.to_owned(), config.clone());
            groups.put(config, self.now)
        } else if next.0.remove(group).is_some() {
            groups
                .remove(group, self.now)
                .map(|removed| assert!(removed))
        } else {
            return;
        };
        next.1 = bumped(&next.1, self.now);
        match result {
            Ok(()) => {
                assert_eq!(group_version(groups), next, "the model follows the table");
                self.model.groups = next;
            }
            Err(_) => {
                self.in_flight.groups.get_or_insert(next);
            }
        }
    }

    /// A scheduler delivered some messages of a level: its cursor moves on.
    fn move_cursor(&mut self) {
        let cursors = self.tables.3;
        let level = self.rng.range(1, LEVELS + 1) as u32;
        let from = cursors.get(level).unwrap_or(0);
        let to = from + self.rng.range(1, 20);
        cursors.set(level, to, self.now);
        self.model.cursors_set.insert(level, to);
    }

    fn persist_cursors(&mut self) {
        let cursors = self.tables.3;
        let snapshot = cursor_version(cursors);
        let written = if self.rng.chance(50) {
            cursors.persist()
        } else {
            cursors.persist_if_changed().map(|_| ())
        };
        match written {
            Ok(()) => self.model.stored_cursors = snapshot,
            Err(_) => {
                self.in_flight.cursors.get_or_insert(snapshot);
            }
        }
    }

    fn persist_offsets(&mut self) {
        let offsets = self.tables.1;
        let snapshot = offsets_of(offsets);
        let written = if self.rng.chance(50) {
            offsets.persist()
        } else {
            offsets.persist_if_changed().map(|_| ())
        };
        match written {
            Ok(()) => self.model.stored_offsets = snapshot,
            Err(_) => {
                self.in_flight.offsets.get_or_insert(snapshot);
            }
        }
    }
}

fn bumped(version: &DataVersion, now_ms: i64) -> DataVersion {
    DataVersion {
        counter: version.counter + 1,
        state_version: version.state_version,
        timestamp: now_ms,
    }
}

fn topic_version(topics: &TopicTable) -> TopicVersion {
    let wrapper: TopicConfigWrapper = serde_json::from_str(&topics.to_json()).unwrap();
    (wrapper.topic_config_table, wrapper.data_version)
}

fn group_version(groups: &SubscriptionGroups) -> GroupVersion {
    let wrapper: SubscriptionGroupWrapper = serde_json::from_str(&groups.to_json()).unwrap();
    (wrapper.subscription_group_table, wrapper.data_version)
}

fn cursor_version(cursors: &DelayOffsets) -> CursorVersion {
    (cursors.all(), cursors.data_version())
}

/// Every offset the table holds, for the keys this simulation uses.
fn offsets_of(offsets: &ConsumerOffsets) -> Offsets {
    let mut all = Offsets::new();
    for group in GROUPS {
        for topic in TOPICS {
            for queue in 0..QUEUES {
                if let Some(offset) = offsets.query(group, topic, queue) {
                    all.insert((group.to_owned(), topic.to_owned(), queue), offset);
                }
            }
        }
    }
    all
}

fn check(
    (topics, offsets, groups, cursors): Tables<'_>,
    model: &Model,
    in_flight: &InFlight,
    life: u64,
) {
    let loaded = cursor_version(cursors);
    for (level, cursor) in &loaded.0 {
        let set = model.cursors_set.get(level);
        assert!(
            set.is_some_and(|set| cursor <= set),
            "life {life}: level {level}'s cursor loaded at {cursor}, past where its \
             scheduler set it ({set:?})"
        );
    }
    for (level, stored) in &model.stored_cursors.0 {
        let cursor = loaded.0.get(level);
        assert!(
            cursor.is_some_and(|cursor| cursor >= stored),
            "life {life}: level {level}'s cursor loaded at {cursor:?}, behind the {stored} \
             the last completed write stored"
        );
    }
    assert!(
        loaded == model.stored_cursors || in_flight.cursors.as_ref() == Some(&loaded),
        "life {life}: delayOffset.json is neither its stored version nor the interrupted \
         one:\nloaded {loaded:?}\nstored {:?}\ninterrupted {:?}",
        model.stored_cursors,
        in_flight.cursors
    );
    let loaded = group_version(groups);
    assert!(
        loaded == model.groups || in_flight.groups.as_ref() == Some(&loaded),
        "life {life}: subscriptionGroup.json is neither its stored version nor the \
         interrupted one:\nloaded {loaded:?}\nstored {:?}\ninterrupted {:?}",
        model.groups,
        in_flight.groups
    );
    let loaded = topic_version(topics);
    assert!(
        loaded == model.topics || in_flight.topics.as_ref() == Some(&loaded),
        "life {life}: topics.json is neither its stored version nor the interrupted one:\n\
         loaded {loaded:?}\nstored {:?}\ninterrupted {:?}",
        model.topics,
        in_flight.topics
    );
    let loaded = offsets_of(offsets);
    for (key, &offset) in &loaded {
        let committed = model.committed.get(key).copied();
        assert!(
            committed.is_some_and(|committed| offset <= committed),
            "life {life}: {key:?} loaded at {offset}, past what the client committed \
             ({committed:?})"
        );
    }
    for (key, &stored) in &model.stored_offsets {
        let offset = loaded.get(key).copied();
        assert!(
            offset.is_some_and(|offset| offset >= stored),
            "life {life}: {key:?} loaded at {offset:?}, behind the {stored} the last \
             completed write stored"
        );
    }
    assert!(
        loaded == model.stored_offsets || in_flight.offsets.as_ref() == Some(&loaded),
        "life {life}: consumerOffset.json is neither its stored version nor the interrupted \
         one:\nloaded {loaded:?}\nstored {:?}\ninterrupted {:?}",
        model.stored_offsets,
        in_flight.offsets
    );
}

#[test]
fn a_table_write_that_returned_is_what_a_crash_right_after_it_leaves() {
    // The shortest path to the directory sync's job: without it the rename may be lost.
    let path = Path::new(STORE_DIR).join("config").join("topics.json");
    for seed in 0..16 {
        let sim = sim_disk(seed);
        replace_file(&sim, &path, b"old").unwrap();
        replace_file(&sim, &path, b"new").unwrap();
        assert!(
            sim.durably_named(&path),
            "seed {seed}: the table's name is durable"
        );
        sim.crash_now();
        sim.restart();
        assert_eq!(
            sim.read_file(&path).unwrap(),
            b"new",
            "seed {seed}: a returned replace_file survives a crash"
        );
    }
}

#[test]
fn a_table_that_cannot_be_read_stops_the_load_naming_the_file() {
    let sim = sim_disk(2);
    let files: Arc<dyn MetaFiles> = Arc::new(sim.clone());
    let dir = Path::new(STORE_DIR);
    let topics = TopicTable::load_from(files.clone(), dir, true, 4).unwrap();
    topics.put(TopicConfig::new("Orders", 2), 1).unwrap();
    let offsets = ConsumerOffsets::load_from(files.clone(), dir).unwrap();
    offsets.commit("billing", "Orders", 0, 7);
    offsets.persist().unwrap();

    sim.fail_next_read(libc::EIO);
    let error = TopicTable::load_from(files.clone(), dir, true, 4).unwrap_err();
    let text = format!("{error:#}");
    assert!(text.contains("/node/config/topics.json"), "{text}");
    sim.fail_next_read(libc::EIO);
    let error = ConsumerOffsets::load_from(files.clone(), dir).unwrap_err();
    let text = format!("{error:#}");
    assert!(text.contains("/node/config/consumerOffset.json"), "{text}");

    // The fault was one read: both tables load again, unchanged.
    let topics = TopicTable::load_from(files.clone(), dir, true, 4).unwrap();
    assert_eq!(topics.get("Orders").unwrap().read_queue_nums, 2);
    let offsets = ConsumerOffsets::load_from(files, dir).unwrap();
    assert_eq!(offsets.query("billing", "Orders", 0), Some(7));
}
