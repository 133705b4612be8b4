//! Rates (TPS) the way RocketMQ reports them, and the per-topic and per-group figures
//! behind the operator metrics (issue 23, items 9 and 11).
//!
//! RocketMQ measures two kinds of rate, and so does the node:
//! - the broker's own (`StoreStatsService`): a snapshot of each counter every second,
//!   601 kept, and the rate over the last 10, 60 and 600 of them, written as
//!   `"<10 s> <1 min> <10 min>"` (`putTps`, `getTransferredTps`, ... of
//!   GET_BROKER_RUNTIME_INFO). Where fewer snapshots exist (the first ten minutes), the
//!   rate is taken over those there are (Java leaves the figure empty instead, which its
//!   own `clusterList` cannot parse);
//! - a topic's or group's (`StatsItem` of `BrokerStatsManager`): a snapshot every 10 s,
//!   7 kept, and the rate between the first and the last, so over the last minute
//!   (`topicPutTps` of GET_TOPIC_STATS_INFO, `consumeTps` of GET_CONSUME_STATS). A key seen
//!   for the first time starts with Java's virtual snapshot of 0, one period before.
//!
//! Who writes what: the counters live on their shard's thread (`Cell`s of [`GetTable`]
//! and of the store's ConsumeQueues, atomics of [`super::ShardMetrics`]), with no lock on
//! the send or pull path. Once a second the shard's sampler ([`ShardSampler`]) reads them
//! with the time of the store's clock ([`crate::clock::Clock`], tokio's time, so tests
//! that pause it get exact rates), and publishes what it derived into the shard's
//! metrics, where requests and scrapes read it.
//!
//! Bounds: a shard tracks at most `metrics_max_topics` topics and `metrics_max_groups`
//! (group, topic) pairs ([`StatsCaps`]); keys past the cap are left out of the per-key
//! figures and counted ([`KeyFigures::topics_over_cap`], [`GetTable::uncounted`]), so
//! traffic can never add series or memory without bound. Keys already tracked keep their
//! place; a key that disappears (its topic deleted, its group forgotten) frees it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The broker's snapshots: one a second, and the 10 s, 1 min and 10 min rates.
pub const BROKER_SAMPLES: usize = 601;
/// The spans of the broker's rates, in snapshots (seconds).
pub const BROKER_SPANS: [usize; 3] = [10, 60, 600];
/// A key's snapshots: one every [`KEY_PERIOD_SECS`] seconds, 7 kept (a minute's span).
pub const KEY_SAMPLES: usize = 7;
/// Seconds between two snapshots of the per-key counters.
pub const KEY_PERIOD_SECS: u64 = 10;

/// The default of `metrics_max_topics` and of `metrics_max_groups`.
pub const DEFAULT_MAX_KEYS: usize = 1000;

/// How many keys a shard tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsCaps {
    /// Topics with per-topic figures (`metrics_max_topics`).
    pub topics: usize,
    /// (group, topic) pairs with per-group figures (`metrics_max_groups`).
    pub groups: usize,
}

impl Default for StatsCaps {
    fn default() -> StatsCaps {
        StatsCaps {
            topics: DEFAULT_MAX_KEYS,
            groups: DEFAULT_MAX_KEYS,
        }
    }
}

/// Snapshots of one counter, `(ms, count)`, oldest first, at most `capacity`.
#[derive(Clone, Debug)]
pub struct Window {
    samples: VecDeque<(i64, u64)>,
    capacity: usize,
}

