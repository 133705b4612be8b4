//! Message ids (reference §2): the broker's offsetMsgId and the client-style UNIQ_KEY the
//! broker generates when a producer did not set one. Pure functions plus one counter.
//!
//! Invariants: an offsetMsgId is the uppercase hex of store IP (4 or 16 bytes), store port
//! (i32 BE) and physical offset (i64 BE), 32 or 56 characters, so any RocketMQ client can
//! decode it back to the `ip:port` it connects to for VIEW_MESSAGE_BY_ID. A UNIQ_KEY has
//! the same shape as Java's `MessageClientIDSetter` ids; only uniqueness matters to clients.

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};

/// Java prints an IPv4-mapped IPv6 peer as IPv4; so do we, so born hosts stay 4 bytes.
pub fn normalize(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// Appends the IP's bytes (4 or 16) as uppercase hex.
fn push_ip_hex(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => push_hex(out, &v4.octets()),
        IpAddr::V6(v6) => push_hex(out, &v6.octets()),
    }
}

/// Appends `bytes` as uppercase hex, two digits a byte. (A table lookup: `write!` with
/// `{:02X}` per byte was a visible share of the send path.)
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(bytes.len() * 2);
    for &byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0x0F)] as char);
    }
}

/// `MessageDecoder.createMessageId`: store host and physical offset as uppercase hex.
pub fn offset_msg_id(store_host: SocketAddr, phys_offset: u64) -> String {
    let store_host = normalize(store_host);
    let mut out = String::with_capacity(56);
    push_ip_hex(&mut out, store_host.ip());
    push_hex(&mut out, &i32::from(store_host.port()).to_be_bytes());
    push_hex(&mut out, &phys_offset.to_be_bytes());
    out
}

/// `MessageDecoder.decodeMessageId`: the store host and physical offset an offsetMsgId
/// names, or `None` if it is not one.
pub fn decode_offset_msg_id(id: &str) -> Option<(SocketAddr, u64)> {
    let bytes: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(id.get(i..i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip_len = match bytes.len() {
        16 => 4,
        28 => 16,
        _ => return None,
    };
    let ip = if ip_len == 4 {
        IpAddr::from(<[u8; 4]>::try_from(&bytes[..4]).ok()?)
    } else {
        IpAddr::from(<[u8; 16]>::try_from(&bytes[..16]).ok()?)
    };
    let port = i32::from_be_bytes(bytes[ip_len..ip_len + 4].try_into().ok()?);
    let offset = u64::from_be_bytes(bytes[ip_len + 4..].try_into().ok()?);
    Some((SocketAddr::new(ip, u16::try_from(port).ok()?), offset))
}

/// Generates UNIQ_KEYs in `MessageClientIDSetter`'s layout: IP, pid (2), a per-process
/// tag in place of the class-loader hash (4), ms since the start of the month (4, UTC where
/// Java uses local time: only uniqueness matters), a counter (2).
pub struct UniqKeys {
    prefix: String,
    counter: Cell<u16>,
}

impl UniqKeys {
    /// Keys of shard `shard`: its number is the top byte of the per-process tag, so the
    /// shards of one node never make the same key.
    pub fn new(ip: IpAddr, shard: u8) -> UniqKeys {
        let mut prefix = String::with_capacity(40);
        push_ip_hex(&mut prefix, ip);
        push_hex(&mut prefix, &(std::process::id() as u16).to_be_bytes());
        // The address of a local differs between processes and runs: a cheap stand-in
        // for Java's class-loader hash, whose only job is to tell id sources apart.
        let tag = (&prefix as *const String as usize as u64 ^ now_ms() as u64) as u32;
        let tag = (tag & 0x00ff_ffff) | (shard as u32) << 24;
        push_hex(&mut prefix, &tag.to_be_bytes());
        UniqKeys {
            prefix,
            counter: Cell::new(0),
        }
    }

    pub fn next(&self, now_ms: i64) -> String {
        let count = self.counter.get();
        self.counter.set(count.wrapping_add(1));
        let mut out = self.prefix.clone();
        let since_month = (now_ms - start_of_month_ms(now_ms)) as u32;
        push_hex(&mut out, &since_month.to_be_bytes());
        push_hex(&mut out, &count.to_be_bytes());
        out
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// Milliseconds of the first instant of `ms`'s calendar month, UTC.
fn start_of_month_ms(ms: i64) -> i64 {
    use crate::clock::{civil_from_days, days_from_civil};
    let days = ms.div_euclid(86_400_000);
    let (year, month, _) = civil_from_days(days);
    days_from_civil(year, month, 1) * 86_400_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_msg_id_round_trips() {
        let host = SocketAddr::from(([192, 168, 0, 1], 10911));
        let id = offset_msg_id(host, 0x1234);
        assert_eq!(id, "C0A8000100002A9F0000000000001234");
        assert_eq!(decode_offset_msg_id(&id), Some((host, 0x1234)));
        let v6: SocketAddr = "[2001:db8::1]:10911".parse().unwrap();
        let id = offset_msg_id(v6, 7);
        assert_eq!(id.len(), 56);
        assert_eq!(decode_offset_msg_id(&id), Some((v6, 7)));
        assert_eq!(decode_offset_msg_id("XYZ"), None);
    }

    #[test]
    fn mapped_ipv6_becomes_ipv4() {
        let mapped: SocketAddr = "[::ffff:10.0.0.7]:5000".parse().unwrap();
        assert_eq!(normalize(mapped), SocketAddr::from(([10, 0, 0, 7], 5000)));
    }

    #[test]
    fn month_start_and_uniq_keys() {
        // 2024-03-15T12:00:00Z -> 2024-03-01T00:00:00Z
        assert_eq!(start_of_month_ms(1_710_504_000_000), 1_709_251_200_000);
        let keys = UniqKeys::new(IpAddr::from([127, 0, 0, 1]), 3);
        let (a, b) = (keys.next(1_710_504_000_000), keys.next(1_710_504_000_000));
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        // IP (8 hex digits), pid (4), then the tag, whose top byte is the shard.
        assert_eq!(&a[12..14], "03");
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
    }
}
