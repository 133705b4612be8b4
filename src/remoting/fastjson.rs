//! A reader for the JSON bodies RocketMQ brokers and name servers send, which are not
//! always JSON: fastjson writes a map whose keys are objects with the object itself as the
//! key (`{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}`, the offset tables of
//! GET_TOPIC_STATS_INFO, GET_CONSUME_STATS and INVOKE_BROKER_TO_RESET_OFFSET) and integer
//! keys unquoted (`{"brokerAddrs":{0:"10.0.0.1:10911"}}`, GET_BROKER_CLUSTER_INFO).
//!
//! [`parse`] accepts standard JSON plus those two forms and returns a [`serde_json::Value`].
//! A key that is an object or array becomes a string key: that value written back as
//! compact JSON (its own keys sorted), so a key sent as a JSON string containing the
//! object (`{"{\"brokerName\":\"b\",...}":{...}}`) and a key sent as the object itself
//! read the same through [`parse_key`]. An unquoted key is taken as written.
//!
//! Invariants: never panics and never recurses deeper than [`MAX_DEPTH`], whatever the
//! input; rejects trailing bytes after the document. A key written back from an object
//! or array is at most [`MAX_KEY_LEN`] bytes: each level of object keys nested in object
//! keys escapes the one inside again, so without a cap a short document of keys nested a
//! few dozen deep would grow without bound (about doubling per level).

use serde_json::{Map, Number, Value};

/// Deepest nesting accepted; bodies from a node are a few levels deep.
pub const MAX_DEPTH: usize = 64;

/// Longest key an object or array key becomes (a message queue key is under 100 bytes).
pub const MAX_KEY_LEN: usize = 16 * 1024;

/// Why a body is not readable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad JSON at byte {at}: {what}")]
pub struct ParseError {
    pub at: usize,
    pub what: String,
}

/// Parses a body in standard or fastjson form (see the module docs).
pub fn parse(text: &[u8]) -> Result<Value, ParseError> {
    let mut parser = Parser { text, at: 0 };
    let value = parser.value(0)?;
    parser.skip_space();
    if parser.at != text.len() {
        return Err(parser.error("trailing bytes after the document"));
    }
    Ok(value)
}

