//! Frame codec: length prefix, serialize-type word, header, body (reference §8.1).
//!
//! ```text
//! +-------------+-----------+-----------------+--------------+---------------+
//! | total: i32  | type: u8  | header len: u24 | header       | body          |
//! +-------------+-----------+-----------------+--------------+---------------+
//!   4 bytes       1 byte      3 bytes           header len     the rest
//!
//! total = 4 + header len + body len    (every byte after the total field)
//! ```
//!
//! [`decode_frame`] is incremental: handed whatever has arrived, it answers "need more"
//! (`Ok(None)`), a command and the bytes it used, or an error. It judges the prefix as
//! soon as the bytes for it are there, so a peer announcing a 1 GiB frame is refused
//! after 4 bytes, not after the broker has buffered 1 GiB. Any error means the stream is
//! out of step and the connection must be closed, as Java's `NettyDecoder` does: there
//! is no way to find the next frame boundary.
//!
//! `max_frame_len` bounds the whole frame *including* the 4-byte total field, which is
//! how Java's `LengthFieldBasedFrameDecoder` applies `frameMaxLength` (16 MiB default).

use bytes::{Bytes, BytesMut};

use super::binary_header;
use super::command::{HeaderError, RemotingCommand, SerializeType};
use super::json_header;

/// Java's default `com.rocketmq.remoting.frameMaxLength`.
pub const DEFAULT_MAX_FRAME_LEN: usize = 16 * 1024 * 1024;
/// The smallest legal total field: just the serialize-type/header-length word.
pub const MIN_TOTAL_LEN: i32 = 4;
/// The header length is a 24-bit field.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;
/// Total field plus serialize-type/header-length word.
pub const PREFIX_LEN: usize = 8;

/// Why bytes are not a frame, or a command cannot be framed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame length {0} is negative")]
    NegativeLength(i32),
    #[error("frame length {0} is below the minimum of 4")]
    LengthTooSmall(i32),
    #[error("frame of {frame_len} bytes exceeds the limit of {max}")]
    TooLong { frame_len: u64, max: u64 },
    #[error("header length {header_len} exceeds the {available} bytes the frame has for it")]
    HeaderLengthExceedsFrame { header_len: usize, available: usize },
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    #[error("header of {0} bytes does not fit the 24-bit header length")]
    HeaderTooLong(usize),
    #[error("{serialize_type:?} header: {error}")]
    Header {
        serialize_type: SerializeType,
        #[source]
        error: HeaderError,
    },
}

/// What the first 8 bytes of a frame say.
struct Prefix {
    /// Whole frame, including the total field.
    frame_len: usize,
    serialize_type: SerializeType,
    header_len: usize,
}

/// Judges as much of the prefix as `buf` holds. `Ok(None)`: fewer than 8 bytes, and the
/// length field (if present) is acceptable.
fn check_prefix(buf: &[u8], max_frame_len: usize) -> Result<Option<Prefix>, FrameError> {
    let Some(total) = buf.get(..4) else {
        return Ok(None);
    };
    let total = i32::from_be_bytes([total[0], total[1], total[2], total[3]]);
    if total < 0 {
        return Err(FrameError::NegativeLength(total));
    }
    if total < MIN_TOTAL_LEN {
        return Err(FrameError::LengthTooSmall(total));
    }
    let frame_len = total as u64 + 4;
    if frame_len > max_frame_len as u64 {
        return Err(FrameError::TooLong {
            frame_len,
            max: max_frame_len as u64,
        });
    }
    let Some(word) = buf.get(4..8) else {
        return Ok(None);
    };
    let serialize_type =
        SerializeType::from_code(word[0]).ok_or(FrameError::UnknownSerializeType(word[0]))?;
    let header_len = u32::from_be_bytes([0, word[1], word[2], word[3]]) as usize;
    let available = total as usize - 4;
    if header_len > available {
        return Err(FrameError::HeaderLengthExceedsFrame {
            header_len,
            available,
        });
    }
    Ok(Some(Prefix {
        frame_len: frame_len as usize,
        serialize_type,
        header_len,
    }))
}

fn decode_header(
    serialize_type: SerializeType,
    header: &[u8],
) -> Result<RemotingCommand, FrameError> {
    let decoded = match serialize_type {
        SerializeType::Json => json_header::decode(header),
        SerializeType::RocketMq => binary_header::decode(header),
    };
    decoded.map_err(|error| FrameError::Header {
        serialize_type,
        error,
    })
}