impl Window {
    pub fn new(capacity: usize) -> Window {
        assert!(capacity >= 2, "a rate needs two snapshots");
        Window {
            samples: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Adds the snapshot `count` taken at `now_ms`, dropping the oldest past the capacity.
    pub fn push(&mut self, now_ms: i64, count: u64) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back((now_ms, count));
    }

    /// Per second between the newest snapshot and the one `span` before it (the oldest
    /// there is when there are fewer); 0 with one snapshot or none. A counter that went
    /// back (a reset) counts as 0.
    pub fn per_second(&self, span: usize) -> f64 {
        let len = self.samples.len();
        if len < 2 || span == 0 {
            return 0.0;
        }
        let (last_ms, last) = self.samples[len - 1];
        let (first_ms, first) = self.samples[len - 1 - span.min(len - 1)];
        let elapsed = last_ms - first_ms;
        if elapsed <= 0 {
            return 0.0;
        }
        last.saturating_sub(first) as f64 * 1000.0 / elapsed as f64
    }

    /// Per second over every snapshot kept (a key's minute).
    pub fn per_second_all(&self) -> f64 {
        self.per_second(self.capacity)
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// A rate over the 10 s, 1 min and 10 min spans.
pub type Tps = [f64; 3];

/// Java's text of a [`Tps`]: `"12.5 11.0 10.2"` (the form `clusterList` splits on
/// spaces and parses the first of).
pub fn java_tps(tps: Tps) -> String {
    tps.iter()
        .map(|rate| java_double(*rate))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A rate rounded to two decimals, written as Java's `Double.toString` writes it for the
/// sizes rates have (`0.0`, `12.5`, `3000.25`).
pub fn java_double(value: f64) -> String {
    let rounded = (value * 100.0).round() / 100.0;
    if rounded.is_finite() && rounded.abs() < 1e7 {
        format!("{rounded:?}")
    } else {
        // Java switches to E notation at 10^7; keep plain digits, which it parses too.
        format!("{rounded:.1}")
    }
}

/// The broker's counters at one instant, as [`BrokerRates::sample`] takes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BrokerCounters {
    /// Messages stored.
    pub puts: u64,
    /// Pulls that found messages.
    pub gets_found: u64,
    /// Pulls that found none.
    pub gets_missed: u64,
    /// Messages pulls returned.
    pub transferred: u64,
}

/// The broker's rates as GET_BROKER_RUNTIME_INFO reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateFigures {
    pub put: Tps,
    pub get_found: Tps,
    pub get_missed: Tps,
    pub transferred: Tps,
}

impl RateFigures {
    /// `getTotalTps`: found and missed pulls together.
    pub fn get_total(&self) -> Tps {
        std::array::from_fn(|i| self.get_found[i] + self.get_missed[i])
    }
}

/// The broker's windows, one snapshot a second.
#[derive(Clone, Debug)]
pub struct BrokerRates {
    put: Window,
    get_found: Window,
    get_missed: Window,
    transferred: Window,
}

impl Default for BrokerRates {
    fn default() -> BrokerRates {
        BrokerRates {
            put: Window::new(BROKER_SAMPLES),
            get_found: Window::new(BROKER_SAMPLES),
            get_missed: Window::new(BROKER_SAMPLES),
            transferred: Window::new(BROKER_SAMPLES),
        }
    }
}

impl BrokerRates {
    /// Takes the snapshot of `counters` at `now_ms`; the rates after it.
    pub fn sample(&mut self, now_ms: i64, counters: BrokerCounters) -> RateFigures {
        self.put.push(now_ms, counters.puts);
        self.get_found.push(now_ms, counters.gets_found);
        self.get_missed.push(now_ms, counters.gets_missed);
        self.transferred.push(now_ms, counters.transferred);
        let tps = |window: &Window| BROKER_SPANS.map(|span| window.per_second(span));
        RateFigures {
            put: tps(&self.put),
            get_found: tps(&self.get_found),
            get_missed: tps(&self.get_missed),
            transferred: tps(&self.transferred),
        }
    }
}

/// Messages and bytes of a key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Counts {
    pub messages: u64,
    pub bytes: u64,
}

/// What pulls on this shard returned, by topic and group, and whether they found
/// anything. Shard-local (`Cell`s, no lock): the pull path counts, the sampler reads.
#[derive(Debug)]
pub struct GetTable {
    /// topic → group → counts; looked up by `&str`, so a pull allocates only for a pair
    /// seen for the first time.
    by_topic: RefCell<HashMap<String, HashMap<String, Counts>>>,
    pairs: Cell<usize>,
    cap: usize,
    found: Cell<u64>,
    missed: Cell<u64>,
    transferred: Cell<u64>,
    uncounted: Cell<u64>,
}

impl GetTable {
    /// A table of at most `cap` (group, topic) pairs.
    pub fn new(cap: usize) -> GetTable {
        GetTable {
            by_topic: RefCell::default(),
            pairs: Cell::new(0),
            cap,
            found: Cell::new(0),
            missed: Cell::new(0),
            transferred: Cell::new(0),
            uncounted: Cell::new(0),
        }
    }

