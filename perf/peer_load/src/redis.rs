//! Redis streams over RESP2 on plain tokio sockets (commands encoded and replies parsed
//! here: the few lines a client library would run too, without its layers).
//!
//! The backlog lies in `--streams` streams, `{key}-0` .. `{key}-{streams - 1}`, message `i`
//! in stream `i % streams`, so that it can be read by as many connections as ringmq's own
//! backlog reader uses. The fill pipelines `--pipeline` XADDs at a time on one connection;
//! the reader has one connection per stream, each with one `XREAD COUNT n STREAMS key
//! last-id` in flight, the next one asking for the entries after the last id it got.

use anyhow::{anyhow, bail, Context as _};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::{RedisTarget, Summary};

/// One RESP2 reply.
#[derive(Debug)]
enum Value {
    Nil,
    /// A status or an integer: neither command used here answers with one.
    Other,
    Error(String),
    Bulk(Vec<u8>),
    Array(Vec<Value>),
}

/// Parses one reply at the start of `buf`: `None` while it has not all arrived; else the
/// reply and the bytes it took.
fn parse(buf: &[u8]) -> anyhow::Result<Option<(Value, usize)>> {
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[1..newline.saturating_sub(1).max(1)])?;
    let mut used = newline + 1;
    let value = match buf[0] {
        b'+' | b':' => Value::Other,
        b'-' => Value::Error(line.to_owned()),
        b'$' => match usize::try_from(line.parse::<i64>()?) {
            Err(_) => Value::Nil,
            Ok(len) if buf.len() < used + len + 2 => return Ok(None),
            Ok(len) => {
                used += len + 2;
                Value::Bulk(buf[newline + 1..newline + 1 + len].to_vec())
            }
        },
        b'*' => match usize::try_from(line.parse::<i64>()?) {
            Err(_) => Value::Nil,
            Ok(len) => {
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    let Some((item, took)) = parse(&buf[used..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    used += took;
                }
                Value::Array(items)
            }
        },
        other => bail!("not a RESP2 reply: type byte {other:#x}"),
    };
    Ok(Some((value, used)))
}

/// One connection: commands are buffered by `command` and sent by `flush`.
struct Conn {
    socket: TcpStream,
    input: Vec<u8>,
    start: usize,
    output: Vec<u8>,
}

impl Conn {
    async fn open(target: &RedisTarget) -> anyhow::Result<Conn> {
        let socket = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .with_context(|| format!("connecting to {}:{}", target.host, target.port))?;
        socket.set_nodelay(true)?;
        let input = Vec::with_capacity(1 << 16);
        Ok(Conn {
            socket,
            input,
            start: 0,
            output: Vec::with_capacity(1 << 16),
        })
    }

    fn command(&mut self, args: &[&[u8]]) {
        self.output
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            self.output
                .extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            self.output.extend_from_slice(arg);
            self.output.extend_from_slice(b"\r\n");
        }
    }

    async fn flush(&mut self) -> anyhow::Result<()> {
        self.socket.write_all(&self.output).await?;
        self.output.clear();
        Ok(())
    }

    async fn reply(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Some((value, used)) = parse(&self.input[self.start..])? {
                self.start += used;
                if self.start == self.input.len() {
                    self.input.clear();
                    self.start = 0;
                }
                return Ok(value);
            }
            self.input.drain(..self.start);
            self.start = 0;
            self.input.reserve(1 << 16);
            if self.socket.read_buf(&mut self.input).await? == 0 {
                bail!("the server closed the connection");
            }
        }
    }
}

fn stream_keys(target: &RedisTarget) -> Vec<String> {
    (0..target.streams.max(1))
        .map(|i| format!("{}-{i}", target.key))
        .collect()
}

