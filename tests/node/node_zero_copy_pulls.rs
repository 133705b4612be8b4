//! Pull bodies go out straight from the CommitLog files (D8), and the client
//! receives exactly the stored bytes: across segment boundaries (64 KiB segments), with
//! tag filtering, with many pulls in flight on one connection, through the sendfile path,
//! the mmap/writev path and the auto mix of both; the zero-copy byte counters show which
//! path ran. A
//! writer-level test sends a body mixing file ranges and plain bytes.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{run_local, wait_for};
use ringmq::client::{pull_request, send_request_v2, Client};
use ringmq::io::file_body::{BodyChunk, FileBody, FileRange};
use ringmq::node::NodeHandle;
use ringmq::remoting::codes::response;
use ringmq::remoting::RemotingCommand;
use ringmq::server::body_send::BodySend;
use ringmq::server::connection::{serve_connection, ConnectionLimits, RequestHandler};
use ringmq::server::traffic::Traffic;
use ringmq::store::segment::segment_name;

const SEGMENT: u64 = 64 * 1024;
const TOPIC: &str = "ZeroCopy";
const MESSAGES: usize = 240;

fn start(dir: &Path, mode: BodySend) -> NodeHandle {
    let mut options = common::with_segment(common::node_config(dir), SEGMENT);
    options.body_send = mode;
    ringmq::node::start(options).expect("node starts")
}

fn tag_of(i: usize) -> &'static str {
    if i.is_multiple_of(3) {
        "TagA"
    } else {
        "TagB"
    }
}

/// Bodies of 700 to 2,700 bytes, so records land across many 64 KiB segments.
fn body_of(queue: i32, i: usize) -> Vec<u8> {
    let len = 700 + (i * 397) % 2000;
    let mut body = format!("q{queue} m{i} ").into_bytes();
    body.resize(len, b'a' + (i % 26) as u8);
    body
}

/// One record of a pull body: where it claims to be stored, and its bytes.
struct Pulled {
    phys: u64,
    queue_offset: i64,
    body: Vec<u8>,
    len: usize,
}

fn split(body: &[u8]) -> Vec<Pulled> {
    common::pull_records(body)
        .iter()
        .map(|view| Pulled {
            phys: view.phys_offset as u64,
            queue_offset: view.queue_offset,
            body: view.body.to_vec(),
            len: view.total_size as usize,
        })
        .collect()
}

/// The bytes the CommitLog holds for the records `pulled` names, read from the files.
fn stored_bytes(dir: &Path, pulled: &[Pulled]) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    for record in pulled {
        let start = record.phys - record.phys % SEGMENT;
        let path = dir
            .join("shard-0")
            .join("commitlog")
            .join(segment_name(start));
        let file = std::fs::File::open(&path).unwrap();
        let mut bytes = vec![0u8; record.len];
        file.read_exact_at(&mut bytes, record.phys - start).unwrap();
        out.extend_from_slice(&bytes);
    }
    out
}

fn ext(cmd: &RemotingCommand, field: &str) -> u64 {
    cmd.ext_fields[field].parse().unwrap()
}

