//! What the real-process replication tests do to a broker group: start a SYNC_MASTER and
//! its slave streaming ([`StreamingPair`]); send under load from several concurrent
//! senders, each send timed and its answer kept ([`SendLoad`]); read every queue of a
//! topic back with pulls ([`read_topic`]); and look at a shard's CommitLog files
//! ([`commit_log_bytes`]).
//!
//! Every sender is a thread with its own runtime and one connection of the in-project
//! client, so a send that hangs holds up only its sender, and its time says so.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::queue_request;

use super::process_cluster::{
    create_topic, send, BrokerSpec, Proc, ProcessCluster, REQUEST_TIMEOUT,
};
use super::{pull_records, run_local};

/// Messages per pull when reading a queue back.
const PULL_BATCH: i32 = 32;

/// Shard `shard`'s CommitLog under the store root `root`: every segment in name order,
/// concatenated, without the zeros after its end (a segment is preallocated, so the
/// bytes past the last record are zeros on a master and on a slave alike). No directory
/// yet is an empty log.
///
/// The broker may be writing while this reads. It writes its log front to back, so the
/// files are read back to front (the last segment first, each from its end in
/// [`READ_CHUNK`]s): bytes seen at an offset were written before every lower offset is
/// read, and the copy is a state the log really passed through. Read front to back, a
/// chunk read before the writer reached it and the next one read after would leave a
/// hole of zeros in the middle of the copy.
pub fn commit_log_bytes(root: &Path, shard: u8) -> Vec<u8> {
    let dir = root.join(format!("shard-{shard}")).join("commitlog");
    let mut names: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|entry| entry.expect("a directory entry").file_name())
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("read {}: {error}", dir.display()),
    };
    names.sort();
    let mut files = Vec::new();
    for name in names.iter().rev() {
        let path = dir.join(name);
        files.push(read_back_to_front(&path));
    }
    let mut bytes: Vec<u8> = files.into_iter().rev().flatten().collect();
    let end = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1);
    bytes.truncate(end);
    bytes
}

/// How much of a segment [`commit_log_bytes`] reads at a time.
const READ_CHUNK: usize = 64 * 1024;

/// The file at `path`, its chunks read from the last to the first.
fn read_back_to_front(path: &Path) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let len = file.metadata().expect("a segment's length").len() as usize;
    let mut bytes = vec![0u8; len];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(READ_CHUNK);
        file.read_exact_at(&mut bytes[start..end], start as u64)
            .unwrap_or_else(|e| panic!("{} at {start}: {e}", path.display()));
        end = start;
    }
    bytes
}

/// One send of a [`SendLoad`]: what was sent, how long its answer took, and the answer
/// (`code`, `queueOffset`) or the client's error (the connection closed, a timeout).
#[derive(Clone, Debug)]
pub struct Sent {
    pub sender: usize,
    pub queue: i32,
    pub body: Vec<u8>,
    /// When the request was written.
    pub started: Instant,
    pub took: Duration,
    pub answer: Result<(i32, i64), String>,
}

impl Sent {
    pub fn code(&self) -> Option<i32> {
        self.answer.as_ref().ok().map(|&(code, _)| code)
    }

    pub fn is_ok(&self) -> bool {
        self.code() == Some(response::SUCCESS)
    }
}

/// The body of message `n` of `sender`: `body_len` bytes, different for every message and
/// not text, so a byte out of place anywhere shows.
pub fn load_body(sender: usize, n: u64, body_len: usize) -> Vec<u8> {
    let mut body = format!("s{sender}-n{n}|").into_bytes();
    let mut x = (sender as u64) << 32 ^ n ^ 0x9e37_79b9_7f4a_7c15;
    while body.len() < body_len {
        // xorshift64: cheap, and every message's bytes differ.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        body.push(x as u8);
    }
    body.truncate(body_len.max(1));
    body
}

/// Concurrent senders, each sending to `topic`'s `queues` in turn until stopped, or until
/// one of its sends fails (a closed connection: nothing more would be answered on it).
pub struct SendLoad {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
    threads: Vec<JoinHandle<()>>,
}

impl SendLoad {
    /// Starts `senders` senders of `body_len`-byte messages to `broker`.
    pub fn start(
        broker: SocketAddr,
        topic: &str,
        queues: &[i32],
        senders: usize,
        body_len: usize,
    ) -> SendLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..senders)
            .map(|sender| {
                let (stop, sent) = (stop.clone(), sent.clone());
                let (topic, queues) = (topic.to_string(), queues.to_vec());
                std::thread::spawn(move || {
                    run_local(false, async move {
                        send_until_stopped(broker, &topic, &queues, sender, body_len, &stop, &sent)
                            .await;
                    });
                })
            })
            .collect();
        SendLoad {
            stop,
            sent,
            threads,
        }
    }

    /// A copy of every send answered or failed so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().expect("the load's list").clone()
    }

    /// How many sends so far satisfy `which`.
    pub fn count(&self, which: impl Fn(&Sent) -> bool) -> usize {
        self.sent
            .lock()
            .expect("the load's list")
            .iter()
            .filter(|s| which(s))
            .count()
    }

    /// Stops every sender after its send in flight and returns every send.
    pub fn finish(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a sender panicked");
        }
        let sent = self.sent.lock().expect("the load's list");
        sent.clone()
    }
}

