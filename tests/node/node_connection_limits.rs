//! The node's connection limits: `max_connections` refuses (closes) what is beyond it and
//! counts each refusal; a frame that does not complete within `frame_timeout` (a peer
//! holding most of a large frame, or trickling bytes) closes its connection; a connection
//! with no request for the idle timeout is closed while a busy one stays; the node-wide
//! bound on partial-frame bytes closes the connection that would pass it and no other.
//! And each new setting refuses a bad value naming its key.
//!
//! Timeouts here are a few hundred milliseconds, and every wait is a bounded wait for the
//! condition (a read that ends in EOF, a counter), never a fixed sleep.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ringmq::node::NodeHandle;
use ringmq::node_config::{ConfigLoader, NodeConfig};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{decode_frame, encode_frame, ExtFields, RemotingCommand};

use common::node_config as options;

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    // Bounds every read below: a node that neither answers nor closes fails the test.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

fn request_frame(opaque: i32) -> Vec<u8> {
    let mut command = RemotingCommand::request(request::GET_ALL_TOPIC_CONFIG, ExtFields::new());
    command.opaque = opaque;
    let mut out = Vec::new();
    encode_frame(&command, &mut out).unwrap();
    out
}

/// Sends a request and reads its answer.
fn call(stream: &mut TcpStream, opaque: i32) -> RemotingCommand {
    stream.write_all(&request_frame(opaque)).unwrap();
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((answer, _)) = decode_frame(&buffer, usize::MAX >> 1).unwrap() {
            assert_eq!(answer.opaque, opaque);
            return answer;
        }
        let n = stream.read(&mut chunk).expect("an answer in time");
        assert!(n > 0, "closed instead of answering");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The node closed `stream`: EOF or a reset, not the read timeout.
fn closed_by_node(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return true,
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(error) => panic!("unexpected read error: {error}"),
        }
    }
}

fn traffic(node: &NodeHandle) -> ringmq::server::traffic::TrafficSnapshot {
    node.metrics().traffic_total()
}

#[test]
fn connections_beyond_max_connections_are_refused_counted_and_a_freed_place_is_reused() {
    const MAX: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.max_connections = MAX;
    let node = ringmq::node::start(options).unwrap();
    let mut open: Vec<TcpStream> = (0..MAX).map(|_| connect(node.addr())).collect();
    for (n, stream) in open.iter_mut().enumerate() {
        assert_eq!(call(stream, n as i32).code, response::SUCCESS);
    }
    for _ in 0..10 {
        let mut refused = connect(node.addr());
        assert!(
            closed_by_node(&mut refused),
            "a connection beyond max_connections={MAX} was kept open"
        );
    }
    assert_eq!(traffic(&node).connections_refused, 10);
    // The admitted ones still serve; closing one frees a place for a new connection.
    assert_eq!(call(&mut open[0], 100).code, response::SUCCESS);
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut reused = loop {
        let mut stream = connect(node.addr());
        let frame = request_frame(7);
        // A refused attempt may reset before or while the request goes out.
        if stream.write_all(&frame).is_ok() {
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 65536];
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buffer.extend_from_slice(&chunk[..n]);
                if decode_frame(&buffer, usize::MAX >> 1).unwrap().is_some() {
                    break;
                }
            }
            if decode_frame(&buffer, usize::MAX >> 1).unwrap().is_some() {
                break stream;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the freed place was never given to a new connection"
        );
    };
    assert_eq!(call(&mut reused, 8).code, response::SUCCESS);
    drop((open, reused));
    node.shutdown().unwrap();
}

