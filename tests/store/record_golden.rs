//! Golden bytes, round trips, damage detection and seeded fuzzing of the record codec.

use crate::common;

use common::{fuzz_iters, fuzz_seed, Rng};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;
use ringmq::store::properties::*;
use ringmq::store::record::*;

const QUEUE_OFFSET: i64 = 42;
const PHYS_OFFSET: i64 = 4096;
const STORE_TS: i64 = 1_700_000_000_123;

fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), port)
}

fn v6(text: &str, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(text.parse::<Ipv6Addr>().unwrap()), port)
}

fn golden_input() -> RecordInput {
    let body = Bytes::from_static(b"Hello RocketMQ");
    RecordInput {
        topic: "TopicTest".to_owned(),
        queue_id: 3,
        flag: 7,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: v4(10, 0, 0, 1, 51234),
        store_host: v4(192, 168, 1, 2, 10911),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: body_crc(&body),
        body,
        properties: encode([
            ("KEYS", "k1 k2"),
            ("TAGS", "TagA"),
            ("UNIQ_KEY", "AC110001"),
        ]),
    }
}

fn encode_record(input: &RecordInput) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(input, QUEUE_OFFSET, PHYS_OFFSET, STORE_TS, &mut out).unwrap();
    assert_eq!(out.len(), encoded_len(input).unwrap());
    out
}

fn decode_full(buf: &[u8]) -> RecordView<'_> {
    match decode(buf, Verify::Full) {
        Ok(Decoded::Record(view)) => view,
        other => panic!("expected a record, got {other:?}"),
    }
}

fn i32_at(buf: &[u8], pos: usize) -> i32 {
    i32::from_be_bytes(buf[pos..pos + 4].try_into().unwrap())
}

fn i64_at(buf: &[u8], pos: usize) -> i64 {
    i64::from_be_bytes(buf[pos..pos + 8].try_into().unwrap())
}

