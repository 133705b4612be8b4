use super::*;
use crate::rng::SplitMix64;

fn handshake() -> SlaveHandshake {
    SlaveHandshake {
        sync_from_last_file: false,
        async_learner: true,
        slave_broker_id: 1,
        shard_index: 2,
        shard_count: 4,
        cluster: "DefaultCluster".to_string(),
        broker: "broker-a".to_string(),
    }
}

fn epochs(entries: &[(u32, u64)]) -> EpochCache {
    let entries: Vec<EpochEntry> = entries
        .iter()
        .map(|&(epoch, start)| EpochEntry { epoch, start })
        .collect();
    EpochCache::from_entries(&entries).unwrap()
}

fn frame(offset: u64, body: &[u8]) -> TransferFrame {
    TransferFrame {
        header: FrameHeader {
            offset,
            epoch: 3,
            epoch_start: offset.min(100),
            confirm_offset: 42,
            body_len: body.len() as u32,
        },
        body: body.to_vec(),
    }
}

fn refusal() -> Refusal {
    Refusal {
        reason: RefusalReason::ShardCount,
        text: "master has 8 shards, slave has 4".to_string(),
    }
}

fn slave_messages() -> Vec<FromSlave> {
    vec![
        FromSlave::Handshake(handshake()),
        FromSlave::Report(0),
        FromSlave::Report(123_456_789_012),
        FromSlave::Refusal(refusal()),
    ]
}

fn master_messages() -> Vec<FromMaster> {
    vec![
        FromMaster::Reply(HandshakeReply {
            master_max: 2000,
            epochs: epochs(&[(1, 0), (2, 1000), (3, 1200)]),
        }),
        FromMaster::Reply(HandshakeReply {
            master_max: 0,
            epochs: EpochCache::new(),
        }),
        FromMaster::Frame(frame(1200, b"some commitlog bytes")),
        FromMaster::Frame(frame(1220, b"")),
        FromMaster::Frame(frame(5000, &vec![7; FRAME_BODY_MAX])),
        FromMaster::Refusal(refusal()),
    ]
}

fn decode_slave(bytes: &[u8]) -> Result<Option<FromSlave>, WireError> {
    let mut decoder = FromSlaveDecoder::new();
    decoder.feed(bytes)?;
    decoder.next()
}

fn decode_master(bytes: &[u8]) -> Result<Option<FromMaster>, WireError> {
    let mut decoder = FromMasterDecoder::new();
    decoder.feed(bytes)?;
    decoder.next()
}

#[test]
fn the_rocketmq_fields_sit_where_rocketmq_puts_them() {
    let mut bytes = Vec::new();
    handshake().encode(&mut bytes);
    assert_eq!(&bytes[..4], &1i32.to_be_bytes());
    assert_eq!(&bytes[4..6], &0i16.to_be_bytes());
    assert_eq!(&bytes[6..8], &1i16.to_be_bytes());
    assert_eq!(&bytes[8..16], &1i64.to_be_bytes());
    assert_eq!(&bytes[16..20], b"RMQR");
    assert_eq!(bytes.len(), HANDSHAKE_FIXED_BYTES + 14 + 2 + 8);
    let mut report = Vec::new();
    encode_report(77, &mut report);
    assert_eq!(
        report,
        [&2i32.to_be_bytes()[..], &77i64.to_be_bytes()].concat()
    );
    let mut header = Vec::new();
    frame(1200, b"abc").header.encode(&mut header);
    assert_eq!(header.len(), MASTER_HEADER_BYTES);
    let mut reply = Vec::new();
    let one = HandshakeReply {
        master_max: 9,
        epochs: epochs(&[(5, 4)]),
    };
    FromMaster::Reply(one).encode(&mut reply);
    let expected = [
        &1i32.to_be_bytes()[..],
        &12i32.to_be_bytes(),
        &9i64.to_be_bytes(),
        &5i32.to_be_bytes(),
        &[0; 16],
        &5i32.to_be_bytes(),
        &4i64.to_be_bytes(),
    ]
    .concat();
    assert_eq!(reply, expected);
}

/// Both decoders, for the chunking test.
trait Decoder {
    type Message;
    fn space(&self) -> usize;
    fn feed(&mut self, bytes: &[u8]) -> Result<(), WireError>;
    fn next(&mut self) -> Result<Option<Self::Message>, WireError>;
}

