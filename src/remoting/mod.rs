//! Remoting: the pure codec of RocketMQ's wire protocol (D1; reference §8,
//! §9). No sockets, no I/O, no runtime: the connection layer feeds bytes in and writes
//! bytes out, and everything here is testable from byte arrays.
//!
//! # Frame
//!
//! ```text
//!  0        4        5                8                  8+H
//!  +--------+--------+----------------+------------------+-------------------+
//!  | total  | type   | header len H   | header           | body              |
//!  | i32 BE | u8     | u24 BE         | JSON or binary   | total - 4 - H     |
//!  +--------+--------+----------------+------------------+-------------------+
//!           \________ one i32: (type << 24) | H ________/
//!
//!  total counts every byte after itself: 4 + H + body length.
//!  type: 0 = JSON, 1 = ROCKETMQ (binary).
//! ```
//!
//! # The two header encodings
//!
//! Both carry the same fields: `code`, `language`, `version`, `opaque`, `flag`, `remark`
//! and `extFields` (string to string; the per-request "custom header").
//!
//! - **JSON** ([`json_header`]): fastjson text, the Java default. Carries any i32 code.
//! - **ROCKETMQ** ([`binary_header`]): fixed big-endian fields, length-prefixed remark and
//!   map. Code and version are i16, so the POP family (200050+) cannot be sent in it.
//!
//! Requests and responses share one connection and are matched by `opaque`; a response
//! sets flag bit 0 and echoes its request's `opaque`; a request with flag bit 1 is oneway
//! and gets no response. We answer in the request's header type (see
//! [`RemotingCommand::response_to`]); clients accept either.
//!
//! # Invariants
//!
//! - Decoders never panic: every length is checked against the bytes present before it
//!   is used, whatever the input (a seeded fuzz test holds them to it).
//! - [`decode_frame`] rejects a bad length prefix as soon as its 4 bytes (or, for the
//!   type and header length, 8 bytes) are present, never after buffering the claimed
//!   length; any frame error means the stream is out of step and the connection closes.
//! - Encoders append nothing when they fail, and refuse rather than truncate a value the
//!   format cannot hold (a code above i16 in a binary header, a header above 2^24 - 1).
//! - `encode_frame_header_only(cmd, n)` followed by `n` body bytes is byte-identical to
//!   `encode_frame` of the command with that body: the zero-copy pull path relies on it.
//!
//! # Modules
//!
//! - [`frame`]: length prefix, incremental decode, encode (whole, or header only).
//! - [`command`]: [`RemotingCommand`], flags, typed extFields access, errors.
//! - [`ext_fields`]: [`ExtFields`], the sorted, allocation-light extFields map.
//! - [`json_header`], [`binary_header`]: the two header encodings.
//! - [`codes`]: request and response code constants with their Java names.
//! - [`send_header`]: the send request header (V1 and V2 names) and the batch body.
//! - [`fastjson`]: a reader for the JSON bodies Java brokers send (object and integer keys).
//! - [`log_safe`]: the one way text a peer sent reaches a log line (escaped, truncated),
//!   and the limiter for repeated warnings.
//! - [`register_broker`]: REGISTER_BROKER / UNREGISTER_BROKER headers and body, both ways.
//! - [`requests`]: builders of the requests the in-project client and tools send.
//!
//! Serving connections (sockets, backlogs, zero-copy bodies) is [`crate::server`]'s, over
//! the network seam ([`crate::net`]); this module imports neither.

pub mod binary_header;
pub mod codes;
pub mod command;
pub mod ext_fields;
pub mod fastjson;
pub mod frame;
pub mod json_header;
pub mod log_safe;
pub mod register_broker;
pub mod requests;
pub mod send_header;

pub use command::{
    ExtFields, FieldError, HeaderError, HeaderFields, RemotingCommand, SerializeType, ONEWAY_FLAG,
    RESPONSE_FLAG,
};
pub use frame::{
    decode_frame, encode_frame, encode_frame_header, encode_frame_header_only, take_frame,
    FrameError, DEFAULT_MAX_FRAME_LEN,
};
pub use send_header::{
    decode_batch, encode_batch, BatchError, BatchItem, SendMessageRequestHeader,
};