async fn send_all(client: &Client) {
    for i in 0..MESSAGES {
        // Two queues interleaved: a queue's records are not contiguous in the log.
        for queue in 0..2 {
            let cmd = send_request_v2(TOPIC, queue, &body_of(queue, i), Some(tag_of(i)), None);
            let answer = client.request(cmd).await.unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
    }
}

/// Pulls queue `queue` from 0 to its end with `tags`, checking every body against the files
/// and the sent messages; returns the body bytes received and whether some pull crossed a
/// segment boundary.
async fn pull_all(client: &Client, dir: &Path, queue: i32, tags: Option<&str>) -> (u64, bool) {
    let mut offset = 0u64;
    let mut expected = (0..MESSAGES).filter(|&i| tags.is_none_or(|t| t == tag_of(i)));
    let mut received = 0u64;
    let mut crossed = false;
    while offset < MESSAGES as u64 {
        let answer = client
            .request(pull_request(TOPIC, queue, offset, 32, None, tags))
            .await
            .unwrap();
        assert!(
            answer.code == response::SUCCESS || answer.code == response::PULL_RETRY_IMMEDIATELY,
            "{answer:?}"
        );
        let pulled = split(&answer.body);
        assert_eq!(
            &answer.body[..],
            &stored_bytes(dir, &pulled)[..],
            "a pull body is the stored records, byte for byte"
        );
        for record in &pulled {
            let i = expected.next().expect("no more messages than were sent");
            assert_eq!(record.queue_offset, i as i64);
            assert_eq!(record.body, body_of(queue, i));
        }
        let segments: std::collections::BTreeSet<u64> =
            pulled.iter().map(|r| r.phys / SEGMENT).collect();
        crossed |= segments.len() > 1;
        received += answer.body.len() as u64;
        let next = ext(&answer, "nextBeginOffset");
        assert!(next > offset, "the pull moved on");
        offset = next;
    }
    assert!(
        expected.next().is_none(),
        "every matching message came back"
    );
    (received, crossed)
}

fn pulls_are_the_stored_bytes(mode: BodySend) {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), mode);
    let addr = node.addr();
    let traffic = node.metrics().clone();
    let path = dir.path().to_path_buf();
    let counters = traffic.clone();
    let (before, total) = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        send_all(&client).await;
        let before = counters.traffic_total();
        let mut total = 0;
        for queue in 0..2 {
            let (received, crossed) = pull_all(&client, &path, queue, None).await;
            assert!(crossed, "some pull of queue {queue} spans two segments");
            total += received;
            let (received, _) = pull_all(&client, &path, queue, Some("TagA")).await;
            total += received;
        }
        (before, total)
    });
    // The shard thread counts a write after it returns, which can be after the client
    // has read the bytes.
    wait_for(
        Duration::from_secs(10),
        "the last pull to be counted",
        || traffic.traffic_total().bytes_out_zero_copy - before.bytes_out_zero_copy >= total,
    );
    let after = traffic.traffic_total();
    let zero_copy = after.bytes_out_zero_copy - before.bytes_out_zero_copy;
    let mmap = after.bytes_out_mmap - before.bytes_out_mmap;
    assert_eq!(zero_copy, total, "every record byte went out zero-copy");
    match mode {
        BodySend::Sendfile => assert_eq!(mmap, 0, "sendfile served it all"),
        // A queue's ranges here are single records of a few KiB: auto maps them too.
        BodySend::Mmap | BodySend::Auto => assert_eq!(mmap, total, "the mmap path served it all"),
    }
    assert!(after.bytes_out_copied > before.bytes_out_copied, "headers");
    assert!(after.bytes_out >= after.bytes_out_zero_copy + before.bytes_out_copied);
    assert!(after.bytes_in > 0);
    node.shutdown().unwrap();
    let last = traffic.traffic_total();
    assert_eq!(
        last.bytes_out,
        last.bytes_out_zero_copy + last.bytes_out_copied
    );
}

#[test]
fn sendfile_pulls_are_the_stored_bytes() {
    pulls_are_the_stored_bytes(BodySend::Sendfile);
}

#[test]
fn mmap_pulls_are_the_stored_bytes() {
    pulls_are_the_stored_bytes(BodySend::Mmap);
}

#[test]
fn auto_pulls_are_the_stored_bytes() {
    pulls_are_the_stored_bytes(BodySend::Auto);
}

/// Many pulls in flight on one connection: responses queue up in the writer, its socket
/// fills (WouldBlock, partial writes), and every frame must still arrive whole.
fn concurrent_pulls(mode: BodySend) {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), mode);
    let addr = node.addr();
    let path = dir.path().to_path_buf();
    run_local(false, async move {
        let client = Rc::new(Client::connect(addr).await.unwrap());
        send_all(&client).await;
        let mut pulls = tokio::task::JoinSet::new();
        for round in 0..40u64 {
            let client = client.clone();
            pulls.spawn_local(async move {
                let offset = (round * 7) % MESSAGES as u64;
                let answer = client
                    .request(pull_request(
                        TOPIC,
                        (round % 2) as i32,
                        offset,
                        32,
                        None,
                        None,
                    ))
                    .await
                    .unwrap();
                (offset, answer)
            });
        }
        while let Some(joined) = pulls.join_next().await {
            let (offset, answer) = joined.unwrap();
            assert_eq!(answer.code, response::SUCCESS);
            let pulled = split(&answer.body);
            assert_eq!(pulled[0].queue_offset, offset as i64);
            assert_eq!(&answer.body[..], &stored_bytes(&path, &pulled)[..]);
        }
    });
    node.shutdown().unwrap();
}

