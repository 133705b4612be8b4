//! The remoting codec against hand-assembled bytes, and its behaviour on hostile input.
//!
//! Frames here are built byte by byte rather than with our encoder wherever the point is
//! to pin the wire format, so an encoder and decoder that agree on a wrong layout fail.

use crate::common;

use common::{fuzz_iters, fuzz_seed, Rng};

use bytes::Bytes;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::command::{ExtFields, HeaderError, RemotingCommand, SerializeType};
use ringmq::remoting::frame::{
    decode_frame, encode_frame, encode_frame_header_only, FrameError, DEFAULT_MAX_FRAME_LEN,
};
use ringmq::remoting::send_header::{
    decode_batch, BatchError, BatchItem, SendMessageRequestHeader,
};
use ringmq::remoting::FieldError;

const MAX: usize = DEFAULT_MAX_FRAME_LEN;

/// `[total][type << 24 | header len][header][body]`, assembled by hand.
fn frame(serialize_type: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((4 + header.len() + body.len()) as i32).to_be_bytes());
    out.push(serialize_type);
    out.extend_from_slice(&(header.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(header);
    out.extend_from_slice(body);
    out
}

fn fields(pairs: &[(&str, &str)]) -> ExtFields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sample(serialize_type: SerializeType) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(
        request::PULL_MESSAGE,
        fields(&[("topic", "TopicA"), ("queueId", "3"), ("queueOffset", "42")]),
    );
    cmd.serialize_type = serialize_type;
    cmd.opaque = 0x0102_0304;
    cmd.flag = 2;
    cmd.remark = Some("rémark ✓".into());
    cmd.body = Bytes::from_static(b"\x00\x01body\xff");
    cmd
}

fn encoded(cmd: &RemotingCommand) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(cmd, &mut out).unwrap();
    out
}

// ---------------------------------------------------------------- known-good frames

#[test]
fn hand_assembled_json_frame_decodes() {
    let header = br#"{"code":0,"extFields":{"queueId":"1","msgId":"C0A8","queueOffset":"42"},"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#;
    let bytes = frame(0, header, b"xyz");
    let (cmd, used) = decode_frame(&bytes, MAX).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(cmd.code, response::SUCCESS);
    assert_eq!(cmd.language, "JAVA");
    assert_eq!(cmd.version, 479);
    assert_eq!(cmd.opaque, 7);
    assert!(cmd.is_response());
    assert!(!cmd.is_oneway());
    assert_eq!(cmd.remark, None);
    assert_eq!(
        cmd.ext_fields,
        fields(&[("queueId", "1"), ("msgId", "C0A8"), ("queueOffset", "42")])
    );
    assert_eq!(cmd.serialize_type, SerializeType::Json);
    assert_eq!(&cmd.body[..], b"xyz");
    assert_eq!(cmd.get_i64("queueOffset"), Ok(42));
}

#[test]
fn rocketmq_golden_frame() {
    // HEART_BEAT (34) from a GO client, version 401, opaque 9, oneway, remark "r",
    // (header: 17 fixed + 4 + 1 remark + 9 ext = 31 bytes)
    // extFields {"k":"vv"}, body "B".
    #[rustfmt::skip]
    let header: &[u8] = &[
        0x00, 0x22,             // code 34
        0x09,                   // GO
        0x01, 0x91,             // version 401
        0x00, 0x00, 0x00, 0x09, // opaque
        0x00, 0x00, 0x00, 0x02, // flag: oneway
        0x00, 0x00, 0x00, 0x01, b'r',
        0x00, 0x00, 0x00, 0x09, // ext block: 2 + 1 + 4 + 2
        0x00, 0x01, b'k', 0x00, 0x00, 0x00, 0x02, b'v', b'v',
    ];
    let bytes = frame(1, header, b"B");
    #[rustfmt::skip]
    assert_eq!(&bytes[..8], &[0, 0, 0, 4 + 31 + 1, 0x01, 0, 0, 31]);

    let (cmd, used) = decode_frame(&bytes, MAX).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    let mut expected = RemotingCommand::request(request::HEART_BEAT, fields(&[("k", "vv")]));
    expected.language = "GO".into();
    expected.version = 401;
    expected.opaque = 9;
    expected.flag = 2;
    expected.remark = Some("r".into());
    expected.serialize_type = SerializeType::RocketMq;
    expected.body = Bytes::from_static(b"B");
    assert_eq!(cmd, expected);
    assert_eq!(encoded(&expected), bytes, "encoder writes the same bytes");
}

