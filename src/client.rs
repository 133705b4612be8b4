//! The in-project remoting client: used by the integration tests now and by the network
//! load generator later. Shard-local like everything else: it runs inside a `LocalSet`.
//!
//! Invariants:
//! - Requests are multiplexed on one connection and matched to responses by `opaque`, which
//!   the client assigns (a per-client counter); a response nobody waits for is dropped.
//! - Every `request` ends: with its response, with `TimedOut` after the client's timeout,
//!   or with an error as soon as the connection breaks (the reader task fails every pending
//!   request when it stops).
//! - Writes are serialised through one async mutex, so frames never interleave.
//! - Dropping the last handle aborts the reader task and closes the socket.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::broker::pull::{FLAG_SUBSCRIPTION, FLAG_SUSPEND};
use crate::remoting::codes::request as codes;
use crate::remoting::{
    encode_frame, take_frame, ExtFields, RemotingCommand, DEFAULT_MAX_FRAME_LEN, ONEWAY_FLAG,
};
use crate::store::properties;

/// How long a request waits for its response unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

type Pending = RefCell<HashMap<i32, oneshot::Sender<RemotingCommand>>>;

struct Inner {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Rc<Pending>,
    next_opaque: Cell<i32>,
    timeout: Cell<Duration>,
    reader: JoinHandle<()>,
    peer: SocketAddr,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// One connection to a node. Clones share it.
#[derive(Clone)]
pub struct Client {
    inner: Rc<Inner>,
}

impl Client {
    /// Connects; must be called inside a `LocalSet`.
    pub async fn connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (reader, writer) = stream.into_split();
        let pending: Rc<Pending> = Rc::new(RefCell::new(HashMap::new()));
        let reader = tokio::task::spawn_local(read_responses(reader, pending.clone()));
        Ok(Client {
            inner: Rc::new(Inner {
                writer: tokio::sync::Mutex::new(writer),
                pending,
                next_opaque: Cell::new(1),
                timeout: Cell::new(DEFAULT_TIMEOUT),
                reader,
                peer: addr,
            }),
        })
    }

    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// Sets the per-request timeout of every handle of this client.
    pub fn set_timeout(&self, timeout: Duration) {
        self.inner.timeout.set(timeout);
    }

    /// Whether the connection is gone (the reader saw EOF or an error).
    pub fn is_closed(&self) -> bool {
        self.inner.reader.is_finished()
    }

    fn next_opaque(&self) -> i32 {
        let opaque = self.inner.next_opaque.get();
        self.inner.next_opaque.set(opaque.wrapping_add(1));
        opaque
    }

    async fn write(&self, cmd: &RemotingCommand) -> io::Result<()> {
        let mut frame = Vec::with_capacity(256 + cmd.body.len());
        encode_frame(cmd, &mut frame)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        self.inner.writer.lock().await.write_all(&frame).await
    }

    /// Sends `cmd` (its opaque is replaced) and waits for its response.
    pub async fn request(&self, cmd: RemotingCommand) -> io::Result<RemotingCommand> {
        self.request_with_timeout(cmd, self.inner.timeout.get())
            .await
    }