/// XADDs `messages` of `size` bytes (one field), `pipeline` at a time on one connection.
pub async fn fill(
    target: &RedisTarget,
    messages: u64,
    size: usize,
    pipeline: usize,
) -> anyhow::Result<Summary> {
    let mut conn = Conn::open(target).await?;
    let keys = stream_keys(target);
    let payload = vec![b'x'; size];
    let mut summary = Summary::new(false);
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < messages {
        let now = (pipeline as u64).min(messages - sent);
        for i in sent..sent + now {
            let key = &keys[(i % keys.len() as u64) as usize];
            conn.command(&[b"XADD", key.as_bytes(), b"*", b"f", &payload]);
        }
        conn.flush().await?;
        for _ in 0..now {
            match conn.reply().await? {
                Value::Bulk(_) => summary.record(size, None),
                _ => summary.errors += 1,
            }
        }
        sent += now;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// Reads `messages` back, one connection per stream, `count` entries per XREAD.
pub async fn consume(target: &RedisTarget, messages: u64, count: usize) -> anyhow::Result<Summary> {
    let keys = stream_keys(target);
    let streams = keys.len() as u64;
    let mut conns = Vec::with_capacity(keys.len());
    for _ in &keys {
        conns.push(Conn::open(target).await?);
    }
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (i, (key, conn)) in keys.into_iter().zip(conns).enumerate() {
        let share = messages / streams + u64::from((i as u64) < messages % streams);
        tasks.spawn(read_stream(conn, key, share, count));
    }
    let mut total = Summary::new(false);
    while let Some(done) = tasks.join_next().await {
        total.merge(done??);
    }
    total.seconds = started.elapsed().as_secs_f64();
    Ok(total)
}

/// Reads `share` entries of one stream from its start (fewer if it ends first).
async fn read_stream(
    mut conn: Conn,
    key: String,
    share: u64,
    count: usize,
) -> anyhow::Result<Summary> {
    let mut summary = Summary::new(false);
    let mut last = b"0-0".to_vec();
    let count = count.to_string();
    while summary.messages < share {
        conn.command(&[
            b"XREAD",
            b"COUNT",
            count.as_bytes(),
            b"STREAMS",
            key.as_bytes(),
            &last,
        ]);
        conn.flush().await?;
        let Some(entries) = stream_entries(conn.reply().await?)? else {
            break; // nil: nothing after `last`
        };
        for entry in entries {
            let Value::Array(mut parts) = entry else {
                bail!("an XREAD entry that is not [id, fields]");
            };
            let fields = parts.pop();
            let (Some(Value::Bulk(id)), Some(Value::Array(fields))) = (parts.pop(), fields) else {
                bail!("an XREAD entry that is not [id, fields]");
            };
            let bytes = fields.iter().skip(1).step_by(2).map(value_len).sum();
            summary.record(bytes, None);
            last = id;
        }
    }
    Ok(summary)
}

fn value_len(value: &Value) -> usize {
    match value {
        Value::Bulk(bytes) => bytes.len(),
        _ => 0,
    }
}

/// The entries of an XREAD reply naming one stream: `[[key, [entry, ...]]]`, or nil.
fn stream_entries(reply: Value) -> anyhow::Result<Option<Vec<Value>>> {
    match reply {
        Value::Nil => Ok(None),
        Value::Error(error) => Err(anyhow!("XREAD failed: {error}")),
        Value::Array(mut streams) => match streams.pop().map(|stream| match stream {
            Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
            _ => None,
        }) {
            Some(Some(Value::Array(entries))) => Ok(Some(entries)),
            _ => bail!("an XREAD reply that is not [[key, entries]]"),
        },
        other => bail!("unexpected XREAD reply {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Value};

    #[test]
    fn parses_nested_replies_and_waits_for_partial_ones() {
        let reply =
            b"*1\r\n*2\r\n$3\r\nkey\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$2\r\nab\r\n";
        let (value, used) = parse(reply).unwrap().unwrap();
        assert_eq!(used, reply.len());
        assert!(matches!(value, Value::Array(ref items) if items.len() == 1));
        for cut in 0..reply.len() {
            assert!(parse(&reply[..cut]).unwrap().is_none(), "cut at {cut}");
        }
        assert!(matches!(parse(b"*-1\r\n").unwrap(), Some((Value::Nil, 5))));
        assert!(matches!(parse(b"$-1\r\n").unwrap(), Some((Value::Nil, 5))));
        assert!(matches!(parse(b":7\r\n").unwrap(), Some((Value::Other, 4))));
    }
}
