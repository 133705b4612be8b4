//! A slave's POP state (issue 25 items 4, 6 and 7): the in-flight table follows the revive
//! log its master writes, and serves POP while the master is away.
//!
//! A slave's CommitLog is a byte copy of its master's, revive log included (D14, D16). So
//! the slave keeps its table the way its master would rebuild it after a restart: every
//! [`MARK_INTERVAL`](super::MARK_INTERVAL), and before it serves a request, it replays the
//! records appended since its last look with the replay the master's start uses
//! ([`pop_log::replay`]), and writes the replay mark from the table as a master does. A
//! promoted slave therefore starts with its master's deliveries in flight (their receipt
//! handles still acknowledge), no staler than one interval plus the replication lag, and a
//! restarted slave replays little. The floor of a queue first met in a record is the
//! group's committed offset, which the slave copies from its master
//! ([`crate::node::metadata_sync`]).
//!
//! ```text
//!   following ──(a POP, ACK or CHANGE_INVISIBLE_TIME while the master's stream is down)──▶ local
//!       ▲            catch up to the log's end first; each queue's committed offset noted
//!       │                                                                               │
//!       └──────── rebuilt from the written mark and the log ◀── the stream is up again ──┘
//! ```
//!
//! Serving locally: the slave's log only copies the master's, so what it hands out and
//! what is acknowledged on it is kept in the table only (deliveries carry no checkpoint
//! offset). Acknowledged offsets reach the master as consumer-offset commits, which the
//! slave gives back to it when it returns (`metadata_sync`); deliveries made on the slave
//! and not acknowledged there are handed out again by the master (at least once, never
//! lost). A message popped past its group's `retryMaxTimes` stays in flight on a slave
//! (the dead-letter copy is a write, the master's to make). No replay mark is written while
//! local: the table then holds what no log record says, and a mark built from it could
//! claim offsets acknowledged that a replay would not find.
//!
//! Invariants:
//! - While following, the table is a function of the replicated revive log and the
//!   committed offsets, as a master's after its restart, so the mark written from it is one
//!   its master could have written.
//! - A truncation of the slave's log (an old master's unreplicated tail cut) makes the
//!   table rebuild from the log's start: records of the cut tail never happened, and a
//!   mark written from them is replaced, not kept as "only forward".

use std::cell::Cell;
use std::rc::Rc;

use super::log::{self as pop_log, Mark, PopLogError, POP_LOG_TOPIC};
use super::{Pops, MARK_INTERVAL};
use crate::broker::Broker;
use crate::store::replica::StoreRole;

/// Where a slave's table stands against its log.
#[derive(Debug, Default)]
pub struct Follow {
    /// The log queue offset up to which records were replayed into the table.
    applied: Cell<u64>,
    /// The replica's truncation count when the table was last rebuilt.
    truncations: Cell<u64>,
    /// The table holds deliveries and acknowledgements made on this slave.
    local: Cell<bool>,
}

impl Follow {
    /// Following from `applied` (the log's end after the replay at open).
    pub fn from(applied: u64, truncations: u64) -> Follow {
        Follow {
            applied: Cell::new(applied),
            truncations: Cell::new(truncations),
            local: Cell::new(false),
        }
    }

    /// Whether the table holds what this slave did while its master was away.
    pub fn is_local(&self) -> bool {
        self.local.get()
    }
}

/// What one look at the log did.
#[derive(Debug, PartialEq, Eq)]
pub enum Looked {
    /// Records replayed since the last look.
    Followed(u64),
    /// The table was rebuilt: the stream came back, or (`from_start`) the log was
    /// truncated, so the written mark is to be replaced.
    Rebuilt { from_start: bool },
    /// Serving locally: the log is not read.
    Local,
}

/// A slave shard's following: a look every [`MARK_INTERVAL`], then the mark written from
/// the table (replaced after a truncation), and the in-flight figures.
pub async fn run(broker: Rc<Broker>, pops: Rc<Pops>) {
    loop {
        tokio::time::sleep(MARK_INTERVAL).await;
        write_mark_after_look(&broker, &pops).await;
        broker
            .metrics
            .set_pop_inflight(pops.table.borrow().inflight_by_group());
    }
}

/// At a stop: whether the caller may write the mark (a master always; a slave after a
/// last look, unless its table holds what it served on its own), the look's mark written.
pub async fn may_write_mark(broker: &Broker, pops: &Pops) -> bool {
    if broker.store.role() != StoreRole::Replica {
        return true;
    }
    write_mark_after_look(broker, pops).await;
    false
}

