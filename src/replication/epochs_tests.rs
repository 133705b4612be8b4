use super::*;
use crate::rng::SplitMix64;

fn cache(entries: &[(u32, u64)]) -> EpochCache {
    let entries: Vec<EpochEntry> = entries
        .iter()
        .map(|&(epoch, start)| EpochEntry { epoch, start })
        .collect();
    EpochCache::from_entries(&entries).expect("a valid history")
}

#[test]
fn the_reference_example_truncates_the_slave_to_1200() {
    let local = cache(&[(1, 0), (2, 1000)]);
    let master = cache(&[(1, 0), (2, 1000), (3, 1200)]);
    assert_eq!(
        find_consistent_point(&local, 1500, &master, 2000),
        Some(1200)
    );
}

#[test]
fn no_shared_epoch_with_the_same_start_is_no_point() {
    let local = cache(&[(1, 0), (2, 500)]);
    let master = cache(&[(2, 0), (3, 700)]);
    assert_eq!(find_consistent_point(&local, 900, &master, 1000), None);
    // Same epoch, different start: the epoch's bytes do not line up.
    let master = cache(&[(1, 0), (2, 400)]);
    let local = cache(&[(2, 0)]);
    assert_eq!(find_consistent_point(&local, 900, &master, 1000), None);
    assert_eq!(
        find_consistent_point(&EpochCache::new(), 0, &master, 1000),
        None
    );
}

#[test]
fn an_older_shared_epoch_is_used_when_the_newest_local_one_is_unknown_to_the_master() {
    // The old master wrote epoch 2 from 800 on; the new master never saw it.
    let local = cache(&[(1, 0), (2, 800)]);
    let master = cache(&[(1, 0), (3, 600)]);
    assert_eq!(find_consistent_point(&local, 1000, &master, 900), Some(600));
}

#[test]
fn a_torn_local_tail_never_yields_a_point_past_the_local_max() {
    let local = cache(&[(1, 0), (2, 1000)]);
    let master = cache(&[(1, 0), (2, 1000)]);
    assert_eq!(find_consistent_point(&local, 700, &master, 2000), Some(700));
}

#[test]
fn append_refuses_lower_or_equal_epochs_and_starts_going_backwards() {
    let mut history = cache(&[(3, 100)]);
    let equal = history.append(EpochEntry {
        epoch: 3,
        start: 200,
    });
    assert_eq!(
        equal,
        Err(EpochError::EpochNotIncreasing { last: 3, epoch: 3 })
    );
    let lower = history.append(EpochEntry {
        epoch: 2,
        start: 200,
    });
    assert_eq!(
        lower.unwrap_err().to_string(),
        "epoch 2 does not follow epoch 3: epochs must strictly increase"
    );
    let backwards = history.append(EpochEntry {
        epoch: 4,
        start: 99,
    });
    assert_eq!(
        backwards.unwrap_err().to_string(),
        "epoch 4 starts at 99, before epoch 3's start 100: starts must not decrease"
    );
    assert_eq!(history, cache(&[(3, 100)]));
    // An epoch that wrote nothing is kept: the next starts where it started.
    history
        .append(EpochEntry {
            epoch: 5,
            start: 100,
        })
        .unwrap();
    assert_eq!(history.last_epoch(), Some(5));
    assert_eq!(history.end_of(3, 900), Some(100));
}

#[test]
fn from_entries_refuses_an_unordered_list() {
    let entries = [
        EpochEntry { epoch: 2, start: 0 },
        EpochEntry { epoch: 1, start: 5 },
    ];
    assert_eq!(
        EpochCache::from_entries(&entries),
        Err(EpochError::EpochNotIncreasing { last: 2, epoch: 1 })
    );
}

#[test]
fn truncate_from_drops_entries_starting_at_or_after_the_offset() {
    let mut history = cache(&[(1, 0), (2, 100), (4, 300), (6, 300)]);
    history.truncate_from(301);
    assert_eq!(history.len(), 4);
    history.truncate_from(300);
    assert_eq!(history, cache(&[(1, 0), (2, 100)]));
    history.truncate_from(50);
    assert_eq!(history, cache(&[(1, 0)]));
    history.truncate_from(0);
    assert!(history.is_empty());
    assert_eq!(history.last_epoch(), None);
}

