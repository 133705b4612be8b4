//! The slave's group commit (D14, `replication::slave_batch`): frames that arrive together
//! are applied in one step (one append, one sync under SYNC_FLUSH) and answered with one
//! report, not one of each per frame; and a step limit (`haSlaveBatchBytesMax`) smaller
//! than a frame and than a record still moves the slave to the master's end, a frame a
//! step. A scripted master on the simulated network sends a store's log as many frames in
//! one write to a real `SlaveSide` over a SYNC_FLUSH replica store on the simulated disk.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{BrokerRole, FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::net::sim::{NetConfig, SimConnection, SimNet};
use ringmq::net::Transport;
use ringmq::replication::decode::FromSlaveDecoder;
use ringmq::replication::epoch_store::EpochStore;
use ringmq::replication::epochs::{EpochCache, EpochEntry};
use ringmq::replication::slave_link::{SlaveConfig, SlaveSide};
use ringmq::replication::slave_state::SlaveIdentity;
use ringmq::replication::wire::{FrameHeader, FromMaster, FromSlave, HandshakeReply};
use ringmq::store::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Frames the master sends in one write.
const FRAMES: usize = 200;
/// Each frame's body: small, so one store append per frame would show.
const FRAME_BYTES: usize = 256;
/// The bodies of [`master_log`]'s messages: a record is larger than a frame.
const BODY_BYTES: usize = 300;
const EPOCH: u32 = 1 << 16;
/// The slave's step limit where the test does not look at it: `haSlaveBatchBytesMax`'s
/// default, above the whole log.
const STEP_BYTES: usize = 4 << 20;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn store_config(dir: &std::path::Path, role: BrokerRole) -> StoreConfig {
    let mut config = StoreConfig::test_min(dir);
    config.commit_log_segment_size = 1 << 20;
    config.flush_mode = FlushMode::Sync;
    config.broker_role = role;
    config
}

async fn open(sim: &SimDisk, config: StoreConfig) -> Store {
    Store::open(config, as_disk(sim), Clock::starting_at(1_800_000_000_000))
        .await
        .expect("the store opens")
}

/// A master store holding at least `bytes` bytes of records with `body_bytes`-byte bodies.
async fn master_log(
    sim: &SimDisk,
    dir: &std::path::Path,
    bytes: usize,
    body_bytes: usize,
) -> Store {
    let master = open(
        sim,
        store_config(&dir.join("master"), BrokerRole::AsyncMaster),
    )
    .await;
    let mut n = 0;
    while master.log_positions().written < bytes as u64 {
        let body = vec![b'a' + (n % 26) as u8; body_bytes];
        let input = message("Steps", n % 4, &body, None, None);
        for outcome in master.put_all(vec![input]).await {
            outcome.expect("the put is stored");
        }
        n += 1;
    }
    master
}

/// Reads from the slave until one whole message is decoded.
async fn next_from_slave(conn: &mut SimConnection, decoder: &mut FromSlaveDecoder) -> FromSlave {
    let mut buffer = [0u8; 256];
    loop {
        if let Some(message) = decoder.next().expect("the slave speaks the HA wire") {
            return message;
        }
        let n = conn
            .read(&mut buffer)
            .await
            .expect("the slave's stream reads");
        assert!(n > 0, "the slave closed the stream");
        decoder
            .feed(&buffer[..n])
            .expect("the slave's bytes decode");
    }
}

/// The master's whole log as frames of `frame_bytes` (the last may be shorter), encoded
/// back to back.
fn frames(master: &Store, end: u64, frame_bytes: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < end {
        let range = master
            .replica_range(at, frame_bytes)
            .expect("the master serves its log")
            .expect("bytes below the written end");
        FrameHeader {
            offset: at,
            epoch: EPOCH,
            epoch_start: 0,
            confirm_offset: 0,
            body_len: range.bytes.len() as u32,
        }
        .encode(&mut out);
        out.extend_from_slice(&range.bytes);
        at += range.bytes.len() as u64;
    }
    out
}

/// A slave shard's replication side over `replica`, appending steps of up to `step_bytes`.
fn slave_side(replica: &Store, epochs: EpochStore, step_bytes: usize) -> Rc<SlaveSide> {
    SlaveSide::new(
        replica.clone(),
        epochs,
        SlaveConfig {
            identity: SlaveIdentity {
                cluster: "C".into(),
                broker: "b".into(),
                shard_index: 0,
                shard_count: 1,
                slave_broker_id: 1,
                sync_from_last_file: false,
                async_learner: false,
            },
            heartbeat: Duration::from_secs(5),
            housekeeping: Duration::from_secs(20),
            batch_bytes_max: step_bytes,
        },
    )
}

/// The master's half of the handshake: the slave's handshake, the reply (one epoch from
/// 0, the log up to `end`), the slave's start point 0.
async fn handshake(conn: &mut SimConnection, decoder: &mut FromSlaveDecoder, end: u64) {
    assert!(matches!(
        next_from_slave(conn, decoder).await,
        FromSlave::Handshake(_)
    ));
    let mut out = Vec::new();
    FromMaster::Reply(HandshakeReply {
        master_max: end,
        epochs: EpochCache::from_entries(&[EpochEntry {
            epoch: EPOCH,
            start: 0,
        }])
        .expect("a valid history"),
    })
    .encode(&mut out);
    conn.write_all(&out).await.expect("the reply is sent");
    assert!(matches!(
        next_from_slave(conn, decoder).await,
        FromSlave::Report(0)
    ));
}