#[test]
fn round_trip_json_and_rocketmq() {
    for st in [SerializeType::Json, SerializeType::RocketMq] {
        let cmd = sample(st);
        let bytes = encoded(&cmd);
        assert_eq!(bytes[4], st.code());
        let (back, used) = decode_frame(&bytes, MAX).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(back, cmd, "{st:?}");
    }
}

#[test]
fn json_encoder_writes_serialize_type_and_responses_echo_opaque() {
    let req = sample(SerializeType::Json);
    let mut resp = RemotingCommand::response_to(&req, response::PULL_NOT_FOUND, None);
    resp.put_ext("nextBeginOffset", 42);
    let bytes = encoded(&resp);
    let header_len = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    assert!(
        header.contains(r#""serializeTypeCurrentRPC":"JSON""#),
        "{header}"
    );
    assert!(
        !header.contains("remark"),
        "None remark is omitted: {header}"
    );
    let (back, _) = decode_frame(&bytes, MAX).unwrap().unwrap();
    assert_eq!(back.opaque, req.opaque);
    assert_eq!(back.flag & 1, 1);
    assert!(back.is_response());
    assert_eq!(back.code, response::PULL_NOT_FOUND);
    assert_eq!(back.version, req.version);
    assert_eq!(back.language, "JAVA");

    // The response follows a binary request in its header type.
    let bin_req = sample(SerializeType::RocketMq);
    let bin_resp = RemotingCommand::response_to(&bin_req, response::SUCCESS, None);
    assert_eq!(encoded(&bin_resp)[4], 1);
}

#[test]
fn header_only_plus_body_equals_full_frame() {
    for st in [SerializeType::Json, SerializeType::RocketMq] {
        let cmd = sample(st);
        // The header-only path ignores cmd.body: prove it with an empty one.
        let mut headless = cmd.clone();
        headless.body = Bytes::new();
        let mut joined = encode_frame_header_only(&headless, cmd.body.len()).unwrap();
        joined.extend_from_slice(&cmd.body);
        assert_eq!(joined, encoded(&cmd), "{st:?}");
    }
}

// ---------------------------------------------------------------- incremental decode

#[test]
fn byte_at_a_time_then_back_to_back() {
    let a = sample(SerializeType::Json);
    let mut b = sample(SerializeType::RocketMq);
    b.opaque = 99;
    let fa = encoded(&a);
    let fb = encoded(&b);

    for len in 0..fa.len() {
        assert_eq!(decode_frame(&fa[..len], MAX), Ok(None), "prefix of {len}");
    }
    assert_eq!(decode_frame(&fa, MAX), Ok(Some((a.clone(), fa.len()))));

    let mut stream = fa.clone();
    stream.extend_from_slice(&fb);
    let (first, used) = decode_frame(&stream, MAX).unwrap().unwrap();
    assert_eq!((first, used), (a, fa.len()));
    let (second, used2) = decode_frame(&stream[used..], MAX).unwrap().unwrap();
    assert_eq!((second, used2), (b, fb.len()));
    assert_eq!(used + used2, stream.len());
}

// ---------------------------------------------------------------- bad input

#[test]
fn huge_length_rejected_from_four_bytes() {
    let bytes = (1i32 << 30).to_be_bytes();
    assert_eq!(
        decode_frame(&bytes, 16 << 20),
        Err(FrameError::TooLong {
            frame_len: (1 << 30) + 4,
            max: 16 << 20
        })
    );
}

#[test]
fn negative_and_tiny_lengths() {
    assert_eq!(
        decode_frame(&i32::MIN.to_be_bytes(), MAX),
        Err(FrameError::NegativeLength(i32::MIN))
    );
    assert_eq!(
        decode_frame(&(-5i32).to_be_bytes(), MAX),
        Err(FrameError::NegativeLength(-5))
    );
    for total in 0..4i32 {
        assert_eq!(
            decode_frame(&total.to_be_bytes(), MAX),
            Err(FrameError::LengthTooSmall(total))
        );
    }
}

#[test]
fn header_length_larger_than_frame() {
    let mut bytes = frame(0, br#"{"code":1}"#, b"");
    bytes[7] += 1; // header length one past the frame
    assert_eq!(
        decode_frame(&bytes[..8], MAX),
        Err(FrameError::HeaderLengthExceedsFrame {
            header_len: 11,
            available: 10
        }),
        "detected from the 8-byte prefix alone"
    );
    assert!(matches!(
        decode_frame(&bytes, MAX),
        Err(FrameError::HeaderLengthExceedsFrame { .. })
    ));
}

#[test]
fn unknown_serialize_type() {
    let bytes = frame(2, br#"{"code":1}"#, b"");
    assert_eq!(
        decode_frame(&bytes, MAX),
        Err(FrameError::UnknownSerializeType(2))
    );
    let bytes = frame(0xFF, b"", b"");
    assert_eq!(
        decode_frame(&bytes, MAX),
        Err(FrameError::UnknownSerializeType(0xFF))
    );
}

#[test]
fn garbage_json_and_json_without_code() {
    let bytes = frame(0, b"{not json", b"");
    assert!(matches!(
        decode_frame(&bytes, MAX),
        Err(FrameError::Header {
            serialize_type: SerializeType::Json,
            error: HeaderError::Json(_)
        })
    ));
    let bytes = frame(0, br#"{"opaque":1,"flag":0,"extFields":{}}"#, b"");
    assert_eq!(
        decode_frame(&bytes, MAX),
        Err(FrameError::Header {
            serialize_type: SerializeType::Json,
            error: HeaderError::MissingField("code")
        })
    );
}

#[test]
fn truncated_binary_header() {
    // A complete frame whose binary header stops inside the opaque field.
    let bytes = frame(1, &[0, 10, 0, 1, 0xDF, 0, 0], b"");
    assert_eq!(
        decode_frame(&bytes, MAX),
        Err(FrameError::Header {
            serialize_type: SerializeType::RocketMq,
            error: HeaderError::Truncated {
                field: "opaque",
                needed: 4,
                available: 2
            }
        })
    );
    // A remark length reaching into the body is still a header error: the header ends
    // where its length says.
    let mut header = vec![0, 10, 0, 1, 0xDF, 0, 0, 0, 1, 0, 0, 0, 0];
    header.extend_from_slice(&5i32.to_be_bytes());
    let bytes = frame(1, &header, b"bodybodybody");
    assert!(matches!(
        decode_frame(&bytes, MAX),
        Err(FrameError::Header {
            error: HeaderError::Truncated {
                field: "remark",
                ..
            },
            ..
        })
    ));
}

// ---------------------------------------------------------------- fuzz

/// A random but plausible command, so mutations start from frames that mostly parse.
fn random_command(rng: &mut Rng) -> RemotingCommand {
    let st = if rng.below(2) == 0 {
        SerializeType::Json
    } else {
        SerializeType::RocketMq
    };
    let mut cmd = RemotingCommand::request(rng.below(400) as i32, ExtFields::new());
    cmd.serialize_type = st;
    cmd.opaque = rng.next_u64() as i32;
    cmd.flag = rng.below(4) as i32;
    if rng.below(2) == 0 {
        cmd.remark = Some("x".repeat(1 + rng.below(20)));
    }
    for i in 0..rng.below(5) {
        cmd.put_ext(&format!("k{i}"), rng.next_u64() as i64);
    }
    cmd.body = Bytes::from(vec![rng.next_u64() as u8; rng.below(40)]);
    cmd
}

/// Decodes `buf` with a small and a large limit; panics carry the seed and iteration.
fn check(buf: &[u8], seed: u64, iter: usize) {
    for max in [64, MAX] {
        let result = std::panic::catch_unwind(|| decode_frame(buf, max));
        let result = result.unwrap_or_else(|_| {
            panic!("decode_frame panicked: seed {seed} iteration {iter} (RINGMQ_FUZZ_SEED={seed})")
        });
        if let Ok(Some((cmd, used))) = result {
            assert!(
                used <= buf.len() && used <= max,
                "consumed {used} of {}: seed {seed} iteration {iter}",
                buf.len()
            );
            // Whatever decodes must re-encode and decode to itself (the bytes may differ:
            // JSON spacing, duplicate keys).
            let mut again = Vec::new();
            if encode_frame(&cmd, &mut again).is_ok() {
                let back = decode_frame(&again, usize::MAX)
                    .unwrap_or_else(|e| {
                        panic!("re-decode failed {e}: seed {seed} iteration {iter}")
                    })
                    .unwrap_or_else(|| {
                        panic!("re-decode incomplete: seed {seed} iteration {iter}")
                    });
                assert_eq!(
                    back.0, cmd,
                    "re-encode differs: seed {seed} iteration {iter}"
                );
            }
        }
    }
    let cut = buf.len() / 2;
    let _ = decode_frame(&buf[..cut], MAX);
}

#[test]
fn fuzz_never_panics() {
    let seed = fuzz_seed(0x5EED_F00D);
    let mut rng = Rng::new(seed);
    let mut decoded = 0usize;
    for iter in 0..fuzz_iters() {
        let buf = match rng.below(3) {
            // Pure noise, sometimes behind a plausible prefix.
            0 => {
                let mut b: Vec<u8> = (0..rng.below(64)).map(|_| rng.next_u64() as u8).collect();
                if rng.below(2) == 0 && b.len() >= 8 {
                    let total = (b.len() - 4) as i32;
                    b[..4].copy_from_slice(&total.to_be_bytes());
                    b[4] = rng.below(2) as u8;
                    b[5] = 0;
                    b[6] = 0;
                    b[7] = rng.below(b.len() - 7) as u8;
                }
                b
            }
            // A valid frame with a few bytes flipped.
            1 => {
                let mut b = encoded(&random_command(&mut rng));
                for _ in 0..1 + rng.below(4) {
                    let pos = rng.below(b.len());
                    b[pos] ^= 1 << rng.below(8);
                }
                b
            }
            // A valid frame with its header-length word or a random i32 overwritten.
            _ => {
                let mut b = encoded(&random_command(&mut rng));
                let pos = rng.below(b.len().saturating_sub(3).max(1));
                let value = match rng.below(4) {
                    0 => -1i32,
                    1 => i32::MAX,
                    2 => rng.below(64) as i32,
                    _ => rng.next_u64() as i32,
                };
                let end = (pos + 4).min(b.len());
                b[pos..end].copy_from_slice(&value.to_be_bytes()[..end - pos]);
                b
            }
        };
        if matches!(decode_frame(&buf, MAX), Ok(Some(_))) {
            decoded += 1;
        }
        check(&buf, seed, iter);
    }
    // The mutations must leave some frames intact, or the loop tests only the prefix.
    assert!(decoded > 0, "no fuzz input decoded: seed {seed}");
}

// ---------------------------------------------------------------- send header and batch

fn v1_fields() -> ExtFields {
    fields(&[
        ("producerGroup", "PG"),
        ("topic", "TopicA"),
        ("defaultTopic", "TBW102"),
        ("defaultTopicQueueNums", "4"),
        ("queueId", "2"),
        ("sysFlag", "0"),
        ("bornTimestamp", "1700000000123"),
        ("flag", "0"),
        ("properties", "TAGS\u{1}t\u{2}WAIT\u{1}true\u{2}"),
        ("reconsumeTimes", "1"),
        ("unitMode", "false"),
        ("maxReconsumeTimes", "16"),
        ("batch", "false"),
    ])
}

fn v2_fields() -> ExtFields {
    fields(&[
        ("a", "PG"),
        ("b", "TopicA"),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "2"),
        ("f", "0"),
        ("g", "1700000000123"),
        ("h", "0"),
        ("i", "TAGS\u{1}t\u{2}WAIT\u{1}true\u{2}"),
        ("j", "1"),
        ("k", "false"),
        ("l", "16"),
        ("m", "false"),
    ])
}

#[test]
fn v1_and_v2_send_headers_agree() {
    let v1 = SendMessageRequestHeader::from_v1(&v1_fields()).unwrap();
    let v2 = SendMessageRequestHeader::from_v2(&v2_fields()).unwrap();
    assert_eq!(v1, v2);
    assert_eq!(v1.topic, "TopicA");
    assert_eq!(v1.queue_id, 2);
    assert_eq!(v1.born_timestamp, 1_700_000_000_123);
    assert_eq!(v1.max_reconsume_times, Some(16));

    // Through a command, by code.
    let cmd = RemotingCommand::request(request::SEND_MESSAGE, v1_fields());
    assert_eq!(SendMessageRequestHeader::from_command(&cmd).unwrap(), v1);
    for code in [request::SEND_MESSAGE_V2, request::SEND_BATCH_MESSAGE] {
        let cmd = RemotingCommand::request(code, v2_fields());
        assert_eq!(SendMessageRequestHeader::from_command(&cmd).unwrap(), v1);
    }
}

#[test]
fn missing_topic_is_named() {
    let mut f = v1_fields();
    f.remove("topic");
    let err = SendMessageRequestHeader::from_v1(&f).unwrap_err();
    assert_eq!(err, FieldError::Missing("topic".into()));
    assert!(err.to_string().contains("`topic`"), "{err}");

    let mut f = v2_fields();
    f.remove("b");
    assert_eq!(
        SendMessageRequestHeader::from_v2(&f),
        Err(FieldError::Missing("b".into()))
    );
    let mut f = v2_fields();
    f.insert("e".into(), "two");
    assert!(matches!(
        SendMessageRequestHeader::from_v2(&f),
        Err(FieldError::Invalid { field, .. }) if field == "e"
    ));
}

/// One batch entry, assembled by hand.
fn batch_entry(flag: i32, body: &[u8], props: &str) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((20 + body.len() + 2 + props.len()) as i32).to_be_bytes());
    out.extend_from_slice(&[0; 8]); // MAGICCODE, BODYCRC
    out.extend_from_slice(&flag.to_be_bytes());
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&(props.len() as i16).to_be_bytes());
    out.extend_from_slice(props.as_bytes());
    out
}

