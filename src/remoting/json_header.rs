//! The JSON header (serialize type 0): fastjson's rendering of Java's `RemotingCommand`
//! (reference §8.3).
//!
//! ```text
//! {"code":0,"extFields":{"queueId":"1","queueOffset":"42"},"flag":1,"language":"JAVA",
//!  "opaque":7,"remark":"...","serializeTypeCurrentRPC":"JSON","version":479}
//! ```
//!
//! Encoding writes fastjson's alphabetical order, omits a `None` remark, always writes
//! `extFields` (an empty object is accepted everywhere; a missing one is not by every
//! client) and always writes `"serializeTypeCurrentRPC":"JSON"`: Java emits it because
//! the getter is not transient, and rocketmq-client-rust's decoder requires it.
//!
//! Decoding is lenient where clients differ and strict where a guess would be wrong:
//! any field order, unknown fields ignored, `code` required, everything else optional
//! (`language` defaults to `"JAVA"` as Java's field initializer does; the integers to 0).
//! Integers may also arrive as decimal strings and extFields values as JSON numbers or
//! booleans (some clients send them unquoted); both are taken in their string form. A
//! null extFields value is dropped, as fastjson drops nulls when writing. Nested arrays
//! or objects in extFields are rejected: there is no string they could stand for.

use std::borrow::Cow;
use std::fmt;

use compact_str::{format_compact, CompactString, ToCompactString};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::command::{
    language_name, ExtFields, HeaderError, RemotingCommand, SerializeType, LANGUAGE_JAVA,
};

/// Appends `cmd`'s JSON header (not its body) to `out`: fastjson's (alphabetical) field
/// order, written directly rather than through serde, since every response pays for it.
/// Strings are escaped exactly as `serde_json` escapes them (`"`, `\\` and control
/// characters; everything else, non-ASCII included, as is).
pub fn encode(cmd: &RemotingCommand, out: &mut Vec<u8>) -> Result<(), HeaderError> {
    out.reserve(128 + cmd.ext_fields.len() * 24);
    out.extend_from_slice(b"{\"code\":");
    push_int(out, i64::from(cmd.code));
    out.extend_from_slice(b",\"extFields\":{");
    for (index, (key, value)) in cmd.ext_fields.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        push_str(out, key);
        out.push(b':');
        push_str(out, value);
    }
    out.extend_from_slice(b"},\"flag\":");
    push_int(out, i64::from(cmd.flag));
    out.extend_from_slice(b",\"language\":");
    push_str(out, &cmd.language);
    out.extend_from_slice(b",\"opaque\":");
    push_int(out, i64::from(cmd.opaque));
    if let Some(remark) = &cmd.remark {
        out.extend_from_slice(b",\"remark\":");
        push_str(out, remark);
    }
    out.extend_from_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    push_int(out, i64::from(cmd.version));
    out.push(b'}');
    Ok(())
}

fn push_int(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// A JSON string literal for `text`. The runs between the bytes that need an escape
/// (found a word at a time, as the decoder finds them) are copied whole.
fn push_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut at = 0;
    loop {
        let run = fast::plain_run(&bytes[at..]);
        out.extend_from_slice(&bytes[at..at + run]);
        at += run;
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0C => b"\\f",
            _ => b"",
        };
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0x0F)]);
        } else {
            out.extend_from_slice(escape);
        }
        at += 1;
    }
    out.push(b'"');
}

/// Decodes a JSON header into a command with [`SerializeType::Json`] and an empty body.
///
/// One pass of serde_json straight into the fields this header has, borrowing every
/// string that has no escapes, rather than through a `serde_json::Value` tree: the send
/// path decodes one of these per message. Semantic checks happen after parsing, in the
/// order the fields are documented above, so errors name the same field whatever order
/// the sender wrote them in.
pub fn decode(header: &[u8]) -> Result<RemotingCommand, HeaderError> {
    decode_with(header, true)
}