/// Reads reports until one says `end`; returns how many came.
async fn reports_until(conn: &mut SimConnection, decoder: &mut FromSlaveDecoder, end: u64) -> u64 {
    let mut reports = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let message = tokio::time::timeout_at(deadline, next_from_slave(conn, decoder))
            .await
            .unwrap_or_else(|_| panic!("no report of {end} within 10 s"));
        let FromSlave::Report(offset) = message else {
            panic!("the slave sent {message:?} while streaming");
        };
        reports += 1;
        assert!(offset <= end, "the slave reports {offset} past {end}");
        if offset == end {
            return reports;
        }
    }
}

/// A slave streaming from a scripted master over the simulated network: the master's end
/// of the stream, once the handshake is done, and the slave's replica store.
struct Streaming {
    conn: SimConnection,
    decoder: FromSlaveDecoder,
    replica: Store,
    task: tokio::task::JoinHandle<Result<(), ringmq::replication::slave_link::SlaveLinkError>>,
}

impl Streaming {
    /// Opens a SYNC_FLUSH replica store on `sim` under `dir`, starts a slave over it with
    /// steps of up to `step_bytes`, accepts its stream and answers its handshake for a log
    /// ending at `end`.
    async fn start(sim: &SimDisk, dir: &std::path::Path, end: u64, step_bytes: usize) -> Streaming {
        let replica_config = store_config(&dir.join("slave"), BrokerRole::Slave);
        std::fs::create_dir_all(&replica_config.dir).expect("the slave's directory");
        let epochs = EpochStore::load(&replica_config.dir).expect("an empty epoch history");
        let replica = open(sim, replica_config).await;
        let side = slave_side(&replica, epochs, step_bytes);

        let net = SimNet::new(NetConfig::default()).expect("a valid network");
        let addr = SocketAddr::new(ip(1), 10912);
        let listener = net.host(ip(1)).bind(addr).await.expect("the port binds");
        let slave_net = net.host(ip(2));
        let task =
            tokio::task::spawn_local(async move { side.stream_from(&slave_net, addr).await });
        let (mut conn, _) = ringmq::net::Listener::accept(&listener)
            .await
            .expect("the slave connects");
        let mut decoder = FromSlaveDecoder::new();
        handshake(&mut conn, &mut decoder, end).await;
        Streaming {
            conn,
            decoder,
            replica,
            task,
        }
    }

    /// Ends the stream and waits for the slave to see it end.
    async fn stop(self) {
        drop(self.conn);
        let _ = self.task.await;
    }
}

#[test]
fn frames_that_arrive_together_are_appended_synced_and_reported_in_one_step() {
    run_local(false, async {
        let sim = sim_disk(7);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let master = master_log(&sim, dir.path(), FRAMES * FRAME_BYTES, BODY_BYTES).await;
        let end = master.log_positions().written;
        let mut slave = Streaming::start(&sim, dir.path(), end, STEP_BYTES).await;

        let frame_count = end.div_ceil(FRAME_BYTES as u64);
        slave
            .conn
            .write_all(&frames(&master, end, FRAME_BYTES))
            .await
            .expect("the frames are sent");
        let reports = reports_until(&mut slave.conn, &mut slave.decoder, end).await;
        let appends = slave.replica.replica_stats().frames;
        assert_eq!(
            slave.replica.log_positions().flushed,
            end,
            "reported means synced"
        );
        assert!(
            appends * 8 <= frame_count && reports * 8 <= frame_count,
            "{frame_count} frames that arrived together took {appends} appends and {reports} reports"
        );
        slave.stop().await;
    });
}

/// `haSlaveBatchBytesMax` at its floor, below a frame and below a record: every step takes
/// one frame (never none, never a piece of one), so the slave still reaches the master's
/// end, with one append per frame.
#[test]
fn a_step_limit_below_a_frame_and_a_record_still_reaches_the_masters_end() {
    const STEP_FLOOR: usize = 4096;
    const BIG_FRAME: usize = 8192;
    const BIG_BODY: usize = 5000;
    run_local(false, async {
        let sim = sim_disk(11);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let master = master_log(&sim, dir.path(), 40 * BIG_FRAME, BIG_BODY).await;
        let end = master.log_positions().written;
        let mut slave = Streaming::start(&sim, dir.path(), end, STEP_FLOOR).await;

        let frame_count = end.div_ceil(BIG_FRAME as u64);
        slave
            .conn
            .write_all(&frames(&master, end, BIG_FRAME))
            .await
            .expect("the frames are sent");
        reports_until(&mut slave.conn, &mut slave.decoder, end).await;
        assert_eq!(slave.replica.log_positions().flushed, end);
        assert_eq!(
            slave.replica.replica_stats().frames,
            frame_count,
            "a step limit below a frame appends each frame alone"
        );
        slave.stop().await;
    });
}
