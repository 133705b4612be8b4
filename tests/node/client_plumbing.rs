//! The in-project client's plumbing against a scripted server: responses find their
//! requests in any order, timeouts (including an earlier deadline arriving after a later
//! one), a late response after a timeout, the connection breaking, dropping the last handle,
//! and oneway frames leaving whole and in order under backpressure.

use crate::common;

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::run_local;
use ringmq::client::Client;
use ringmq::remoting::{
    encode_frame, take_frame, RemotingCommand, DEFAULT_MAX_FRAME_LEN, ONEWAY_FLAG,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn listen() -> (TcpListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// The next request frame, or `None` at EOF.
async fn read_frame(stream: &mut TcpStream, buffer: &mut BytesMut) -> Option<RemotingCommand> {
    loop {
        if let Some(cmd) = take_frame(buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
            return Some(cmd);
        }
        if stream.read_buf(buffer).await.unwrap() == 0 {
            return None;
        }
    }
}

async fn answer(stream: &mut TcpStream, request: &RemotingCommand, body: impl Into<Bytes>) {
    let response = RemotingCommand::response_to(request, 0, None).with_body(body);
    let mut frame = Vec::new();
    encode_frame(&response, &mut frame).unwrap();
    stream.write_all(&frame).await.unwrap();
}

fn request(code: i32, body: impl Into<Bytes>) -> RemotingCommand {
    RemotingCommand::request(code, Default::default()).with_body(body)
}

#[test]
fn responses_reach_their_requests_in_any_order() {
    const REQUESTS: usize = 100;
    run_local(false, async {
        let (listener, addr) = listen().await;
        let server = tokio::task::spawn_local(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buffer = BytesMut::new();
            let mut requests = Vec::new();
            for _ in 0..REQUESTS {
                requests.push(read_frame(&mut stream, &mut buffer).await.unwrap());
            }
            for request in requests.iter().rev() {
                answer(&mut stream, request, request.body.clone()).await;
            }
            stream
        });
        let client = Client::connect(addr).await.unwrap();
        // More requests at once than the table starts with, so it grows while they wait.
        let tasks: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let client = client.clone();
                tokio::task::spawn_local(async move {
                    let response = client.request(request(1, format!("r{i}"))).await.unwrap();
                    assert_eq!(response.body, format!("r{i}").as_bytes());
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let _stream = server.await.unwrap();
        assert!(!client.is_closed());
    });
}

#[test]
fn a_timed_out_request_ends_and_its_late_response_is_dropped() {
    run_local(false, async {
        let (listener, addr) = listen().await;
        let client = Client::connect(addr).await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        client.set_timeout(Duration::from_millis(200));
        let mut buffer = BytesMut::new();

        let started = Instant::now();
        let error = client.request(request(1, "one")).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let first = read_frame(&mut stream, &mut buffer).await.unwrap();

        let second = tokio::task::spawn_local({
            let client = client.clone();
            async move { client.request(request(2, "two")).await }
        });
        let pending = read_frame(&mut stream, &mut buffer).await.unwrap();
        assert_ne!(first.opaque, pending.opaque);
        // The late answer to the first request comes first and must go nowhere.
        answer(&mut stream, &first, "late").await;
        answer(&mut stream, &pending, "two").await;
        assert_eq!(second.await.unwrap().unwrap().body, &b"two"[..]);
    });
}

#[test]
fn an_earlier_deadline_after_a_later_one_is_kept_and_a_break_fails_the_rest() {
    run_local(false, async {
        let (listener, addr) = listen().await;
        let client = Client::connect(addr).await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buffer = BytesMut::new();

        let patient = tokio::task::spawn_local({
            let client = client.clone();
            async move {
                client
                    .request_with_timeout(request(1, "patient"), Duration::from_secs(60))
                    .await
            }
        });
        read_frame(&mut stream, &mut buffer).await.unwrap();
        let started = Instant::now();
        let error = client
            .request_with_timeout(request(2, "hasty"), Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!patient.is_finished());

        // The server hangs up: the waiting request fails at once, later ones are refused.
        drop(stream);
        let started = Instant::now();
        let error = patient.await.unwrap().unwrap_err();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::ConnectionAborted,
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(client.is_closed());
        let error = client.request(request(3, "after")).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::NotConnected, "{error}");
    });
}

#[test]
fn dropping_the_last_handle_closes_the_socket() {
    run_local(false, async {
        let (listener, addr) = listen().await;
        let client = Client::connect(addr).await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let other = client.clone();
        let waiting = tokio::task::spawn_local({
            let client = client.clone();
            async move { client.request(request(1, "never answered")).await }
        });
        let mut buffer = BytesMut::new();
        read_frame(&mut stream, &mut buffer).await.unwrap();
        waiting.abort();
        let _ = waiting.await;
        drop(client);
        drop(other);
        let eof =
            tokio::time::timeout(Duration::from_secs(5), read_frame(&mut stream, &mut buffer))
                .await
                .expect("the client's socket closes when its last handle goes");
        assert!(eof.is_none());
    });
}

#[test]
fn oneway_frames_leave_whole_and_in_order_when_the_socket_pushes_back() {
    const FRAMES: usize = 80;
    const BODY: usize = 256 * 1024;
    run_local(false, async {
        let (listener, addr) = listen().await;
        let client = Client::connect(addr).await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let sent = Rc::new(std::cell::Cell::new(0));
        // Several senders at once, far more bytes than the socket buffers hold while the
        // server is not reading.
        let senders: Vec<_> = (0..4)
            .map(|sender| {
                let client = client.clone();
                let sent = sent.clone();
                tokio::task::spawn_local(async move {
                    for i in 0..FRAMES / 4 {
                        let body = vec![(sender * 16 + i) as u8; BODY];
                        client.oneway(request(7, body)).await.unwrap();
                        sent.set(sent.get() + 1);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            sent.get() < FRAMES,
            "oneway must wait for the socket to take its frame"
        );
        let mut buffer = BytesMut::new();
        let mut last_opaque = None;
        for _ in 0..FRAMES {
            let frame = read_frame(&mut stream, &mut buffer).await.unwrap();
            assert!(frame.flag & ONEWAY_FLAG != 0);
            assert_eq!(frame.body.len(), BODY);
            assert!(frame.body.iter().all(|byte| *byte == frame.body[0]));
            if let Some(last) = last_opaque {
                assert!(frame.opaque > last, "frames in the order they were sent");
            }
            last_opaque = Some(frame.opaque);
        }
        for sender in senders {
            sender.await.unwrap();
        }
        assert_eq!(sent.get(), FRAMES);
    });
}
