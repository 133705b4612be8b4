//! What `ringmq serve` prints on stderr when it starts: the version and what it runs with
//! (store, shards, flush mode, role), then what it bound.
//!
//! Tests and scripts parse two of these lines, so their shape is fixed: `ringmq: listening
//! on <addr>` and `ringmq: name server listening on <addr>`, a socket address alone after
//! the prefix. The address is the bound one (`bindAddress`, the wildcard `0.0.0.0` by
//! default, which a local client can connect to as it is); what clients are told
//! (`brokerIP1`, in routes and STOREHOST) is on a line of its own, so that an operator
//! reading the banner sees both and the parsers see neither change shape.

use std::net::SocketAddr;
use std::path::Path;

/// What the node runs with, printed before it starts.
pub struct Running<'a> {
    pub version: &'a str,
    pub store: &'a Path,
    pub shards: u8,
    pub flush: &'a str,
    pub role: &'a str,
}

/// What the node bound, printed once it serves.
pub struct Bound<'a> {
    pub broker: SocketAddr,
    pub advertised: SocketAddr,
    /// The embedded name server's bound address; `None` when the node registers with
    /// `namesrv_addrs` instead.
    pub namesrv: Option<SocketAddr>,
    /// The external name servers the node registers with (`namesrvAddr`).
    pub namesrv_addrs: &'a [SocketAddr],
    pub metrics: Option<SocketAddr>,
    pub shards: usize,
    /// Shards serving their connections on an io_uring network ring (`networkIo`).
    pub network_ring_shards: usize,
}

/// The line printed before the start: version, store root, shard count, flush mode, role.
pub fn starting(running: &Running) -> String {
    format!(
        "ringmq: ringmq {} starting: store {}, {} shard{}, {}, {}",
        running.version,
        running.store.display(),
        running.shards,
        if running.shards == 1 { "" } else { "s" },
        running.flush,
        running.role
    )
}

/// The lines printed once the node serves, in order.
pub fn serving(bound: &Bound<'_>) -> Vec<String> {
    let mut lines = vec![
        format!("ringmq: listening on {}", bound.broker),
        format!(
            "ringmq: clients are told {} (brokerIP1, in routes and message ids)",
            bound.advertised
        ),
    ];
    match bound.namesrv {
        Some(namesrv) => lines.push(format!("ringmq: name server listening on {namesrv}")),
        None => {
            let list: Vec<String> = bound.namesrv_addrs.iter().map(|a| a.to_string()).collect();
            lines.push(format!(
                "ringmq: registering with the name servers {} (namesrvAddr)",
                list.join(";")
            ));
        }
    }
    if let Some(metrics) = bound.metrics {
        lines.push(format!("ringmq: metrics on http://{metrics}/metrics"));
    }
    lines.push(format!("ringmq: {} shards", bound.shards));
    lines.push(match bound.network_ring_shards {
        0 => "ringmq: connections on epoll".to_string(),
        ring if ring == bound.shards => "ringmq: connections on io_uring".to_string(),
        ring => format!(
            "ringmq: connections on io_uring in {ring} of {} shards, epoll in the rest",
            bound.shards
        ),
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsed_lines_keep_an_address_alone_after_their_prefix() {
        let lines = serving(&Bound {
            broker: "0.0.0.0:10911".parse().unwrap(),
            advertised: "192.0.2.7:10911".parse().unwrap(),
            namesrv: Some("0.0.0.0:9876".parse().unwrap()),
            namesrv_addrs: &[],
            metrics: None,
            shards: 2,
            network_ring_shards: 0,
        });
        let after = |prefix: &str| -> Vec<SocketAddr> {
            lines
                .iter()
                .filter_map(|l| l.strip_prefix(prefix)?.parse().ok())
                .collect()
        };
        assert_eq!(
            after("ringmq: listening on "),
            ["0.0.0.0:10911".parse().unwrap()]
        );
        assert_eq!(
            after("ringmq: name server listening on "),
            ["0.0.0.0:9876".parse().unwrap()]
        );
        assert!(lines.iter().any(|l| l.contains("192.0.2.7:10911")));
    }
}
