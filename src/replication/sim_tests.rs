//! A master and a slave state machine driven against each other through the encoders and
//! decoders, bytes delivered in random chunks, each side's log an in-memory `Vec<u8>`:
//! after the reply is applied, the slave's log is at every step a byte copy of the
//! master's over the slave's range, and a caught-up slave holds the master's log.

use super::decode::{FromMasterDecoder, FromSlaveDecoder};
use super::epochs::{EpochCache, EpochEntry};
use super::master_state::{
    BelowRetention, MasterEvent, MasterIdentity, MasterLog, MasterSettings, MasterStream,
};
use super::slave_state::{SlaveIdentity, SlaveLog, SlavePlan, SlaveStream};
use super::wire::{encode_report, FromMaster, FromSlave};
use crate::rng::SplitMix64;

const SEGMENT: u64 = 1000;

/// One node's shard log: bytes from `base` on, and its epoch history.
#[derive(Clone, Debug, Default)]
struct Node {
    base: u64,
    bytes: Vec<u8>,
    epochs: EpochCache,
}

impl Node {
    fn max(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    fn slice(&self, offset: u64, length: u32) -> &[u8] {
        let from = (offset - self.base) as usize;
        &self.bytes[from..from + length as usize]
    }

    fn write(&mut self, rng: &mut SplitMix64, length: u64) {
        // Bytes carry their writer's epoch, so divergent tails differ from the master's.
        let epoch = self.epochs.last_epoch().expect("a writer has an epoch") as u8;
        for _ in 0..length {
            self.bytes
                .push(epoch.wrapping_mul(31) ^ rng.next_u64() as u8);
        }
    }

    /// Becoming master (reference-2 §6.4 `changeToMaster`, without the controller).
    fn lead(&mut self, epoch: u32) {
        let start = if self.epochs.is_empty() {
            self.base
        } else {
            self.max()
        };
        self.epochs.append(EpochEntry { epoch, start }).unwrap();
    }

    fn apply(&mut self, plan: &SlavePlan) {
        if let Some(to) = plan.truncate_to {
            self.bytes.truncate(to.saturating_sub(self.base) as usize);
            self.base = self.base.min(to);
            self.epochs.truncate_from(to);
        }
        if let Some(at) = plan.restart_at {
            *self = Node {
                base: at,
                ..Node::default()
            };
        }
        if let Some(entry) = plan.append_epoch {
            self.epochs.append(entry).unwrap();
        }
        if let Some(append) = &plan.append {
            assert_eq!(append.offset, self.max(), "append away from the log's end");
            self.bytes.extend_from_slice(&append.body);
        }
    }
}

/// The slave's bytes are the master's bytes at the same offsets.
fn assert_copy(slave: &Node, master: &Node, context: &str) {
    assert!(
        slave.max() <= master.max(),
        "{context}: slave {} past master {}",
        slave.max(),
        master.max()
    );
    let from = slave.base.max(master.base);
    if slave.max() <= from {
        return;
    }
    let length = (slave.max() - from) as u32;
    let (ours, theirs) = (slave.slice(from, length), master.slice(from, length));
    if let Some(at) = (0..ours.len()).find(|&at| ours[at] != theirs[at]) {
        panic!(
            "{context}: slave differs from master at {}",
            from + at as u64
        );
    }
}

/// What one connection did.
#[derive(Debug, Default)]
struct Outcome {
    truncated_to: Option<u64>,
    started_from: Option<u64>,
    below_retention: Option<BelowRetention>,
    caught_up: bool,
}

/// The two ends of one stream and the bytes in flight.
struct Link {
    master: MasterStream,
    slave: SlaveStream,
    from_slave: FromSlaveDecoder,
    from_master: FromMasterDecoder,
    to_master: Vec<u8>,
    to_slave: Vec<u8>,
    now_ms: u64,
    replied: bool,
    outcome: Outcome,
}

impl Link {
    fn open() -> Link {
        let master = MasterStream::new(
            MasterIdentity {
                cluster: "c".to_string(),
                broker: "b".to_string(),
                shard_index: 1,
                shard_count: 2,
            },
            MasterSettings {
                batch_bytes: 300,
                segment_bytes: SEGMENT,
                heartbeat_interval_ms: 1000,
            },
        );
        let slave = SlaveStream::new(
            SlaveIdentity {
                cluster: "c".to_string(),
                broker: "b".to_string(),
                shard_index: 1,
                shard_count: 2,
                slave_broker_id: 1,
                sync_from_last_file: false,
                async_learner: false,
            },
            1000,
        );
        let mut to_master = Vec::new();
        FromSlave::Handshake(slave.handshake()).encode(&mut to_master);
        Link {
            master,
            slave,
            from_slave: FromSlaveDecoder::new(),
            from_master: FromMasterDecoder::new(),
            to_master,
            to_slave: Vec::new(),
            now_ms: 0,
            replied: false,
            outcome: Outcome::default(),
        }
    }

