//! The simulated network (`ringmq::net::sim`) does what its fault model says: a seeded run is
//! reproducible; bytes arrive in order within a connection and out of order between
//! connections; delay, loss, clogs and partitions (one way and both) hold data and lose
//! none; a reset fails both ends; a peer that never reads stops its writer at the buffer
//! bound; the remoting codec runs over it. Time is tokio's paused clock, so every figure is
//! exact and every run the same. A failing seeded case prints its seed.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ringmq::net::sim::{Direction, NetConfig, SimConnection, SimNet, SimTransport};
use ringmq::net::{Connection, Listener, Transport};
use ringmq::remoting::frame::{decode_frame, encode_frame};
use ringmq::remoting::{ExtFields, RemotingCommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, Instant};

fn ip(last: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, last])
}

fn net(config: NetConfig) -> SimNet {
    SimNet::new(config).expect("valid config")
}

fn exact_delay(ms: u64) -> NetConfig {
    NetConfig {
        min_delay: Duration::from_millis(ms),
        max_delay: Duration::from_millis(ms),
        ..NetConfig::default()
    }
}

async fn listen(host: &SimTransport, port: u16) -> ringmq::net::sim::SimListener {
    host.bind(SocketAddr::new(host.ip(), port)).await.unwrap()
}

/// A connection from host 10.0.0.2 to a listener on 10.0.0.1:9000: (client end, server end).
async fn connected(net: &SimNet) -> (SimConnection, SimConnection) {
    let listener = listen(&net.host(ip(1)), 9000).await;
    let client = net
        .host(ip(2))
        .connect("10.0.0.1:9000".parse().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (client, server)
}

async fn read_exactly(conn: &mut impl Connection, n: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0; n];
    conn.read_exact(&mut bytes).await?;
    Ok(bytes)
}

/// Two clients send 40 numbered lines each to one server over a lossy, clogging network;
/// the server's arrival history: (ms since start, client port, line).
async fn history(seed: u64) -> Vec<(u128, u16, u8)> {
    let net = net(NetConfig {
        seed,
        loss_percent: 10,
        clog_percent: 3,
        ..NetConfig::default()
    });
    let start = Instant::now();
    let server = net.host(ip(1));
    let listener = listen(&server, 9000).await;
    let mut connected = Vec::new();
    for host in [ip(2), ip(3)] {
        let transport = net.host(host);
        connected.push(
            transport
                .connect("10.0.0.1:9000".parse().unwrap())
                .await
                .unwrap(),
        );
    }
    let mut accepted = Vec::new();
    for _ in 0..2 {
        accepted.push(listener.accept().await.unwrap().0);
    }
    let mut accepted = accepted.into_iter();
    let mut connected = connected.into_iter();
    let (first, second) = (connected.next().unwrap(), connected.next().unwrap());
    let (a, b) = (accepted.next().unwrap(), accepted.next().unwrap());
    let (_, _, mut seen_a, seen_b) = tokio::join!(
        send_lines(first),
        send_lines(second),
        receive_lines(a, start),
        receive_lines(b, start)
    );
    seen_a.extend(seen_b);
    seen_a.sort();
    seen_a
}