#[test]
fn a_frame_that_does_not_complete_within_the_frame_timeout_closes_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    let timeout = Duration::from_millis(300);
    options.frame_timeout = timeout;
    options.server_channel_max_idle_time_seconds = Duration::from_secs(60);
    let node = ringmq::node::start(options).unwrap();

    // Most of a large frame, then nothing.
    let mut holder = connect(node.addr());
    let frame_len: u32 = 4 * 1024 * 1024;
    let mut partial = (frame_len - 4).to_be_bytes().to_vec();
    partial.extend_from_slice(&[0, 0, 0, 2, b'{', b'}']);
    partial.resize(3 * 1024 * 1024, b'x');
    let started = Instant::now();
    holder.write_all(&partial).unwrap();
    assert!(closed_by_node(&mut holder), "a stalled frame was held open");
    assert!(started.elapsed() >= timeout, "closed before the timeout");

    // One byte at a time, never fast enough to finish: the trickle is the peer's
    // behaviour under test, not a wait.
    let mut trickler = connect(node.addr());
    trickler
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let frame = request_frame(1);
    let started = Instant::now();
    let mut closed = false;
    for byte in frame.iter().take(frame.len() - 1) {
        if trickler.write_all(&[*byte]).is_err() || closed_by_node(&mut trickler) {
            closed = true;
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the trickling connection was never closed"
        );
    }
    assert!(
        closed,
        "a frame trickled over {:?} was accepted",
        started.elapsed()
    );
    assert!(started.elapsed() >= timeout);
    assert_eq!(traffic(&node).frame_timeouts, 2);

    // A whole request on a fresh connection is still served.
    assert_eq!(call(&mut connect(node.addr()), 2).code, response::SUCCESS);
    node.shutdown().unwrap();
}

#[test]
fn a_large_frame_that_keeps_coming_is_accepted_though_it_takes_longer_than_the_frame_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    let timeout = Duration::from_millis(500);
    options.frame_timeout = timeout;
    options.server_channel_max_idle_time_seconds = Duration::from_secs(60);
    let node = ringmq::node::start(options).unwrap();

    let mut command = RemotingCommand::request(request::GET_ALL_TOPIC_CONFIG, ExtFields::new());
    command.opaque = 9;
    command.body = vec![b'x'; 1024 * 1024].into();
    let mut frame = Vec::new();
    encode_frame(&command, &mut frame).unwrap();
    let mut slow = connect(node.addr());
    // 64 KiB every 100 ms (the peer's pace, not a wait): each piece well within the
    // timeout, the whole frame about three times it.
    let started = Instant::now();
    for piece in frame.chunks(64 * 1024) {
        slow.write_all(piece)
            .expect("the slow frame's connection was closed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(started.elapsed() > timeout * 2, "{:?}", started.elapsed());
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 65536];
    let answer = loop {
        if let Some((answer, _)) = decode_frame(&buffer, usize::MAX >> 1).unwrap() {
            break answer;
        }
        let n = slow.read(&mut chunk).expect("an answer in time");
        assert!(
            n > 0,
            "a steadily arriving frame was cut by the frame timeout"
        );
        buffer.extend_from_slice(&chunk[..n]);
    };
    assert_eq!((answer.opaque, answer.code), (9, response::SUCCESS));
    assert_eq!(traffic(&node).frame_timeouts, 0);
    node.shutdown().unwrap();
}

#[test]
fn a_connection_without_requests_for_the_idle_timeout_is_closed_and_a_busy_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    // The shortest idle time the key takes: serverChannelMaxIdleTimeSeconds is in whole
    // seconds, as RocketMQ's.
    let idle = Duration::from_secs(1);
    options.server_channel_max_idle_time_seconds = idle;
    let node = ringmq::node::start(options).unwrap();

    let mut quiet = connect(node.addr());
    assert_eq!(call(&mut quiet, 1).code, response::SUCCESS);
    let answered = Instant::now();
    let mut busy = connect(node.addr());
    // The busy one asks every 50 ms (its pace, not a wait) for three idle periods.
    let mut opaque = 0;
    while answered.elapsed() < idle * 3 {
        opaque += 1;
        assert_eq!(call(&mut busy, opaque).code, response::SUCCESS);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(closed_by_node(&mut quiet), "an idle connection was kept");
    assert!(answered.elapsed() >= idle);
    assert_eq!(call(&mut busy, opaque + 1).code, response::SUCCESS);
    assert_eq!(traffic(&node).idle_closes, 1);
    node.shutdown().unwrap();
}

