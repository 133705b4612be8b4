//! [`RemotingCommand`]: one request or response, independent of how its header is
//! serialized, plus the typed access to its extFields that request handlers use.
//!
//! A command is what both header encodings decode to and encode from. Its `extFields`
//! carry the "custom header" of each request type as strings (`Long.toString`,
//! `"true"`/`"false"`), keyed by Java field name; [`HeaderFields`] parses them back with
//! errors that name the field, so a handler can answer with a remark a human can act on.

use std::fmt::Display;

use bytes::Bytes;
use compact_str::{CompactString, ToCompactString};

use crate::io::file_body::FileBody;

pub use super::ext_fields::ExtFields;

/// Flag bit 0: this command is a response.
pub const RESPONSE_FLAG: i32 = 1;
/// Flag bit 1: this request expects no response.
pub const ONEWAY_FLAG: i32 = 1 << 1;
/// The language we put in commands we originate; every client version knows it.
pub const LANGUAGE_JAVA: &str = "JAVA";
/// The `version` of commands we originate: `MQVersion.V5_3_3`.
pub const DEFAULT_VERSION: i32 = 479;

/// `LanguageCode` names by their binary code (reference §8.2). `RUST` is 4.9.3+ and
/// `NODE_JS` 5.x; older peers do not know them.
const LANGUAGES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];
/// The `OTHER` language code, for names the binary table does not have.
pub const LANGUAGE_CODE_OTHER: u8 = 7;

/// The binary code of a `LanguageCode` name, if it is one we know.
pub fn language_code(name: &str) -> Option<u8> {
    LANGUAGES.iter().position(|&n| n == name).map(|i| i as u8)
}

/// The `LanguageCode` name of a binary code, if it is one we know.
pub fn language_name(code: u8) -> Option<&'static str> {
    LANGUAGES.get(code as usize).copied()
}

/// How a command's header is serialized: the high byte of the frame's second word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SerializeType {
    /// fastjson text (code 0); the Java default and the only one that carries codes > 32767.
    #[default]
    Json,
    /// `RocketMQSerializable` binary (code 1).
    RocketMq,
}

impl SerializeType {
    /// The wire byte.
    pub fn code(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    /// The serialize type of a wire byte; `None` for bytes Java does not define.
    pub fn from_code(code: u8) -> Option<SerializeType> {
        match code {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }
}

/// One remoting request or response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code in requests (`codes::request`), response code in responses.
    pub code: i32,
    /// `LanguageCode` name of the sender (`"JAVA"`, `"GO"`, ...). A binary header with a
    /// code we do not know decodes to that code's decimal digits, which encode back to it.
    /// Inline (no allocation) for every name: the longest, `NODE_JS`, is 7 bytes.
    pub language: CompactString,
    /// The sender's `MQVersion` ordinal.
    pub version: i32,
    /// Request id; a response carries its request's.
    pub opaque: i32,
    /// [`RESPONSE_FLAG`] and [`ONEWAY_FLAG`] bits.
    pub flag: i32,
    /// Error text. The binary header cannot tell `Some("")` from `None`.
    pub remark: Option<String>,
    pub ext_fields: ExtFields,
    /// The header encoding this command arrived in or will be sent in.
    pub serialize_type: SerializeType,
    pub body: Bytes,
    /// More body, sent after `body` straight from files (a pull's CommitLog records, D8).
    /// The frame's body is `body` then these bytes; the length prefix counts both. Only the
    /// connection writer sends it; the pure codec ([`super::frame::encode_frame`]) does not.
    pub file_body: FileBody,
}

impl RemotingCommand {
    /// A request with our language and version, opaque 0 (the connection assigns it), JSON
    /// header and no body.
    pub fn request(code: i32, ext_fields: ExtFields) -> RemotingCommand {
        RemotingCommand {
            code,
            language: CompactString::const_new(LANGUAGE_JAVA),
            version: DEFAULT_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields,
            serialize_type: SerializeType::Json,
            body: Bytes::new(),
            file_body: FileBody::new(),
        }
    }

    /// The response to `request`: its opaque and version, the response bit, language
    /// `"JAVA"` (the conservative choice, reference §13) and the request's serialize type,
    /// which the client is sure to understand.
    pub fn response_to(
        request: &RemotingCommand,
        code: i32,
        remark: Option<String>,
    ) -> RemotingCommand {
        RemotingCommand {
            code,
            language: CompactString::const_new(LANGUAGE_JAVA),
            version: request.version,
            opaque: request.opaque,
            flag: RESPONSE_FLAG,
            remark,
            ext_fields: ExtFields::new(),
            serialize_type: request.serialize_type,
            body: Bytes::new(),
            file_body: FileBody::new(),
        }
    }