/// Decodes the first frame of `buf`: `Ok(None)` if more bytes are needed, else the command
/// and the number of bytes it took. The body is copied out of `buf`; [`take_frame`] avoids
/// that copy for a `BytesMut` read buffer.
pub fn decode_frame(
    buf: &[u8],
    max_frame_len: usize,
) -> Result<Option<(RemotingCommand, usize)>, FrameError> {
    let Some(prefix) = check_prefix(buf, max_frame_len)? else {
        return Ok(None);
    };
    let Some(frame) = buf.get(..prefix.frame_len) else {
        return Ok(None);
    };
    let body_start = PREFIX_LEN + prefix.header_len;
    let mut cmd = decode_header(prefix.serialize_type, &frame[PREFIX_LEN..body_start])?;
    cmd.body = Bytes::copy_from_slice(&frame[body_start..]);
    Ok(Some((cmd, prefix.frame_len)))
}

/// Like [`decode_frame`], but consumes the frame from `buf` and hands out its body as a
/// slice of the same allocation: what a tokio `Decoder` over a `BytesMut` wants. On
/// `Ok(None)` and on errors `buf` is left as it was.
pub fn take_frame(
    buf: &mut BytesMut,
    max_frame_len: usize,
) -> Result<Option<RemotingCommand>, FrameError> {
    let Some(prefix) = check_prefix(buf, max_frame_len)? else {
        return Ok(None);
    };
    if buf.len() < prefix.frame_len {
        return Ok(None);
    }
    let body_start = PREFIX_LEN + prefix.header_len;
    let mut cmd = decode_header(prefix.serialize_type, &buf[PREFIX_LEN..body_start])?;
    let frame = buf.split_to(prefix.frame_len).freeze();
    cmd.body = frame.slice(body_start..);
    Ok(Some(cmd))
}

/// Appends the prefix and header of `cmd` (in `cmd.serialize_type`) for a body of
/// `body_len` bytes that is not appended: the caller sends it, for instance straight
/// from CommitLog files for a pull. `cmd.body` is ignored. Appends nothing on error.
pub fn encode_frame_header(
    cmd: &RemotingCommand,
    body_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; PREFIX_LEN]);
    let encoded = match cmd.serialize_type {
        SerializeType::Json => json_header::encode(cmd, out),
        SerializeType::RocketMq => binary_header::encode(cmd, out),
    };
    if let Err(error) = encoded {
        out.truncate(start);
        return Err(FrameError::Header {
            serialize_type: cmd.serialize_type,
            error,
        });
    }
    let header_len = out.len() - start - PREFIX_LEN;
    if header_len > MAX_HEADER_LEN {
        out.truncate(start);
        return Err(FrameError::HeaderTooLong(header_len));
    }
    let total = 4 + header_len as u64 + body_len as u64;
    if total > i32::MAX as u64 {
        out.truncate(start);
        return Err(FrameError::TooLong {
            frame_len: total + 4,
            max: i32::MAX as u64 + 4,
        });
    }
    let word = (u32::from(cmd.serialize_type.code()) << 24) | header_len as u32;
    out[start..start + 4].copy_from_slice(&(total as u32).to_be_bytes());
    out[start + 4..start + PREFIX_LEN].copy_from_slice(&word.to_be_bytes());
    Ok(())
}

/// [`encode_frame_header`] into a fresh buffer.
pub fn encode_frame_header_only(
    cmd: &RemotingCommand,
    body_len: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_frame_header(cmd, body_len, &mut out)?;
    Ok(out)
}

/// Appends the whole frame of `cmd` (header in `cmd.serialize_type`, then `cmd.body`).
/// Appends nothing on error. A command with a `file_body` is the connection writer's to
/// send (it needs the socket); this pure codec never reads files.
pub fn encode_frame(cmd: &RemotingCommand, out: &mut Vec<u8>) -> Result<(), FrameError> {
    debug_assert!(
        cmd.file_body.is_empty(),
        "encode_frame does not send a file body"
    );
    encode_frame_header(cmd, cmd.body.len(), out)?;
    out.extend_from_slice(&cmd.body);
    Ok(())
}