impl Decoder for FromSlaveDecoder {
    type Message = FromSlave;
    fn space(&self) -> usize {
        FromSlaveDecoder::space(self)
    }
    fn feed(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        FromSlaveDecoder::feed(self, bytes)
    }
    fn next(&mut self) -> Result<Option<FromSlave>, WireError> {
        FromSlaveDecoder::next(self)
    }
}

impl Decoder for FromMasterDecoder {
    type Message = FromMaster;
    fn space(&self) -> usize {
        FromMasterDecoder::space(self)
    }
    fn feed(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        FromMasterDecoder::feed(self, bytes)
    }
    fn next(&mut self) -> Result<Option<FromMaster>, WireError> {
        FromMasterDecoder::next(self)
    }
}

/// Feeds `bytes` in random chunks (each cut to the decoder's room, decoding between
/// pieces, as the I/O service does) and collects every message decoded.
fn drain<D: Decoder>(decoder: &mut D, bytes: &[u8], rng: &mut SplitMix64) -> Vec<D::Message> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let chunk = (rng.range(1, 70_000) as usize)
            .min(bytes.len() - at)
            .min(decoder.space());
        assert!(chunk > 0, "a decoder with no room after draining");
        decoder.feed(&bytes[at..at + chunk]).unwrap();
        at += chunk;
        while let Some(message) = decoder.next().unwrap() {
            out.push(message);
        }
    }
    out
}

#[test]
fn every_message_survives_any_split_into_chunks() {
    let mut rng = SplitMix64::new(25);
    let mut slave_bytes = Vec::new();
    slave_messages()
        .iter()
        .for_each(|message| message.encode(&mut slave_bytes));
    let mut master_bytes = Vec::new();
    master_messages()
        .iter()
        .for_each(|message| message.encode(&mut master_bytes));
    for _ in 0..20 {
        let mut decoder = FromSlaveDecoder::new();
        assert_eq!(
            drain(&mut decoder, &slave_bytes, &mut rng),
            slave_messages()
        );
        decoder.finish().unwrap();
        let mut decoder = FromMasterDecoder::new();
        assert_eq!(
            drain(&mut decoder, &master_bytes, &mut rng),
            master_messages()
        );
        decoder.finish().unwrap();
    }
}

#[test]
fn a_partial_message_waits_and_a_stream_ending_inside_one_is_truncated() {
    let mut bytes = Vec::new();
    FromMaster::Frame(frame(10, b"0123456789")).encode(&mut bytes);
    let mut decoder = FromMasterDecoder::new();
    decoder.feed(&bytes[..bytes.len() - 1]).unwrap();
    assert_eq!(decoder.next(), Ok(None));
    assert_eq!(
        decoder.finish().unwrap_err().to_string(),
        "the stream ended inside a message: 45 bytes of it were read"
    );
    // Poisoned: the same answer from then on.
    assert!(matches!(decoder.next(), Err(WireError::Truncated { .. })));
    let mut decoder = FromSlaveDecoder::new();
    decoder.feed(&[0, 0, 0]).unwrap();
    assert_eq!(decoder.next(), Ok(None));
    assert_eq!(decoder.finish(), Err(WireError::Truncated { buffered: 3 }));
}

#[test]
fn buffering_is_bounded_and_overfeeding_is_refused() {
    let mut decoder = FromSlaveDecoder::new();
    assert_eq!(decoder.space(), FROM_SLAVE_BUFFER_BYTES);
    let flood = vec![0u8; FROM_SLAVE_BUFFER_BYTES + 1];
    assert_eq!(
        decoder.feed(&flood),
        Err(WireError::Overfull {
            fed: FROM_SLAVE_BUFFER_BYTES + 1,
            space: FROM_SLAVE_BUFFER_BYTES
        })
    );
    let decoder = FromMasterDecoder::new();
    assert_eq!(decoder.space(), MASTER_HEADER_BYTES + FRAME_BODY_MAX);
    // A flood of reports never grows the master's buffer past its bound.
    let mut decoder = FromSlaveDecoder::new();
    let mut reports = Vec::new();
    for offset in 0..10_000 {
        encode_report(offset, &mut reports);
    }
    let mut decoded = 0;
    for chunk in reports.chunks(1000) {
        decoder.feed(chunk).unwrap();
        while let Some(FromSlave::Report(offset)) = decoder.next().unwrap() {
            assert_eq!(offset, decoded);
            decoded += 1;
        }
        assert!(decoder.buffer.bytes.len() <= FROM_SLAVE_BUFFER_BYTES);
    }
    assert_eq!(decoded, 10_000);
}

