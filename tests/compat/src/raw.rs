//! A minimal blocking remoting client (JSON headers) used only to observe the node's state
//! from a test, e.g. a group's committed offset; everything under test goes through the
//! stock client.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Map, Value};

/// A response: its code, remark, extFields and body.
#[derive(Debug)]
pub struct Response {
    pub code: i64,
    pub remark: Option<String>,
    pub ext_fields: Map<String, Value>,
    pub body: Vec<u8>,
}

/// Sends one request and reads its response.
pub fn request(addr: &str, code: i32, ext_fields: Value) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let header = json!({
        "code": code,
        "language": "JAVA",
        "version": 0,
        "opaque": 1,
        "flag": 0,
        "extFields": ext_fields,
    })
    .to_string();
    let header = header.as_bytes();
    let mut frame = Vec::with_capacity(8 + header.len());
    frame.extend_from_slice(&((4 + header.len()) as u32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header);
    stream.write_all(&frame)?;

    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let mut rest = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut rest)?;
    let mark = u32::from_be_bytes(rest[..4].try_into().unwrap());
    assert_eq!(mark >> 24, 0, "expected a JSON header in the response");
    let header_len = (mark & 0x00ff_ffff) as usize;
    let header: Value = serde_json::from_slice(&rest[4..4 + header_len])
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Response {
        code: header["code"].as_i64().unwrap_or(-1),
        remark: header["remark"].as_str().map(str::to_string),
        ext_fields: header["extFields"].as_object().cloned().unwrap_or_default(),
        body: rest[4 + header_len..].to_vec(),
    })
}

/// QUERY_CONSUMER_OFFSET (14): the committed offset, or `None` when the broker has none.
pub fn committed_offset(broker: &str, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
    let response = request(
        broker,
        14,
        json!({"consumerGroup": group, "topic": topic, "queueId": queue_id.to_string()}),
    )
    .expect("QUERY_CONSUMER_OFFSET");
    if response.code != 0 {
        return None;
    }
    response
        .ext_fields
        .get("offset")
        .and_then(|offset| match offset {
            Value::String(text) => text.parse().ok(),
            Value::Number(number) => number.as_i64(),
            _ => None,
        })
}

/// GET_MAX_OFFSET (30): the queue's end offset.
pub fn max_offset(broker: &str, topic: &str, queue_id: i32) -> i64 {
    let response = request(
        broker,
        30,
        json!({"topic": topic, "queueId": queue_id.to_string()}),
    )
    .expect("GET_MAX_OFFSET");
    assert_eq!(response.code, 0, "GET_MAX_OFFSET: {:?}", response.remark);
    match &response.ext_fields["offset"] {
        Value::String(text) => text.parse().expect("offset"),
        other => other.as_i64().expect("offset"),
    }
}
