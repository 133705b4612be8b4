//! A broker group on the simulated network (D14): a master and a slave, each a one-shard
//! node of the cluster harness. What it shows: the slave's CommitLog is a byte prefix of
//! its master's at every look and equal once it caught up; SYNC_MASTER answers SEND_OK only
//! for what the slave holds, SLAVE_NOT_AVAILABLE at once with no slave, and within
//! `slaveTimeout` when the slave dies; a slave refuses sends; an old master with an
//! unreplicated tail, restarted as the slave of the promoted one, is truncated to the
//! shared prefix and never spliced; a master writes a slave's backlog in writes of about
//! `haSendBatchBytes`.

use crate::common;

use std::time::Duration;

use common::cluster::{reader_ip, SimCluster};
use common::run_local;
use ringmq::config::BrokerRole;
use ringmq::net::sim::{Direction, NetConfig, SimConnection};
use ringmq::net::Transport;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::response;
use ringmq::replication::decode::FromMasterDecoder;
use ringmq::replication::epochs::EpochCache;
use ringmq::replication::slave_state::{SlaveIdentity, SlaveLog, SlaveStream};
use ringmq::replication::wire::{encode_report, FromMaster, MASTER_HEADER_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOPIC: &str = "Replicated";
const MASTER: usize = 0;
const SLAVE: usize = 1;
/// How long the slave may take to catch up in these tests (all local, tiny logs).
const CATCH_UP: Duration = Duration::from_secs(10);

/// The shard's CommitLog, every segment in order, without the zeros after its end.
fn log_bytes(cluster: &SimCluster, node: usize) -> Vec<u8> {
    let dir = cluster.store_dir(node).join("shard-0").join("commitlog");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| entries.map(|entry| entry.unwrap().file_name()).collect())
        .unwrap_or_default();
    names.sort();
    let mut bytes = Vec::new();
    for name in names {
        bytes.extend(std::fs::read(dir.join(name)).unwrap());
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

/// Waits until the slave's log equals the master's, checking at every look that it is a
/// prefix; fails after [`CATCH_UP`].
async fn wait_caught_up(cluster: &SimCluster, master: usize, slave: usize) {
    wait_equal(cluster, master, slave, true).await;
}

/// Waits until node `slave`'s log equals node `master`'s; with `prefix`, checks at every
/// look that it is a prefix (not for an old master, which holds a tail until it truncates).
async fn wait_equal(cluster: &SimCluster, master: usize, slave: usize, prefix: bool) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let (ahead, behind) = (log_bytes(cluster, master), log_bytes(cluster, slave));
        assert!(
            !prefix || ahead.starts_with(&behind),
            "node {slave}'s log ({} bytes) is not a prefix of node {master}'s ({} bytes)",
            behind.len(),
            ahead.len()
        );
        if ahead == behind {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {slave} holds {} of node {master}'s {} bytes after {CATCH_UP:?}",
            behind.len(),
            ahead.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn master(role: BrokerRole) -> impl Fn(&mut NodeConfig) {
    move |config| {
        config.broker_role = role;
        config.broker_id = 0;
    }
}

fn slave_of(ha: std::net::SocketAddr) -> impl Fn(&mut NodeConfig) {
    move |config| {
        config.broker_role = BrokerRole::Slave;
        config.broker_id = 1;
        config.ha_master_address = Some(ha.to_string());
    }
}

/// Starts a master with `role` and no slave yet (node 1 is started by the test).
async fn group(role: BrokerRole) -> SimCluster {
    SimCluster::start(1, NetConfig::default(), |_, config| master(role)(config)).await
}

/// Sends `count` messages to `node` and returns their answer codes.
async fn send(cluster: &SimCluster, node: usize, count: usize, tag: &str) -> Vec<i32> {
    let client = cluster.client(0, node).await.expect("the client connects");
    client.set_timeout(Duration::from_secs(10));
    let mut codes = Vec::new();
    for n in 0..count {
        let body = format!("{tag}-{n}");
        let answer = client
            .send_message(TOPIC, (n % 2) as i32, body.as_bytes(), None, None)
            .await
            .expect("the send is answered");
        codes.push(answer.code);
    }
    codes
}

#[test]
fn a_slave_copies_its_master_byte_for_byte_and_serves_reads() {
    run_local(false, async {
        let mut cluster = group(BrokerRole::AsyncMaster).await;
        assert!(send(&cluster, MASTER, 50, "before")
            .await
            .iter()
            .all(|&c| c == 0));
        cluster.add_node(slave_of(cluster.ha_addr(MASTER))).await;
        wait_caught_up(&cluster, MASTER, SLAVE).await;
        assert!(send(&cluster, MASTER, 50, "after")
            .await
            .iter()
            .all(|&c| c == 0));
        wait_caught_up(&cluster, MASTER, SLAVE).await;
        for queue in 0..2 {
            let on_master = cluster.read_queue(MASTER, TOPIC, queue).await;
            assert_eq!(on_master.len(), 50);
            assert_eq!(cluster.read_queue(SLAVE, TOPIC, queue).await, on_master);
        }
        let refused = send(&cluster, SLAVE, 1, "to-slave").await;
        assert_eq!(
            refused,
            [response::SERVICE_NOT_AVAILABLE],
            "a slave refuses sends"
        );
        let master_samples = [
            "ringmq_replication_streams{shard=\"0\"} 1",
            "ringmq_replication_lag_bytes{shard=\"0\",slave=",
        ];
        for sample in master_samples {
            wait_for_sample(&cluster, MASTER, sample).await;
        }
        let slave_samples = [
            "ringmq_replication_role{shard=\"0\",role=\"slave\"} 1",
            "ringmq_replication_streams{shard=\"0\"} 1",
        ];
        for sample in slave_samples {
            wait_for_sample(&cluster, SLAVE, sample).await;
        }
        cluster.shutdown().await;
    });
}

#[test]
fn sync_master_answers_slave_not_available_without_a_slave_and_ok_with_one() {
    run_local(false, async {
        let mut cluster = group(BrokerRole::SyncMaster).await;
        let alone = send(&cluster, MASTER, 3, "alone").await;
        assert_eq!(alone, [response::SLAVE_NOT_AVAILABLE; 3]);
        cluster.add_node(slave_of(cluster.ha_addr(MASTER))).await;
        wait_caught_up(&cluster, MASTER, SLAVE).await;
        let paired = wait_for_send_ok(&cluster).await;
        assert!(paired, "SYNC_MASTER answers SEND_OK once its slave streams");
        let codes = send(&cluster, MASTER, 20, "paired").await;
        assert!(codes.iter().all(|&c| c == response::SUCCESS), "{codes:?}");
        // Every SEND_OK is on the slave the moment it is answered.
        let held: usize = {
            let mut held = 0;
            for queue in 0..2 {
                held += cluster.read_queue(SLAVE, TOPIC, queue).await.len();
            }
            held
        };
        assert!(
            held >= 20,
            "the slave holds {held} messages after 20 SEND_OK"
        );
        cluster.shutdown().await;
    });
}

/// Waits until node `node`'s metrics page has a line starting with `sample` (the
/// figures are sampled once a second).
async fn wait_for_sample(cluster: &SimCluster, node: usize, sample: &str) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let page = cluster.metrics_page(node);
        if page.lines().any(|line| line.starts_with(sample)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {node}'s metrics have no `{sample}` after {CATCH_UP:?}:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends until one is SEND_OK (the slave attaches asynchronously after it connects).
async fn wait_for_send_ok(cluster: &SimCluster) -> bool {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    while tokio::time::Instant::now() < deadline {
        if send(cluster, MASTER, 1, "probe").await == [response::SUCCESS] {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[test]
fn sync_master_answers_within_slave_timeout_when_its_slave_dies_and_resumes_after() {
    run_local(false, async {
        let mut cluster = group(BrokerRole::SyncMaster).await;
        cluster.add_node(slave_of(cluster.ha_addr(MASTER))).await;
        assert!(wait_for_send_ok(&cluster).await);
        // The slave stops answering: its path from the master is cut both ways.
        let (master_ip, slave_ip) = (cluster.ip(MASTER), cluster.ip(SLAVE));
        cluster.net.partition(master_ip, slave_ip, Direction::Both);
        let started = tokio::time::Instant::now();
        let codes = send(&cluster, MASTER, 2, "cut").await;
        let took = started.elapsed();
        assert!(
            codes
                .iter()
                .all(|&c| c == response::FLUSH_SLAVE_TIMEOUT || c == response::SLAVE_NOT_AVAILABLE),
            "{codes:?}"
        );
        assert!(took < Duration::from_secs(8), "two sends took {took:?}");
        cluster.net.heal_all();
        assert!(
            wait_for_send_ok(&cluster).await,
            "SEND_OK again after the heal"
        );
        wait_caught_up(&cluster, MASTER, SLAVE).await;
        cluster.shutdown().await;
    });
}

#[test]
fn an_old_master_with_an_unreplicated_tail_is_truncated_when_it_follows_the_new_one() {
    run_local(false, async {
        let mut cluster = group(BrokerRole::AsyncMaster).await;
        cluster.add_node(slave_of(cluster.ha_addr(MASTER))).await;
        assert!(send(&cluster, MASTER, 30, "shared")
            .await
            .iter()
            .all(|&c| c == 0));
        wait_caught_up(&cluster, MASTER, SLAVE).await;
        // The slave is cut off; the old master acknowledges a tail only it holds.
        let (master_ip, slave_ip) = (cluster.ip(MASTER), cluster.ip(SLAVE));
        cluster.net.partition(master_ip, slave_ip, Direction::Both);
        assert!(send(&cluster, MASTER, 10, "lost")
            .await
            .iter()
            .all(|&c| c == 0));
        cluster.stop(MASTER).await;
        cluster.stop(SLAVE).await;
        cluster.net.heal_all();
        // The slave is promoted; it writes a different tail under a new epoch.
        cluster
            .start_again(SLAVE, master(BrokerRole::AsyncMaster))
            .await;
        assert!(send(&cluster, SLAVE, 5, "new")
            .await
            .iter()
            .all(|&c| c == 0));
        let new_master = cluster.ha_addr(SLAVE);
        let old_log = log_bytes(&cluster, MASTER);
        cluster.start_again(MASTER, slave_of(new_master)).await;
        wait_equal(&cluster, SLAVE, MASTER, false).await;
        let new_log = log_bytes(&cluster, SLAVE);
        let shared = old_log
            .iter()
            .zip(&new_log)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            shared < old_log.len() && shared < new_log.len(),
            "the tails differed"
        );
        let bodies: Vec<String> = cluster
            .read_queue(MASTER, TOPIC, 0)
            .await
            .into_iter()
            .map(|(_, body)| body)
            .collect();
        assert!(
            !bodies.iter().any(|body| body.starts_with("lost")),
            "the unreplicated tail is gone: {bodies:?}"
        );
        assert!(
            bodies.iter().any(|body| body.starts_with("new")),
            "{bodies:?}"
        );
        cluster.shutdown().await;
    });
}

/// A slave played by the test over the HA wire: it takes the whole log from the master,
/// noting how many bytes each read of the socket returned.
struct ScriptedSlave {
    conn: SimConnection,
    stream: SlaveStream,
    decoder: FromMasterDecoder,
    /// The master's log end, from its handshake reply.
    master_end: Option<u64>,
    /// Where the frames received so far end.
    received: u64,
}

impl ScriptedSlave {
    /// Connects from a host of its own to node `master`'s HA port as an empty slave of
    /// it (the test defaults' names, one shard) and sends the handshake.
    async fn connect(cluster: &SimCluster, master: usize) -> ScriptedSlave {
        let defaults = NodeConfig::default();
        let stream = SlaveStream::new(
            SlaveIdentity {
                cluster: defaults.broker_cluster_name,
                broker: defaults.broker_name,
                shard_index: 0,
                shard_count: 1,
                slave_broker_id: 1,
                sync_from_last_file: false,
                async_learner: false,
            },
            1000,
        );
        let mut conn = cluster
            .net
            .host(reader_ip())
            .connect(cluster.ha_addr(master))
            .await
            .expect("the scripted slave connects");
        let mut out = Vec::new();
        stream.handshake().encode(&mut out);
        conn.write_all(&out).await.expect("the handshake is sent");
        ScriptedSlave {
            conn,
            stream,
            decoder: FromMasterDecoder::new(),
            master_end: None,
            received: 0,
        }
    }

    /// Reads until the frames reach the master's log end as its reply gave it; returns
    /// the size of every read.
    async fn read_to_the_end(&mut self) -> Vec<usize> {
        let mut buffer = vec![0u8; 1 << 20];
        let mut reads = Vec::new();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        while self.master_end.is_none_or(|end| self.received < end) {
            let n = tokio::time::timeout_at(deadline, self.conn.read(&mut buffer))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{} of {:?} bytes after {CATCH_UP:?}",
                        self.received, self.master_end
                    )
                })
                .expect("the stream reads");
            assert!(n > 0, "the master closed the stream");
            reads.push(n);
            let mut fed = 0;
            while fed < n {
                let take = self.decoder.space().min(n - fed);
                self.decoder
                    .feed(&buffer[fed..fed + take])
                    .expect("the master's bytes decode");
                fed += take;
                while let Some(message) =
                    self.decoder.next().expect("the master speaks the HA wire")
                {
                    self.take(message).await;
                }
            }
        }
        reads
    }

    /// Answers the reply with the start point; notes how far the frames reach.
    async fn take(&mut self, message: FromMaster) {
        match message {
            FromMaster::Reply(reply) => {
                self.master_end = Some(reply.master_max);
                let empty = EpochCache::new();
                let facts = SlaveLog {
                    min_offset: 0,
                    max_offset: 0,
                    epochs: &empty,
                };
                let plan = self
                    .stream
                    .on_message(FromMaster::Reply(reply), &facts, 0)
                    .expect("an empty slave takes the master's reply");
                let start = plan.report.expect("the start point is reported");
                let mut out = Vec::new();
                encode_report(start, &mut out);
                self.conn
                    .write_all(&out)
                    .await
                    .expect("the start point is sent");
            }
            FromMaster::Frame(frame) => {
                self.received = frame.header.offset + frame.body.len() as u64;
            }
            FromMaster::Refusal(refusal) => panic!("the master refused: {refusal:?}"),
        }
    }
}

/// `haSendBatchBytes`: a master gathers a catching-up slave's frames into writes of about
/// that many bytes, the frame that reaches it the last of each. A scripted slave reads the
/// stream; the simulated network hands a reader each write whole or in parts, never
/// joined to the next, so no read is larger than the write it came from. The backlog is
/// twenty times the send batch: with the setting ignored (256 KiB by default) it comes in
/// one write; and a send batch of two frames gathers them.
#[test]
fn a_master_writes_a_slaves_backlog_in_writes_of_its_send_batch() {
    const SEND_BATCH: usize = 8192;
    const FRAME: u32 = 4096;
    const BACKLOG: usize = 20 * SEND_BATCH;
    run_local(false, async {
        let cluster = SimCluster::start(1, NetConfig::default(), |_, config| {
            master(BrokerRole::AsyncMaster)(config);
            config.ha_send_batch_bytes = SEND_BATCH;
            config.ha_transfer_batch_size = FRAME;
        })
        .await;
        let client = cluster
            .client(0, MASTER)
            .await
            .expect("the client connects");
        let body = vec![b'x'; 2000];
        for n in 0..BACKLOG / body.len() {
            let answer = client
                .send_message(TOPIC, (n % 2) as i32, &body, None, None)
                .await
                .expect("the send is answered");
            assert_eq!(answer.code, response::SUCCESS);
        }

        let mut slave = ScriptedSlave::connect(&cluster, MASTER).await;
        let reads = slave.read_to_the_end().await;
        assert!(
            slave.master_end.is_some_and(|end| end >= BACKLOG as u64),
            "the master's log ends at {:?}",
            slave.master_end
        );
        // A write stops at the frame that takes it to the send batch, and not before.
        let most = SEND_BATCH - 1 + MASTER_HEADER_BYTES + FRAME as usize;
        let largest = reads.iter().max().copied().unwrap_or(0);
        assert!(
            largest <= most,
            "a read of {largest} bytes, past {SEND_BATCH} bytes plus one frame ({most}): {reads:?}"
        );
        assert!(
            largest > MASTER_HEADER_BYTES + FRAME as usize,
            "no write gathered two frames: {reads:?}"
        );
        cluster.shutdown().await;
    });
}