fn with_i32(mut bytes: Vec<u8>, at: usize, value: i32) -> Vec<u8> {
    bytes[at..at + 4].copy_from_slice(&value.to_be_bytes());
    bytes
}

fn with_i64(mut bytes: Vec<u8>, at: usize, value: i64) -> Vec<u8> {
    bytes[at..at + 8].copy_from_slice(&value.to_be_bytes());
    bytes
}

fn encoded_slave(message: FromSlave) -> Vec<u8> {
    let mut bytes = Vec::new();
    message.encode(&mut bytes);
    bytes
}

fn encoded_master(message: FromMaster) -> Vec<u8> {
    let mut bytes = Vec::new();
    message.encode(&mut bytes);
    bytes
}

#[test]
fn bad_slave_bytes_are_refused_with_what_was_wrong() {
    let good = encoded_slave(FromSlave::Handshake(handshake()));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            with_i32(good.clone(), 0, 3),
            "unknown HA state 3 (expected 1 (handshake), 2 (report) or 4 (refusal))",
        ),
        (
            with_i32(good.clone(), 4, 0x0002_0000),
            "isSyncFromLastFile must be 0 or 1, got 2",
        ),
        (
            with_i64(good.clone(), 8, -1),
            "slave broker id is negative: -1",
        ),
        (
            with_i32(good.clone(), 16, 0),
            "handshake magic 0x00000000 is not ringmq's 0x524d5152: the peer is not a ringmq slave",
        ),
        (
            patch(&good, 20, &[0, 2]),
            "handshake version 2 is not the supported 1",
        ),
        (
            patch(&good, 22, &[0, 4]),
            "shard index 4 is not below the shard count 4",
        ),
        (
            patch(&good, 24, &[0, 0]),
            "shard index 2 is not below the shard count 0",
        ),
        (
            patch(&good, 26, &[1, 0]),
            "cluster name 256 is above the limit 255",
        ),
        (patch(&good, 28, &[0xff]), "cluster name is not UTF-8"),
        (
            with_i64(encoded_slave(FromSlave::Report(5)), 4, -5),
            "reported offset is negative: -5",
        ),
        (
            with_i32(encoded_slave(FromSlave::Refusal(refusal())), 4, 1),
            "refusal body size 1 is too short for its reason code",
        ),
        (
            with_i32(encoded_slave(FromSlave::Refusal(refusal())), 4, 1027),
            "refusal body size 1027 is above the limit 1026",
        ),
        (
            with_i32(encoded_slave(FromSlave::Refusal(refusal())), 4, -1),
            "refusal body size is negative: -1",
        ),
    ];
    for (bytes, message) in cases {
        assert_eq!(decode_slave(&bytes).unwrap_err().to_string(), message);
    }
}

fn patch(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    bytes[at..at + with.len()].copy_from_slice(with);
    bytes
}

#[test]
fn a_java_slave_handshake_is_told_it_is_not_ringmq() {
    // A Java 5.x slave's handshake (16 B) followed by its first report (12 B): the report's
    // state lands where ringmq's magic is.
    let mut bytes = handshake_rocketmq_only();
    encode_report(0, &mut bytes);
    assert_eq!(decode_slave(&bytes), Err(WireError::BadMagic { found: 2 }));
    // Only the 16 bytes: wait, it may still be ringmq.
    assert_eq!(decode_slave(&handshake_rocketmq_only()), Ok(None));
}

fn handshake_rocketmq_only() -> Vec<u8> {
    encoded_slave(FromSlave::Handshake(handshake()))[..HANDSHAKE_ROCKETMQ_BYTES].to_vec()
}