/// Appends the frame header of `response` (its length counting the file body too) and its
/// byte body; true when its file body must follow.
pub(crate) fn encode_response(response: &RemotingCommand, out: &mut Vec<u8>) -> bool {
    let body_len = response.body.len() + response.file_body.len() as usize;
    match encode_frame_header(response, body_len, out) {
        Ok(()) => {
            out.extend_from_slice(&response.body);
            !response.file_body.is_empty()
        }
        Err(error) => {
            // Only a header beyond the format's limits gets here; tell the client instead
            // of leaving its request to time out.
            tracing::error!(opaque = response.opaque, %error, "cannot encode a response");
            let mut fallback = response.clone();
            fallback.code = super::codes::response::SYSTEM_ERROR;
            fallback.ext_fields.clear();
            fallback.remark = Some(format!("the response could not be encoded: {error}"));
            fallback.body = bytes::Bytes::new();
            fallback.file_body = Default::default();
            let _ = encode_frame_header(&fallback, 0, out);
            false
        }
    }
}

/// A SEND_MESSAGE response with `opaque`, for the connection and reply-batch tests.
#[cfg(test)]
pub(crate) fn test_response(opaque: i32) -> RemotingCommand {
    let mut request = RemotingCommand::request(10, Default::default());
    request.opaque = opaque;
    RemotingCommand::response_to(&request, 0, None)
}

#[cfg(test)]
mod tests {
    use super::super::command::ExtFields;
    use super::*;

    fn cmd(serialize_type: SerializeType) -> RemotingCommand {
        let mut cmd = RemotingCommand::request(11, ExtFields::new());
        cmd.serialize_type = serialize_type;
        cmd.opaque = 3;
        cmd.put_ext("topic", "T");
        cmd.with_body(&b"payload"[..])
    }

    #[test]
    fn round_trip_both_types() {
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            let c = cmd(st);
            let mut out = Vec::new();
            encode_frame(&c, &mut out).unwrap();
            assert_eq!(out[4], st.code());
            let total = i32::from_be_bytes(out[..4].try_into().unwrap());
            assert_eq!(total as usize + 4, out.len());
            assert_eq!(
                decode_frame(&out, DEFAULT_MAX_FRAME_LEN),
                Ok(Some((c.clone(), out.len())))
            );
            let mut buf = BytesMut::from(&out[..]);
            buf.extend_from_slice(b"next");
            assert_eq!(take_frame(&mut buf, DEFAULT_MAX_FRAME_LEN), Ok(Some(c)));
            assert_eq!(&buf[..], b"next");
        }
    }

    #[test]
    fn prefix_errors_before_the_bytes_arrive() {
        let huge = (1i32 << 30).to_be_bytes();
        assert!(matches!(
            decode_frame(&huge, DEFAULT_MAX_FRAME_LEN),
            Err(FrameError::TooLong { .. })
        ));
        assert_eq!(decode_frame(&[0, 0, 0], 64), Ok(None));
        assert_eq!(
            decode_frame(&(-1i32).to_be_bytes(), 64),
            Err(FrameError::NegativeLength(-1))
        );
        assert_eq!(
            decode_frame(&3i32.to_be_bytes(), 64),
            Err(FrameError::LengthTooSmall(3))
        );
        // Exactly at the limit is allowed: 60 + 4 = 64.
        assert_eq!(decode_frame(&60i32.to_be_bytes(), 64), Ok(None));
        assert!(decode_frame(&61i32.to_be_bytes(), 64).is_err());
    }

    #[test]
    fn take_frame_leaves_buffer_on_error_and_partial() {
        let mut out = Vec::new();
        encode_frame(&cmd(SerializeType::Json), &mut out).unwrap();
        let mut partial = BytesMut::from(&out[..out.len() - 1]);
        assert_eq!(take_frame(&mut partial, DEFAULT_MAX_FRAME_LEN), Ok(None));
        assert_eq!(partial.len(), out.len() - 1);
        out[8] = b'x';
        let mut bad = BytesMut::from(&out[..]);
        assert!(take_frame(&mut bad, DEFAULT_MAX_FRAME_LEN).is_err());
        assert_eq!(bad.len(), out.len());
    }

    #[test]
    fn encode_error_appends_nothing() {
        let mut c = cmd(SerializeType::RocketMq);
        c.code = 200_050;
        let mut out = vec![1, 2];
        assert!(matches!(
            encode_frame(&c, &mut out),
            Err(FrameError::Header {
                serialize_type: SerializeType::RocketMq,
                error: HeaderError::OutOfRange { .. }
            })
        ));
        assert_eq!(out, [1, 2]);
        c.serialize_type = SerializeType::Json;
        encode_frame(&c, &mut out).unwrap();
        let (back, _) = decode_frame(&out[2..], DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(back.code, 200_050, "JSON carries codes above i16");
    }
}