#[test]
fn batch_body_two_messages() {
    let mut body = batch_entry(3, b"hello", "UNIQ_KEY\u{1}AA\u{2}");
    body.extend(batch_entry(0, b"world!", ""));
    let items = decode_batch(&Bytes::from(body)).unwrap();
    assert_eq!(
        items,
        vec![
            BatchItem {
                flag: 3,
                body: Bytes::from_static(b"hello"),
                properties: "UNIQ_KEY\u{1}AA\u{2}".into()
            },
            BatchItem {
                flag: 0,
                body: Bytes::from_static(b"world!"),
                properties: String::new()
            },
        ]
    );
}

#[test]
fn batch_body_rejects_bad_lengths() {
    let good = batch_entry(0, b"hello", "K\u{1}V\u{2}");

    assert_eq!(decode_batch(&Bytes::new()), Err(BatchError::Empty));
    for cut in 1..good.len() {
        let result = decode_batch(&Bytes::copy_from_slice(&good[..cut]));
        assert!(
            matches!(result, Err(BatchError::Truncated { index: 0, .. })),
            "cut {cut}: {result:?}"
        );
    }

    let mut huge_body = good.clone();
    huge_body[16..20].copy_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(
        decode_batch(&Bytes::from(huge_body)),
        Err(BatchError::Truncated { field: "BODY", .. })
    ));

    let mut negative_body = good.clone();
    negative_body[16..20].copy_from_slice(&(-1i32).to_be_bytes());
    assert!(matches!(
        decode_batch(&Bytes::from(negative_body)),
        Err(BatchError::NegativeLength {
            field: "BODY",
            len: -1,
            ..
        })
    ));

    let mut negative_props = good.clone();
    negative_props[25..27].copy_from_slice(&(-2i16).to_be_bytes());
    assert!(matches!(
        decode_batch(&Bytes::from(negative_props)),
        Err(BatchError::NegativeLength {
            field: "PROPERTIES",
            len: -2,
            ..
        })
    ));

    let mut wrong_total = good.clone();
    wrong_total[..4].copy_from_slice(&1000i32.to_be_bytes());
    assert_eq!(
        decode_batch(&Bytes::from(wrong_total)),
        Err(BatchError::SizeMismatch {
            index: 0,
            offset: 0,
            stored: 1000,
            computed: good.len()
        })
    );

    // A good first message followed by a truncated second reports the second.
    let mut two = good.clone();
    two.extend_from_slice(&good[..10]);
    assert!(matches!(
        decode_batch(&Bytes::from(two)),
        Err(BatchError::Truncated { index: 1, offset, .. }) if offset == good.len()
    ));
}

#[test]
fn batch_fuzz_never_panics() {
    let seed = fuzz_seed(0x5EED_F00D) ^ 0xBA7C;
    let mut rng = Rng::new(seed);
    let mut good = batch_entry(1, b"abc", "A\u{1}B\u{2}");
    good.extend(batch_entry(2, b"", ""));
    for iter in 0..fuzz_iters() / 4 {
        let mut b = good.clone();
        for _ in 0..1 + rng.below(3) {
            let pos = rng.below(b.len());
            b[pos] = rng.next_u64() as u8;
        }
        b.truncate(rng.below(b.len() + 1));
        let body = Bytes::from(b);
        let r = std::panic::catch_unwind(|| decode_batch(&body));
        assert!(
            r.is_ok(),
            "decode_batch panicked: seed {seed} iteration {iter}"
        );
    }
}