/// [`decode`], trying the scanner first only when `scan` is set (tests compare both).
fn decode_with(header: &[u8], scan: bool) -> Result<RemotingCommand, HeaderError> {
    let raw = match scan.then(|| fast::parse(header)).flatten() {
        Some(raw) => raw,
        None => {
            let top: Top<'_> =
                serde_json::from_slice(header).map_err(|e| HeaderError::Json(e.to_string()))?;
            let Top::Object(raw) = top else {
                return Err(HeaderError::NotAnObject);
            };
            raw
        }
    };
    let code = int_field(&raw.code, "code")?.ok_or(HeaderError::MissingField("code"))?;
    let language = match raw.language {
        None | Some(Scalar::Null) => CompactString::const_new(LANGUAGE_JAVA),
        Some(Scalar::Str(s)) => CompactString::from(s),
        // fastjson reads an enum from its ordinal too.
        Some(Scalar::U64(n)) => match u8::try_from(n) {
            Ok(c) => {
                language_name(c).map_or_else(|| c.to_compact_string(), CompactString::const_new)
            }
            Err(_) => return Err(invalid("language", "not a language code")),
        },
        Some(Scalar::I64(_) | Scalar::F64(_)) => {
            return Err(invalid("language", "not a language code"))
        }
        Some(_) => return Err(invalid("language", "not a string")),
    };
    let remark = match raw.remark {
        None | Some(Scalar::Null) => None,
        Some(Scalar::Str(s)) => Some(s.into_owned()),
        Some(_) => return Err(invalid("remark", "not a string")),
    };
    let ext_fields = match raw.ext_fields {
        None | Some(Ext::Null) => ExtFields::new(),
        Some(Ext::Fields(fields)) => ext_fields(fields)?,
        Some(Ext::Updates(updates)) => ExtFields::from_updates(updates),
        Some(Ext::Other) => return Err(invalid("extFields", "not an object")),
    };
    Ok(RemotingCommand {
        code,
        language,
        version: int_field(&raw.version, "version")?.unwrap_or(0),
        opaque: int_field(&raw.opaque, "opaque")?.unwrap_or(0),
        flag: int_field(&raw.flag, "flag")?.unwrap_or(0),
        remark,
        ext_fields,
        serialize_type: SerializeType::Json,
        body: Default::default(),
        file_body: Default::default(),
    })
}

/// An i32 field given as a JSON integer or a decimal string; `None` when absent or null.
fn int_field(value: &Option<Scalar<'_>>, name: &'static str) -> Result<Option<i32>, HeaderError> {
    let parsed = match value {
        None | Some(Scalar::Null) => return Ok(None),
        Some(Scalar::I64(v)) => i32::try_from(*v).ok(),
        Some(Scalar::U64(v)) => i32::try_from(*v).ok(),
        Some(Scalar::Str(s)) => s.parse::<i32>().ok(),
        Some(_) => None,
    };
    parsed
        .map(Some)
        .ok_or_else(|| invalid(name, "not a 32-bit integer"))
}

/// extFields in their string form. A later duplicate key replaces an earlier one (a null
/// removes it), as a JSON object read into a map does; a nested array or object under
/// any key refuses the header, naming the (alphabetically) first such key.
fn ext_fields(fields: Vec<(Cow<'_, str>, Scalar<'_>)>) -> Result<ExtFields, HeaderError> {
    let mut updates = Vec::with_capacity(fields.len());
    let mut nested: Option<Cow<'_, str>> = None;
    for (key, value) in fields {
        let text = match value {
            Scalar::Null => None,
            Scalar::Str(s) => Some(CompactString::from(s)),
            Scalar::I64(n) => Some(n.to_compact_string()),
            Scalar::U64(n) => Some(n.to_compact_string()),
            // Display, as before: compact_str's own float formatting spells some
            // values differently (and serde_json never hands us a non-finite one).
            Scalar::F64(f) => Some(match serde_json::Number::from_f64(f) {
                Some(n) => format_compact!("{n}"),
                None => format_compact!("{f}"),
            }),
            Scalar::Bool(b) => Some(b.to_compact_string()),
            Scalar::Nested => {
                if nested.as_ref().is_none_or(|first| key < *first) {
                    nested = Some(key);
                }
                continue;
            }
        };
        updates.push((CompactString::from(key), text));
    }
    if let Some(key) = nested {
        return Err(HeaderError::InvalidField {
            field: format!("extFields.{key}"),
            reason: "nested arrays and objects are not header values".into(),
        });
    }
    Ok(ExtFields::from_updates(updates))
}

