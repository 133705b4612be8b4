//! The check service (master only) and the replay of op records at open.
//!
//! A round (every `transactionCheckInterval`) walks the shard's undecided halves from the
//! cursor in half-queue order:
//! - a half stored after the round began, or younger than `transactionTimeOut`, ends the
//!   round (later halves are younger still);
//! - a half with its own `CHECK_IMMUNITY_TIME_IN_SECONDS` still running is skipped;
//! - a half checked `transactionCheckMax` times is moved to `TRANS_CHECK_MAX_TIME_TOPIC`
//!   and resolved;
//! - any other gets CHECK_TRANSACTION_STATE on a live connection of its producer group (or
//!   none when the group has none: counted, and the check still counts, as RocketMQ's
//!   does), and the round's checked offsets go to op records tagged `c`.
//!
//! Then the cursor moves over the resolved front of the window and is committed as
//! `CID_RMQ_SYS_TRANS`'s offset on the half queue (a slave copies it with the other offsets).
//!
//! Bounded: the round reads one half at a time, yields every [`YIELD_EVERY`] halves, and
//! keeps only the round's checked offsets (8 bytes each) until it writes them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

use crate::remoting::codes::request;
use crate::remoting::{ExtFields, RemotingCommand};
use crate::store::properties;
use crate::store::record::{self, Decoded, RecordView, Verify};

use crate::broker::naming::ids;
use crate::broker::Broker;

use super::halves::{self, CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC};
use super::window::Window;
use super::Transactions;

/// Halves a round looks at between two yields to the shard's other work.
pub const YIELD_EVERY: usize = 256;

/// Replays the op records that can name a half of `window`: those stored after the half at
/// the window's base (an op record is always written after its half).
pub fn replay_ops(
    broker: &Broker,
    window: &mut Window,
    half_queue: i32,
    op_queue: i32,
) -> Result<(), String> {
    let store = broker.store();
    let base_entry = store
        .queue_entry(HALF_TOPIC, half_queue, window.base())
        .map_err(|error| format!("cannot read the half queue at {}: {error}", window.base()))?;
    let Some(base_entry) = base_entry else {
        return Ok(());
    };
    let (mut low, mut high) = (
        store.min_offset(OP_TOPIC, op_queue),
        store.max_offset(OP_TOPIC, op_queue),
    );
    // The first op entry past the base half: entries are in CommitLog order.
    while low < high {
        let middle = low + (high - low) / 2;
        let entry = store
            .queue_entry(OP_TOPIC, op_queue, middle)
            .map_err(|error| format!("cannot read the op queue at {middle}: {error}"))?;
        match entry {
            Some(entry) if entry.phys_offset <= base_entry.phys_offset => low = middle + 1,
            _ => high = middle,
        }
    }
    let end = store.max_offset(OP_TOPIC, op_queue);
    let mut unreadable = 0u64;
    let mut at = low;
    while at < end {
        let entries = store
            .queue_entries(OP_TOPIC, op_queue, at, 1024)
            .map_err(|error| format!("cannot read the op queue at {at}: {error}"))?;
        if entries.is_empty() {
            break;
        }
        for entry in &entries {
            match store.read_record(entry.phys_offset as u64, entry.size as usize) {
                Ok(bytes) => match record::decode(&bytes, Verify::Structure) {
                    Ok(Decoded::Record(view)) => unreadable += apply_op(window, &view),
                    _ => unreadable += 1,
                },
                Err(_) => unreadable += 1,
            }
        }
        at += entries.len() as u64;
    }
    if unreadable > 0 {
        tracing::warn!(
            shard = broker.shard().id(),
            unreadable,
            "transaction op records or offsets that could not be read were skipped"
        );
    }
    Ok(())
}

/// Applies one op record to the window; returns the offsets it could not read.
fn apply_op(window: &mut Window, op: &RecordView<'_>) -> u64 {
    let (offsets, bad) = halves::parse_op_body(op.body);
    match properties::get(op.properties, properties::TAGS) {
        Some(halves::DECIDED_TAG) => {
            for offset in offsets {
                window.resolve(offset);
            }
        }
        Some(halves::CHECKED_TAG) => {
            for offset in offsets {
                window.count_check(offset);
            }
        }
        _ => return 1,
    }
    bad as u64
}

