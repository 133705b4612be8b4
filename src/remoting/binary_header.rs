//! The ROCKETMQ binary header (serialize type 1, Java's `RocketMQSerializable`,
//! reference §8.4). Big-endian throughout.
//!
//! ```text
//! offset  size  field
//!      0     2  code         i16 (codes above 32767, the POP family, do not fit)
//!      2     1  language     LanguageCode byte (JAVA 0 ... RUST 12, NODE_JS 13)
//!      3     2  version      i16
//!      5     4  opaque       i32
//!      9     4  flag         i32
//!     13     4  remark len R i32; 0 means no remark
//!     17     R  remark       UTF-8
//!   17+R     4  ext len E    i32: byte length of the whole map block; 0 means empty
//!   21+R     E  entries      repeated: key len i16 | key | value len i32 | value
//!
//! header length = 21 + R + E
//! ```
//!
//! Decoding bounds-checks every length against the bytes actually present and never
//! panics. It is stricter than Java in three places, each of which only a broken peer
//! could trigger: negative lengths are errors (Java reads them as "absent"), map entries
//! must end exactly at the block's end, and bytes after the map block are rejected
//! (Java ignores them).
//!
//! Encoding refuses, rather than truncating as Java's `(short)` cast does, a code or
//! version outside i16: a silently wrapped request code would be answered as some other
//! request. A language name outside the table is written as `OTHER`, except decimal
//! digits, which are the code of a language we did not know when decoding.

use compact_str::{CompactString, ToCompactString};

use super::command::{
    language_code, language_name, ExtFields, HeaderError, RemotingCommand, SerializeType,
    LANGUAGE_CODE_OTHER,
};

/// Bytes of the fixed fields plus the two length words.
pub const FIXED_LEN: usize = 2 + 1 + 2 + 4 + 4 + 4 + 4;

/// The byte length `encode` will append, or why `cmd` cannot be encoded.
pub fn encoded_len(cmd: &RemotingCommand) -> Result<usize, HeaderError> {
    i16::try_from(cmd.code).map_err(|_| HeaderError::OutOfRange {
        field: "code",
        value: cmd.code,
        bits: 16,
    })?;
    i16::try_from(cmd.version).map_err(|_| HeaderError::OutOfRange {
        field: "version",
        value: cmd.version,
        bits: 16,
    })?;
    let remark_len = cmd.remark.as_ref().map_or(0, String::len);
    check_len("remark", remark_len, i32::MAX as usize)?;
    let ext_len = ext_block_len(&cmd.ext_fields)?;
    Ok(FIXED_LEN + remark_len + ext_len)
}

fn ext_block_len(fields: &ExtFields) -> Result<usize, HeaderError> {
    let mut total = 0usize;
    for (key, value) in fields {
        check_len("extFields key", key.len(), i16::MAX as usize)?;
        check_len("extFields value", value.len(), i32::MAX as usize)?;
        total = total.saturating_add(2 + key.len() + 4 + value.len());
    }
    check_len("extFields", total, i32::MAX as usize)?;
    Ok(total)
}

fn check_len(field: &'static str, len: usize, max: usize) -> Result<(), HeaderError> {
    if len > max {
        return Err(HeaderError::TooLong { field, len, max });
    }
    Ok(())
}

/// The language byte for a name; see the module doc for names outside the table.
fn language_byte(name: &str) -> u8 {
    language_code(name)
        .or_else(|| name.parse::<u8>().ok())
        .unwrap_or(LANGUAGE_CODE_OTHER)
}