#[test]
fn concurrent_sendfile_pulls_arrive_whole() {
    concurrent_pulls(BodySend::Sendfile);
}

#[test]
fn concurrent_mmap_pulls_arrive_whole() {
    concurrent_pulls(BodySend::Mmap);
}

#[test]
fn concurrent_auto_pulls_arrive_whole() {
    concurrent_pulls(BodySend::Auto);
}

/// Answers every request with bytes, a large file range, a small one, then bytes.
struct MixedBody {
    file: Arc<std::fs::File>,
}

impl RequestHandler for MixedBody {
    async fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        _peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        let mut answer = RemotingCommand::response_to(&request, response::SUCCESS, None);
        answer.body = Bytes::from_static(b"<head>");
        let mut body = FileBody::new();
        body.push(BodyChunk::Bytes(Bytes::from_static(b"[")));
        body.push(BodyChunk::File(FileRange {
            file: self.file.clone(),
            offset: 5,
            len: 250_000,
        }));
        body.push(BodyChunk::File(FileRange {
            file: self.file.clone(),
            offset: 0,
            len: 3,
        }));
        body.push(BodyChunk::Bytes(Bytes::from_static(b"]")));
        answer.file_body = body;
        Some(answer)
    }
}

/// The writer on a body mixing file ranges and plain bytes, through a socket whose send
/// buffer is far smaller than the body.
fn mixed_body(mode: BodySend) {
    use std::io::Write;
    let mut file = tempfile::tempfile().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    file.write_all(&data).unwrap();
    let handler = Rc::new(MixedBody {
        file: Arc::new(file),
    });
    let traffic = Arc::new(Traffic::new());
    let mut expected = b"<head>[".to_vec();
    expected.extend_from_slice(&data[5..250_005]);
    expected.extend_from_slice(&data[..3]);
    expected.push(b']');
    let counters = traffic.clone();
    run_local(false, async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let limits = ConnectionLimits {
            body_send: mode,
            ..ringmq::node_config::connection_limits(&ringmq::node_config::NodeConfig::default())
        };
        tokio::task::spawn_local(async move {
            let (stream, peer) = listener.accept().await.unwrap();
            // A tiny send buffer makes every body a series of partial writes and
            // WouldBlocks, which the writer must resume.
            socket2::SockRef::from(&stream)
                .set_send_buffer_size(4096)
                .unwrap();
            serve_connection(stream, peer, handler, limits, counters, stop_rx).await
        });
        let client = Client::connect(addr).await.unwrap();
        for _ in 0..3 {
            let answer = client
                .request(RemotingCommand::request(1, Default::default()))
                .await
                .unwrap();
            assert_eq!(&answer.body[..], &expected[..]);
        }
    });
    let seen = traffic.snapshot();
    assert_eq!(seen.bytes_out_zero_copy, 3 * 250_003);
    let mapped = match mode {
        BodySend::Sendfile => 0,
        BodySend::Mmap => 3 * 250_003,
        // The 250,000-byte range goes with sendfile, the 3-byte one from the mapping.
        BodySend::Auto => 3 * 3,
    };
    assert_eq!(seen.bytes_out_mmap, mapped);
}

#[test]
fn mixed_file_and_byte_bodies_sendfile() {
    mixed_body(BodySend::Sendfile);
}

#[test]
fn mixed_file_and_byte_bodies_mmap() {
    mixed_body(BodySend::Mmap);
}

#[test]
fn mixed_file_and_byte_bodies_auto() {
    mixed_body(BodySend::Auto);
}
