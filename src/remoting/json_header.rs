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

use serde::Serialize;
use serde_json::{Map, Value};

use super::command::{
    language_name, ExtFields, HeaderError, RemotingCommand, SerializeType, LANGUAGE_JAVA,
};

/// The wire shape, fields in fastjson's (alphabetical) order.
#[derive(Serialize)]
struct Wire<'a> {
    code: i32,
    #[serde(rename = "extFields")]
    ext_fields: &'a ExtFields,
    flag: i32,
    language: &'a str,
    opaque: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    remark: Option<&'a str>,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type_current_rpc: &'static str,
    version: i32,
}

/// Appends `cmd`'s JSON header (not its body) to `out`.
pub fn encode(cmd: &RemotingCommand, out: &mut Vec<u8>) -> Result<(), HeaderError> {
    let wire = Wire {
        code: cmd.code,
        ext_fields: &cmd.ext_fields,
        flag: cmd.flag,
        language: &cmd.language,
        opaque: cmd.opaque,
        remark: cmd.remark.as_deref(),
        serialize_type_current_rpc: "JSON",
        version: cmd.version,
    };
    let start = out.len();
    // Serializing strings and integers into a Vec cannot fail, but if it ever did the
    // caller gets an error and `out` is left as it was.
    serde_json::to_writer(&mut *out, &wire).map_err(|e| {
        out.truncate(start);
        HeaderError::Json(e.to_string())
    })
}

/// Decodes a JSON header into a command with [`SerializeType::Json`] and an empty body.
pub fn decode(header: &[u8]) -> Result<RemotingCommand, HeaderError> {
    let value: Value =
        serde_json::from_slice(header).map_err(|e| HeaderError::Json(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(HeaderError::NotAnObject);
    };
    let code = int_field(&map, "code")?.ok_or(HeaderError::MissingField("code"))?;
    let language = match map.get("language") {
        None | Some(Value::Null) => LANGUAGE_JAVA.to_owned(),
        Some(Value::String(s)) => s.clone(),
        // fastjson reads an enum from its ordinal too.
        Some(Value::Number(n)) => match n.as_u64().and_then(|c| u8::try_from(c).ok()) {
            Some(c) => language_name(c).map_or_else(|| c.to_string(), str::to_owned),
            None => return Err(invalid("language", "not a language code")),
        },
        Some(_) => return Err(invalid("language", "not a string")),
    };
    let remark = match map.get("remark") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("remark", "not a string")),
    };
    let ext_fields = match map.get("extFields") {
        None | Some(Value::Null) => ExtFields::new(),
        Some(Value::Object(fields)) => ext_fields(fields)?,
        Some(_) => return Err(invalid("extFields", "not an object")),
    };
    Ok(RemotingCommand {
        code,
        language,
        version: int_field(&map, "version")?.unwrap_or(0),
        opaque: int_field(&map, "opaque")?.unwrap_or(0),
        flag: int_field(&map, "flag")?.unwrap_or(0),
        remark,
        ext_fields,
        serialize_type: SerializeType::Json,
        body: Default::default(),
        file_body: Default::default(),
    })
}

/// An i32 field given as a JSON integer or a decimal string; `None` when absent or null.
fn int_field(map: &Map<String, Value>, name: &'static str) -> Result<Option<i32>, HeaderError> {
    let parsed = match map.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64().and_then(|v| i32::try_from(v).ok()),
        Some(Value::String(s)) => s.parse::<i32>().ok(),
        Some(_) => None,
    };
    parsed
        .map(Some)
        .ok_or_else(|| invalid(name, "not a 32-bit integer"))
}

fn ext_fields(fields: &Map<String, Value>) -> Result<ExtFields, HeaderError> {
    let mut out = ExtFields::new();
    for (key, value) in fields {
        let text = match value {
            Value::Null => continue,
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Array(_) | Value::Object(_) => {
                return Err(HeaderError::InvalidField {
                    field: format!("extFields.{key}"),
                    reason: "nested arrays and objects are not header values".into(),
                })
            }
        };
        out.insert(key.clone(), text);
    }
    Ok(out)
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
        assert_eq!(cmd.ext_fields["queueId"], "3");
        assert_eq!(cmd.ext_fields["commitOffset"], "-1");
        assert_eq!(cmd.ext_fields["unitMode"], "true");
        assert_eq!(cmd.ext_fields["s"], "x");
        assert!(!cmd.ext_fields.contains_key("gone"));
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
