//! NATS JetStream through `async-nats`, the NATS team's Rust client.
//!
//! Every publish is a JetStream publish: the message goes to the stream's subject with a
//! reply inbox, and the server answers with a PubAck once the stream stored it (after its
//! fsync under `sync_interval: always`). A closed-loop client awaits that PubAck before its
//! next publish; the backlog fill keeps `--inflight` of them outstanding on one connection.
//!
//! The backlog is read the way a NATS user reads a stream fast: one ephemeral pull consumer
//! with ack policy none (nothing to acknowledge, so no acknowledgement traffic), deliver
//! all, consumed through the client's message stream, which asks for `--batch` messages per
//! pull request and sends the next request when half of them have arrived, so a pull is
//! always outstanding.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{bail, Context as _};
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use async_nats::Subject;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::{NatsTarget, Summary};

async fn connect(target: &NatsTarget) -> anyhow::Result<jetstream::Context> {
    let client = async_nats::connect(&target.url)
        .await
        .with_context(|| format!("connecting to {}", target.url))?;
    Ok(jetstream::new(client))
}

/// Creates the stream: file storage, one subject, the server's default limits (none).
pub async fn setup(target: &NatsTarget) -> anyhow::Result<()> {
    let js = connect(target).await?;
    js.create_stream(stream::Config {
        name: target.stream.clone(),
        subjects: vec![target.subject.clone()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .with_context(|| format!("creating stream {}", target.stream))?;
    Ok(())
}

/// `clients` connections, each publishing and awaiting every PubAck until `duration` ends.
pub async fn produce(
    target: &NatsTarget,
    clients: usize,
    duration: Duration,
    size: usize,
) -> anyhow::Result<Summary> {
    let payload = Bytes::from(vec![b'x'; size]);
    let subject = Subject::from(target.subject.as_str());
    let mut contexts = Vec::with_capacity(clients);
    for _ in 0..clients {
        contexts.push(connect(target).await?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = JoinSet::new();
    for js in contexts {
        tasks.spawn(one_client(js, subject.clone(), payload.clone(), deadline));
    }
    let mut total = Summary::new(true);
    while let Some(done) = tasks.join_next().await {
        total.merge(done?);
    }
    total.seconds = started.elapsed().as_secs_f64();
    Ok(total)
}

async fn one_client(
    js: jetstream::Context,
    subject: Subject,
    payload: Bytes,
    deadline: Instant,
) -> Summary {
    let mut summary = Summary::new(true);
    while Instant::now() < deadline {
        let sent = Instant::now();
        match js.publish(subject.clone(), payload.clone()).await {
            Ok(ack) => match ack.await {
                Ok(_) => summary.record(payload.len(), Some(sent.elapsed())),
                Err(_) => summary.errors += 1,
            },
            Err(_) => summary.errors += 1,
        }
    }
    summary
}

/// Publishes `messages` from one connection, `inflight` PubAcks outstanding at a time.
pub async fn fill(
    target: &NatsTarget,
    messages: u64,
    size: usize,
    inflight: usize,
) -> anyhow::Result<Summary> {
    let js = connect(target).await?;
    let payload = Bytes::from(vec![b'x'; size]);
    let subject = Subject::from(target.subject.as_str());
    let mut pending: VecDeque<PublishAckFuture> = VecDeque::with_capacity(inflight);
    let mut summary = Summary::new(false);
    let started = Instant::now();
    for _ in 0..messages {
        if pending.len() == inflight {
            if let Some(ack) = pending.pop_front() {
                settle(ack, size, &mut summary).await;
            }
        }
        match js.publish(subject.clone(), payload.clone()).await {
            Ok(ack) => pending.push_back(ack),
            Err(_) => summary.errors += 1,
        }
    }
    while let Some(ack) = pending.pop_front() {
        settle(ack, size, &mut summary).await;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

async fn settle(ack: PublishAckFuture, size: usize, summary: &mut Summary) {
    match ack.await {
        Ok(_) => summary.record(size, None),
        Err(_) => summary.errors += 1,
    }
}

/// Reads `messages` from the start of the stream with one ephemeral pull consumer.
pub async fn consume(target: &NatsTarget, messages: u64, batch: usize) -> anyhow::Result<Summary> {
    let js = connect(target).await?;
    let stream = js.get_stream(&target.stream).await?;
    let started = Instant::now();
    let consumer: PullConsumer = stream
        .create_consumer(pull::Config {
            ack_policy: AckPolicy::None,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut reader = consumer
        .stream()
        .max_messages_per_batch(batch)
        .messages()
        .await?;
    let mut summary = Summary::new(false);
    while summary.messages < messages {
        match reader.next().await {
            Some(Ok(message)) => summary.record(message.payload.len(), None),
            Some(Err(_)) => summary.errors += 1,
            None => break,
        }
        if summary.errors > 1000 {
            bail!(
                "the pull consumer keeps failing: {} messages read",
                summary.messages
            );
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}