/// Appends `cmd`'s binary header (not its body) to `out`; appends nothing on error.
pub fn encode(cmd: &RemotingCommand, out: &mut Vec<u8>) -> Result<(), HeaderError> {
    // Validate everything first so a failure leaves `out` untouched.
    let len = encoded_len(cmd)?;
    out.reserve(len);
    out.extend_from_slice(&(cmd.code as i16).to_be_bytes());
    out.push(language_byte(&cmd.language));
    out.extend_from_slice(&(cmd.version as i16).to_be_bytes());
    out.extend_from_slice(&cmd.opaque.to_be_bytes());
    out.extend_from_slice(&cmd.flag.to_be_bytes());
    let remark = cmd.remark.as_deref().unwrap_or("");
    out.extend_from_slice(&(remark.len() as i32).to_be_bytes());
    out.extend_from_slice(remark.as_bytes());
    let ext_len = len - FIXED_LEN - remark.len();
    out.extend_from_slice(&(ext_len as i32).to_be_bytes());
    for (key, value) in &cmd.ext_fields {
        out.extend_from_slice(&(key.len() as i16).to_be_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&(value.len() as i32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    Ok(())
}

/// A bounds-checked big-endian reader whose errors name the field being read.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], HeaderError> {
        if n > self.buf.len() {
            return Err(HeaderError::Truncated {
                field,
                needed: n,
                available: self.buf.len(),
            });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], HeaderError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(field, N)?);
        Ok(a)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, HeaderError> {
        self.array(field).map(i16::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, HeaderError> {
        self.array(field).map(i32::from_be_bytes)
    }

    /// A length word that must not be negative.
    fn len_i32(&mut self, field: &'static str) -> Result<usize, HeaderError> {
        let len = self.i32(field)?;
        usize::try_from(len).map_err(|_| HeaderError::NegativeLength { field, len })
    }

    fn len_i16(&mut self, field: &'static str) -> Result<usize, HeaderError> {
        let len = self.i16(field)?;
        usize::try_from(len).map_err(|_| HeaderError::NegativeLength {
            field,
            len: len.into(),
        })
    }

    fn string(&mut self, field: &'static str, len: usize) -> Result<&'a str, HeaderError> {
        let bytes = self.take(field, len)?;
        std::str::from_utf8(bytes).map_err(|_| HeaderError::BadUtf8(field))
    }
}

/// Decodes a binary header into a command with [`SerializeType::RocketMq`] and an empty
/// body. Codes are sign-extended from i16, as Java's `getShort()` does.
pub fn decode(header: &[u8]) -> Result<RemotingCommand, HeaderError> {
    let mut r = Reader { buf: header };
    let code = r.i16("code")?.into();
    let [language] = r.array::<1>("language")?;
    let language = language_name(language)
        .map_or_else(|| language.to_compact_string(), CompactString::const_new);
    let version = r.i16("version")?.into();
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let remark_len = r.len_i32("remark length")?;
    let remark = match remark_len {
        0 => None,
        n => Some(r.string("remark", n)?.to_owned()),
    };
    let ext_len = r.len_i32("extFields length")?;
    let mut block = Reader {
        buf: r.take("extFields", ext_len)?,
    };
    // Each entry takes at least 6 bytes; the cap keeps a hostile length from reserving
    // much more than the header itself.
    let mut updates = Vec::with_capacity((ext_len / 6).min(32));
    while !block.buf.is_empty() {
        let key_len = block.len_i16("extFields key length")?;
        let key = block.string("extFields key", key_len)?;
        let value_len = block.len_i32("extFields value length")?;
        let value = block.string("extFields value", value_len)?;
        updates.push((CompactString::from(key), Some(CompactString::from(value))));
    }
    // A repeated key keeps the later value, as Java's HashMap.put does.
    let ext_fields = ExtFields::from_updates(updates);
    if !r.buf.is_empty() {
        return Err(HeaderError::TrailingBytes(r.buf.len()));
    }
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        serialize_type: SerializeType::RocketMq,
        body: Default::default(),
        file_body: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RemotingCommand {
        let mut cmd = RemotingCommand::request(10, ExtFields::new());
        cmd.serialize_type = SerializeType::RocketMq;
        cmd.opaque = 7;
        cmd.remark = Some("hi".into());
        cmd.put_ext("a", "b");
        cmd
    }

    #[test]
    fn golden_bytes() {
        let mut out = Vec::new();
        encode(&sample(), &mut out).unwrap();
        #[rustfmt::skip]
        let expected = [
            0x00, 0x0A,             // code 10
            0x00,                   // JAVA
            0x01, 0xDF,             // version 479
            0, 0, 0, 7,             // opaque
            0, 0, 0, 0,             // flag
            0, 0, 0, 2, b'h', b'i', // remark
            0, 0, 0, 8,             // ext block length
            0, 1, b'a', 0, 0, 0, 1, b'b',
        ];
        assert_eq!(out, expected);
        assert_eq!(encoded_len(&sample()), Ok(expected.len()));
        assert_eq!(decode(&out), Ok(sample()));
    }

    #[test]
    fn unknown_language_keeps_its_number() {
        let mut out = Vec::new();
        encode(&sample(), &mut out).unwrap();
        out[2] = 42;
        let cmd = decode(&out).unwrap();
        assert_eq!(cmd.language, "42");
        let mut again = Vec::new();
        encode(&cmd, &mut again).unwrap();
        assert_eq!(again, out);
        let mut other = sample();
        other.language = "COBOL".into();
        again.clear();
        encode(&other, &mut again).unwrap();
        assert_eq!(again[2], LANGUAGE_CODE_OTHER);
    }

    #[test]
    fn refuses_codes_outside_i16() {
        let mut cmd = sample();
        cmd.code = 200_050;
        let mut out = vec![9];
        assert_eq!(
            encode(&cmd, &mut out),
            Err(HeaderError::OutOfRange {
                field: "code",
                value: 200_050,
                bits: 16
            })
        );
        assert_eq!(out, [9], "nothing appended on error");
    }

    #[test]
    fn sign_extends_code() {
        let mut out = Vec::new();
        encode(&sample(), &mut out).unwrap();
        out[0] = 0xFF;
        out[1] = 0xFE;
        assert_eq!(decode(&out).unwrap().code, -2);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut out = Vec::new();
        encode(&sample(), &mut out).unwrap();
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(
            decode(&out[..3]),
            Err(HeaderError::Truncated {
                field: "version",
                needed: 2,
                available: 0
            })
        );
    }

    #[test]
    fn bad_lengths() {
        let mut out = Vec::new();
        encode(&sample(), &mut out).unwrap();
        let mut neg = out.clone();
        neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            decode(&neg),
            Err(HeaderError::NegativeLength {
                field: "remark length",
                len: -1
            })
        );
        let mut huge = out.clone();
        huge[19..23].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&huge),
            Err(HeaderError::Truncated {
                field: "extFields",
                ..
            })
        ));
        // An entry that claims more than its block holds.
        let mut entry = out.clone();
        entry[23..25].copy_from_slice(&100i16.to_be_bytes());
        assert!(matches!(
            decode(&entry),
            Err(HeaderError::Truncated {
                field: "extFields key",
                ..
            })
        ));
        let mut trailing = out.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), Err(HeaderError::TrailingBytes(1)));
        let mut utf8 = out;
        utf8[17] = 0xFF;
        assert_eq!(decode(&utf8), Err(HeaderError::BadUtf8("remark")));
    }

    #[test]
    fn empty_remark_reads_back_as_none() {
        let mut cmd = sample();
        cmd.remark = Some(String::new());
        cmd.ext_fields.clear();
        let mut out = Vec::new();
        encode(&cmd, &mut out).unwrap();
        assert_eq!(out.len(), FIXED_LEN);
        let back = decode(&out).unwrap();
        assert_eq!(back.remark, None);
        assert!(back.ext_fields.is_empty());
    }
}
