//! What a peer sends cannot forge, colour or flood the node's log: a refused frame whose
//! header carries a 4 MiB key full of newlines and terminal escapes produces one warn
//! line, escaped and truncated; and a flood of such connections logs a bounded burst of
//! warnings, not one per connection.
//!
//! Bounds checked: the warn line is a single line under LINE_BOUND bytes, with no raw
//! control byte; the log grows by less than LOG_GROWTH_BOUND for 4 MiB of hostile key;
//! 40 hostile connections within one interval log at most the shard's warn burst.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common;
use common::log::captured;

const LINE_BOUND: usize = 2048;
const LOG_GROWTH_BOUND: usize = 16 * 1024;
const WARN_BURST: u32 = 5;

fn log_len() -> usize {
    captured().lock().unwrap().len()
}

fn log_since(start: usize) -> String {
    String::from_utf8_lossy(&captured().lock().unwrap()[start..]).into_owned()
}

/// A JSON-header frame whose extFields hold a nested value under `key`: the header
/// decoder refuses it naming the field, key included.
fn hostile_frame(key: &str) -> Vec<u8> {
    let header = serde_json::json!({
        "code": 310, "language": "JAVA", "version": 0, "opaque": 1, "flag": 0,
        "extFields": { key: { "nested": true } }
    })
    .to_string();
    let mut frame = ((4 + header.len()) as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header.as_bytes());
    frame
}

/// Sends `frame` and waits (bounded by the read timeout) for the node to close.
fn send_and_wait_for_close(addr: std::net::SocketAddr, frame: &[u8]) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(frame).unwrap();
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "a bad frame got an answer"),
        Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
    }
}

fn start_node(dir: &std::path::Path) -> ringmq::node::NodeHandle {
    let mut options = common::node_config(dir);
    options.connection_warn_burst = WARN_BURST;
    options.connection_warn_interval = Duration::from_secs(3600);
    ringmq::node::start(options).expect("node starts")
}

#[test]
fn a_hostile_key_in_a_refused_frame_gives_one_bounded_escaped_warn_line_and_floods_are_limited() {
    let _alone = crate::alone();
    captured();
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());

    let mut key = String::from("k\nWARN ringmq: forged line\r\n\u{1b}[31mred\u{1b}[0m\u{7}");
    key.push_str(&"x".repeat(4 * 1024 * 1024));
    let before = log_len();
    send_and_wait_for_close(node.addr(), &hostile_frame(&key));
    // The warn is written before the connection closes, on the same shard thread.
    let logged = log_since(before);
    let warned: Vec<&str> = logged.lines().filter(|l| l.contains("bad frame")).collect();
    assert_eq!(warned.len(), 1, "{logged}");
    let line = warned[0];
    assert!(line.len() < LINE_BOUND, "a {}-byte warn line", line.len());
    assert!(
        line.contains("k\\nWARN ringmq: forged line\\r\\n\\u{1b}[31mred"),
        "the key is shown escaped: {line}"
    );
    assert!(line.contains(" bytes)"), "the cut is marked: {line}");
    assert!(
        !logged.lines().any(|l| l.starts_with("WARN ringmq: forged")),
        "a forged line: {logged}"
    );
    assert!(
        !logged.bytes().any(|b| b == 0x1b || b == 0x07 || b == b'\r'),
        "a raw control byte reached the log"
    );
    assert!(
        logged.len() < LOG_GROWTH_BOUND,
        "4 MiB of key added {} bytes of log",
        logged.len()
    );

    // A flood: 40 more hostile connections in one interval log the rest of the burst.
    let before = log_len();
    for n in 0..40 {
        send_and_wait_for_close(node.addr(), &hostile_frame(&format!("flood\n{n}")));
    }
    let logged = log_since(before);
    let warned = logged.lines().filter(|l| l.contains("bad frame")).count();
    assert_eq!(
        warned,
        WARN_BURST as usize - 1,
        "the burst, less the one above: {logged}"
    );
    node.shutdown().unwrap();
}