async fn write_mark_after_look(broker: &Broker, pops: &Pops) {
    let looked = match look(broker, pops) {
        Ok(looked) => looked,
        Err(error) => {
            tracing::error!(
                shard = broker.shard.id(),
                "cannot follow the POP log: {error}"
            );
            return;
        }
    };
    let end = broker.store.max_offset(POP_LOG_TOPIC, pops.log_queue);
    let written = match looked {
        Looked::Local => return,
        Looked::Rebuilt { from_start: true } => pops.replace_mark(end).await,
        Looked::Rebuilt { from_start: false } | Looked::Followed(_) => pops.write_mark(end).await,
    };
    if let Err(failed) = written {
        tracing::error!(shard = broker.shard.id(), "{failed}");
    }
}

/// Brings the table up to the log's end: replays what was appended since the last look,
/// rebuilds it after a truncation, and drops what was done locally once the master's
/// stream is up again. Synchronous (the store's reads, no await), so no request sees the
/// table half replayed.
pub fn look(broker: &Broker, pops: &Pops) -> Result<Looked, PopLogError> {
    let follow = &pops.follow;
    let truncations = broker.store.replica_stats().truncations;
    if follow.local.get() {
        if !broker.master_stream_up() {
            return Ok(Looked::Local);
        }
        rebuild(broker, pops, &pops.written_mark.snapshot(), truncations)?;
        tracing::info!(
            shard = broker.shard.id(),
            "the master's stream is up again: the POP state served here while it was away \
             is dropped and follows the master's log again"
        );
        return Ok(Looked::Rebuilt { from_start: false });
    }
    if truncations != follow.truncations.get() {
        rebuild(broker, pops, &Mark::default(), truncations)?;
        tracing::info!(
            shard = broker.shard.id(),
            "the log was truncated: the POP state is rebuilt from the log's start"
        );
        return Ok(Looked::Rebuilt { from_start: true });
    }
    let end = broker.store.max_offset(POP_LOG_TOPIC, pops.log_queue);
    let from = follow.applied.get();
    if end <= from {
        return Ok(Looked::Followed(0));
    }
    let offsets = broker.consumer_offsets.clone();
    let applied = pop_log::replay(
        &broker.store,
        pops.log_queue,
        from,
        &mut pops.table.borrow_mut(),
        |key| committed(&offsets, key),
    )?;
    follow.applied.set(end);
    pops.table.borrow().check();
    Ok(Looked::Followed(applied))
}

/// Starts serving on this slave: the table caught up with the log first, and each queue's
/// committed offset noted as the one it knows, so the copy of the master's offsets (up to
/// a sync interval older than its log) is not taken for a reset from outside.
pub fn serve_locally(broker: &Broker, pops: &Pops) -> Result<(), PopLogError> {
    if pops.follow.local.get() {
        return Ok(());
    }
    look(broker, pops)?;
    let mut table = pops.table.borrow_mut();
    for key in table.keys() {
        let known = broker
            .consumer_offsets
            .query(&key.group, &key.topic, key.queue_id)
            .filter(|offset| *offset >= 0)
            .map(|offset| offset as u64);
        let watermark = table.watermark(&key).expect("an open queue");
        table.open(&key, watermark).committed = known.or(Some(watermark));
    }
    pops.follow.local.set(true);
    tracing::info!(
        shard = broker.shard.id(),
        inflight = table.inflight(),
        "the master's stream is down: this slave serves POP, ACK and CHANGE_INVISIBLE_TIME \
         from its copy of the POP state until it is back"
    );
    Ok(())
}

/// Replaces the table with a replay from `mark` to the log's end.
fn rebuild(broker: &Broker, pops: &Pops, mark: &Mark, truncations: u64) -> Result<(), PopLogError> {
    let offsets = broker.consumer_offsets.clone();
    let (table, _) = pop_log::rebuild(&broker.store, pops.log_queue, mark, |key| {
        committed(&offsets, key)
    })?;
    *pops.table.borrow_mut() = table;
    let follow = &pops.follow;
    follow
        .applied
        .set(broker.store.max_offset(POP_LOG_TOPIC, pops.log_queue));
    follow.truncations.set(truncations);
    follow.local.set(false);
    Ok(())
}

/// The group's committed offset of `key`'s queue: the floor of a queue a replay meets first.
fn committed(
    offsets: &crate::broker::tables::consumer_offsets::ConsumerOffsets,
    key: &super::state::QueueKey,
) -> u64 {
    offsets
        .query(&key.group, &key.topic, key.queue_id)
        .map_or(0, |offset| offset.max(0) as u64)
}