    /// Flag bit 0.
    pub fn is_response(&self) -> bool {
        self.flag & RESPONSE_FLAG != 0
    }

    /// Flag bit 1: the sender expects no response.
    pub fn is_oneway(&self) -> bool {
        self.flag & ONEWAY_FLAG != 0
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> RemotingCommand {
        self.body = body.into();
        self
    }

    /// Sets an extField to `value`'s string form (`Display` of integers and bools matches
    /// Java's `toString`).
    pub fn put_ext(&mut self, key: &str, value: impl Display) {
        // Integers format straight into the inline buffer, without a String in between.
        self.ext_fields
            .insert(key.into(), value.to_compact_string());
    }

    pub fn get_str(&self, field: &str) -> Result<&str, FieldError> {
        self.ext_fields.get_str(field)
    }
    pub fn get_i32(&self, field: &str) -> Result<i32, FieldError> {
        self.ext_fields.get_i32(field)
    }
    pub fn get_i64(&self, field: &str) -> Result<i64, FieldError> {
        self.ext_fields.get_i64(field)
    }
    pub fn get_bool(&self, field: &str) -> Result<bool, FieldError> {
        self.ext_fields.get_bool(field)
    }
    pub fn opt_str(&self, field: &str) -> Option<&str> {
        self.ext_fields.opt_str(field)
    }
    pub fn opt_i32(&self, field: &str) -> Result<Option<i32>, FieldError> {
        self.ext_fields.opt_i32(field)
    }
    pub fn opt_i64(&self, field: &str) -> Result<Option<i64>, FieldError> {
        self.ext_fields.opt_i64(field)
    }
    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>, FieldError> {
        self.ext_fields.opt_bool(field)
    }
}

/// Why an extField cannot be read as the type a handler needs.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FieldError {
    #[error("missing header field `{0}`")]
    Missing(String),
    #[error("header field `{field}` = {value:?} is not a valid {expected}")]
    Invalid {
        field: String,
        value: String,
        expected: &'static str,
    },
}

/// Typed reads of extFields. Integers parse like `Integer.parseInt`/`Long.parseLong`
/// (optional sign, decimal digits, no spaces). Booleans accept `true`/`false` in any case
/// and reject anything else, where Java's `Boolean.parseBoolean` would quietly read
/// `false`: no client sends other spellings, and a typo should not flip a flag.
pub trait HeaderFields {
    fn opt_str(&self, field: &str) -> Option<&str>;

    fn get_str(&self, field: &str) -> Result<&str, FieldError> {
        self.opt_str(field)
            .ok_or_else(|| FieldError::Missing(field.to_owned()))
    }
    fn opt_i32(&self, field: &str) -> Result<Option<i32>, FieldError> {
        self.opt_str(field)
            .map(|v| parse(field, v, "32-bit integer"))
            .transpose()
    }
    fn opt_i64(&self, field: &str) -> Result<Option<i64>, FieldError> {
        self.opt_str(field)
            .map(|v| parse(field, v, "64-bit integer"))
            .transpose()
    }
    fn opt_bool(&self, field: &str) -> Result<Option<bool>, FieldError> {
        self.opt_str(field)
            .map(|v| {
                if v.eq_ignore_ascii_case("true") {
                    Ok(true)
                } else if v.eq_ignore_ascii_case("false") {
                    Ok(false)
                } else {
                    Err(invalid(field, v, "boolean"))
                }
            })
            .transpose()
    }
    fn get_i32(&self, field: &str) -> Result<i32, FieldError> {
        self.opt_i32(field)?
            .ok_or_else(|| FieldError::Missing(field.to_owned()))
    }
    fn get_i64(&self, field: &str) -> Result<i64, FieldError> {
        self.opt_i64(field)?
            .ok_or_else(|| FieldError::Missing(field.to_owned()))
    }
    fn get_bool(&self, field: &str) -> Result<bool, FieldError> {
        self.opt_bool(field)?
            .ok_or_else(|| FieldError::Missing(field.to_owned()))
    }
}

impl HeaderFields for ExtFields {
    fn opt_str(&self, field: &str) -> Option<&str> {
        self.get(field)
    }
}

impl HeaderFields for super::ext_fields::InOrder<'_> {
    fn opt_str(&self, field: &str) -> Option<&str> {
        self.get(field)
    }
}