async fn send_until_stopped(
    broker: SocketAddr,
    topic: &str,
    queues: &[i32],
    sender: usize,
    body_len: usize,
    stop: &AtomicBool,
    sent: &Mutex<Vec<Sent>>,
) {
    let client = Client::connect(broker)
        .await
        .expect("a sender connects to the broker");
    client.set_timeout(REQUEST_TIMEOUT);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let queue = queues[(n as usize + sender) % queues.len()];
        let body = load_body(sender, n, body_len);
        let started = Instant::now();
        let answer = client
            .send_message(topic, queue, &body, None, None)
            .await
            .map(|answer| {
                let offset = answer
                    .ext_fields
                    .get("queueOffset")
                    .and_then(|offset| offset.parse().ok())
                    .unwrap_or(-1);
                (answer.code, offset)
            })
            .map_err(|error| error.to_string());
        let failed = answer.is_err();
        sent.lock().expect("the load's list").push(Sent {
            sender,
            queue,
            body,
            started,
            took: started.elapsed(),
            answer,
        });
        if failed {
            return;
        }
        n += 1;
    }
}

/// Every message of `topic`'s `queues` on the broker at `broker`, pulled from offset 0 up
/// to each queue's max offset: `(queue, queue offset) -> body`.
pub fn read_topic(
    broker: SocketAddr,
    topic: &str,
    queues: &[i32],
) -> BTreeMap<(i32, u64), Vec<u8>> {
    let topic = topic.to_string();
    let queues = queues.to_vec();
    run_local(false, async move {
        let client = Client::connect(broker).await.expect("the reader connects");
        client.set_timeout(REQUEST_TIMEOUT);
        let mut held = BTreeMap::new();
        for queue in queues {
            let answer = client
                .request(queue_request(request::GET_MAX_OFFSET, &topic, queue))
                .await
                .expect("GET_MAX_OFFSET is answered");
            assert_eq!(
                answer.code,
                response::SUCCESS,
                "{broker} {topic}/{queue}: {answer:?}"
            );
            let max: u64 = answer.ext_fields["offset"].parse().expect("a max offset");
            let mut next = 0;
            while next < max {
                let answer = client
                    .pull(&topic, queue, next, PULL_BATCH, None)
                    .await
                    .expect("the pull is answered");
                assert_eq!(
                    answer.code,
                    response::SUCCESS,
                    "{broker} {topic}/{queue} at {next} of {max}: {:?}",
                    answer.remark
                );
                for record in pull_records(&answer.body) {
                    let offset = record.queue_offset as u64;
                    assert_eq!(offset, next, "{broker} {topic}/{queue}: a gap");
                    held.insert((queue, offset), record.body.to_vec());
                    next += 1;
                }
            }
        }
        held
    })
}

/// The shard count of the replication tests' brokers: two, so shard 1's stream is handed
/// over from shard 0's HA listener.
pub const GROUP_SHARDS: u8 = 2;

/// A master of group `name` with `role` (`ASYNC_MASTER`, `SYNC_MASTER`) and
/// [`GROUP_SHARDS`] shards.
pub fn group_master(name: &str, role: &str) -> BrokerSpec {
    BrokerSpec::master(name)
        .set("shards", GROUP_SHARDS)
        .set("brokerRole", role)
}

/// Slave `id` of group `name` following the master at `ha` (`haMasterAddress`), with
/// [`GROUP_SHARDS`] shards.
pub fn group_slave(name: &str, id: u64, ha: SocketAddr) -> BrokerSpec {
    BrokerSpec::master(name)
        .id(id)
        .set("shards", GROUP_SHARDS)
        .set("brokerRole", "SLAVE")
        .set("haMasterAddress", ha)
}

/// Whether every shard's CommitLog of `slave` equals `master`'s; with `prefix`, panics if
/// one is not a prefix of the master's (read the slave first: the master only grows).
///
/// A zero byte where they part is no proof of a splice: a write the slave is making can
/// be caught half done (a copy routine may store a frame's end before its middle), so
/// that look counts as "not equal yet". A slave byte that is not zero and not the
/// master's is a splice; a hole that stays is caught by the wait for equality.
pub fn logs_equal(master: &Proc, slave: &Proc, prefix: bool) -> bool {
    (0..GROUP_SHARDS).all(|shard| {
        let behind = slave.commit_log(shard);
        let ahead = master.commit_log(shard);
        let at = ahead
            .iter()
            .zip(&behind)
            .take_while(|(a, b)| a == b)
            .count();
        let spliced = at < behind.len() && behind[at] != 0;
        assert!(
            !prefix || !spliced,
            "shard {shard}: {}'s CommitLog ({} bytes) is not a prefix of {}'s ({} bytes): \
             byte {at} is {:#04x} on the slave, {:?} on the master",
            slave.name,
            behind.len(),
            master.name,
            ahead.len(),
            behind[at],
            ahead.get(at)
        );
        ahead == behind
    })
}