    /// One step: some bytes each way, the master's frames, the slave's keepalive.
    fn step(&mut self, master: &Node, slave: &mut Node, rng: &mut SplitMix64) {
        let chunk = take(&mut self.to_master, rng, self.from_slave.space());
        self.from_slave.feed(&chunk).unwrap();
        while let Some(message) = self.from_slave.next().unwrap() {
            self.master_receives(message, master);
        }
        let facts = master_facts(master);
        for _ in 0..rng.range(0, 4) {
            if let Some(header) = self.master.next_frame(&facts, self.now_ms).unwrap() {
                header.encode(&mut self.to_slave);
                self.to_slave
                    .extend_from_slice(master.slice(header.offset, header.body_len));
            }
        }
        let chunk = take(&mut self.to_slave, rng, self.from_master.space());
        self.from_master.feed(&chunk).unwrap();
        while let Some(message) = self.from_master.next().unwrap() {
            self.slave_receives(message, slave);
        }
        if let Some(offset) = self.slave.report_due(&slave_facts(slave), self.now_ms) {
            encode_report(offset, &mut self.to_master);
        }
        self.now_ms += rng.range(0, 400);
    }

    fn master_receives(&mut self, message: FromSlave, master: &Node) {
        let event = self.master.on_message(message, &master_facts(master));
        match event.unwrap_or_else(|error| panic!("master refused: {error}")) {
            MasterEvent::Reply(reply) => FromMaster::Reply(reply).encode(&mut self.to_slave),
            MasterEvent::Started {
                from,
                below_retention,
            } => {
                self.outcome.started_from = Some(from);
                self.outcome.below_retention = below_retention;
            }
            MasterEvent::Acked { offset } => assert!(offset <= master.max()),
        }
    }

    fn slave_receives(&mut self, message: FromMaster, slave: &mut Node) {
        let is_reply = matches!(message, FromMaster::Reply(_));
        let plan = self
            .slave
            .on_message(message, &slave_facts(slave), self.now_ms);
        let plan = plan.unwrap_or_else(|error| panic!("slave refused: {error}"));
        slave.apply(&plan);
        if is_reply {
            self.replied = true;
            self.outcome.truncated_to = plan.truncate_to;
        }
        if let Some(offset) = plan.report {
            encode_report(offset, &mut self.to_master);
        }
    }

    fn caught_up(&self, master: &Node, slave: &Node) -> bool {
        self.replied
            && slave.max() == master.max()
            && self.to_master.is_empty()
            && self.to_slave.is_empty()
            && self.master.ack_offset() == Some(master.max())
    }
}

fn master_facts(node: &Node) -> MasterLog<'_> {
    MasterLog {
        min_offset: node.base,
        max_offset: node.max(),
        confirm_offset: node.base,
        epochs: &node.epochs,
    }
}

fn slave_facts(node: &Node) -> SlaveLog<'_> {
    SlaveLog {
        min_offset: node.base,
        max_offset: node.max(),
        epochs: &node.epochs,
    }
}

/// Removes a random prefix of `pipe` (at most `room` bytes) and returns it.
fn take(pipe: &mut Vec<u8>, rng: &mut SplitMix64, room: usize) -> Vec<u8> {
    let most = pipe.len().min(room);
    let length = if most == 0 {
        0
    } else {
        rng.range(0, most as u64 + 1) as usize
    };
    pipe.drain(..length).collect()
}

/// Runs one connection for at most `steps` steps (fewer is a disconnect), the master
/// writing now and then when `writes`. Checks the copy invariant after every step.
fn connect(
    master: &mut Node,
    slave: &mut Node,
    rng: &mut SplitMix64,
    steps: usize,
    writes: bool,
) -> Outcome {
    let mut link = Link::open();
    for _ in 0..steps {
        if writes && rng.chance(20) {
            let length = rng.range(1, 200);
            master.write(rng, length);
        }
        link.step(master, slave, rng);
        if link.replied {
            assert_copy(slave, master, "after the reply");
        }
        if !writes && link.caught_up(master, slave) {
            link.outcome.caught_up = true;
            break;
        }
    }
    link.outcome
}