#[test]
fn bad_master_bytes_are_refused_with_what_was_wrong() {
    let reply = encoded_master(master_messages().remove(0));
    let frame = encoded_master(FromMaster::Frame(frame(1200, b"abc")));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (with_i32(frame.clone(), 0, 0), "unknown HA state 0 (expected 1 (handshake reply), 2 (frame) or 4 (refusal))"),
        (with_i32(frame.clone(), 4, -3), "frame body size is negative: -3"),
        (with_i32(frame.clone(), 4, (FRAME_BODY_MAX + 1) as i32), "frame body size 1048577 is above the limit 1048576"),
        (with_i64(frame.clone(), 8, -1), "frame offset is negative: -1"),
        (with_i32(frame.clone(), 16, -2), "frame epoch is negative: -2"),
        (with_i64(frame.clone(), 20, 1201), "frame at 1200 names epoch 3 starting later, at 1201"),
        (with_i64(frame.clone(), 28, -9), "confirm offset is negative: -9"),
        (with_i64(with_i64(frame.clone(), 8, i64::MAX - 1), 20, 0), "frame at 9223372036854775806 with 3 bytes ends past the largest offset"),
        (with_i32(reply.clone(), 4, 13), "handshake reply body size 13 is not a multiple of 12"),
        (with_i32(reply.clone(), 4, 12_012), "handshake reply body size 12012 is above the limit 12000"),
        (with_i64(reply.clone(), 8, -2000), "master max offset is negative: -2000"),
        (with_i64(reply.clone(), 8, 1100), "epoch 3 starts at 1200, past the master max offset 1100"),
        (with_i32(reply.clone(), 16, 2), "handshake reply names last epoch 2, its entries end with Some(3)"),
        (with_i64(reply.clone(), 20, 7), "handshake reply field epochStartOffset must be 0, got 7"),
        (with_i32(reply.clone(), 36 + 12, 0), "master's epochs are out of order: epoch 0 does not follow epoch 1: epochs must strictly increase"),
        (with_i64(reply.clone(), 36 + 16, 1300), "master's epochs are out of order: epoch 3 starts at 1200, before epoch 2's start 1300: starts must not decrease"),
        (with_i32(reply.clone(), 36, -1), "epoch is negative: -1"),
        (with_i64(reply.clone(), 40, -1), "epoch start offset is negative: -1"),
    ];
    for (bytes, message) in cases {
        assert_eq!(decode_master(&bytes).unwrap_err().to_string(), message);
    }
    let empty = encoded_master(master_messages().remove(1));
    assert_eq!(
        decode_master(&with_i32(empty, 16, 0)).unwrap_err(),
        WireError::LastEpoch {
            stated: 0,
            found: None
        }
    );
}

#[test]
fn an_oversize_frame_is_refused_from_its_header_alone() {
    let header = with_i32(
        encoded_master(FromMaster::Frame(frame(0, b""))),
        4,
        i32::MAX,
    );
    assert!(matches!(
        decode_master(&header),
        Err(WireError::TooLarge {
            field: "frame body size",
            ..
        })
    ));
}

#[test]
fn refusals_keep_unknown_codes_and_cut_long_texts_at_a_character() {
    let mut bytes = encoded_slave(FromSlave::Refusal(refusal()));
    bytes[8..10].copy_from_slice(&999u16.to_be_bytes());
    let Ok(Some(FromSlave::Refusal(got))) = decode_slave(&bytes) else {
        panic!("a refusal");
    };
    assert_eq!(got.reason, RefusalReason::Other(999));
    for code in 1..=11 {
        assert_eq!(RefusalReason::from_code(code).code(), code);
    }
    let long = Refusal {
        reason: RefusalReason::ClusterName,
        text: "é".repeat(REFUSAL_TEXT_MAX),
    };
    let Ok(Some(FromMaster::Refusal(got))) =
        decode_master(&encoded_master(FromMaster::Refusal(long)))
    else {
        panic!("a refusal");
    };
    assert_eq!(got.text, "é".repeat(REFUSAL_TEXT_MAX / 2));
    let mut bad = encoded_slave(FromSlave::Refusal(refusal()));
    bad[12] = 0xff;
    assert_eq!(
        decode_slave(&bad).unwrap_err().to_string(),
        "refusal text is not UTF-8"
    );
}

#[test]
fn random_garbage_never_panics_and_never_buffers_past_the_bound() {
    let mut rng = SplitMix64::new(7);
    for _ in 0..2000 {
        let length = rng.range(0, 300) as usize;
        let mut bytes: Vec<u8> = (0..length).map(|_| rng.next_u64() as u8).collect();
        if rng.chance(50) && bytes.len() >= 4 {
            // A plausible state keeps the decoders past their first check.
            let state = [1i32, 2, 4][rng.below(3)];
            bytes[..4].copy_from_slice(&state.to_be_bytes());
        }
        let mut slave = FromSlaveDecoder::new();
        let mut master = FromMasterDecoder::new();
        for chunk in bytes.chunks(rng.range(1, 40) as usize) {
            let _ = slave.feed(chunk).and_then(|_| slave.next().map(|_| ()));
            let _ = master.feed(chunk).and_then(|_| master.next().map(|_| ()));
        }
        assert!(slave.buffer.bytes.len() <= FROM_SLAVE_BUFFER_BYTES);
        assert!(master.buffer.bytes.len() <= FROM_MASTER_BUFFER_BYTES);
    }
}