/// Runs check rounds until the shard stops.
pub async fn run(broker: Rc<Broker>, transactions: Rc<Transactions>) {
    let interval = broker.config.transactions.check_interval;
    loop {
        tokio::time::sleep(interval).await;
        round(&broker, &transactions).await;
    }
}

/// Where a round is.
enum Step {
    Next,
    EndRound,
}

/// One check round.
pub async fn round(broker: &Broker, transactions: &Transactions) {
    transactions.catch_up(broker);
    let started = broker.now_ms();
    let mut checked = Vec::new();
    let mut peers: HashMap<String, Vec<SocketAddr>> = HashMap::new();
    let mut from = transactions.cursor();
    'round: loop {
        let batch = transactions
            .window
            .borrow()
            .unresolved_from(from, YIELD_EVERY);
        let Some(&last) = batch.last() else {
            break;
        };
        for offset in batch {
            if transactions.window.borrow().is_resolved(offset) {
                continue; // decided while the round yielded
            }
            match look_at(broker, transactions, offset, started, &mut peers).await {
                Ok(Some(true)) => checked.push(offset),
                Ok(Some(false)) | Ok(None) => {}
                Err(Step::EndRound) => break 'round,
                Err(Step::Next) => {}
            }
        }
        from = last + 1;
        tokio::task::yield_now().await;
    }
    if !checked.is_empty() {
        if let Err((_, why)) =
            super::put_ops(broker, transactions, halves::CHECKED_TAG, &checked).await
        {
            // The counts stay in memory; a restart before the next round counts these
            // checks again from zero (more checks, never fewer).
            tracing::warn!(
                shard = broker.shard().id(),
                "check counts not stored: {why}"
            );
        }
    }
    let cursor = transactions.window.borrow_mut().advance();
    broker.consumer_offsets.commit(
        halves::CHECK_GROUP,
        HALF_TOPIC,
        transactions.half_queue,
        cursor as i64,
    );
}

/// Looks at the undecided half at `offset`: `Some(true)` when it was checked, `Some(false)`
/// when it was resolved here (discarded, or its record is gone), `None` when skipped.
async fn look_at(
    broker: &Broker,
    transactions: &Transactions,
    offset: u64,
    started: i64,
    peers: &mut HashMap<String, Vec<SocketAddr>>,
) -> Result<Option<bool>, Step> {
    let store = broker.store();
    let entry = match store.queue_entry(HALF_TOPIC, transactions.half_queue, offset) {
        Ok(Some(entry)) => entry,
        Ok(None) if offset < store.min_offset(HALF_TOPIC, transactions.half_queue) => {
            // Retention took it (the disk was full past the forced ratio): nothing to
            // decide any more.
            transactions.window.borrow_mut().resolve(offset);
            tracing::warn!(offset, "an undecided half message was deleted by retention");
            return Ok(Some(false));
        }
        _ => return Err(Step::EndRound),
    };
    let Ok(bytes) = store.read_record(entry.phys_offset as u64, entry.size as usize) else {
        return Err(Step::EndRound);
    };
    let Ok(Decoded::Record(half)) = record::decode(&bytes, Verify::Structure) else {
        return Err(Step::Next);
    };
    let now = broker.now_ms();
    let timeout = broker.config.transactions.timeout.as_millis() as i64;
    if half.store_timestamp > started || now - half.store_timestamp < timeout {
        return Err(Step::EndRound);
    }
    // A message's own immunity, counted on the broker's clock (its born time is the
    // producer's).
    if properties::get(half.properties, halves::CHECK_IMMUNITY).is_some()
        && now - half.store_timestamp < halves::immunity_ms(half.properties, timeout)
    {
        return Ok(None);
    }
    let checks = transactions.window.borrow().checks(offset);
    if u32::from(checks) >= broker.config.transactions.check_max {
        discard(broker, transactions, &half, checks).await;
        return Ok(Some(false));
    }
    let sent = send_check(broker, &half, peers);
    transactions.count(|figures| {
        if sent {
            figures.checks_sent += 1;
        } else {
            figures.checks_unsent += 1;
        }
    });
    transactions.window.borrow_mut().count_check(offset);
    Ok(Some(true))
}