/// A map key as a value: the JSON it holds if it is an object or array written as text
/// (either fastjson form), else the key as a string.
pub fn parse_key(key: &str) -> Value {
    let trimmed = key.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        if let Ok(value) = parse(key.as_bytes()) {
            return value;
        }
    }
    Value::String(key.to_owned())
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn error(&self, what: impl Into<String>) -> ParseError {
        ParseError {
            at: self.at,
            what: what.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ParseError> {
        self.skip_space();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected `{}`", byte as char)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.error(format!("nested deeper than {MAX_DEPTH}")));
        }
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.word("true", Value::Bool(true)),
            Some(b'f') => self.word("false", Value::Bool(false)),
            Some(b'n') => self.word("null", Value::Null),
            Some(other) => Err(self.error(format!("unexpected `{}`", other.escape_ascii()))),
            None => Err(self.error("unexpected end")),
        }
    }

    fn word(&mut self, word: &str, value: Value) -> Result<Value, ParseError> {
        if self.text[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error(format!("expected `{word}`")))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.at += 1;
        let mut map = Map::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(map));
        }
        loop {
            let key = self.key(depth)?;
            self.expect(b':')?;
            let value = self.value(depth + 1)?;
            map.insert(key, value);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.error("expected `,` or `}` in an object")),
            }
        }
    }

    /// A key: a string, an object or array (fastjson's object keys), or an unquoted word
    /// (fastjson's integer keys).
    fn key(&mut self, depth: usize) -> Result<String, ParseError> {
        self.skip_space();
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'{' | b'[') => {
                let key = self.value(depth + 1)?.to_string();
                if key.len() > MAX_KEY_LEN {
                    return Err(self.error(format!(
                        "an object key longer than {MAX_KEY_LEN} bytes as JSON"
                    )));
                }
                Ok(key)
            }
            Some(byte) if byte == b'-' || byte == b'_' || byte.is_ascii_alphanumeric() => {
                let start = self.at;
                while matches!(self.peek(), Some(b) if b == b'-' || b == b'_' || b == b'.' || b.is_ascii_alphanumeric())
                {
                    self.at += 1;
                }
                Ok(String::from_utf8_lossy(&self.text[start..self.at]).into_owned())
            }
            _ => Err(self.error("expected an object key")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.at += 1;
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.error("expected `,` or `]` in an array")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.text[start..self.at]).unwrap_or("");
        if let Ok(integer) = text.parse::<i64>() {
            return Ok(Value::Number(integer.into()));
        }
        if let Ok(integer) = text.parse::<u64>() {
            return Ok(Value::Number(integer.into()));
        }
        text.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| ParseError {
                at: start,
                what: format!("bad number {text:?}"),
            })
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error("unterminated string"));
            };
            self.at += 1;
            match byte {
                b'"' => break,
                b'\\' => {
                    let Some(escape) = self.peek() else {
                        return Err(self.error("unterminated string"));
                    };
                    self.at += 1;
                    match escape {
                        b'"' | b'\\' | b'/' => out.push(escape),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let c = self.unicode_escape()?;
                            let mut buf = [0; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        other => {
                            return Err(
                                self.error(format!("bad escape `\\{}`", other.escape_ascii()))
                            )
                        }
                    }
                }
                _ => out.push(byte),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("a string is not valid UTF-8"))
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("bad \\u escape"))?;
        self.at += 4;
        Ok(digits)
    }

    /// The character of a `\uXXXX` escape (a surrogate pair takes two); a lone surrogate
    /// becomes U+FFFD, as lenient readers do.
    fn unicode_escape(&mut self) -> Result<char, ParseError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.text[self.at..].starts_with(b"\\u") {
            let save = self.at;
            self.at += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                return Ok(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            self.at = save;
        }
        Ok(char::from_u32(first).unwrap_or('\u{FFFD}'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn standard_json_reads_as_serde_does() {
        let text = r#"{"a":[1,-2,3.5,"x\n\u00e9\ud83d\ude00"],"b":{"c":null,"d":true,"e":false},"big":18446744073709551615}"#;
        let expected: Value = serde_json::from_str(text).unwrap();
        assert_eq!(parse(text.as_bytes()).unwrap(), expected);
        assert_eq!(parse(b" [ ] ").unwrap(), json!([]));
        assert_eq!(parse(b"{ }").unwrap(), json!({}));
    }

    #[test]
    fn object_keys_in_both_forms_read_the_same() {
        let as_object = br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:{"minOffset":0,"maxOffset":5}}}"#;
        let as_string = br#"{"offsetTable":{"{\"topic\":\"t\",\"brokerName\":\"b\",\"queueId\":1}":{"minOffset":0,"maxOffset":5}}}"#;
        for text in [&as_object[..], &as_string[..]] {
            let value = parse(text).unwrap();
            let table = value["offsetTable"].as_object().unwrap();
            assert_eq!(table.len(), 1);
            let (key, entry) = table.iter().next().unwrap();
            assert_eq!(
                parse_key(key),
                json!({"brokerName":"b","queueId":1,"topic":"t"})
            );
            assert_eq!(entry["maxOffset"], 5);
        }
    }

    #[test]
    fn unquoted_integer_keys_are_strings() {
        let value = parse(br#"{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}"#).unwrap();
        assert_eq!(value["brokerAddrs"]["0"], "10.0.0.1:10911");
        assert_eq!(value["brokerAddrs"]["1"], "10.0.0.2:10911");
        assert_eq!(parse_key("plain"), json!("plain"));
        assert_eq!(parse_key("{not json"), json!("{not json"));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for text in [
            &b""[..],
            b"{",
            b"{\"a\"",
            b"{\"a\":}",
            b"[1,]",
            b"\"abc",
            b"\"\\q\"",
            b"\"\\u12\"",
            b"{} x",
            b"tru",
            b"-",
            b"\xff",
            b"{:1}",
        ] {
            assert!(
                parse(text).is_err(),
                "{:?}",
                text.escape_ascii().to_string()
            );
        }
    }

    #[test]
    fn complete_documents_nested_past_the_limit_are_refused_for_their_depth() {
        // Complete, well-formed documents: only the depth limit can refuse them.
        let arrays = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let objects = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
        // fastjson's object keys: {{{"a":1}:1}:1}
        let keys =
            |n: usize| (1..n).fold(r#"{"a":1}"#.to_owned(), |inner, _| format!("{{{inner}:1}}"));
        for (what, doc) in [
            ("arrays", &arrays as &dyn Fn(usize) -> String),
            ("objects", &objects),
            ("object keys", &keys),
        ] {
            if what != "object keys" {
                assert!(
                    parse(doc(MAX_DEPTH).as_bytes()).is_ok(),
                    "{what} {MAX_DEPTH} deep"
                );
            }
            let error = parse(doc(MAX_DEPTH + 2).as_bytes()).unwrap_err();
            assert!(
                error.what.contains(&format!("deeper than {MAX_DEPTH}")),
                "{what}: {error:?}"
            );
        }
        // Object keys nested in object keys: a few levels read, and within the depth limit
        // the escaping that grows with each level is cut off by the key length, not memory.
        let three = parse(keys(3).as_bytes()).unwrap();
        assert_eq!(three.as_object().unwrap().len(), 1);
        let error = parse(keys(MAX_DEPTH).as_bytes()).unwrap_err();
        assert!(error.what.contains("longer than"), "{error:?}");
    }

    #[test]
    fn seeded_garbage_never_panics() {
        let mut rng = crate::rng::SplitMix64::new(7);
        let alphabet = br#"{}[]:,"\0123456789-.eEtruefalsn u{"#;
        for _ in 0..5_000 {
            let len = (rng.next_u64() % 40) as usize;
            let text: Vec<u8> = (0..len)
                .map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize])
                .collect();
            let _ = parse(&text);
        }
    }
}
