//! Bad input to a node: framing errors (a truncated frame, a huge length field, a garbage
//! JSON header) close that connection and only that one; bad requests (an unknown code,
//! an illegal topic, a missing header field) get an error response naming the problem and
//! the connection stays usable.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::start_node;
use ringmq::client::{pull_request, queue_request, send_request_v2};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{
    decode_frame, encode_frame, ExtFields, RemotingCommand, DEFAULT_MAX_FRAME_LEN,
};

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    // Bounds every wait below: a node that neither answers nor closes fails the test.
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

fn send(stream: &mut TcpStream, mut cmd: RemotingCommand, opaque: i32) {
    cmd.opaque = opaque;
    let mut frame = Vec::new();
    encode_frame(&cmd, &mut frame).unwrap();
    stream.write_all(&frame).unwrap();
}

fn receive(stream: &mut TcpStream) -> RemotingCommand {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((cmd, _)) = decode_frame(&buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
            return cmd;
        }
        let n = stream
            .read(&mut chunk)
            .expect("a response before the read timeout");
        assert!(n > 0, "the connection closed instead of answering");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

fn call(stream: &mut TcpStream, cmd: RemotingCommand, opaque: i32) -> RemotingCommand {
    send(stream, cmd, opaque);
    let answer = receive(stream);
    assert_eq!(answer.opaque, opaque);
    assert!(answer.is_response());
    answer
}

/// The node closed the connection: EOF (or a reset) rather than a timeout.
fn assert_closed(stream: &mut TcpStream) {
    let mut chunk = [0u8; 64];
    match stream.read(&mut chunk) {
        Ok(0) => {}
        Ok(n) => panic!("expected the connection closed, got {n} bytes"),
        Err(error) => assert!(
            matches!(
                error.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "expected the connection closed, got {error}"
        ),
    }
}

fn assert_still_serves(addr: SocketAddr) {
    let mut stream = connect(addr);
    let answer = call(
        &mut stream,
        queue_request(request::GET_MAX_OFFSET, "T", 0),
        77,
    );
    assert_eq!(answer.code, response::SUCCESS);
}

#[test]
fn a_truncated_frame_then_close_ends_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut frame = Vec::new();
    encode_frame(&queue_request(request::GET_MAX_OFFSET, "T", 0), &mut frame).unwrap();
    let mut stream = connect(node.addr());
    stream.write_all(&frame[..frame.len() / 2]).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_closed(&mut stream);
    assert_still_serves(node.addr());
}

#[test]
fn a_huge_length_field_closes_the_connection_and_the_node_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut other = connect(node.addr());
    let mut stream = connect(node.addr());
    stream
        .write_all(&[0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 2])
        .unwrap();
    assert_closed(&mut stream);
    // A connection open meanwhile is unaffected, and new ones are served.
    let answer = call(
        &mut other,
        queue_request(request::GET_MIN_OFFSET, "T", 0),
        5,
    );
    assert_eq!(answer.code, response::SUCCESS);
    assert_still_serves(node.addr());
    let mut negative = connect(node.addr());
    negative.write_all(&[0xFF, 0xFF, 0xFF, 0xF0]).unwrap();
    assert_closed(&mut negative);
}

#[test]
fn a_garbage_json_header_closes_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let header = b"{this is not json";
    let mut frame = Vec::new();
    frame.extend_from_slice(&(4 + header.len() as u32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header);
    let mut stream = connect(node.addr());
    stream.write_all(&frame).unwrap();
    assert_closed(&mut stream);
    assert_still_serves(node.addr());
}

#[test]
fn an_unknown_code_is_refused_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut stream = connect(node.addr());
    let answer = call(
        &mut stream,
        RemotingCommand::request(9999, ExtFields::new()),
        1,
    );
    assert_eq!(answer.code, response::REQUEST_CODE_NOT_SUPPORTED);
    assert!(
        answer.remark.as_deref().unwrap_or("").contains("9999"),
        "{answer:?}"
    );
    let answer = call(
        &mut stream,
        queue_request(request::GET_MAX_OFFSET, "T", 0),
        2,
    );
    assert_eq!(answer.code, response::SUCCESS);
}

#[test]
fn an_illegal_topic_is_message_illegal_with_a_remark() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut stream = connect(node.addr());
    let long = "t".repeat(200);
    for (opaque, topic) in [(1, long.as_str()), (2, "bad/topic"), (3, "has space")] {
        let answer = call(
            &mut stream,
            send_request_v2(topic, 0, b"x", None, None),
            opaque,
        );
        assert_eq!(
            answer.code,
            response::MESSAGE_ILLEGAL,
            "{topic}: {answer:?}"
        );
        assert!(!answer.remark.unwrap_or_default().is_empty());
    }
    let answer = call(&mut stream, send_request_v2("Fine", 0, b"x", None, None), 4);
    assert_eq!(answer.code, response::SUCCESS);
}

#[test]
fn a_missing_header_field_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut stream = connect(node.addr());
    let mut cmd = send_request_v2("T", 0, b"x", None, None);
    cmd.ext_fields.remove("b");
    let answer = call(&mut stream, cmd, 1);
    assert_eq!(answer.code, response::SYSTEM_ERROR);
    assert!(
        answer.remark.as_deref().unwrap_or("").contains("`b`"),
        "{answer:?}"
    );

    let mut cmd = pull_request("T", 0, 0, 32, None, None);
    cmd.ext_fields.remove("queueOffset");
    let answer = call(&mut stream, cmd, 2);
    assert_eq!(answer.code, response::SYSTEM_ERROR);
    assert!(
        answer
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("queueOffset"),
        "{answer:?}"
    );

    let mut cmd = queue_request(request::GET_MAX_OFFSET, "T", 0);
    cmd.put_ext("queueId", "zero");
    let answer = call(&mut stream, cmd, 3);
    assert_eq!(answer.code, response::SYSTEM_ERROR);
    assert!(
        answer.remark.as_deref().unwrap_or("").contains("queueId"),
        "{answer:?}"
    );

    // Still usable afterwards.
    let answer = call(
        &mut stream,
        queue_request(request::GET_MAX_OFFSET, "T", 0),
        4,
    );
    assert_eq!(answer.code, response::SUCCESS);
}