fn master_with(history: &[(u32, u64)], rng: &mut SplitMix64) -> Node {
    let mut node = Node::default();
    for (at, &(epoch, length)) in history.iter().enumerate() {
        node.lead(epoch);
        node.write(rng, length);
        assert_eq!(node.epochs.len(), at + 1);
    }
    node
}

#[test]
fn an_empty_slave_copies_the_whole_history_through_random_splits() {
    for seed in 0..16 {
        let mut rng = SplitMix64::new(seed);
        let mut master = master_with(&[(1, 1700), (2, 900), (5, 2600)], &mut rng);
        let mut slave = Node::default();
        connect(&mut master, &mut slave, &mut rng, 300, true);
        let outcome = connect(&mut master, &mut slave, &mut rng, 100_000, false);
        assert!(outcome.caught_up, "seed {seed}: {outcome:?}");
        assert_eq!(slave.bytes, master.bytes, "seed {seed}");
        assert_eq!(slave.epochs, master.epochs, "seed {seed}");
    }
}

#[test]
fn an_old_master_with_a_divergent_tail_is_truncated_never_spliced() {
    let mut rng = SplitMix64::new(3);
    let mut old = master_with(&[(1, 1000), (2, 800)], &mut rng);
    // The new master copied 1500 bytes, then led epoch 3; the old one wrote on in epoch 2.
    let mut new = Node {
        base: 0,
        bytes: old.bytes[..1500].to_vec(),
        epochs: old.epochs.clone(),
    };
    old.write(&mut rng, 700);
    new.lead(3);
    new.write(&mut rng, 1200);
    assert_ne!(old.slice(1500, 100), new.slice(1500, 100));
    let outcome = connect(&mut new, &mut old, &mut rng, 100_000, false);
    assert_eq!(outcome.truncated_to, Some(1500));
    assert_eq!(outcome.started_from, Some(1500));
    assert!(outcome.caught_up);
    assert_eq!(old.bytes, new.bytes);
    assert_eq!(old.epochs, new.epochs);
}

#[test]
fn a_slave_below_retention_restarts_from_the_master_min_and_says_so() {
    let mut rng = SplitMix64::new(4);
    let mut master = master_with(&[(1, 2500), (2, 1000)], &mut rng);
    let mut slave = Node {
        base: 0,
        bytes: master.bytes[..500].to_vec(),
        epochs: EpochCache::from_entries(&[EpochEntry { epoch: 1, start: 0 }]).unwrap(),
    };
    // Retention drops the first two segments.
    master.bytes.drain(..2000);
    master.base = 2000;
    let outcome = connect(&mut master, &mut slave, &mut rng, 100_000, false);
    let below = BelowRetention {
        reported: 500,
        master_min: 2000,
    };
    assert_eq!(outcome.below_retention, Some(below));
    assert!(outcome.caught_up);
    assert_eq!((slave.base, &slave.bytes), (2000, &master.bytes));
}

/// Two nodes trade leadership over random rounds; every connection may drop at any step.
fn run_failovers(seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut nodes = [Node::default(), Node::default()];
    let mut leader = 0;
    let mut epoch = 1;
    nodes[0].lead(epoch);
    for _ in 0..12 {
        let length = rng.range(0, 1500);
        nodes[leader].write(&mut rng, length);
        if rng.chance(20) {
            let leading = &mut nodes[leader];
            let cut = leading.base + (leading.max() - leading.base) / SEGMENT * SEGMENT;
            leading.bytes.drain(..(cut - leading.base) as usize);
            leading.base = cut;
        }
        let steps = rng.range(1, 400) as usize;
        let (master, slave) = pair(&mut nodes, leader);
        connect(master, slave, &mut rng, steps, true);
        if rng.chance(40) && !nodes[1 - leader].epochs.is_empty() {
            leader = 1 - leader;
            epoch += rng.range(1, 3) as u32;
            nodes[leader].lead(epoch);
        }
    }
    let (master, slave) = pair(&mut nodes, leader);
    let outcome = connect(master, slave, &mut rng, 200_000, false);
    assert!(outcome.caught_up, "seed {seed}: {outcome:?}");
    assert_eq!(slave.max(), master.max(), "seed {seed}");
    assert_copy(slave, master, "caught up");
}

fn pair(nodes: &mut [Node; 2], leader: usize) -> (&mut Node, &mut Node) {
    let (first, second) = nodes.split_at_mut(1);
    if leader == 0 {
        (&mut first[0], &mut second[0])
    } else {
        (&mut second[0], &mut first[0])
    }
}

#[test]
fn random_failovers_and_disconnects_keep_the_slave_a_copy_of_the_master() {
    for seed in 0..64 {
        run_failovers(seed);
    }
}