    /// One pull of `group` on `topic` that returned `messages` messages of `bytes` bytes
    /// (0: it found none).
    pub fn count(&self, topic: &str, group: &str, messages: u64, bytes: u64) {
        if messages == 0 {
            self.missed.set(self.missed.get() + 1);
            return;
        }
        self.found.set(self.found.get() + 1);
        self.transferred.set(self.transferred.get() + messages);
        let mut by_topic = self.by_topic.borrow_mut();
        if let Some(counts) = by_topic
            .get_mut(topic)
            .and_then(|groups| groups.get_mut(group))
        {
            counts.messages += messages;
            counts.bytes += bytes;
            return;
        }
        if self.pairs.get() >= self.cap {
            self.uncounted.set(self.uncounted.get() + messages);
            return;
        }
        self.pairs.set(self.pairs.get() + 1);
        by_topic
            .entry(topic.to_owned())
            .or_default()
            .insert(group.to_owned(), Counts { messages, bytes });
    }

    /// Forgets the pairs for which `keep(topic, group)` is false (their topic or group is
    /// gone), freeing their places.
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        let mut by_topic = self.by_topic.borrow_mut();
        let mut pairs = 0;
        by_topic.retain(|topic, groups| {
            groups.retain(|group, _| keep(topic, group));
            pairs += groups.len();
            !groups.is_empty()
        });
        self.pairs.set(pairs);
    }

    /// Every pair's counts, as `((topic, group), counts)`.
    pub fn snapshot(&self) -> Vec<((String, String), Counts)> {
        let by_topic = self.by_topic.borrow();
        let mut all = Vec::with_capacity(self.pairs.get());
        for (topic, groups) in by_topic.iter() {
            for (group, counts) in groups {
                all.push(((topic.clone(), group.clone()), *counts));
            }
        }
        all
    }

    /// Pulls that found messages, pulls that found none, messages returned.
    pub fn totals(&self) -> (u64, u64, u64) {
        (self.found.get(), self.missed.get(), self.transferred.get())
    }

    /// Pulled messages not counted by group because the table was full.
    pub fn uncounted(&self) -> u64 {
        self.uncounted.get()
    }
}

/// One topic's figures on one shard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopicFigures {
    pub topic: String,
    /// Stored by this process (since the node started).
    pub put: Counts,
    /// Returned by pulls (since the node started), every group.
    pub got: Counts,
    /// Messages stored per second over the last minute (`topicPutTps`).
    pub put_tps: f64,
}

/// One (group, topic) pair's figures on one shard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupFigures {
    pub group: String,
    pub topic: String,
    /// Returned to the group's pulls (since the node started).
    pub got: Counts,
    /// Messages pulled per second over the last minute (`consumeTps`).
    pub get_tps: f64,
    /// The queues' ends minus the group's committed offsets (a queue without a commit
    /// from 0), over the topic's queues on this shard; `None` when the group has no
    /// committed offset on the topic.
    pub lag: Option<u64>,
}

/// A shard's per-key figures at the last key snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyFigures {
    /// By topic name.
    pub topics: Vec<TopicFigures>,
    /// By (group, topic).
    pub groups: Vec<GroupFigures>,
    /// Topics left out because `metrics_max_topics` were tracked.
    pub topics_over_cap: u64,
    /// (group, topic) pairs left out because `metrics_max_groups` were tracked.
    pub groups_over_cap: u64,
}

/// What the sampler reads for the per-key figures.
#[derive(Clone, Debug, Default)]
pub struct KeyInputs {
    /// `(topic, messages, bytes)` stored by this process, every topic of the shard.
    pub puts: Vec<(String, u64, u64)>,
    /// The pull table's pairs.
    pub gets: Vec<((String, String), Counts)>,
    /// `((topic, group), lag)` of every pair with a committed offset on a queue of this
    /// shard.
    pub lags: Vec<((String, String), u64)>,
}