/// Moves a half past its last check to TRANS_CHECK_MAX_TIME_TOPIC and resolves it; on a
/// store error it stays undecided and the next round tries again.
async fn discard(broker: &Broker, transactions: &Transactions, half: &RecordView<'_>, checks: u8) {
    let offset = half.queue_offset as u64;
    if transactions.window.borrow_mut().resolve(offset) != super::Resolution::Resolved {
        return;
    }
    let queue = crate::shard::routing::queue_of_shard(
        CHECK_MAX_TOPIC,
        broker.shard().id(),
        broker.shard().count(),
    );
    let copy = halves::discarded(half, queue, checks);
    let stored = match crate::broker::requests::send::ensure_system_topic(
        broker,
        CHECK_MAX_TOPIC,
        broker.shard().count() as u32,
    ) {
        Ok(()) => super::stored_or_error(broker.store().put(copy).await),
        Err(why) => Err((0, why.to_string())),
    };
    let stored = match stored {
        Ok(()) => super::put_ops(broker, transactions, halves::DECIDED_TAG, &[offset]).await,
        Err(error) => Err(error),
    };
    match stored {
        Ok(()) => {
            transactions.count(|figures| figures.discarded += 1);
            tracing::warn!(
                shard = broker.shard().id(),
                half = offset,
                checks,
                "a half message still undecided after its last check was moved to TRANS_CHECK_MAX_TIME_TOPIC"
            );
        }
        Err((_, why)) => {
            transactions.window.borrow_mut().unresolve(offset);
            tracing::warn!(half = offset, "a half message past its checks stays: {why}");
        }
    }
}

/// Sends CHECK_TRANSACTION_STATE for `half` to one live connection of its producer group
/// (spread over the group's connections by half offset); false when there is none.
fn send_check(
    broker: &Broker,
    half: &RecordView<'_>,
    peers: &mut HashMap<String, Vec<SocketAddr>>,
) -> bool {
    let group = properties::get(half.properties, halves::PGROUP).unwrap_or("");
    let connections = peers.entry(group.to_owned()).or_insert_with(|| {
        broker
            .groups()
            .producer_connections(group)
            .unwrap_or_default()
            .into_iter()
            .map(|connection| connection.peer)
            .collect()
    });
    if connections.is_empty() {
        return false;
    }
    let Ok(command) = check_command(broker, half) else {
        return false;
    };
    let first = half.queue_offset as usize % connections.len();
    (0..connections.len())
        .map(|step| connections[(first + step) % connections.len()])
        .any(|peer| broker.links.send_oneway(peer, command.clone()))
}

/// CHECK_TRANSACTION_STATE for `half` (`Broker2Client.checkProducerTransactionState`).
pub fn check_command(broker: &Broker, half: &RecordView<'_>) -> Result<RemotingCommand, String> {
    let body = halves::check_body(half).map_err(|why| why.to_string())?;
    let uniq_key = properties::get(half.properties, properties::UNIQ_KEY).unwrap_or("");
    let transaction_id =
        properties::get(half.properties, halves::TRANSACTION_ID).unwrap_or(uniq_key);
    let real_topic =
        properties::get(half.properties, crate::broker::delay::REAL_TOPIC).unwrap_or("");
    let mut fields = ExtFields::new();
    fields.insert("topic".into(), real_topic);
    fields.insert("tranStateTableOffset".into(), half.queue_offset.to_string());
    fields.insert("commitLogOffset".into(), half.phys_offset.to_string());
    fields.insert("msgId".into(), uniq_key);
    fields.insert("transactionId".into(), transaction_id);
    fields.insert(
        "offsetMsgId".into(),
        ids::offset_msg_id(broker.identity.store_host, half.phys_offset as u64),
    );
    fields.insert("bname".into(), broker.identity.broker_name.as_str());
    let mut command = RemotingCommand::request(request::CHECK_TRANSACTION_STATE, fields);
    command.body = bytes::Bytes::from(body);
    Ok(command)
}