/// Waits (at most `limit`) until `slave`'s CommitLogs equal `master`'s, checking at every
/// look that they are a prefix when `prefix`.
pub fn wait_logs_equal(
    cluster: &ProcessCluster,
    master: &str,
    slave: &str,
    limit: Duration,
    prefix: bool,
) {
    let find = |name: &str| {
        cluster
            .brokers
            .iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no broker {name}"))
    };
    let (m, s) = (find(master), find(slave));
    cluster.wait_until(
        limit,
        &format!("{slave}'s CommitLogs equal to {master}'s"),
        || logs_equal(m, s, prefix),
    );
}

/// Creates `topic` with `queues` read and write queues on every broker of `brokers` (a
/// slave keeps its own topic table: topics are not replicated yet).
pub fn create_topic_on(brokers: &[SocketAddr], topic: &str, queues: u32) {
    for &broker in brokers {
        create_topic(broker, topic, queues, queues, 6);
    }
}

/// Sends one message at a time to `broker` until one is SEND_OK (a SYNC_MASTER answers
/// SLAVE_NOT_AVAILABLE until its slave streams), for at most `limit`, on every queue of
/// `queues` (each shard has its own stream). Panics with the logs otherwise.
pub fn wait_send_ok(
    cluster: &ProcessCluster,
    broker: SocketAddr,
    topic: &str,
    queues: &[i32],
    limit: Duration,
) {
    for &queue in queues {
        cluster.wait_until(limit, &format!("SEND_OK on {topic}/{queue}"), || {
            send(broker, topic, queue, b"probe").code == response::SUCCESS
        });
    }
}

/// The group of a [`StreamingPair`], and its master's and slave's names in the cluster
/// (`<brokerName>-<brokerId>`).
pub const PAIR_GROUP: &str = "broker-a";
pub const PAIR_MASTER: &str = "broker-a-0";
pub const PAIR_SLAVE: &str = "broker-a-1";

/// The master of a [`StreamingPair`] as [`StreamingPair::start`] makes it: a SYNC_MASTER of
/// [`PAIR_GROUP`] with [`GROUP_SHARDS`] shards. A test adds its own keys with
/// [`BrokerSpec::set`] and hands it to [`StreamingPair::start_with`].
pub fn pair_master() -> BrokerSpec {
    group_master(PAIR_GROUP, "SYNC_MASTER")
}

/// A SYNC_MASTER and its slave, streaming on every shard: one name server, the master
/// ([`PAIR_MASTER`]), its slave ([`PAIR_SLAVE`], id 1, following the master's HA port),
/// a topic created on both (a slave keeps its own topic table until it copies the
/// master's), and a SEND_OK on each of the topic's queues (a SYNC_MASTER answers one only
/// once the slave streams the queue's shard).
pub struct StreamingPair {
    pub cluster: ProcessCluster,
    /// The master's remoting address.
    pub master: SocketAddr,
    /// The slave's remoting address.
    pub slave: SocketAddr,
    /// The master's HA address (the slave's `haMasterAddress`).
    pub ha: SocketAddr,
}

impl StreamingPair {
    /// [`StreamingPair::start_with`] the master of [`pair_master`].
    pub fn start(topic: &str, queues: &[i32], limit: Duration) -> StreamingPair {
        StreamingPair::start_with(pair_master(), topic, queues, limit)
    }

    /// Starts the pair from `master` (a master of [`PAIR_GROUP`]), creates `topic` with
    /// `queues` on both brokers and waits (at most `limit` a queue) for a SEND_OK on each.
    pub fn start_with(
        master: BrokerSpec,
        topic: &str,
        queues: &[i32],
        limit: Duration,
    ) -> StreamingPair {
        assert_eq!(
            (master.name.as_str(), master.id),
            (PAIR_GROUP, 0),
            "a pair's master is the master of {PAIR_GROUP}"
        );
        let mut cluster = ProcessCluster::start(1, vec![master]);
        let ha = cluster.broker(PAIR_MASTER).ha_addr();
        cluster.add_broker(group_slave(PAIR_GROUP, 1, ha));
        let master = cluster.broker(PAIR_MASTER).addr;
        let slave = cluster.broker(PAIR_SLAVE).addr;
        let count = u32::try_from(queues.len()).expect("a queue count");
        create_topic_on(&[master, slave], topic, count);
        wait_send_ok(&cluster, master, topic, queues, limit);
        StreamingPair {
            cluster,
            master,
            slave,
            ha,
        }
    }

    /// Waits (at most `limit`) until the slave's CommitLogs equal the master's, checking
    /// at every look that they are a prefix of them.
    pub fn wait_caught_up(&self, limit: Duration) {
        wait_logs_equal(&self.cluster, PAIR_MASTER, PAIR_SLAVE, limit, true);
    }
}