async fn send_lines(mut conn: impl Connection) {
    for line in 0..40u8 {
        conn.write_all(&[line]).await.unwrap();
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
}

async fn receive_lines(mut conn: impl Connection, start: Instant) -> Vec<(u128, u16, u8)> {
    let mut seen = Vec::new();
    for _ in 0..40 {
        let byte = read_exactly(&mut conn, 1).await.unwrap()[0];
        seen.push((
            start.elapsed().as_micros(),
            conn.peer_addr().unwrap().port(),
            byte,
        ));
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn a_seeded_run_is_reproducible_and_another_seed_differs() {
    let first = history(42).await;
    assert_eq!(first.len(), 80);
    assert_eq!(first, history(42).await, "seed 42 gave two histories");
    assert_ne!(first, history(43).await, "seeds 42 and 43 gave one history");
}

#[tokio::test(start_paused = true)]
async fn bytes_keep_their_order_within_a_connection_but_not_between_connections() {
    let mut overtaken = 0;
    for seed in 0..40 {
        let net = net(NetConfig {
            seed,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(20),
            ..NetConfig::default()
        });
        let server = net.host(ip(1));
        let listener = listen(&server, 9000).await;
        let client = net.host(ip(2));
        let mut first = client
            .connect("10.0.0.1:9000".parse().unwrap())
            .await
            .unwrap();
        let mut second = client
            .connect("10.0.0.1:9000".parse().unwrap())
            .await
            .unwrap();
        let (mut a, _) = listener.accept().await.unwrap();
        let (mut b, _) = listener.accept().await.unwrap();
        for step in 0..10u8 {
            first.write_all(&[step]).await.unwrap();
        }
        second.write_all(&[100]).await.unwrap();
        let start = Instant::now();
        let on_first = read_exactly(&mut a, 10).await.unwrap();
        let first_done = start.elapsed();
        assert_eq!(
            on_first,
            (0..10).collect::<Vec<u8>>(),
            "seed {seed}: reordered within a connection"
        );
        let start_second = Instant::now();
        assert_eq!(
            read_exactly(&mut b, 1).await.unwrap(),
            vec![100],
            "seed {seed}"
        );
        // The second connection's byte, written last, was already there when the first
        // connection's last byte arrived: it overtook.
        if start_second.elapsed().is_zero() && !first_done.is_zero() {
            overtaken += 1;
        }
    }
    assert!(
        overtaken > 0,
        "in 40 seeds no later write on another connection arrived first"
    );
}

#[tokio::test(start_paused = true)]
async fn one_way_delay_and_loss_set_the_arrival_time() {
    let net = net(NetConfig {
        loss_percent: 100,
        retransmit_delay: Duration::from_millis(200),
        ..exact_delay(5)
    });
    let (mut client, mut server) = connected(&net).await;
    let peer = server.peer_addr().unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
    let start = Instant::now();
    client.write_all(b"late").await.unwrap();
    assert_eq!(read_exactly(&mut server, 4).await.unwrap(), b"late");
    assert_eq!(start.elapsed(), Duration::from_millis(205));
}

#[tokio::test(start_paused = true)]
async fn a_partition_holds_data_both_ways_until_the_heal_and_loses_none() {
    let net = net(exact_delay(1));
    let (mut client, mut server) = connected(&net).await;
    client.write_all(b"in flight").await.unwrap();
    net.partition(ip(1), ip(2), Direction::Both);
    server.write_all(b"reply").await.unwrap();
    assert!(
        timeout(Duration::from_secs(30), read_exactly(&mut server, 9))
            .await
            .is_err(),
        "bytes crossed a partition"
    );
    assert!(
        timeout(Duration::from_secs(30), read_exactly(&mut client, 5))
            .await
            .is_err()
    );
    net.heal(ip(2), ip(1));
    assert_eq!(read_exactly(&mut server, 9).await.unwrap(), b"in flight");
    assert_eq!(read_exactly(&mut client, 5).await.unwrap(), b"reply");
}

#[tokio::test(start_paused = true)]
async fn a_one_way_partition_cuts_only_its_direction() {
    let net = net(exact_delay(1));
    let (mut client, mut server) = connected(&net).await;
    net.partition(ip(2), ip(1), Direction::OneWay);
    client.write_all(b"up").await.unwrap();
    server.write_all(b"down").await.unwrap();
    assert_eq!(read_exactly(&mut client, 4).await.unwrap(), b"down");
    assert!(
        timeout(Duration::from_secs(30), read_exactly(&mut server, 2))
            .await
            .is_err()
    );
    net.heal_all();
    assert_eq!(read_exactly(&mut server, 2).await.unwrap(), b"up");
}

#[tokio::test(start_paused = true)]
async fn a_connect_across_a_partition_waits_for_the_heal() {
    let net = net(exact_delay(1));
    let _listener = listen(&net.host(ip(1)), 9000).await;
    net.partition(ip(1), ip(2), Direction::OneWay);
    let client = net.host(ip(2));
    let addr: SocketAddr = "10.0.0.1:9000".parse().unwrap();
    assert!(timeout(Duration::from_secs(60), client.connect(addr))
        .await
        .is_err());
    net.heal(ip(1), ip(2));
    assert!(client.connect(addr).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_clogged_path_delivers_when_the_clog_ends() {
    let net = net(exact_delay(1));
    let (mut client, mut server) = connected(&net).await;
    let start = Instant::now();
    net.clog(ip(2), ip(1), Duration::from_millis(300));
    client.write_all(b"x").await.unwrap();
    server.write_all(b"y").await.unwrap();
    assert_eq!(read_exactly(&mut client, 1).await.unwrap(), b"y");
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(1),
        "the other direction was clogged"
    );
    assert_eq!(read_exactly(&mut server, 1).await.unwrap(), b"x");
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_reset_fails_both_ends_and_loses_what_was_undelivered() {
    let net = net(exact_delay(50));
    let (mut client, mut server) = connected(&net).await;
    client.write_all(b"lost").await.unwrap();
    assert_eq!(net.reset(ip(1), ip(2)), 1);
    let read = read_exactly(&mut server, 4).await.unwrap_err();
    assert_eq!(read.kind(), std::io::ErrorKind::ConnectionReset);
    let write = client.write_all(b"more").await.unwrap_err();
    assert_eq!(write.kind(), std::io::ErrorKind::ConnectionReset);
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_never_reads_stops_its_writer_at_the_buffer_bound() {
    let net = net(NetConfig {
        connection_buffer_bytes: 1024,
        ..exact_delay(1)
    });
    let (mut client, mut server) = connected(&net).await;
    client.write_all(&[7; 1024]).await.unwrap();
    assert!(
        timeout(Duration::from_secs(30), client.write_all(&[8]))
            .await
            .is_err(),
        "a write past the buffer bound completed"
    );
    assert_eq!(
        read_exactly(&mut server, 1024).await.unwrap(),
        vec![7; 1024]
    );
    client.write_all(&[9]).await.unwrap();
    assert_eq!(read_exactly(&mut server, 1).await.unwrap(), vec![9]);
}

#[tokio::test(start_paused = true)]
async fn a_close_ends_the_stream_after_the_data_and_fails_the_peers_writes() {
    let net = net(exact_delay(1));
    let (mut client, mut server) = connected(&net).await;
    client.write_all(b"bye").await.unwrap();
    drop(client);
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"bye");
    let error = server.write_all(b"anyone?").await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe);
}

#[tokio::test(start_paused = true)]
async fn ports_are_refused_taken_and_freed_as_on_a_real_host() {
    let net = net(NetConfig::default());
    let host = net.host(ip(1));
    let refused = net
        .host(ip(2))
        .connect("10.0.0.1:9000".parse().unwrap())
        .await;
    assert_eq!(
        refused.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    let listener = listen(&host, 9000).await;
    let taken = host.bind("0.0.0.0:9000".parse().unwrap()).await;
    assert_eq!(taken.unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
    let foreign = host.bind("10.0.0.9:1".parse().unwrap()).await;
    assert_eq!(
        foreign.unwrap_err().kind(),
        std::io::ErrorKind::AddrNotAvailable
    );
    let picked = host.bind("0.0.0.0:0".parse().unwrap()).await.unwrap();
    assert_ne!(picked.local_addr().unwrap().port(), 0);
    drop(listener);
    assert!(host.bind("10.0.0.1:9000".parse().unwrap()).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_remoting_request_crosses_the_simulated_network_in_one_piece() {
    let net = net(NetConfig {
        seed: 5,
        loss_percent: 30,
        ..NetConfig::default()
    });
    let listener = listen(&net.host(ip(1)), 10911).await;
    let mut client = net
        .host(ip(2))
        .connect("10.0.0.1:10911".parse().unwrap())
        .await
        .unwrap();
    let (mut server, _) = listener.accept().await.unwrap();
    let mut fields = ExtFields::new();
    fields.insert("topic".into(), "T");
    let request = RemotingCommand::request(10, fields).with_body(vec![1; 5000]);
    let mut frame = Vec::new();
    encode_frame(&request, &mut frame).unwrap();
    // Written in small pieces, as a congested socket would take it.
    for piece in frame.chunks(700) {
        client.write_all(piece).await.unwrap();
    }
    let mut received = Vec::new();
    let decoded = loop {
        let mut buf = [0; 512];
        let n = server.read(&mut buf).await.unwrap();
        assert!(n > 0, "end of stream before a whole frame");
        received.extend_from_slice(&buf[..n]);
        if let Some((command, used)) = decode_frame(&received, 1 << 20).unwrap() {
            assert_eq!(used, frame.len());
            break command;
        }
    };
    assert_eq!(decoded.code, 10);
    assert_eq!(
        decoded.ext_fields.get("topic").map(|v| v.to_string()),
        Some("T".to_string())
    );
    assert_eq!(decoded.body, vec![1; 5000]);
}
