//! `ringmq serve`'s start-up lines say what is bound, not what clients are told: the
//! `listening on` line carries the bind address (`0.0.0.0` by default, `bindAddress`
//! otherwise), and the banner names the version, the store, the flush mode and the role.
//! The two parsed lines keep their shape, and the address they carry can be connected to.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};

use common::serve::serve_command;

/// A `ringmq serve` with `args`, killed when dropped.
struct Node(std::process::Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stderr lines of a `ringmq serve` with `args`, up to the line naming its shards,
/// and the node, still serving.
fn banner(dir: &std::path::Path, args: &[&str]) -> (Vec<String>, Node) {
    let args = [&["--shards", "1", "--flush", "sync"], args].concat();
    let mut child = serve_command(dir, 0, &args)
        .spawn()
        .expect("spawn ringmq serve");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).expect("read serve's stderr");
        assert!(read > 0, "serve exited before its banner ended: {lines:#?}");
        let line = line.trim_end().to_string();
        let last = line.ends_with(" shards") || line.ends_with(" shard");
        lines.push(line);
        if last {
            break;
        }
    }
    // Keep draining stderr so the node never blocks on a full pipe.
    let mut rest = stderr;
    std::thread::spawn(move || std::io::copy(&mut rest, &mut std::io::sink()));
    (lines, Node(child))
}

fn address_after(lines: &[String], prefix: &str) -> SocketAddr {
    let found: Vec<_> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(prefix))
        .collect();
    assert_eq!(found.len(), 1, "one {prefix:?} line in {lines:#?}");
    found[0]
        .parse()
        .unwrap_or_else(|_| panic!("an address alone after {prefix:?}: {lines:#?}"))
}

#[test]
fn the_banner_names_the_bound_address_version_store_flush_and_role() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _node) = banner(dir.path(), &[]);
    let broker = address_after(&lines, "ringmq: listening on ");
    let namesrv = address_after(&lines, "ringmq: name server listening on ");
    assert!(
        broker.ip().is_unspecified(),
        "bound to every interface: {lines:#?}"
    );
    assert!(namesrv.ip().is_unspecified(), "{lines:#?}");
    let told = format!("ringmq: clients are told 127.0.0.1:{}", broker.port());
    assert!(lines.iter().any(|l| l.starts_with(&told)), "{lines:#?}");
    let starting = lines
        .iter()
        .find(|l| l.contains("starting"))
        .unwrap_or_else(|| panic!("no starting line: {lines:#?}"));
    for part in [
        env!("CARGO_PKG_VERSION"),
        &dir.path().display().to_string(),
        "SYNC_FLUSH",
        "ASYNC_MASTER",
    ] {
        assert!(starting.contains(part), "{part} in {starting}");
    }
    // What scripts do with the line: connect to it as printed.
    TcpStream::connect(broker).expect("the printed address connects");
}

#[test]
fn the_banner_names_the_bind_address_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _node) = banner(dir.path(), &["--set", "bindAddress=127.0.0.1"]);
    let broker = address_after(&lines, "ringmq: listening on ");
    assert_eq!(broker.ip().to_string(), "127.0.0.1", "{lines:#?}");
    let namesrv = address_after(&lines, "ringmq: name server listening on ");
    assert_eq!(namesrv.ip().to_string(), "127.0.0.1", "{lines:#?}");
}
