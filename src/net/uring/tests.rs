//! The ring's connections against a plain blocking client over loopback: bytes in order
//! both ways, the send queue's bound, the inbox's bound when the reader stops, the last
//! answers of a connection dropped right after writing them, and the peer seeing the end.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{NetRing, NetRingSettings, UringListener, UringStream, INBOX_RECEIVES};
use crate::net::{Connection, Listener, WriteHalf};

const SETTINGS: NetRingSettings = NetRingSettings {
    entries: 64,
    recv_buffers: 16,
    recv_buffer_bytes: 4096,
    send_queue_bytes: 64 * 1024,
};

/// Runs `test` on a fresh current-thread runtime inside a `LocalSet`, with a ring and a
/// listener on a free loopback port; `test` gets the listener and a client connected to it.
fn with_connection<F>(settings: NetRingSettings, test: impl FnOnce(UringStream, TcpStream) -> F)
where
    F: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&runtime, async move {
        let ring = NetRing::new(settings).expect("a network ring (io_uring refused?)");
        let bound = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = bound.local_addr().unwrap();
        let listener = UringListener::from_std(bound, Rc::clone(&ring)).unwrap();
        let client = TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        test(server, client).await;
    });
}

/// A deterministic byte pattern, so a reordering or a lost chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn bytes_cross_in_order_both_ways_through_a_small_send_queue() {
    let settings = NetRingSettings {
        send_queue_bytes: 4096,
        ..SETTINGS
    };
    with_connection(settings, |server, mut client| async move {
        let (mut read, mut write) = server.into_split();
        let sent = pattern(1 << 20);
        let expected = sent.clone();
        // The client writes a megabyte and reads it back on another thread.
        let peer = std::thread::spawn(move || {
            let mut reader = client.try_clone().unwrap();
            let echo = std::thread::spawn(move || {
                let mut back = vec![0; expected.len()];
                reader.read_exact(&mut back).unwrap();
                assert!(back == expected, "the echo came back changed");
            });
            client.write_all(&sent).unwrap();
            echo.join().unwrap();
        });
        let mut echoed = 0;
        let mut buffer = vec![0; 10_000];
        while echoed < 1 << 20 {
            let n = read.read(&mut buffer).await.unwrap();
            assert!(n > 0, "end of stream after {echoed} bytes");
            // Through `write_all`, so the 4 KiB queue makes it wait for the ring.
            write.write_all(&buffer[..n]).await.unwrap();
            echoed += n;
        }
        write.flush().await.unwrap();
        tokio::task::spawn_blocking(move || peer.join().unwrap())
            .await
            .unwrap();
    });
}

#[test]
fn try_write_takes_no_more_than_the_send_queue_holds() {
    with_connection(SETTINGS, |server, client| async move {
        let (_read, write) = server.into_split();
        let big = vec![1u8; 4 * SETTINGS.send_queue_bytes];
        // The client does not read: the socket buffer and then the queue fill.
        let mut taken = 0;
        loop {
            match write.try_write(&big) {
                Ok(n) => {
                    assert!(n <= SETTINGS.send_queue_bytes, "took {n} at once");
                    taken += n;
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) => panic!("try_write failed: {error}"),
            }
            // Let the ring send what it can, until the kernel's buffer is full too.
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(taken >= SETTINGS.send_queue_bytes, "took only {taken}");
        let socket = &write.0 .0;
        let state = socket.state.borrow();
        let held = state.queue.len() + state.sending.map_or(0, |(_, len)| len);
        assert!(
            held <= SETTINGS.send_queue_bytes,
            "{held} bytes held, above the {} the queue may hold",
            SETTINGS.send_queue_bytes
        );
        drop(client);
    });
}

#[test]
fn a_reader_that_stops_reading_holds_a_bounded_inbox() {
    // A pool as large as all the client writes, so the receive never runs out of
    // buffers: only the stop bounds the inbox.
    let settings = NetRingSettings {
        recv_buffers: 2048,
        ..SETTINGS
    };
    with_connection(settings, |server, mut client| async move {
        let (mut read, _write) = server.into_split();
        // One read arms the receive; then the reader stops while the client writes up to
        // 8 MiB, as much as the kernel's buffers take in 2 s.
        let mut first = [0u8; 1];
        client.write_all(&[9]).unwrap();
        read.read_exact(&mut first).await.unwrap();
        let writer = std::thread::spawn(move || {
            client.set_nonblocking(true).unwrap();
            let chunk = pattern(64 * 1024);
            let mut written = 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while written < 8 << 20 && std::time::Instant::now() < deadline {
                // From where the last (perhaps partial) write stopped, so the stream
                // stays the pattern repeated.
                if let Ok(n) = client.write(&chunk[written % chunk.len()..]) {
                    written += n;
                }
                // Paced, so what arrives while the node's thread is not running (and so
                // cannot stop its receive) stays small against the total.
                std::thread::sleep(Duration::from_millis(1));
            }
            (client, written)
        });
        while !writer.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (_client, written) = writer.join().unwrap();
        // Let every completion the ring has be reaped.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let socket = &read.0 .0;
        let held = socket.state.borrow().inbox.len();
        // Four buffers' worth, plus what had already completed into the pool when the
        // receive was stopped (at most the whole pool); without the stop it would be all.
        let buffer = settings.recv_buffer_bytes as usize;
        let limit = INBOX_RECEIVES * buffer + usize::from(settings.recv_buffers) * buffer;
        assert!(
            held <= limit && held * 4 <= written,
            "the inbox holds {held} bytes of the {written} written (limit {limit}): the \
             receive did not stop"
        );
        // Reading resumes the receive: every byte still arrives, in order.
        let mut rest = vec![0u8; written];
        read.read_exact(&mut rest).await.unwrap();
        let chunk = pattern(64 * 1024);
        for (at, byte) in rest.iter().enumerate() {
            assert_eq!(*byte, chunk[at % chunk.len()], "byte {at} of {written}");
        }
    });
}

#[test]
fn answers_written_just_before_the_connection_is_dropped_still_arrive_and_then_the_end() {
    with_connection(SETTINGS, |server, mut client| async move {
        let (read, mut write) = server.into_split();
        // Less than a loopback socket's buffer takes, so the drop's last offer is taken whole.
        let answer = pattern(8 * 1024);
        write.write_all(&answer).await.unwrap();
        drop(read);
        drop(write);
        let peer = tokio::task::spawn_blocking(move || {
            let mut got = Vec::new();
            client.read_to_end(&mut got).unwrap();
            got
        });
        // The ring's driver runs while the client reads.
        let got = peer.await.unwrap();
        assert!(got.len() <= answer.len() && got[..] == answer[..got.len()]);
        assert_eq!(got.len(), answer.len(), "the last answer was cut short");
    });
}

#[test]
fn the_peer_closing_is_an_end_of_stream() {
    with_connection(SETTINGS, |mut server, mut client| async move {
        client.write_all(b"last words").unwrap();
        drop(client);
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"last words");
    });
}