/// Per-key windows with a bound on the keys, the tracked ones keeping their place.
#[derive(Debug)]
struct Tracked<K> {
    windows: HashMap<K, Window>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone + Ord> Tracked<K> {
    fn new(cap: usize) -> Tracked<K> {
        Tracked {
            windows: HashMap::new(),
            cap,
        }
    }

    /// Snapshots `values` at `now_ms`: drops the windows of keys not in them, keeps the
    /// tracked keys, adds new keys (in key order) while there is room. The tracked keys
    /// with their rates, and how many keys were left out.
    fn sample(&mut self, now_ms: i64, values: &BTreeMap<K, u64>) -> (BTreeMap<K, f64>, u64) {
        self.windows.retain(|key, _| values.contains_key(key));
        let mut left_out = 0;
        for (key, value) in values {
            if let Some(window) = self.windows.get_mut(key) {
                window.push(now_ms, *value);
                continue;
            }
            if self.windows.len() >= self.cap {
                left_out += 1;
                continue;
            }
            let mut window = Window::new(KEY_SAMPLES);
            // Java's first snapshot of a new item: 0, one period before.
            window.push(now_ms - KEY_PERIOD_SECS as i64 * 1000, 0);
            window.push(now_ms, *value);
            self.windows.insert(key.clone(), window);
        }
        let rates = self
            .windows
            .iter()
            .map(|(key, window)| (key.clone(), window.per_second_all()))
            .collect();
        (rates, left_out)
    }
}

/// A shard's sampler: the broker's rates every second, the per-key figures every
/// [`KEY_PERIOD_SECS`]. Owned by the shard's sampling task; pure, so tests drive it with
/// made-up times.
#[derive(Debug)]
pub struct ShardSampler {
    broker: BrokerRates,
    topics: Tracked<String>,
    groups: Tracked<(String, String)>,
    last_keys_ms: Option<i64>,
}

impl ShardSampler {
    pub fn new(caps: StatsCaps) -> ShardSampler {
        ShardSampler {
            broker: BrokerRates::default(),
            topics: Tracked::new(caps.topics),
            groups: Tracked::new(caps.groups),
            last_keys_ms: None,
        }
    }

    /// The broker's snapshot at `now_ms`.
    pub fn sample_broker(&mut self, now_ms: i64, counters: BrokerCounters) -> RateFigures {
        self.broker.sample(now_ms, counters)
    }

    /// Whether the per-key snapshot is due at `now_ms` (the first one at once, then every
    /// [`KEY_PERIOD_SECS`]).
    pub fn keys_due(&self, now_ms: i64) -> bool {
        self.last_keys_ms
            .is_none_or(|last| now_ms - last >= KEY_PERIOD_SECS as i64 * 1000)
    }