#[test]
fn partial_frames_past_the_node_wide_bound_close_only_the_connection_that_would_pass_it() {
    const BOUND: usize = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.max_partial_frame_bytes = BOUND;
    // One whole frame must fit the bound, and the largest message one frame: frames of
    // at most the bound, messages a header's room below it.
    options.max_frame_size = BOUND;
    options.max_message_size = BOUND - ringmq::node_config::FRAME_HEADER_ROOM;
    let node = ringmq::node::start(options).unwrap();

    // A holds 700 KiB of a 900 KiB frame: within the bound.
    let body_len = 900 * 1024;
    let mut command = RemotingCommand::request(request::GET_ALL_TOPIC_CONFIG, ExtFields::new())
        .with_body(vec![b'a'; body_len]);
    command.opaque = 1;
    let mut whole = Vec::new();
    encode_frame(&command, &mut whole).unwrap();
    let mut a = connect(node.addr());
    a.write_all(&whole[..700 * 1024]).unwrap();
    common::wait_for(Duration::from_secs(5), "A's bytes to be read", || {
        traffic(&node).bytes_in >= 700 * 1024
    });

    // B starts another 900 KiB frame: the node cannot hold both.
    let mut b = connect(node.addr());
    let _ = b.write_all(&whole[..600 * 1024]);
    assert!(
        closed_by_node(&mut b),
        "the node held more partial bytes than its bound"
    );
    assert_eq!(traffic(&node).partial_frame_refusals, 1);

    // A finishes its frame and is answered.
    a.write_all(&whole[700 * 1024..]).unwrap();
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 65536];
    let answer = loop {
        if let Some((answer, _)) = decode_frame(&buffer, usize::MAX >> 1).unwrap() {
            break answer;
        }
        let n = a.read(&mut chunk).expect("A is answered");
        assert!(n > 0, "A was closed");
        buffer.extend_from_slice(&chunk[..n]);
    };
    assert_eq!((answer.opaque, answer.code), (1, response::SUCCESS));
    node.shutdown().unwrap();
}

#[test]
fn the_connection_settings_reach_the_node_and_bad_values_are_refused_naming_the_key() {
    let mut loader = ConfigLoader::from_config(NodeConfig {
        store_path_root_dir: "/srv/ringmq".into(),
        ..NodeConfig::default()
    });
    loader
        .broker_conf_str(
            "broker.conf",
            "maxRequestsInFlightPerConnection=7\nmaxQueuedResponseBytesPerConnection=9000\n\
             frameTimeout=1500\nserverChannelMaxIdleTimeSeconds=45\n\
             maxPartialFrameBytes=33554432\nmaxConnections=12\n",
        )
        .unwrap();
    let config = loader.finish().unwrap();
    // What every connection of the node is served with (`node::start` derives it so).
    let limits = ringmq::node_config::connection_limits(&config);
    assert_eq!(limits.max_requests_in_flight, 7);
    assert_eq!(limits.max_queued_response_bytes, 9000);
    assert_eq!(limits.frame_timeout, Duration::from_millis(1500));
    assert_eq!(limits.idle_timeout, Duration::from_secs(45));
    assert_eq!(config.max_partial_frame_bytes, 32 * 1024 * 1024);
    assert_eq!(config.max_connections, 12);

    for (line, key, fragment) in [
        (
            "maxRequestsInFlightPerConnection=0",
            "maxRequestsInFlightPerConnection",
            "at least 1",
        ),
        (
            "maxQueuedResponseBytesPerConnection=0",
            "maxQueuedResponseBytesPerConnection",
            "at least 1",
        ),
        ("frameTimeout=0", "frameTimeout", "at least 1 ms"),
        ("frameTimeout=soon", "frameTimeout", "not a whole number"),
        (
            "serverChannelMaxIdleTimeSeconds=0",
            "serverChannelMaxIdleTimeSeconds",
            "at least 1 second",
        ),
        (
            "maxPartialFrameBytes=1048576",
            "maxPartialFrameBytes",
            "max_frame_size",
        ),
        ("maxConnections=0", "maxConnections", "at least 1"),
    ] {
        let mut loader = ConfigLoader::from_config(NodeConfig {
            store_path_root_dir: "/srv/ringmq".into(),
            ..NodeConfig::default()
        });
        let error = match loader.broker_conf_str("broker.conf", line) {
            Err(error) => error,
            Ok(_) => loader.finish().expect_err(line),
        };
        assert_eq!(
            (error.origin.as_str(), error.key.as_str()),
            ("broker.conf", key),
            "{error}"
        );
        assert!(error.message.contains(fragment), "{line}: {error}");
    }
}