fn parse<T: std::str::FromStr>(
    field: &str,
    value: &str,
    expected: &'static str,
) -> Result<T, FieldError> {
    value.parse().map_err(|_| invalid(field, value, expected))
}

fn invalid(field: &str, value: &str, expected: &'static str) -> FieldError {
    FieldError::Invalid {
        field: field.to_owned(),
        value: value.to_owned(),
        expected,
    }
}

/// Why header bytes do not decode to a command, or a command cannot be encoded in a
/// header type. Shared by the JSON and binary codecs so callers match one type.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("header is not valid JSON: {0}")]
    Json(String),
    #[error("JSON header is not an object")]
    NotAnObject,
    #[error("header has no `{0}` field")]
    MissingField(&'static str),
    #[error("header field `{field}` is invalid: {reason}")]
    InvalidField { field: String, reason: String },
    #[error("binary header truncated reading {field}: {needed} bytes needed, {available} left")]
    Truncated {
        field: &'static str,
        needed: usize,
        available: usize,
    },
    #[error("binary header {field} length {len} is negative")]
    NegativeLength { field: &'static str, len: i32 },
    #[error("binary header {0} is not valid UTF-8")]
    BadUtf8(&'static str),
    #[error("binary header has {0} bytes after its last field")]
    TrailingBytes(usize),
    #[error("{field} = {value} does not fit the binary header's {bits}-bit field")]
    OutOfRange {
        field: &'static str,
        value: i32,
        bits: u8,
    },
    #[error("{field} is {len} bytes; at most {max} fit")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
}

/// The response to a request whose header cannot be used: SYSTEM_ERROR (what Java's
/// processors answer when decoding the custom header throws), remark naming the field.
pub fn bad_header(request: &RemotingCommand, error: impl std::fmt::Display) -> RemotingCommand {
    RemotingCommand::response_to(
        request,
        super::codes::response::SYSTEM_ERROR,
        Some(format!("bad request header: {error}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn flags() {
        let mut req = RemotingCommand::request(10, ExtFields::new());
        assert!(!req.is_response() && !req.is_oneway());
        req.flag = ONEWAY_FLAG;
        assert!(req.is_oneway() && !req.is_response());
    }

    #[test]
    fn response_echoes_request() {
        let mut req = RemotingCommand::request(11, ExtFields::new());
        req.opaque = 77;
        req.version = 401;
        req.language = "GO".into();
        req.serialize_type = SerializeType::RocketMq;
        let resp = RemotingCommand::response_to(&req, 19, Some("no msg".into()));
        assert_eq!(resp.opaque, 77);
        assert_eq!(resp.version, 401);
        assert_eq!(resp.language, "JAVA");
        assert_eq!(resp.serialize_type, SerializeType::RocketMq);
        assert_eq!(resp.code, 19);
        assert!(resp.is_response() && !resp.is_oneway());
        assert_eq!(resp.remark.as_deref(), Some("no msg"));
    }

    #[test]
    fn typed_getters_name_the_field() {
        let f = fields(&[
            ("queueId", "3"),
            ("offset", "-9000000000"),
            ("unitMode", "TRUE"),
            ("bad", "x1"),
        ]);
        assert_eq!(f.get_i32("queueId"), Ok(3));
        assert_eq!(f.get_i64("offset"), Ok(-9_000_000_000));
        assert_eq!(f.get_bool("unitMode"), Ok(true));
        assert_eq!(f.opt_i32("absent"), Ok(None));
        assert_eq!(f.get_str("topic"), Err(FieldError::Missing("topic".into())));
        assert_eq!(
            f.get_i32("offset"),
            Err(FieldError::Invalid {
                field: "offset".into(),
                value: "-9000000000".into(),
                expected: "32-bit integer"
            })
        );
        let err = f.get_bool("bad").unwrap_err();
        assert!(err.to_string().contains("`bad`"), "{err}");
        let mut cmd = RemotingCommand::request(14, f);
        cmd.put_ext("commitOffset", 42i64);
        assert_eq!(cmd.get_i64("commitOffset"), Ok(42));
    }

    #[test]
    fn language_table() {
        assert_eq!(language_code("JAVA"), Some(0));
        assert_eq!(language_code("GO"), Some(9));
        assert_eq!(language_code("RUST"), Some(12));
        assert_eq!(language_name(13), Some("NODE_JS"));
        assert_eq!(language_name(14), None);
        assert_eq!(language_code("COBOL"), None);
    }
}