    /// The per-key snapshot of `inputs` at `now_ms`.
    pub fn sample_keys(&mut self, now_ms: i64, inputs: KeyInputs) -> KeyFigures {
        self.last_keys_ms = Some(now_ms);
        let puts: BTreeMap<String, Counts> = inputs
            .puts
            .into_iter()
            .map(|(topic, messages, bytes)| (topic, Counts { messages, bytes }))
            .collect();
        let put_messages = puts
            .iter()
            .map(|(topic, counts)| (topic.clone(), counts.messages))
            .collect();
        let (put_tps, topics_over_cap) = self.topics.sample(now_ms, &put_messages);
        let gets: BTreeMap<(String, String), Counts> = inputs.gets.into_iter().collect();
        let lags: BTreeMap<(String, String), u64> = inputs.lags.into_iter().collect();
        // Every pair pulled from or with a commit; a pair with commits only reads 0.
        let mut got_messages: BTreeMap<(String, String), u64> =
            lags.keys().map(|pair| (pair.clone(), 0)).collect();
        for (pair, counts) in &gets {
            got_messages.insert(pair.clone(), counts.messages);
        }
        let (get_tps, groups_over_cap) = self.groups.sample(now_ms, &got_messages);
        let mut topics: BTreeMap<String, TopicFigures> = put_tps
            .into_iter()
            .map(|(topic, put_tps)| {
                let figures = TopicFigures {
                    put: puts.get(&topic).copied().unwrap_or_default(),
                    put_tps,
                    topic: topic.clone(),
                    got: Counts::default(),
                };
                (topic, figures)
            })
            .collect();
        for ((topic, _), counts) in &gets {
            // A topic pulled from but without a queue here (deleted since) is left out.
            if let Some(figures) = topics.get_mut(topic) {
                figures.got.messages += counts.messages;
                figures.got.bytes += counts.bytes;
            }
        }
        let mut groups: Vec<GroupFigures> = get_tps
            .into_iter()
            .map(|((topic, group), get_tps)| {
                let pair = (topic, group);
                let figures = GroupFigures {
                    got: gets.get(&pair).copied().unwrap_or_default(),
                    lag: lags.get(&pair).copied(),
                    get_tps,
                    group: pair.1,
                    topic: pair.0,
                };
                figures
            })
            .collect();
        groups.sort_by(|a, b| (&a.group, &a.topic).cmp(&(&b.group, &b.topic)));
        KeyFigures {
            topics: topics.into_values().collect(),
            groups,
            topics_over_cap,
            groups_over_cap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_gives_the_rate_over_its_span_or_what_it_has() {
        let mut window = Window::new(601);
        assert_eq!(window.per_second(10), 0.0);
        window.push(0, 0);
        assert_eq!(window.per_second(10), 0.0, "one snapshot is no rate");
        // 100 a second for 5 s, then 1000 a second.
        for second in 1..=5 {
            window.push(second * 1000, second as u64 * 100);
        }
        assert_eq!(window.per_second(10), 100.0, "the 5 s there are");
        for second in 6..=20 {
            window.push(second * 1000, 500 + (second as u64 - 5) * 1000);
        }
        assert_eq!(window.per_second(10), 1000.0);
        // 20 s: 15 s at 1000 and 5 s at 100 over 20 s.
        assert_eq!(window.per_second(60), 15_500.0 / 20.0);
        assert_eq!(window.len(), 21);
    }

    #[test]
    fn a_full_window_drops_its_oldest_and_a_reset_reads_zero() {
        let mut window = Window::new(3);
        for (ms, count) in [(0, 0), (1000, 10), (2000, 30), (3000, 60)] {
            window.push(ms, count);
        }
        assert_eq!(window.len(), 3);
        assert_eq!(window.per_second(5), 25.0, "(60 - 10) over 2 s");
        window.push(4000, 5);
        assert_eq!(window.per_second(1), 0.0, "a counter that went back");
    }

    #[test]
    fn java_writes_rates_with_a_fraction() {
        assert_eq!(java_tps([0.0, 12.5, 1.0 / 3.0]), "0.0 12.5 0.33");
        assert_eq!(java_double(3000.256), "3000.26");
        assert_eq!(java_double(12_345_678.0), "12345678.0");
    }

    #[test]
    fn broker_rates_cover_ten_seconds_a_minute_and_ten_minutes() {
        let mut rates = BrokerRates::default();
        let mut figures = RateFigures::default();
        // 10 minutes at 50 puts a second, then 10 s at 250.
        let mut puts = 0;
        for second in 0..=600 {
            figures = rates.sample(
                second * 1000,
                BrokerCounters {
                    puts,
                    gets_found: 2 * second as u64,
                    ..BrokerCounters::default()
                },
            );
            puts += 50;
        }
        assert_eq!(figures.put, [50.0, 50.0, 50.0]);
        puts -= 50;
        for second in 601..=610 {
            puts += 250;
            figures = rates.sample(
                second * 1000,
                BrokerCounters {
                    puts,
                    gets_found: 2 * second as u64,
                    gets_missed: 0,
                    transferred: 0,
                },
            );
        }
        assert_eq!(figures.put[0], 250.0);
        assert_eq!(figures.put[1], (50.0 * 50.0 + 250.0 * 10.0) / 60.0);
        assert_eq!(figures.put[2], (50.0 * 590.0 + 250.0 * 10.0) / 600.0);
        assert_eq!(figures.get_found[0], 2.0);
        assert_eq!(figures.get_total()[0], 2.0);
    }

    #[test]
    fn the_get_table_counts_found_missed_and_stops_adding_pairs_at_its_cap() {
        let table = GetTable::new(2);
        table.count("T", "G1", 3, 300);
        table.count("T", "G1", 2, 200);
        table.count("T", "G1", 0, 0);
        table.count("U", "G1", 1, 10);
        table.count("V", "G9", 4, 40);
        assert_eq!(table.totals(), (4, 1, 10));
        assert_eq!(table.uncounted(), 4, "the third pair found the table full");
        let mut pairs = table.snapshot();
        pairs.sort();
        assert_eq!(
            pairs,
            [
                (
                    ("T".into(), "G1".into()),
                    Counts {
                        messages: 5,
                        bytes: 500
                    }
                ),
                (
                    ("U".into(), "G1".into()),
                    Counts {
                        messages: 1,
                        bytes: 10
                    }
                ),
            ]
        );
        // A pair gone frees its place.
        table.retain(|topic, _| topic != "U");
        table.count("V", "G9", 4, 40);
        assert_eq!(table.snapshot().len(), 2);
        assert_eq!(table.uncounted(), 4);
    }

    fn inputs(
        puts: &[(&str, u64)],
        gets: &[(&str, &str, u64)],
        lags: &[(&str, &str, u64)],
    ) -> KeyInputs {
        KeyInputs {
            puts: puts
                .iter()
                .map(|(topic, messages)| (topic.to_string(), *messages, messages * 100))
                .collect(),
            gets: gets
                .iter()
                .map(|(topic, group, messages)| {
                    (
                        (topic.to_string(), group.to_string()),
                        Counts {
                            messages: *messages,
                            bytes: messages * 100,
                        },
                    )
                })
                .collect(),
            lags: lags
                .iter()
                .map(|(topic, group, lag)| ((topic.to_string(), group.to_string()), *lag))
                .collect(),
        }
    }

    #[test]
    fn key_rates_are_over_the_last_minute_from_javas_first_snapshot_of_zero() {
        let mut sampler = ShardSampler::new(StatsCaps::default());
        let start = 1_700_000_000_000;
        assert!(sampler.keys_due(start));
        // 20 puts in the 10 s before the first snapshot: Java's virtual 0 makes it 2/s.
        let figures = sampler.sample_keys(start, inputs(&[("T", 20)], &[("T", "G", 10)], &[]));
        assert!(!sampler.keys_due(start + 9_999));
        assert!(sampler.keys_due(start + 10_000));
        assert_eq!(figures.topics[0].put_tps, 2.0);
        assert_eq!(figures.groups[0].get_tps, 1.0);
        // Then 30 puts every 10 s: past a minute, only the last minute counts.
        let mut figures = figures;
        for period in 1..=8 {
            let now = start + period * 10_000;
            figures = sampler.sample_keys(
                now,
                inputs(
                    &[("T", 20 + 30 * period as u64)],
                    &[("T", "G", 10 + 60 * period as u64)],
                    &[("T", "G", 7)],
                ),
            );
        }
        let topic = &figures.topics[0];
        assert_eq!(topic.topic, "T");
        assert_eq!(topic.put_tps, 3.0);
        assert_eq!(
            topic.put,
            Counts {
                messages: 260,
                bytes: 26_000
            }
        );
        assert_eq!(topic.got.messages, 490, "every group's pulls of the topic");
        let group = &figures.groups[0];
        assert_eq!((group.group.as_str(), group.topic.as_str()), ("G", "T"));
        assert_eq!(group.get_tps, 6.0);
        assert_eq!(group.lag, Some(7));
    }

    #[test]
    fn keys_past_the_caps_are_left_out_and_counted_and_the_tracked_keep_their_place() {
        let mut sampler = ShardSampler::new(StatsCaps {
            topics: 2,
            groups: 1,
        });
        let figures = sampler.sample_keys(
            0,
            inputs(&[("B", 1), ("C", 1)], &[("B", "G2", 1)], &[("B", "G1", 5)]),
        );
        assert_eq!(
            figures
                .topics
                .iter()
                .map(|t| t.topic.as_str())
                .collect::<Vec<_>>(),
            ["B", "C"]
        );
        assert_eq!(figures.groups.len(), 1);
        assert_eq!(figures.groups_over_cap, 1);
        // "A" sorts first but finds both places taken; "C" going frees one for it.
        let figures =
            sampler.sample_keys(10_000, inputs(&[("A", 1), ("B", 1), ("C", 1)], &[], &[]));
        assert_eq!(figures.topics_over_cap, 1);
        assert_eq!(
            figures
                .topics
                .iter()
                .map(|t| t.topic.as_str())
                .collect::<Vec<_>>(),
            ["B", "C"]
        );
        let figures = sampler.sample_keys(20_000, inputs(&[("A", 1), ("B", 1)], &[], &[]));
        assert_eq!(figures.topics_over_cap, 0);
        assert_eq!(figures.topics.len(), 2);
    }
}