/// One JSON value where a header field or extFields value is expected: scalars kept
/// (strings borrowed when they can be), arrays and objects skipped over.
enum Scalar<'a> {
    Null,
    Str(Cow<'a, str>),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Nested,
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::I64(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::U64(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::F64(v))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Nested)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Nested)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// An object key, borrowed unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// The `extFields` value: an object's entries in the order written, null, or anything else.
enum Ext<'a> {
    Null,
    Fields(Vec<(Cow<'a, str>, Scalar<'a>)>),
    /// The scanner's form: already the updates [`ext_fields`] would make of `Fields`.
    Updates(Vec<ExtUpdate>),
    Other,
}

/// One extFields entry in string form; `None` for a null value (which removes the key).
type ExtUpdate = (CompactString, Option<CompactString>);

impl<'de> Deserialize<'de> for Ext<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ext<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("extFields")
            }
            fn visit_unit<E>(self) -> Result<Ext<'de>, E> {
                Ok(Ext::Null)
            }
            fn visit_none<E>(self) -> Result<Ext<'de>, E> {
                Ok(Ext::Null)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Ext<'de>, E> {
                Ok(Ext::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Ext<'de>, E> {
                Ok(Ext::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Ext<'de>, E> {
                Ok(Ext::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Ext<'de>, E> {
                Ok(Ext::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Ext<'de>, E> {
                Ok(Ext::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ext<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Ext::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ext<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some((Key(key), value)) = map.next_entry::<Key, Scalar>()? {
                    fields.push((key, value));
                }
                Ok(Ext::Fields(fields))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// The header's own fields as written; unknown fields skipped.
#[derive(Default)]
struct Raw<'a> {
    code: Option<Scalar<'a>>,
    language: Option<Scalar<'a>>,
    version: Option<Scalar<'a>>,
    opaque: Option<Scalar<'a>>,
    flag: Option<Scalar<'a>>,
    remark: Option<Scalar<'a>>,
    ext_fields: Option<Ext<'a>>,
}

/// A direct scanner for the headers clients actually send: an object of known fields,
/// integers, strings (escapes included) and an extFields object of scalars. It answers
/// `None` for anything else (floats, `-0`, a non-object extFields, an array or object as
/// an extFields value, lone surrogates, deep nesting, any syntax error), and the caller
/// then runs the serde path, which decides
/// and words every error; so the scanner only has to be right about what it accepts.
mod fast {
    use std::borrow::Cow;

    use compact_str::{CompactString, ToCompactString};

    use super::{Ext, Raw, Scalar};

    /// Nesting skipped inside unknown values before giving up (serde_json allows 128).
    const MAX_DEPTH: usize = 64;

    /// Bytes that end a run of plain string content: `"`, `\\` and the control bytes.
    const STRING_STOP: [bool; 256] = {
        let mut stop = [false; 256];
        let mut byte = 0;
        while byte < 0x20 {
            stop[byte] = true;
            byte += 1;
        }
        stop[b'"' as usize] = true;
        stop[b'\\' as usize] = true;
        stop
    };

    /// How many bytes at the start of `bytes` are plain string content.
    ///
    /// Eight bytes at a time: the lowest byte [`stop_bytes`] flags is the first stop, so a
    /// string ends in the word that holds its quote without a second look at its bytes
    /// (most header strings are shorter than a word: one-letter keys, small numbers). Only
    /// the header's last few bytes go through [`STRING_STOP`] one at a time.
    pub(super) fn plain_run(bytes: &[u8]) -> usize {
        let mut at = 0;
        while let Some(word) = bytes.get(at..at + 8) {
            let stops = stop_bytes(u64::from_le_bytes(word.try_into().expect("eight bytes")));
            if stops != 0 {
                return at + (stops.trailing_zeros() / 8) as usize;
            }
            at += 8;
        }
        at + bytes[at..]
            .iter()
            .position(|&byte| STRING_STOP[usize::from(byte)])
            .unwrap_or(bytes.len() - at)
    }

    /// The high bit of each byte of `word` (read little-endian) that is a [`STRING_STOP`]
    /// byte, give or take bytes above the lowest one: the classic zero-byte and less-than
    /// tests never flag a byte below the first true match, nor a word without one, but a
    /// borrow out of a match may flag bytes above it.
    #[inline]
    fn stop_bytes(word: u64) -> u64 {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        let quote = zero_in(word ^ (ONES * u64::from(b'"')));
        let backslash = zero_in(word ^ (ONES * u64::from(b'\\')));
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
        quote | backslash | control
    }

    struct Scan<'a> {
        /// `text` as bytes, for the byte-at-a-time scanning.
        bytes: &'a [u8],
        /// The header, checked as UTF-8 once up front, so each string is a plain slice of
        /// it: its quotes are ASCII, hence char boundaries.
        text: &'a str,
        at: usize,
    }

    pub(super) fn parse(header: &[u8]) -> Option<Raw<'_>> {
        // Not UTF-8: serde reports where.
        let text = std::str::from_utf8(header).ok()?;
        let mut scan = Scan {
            bytes: header,
            text,
            at: 0,
        };
        let raw = scan.top()?;
        scan.ws();
        (scan.at == header.len()).then_some(raw)
    }

    impl<'a> Scan<'a> {
        fn peek(&self) -> Option<u8> {
            self.bytes.get(self.at).copied()
        }

        fn ws(&mut self) {
            while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
                self.at += 1;
            }
        }

        fn eat(&mut self, byte: u8) -> Option<()> {
            self.ws();
            (self.peek()? == byte).then(|| self.at += 1)
        }

        fn literal(&mut self, word: &[u8]) -> Option<()> {
            let end = self.at + word.len();
            (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
        }

        /// The members of an object whose `{` has been read, each handed to `member`
        /// right after its key and `:`.
        fn members(
            &mut self,
            mut member: impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>,
        ) -> Option<()> {
            self.ws();
            if self.peek()? == b'}' {
                self.at += 1;
                return Some(());
            }
            loop {
                self.ws();
                let key = self.string()?;
                self.eat(b':')?;
                self.ws();
                member(self, key)?;
                self.ws();
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        return Some(());
                    }
                    _ => return None,
                }
            }
        }

        fn top(&mut self) -> Option<Raw<'a>> {
            self.eat(b'{')?;
            let mut raw = Raw::default();
            self.members(|scan, key| {
                match key.as_ref() {
                    "code" => raw.code = Some(scan.scalar(0)?),
                    "language" => raw.language = Some(scan.scalar(0)?),
                    "version" => raw.version = Some(scan.scalar(0)?),
                    "opaque" => raw.opaque = Some(scan.scalar(0)?),
                    "flag" => raw.flag = Some(scan.scalar(0)?),
                    "remark" => raw.remark = Some(scan.scalar(0)?),
                    "extFields" => raw.ext_fields = Some(scan.ext()?),
                    _ => {
                        scan.scalar(0)?;
                    }
                }
                Some(())
            })?;
            Some(raw)
        }

        fn ext(&mut self) -> Option<Ext<'a>> {
            match self.peek()? {
                b'n' => self.literal(b"null").map(|()| Ext::Null),
                b'{' => {
                    self.at += 1;
                    let mut updates = Vec::with_capacity(16);
                    self.members(|scan, key| {
                        updates.push((CompactString::from(key), scan.ext_value()?));
                        Some(())
                    })?;
                    // The fields live as long as the request: an empty set keeps no
                    // allocation (768 bytes a request, for every request in flight).
                    if updates.is_empty() {
                        updates = Vec::new();
                    }
                    Some(Ext::Updates(updates))
                }
                _ => None,
            }
        }

        /// An extFields value in the string form `ext_fields` gives it. Arrays and objects
        /// answer `None`: the serde path words that refusal.
        fn ext_value(&mut self) -> Option<Option<CompactString>> {
            Some(match self.peek()? {
                b'"' => Some(CompactString::from(self.string()?)),
                b't' => self
                    .literal(b"true")
                    .map(|()| CompactString::const_new("true"))?
                    .into(),
                b'f' => self
                    .literal(b"false")
                    .map(|()| CompactString::const_new("false"))?
                    .into(),
                b'n' => self.literal(b"null").map(|()| None)?,
                b'-' | b'0'..=b'9' => match self.integer()? {
                    Scalar::U64(n) => Some(n.to_compact_string()),
                    Scalar::I64(n) => Some(n.to_compact_string()),
                    _ => return None,
                },
                _ => return None,
            })
        }

        /// Any value; arrays and objects are checked and skipped as `Nested`.
        fn scalar(&mut self, depth: usize) -> Option<Scalar<'a>> {
            match self.peek()? {
                b'"' => self.string().map(Scalar::Str),
                b't' => self.literal(b"true").map(|()| Scalar::Bool(true)),
                b'f' => self.literal(b"false").map(|()| Scalar::Bool(false)),
                b'n' => self.literal(b"null").map(|()| Scalar::Null),
                b'-' | b'0'..=b'9' => self.integer(),
                b'[' if depth < MAX_DEPTH => {
                    self.at += 1;
                    self.ws();
                    if self.peek()? == b']' {
                        self.at += 1;
                        return Some(Scalar::Nested);
                    }
                    loop {
                        self.ws();
                        self.scalar(depth + 1)?;
                        self.ws();
                        match self.peek()? {
                            b',' => self.at += 1,
                            b']' => {
                                self.at += 1;
                                return Some(Scalar::Nested);
                            }
                            _ => return None,
                        }
                    }
                }
                b'{' if depth < MAX_DEPTH => {
                    self.at += 1;
                    self.members(|scan, _| scan.scalar(depth + 1).map(drop))?;
                    Some(Scalar::Nested)
                }
                _ => None,
            }
        }

        /// A JSON integer (no fraction or exponent; those go to serde), as serde_json
        /// hands it over: `U64` when non-negative, `I64` when negative.
        fn integer(&mut self) -> Option<Scalar<'a>> {
            let negative = self.peek()? == b'-';
            if negative {
                self.at += 1;
            }
            let start = self.at;
            let mut value: u64 = 0;
            while let Some(digit @ b'0'..=b'9') = self.peek() {
                value = value
                    .checked_mul(10)?
                    .checked_add(u64::from(digit - b'0'))?;
                self.at += 1;
            }
            let digits = self.at - start;
            if digits == 0 || (digits > 1 && self.bytes[start] == b'0') {
                return None;
            }
            if let Some(b'.' | b'e' | b'E') = self.peek() {
                return None;
            }
            if !negative {
                return Some(Scalar::U64(value));
            }
            if value == 0 {
                return None; // serde_json reads -0 as a float
            }
            let magnitude = i64::try_from(value - 1).ok()?;
            Some(Scalar::I64(-magnitude - 1))
        }

        /// A string literal: borrowed when it has no escapes.
        fn string(&mut self) -> Option<Cow<'a, str>> {
            if self.peek()? != b'"' {
                return None;
            }
            self.at += 1;
            let start = self.at;
            self.at += plain_run(&self.bytes[start..]);
            if *self.bytes.get(self.at)? == b'"' {
                let text = self.text.get(start..self.at)?;
                self.at += 1;
                return Some(Cow::Borrowed(text));
            }
            // The unescaped text is no longer than what is left of the header. One
            // allocation holds a send's properties (`\u0001` escapes in every send),
            // capped so that many escaped strings in a big header do not each take the
            // rest of it.
            let mut out: Vec<u8> = Vec::with_capacity((self.bytes.len() - start).min(512));
            out.extend_from_slice(&self.bytes[start..self.at]);
            loop {
                // Copy the unescaped run up to the next quote, backslash or control byte.
                let run = plain_run(&self.bytes[self.at..]);
                out.extend_from_slice(&self.bytes[self.at..self.at + run]);
                self.at += run;
                match *self.bytes.get(self.at)? {
                    b'"' => {
                        self.at += 1;
                        return String::from_utf8(out).ok().map(Cow::Owned);
                    }
                    b'\\' => {
                        let escaped = *self.bytes.get(self.at + 1)?;
                        self.at += 2;
                        match escaped {
                            b'"' | b'\\' | b'/' => out.push(escaped),
                            b'b' => out.push(0x08),
                            b'f' => out.push(0x0C),
                            b'n' => out.push(b'\n'),
                            b'r' => out.push(b'\r'),
                            b't' => out.push(b'\t'),
                            b'u' => {
                                let unit = self.hex4()?;
                                let code = match unit {
                                    0xD800..=0xDBFF => {
                                        self.literal(b"\\u")?;
                                        let low = self.hex4()?;
                                        if !(0xDC00..=0xDFFF).contains(&low) {
                                            return None;
                                        }
                                        0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                                    }
                                    0xDC00..=0xDFFF => return None,
                                    _ => unit,
                                };
                                let c = char::from_u32(code)?;
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                            }
                            _ => return None,
                        }
                    }
                    // A raw control byte: JSON does not allow one in a string.
                    _ => return None,
                }
            }
        }

        fn hex4(&mut self) -> Option<u32> {
            let digits = self.bytes.get(self.at..self.at + 4)?;
            let mut value = 0u32;
            for &digit in digits {
                value = value * 16 + char::from(digit).to_digit(16)?;
            }
            self.at += 4;
            Some(value)
        }
    }
}