#[test]
fn ends_and_covering_entries() {
    let history = cache(&[(1, 0), (2, 100), (4, 300)]);
    assert_eq!(history.end_of(1, 500), Some(100));
    assert_eq!(history.end_of(4, 500), Some(500));
    assert_eq!(history.end_of(3, 500), None);
    assert_eq!(
        history.get(2),
        Some(EpochEntry {
            epoch: 2,
            start: 100
        })
    );
    let (entry, end) = history.covering(150).unwrap();
    assert_eq!((entry.epoch, end), (2, Some(300)));
    let (entry, end) = history.covering(300).unwrap();
    assert_eq!((entry.epoch, end), (4, None));
    assert!(cache(&[(2, 10)]).covering(9).is_none());
    assert!(EpochCache::new().covering(0).is_none());
}

/// One node of the model: its log as unique byte tags and its epoch history.
#[derive(Clone, Default)]
struct Node {
    log: Vec<u64>,
    epochs: EpochCache,
}

fn common_prefix(first: &[u64], second: &[u64]) -> usize {
    first
        .iter()
        .zip(second)
        .take_while(|(left, right)| left == right)
        .count()
}

/// The follower syncs from the leader the way the protocol does: consistent point,
/// truncate, then copy up to `upto` bytes, appending the leader's entry whenever the
/// copied bytes enter a newer epoch.
fn follow(follower: &mut Node, leader: &Node, upto: usize, seed: u64) {
    let point = if follower.epochs.is_empty() {
        assert!(follower.log.is_empty(), "seed {seed}: data without epochs");
        0
    } else {
        let found = find_consistent_point(
            &follower.epochs,
            follower.log.len() as u64,
            &leader.epochs,
            leader.log.len() as u64,
        );
        found.unwrap_or_else(|| panic!("seed {seed}: no consistent point")) as usize
    };
    let shared = common_prefix(&follower.log, &leader.log);
    assert!(
        point <= shared,
        "seed {seed}: point {point} past the shared prefix {shared}"
    );
    // Within this model the point is exactly the shared prefix: nothing shared is lost.
    assert_eq!(
        point, shared,
        "seed {seed}: point {point} short of {shared}"
    );
    follower.log.truncate(point);
    follower.epochs.truncate_from(point as u64);
    for at in point..upto.max(point) {
        let (entry, _) = leader
            .epochs
            .covering(at as u64)
            .expect("leader covers its log");
        if follower.epochs.last_epoch() != Some(entry.epoch) {
            follower
                .epochs
                .append(entry)
                .expect("leader entries append in order");
        }
        follower.log.push(leader.log[at]);
    }
}

fn write(leader: &mut Node, rng: &mut SplitMix64, next_tag: &mut u64) {
    for _ in 0..rng.range(0, 20) {
        leader.log.push(*next_tag);
        *next_tag += 1;
    }
}

fn run_history(seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut nodes = [Node::default(), Node::default()];
    let mut leader = 0;
    let mut epoch = 1;
    nodes[0]
        .epochs
        .append(EpochEntry { epoch, start: 0 })
        .unwrap();
    let mut next_tag = 0;
    for _ in 0..40 {
        write(&mut nodes[leader], &mut rng, &mut next_tag);
        if rng.chance(70) {
            let (leading, following) = pick(&mut nodes, leader);
            let upto = rng.range(0, leading.log.len() as u64 + 1) as usize;
            follow(following, leading, upto, seed);
        }
        // A node that never copied anything shares no history with the master: electing
        // it is the unclean election that loses everything, outside this model.
        if rng.chance(30) && !nodes[1 - leader].epochs.is_empty() {
            // Failover: the follower becomes master at its own max, under a new epoch;
            // whatever the old master had beyond it is now a divergent tail.
            leader = 1 - leader;
            epoch += rng.range(1, 3) as u32;
            let start = nodes[leader].log.len() as u64;
            nodes[leader]
                .epochs
                .append(EpochEntry { epoch, start })
                .unwrap();
        }
    }
    let (leading, following) = pick(&mut nodes, leader);
    let end = leading.log.len();
    follow(following, leading, end, seed);
    assert_eq!(following.log, leading.log, "seed {seed}: full copy differs");
}

fn pick(nodes: &mut [Node; 2], leader: usize) -> (&Node, &mut Node) {
    let (first, second) = nodes.split_at_mut(1);
    if leader == 0 {
        (&first[0], &mut second[0])
    } else {
        (&second[0], &mut first[0])
    }
}

#[test]
fn random_histories_truncate_to_the_shared_prefix_and_never_past_a_divergence() {
    for seed in 0..500 {
        run_history(seed);
    }
}