    pub async fn request_with_timeout(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> io::Result<RemotingCommand> {
        if self.is_closed() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection is closed",
            ));
        }
        let opaque = self.next_opaque();
        cmd.opaque = opaque;
        cmd.flag &= !ONEWAY_FLAG;
        let (answer, response) = oneshot::channel();
        self.inner.pending.borrow_mut().insert(opaque, answer);
        // Whatever happens below, this request's slot must not stay behind.
        let cleanup = PendingGuard(&self.inner.pending, opaque);
        self.write(&cmd).await?;
        let outcome = match tokio::time::timeout(timeout, response).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the connection closed before the response came",
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no response to request code {} within {timeout:?}",
                    cmd.code
                ),
            )),
        };
        drop(cleanup);
        outcome
    }

    /// Sends `cmd` as a oneway request: no response is expected.
    pub async fn oneway(&self, mut cmd: RemotingCommand) -> io::Result<()> {
        cmd.opaque = self.next_opaque();
        cmd.flag |= ONEWAY_FLAG;
        self.write(&cmd).await
    }

    /// SEND_MESSAGE_V2 of one message; see [`send_request_v2`].
    pub async fn send_message(
        &self,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        tags: Option<&str>,
        keys: Option<&str>,
    ) -> io::Result<RemotingCommand> {
        self.request(send_request_v2(topic, queue_id, body, tags, keys))
            .await
    }

    /// PULL_MESSAGE; see [`pull_request`]. The request timeout is stretched past the
    /// suspension so a parked pull is not given up on by the client first.
    pub async fn pull(
        &self,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max: i32,
        suspend_timeout: Option<Duration>,
    ) -> io::Result<RemotingCommand> {
        let cmd = pull_request(topic, queue_id, offset, max, suspend_timeout, None);
        let timeout = self.inner.timeout.get() + suspend_timeout.unwrap_or_default();
        self.request_with_timeout(cmd, timeout).await
    }
}

struct PendingGuard<'a>(&'a Pending, i32);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.borrow_mut().remove(&self.1);
    }
}

async fn read_responses(mut reader: tokio::net::tcp::OwnedReadHalf, pending: Rc<Pending>) {
    let mut buffer = BytesMut::with_capacity(64 * 1024);
    'read: loop {
        loop {
            match take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN) {
                Ok(Some(cmd)) if cmd.is_response() => {
                    if let Some(waiter) = pending.borrow_mut().remove(&cmd.opaque) {
                        let _ = waiter.send(cmd);
                    }
                }
                // Requests from the server (e.g. NOTIFY_CONSUMER_IDS_CHANGED) are not
                // handled yet.
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "bad frame from the server; closing");
                    break 'read;
                }
            }
        }
        match reader.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // Dropping the senders fails every pending request at once.
    pending.borrow_mut().clear();
}

// Imported here, beside the request builders that alone use it.
use compact_str::{CompactString, ToCompactString};

