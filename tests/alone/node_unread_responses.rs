//! Connections that send requests and never read their responses: the node stops reading
//! them once a connection's requests in flight or queued response bytes reach their
//! bound (TCP backpressure), so what the node buffers stays bounded however much they
//! send; and a connection that starts reading again gets every answer.
//!
//! Bounds checked:
//! - per connection: the node's queued response bytes (its `queued_response_bytes` gauge,
//!   all connections) stay at or below CONNECTIONS x (max_queued_response_bytes + the
//!   answers of max_requests_in_flight requests: those already read are answered into the
//!   queue after the reads stop), far below what the peers asked for; and the process RSS
//!   grows by less than RSS_GROWTH_BOUND while the answers are unread;
//! - per shard, with the connection bounds left at their defaults: everything the node
//!   holds for its connections (queued responses and requests in flight) stays within the
//!   shard bound plus one request and its answer per connection (see the test for the
//!   arithmetic).

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{decode_frame, encode_frame, ExtFields, RemotingCommand};

const CONNECTIONS: usize = 100;
/// Requests each connection sends before anyone reads.
const REQUESTS_PER_CONNECTION: usize = 128;
const MAX_IN_FLIGHT: usize = 8;
const MAX_QUEUED_BYTES: usize = 32 * 1024;
/// Topics created so that one GET_ALL_TOPIC_CONFIG answer is several KiB.
const TOPICS: usize = 40;
const RSS_GROWTH_BOUND: u64 = 64 * 1024 * 1024;

/// RSS is the process's: the tests of this binary run one at a time (`crate::alone`), so
/// no other test's node is in the figure.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn frame(mut command: RemotingCommand, opaque: i32) -> Vec<u8> {
    command.opaque = opaque;
    let mut out = Vec::new();
    encode_frame(&command, &mut out).unwrap();
    out
}

/// A blocking call on a fresh connection, for the setup.
fn call(addr: SocketAddr, command: RemotingCommand) -> RemotingCommand {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&frame(command, 1)).unwrap();
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((answer, _)) = decode_frame(&buffer, usize::MAX >> 1).unwrap() {
            return answer;
        }
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before answering");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A client connection with a tiny receive buffer, so the kernel holds little of what
/// the node sends it; non-blocking, so a node that stops reading never hangs the test.
struct Peer {
    stream: TcpStream,
    to_send: Vec<u8>,
    sent: usize,
    received: Vec<u8>,
    answers: Vec<i32>,
}