#[test]
fn golden_bytes_v1_ipv4() {
    let input = golden_input();
    let props = "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}AC110001\u{2}";
    assert_eq!(input.properties, props);
    assert_eq!(props.len(), 39);
    let props_len = 39 + 21;
    let total = 91 + 14 + 9 + props_len;
    assert_eq!(total, 174);

    // Hand-assembled, field by field, independent of the encoder.
    let mut want: Vec<u8> = Vec::new();
    want.extend_from_slice(&174i32.to_be_bytes()); // TOTALSIZE
    want.extend_from_slice(&[0xDA, 0xA3, 0x20, 0xA7]); // MAGICCODE v1
    let crc = (crc32fast::hash(b"Hello RocketMQ") & 0x7FFF_FFFF) as i32;
    want.extend_from_slice(&crc.to_be_bytes()); // BODYCRC
    want.extend_from_slice(&3i32.to_be_bytes()); // QUEUEID
    want.extend_from_slice(&7i32.to_be_bytes()); // FLAG
    want.extend_from_slice(&42i64.to_be_bytes()); // QUEUEOFFSET
    want.extend_from_slice(&4096i64.to_be_bytes()); // PHYSICALOFFSET
    want.extend_from_slice(&0i32.to_be_bytes()); // SYSFLAG
    want.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // BORNTIMESTAMP
    want.extend_from_slice(&[10, 0, 0, 1]); // BORNHOST addr
    want.extend_from_slice(&51234i32.to_be_bytes()); // BORNHOST port
    want.extend_from_slice(&1_700_000_000_123i64.to_be_bytes()); // STORETIMESTAMP
    want.extend_from_slice(&[192, 168, 1, 2]); // STOREHOST addr
    want.extend_from_slice(&10911i32.to_be_bytes()); // STOREHOST port
    want.extend_from_slice(&0i32.to_be_bytes()); // RECONSUMETIMES
    want.extend_from_slice(&0i64.to_be_bytes()); // PREPARED TRANSACTION OFFSET
    want.extend_from_slice(&14i32.to_be_bytes()); // BODY length
    want.extend_from_slice(b"Hello RocketMQ");
    want.push(9); // TOPIC length (v1: one byte)
    want.extend_from_slice(b"TopicTest");
    want.extend_from_slice(&(props_len as i16).to_be_bytes()); // PROPERTIES length
    want.extend_from_slice(props.as_bytes());
    assert_eq!(want.len(), total - RECORD_CRC_PROPERTY_LEN);
    let crc32c = crc32c::crc32c(&want);
    want.extend_from_slice(b"__CRC32C#\x01");
    want.extend_from_slice(format!("{crc32c:010}").as_bytes());
    want.push(2);
    assert_eq!(want.len(), total);

    let got = encode_record(&input);
    assert_eq!(got, want);

    // Absolute positions from the reference table.
    assert_eq!(&got[4..8], &[0xDA, 0xA3, 0x20, 0xA7]);
    assert_eq!(i64_at(&got, 20), 42);
    assert_eq!(i64_at(&got, 28), 4096);
    assert_eq!(i32_at(&got, 36), 0);
    assert_eq!(i64_at(&got, 56), 1_700_000_000_123);
    assert_eq!(i32_at(&got, 84), 14);
    assert_eq!(got[88 + 14], 9);
    // The CRC digits spell crc32c over everything before the CRC pair.
    let digits = std::str::from_utf8(&got[total - 11..total - 1]).unwrap();
    assert_eq!(digits.len(), 10);
    assert!(digits.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(
        digits.parse::<u32>().unwrap(),
        crc32c::crc32c(&got[..total - RECORD_CRC_PROPERTY_LEN])
    );

    let view = decode_full(&got);
    assert_eq!(view.total_size, 174);
    assert_eq!(view.record_crc(), Some(crc32c));
    assert_eq!(view.user_properties(), props);
    assert_eq!(view.property(TAGS), Some("TagA"));
    assert_eq!(view.property(KEYS), Some("k1 k2"));
    assert_eq!(view.property(UNIQ_KEY), Some("AC110001"));
    assert_eq!(view.property(RECORD_CRC_KEY), Some(digits));
}

/// Encodes, decodes with full verification, and checks every field; returns the bytes.
fn round_trip(input: &RecordInput) -> Vec<u8> {
    let bytes = encode_record(input);
    let view = decode_full(&bytes);
    let v2 = input.topic.len() > 127;
    assert_eq!(view.total_size as usize, bytes.len());
    assert_eq!(view.magic, if v2 { MAGIC_V2 } else { MAGIC_V1 });
    assert_eq!(view.body_crc, input.body_crc);
    assert_eq!(view.queue_id, input.queue_id);
    assert_eq!(view.flag, input.flag);
    assert_eq!(view.queue_offset, QUEUE_OFFSET);
    assert_eq!(view.phys_offset, PHYS_OFFSET);
    let mut sys_flag = input.sys_flag & !0x30;
    if input.born_host.is_ipv6() {
        sys_flag |= SYSFLAG_BORNHOST_V6;
    }
    if input.store_host.is_ipv6() {
        sys_flag |= SYSFLAG_STOREHOST_V6;
    }
    assert_eq!(view.sys_flag, sys_flag);
    assert_eq!(view.born_timestamp, input.born_timestamp);
    assert_eq!(view.born_host, input.born_host);
    assert_eq!(view.store_timestamp, STORE_TS);
    assert_eq!(view.store_host, input.store_host);
    assert_eq!(view.reconsume_times, input.reconsume_times);
    assert_eq!(
        view.prepared_transaction_offset,
        input.prepared_transaction_offset
    );
    assert_eq!(view.body, &input.body[..]);
    assert_eq!(view.topic, input.topic);
    let mut user = input.properties.clone();
    if !user.is_empty() && !user.ends_with('\u{2}') {
        user.push('\u{2}');
    }
    assert_eq!(view.user_properties(), user);
    assert_eq!(view.properties.len(), user.len() + RECORD_CRC_PROPERTY_LEN);
    let hosts = if input.born_host.is_ipv6() { 20 } else { 8 }
        + if input.store_host.is_ipv6() { 20 } else { 8 };
    assert_eq!(
        bytes.len(),
        68 + hosts
            + 4
            + input.body.len()
            + if v2 { 2 } else { 1 }
            + input.topic.len()
            + 2
            + view.properties.len()
    );
    // Structure-only decoding sees the same record.
    assert_eq!(decode(&bytes, Verify::Structure), Ok(Decoded::Record(view)));
    bytes
}

#[test]
fn round_trip_ipv4() {
    let mut input = golden_input();
    input.sys_flag = 0x1 | 0x100 | 0x30; // host bits in the input are ignored
    input.reconsume_times = 5;
    input.prepared_transaction_offset = -1;
    let bytes = round_trip(&input);
    assert_eq!(i32_at(&bytes, 36), 0x101);
}

#[test]
fn round_trip_ipv6_born_host() {
    let mut input = golden_input();
    input.born_host = v6("2001:db8::1", 40000);
    let bytes = round_trip(&input);
    assert_eq!(i32_at(&bytes, 36), SYSFLAG_BORNHOST_V6);
    assert_eq!(
        &bytes[48..64],
        &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(i32_at(&bytes, 64), 40000);
    // Every field after BORNHOST shifts by 12.
    assert_eq!(i64_at(&bytes, 56 + 12), STORE_TS);
    assert_eq!(&bytes[64 + 12..68 + 12], &[192, 168, 1, 2]);
    assert_eq!(i32_at(&bytes, 84 + 12), 14);
    assert_eq!(bytes.len(), 174 + 12);
}

#[test]
fn round_trip_ipv6_store_host() {
    let mut input = golden_input();
    input.store_host = v6("fe80::abcd:1", 10911);
    let bytes = round_trip(&input);
    assert_eq!(i32_at(&bytes, 36), SYSFLAG_STOREHOST_V6);
    assert_eq!(i64_at(&bytes, 56), STORE_TS); // before the store host: no shift
    assert_eq!(i32_at(&bytes, 64 + 16), 10911);
    assert_eq!(i32_at(&bytes, 84 + 12), 14);
    assert_eq!(bytes.len(), 174 + 12);
}

#[test]
fn round_trip_both_ipv6() {
    let mut input = golden_input();
    input.born_host = v6("::1", 1);
    input.store_host = v6("2001:db8:ffff::2", 65535);
    let bytes = round_trip(&input);
    assert_eq!(
        i32_at(&bytes, 36),
        SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
    );
    assert_eq!(i64_at(&bytes, 56 + 12), STORE_TS);
    assert_eq!(i32_at(&bytes, 84 + 24), 14);
    assert_eq!(&bytes[88 + 24..88 + 24 + 14], b"Hello RocketMQ");
    assert_eq!(bytes.len(), 174 + 24);
}

#[test]
fn ipv4_mapped_ipv6_is_stored_as_ipv4() {
    let mut input = golden_input();
    input.born_host = v6("::ffff:10.0.0.1", 51234);
    let bytes = encode_record(&input);
    assert_eq!(bytes, encode_record(&golden_input()));
    assert_eq!(decode_full(&bytes).born_host, v4(10, 0, 0, 1, 51234));
}

#[test]
fn round_trip_empty_properties_and_empty_body() {
    let mut input = golden_input();
    input.properties = String::new();
    let bytes = round_trip(&input);
    assert_eq!(bytes.len(), 91 + 14 + 9 + 21);
    assert_eq!(decode_full(&bytes).user_properties(), "");

    input.body = Bytes::new();
    input.body_crc = body_crc(&[]);
    assert_eq!(input.body_crc, 0);
    let bytes = round_trip(&input);
    assert_eq!(bytes.len(), 91 + 9 + 21);
}

#[test]
fn properties_without_final_separator_get_one() {
    let mut input = golden_input();
    input.properties = "TAGS\u{1}TagA".to_owned();
    let bytes = round_trip(&input);
    let view = decode_full(&bytes);
    assert!(view
        .properties
        .starts_with("TAGS\u{1}TagA\u{2}__CRC32C#\u{1}"));
    assert_eq!(view.property(TAGS), Some("TagA"));
    assert_eq!(bytes.len(), 91 + 14 + 9 + 10 + 21);
}

#[test]
fn round_trip_v2_long_topic() {
    let mut input = golden_input();
    input.topic = "%RETRY%".to_owned() + &"t".repeat(193);
    assert_eq!(input.topic.chars().count(), 200);
    let bytes = round_trip(&input);
    assert_eq!(&bytes[4..8], &[0xDA, 0xA3, 0x20, 0xAB]);
    let topic_pos = 88 + 14;
    assert_eq!(&bytes[topic_pos..topic_pos + 2], &200i16.to_be_bytes());
    assert_eq!(
        &bytes[topic_pos + 2..topic_pos + 202],
        input.topic.as_bytes()
    );
    assert_eq!(bytes.len(), 91 + 14 + 1 + 200 + 60);

    // 127 chars is the last v1 length.
    input.topic = "t".repeat(127);
    let bytes = round_trip(&input);
    assert_eq!(i32_at(&bytes, 4), MAGIC_V1);
    input.topic = "t".repeat(128);
    let bytes = round_trip(&input);
    assert_eq!(i32_at(&bytes, 4), MAGIC_V2);
}

#[test]
fn blank_record() {
    let mut out = vec![0xEE];
    encode_blank(1000, &mut out);
    assert_eq!(out.len(), 1 + BLANK_RECORD_LEN);
    assert_eq!(&out[1..], &[0, 0, 0x03, 0xE8, 0xCB, 0xD4, 0x31, 0x94]);
    // Only the header is needed to decode it, in both modes.
    assert_eq!(
        decode(&out[1..], Verify::Full),
        Ok(Decoded::Blank { len: 1000 })
    );
    assert_eq!(
        decode(&out[1..], Verify::Structure),
        Ok(Decoded::Blank { len: 1000 })
    );
    let mut small = Vec::new();
    encode_blank(8, &mut small);
    assert_eq!(decode(&small, Verify::Full), Ok(Decoded::Blank { len: 8 }));
    let mut bad = small.clone();
    bad[3] = 7;
    assert!(decode(&bad, Verify::Full).is_err());
    assert!(matches!(
        decode(&small[..7], Verify::Full),
        Err(DecodeError::Truncated {
            needed: 8,
            available: 7
        })
    ));
}

#[test]
fn java_hash_matches_java() {
    assert_eq!(java_string_hash(""), 0);
    // "TagA": 84 → 84*31+97 = 2701 → 2701*31+103 = 83834 → 83834*31+65 = 2598919.
    assert_eq!(java_string_hash("TagA"), 2_598_919);
    // "hello": 104 → 3325 → 103183 → 3198781 → 3198781*31+111 = 99162322.
    assert_eq!(java_string_hash("hello"), 99_162_322);
    // U+1F600 is the surrogate pair D83D DE00: 55357*31 + 56832 = 1716067 + 56832.
    assert_eq!(java_string_hash("\u{1F600}"), 55357 * 31 + 56832);
    assert_eq!(java_string_hash("\u{1F600}"), 1_772_899);
}

#[test]
fn properties_edge_cases() {
    assert_eq!(encode([("a", "1"), ("b", ""), ("", "2")]), "a\u{1}1\u{2}");
    let s = "a\u{1}\u{2}\u{1}b\u{2}xy\u{2}\u{2}c\u{1}3\u{2}c\u{1}4\u{2}d\u{1}5";
    assert_eq!(parse(s), vec![("c", "4"), ("d", "5")]);
    assert_eq!(get(s, "a"), None);
    assert_eq!(get(s, "c"), Some("4"));
    assert_eq!(parse(""), Vec::<(&str, &str)>::new());
    // Split at the first \x01 only.
    assert_eq!(parse("k\u{1}v\u{1}w\u{2}"), vec![("k", "v\u{1}w")]);
    let pairs = [("KEYS", "k1 k2"), ("TAGS", "TagA")];
    assert_eq!(parse(&encode(pairs)), pairs.to_vec());
}

#[test]
fn encode_errors_leave_output_untouched() {
    let mut out = vec![1, 2, 3];
    let mut input = golden_input();
    input.topic.clear();
    assert_eq!(
        encode_into(&input, 0, 0, 0, &mut out),
        Err(EncodeError::EmptyTopic)
    );
    input.topic = "t".repeat(32768);
    assert_eq!(encoded_len(&input), Err(EncodeError::TopicTooLong(32768)));
    input.topic = "t".repeat(32767);
    assert!(encoded_len(&input).is_ok());

    let mut input = golden_input();
    input.properties = "k\u{1}".to_owned() + &"v".repeat(32767 - 21 - 3) + "\u{2}";
    assert_eq!(input.properties.len() + 21, 32767);
    assert_eq!(encoded_len(&input).unwrap(), 91 + 14 + 9 + 32767);
    round_trip(&input);
    input.properties.insert(2, 'v');
    assert_eq!(
        encode_into(&input, 0, 0, 0, &mut out),
        Err(EncodeError::PropertiesTooLong(32768))
    );
    // The appended separator counts toward the limit.
    input.properties.pop();
    assert_eq!(input.properties.len() + 21, 32767);
    assert_eq!(
        encoded_len(&input),
        Err(EncodeError::PropertiesTooLong(32768))
    );
    assert_eq!(out, vec![1, 2, 3]);
}

#[test]
fn body_crc_and_record_crc_are_checked_by_full_only() {
    let mut input = golden_input();
    input.body_crc ^= 1;
    let bytes = encode_record(&input);
    assert!(matches!(
        decode(&bytes, Verify::Structure),
        Ok(Decoded::Record(_))
    ));
    assert!(matches!(
        decode(&bytes, Verify::Full),
        Err(DecodeError::BodyCrc { .. })
    ));

    let mut bytes = encode_record(&golden_input());
    bytes[20] ^= 0x40; // QUEUEOFFSET: covered only by the CRC32C
    assert!(matches!(
        decode(&bytes, Verify::Structure),
        Ok(Decoded::Record(_))
    ));
    assert!(matches!(
        decode(&bytes, Verify::Full),
        Err(DecodeError::RecordCrc { .. })
    ));

    let mut bytes = encode_record(&golden_input());
    let n = bytes.len();
    bytes[n - 12] = b'#'; // the \x01 after the key
    assert_eq!(
        decode(&bytes, Verify::Full),
        Err(DecodeError::MissingRecordCrc)
    );
    let mut bytes = encode_record(&golden_input());
    bytes[n - 2] = b'x'; // a digit
    assert_eq!(
        decode(&bytes, Verify::Full),
        Err(DecodeError::MissingRecordCrc)
    );
}

#[test]
fn errors_have_the_right_kind() {
    let bytes = encode_record(&golden_input());
    assert_eq!(
        decode(&bytes[..100], Verify::Structure),
        Err(DecodeError::Truncated {
            needed: 174,
            available: 100
        })
    );
    let mut bad = bytes.clone();
    bad[4] = 0;
    assert!(matches!(
        decode(&bad, Verify::Structure),
        Err(DecodeError::BadMagic(_))
    ));
    let mut bad = bytes.clone();
    bad[3] -= 1; // TOTALSIZE one short of what the lengths add up to
    assert_eq!(
        decode(&bad, Verify::Structure),
        Err(DecodeError::SizeMismatch {
            stored: 173,
            computed: 174
        })
    );
    let mut bad = bytes.clone();
    let topic_pos = 88 + 14 + 1;
    bad[topic_pos] = 0xFF;
    assert_eq!(
        decode(&bad, Verify::Structure),
        Err(DecodeError::BadUtf8("topic"))
    );
    let mut bad = bytes.clone();
    bad[topic_pos + 9 + 2] = 0xC0;
    assert_eq!(
        decode(&bad, Verify::Structure),
        Err(DecodeError::BadUtf8("properties"))
    );
}

fn sample_records() -> Vec<Vec<u8>> {
    let mut inputs = vec![golden_input()];
    let mut i = golden_input();
    i.born_host = v6("2001:db8::7", 7);
    i.store_host = v6("2001:db8::8", 8);
    inputs.push(i);
    let mut i = golden_input();
    i.topic = "x".repeat(150);
    i.properties.clear();
    i.body = Bytes::new();
    i.body_crc = 0;
    inputs.push(i);
    inputs.iter().map(encode_record).collect()
}

#[test]
fn every_single_byte_flip_is_detected() {
    for (r, record) in sample_records().iter().enumerate() {
        // Alone, and followed by more data (so a grown TOTALSIZE is not just Truncated).
        let mut followed = record.clone();
        followed.extend_from_slice(record);
        for buf in [record.clone(), followed] {
            for pos in 0..record.len() {
                for mask in [0x01u8, 0x02, 0x10, 0x80, 0xFF] {
                    let mut damaged = buf.clone();
                    damaged[pos] ^= mask;
                    let _ = decode(&damaged, Verify::Structure);
                    let result = decode(&damaged, Verify::Full);
                    assert!(
                        result.is_err(),
                        "record {r}: flip {mask:#04x} at {pos} not detected: {result:?}"
                    );
                }
            }
        }
    }
}

/// Decodes in both modes, failing with the seed and iteration on a panic or a bad result.
fn check(buf: &[u8], seed: u64, iter: usize) {
    for verify in [Verify::Structure, Verify::Full] {
        let result = std::panic::catch_unwind(|| decode(buf, verify));
        let result = match result {
            Ok(r) => r,
            Err(_) => panic!("decode({verify:?}) panicked: seed {seed} iteration {iter}"),
        };
        match result {
            Ok(Decoded::Record(view)) => {
                assert!(
                    view.total_size as usize <= buf.len(),
                    "record past the buffer: seed {seed} iteration {iter}"
                );
                if verify == Verify::Full {
                    // A fully verified record must be exactly what our encoder writes.
                    let input = RecordInput {
                        topic: view.topic.to_owned(),
                        queue_id: view.queue_id,
                        flag: view.flag,
                        sys_flag: view.sys_flag,
                        born_timestamp: view.born_timestamp,
                        born_host: view.born_host,
                        store_host: view.store_host,
                        reconsume_times: view.reconsume_times,
                        prepared_transaction_offset: view.prepared_transaction_offset,
                        body: Bytes::copy_from_slice(view.body),
                        properties: view.user_properties().to_owned(),
                        body_crc: view.body_crc,
                    };
                    let mut out = Vec::new();
                    encode_into(
                        &input,
                        view.queue_offset,
                        view.phys_offset,
                        view.store_timestamp,
                        &mut out,
                    )
                    .unwrap();
                    assert_eq!(
                        out,
                        &buf[..view.total_size as usize],
                        "re-encode differs: seed {seed} iteration {iter}"
                    );
                }
            }
            Ok(Decoded::Blank { len }) => {
                assert!(len >= 8, "blank of {len}: seed {seed} iteration {iter}")
            }
            Err(_) => {}
        }
    }
}

#[test]
fn fuzz_random_buffers() {
    let seed = fuzz_seed(0x5EED_0001);
    let mut rng = Rng::new(seed);
    let magics = [MAGIC_V1, MAGIC_V2, MAGIC_BLANK];
    for iter in 0..fuzz_iters() {
        let len = rng.below(400);
        let mut buf: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        // Most random bytes die at the magic; plant plausible headers most of the time.
        if len >= 8 && rng.below(4) != 0 {
            buf[4..8].copy_from_slice(&magics[rng.below(3)].to_be_bytes());
            let total = match rng.below(3) {
                0 => rng.next_u64() as i32,
                _ => rng.below(len + 1) as i32,
            };
            buf[0..4].copy_from_slice(&total.to_be_bytes());
        }
        check(&buf, seed, iter);
    }
}

#[test]
fn fuzz_mutated_records() {
    let seed = fuzz_seed(0x5EED_0002);
    let mut rng = Rng::new(seed);
    let records = sample_records();
    for iter in 0..fuzz_iters() {
        let mut buf = records[rng.below(records.len())].clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(5) {
                0 => {
                    let n = rng.below(buf.len() + 1);
                    buf.truncate(n);
                }
                1 if !buf.is_empty() => {
                    let pos = rng.below(buf.len());
                    buf[pos] = rng.next_u64() as u8;
                }
                2 => {
                    // Overwrite a likely length field with an extreme value.
                    let pos = [0, 36, 84, 96, 108, 102, 103][rng.below(7)];
                    let value = [i32::MAX, i32::MIN, -1, 0, 1, 0x7FFF][rng.below(6)];
                    if pos + 4 <= buf.len() {
                        buf[pos..pos + 4].copy_from_slice(&value.to_be_bytes());
                    }
                }
                3 => {
                    let extra = rng.below(64);
                    buf.extend((0..extra).map(|_| rng.next_u64() as u8));
                }
                _ => {}
            }
        }
        check(&buf, seed, iter);
    }
}
