//! The producer connection of `ringmq bench transactions --pending`: it registers the
//! producer group with HEART_BEAT, then answers every CHECK_TRANSACTION_STATE (39) the
//! broker sends over it with a oneway END_TRANSACTION COMMIT (`fromTransactionCheck`),
//! as a stock producer whose local transactions all committed does.
//!
//! Its own connection rather than the in-project [`crate::client::Client`], which drops
//! what the node sends unasked; one task reads and writes it:
//! - every frame that arrived is handled before anything is written, and the answers to
//!   all of them go out in one write (a check round sends thousands at once);
//! - the HEART_BEAT is sent again every [`HEARTBEAT_EVERY`], as stock clients do, so a
//!   run longer than the broker's client expiry keeps its registration; its answers are
//!   only counted;
//! - `on_check` is told of each check with the wall-clock time its bytes were read.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::transactions::now_ms;
use super::tx_wire::{producer_heartbeat, Check};
use crate::remoting::codes::{request as codes, response};
use crate::remoting::frame::{encode_frame, take_frame, DEFAULT_MAX_FRAME_LEN};
use crate::remoting::{RemotingCommand, ONEWAY_FLAG};

/// What the run is told of each check: the check and when its bytes were read (wall-clock
/// ms).
pub type OnCheck = Box<dyn FnMut(&Check, i64)>;

/// How often the registration is renewed (Java's client: every 30 s).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(20);
/// How long the first heartbeat may take to be answered.
const FIRST_ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// What the connection counted.
#[derive(Default)]
pub struct CheckerStats {
    /// CHECK_TRANSACTION_STATE requests received.
    pub checks: Cell<u64>,
    /// Checks whose header could not be read (not answered).
    pub unreadable: Cell<u64>,
    /// Other requests from the node (not answered).
    pub other_requests: Cell<u64>,
    /// Renewed heartbeats not answered SUCCESS.
    pub heartbeat_failures: Cell<u64>,
    /// The connection closed or failed before the run let it go.
    pub closed: Cell<bool>,
}

/// The running connection; dropping it does not stop it, [`Checker::stop`] does.
pub struct Checker {
    task: JoinHandle<()>,
    pub stats: Rc<CheckerStats>,
}

