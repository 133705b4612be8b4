//! The JSON shapes of the admin answers, as a Java broker writes them (fastjson).
//!
//! Tables keyed by a `MessageQueue` (`TopicStatsTable`, `ConsumeStats`, `ResetOffsetBody`)
//! are written the way fastjson writes a map with object keys: the key is the queue's
//! object itself, not a string, so the body is not standard JSON:
//!
//! ```text
//! {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"minOffset":0,...}}}
//! ```
//!
//! Java tools (mqadmin, the dashboard) read exactly this, and the Rust client's admin
//! normalizes it. The key's fields are in fastjson's (alphabetical) order, and every
//! string goes through `serde_json`, so names with quotes or backslashes stay readable.

use std::fmt::Write;

/// `{"brokerName":…,"queueId":…,"topic":…}`.
pub fn queue_key(broker_name: &str, topic: &str, queue_id: i32) -> String {
    format!(
        "{{\"brokerName\":{},\"queueId\":{queue_id},\"topic\":{}}}",
        quoted(broker_name),
        quoted(topic)
    )
}

/// A JSON string.
pub fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// `"offsetTable":{<queue key>:<value>,…}` from (queue key, value JSON) pairs, without
/// the enclosing braces, so a caller adds its other fields.
pub fn offset_table<'a>(entries: impl IntoIterator<Item = (String, String)> + 'a) -> String {
    let mut out = String::from("\"offsetTable\":{");
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        let _ = write!(out, "{key}:{value}");
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_key_is_an_object_in_fastjson_order() {
        assert_eq!(
            queue_key("broker-a", "T", 3),
            r#"{"brokerName":"broker-a","queueId":3,"topic":"T"}"#
        );
        let odd = queue_key("b\"x", "t\\y", 0);
        let parsed: serde_json::Value = serde_json::from_str(&odd).unwrap();
        assert_eq!(parsed["brokerName"], "b\"x");
        assert_eq!(parsed["topic"], "t\\y");
    }

    #[test]
    fn an_offset_table_lists_its_entries_in_order() {
        let table = offset_table([
            (queue_key("b", "T", 0), "5".to_string()),
            (queue_key("b", "T", 1), "7".to_string()),
        ]);
        assert_eq!(
            table,
            r#""offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,{"brokerName":"b","queueId":1,"topic":"T"}:7}"#
        );
        assert_eq!(offset_table(Vec::new()), r#""offsetTable":{}"#);
    }
}
