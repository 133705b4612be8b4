//! A broker port held by another process stops the start with "Address already in use",
//! whatever either node's shard count: with several shards the node binds through
//! `SO_REUSEPORT`, which alone would let a second node (another store, the same port)
//! share the port and the kernel split clients between two brokers with different data.

use crate::common;

use std::time::Duration;

use common::serve::{refused_on, Serve};

const PATIENCE: Duration = Duration::from_secs(30);

fn second_start_on_the_same_port(first_shards: &str, second_shards: &str) {
    let first_dir = tempfile::tempdir().unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let first = Serve::start(first_dir.path(), &["--shards", first_shards], "first node");
    let port = first.addr.port();
    let stderr = refused_on(
        second_dir.path(),
        port,
        &["--shards", second_shards],
        PATIENCE,
    );
    assert!(
        stderr.contains(&format!("cannot listen on port {port}"))
            && stderr.contains("Address already in use"),
        "{first_shards}-shard node holds {port}, {second_shards}-shard start said: {stderr}"
    );
    first.kill();
}

#[test]
fn a_second_multi_shard_node_on_a_multi_shard_nodes_port_is_refused() {
    second_start_on_the_same_port("2", "2");
}

#[test]
fn a_second_node_on_a_taken_port_is_refused_whatever_the_shard_counts() {
    second_start_on_the_same_port("1", "2");
    second_start_on_the_same_port("2", "1");
    second_start_on_the_same_port("1", "1");
}
