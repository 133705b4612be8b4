//! A producer that writes a burst of oneway sends and closes its connection at once loses
//! none of them: every whole request the node read is carried out, even after the peer
//! hung up (the connection no longer aborts its request tasks when the peer closes).

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::{run_local, start_node, wait_for};
use ringmq::client::{queue_request, send_request_v1, Client};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::frame::encode_frame;
use ringmq::remoting::ONEWAY_FLAG;

const MESSAGES: usize = 500;
const TOPIC: &str = "OnewayBurst";

fn stored(addr: std::net::SocketAddr) -> u64 {
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let answer = client
            .request(queue_request(request::GET_MAX_OFFSET, TOPIC, 0))
            .await
            .unwrap();
        if answer.code != response::SUCCESS {
            return 0;
        }
        answer.ext_fields["offset"].parse().unwrap()
    })
}

#[test]
fn oneway_sends_written_just_before_the_peer_closes_are_all_stored() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut burst = Vec::new();
    for i in 0..MESSAGES {
        let mut send = send_request_v1(TOPIC, 0, format!("m{i}").as_bytes(), None, None);
        send.flag |= ONEWAY_FLAG;
        send.opaque = i as i32 + 1;
        encode_frame(&send, &mut burst).unwrap();
    }
    {
        let mut socket = std::net::TcpStream::connect(node.addr()).unwrap();
        socket.write_all(&burst).unwrap();
        socket.shutdown(std::net::Shutdown::Both).unwrap();
    }
    wait_for(
        Duration::from_secs(30),
        "every oneway message of the burst stored",
        || stored(node.addr()) == MESSAGES as u64,
    );
    node.shutdown().unwrap();
}