impl Peer {
    fn connect(addr: SocketAddr, requests: &[u8]) -> Peer {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(&addr.into()).unwrap();
        let stream: TcpStream = socket.into();
        stream.set_nonblocking(true).unwrap();
        Peer {
            stream,
            to_send: requests.to_vec(),
            sent: 0,
            received: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// Writes what the socket takes now.
    fn push(&mut self) {
        while self.sent < self.to_send.len() {
            match self.stream.write(&self.to_send[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(error) if error.kind() == ErrorKind::WouldBlock => return,
                Err(error) => panic!("write failed: {error}"),
            }
        }
    }

    /// Reads what has arrived and collects the answers' opaques.
    fn pull(&mut self) {
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("the node closed a connection that was reading"),
                Ok(n) => self.received.extend_from_slice(&chunk[..n]),
                Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                Err(error) => panic!("read failed: {error}"),
            }
        }
        let mut used = 0;
        while let Some((answer, len)) =
            decode_frame(&self.received[used..], usize::MAX >> 1).unwrap()
        {
            assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
            self.answers.push(answer.opaque);
            used += len;
        }
        self.received.drain(..used);
    }
}

/// A node with TOPICS topics, tuned by `tune`; its address, a GET_ALL_TOPIC_CONFIG request
/// and the length of its answer's body.
fn node_with_topics(
    dir: &std::path::Path,
    tune: impl FnOnce(&mut ringmq::node_config::NodeConfig),
) -> (ringmq::node::NodeHandle, SocketAddr, RemotingCommand, usize) {
    let mut options = common::node_config(dir);
    // Keep the kernel's share small, so what piles up is the node's to bound.
    options.server_socket_snd_buf_size = 16 * 1024;
    tune(&mut options);
    let node = ringmq::node::start(options).expect("node starts");
    let addr = node.addr();
    for n in 0..TOPICS {
        let topic = format!("unread_responses_topic_with_a_long_name_{n:03}");
        let fields = ExtFields::from([
            ("topic", topic.as_str()),
            ("readQueueNums", "8"),
            ("writeQueueNums", "8"),
        ]);
        let answer = call(
            addr,
            RemotingCommand::request(request::UPDATE_AND_CREATE_TOPIC, fields),
        );
        assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    }
    let get_all = RemotingCommand::request(request::GET_ALL_TOPIC_CONFIG, ExtFields::new());
    let response_len = call(addr, get_all.clone()).body.len();
    assert!(response_len > 4096, "one answer is {response_len} bytes");
    (node, addr, get_all, response_len)
}

/// REQUESTS_PER_CONNECTION pipelined copies of `request`.
fn pipelined(request: &RemotingCommand) -> Vec<u8> {
    let mut requests = Vec::new();
    for opaque in 0..REQUESTS_PER_CONNECTION as i32 {
        requests.extend_from_slice(&frame(request.clone(), opaque));
    }
    requests
}

/// Pushes requests until every connection is paused and nothing is in flight, checking
/// `within_bound` on every poll (so a node without the bound fails on the figure, not a
/// timeout); returns the traffic then.
fn until_all_paused(
    node: &ringmq::node::NodeHandle,
    peers: &mut [Peer],
    within_bound: impl Fn(&ringmq::server::traffic::TrafficSnapshot),
) -> ringmq::server::traffic::TrafficSnapshot {
    let metrics = node.metrics();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        for peer in peers.iter_mut() {
            peer.push();
        }
        let traffic = metrics.traffic_total();
        within_bound(&traffic);
        if traffic.read_pauses >= peers.len() as u64 && traffic.requests_in_flight == 0 {
            return traffic;
        }
        assert!(
            Instant::now() < deadline,
            "connections never all paused: {traffic:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every connection reads now: each gets all its answers, the rest of its requests being
/// read as the backlog drains; then nothing is held.
fn read_every_answer(node: &ringmq::node::NodeHandle, peers: &mut [Peer]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while peers
        .iter()
        .any(|p| p.answers.len() < REQUESTS_PER_CONNECTION)
    {
        for peer in peers.iter_mut() {
            peer.push();
            peer.pull();
        }
        assert!(
            Instant::now() < deadline,
            "answers missing: {:?}",
            peers.iter().map(|p| p.answers.len()).collect::<Vec<_>>()
        );
    }
    for peer in peers.iter_mut() {
        peer.answers.sort_unstable();
        assert_eq!(
            peer.answers,
            (0..REQUESTS_PER_CONNECTION as i32).collect::<Vec<_>>()
        );
    }
    let metrics = node.metrics();
    common::wait_for(Duration::from_secs(10), "the backlog to drain", || {
        let traffic = metrics.traffic_total();
        traffic.queued_response_bytes == 0
            && traffic.requests_in_flight == 0
            && traffic.request_bytes_in_flight == 0
    });
}

#[test]
fn connections_that_never_read_are_paused_within_the_bound_and_get_every_answer_once_they_read() {
    let _alone = crate::alone();
    let dir = tempfile::tempdir().unwrap();
    let (node, addr, get_all, response_len) = node_with_topics(dir.path(), |options| {
        options.max_requests_in_flight_per_connection = MAX_IN_FLIGHT;
        options.max_queued_response_bytes_per_connection = MAX_QUEUED_BYTES;
    });
    let requests = pipelined(&get_all);
    let unread_per_connection = REQUESTS_PER_CONNECTION * response_len;

    let rss_before = rss_bytes();
    let mut peers: Vec<Peer> = (0..CONNECTIONS)
        .map(|_| Peer::connect(addr, &requests))
        .collect();
    let charged = response_len + ringmq::server::backlog::RESPONSE_HEADER_COST;
    let bound = (CONNECTIONS * (MAX_QUEUED_BYTES + MAX_IN_FLIGHT * charged)) as i64;
    let settled = until_all_paused(&node, &mut peers, |traffic| {
        assert!(
            traffic.queued_response_bytes <= bound,
            "the node queued {} response bytes for unread connections; bound {bound}",
            traffic.queued_response_bytes
        );
    });
    let rss_growth = rss_bytes().saturating_sub(rss_before);
    eprintln!(
        "{CONNECTIONS} unread connections, {unread_per_connection} bytes of answers each: \
         node queued {} bytes (bound {bound}), {} reads paused, RSS grew {rss_growth} bytes",
        settled.queued_response_bytes, settled.read_pauses
    );
    assert!(
        settled.queued_response_bytes < (CONNECTIONS * unread_per_connection) as i64 / 4,
        "the bound is meaningful: far below what was asked for"
    );
    assert!(
        rss_growth < RSS_GROWTH_BOUND,
        "RSS grew {rss_growth} bytes with answers unread; bound {RSS_GROWTH_BOUND}"
    );
    read_every_answer(&node, &mut peers);
    drop(peers);
    node.shutdown().unwrap();
}

#[test]
fn the_shard_bound_holds_all_connections_that_never_read_together_whatever_their_own_bounds() {
    const SHARD_BYTES: usize = 128 * 1024;
    let _alone = crate::alone();
    let dir = tempfile::tempdir().unwrap();
    let (node, addr, get_all, response_len) = node_with_topics(dir.path(), |options| {
        // Each connection alone could hold all its answers (128 of about 6 KiB).
        options.max_queued_response_bytes = SHARD_BYTES;
        options.max_requests_in_flight = 64;
    });
    let requests = pipelined(&get_all);
    let frame_len = frame(get_all.clone(), 0).len();
    let unread_per_connection = REQUESTS_PER_CONNECTION * response_len;
    let mut peers: Vec<Peer> = (0..CONNECTIONS)
        .map(|_| Peer::connect(addr, &requests))
        .collect();
    // What the shard holds reaches its bound, then grows only by answers to requests it
    // held at that moment (each request's charge turns into its answer's, at most
    // `answer / request` times larger) and by the one request each connection holding
    // nothing may still take (with its answer).
    let request_cost = ringmq::server::backlog::REQUEST_COST + frame_len;
    let answer_cost = response_len + ringmq::server::backlog::RESPONSE_HEADER_COST;
    let growth = answer_cost.div_ceil(request_cost);
    let bound = (SHARD_BYTES * (1 + growth) + CONNECTIONS * (request_cost + answer_cost)) as i64;
    let held = |t: &ringmq::server::traffic::TrafficSnapshot| {
        t.queued_response_bytes + t.request_bytes_in_flight
    };
    let settled = until_all_paused(&node, &mut peers, |traffic| {
        assert!(
            held(traffic) <= bound,
            "the node holds {} bytes for unread connections; bound {bound}",
            held(traffic)
        );
    });
    eprintln!(
        "{CONNECTIONS} unread connections, {unread_per_connection} bytes of answers each: \
         node holds {} bytes (shard bound {SHARD_BYTES}, checked bound {bound})",
        held(&settled)
    );
    assert!(
        held(&settled) < (CONNECTIONS * unread_per_connection) as i64 / 10,
        "the bound is meaningful: far below what was asked for"
    );
    read_every_answer(&node, &mut peers);
    drop(peers);
    node.shutdown().unwrap();
}