/// The whole header: an object, or any other JSON value (refused by the caller).
enum Top<'a> {
    Object(Raw<'a>),
    NotAnObject,
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON header")
            }
            fn visit_unit<E>(self) -> Result<Top<'de>, E> {
                Ok(Top::NotAnObject)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Top<'de>, E> {
                Ok(Top::NotAnObject)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Top<'de>, E> {
                Ok(Top::NotAnObject)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Top<'de>, E> {
                Ok(Top::NotAnObject)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Top<'de>, E> {
                Ok(Top::NotAnObject)
            }
            fn visit_str<E>(self, _: &str) -> Result<Top<'de>, E> {
                Ok(Top::NotAnObject)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Top::NotAnObject)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
                let mut raw = Raw::default();
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    match key.as_ref() {
                        "code" => raw.code = Some(map.next_value()?),
                        "language" => raw.language = Some(map.next_value()?),
                        "version" => raw.version = Some(map.next_value()?),
                        "opaque" => raw.opaque = Some(map.next_value()?),
                        "flag" => raw.flag = Some(map.next_value()?),
                        "remark" => raw.remark = Some(map.next_value()?),
                        "extFields" => raw.ext_fields = Some(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Top::Object(raw))
            }
        }
        deserializer.deserialize_any(V)
    }
}

