//! One node per port: the shards of one node share the broker port through
//! `SO_REUSEPORT` (D3), and nothing else may.
//!
//! `SO_REUSEPORT` lets any socket of the same user that also sets it join the port, so a
//! second multi-shard node with another store would bind too, and the kernel would spread
//! clients over two brokers with different data. The kernel offers no way to bind "shared
//! with my own sockets only" (clearing the option after the bind does not stop later
//! joiners: the port's bucket keeps its fast-reuse flag), and a check before the bind
//! leaves a window between check and bind. So the check comes after: once every shard's
//! listener is bound and listening, the node reads the kernel's table of listening
//! sockets (`/proc/net/tcp` and `/proc/net/tcp6`, of the node's network namespace) and
//! refuses to start if a listener on its port and an overlapping address is not one of
//! its own (compared by socket inode).
//!
//! Why this is race-free: two nodes starting at once each bind first and look second, so
//! whichever binds later sees the earlier one and refuses; if they interleave, both see
//! each other and both refuse. No order lets both serve. A process that does not set
//! `SO_REUSEPORT` (a Java broker, a one-shard ringmq) already fails our bind, or its own,
//! with `EADDRINUSE`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;

/// TCP state `LISTEN` in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

/// A listening socket from the kernel's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    pub addr: SocketAddr,
    pub inode: u64,
}

/// Fails with `EADDRINUSE` if a socket other than `ours` listens on `ours`' port at an
/// address that overlaps theirs. `ours` must be bound and listening.
pub fn check_alone(ours: &[std::net::TcpListener]) -> std::io::Result<()> {
    let Some(first) = ours.first() else {
        return Ok(());
    };
    let addr = first.local_addr()?;
    let mut inodes = Vec::with_capacity(ours.len());
    for listener in ours {
        inodes.push(socket_inode(listener)?);
    }
    let mut table = Vec::new();
    for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(path) {
            Ok(text) => table.extend(parse_table(&text)),
            // No IPv6 in this kernel: no tcp6 table, and no IPv6 sharers either.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(std::io::Error::new(
                    error.kind(),
                    format!("cannot read {path} to check the port is ours alone: {error}"),
                ))
            }
        }
    }
    // Our own listeners must be in the table, or the check looks at the wrong table (another
    // network namespace's /proc) and would pass anything.
    for inode in &inodes {
        if !table.iter().any(|l| l.inode == *inode) {
            return Err(std::io::Error::other(format!(
                "cannot check that port {} is ours alone: our listener (inode {inode}) is not in /proc/net/tcp",
                addr.port()
            )));
        }
    }
    match foreign_sharer(addr, &inodes, &table) {
        None => Ok(()),
        Some(other) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!(
                "Address already in use: another process listens on {} (with SO_REUSEPORT, so the kernel would split clients between it and this node)",
                other.addr
            ),
        )),
    }
}

/// The first listener of `table` on `ours`' port whose address overlaps `ours` and whose
/// inode is not one of `inodes`.
pub fn foreign_sharer(ours: SocketAddr, inodes: &[u64], table: &[Listening]) -> Option<Listening> {
    table
        .iter()
        .find(|l| {
            l.addr.port() == ours.port()
                && !inodes.contains(&l.inode)
                && overlaps(l.addr.ip(), ours.ip())
        })
        .copied()
}

/// Whether connections to one address could reach a listener on the other: equal, or
/// either one a wildcard (an IPv6 wildcard may be dual-stack, so it overlaps IPv4 too;
/// a false alarm there refuses a start, which is the safe side).
fn overlaps(a: IpAddr, b: IpAddr) -> bool {
    a.is_unspecified() || b.is_unspecified() || canonical(a) == canonical(b)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn socket_inode(listener: &std::net::TcpListener) -> std::io::Result<u64> {
    let stat = nix::sys::stat::fstat(listener.as_raw_fd()).map_err(std::io::Error::from)?;
    Ok(stat.st_ino)
}

/// The `LISTEN` rows of `/proc/net/tcp` or `/proc/net/tcp6`; rows that do not parse are
/// skipped (a format change must not stop every start; the own-listener check above
/// catches a table we cannot read at all).
pub fn parse_table(text: &str) -> Vec<Listening> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if fields.len() < 10 || fields[3] != TCP_LISTEN {
                return None;
            }
            let addr = parse_addr(fields[1])?;
            let inode = fields[9].parse().ok()?;
            Some(Listening { addr, inode })
        })
        .collect()
}

/// `0100007F:2A9F` (IPv4) or 32 hex digits and a port (IPv6): the address is printed as
/// 32-bit words in host byte order.
fn parse_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Option<Vec<u32>> = (0..ip.len() / 8)
        .map(|i| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect();
    let words = words?;
    let ip = match (ip.len(), words.as_slice()) {
        (8, [w]) => IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes())),
        (32, [a, b, c, d]) => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].into_iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:2A9F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2A9F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:2A9F 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn the_kernel_table_parses_into_listeners_only() {
        let table = parse_table(TABLE);
        assert_eq!(
            table,
            vec![
                Listening {
                    addr: "0.0.0.0:10911".parse().unwrap(),
                    inode: 111
                },
                Listening {
                    addr: "127.0.0.1:10911".parse().unwrap(),
                    inode: 222
                },
            ]
        );
        let v6 = "h\n 0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0:0 0:0 0 1000 0 7 1\n";
        assert_eq!(
            parse_table(v6),
            vec![Listening {
                addr: "[::1]:8080".parse().unwrap(),
                inode: 7
            }]
        );
    }

    #[test]
    fn a_listener_of_another_process_on_an_overlapping_address_is_a_sharer() {
        let table = parse_table(TABLE);
        let ours: SocketAddr = "0.0.0.0:10911".parse().unwrap();
        assert_eq!(foreign_sharer(ours, &[111, 222], &table), None);
        assert_eq!(
            foreign_sharer(ours, &[111], &table).map(|l| l.inode),
            Some(222)
        );
        let other_ip: SocketAddr = "127.0.0.2:10911".parse().unwrap();
        assert_eq!(
            foreign_sharer(other_ip, &[], &table).map(|l| l.inode),
            Some(111)
        );
        let other_port: SocketAddr = "0.0.0.0:10912".parse().unwrap();
        assert_eq!(foreign_sharer(other_port, &[], &table), None);
    }
}