/// The common fields of the send headers, as a Java producer fills them.
fn send_properties(tags: Option<&str>, keys: Option<&str>) -> String {
    let pairs = [
        tags.map(|tags| (properties::TAGS, tags)),
        keys.map(|keys| (properties::KEYS, keys)),
        Some((properties::WAIT, "true")),
    ];
    properties::encode(pairs.into_iter().flatten())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// The send header's field names in SEND_MESSAGE (10) spelling, in the order
/// [`send_request`] lists their values.
const SEND_NAMES_V1: [&str; 12] = [
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
];

/// The same fields under SEND_MESSAGE_V2's single letters (`l`, maxReconsumeTimes, is
/// not sent).
const SEND_NAMES_V2: [&str; 12] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"];

/// A send request with `names` (one of the tables above) for its header fields, so both
/// spellings carry the same values and each is built once.
fn send_request(
    code: i32,
    names: &[&'static str; 12],
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RemotingCommand {
    let values = [
        CompactString::const_new("ringmq-producer"),
        CompactString::from(topic),
        CompactString::const_new("TBW102"),
        CompactString::const_new("4"),
        queue_id.to_compact_string(),
        CompactString::const_new("0"),
        now_ms().to_compact_string(),
        CompactString::const_new("0"),
        CompactString::from(send_properties(tags, keys)),
        CompactString::const_new("0"),
        CompactString::const_new("false"),
        CompactString::const_new("false"),
    ];
    let fields: ExtFields = names.iter().copied().zip(values).collect();
    RemotingCommand::request(code, fields).with_body(Bytes::copy_from_slice(body))
}

/// SEND_MESSAGE (10) with the long header names.
pub fn send_request_v1(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RemotingCommand {
    send_request(
        codes::SEND_MESSAGE,
        &SEND_NAMES_V1,
        topic,
        queue_id,
        body,
        tags,
        keys,
    )
}

/// SEND_MESSAGE_V2 (310) with the single-letter header names, as Java producers send.
pub fn send_request_v2(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RemotingCommand {
    send_request(
        codes::SEND_MESSAGE_V2,
        &SEND_NAMES_V2,
        topic,
        queue_id,
        body,
        tags,
        keys,
    )
}

/// PULL_MESSAGE (11). `suspend_timeout` sets the suspend bit (long polling); `subscription`
/// (a tag expression) sets the subscription bit.
pub fn pull_request(
    topic: &str,
    queue_id: i32,
    offset: u64,
    max: i32,
    suspend_timeout: Option<Duration>,
    subscription: Option<&str>,
) -> RemotingCommand {
    let mut sys_flag = 0;
    if suspend_timeout.is_some() {
        sys_flag |= FLAG_SUSPEND;
    }
    if subscription.is_some() {
        sys_flag |= FLAG_SUBSCRIPTION;
    }
    let mut fields = ExtFields::with_capacity(11);
    fields.insert("consumerGroup".into(), "ringmq-consumer");
    fields.insert("topic".into(), topic);
    fields.insert("queueId".into(), queue_id.to_compact_string());
    fields.insert("queueOffset".into(), offset.to_compact_string());
    fields.insert("maxMsgNums".into(), max.to_compact_string());
    fields.insert("sysFlag".into(), sys_flag.to_compact_string());
    fields.insert("commitOffset".into(), "0");
    fields.insert(
        "suspendTimeoutMillis".into(),
        suspend_timeout
            .map_or(0, |timeout| timeout.as_millis())
            .to_compact_string(),
    );
    fields.insert("subVersion".into(), "0");
    if let Some(subscription) = subscription {
        fields.insert("subscription".into(), subscription);
        fields.insert("expressionType".into(), "TAG");
    }
    RemotingCommand::request(codes::PULL_MESSAGE, fields)
}

/// A query naming a queue (GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME).
pub fn queue_request(code: i32, topic: &str, queue_id: i32) -> RemotingCommand {
    let fields = ExtFields::from([
        ("topic", CompactString::from(topic)),
        ("queueId", queue_id.to_compact_string()),
    ]);
    RemotingCommand::request(code, fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::SendMessageRequestHeader;

    #[test]
    fn send_requests_carry_the_same_header_under_both_spellings() {
        let v1 = send_request_v1("TopicA", 3, b"body", Some("TagA"), Some("k1"));
        let mut v2 = send_request_v2("TopicA", 3, b"body", Some("TagA"), Some("k1"));
        assert_eq!(v1.code, codes::SEND_MESSAGE);
        assert_eq!(v2.code, codes::SEND_MESSAGE_V2);
        let names: Vec<&str> = v1.ext_fields.iter().map(|(k, _)| k).collect();
        let mut expected = SEND_NAMES_V1.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected);
        assert_eq!(v1.opt_str("defaultTopic"), Some("TBW102"));
        assert_eq!(v1.opt_str("unitMode"), Some("false"));
        assert_eq!(v2.opt_str("b"), Some("TopicA"));
        assert_eq!(v2.opt_str("e"), Some("3"));
        assert_eq!(v2.ext_fields.len(), 12);
        assert_eq!(&v1.body[..], b"body");
        assert_eq!(v1.body, v2.body);
        // The two were built a moment apart; only their timestamps may differ.
        let born = v1.get_str("bornTimestamp").unwrap().to_owned();
        v2.ext_fields.insert("g".into(), born);
        let from_v1 = SendMessageRequestHeader::from_command(&v1).unwrap();
        let from_v2 = SendMessageRequestHeader::from_command(&v2).unwrap();
        assert_eq!(from_v1, from_v2);
        assert_eq!(
            from_v1.properties,
            "TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}WAIT\u{1}true\u{2}"
        );
    }
}