fn invalid(field: &str, reason: &str) -> HeaderError {
    HeaderError::InvalidField {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_str(s: &str) -> Result<RemotingCommand, HeaderError> {
        decode(s.as_bytes())
    }

    #[test]
    fn a_plain_run_stops_at_the_first_stop_byte_wherever_it_falls() {
        let reference = |bytes: &[u8]| {
            bytes
                .iter()
                .position(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\')
                .unwrap_or(bytes.len())
        };
        // Every stop byte, and near misses on both sides of each, at every position of a
        // run longer than two words, with content bytes of all kinds (UTF-8's high ones).
        let stops = [b'"', b'\\', 0x00, 0x01, 0x1F];
        let near = [b'!', b'#', b'[', b']', 0x20, 0x7F, 0x80, 0xC3, 0xFF];
        for len in 0..=24 {
            for stop in stops.iter().chain(&near) {
                for at in 0..len {
                    let mut bytes: Vec<u8> = (0..len).map(|i| near[i % near.len()]).collect();
                    bytes[at] = *stop;
                    assert_eq!(
                        fast::plain_run(&bytes),
                        reference(&bytes),
                        "byte {stop:#04x} at {at} of {len}: {bytes:?}"
                    );
                }
            }
        }
        // Several stops in a word, each followed by the byte whose borrow would flag it
        // falsely (`#` after a quote, `]` after a backslash, a space after 0x1F): the
        // first stop must still win. Seeded, so a failure repeats.
        let alphabet: Vec<u8> = stops.iter().chain(&near).copied().collect();
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        for case in 0..20_000 {
            let len = (case % 20) + 1;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(fast::plain_run(&bytes), reference(&bytes), "{bytes:?}");
        }
    }

    #[test]
    fn encodes_fastjson_order_with_serialize_type() {
        let mut cmd = RemotingCommand::request(310, ExtFields::new());
        cmd.opaque = 5;
        cmd.put_ext("b", "TopicA");
        cmd.put_ext("a", "pg");
        let mut out = Vec::new();
        encode(&cmd, &mut out).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"code":310,"extFields":{"a":"pg","b":"TopicA"},"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}"#
        );
    }

    #[test]
    fn encoding_matches_serde_json() {
        let mut cmd = RemotingCommand::request(i32::MIN, ExtFields::new());
        cmd.opaque = -1;
        cmd.flag = i32::MAX;
        cmd.version = 0;
        cmd.language = "GO".into();
        let nasty: String = (0u8..0x80)
            .map(char::from)
            .chain("é\u{2028}€😀".chars())
            .collect();
        cmd.put_ext(&nasty, &nasty);
        cmd.put_ext("properties", "UNIQ_KEY\u{1}abc\u{2}TAGS\u{1}t\u{2}");
        cmd.remark = Some(format!("quote\" and {nasty}"));
        let mut out = Vec::new();
        encode(&cmd, &mut out).unwrap();
        let expected = serde_json::json!({
            "code": cmd.code,
            "extFields": cmd.ext_fields,
            "flag": cmd.flag,
            "language": cmd.language.as_str(),
            "opaque": cmd.opaque,
            "remark": cmd.remark,
            "serializeTypeCurrentRPC": "JSON",
            "version": cmd.version,
        });
        // serde_json's Map is ordered like fastjson's output here (alphabetical keys).
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            expected.to_string()
        );
        assert_eq!(decode(&out).unwrap(), cmd);
    }

    #[test]
    fn decodes_minimal_and_tolerates_unknown_fields() {
        let cmd =
            decode_str(r#"{"code":34,"whatever":[1,2],"serializeTypeCurrentRPC":"JSON"}"#).unwrap();
        assert_eq!(cmd.code, 34);
        assert_eq!(cmd.language, "JAVA");
        assert_eq!((cmd.version, cmd.opaque, cmd.flag), (0, 0, 0));
        assert!(cmd.remark.is_none() && cmd.ext_fields.is_empty());
    }

    #[test]
    fn ext_field_scalars_become_strings() {
        let cmd = decode_str(
            r#"{"code":"11","flag":2,"remark":null,"extFields":{"queueId":3,"commitOffset":-1,"unitMode":true,"gone":null,"s":"x"}}"#,
        )
        .unwrap();
        assert_eq!(cmd.code, 11);
        assert!(cmd.is_oneway());
        assert_eq!(&cmd.ext_fields["queueId"], "3");
        assert_eq!(&cmd.ext_fields["commitOffset"], "-1");
        assert_eq!(&cmd.ext_fields["unitMode"], "true");
        assert_eq!(&cmd.ext_fields["s"], "x");
        assert!(!cmd.ext_fields.contains_key("gone"));
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_control: String = (0u8..0x20).map(char::from).collect();
        let texts = [
            String::new(),
            "plain text longer than one word".to_string(),
            every_control.clone(),
            format!("a{every_control}b\"quoted\" back\\slash é 😀 \u{7f}"),
            "UNIQ_KEY\u{1}7F000001\u{2}KEYS\u{1}k 1\u{2}".repeat(5),
            "\"\\\n".repeat(9),
        ];
        for text in texts {
            let mut out = Vec::new();
            push_str(&mut out, &text);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&text).unwrap(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn escapes_duplicates_and_skipped_values() {
        let cmd = decode_str(
            r#" { "unknown" : {"a":[1,{"b":null}]}, "code" : 10 , "remark":"a\"b\u00e9",
               "extFields":{"k\u0031":"v\n","dup":"1","dup":"2","gone":"x","gone":null,"f":1.5},
               "opaque":"-7","extra":[[]] } "#,
        )
        .unwrap();
        assert_eq!(cmd.code, 10);
        assert_eq!(cmd.opaque, -7);
        assert_eq!(cmd.remark.as_deref(), Some("a\"b\u{e9}"));
        assert_eq!(&cmd.ext_fields["k1"], "v\n");
        assert_eq!(&cmd.ext_fields["dup"], "2");
        assert_eq!(&cmd.ext_fields["f"], "1.5");
        assert!(!cmd.ext_fields.contains_key("gone"));
        assert_eq!(decode_str("5"), Err(HeaderError::NotAnObject));
        assert_eq!(decode_str("null"), Err(HeaderError::NotAnObject));
        assert!(matches!(
            decode_str(r#"{"code":1} x"#),
            Err(HeaderError::Json(_))
        ));
        assert!(matches!(
            decode_str(r#"{"code":1,"extFields":[]}"#),
            Err(HeaderError::InvalidField { field, .. }) if field == "extFields"
        ));
        assert!(matches!(
            decode_str(r#"{"code":1,"language":-1}"#),
            Err(HeaderError::InvalidField { field, .. }) if field == "language"
        ));
        assert!(matches!(
            decode_str(r#"{"code":1.0}"#),
            Err(HeaderError::InvalidField { field, .. }) if field == "code"
        ));
    }

    #[test]
    fn scanner_agrees_with_serde() {
        let cases: &[&str] = &[
            r#"{"code":310,"extFields":{"a":"pg","b":"TopicA","i":"UNIQ_KEY\u0001x\u0002","e":"-1"},"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}"#,
            r#"{ "code" : "11" , "flag" : 2 , "extFields" : { "q" : 3 , "n" : -9223372036854775808 , "b" : false , "z" : null } }"#,
            r#"{"code":1,"remark":"\ud83d\ude00 \u00e9 \/ \b\f\n\r\t \"q\" \\","language":9}"#,
            r#"{"code":1,"x":{"a":[1,2,{"b":[]}],"c":"\u0041"},"y":[],"z":{}}"#,
            r#"{"code":1,"extFields":{"k":[1]}}"#,
            r#"{"code":1,"extFields":{"b":"1","a":"x","b":null,"a":"y","t":true,"c":{}}}"#,
            r#"{"code":1,"extFields":{"b":"1","a":"x","b":null,"a":"y","t":true,"f":false}}"#,
            r#"{"code":1,"extFields":{"f":1.5,"e":2e3}}"#,
            r#"{"code":1,"extFields":{"p":"run\\one\u0001two\u0002\"three\"/end","q":"\n"}}"#,
            r#"{"code":4294967296}"#,
            r#"{"code":18446744073709551615}"#,
            r#"{"code":18446744073709551616}"#,
            r#"{"code":-0}"#,
            r#"{"code":1.5}"#,
            r#"{"code":01}"#,
            r#"{"code":1,}"#,
            r#"{"code":1"#,
            r#"{"code":1} {"#,
            r#"{"code":1,"remark":"\ud800"}"#,
            r#"{"code":1,"remark":"\udc00x"}"#,
            r#"{"code":1,"remark":"tab	in"}"#,
            r#"{"code":1,"remark":"\x"}"#,
            r#"{"code":1,"extFields":"no"}"#,
            r#"{"code":1,"extFields":null,"language":null,"remark":null}"#,
            r#"{}"#,
            r#"[1]"#,
            r#"{"code":1,"a":tru}"#,
            r#"{"code":1,"a":nul}"#,
            r#"{"code":1,"a":[1,]}"#,
            "{\"code\":1,\"remark\":\"caf\u{e9}\"}",
        ];
        for case in cases {
            let fast = decode_with(case.as_bytes(), true);
            let serde = decode_with(case.as_bytes(), false);
            assert_eq!(fast, serde, "{case}");
        }
        // Invalid UTF-8 inside a string.
        let bytes = b"{\"code\":1,\"remark\":\"\xff\"}";
        assert!(matches!(decode(bytes), Err(HeaderError::Json(_))));
        assert!(fast::parse(bytes).is_none());
        // The common shapes do take the scanner.
        assert!(fast::parse(cases[0].as_bytes()).is_some());
        assert!(fast::parse(cases[1].as_bytes()).is_some());
        assert!(fast::parse(cases[2].as_bytes()).is_some());
        assert!(fast::parse(cases[3].as_bytes()).is_some());
        let with = |text: &str| cases.iter().position(|case| case.contains(text)).unwrap();
        assert!(fast::parse(cases[with(r#""f":false"#)].as_bytes()).is_some());
        assert!(fast::parse(cases[with("run")].as_bytes()).is_some());
    }

    #[test]
    fn numeric_language_maps_through_the_table() {
        assert_eq!(
            decode_str(r#"{"code":1,"language":9}"#).unwrap().language,
            "GO"
        );
        assert_eq!(
            decode_str(r#"{"code":1,"language":99}"#).unwrap().language,
            "99"
        );
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(matches!(decode_str("{"), Err(HeaderError::Json(_))));
        assert!(matches!(decode_str(""), Err(HeaderError::Json(_))));
        assert_eq!(decode_str("[1]"), Err(HeaderError::NotAnObject));
        assert_eq!(
            decode_str(r#"{"opaque":1}"#),
            Err(HeaderError::MissingField("code"))
        );
        assert!(matches!(
            decode_str(r#"{"code":4294967296}"#),
            Err(HeaderError::InvalidField { field, .. }) if field == "code"
        ));
        assert!(matches!(
            decode_str(r#"{"code":1,"extFields":{"k":[1]}}"#),
            Err(HeaderError::InvalidField { field, .. }) if field == "extFields.k"
        ));
        assert!(matches!(
            decode_str(r#"{"code":1,"remark":5}"#),
            Err(HeaderError::InvalidField { field, .. }) if field == "remark"
        ));
    }
}