impl Checker {
    /// Connects, registers `group` and waits for the node to accept it, then serves checks
    /// on a task of the current `LocalSet`.
    pub async fn start(
        addr: SocketAddr,
        group: &str,
        on_check: OnCheck,
    ) -> anyhow::Result<Checker> {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|error| anyhow::anyhow!("connecting to {addr}: {error}"))?;
        stream.set_nodelay(true)?;
        let client_id = format!("ringmq-bench-tx@{}", std::process::id());
        let mut beat = producer_heartbeat(&client_id, group);
        beat.opaque = 1;
        let mut out = Vec::new();
        encode_frame(&beat, &mut out)?;
        stream.write_all(&out).await?;
        let mut buffer = BytesMut::with_capacity(64 * 1024);
        let answer = tokio::time::timeout(
            FIRST_ANSWER_WITHIN,
            response_to(&mut stream, &mut buffer, 1),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no answer to the producer HEART_BEAT"))??;
        if answer.code != response::SUCCESS {
            anyhow::bail!(
                "the producer HEART_BEAT was answered {} {}",
                answer.code,
                answer.remark.as_deref().unwrap_or("")
            );
        }
        let stats = Rc::new(CheckerStats::default());
        let connection = Connection {
            group: group.to_owned(),
            client_id,
            stats: stats.clone(),
            on_check,
            next_opaque: 2,
        };
        let task = tokio::task::spawn_local(connection.serve(stream, buffer));
        Ok(Checker { task, stats })
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

/// Reads frames until the response to `opaque`; anything before it is skipped (nothing
/// is checked before the group is registered).
async fn response_to(
    stream: &mut TcpStream,
    buffer: &mut BytesMut,
    opaque: i32,
) -> anyhow::Result<RemotingCommand> {
    loop {
        while let Some(cmd) = take_frame(buffer, DEFAULT_MAX_FRAME_LEN)? {
            if cmd.is_response() && cmd.opaque == opaque {
                return Ok(cmd);
            }
        }
        if stream.read_buf(buffer).await? == 0 {
            anyhow::bail!("the node closed the connection");
        }
    }
}

struct Connection {
    group: String,
    client_id: String,
    stats: Rc<CheckerStats>,
    on_check: OnCheck,
    next_opaque: i32,
}

impl Connection {
    async fn serve(mut self, stream: TcpStream, mut buffer: BytesMut) {
        let (mut reader, mut writer) = stream.into_split();
        let mut renew = tokio::time::interval(HEARTBEAT_EVERY);
        // The first tick of an interval is immediate; the registration is fresh.
        renew.tick().await;
        let mut out = Vec::with_capacity(64 * 1024);
        // Checks may have come in the same read as the heartbeat's answer: handled first.
        let mut handled = self.handle_frames(&mut buffer, &mut out).is_ok();
        while handled {
            if !out.is_empty() {
                if writer.write_all(&out).await.is_err() {
                    break;
                }
                out.clear();
            }
            tokio::select! {
                read = reader.read_buf(&mut buffer) => {
                    handled = matches!(read, Ok(n) if n > 0)
                        && self.handle_frames(&mut buffer, &mut out).is_ok();
                }
                _ = renew.tick() => {
                    let beat = producer_heartbeat(&self.client_id, &self.group);
                    self.push(beat, 0, &mut out);
                }
            }
        }
        self.stats.closed.set(true);
    }

    /// Handles every whole frame in `buffer`, answering checks into `out`.
    fn handle_frames(
        &mut self,
        buffer: &mut BytesMut,
        out: &mut Vec<u8>,
    ) -> Result<(), crate::remoting::frame::FrameError> {
        let now = now_ms();
        while let Some(cmd) = take_frame(buffer, DEFAULT_MAX_FRAME_LEN)? {
            if cmd.is_response() {
                if cmd.code != response::SUCCESS {
                    let failures = &self.stats.heartbeat_failures;
                    failures.set(failures.get() + 1);
                }
                continue;
            }
            if cmd.code != codes::CHECK_TRANSACTION_STATE {
                let other = &self.stats.other_requests;
                other.set(other.get() + 1);
                continue;
            }
            self.stats.checks.set(self.stats.checks.get() + 1);
            match Check::parse(&cmd) {
                Ok(check) => {
                    (self.on_check)(&check, now);
                    let answer = check.commit(&self.group);
                    self.push(answer, ONEWAY_FLAG, out);
                }
                Err(why) => {
                    tracing::warn!("an unreadable check: {why}");
                    let unreadable = &self.stats.unreadable;
                    unreadable.set(unreadable.get() + 1);
                }
            }
        }
        Ok(())
    }

    /// Appends `cmd`'s frame with the next opaque and `flag`.
    fn push(&mut self, mut cmd: RemotingCommand, flag: i32, out: &mut Vec<u8>) {
        cmd.opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1);
        cmd.flag |= flag;
        if let Err(error) = encode_frame(&cmd, out) {
            tracing::warn!("a frame the bench cannot encode: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::ExtFields;
    use std::cell::RefCell;

    /// A node stand-in: answers the heartbeat, sends two checks in one write, and hands
    /// back the frames it then reads.
    async fn fake_node(listener: tokio::net::TcpListener) -> Vec<RemotingCommand> {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buffer = BytesMut::new();
        let beat = loop {
            if let Some(cmd) = take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
                break cmd;
            }
            stream.read_buf(&mut buffer).await.unwrap();
        };
        assert_eq!(beat.code, codes::HEART_BEAT);
        let mut out = Vec::new();
        encode_frame(
            &RemotingCommand::response_to(&beat, response::SUCCESS, None),
            &mut out,
        )
        .unwrap();
        for offset in [5, 6] {
            let mut check =
                RemotingCommand::request(codes::CHECK_TRANSACTION_STATE, ExtFields::new());
            check.put_ext("tranStateTableOffset", offset);
            check.put_ext("commitLogOffset", offset * 100);
            check.put_ext("transactionId", format!("K{offset}"));
            check.put_ext("topic", "TxT");
            check.flag |= ONEWAY_FLAG;
            encode_frame(&check, &mut out).unwrap();
        }
        stream.write_all(&out).await.unwrap();
        let mut answers = Vec::new();
        while answers.len() < 2 {
            while let Some(cmd) = take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
                answers.push(cmd);
            }
            if answers.len() < 2 {
                assert!(stream.read_buf(&mut buffer).await.unwrap() > 0);
            }
        }
        answers
    }

    #[test]
    fn checks_are_answered_with_oneway_commits_and_reported() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let node = tokio::task::spawn_local(fake_node(listener));
            let seen = Rc::new(RefCell::new(Vec::new()));
            let noted = seen.clone();
            let checker = Checker::start(
                addr,
                "PG",
                Box::new(move |check, _at| noted.borrow_mut().push(check.queue_offset)),
            )
            .await
            .unwrap();
            let answers = node.await.unwrap();
            assert_eq!(*seen.borrow(), [5, 6]);
            assert_eq!(checker.stats.checks.get(), 2);
            for (answer, offset) in answers.iter().zip([5, 6]) {
                assert_eq!(answer.code, codes::END_TRANSACTION);
                assert!(answer.is_oneway());
                assert_eq!(answer.opt_str("producerGroup"), Some("PG"));
                assert_eq!(answer.opt_str("commitOrRollback"), Some("8"));
                assert_eq!(answer.opt_str("fromTransactionCheck"), Some("true"));
                assert_eq!(
                    answer.opt_str("tranStateTableOffset"),
                    Some(offset.to_string().as_str())
                );
                assert_eq!(
                    answer.opt_str("transactionId"),
                    Some(format!("K{offset}").as_str())
                );
            }
            checker.stop();
        });
    }
}
