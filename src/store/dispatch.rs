//! Dispatch: what makes one stored CommitLog record findable, its ConsumeQueue entry and
//! its IndexFile keys (D9). One function, [`dispatch_record`], for every path a record
//! reaches the log by:
//!
//! ```text
//!   appender: a released batch (append.rs)         ─┐
//!   recovery: a valid record past the safe offset  ─┼─▶ dispatch_record ─▶ ConsumeQueue entry
//!   replica: a whole record of its master's log    ─┘                    ─▶ IndexFile keys
//!            (replica.rs, D14)
//! ```
//!
//! The entry is derived from the record alone ([`DispatchRecord`]): its position and size,
//! its queue offset, and the tags code of its topic ([`super::topic::tags_code`], which
//! for the schedule and timer topics is a time computed from the store time). So the
//! entry the appender makes and the one recovery rebuilds from the log are the same bytes.
//!
//! What the callers decide, each by its own policy: which queue (the appender reserved the
//! offset in it when encoding; recovery looks it up and names the record in a refusal),
//! what a duplicate means (never expected from the appender, a poison; idempotent for
//! recovery), and what an index failure costs (the appender logs and counts it, the
//! record stays visible; recovery fails the open).

use std::io;

use super::consume_queue::{AppendOutcome, ConsumeQueue, CqEntry, QueueAppendError};
use super::position::{LogPos, QueueOffset};
use super::record::RecordView;
use super::{topic, Shared};

/// One stored record, as dispatch needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DispatchRecord<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub properties: &'a str,
    pub sys_flag: i32,
    /// Where the record starts in the CommitLog, and its length.
    pub phys_offset: LogPos,
    pub size: u32,
    pub queue_offset: QueueOffset,
    pub store_timestamp: i64,
}

impl<'a> DispatchRecord<'a> {
    /// The record at `phys_offset` read back from the log (recovery; next, a slave), or
    /// `None` if its stored queue offset is negative (no appender writes one).
    pub fn from_view(phys_offset: LogPos, view: &RecordView<'a>) -> Option<DispatchRecord<'a>> {
        Some(DispatchRecord {
            topic: view.topic,
            queue_id: view.queue_id,
            properties: view.properties,
            sys_flag: view.sys_flag,
            phys_offset,
            size: view.total_size,
            queue_offset: QueueOffset::from_stored(view.queue_offset)?,
            store_timestamp: view.store_timestamp,
        })
    }

    /// The record's ConsumeQueue entry.
    pub fn entry(&self, schedule_delays_ms: &[u64]) -> CqEntry {
        let tags_code = topic::tags_code(
            self.topic,
            self.queue_id,
            self.properties,
            self.store_timestamp,
            schedule_delays_ms,
        );
        CqEntry::for_record(self.phys_offset, self.size, tags_code)
    }
}

/// What [`dispatch_record`] did.
#[derive(Debug)]
pub(crate) struct Dispatched {
    /// Appended, or already held by the queue (a re-dispatch).
    pub entry: AppendOutcome,
    /// Then the index took the record's keys (the entries it added: 0 for keys it already
    /// held), or failed to.
    pub indexed: io::Result<usize>,
}

/// Why [`dispatch_record`] could not make a record findable.
#[derive(Debug)]
pub(crate) enum DispatchError {
    /// The queue refused the entry: its queue offset does not continue the queue.
    Queue(QueueAppendError),
    /// An empty queue could not begin at the record's queue offset
    /// ([`may_begin_queue_at`]): removing its old files failed.
    Begin {
        topic: String,
        queue_id: i32,
        queue_offset: u64,
        error: io::Error,
    },
}

impl std::fmt::Display for DispatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DispatchError::Queue(refused) => refused.fmt(f),
            DispatchError::Begin {
                topic,
                queue_id,
                queue_offset,
                error,
            } => write!(
                f,
                "consume queue {topic}/{queue_id} could not begin at queue offset \
                 {queue_offset}: {error}"
            ),
        }
    }
}

impl std::error::Error for DispatchError {}

/// Whether a queue with no entries (`empty`, its end `max`) may begin at `queue_offset`,
/// past its end. Only when the store's log lacks the shard's earlier history: it starts
/// past the shard's base because retention deleted segments, or because a replica began
/// at its master's minimum (`replica.rs`), so a queue's first record there continues
/// entries that are nowhere to be had. With the whole history a gap is damage. The one
/// rule for the appender, recovery and a replica's check of its master's records.
pub(crate) fn may_begin_queue_at(
    shared: &Shared,
    empty: bool,
    max: u64,
    queue_offset: u64,
) -> bool {
    empty && queue_offset > max && shared.log_start() > shared.config.offset_base()
}

/// Appends `record`'s entry to `queue` (its queue: the caller found it) and indexes its
/// keys (a duplicate's too: the index skips the keys it holds). An entry the queue refuses
/// (a queue offset that does not continue it) is the error, with the queue's words;
/// nothing is indexed then. An empty queue begins at the record's queue offset where
/// [`may_begin_queue_at`] allows.
pub(crate) fn dispatch_record(
    shared: &Shared,
    queue: &ConsumeQueue,
    record: &DispatchRecord<'_>,
) -> Result<Dispatched, DispatchError> {
    assert!(
        queue.topic == record.topic && queue.queue_id == record.queue_id,
        "the record at {} of {}/{} was dispatched to queue {}/{}",
        record.phys_offset,
        record.topic,
        record.queue_id,
        queue.topic,
        queue.queue_id
    );
    let (min, max) = (queue.min_offset(), queue.max_offset());
    if may_begin_queue_at(shared, min == max, max, record.queue_offset.get()) {
        queue
            .begin_at(record.queue_offset)
            .map_err(|error| DispatchError::Begin {
                topic: record.topic.to_string(),
                queue_id: record.queue_id,
                queue_offset: record.queue_offset.get(),
                error,
            })?;
    }
    let entry = queue
        .append(
            record.queue_offset,
            record.entry(&shared.config.schedule_delays_ms),
        )
        .map_err(DispatchError::Queue)?;
    Ok(Dispatched {
        entry,
        indexed: index_record(shared, record),
    })
}

/// Adds the record's keys to the index, if the store keeps one.
fn index_record(shared: &Shared, record: &DispatchRecord<'_>) -> io::Result<usize> {
    let Some(index) = &shared.index else {
        return Ok(0);
    };
    index.add_record(
        record.topic,
        record.properties,
        record.sys_flag,
        record.phys_offset,
        record.store_timestamp,
        // Read only when the entry starts a new IndexFile, which is named by it.
        || shared.clock.now_ms(),
    )
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::rc::Rc;

    use bytes::Bytes;

    use crate::clock::Clock;
    use crate::config::{FlushMode, StoreConfig};
    use crate::io::sim::{SimConfig, SimDisk};
    use crate::store::record::{self, RecordInput};
    use crate::store::topic::{SCHEDULE_TOPIC, TIMER_TOPIC};
    use crate::store::{OpenKind, Store};

    fn run<F: std::future::Future>(future: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        tokio::task::LocalSet::new().block_on(&runtime, future)
    }

    fn input(topic: &str, queue_id: i32, properties: &str) -> RecordInput {
        let body = Bytes::from_static(b"dispatched");
        RecordInput {
            topic: topic.to_string(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: record::body_crc(&body),
            body,
            properties: properties.to_string(),
        }
    }

    /// Every queue's entries, in queue order.
    fn entries(store: &Store) -> Vec<(String, i32, Vec<crate::store::consume_queue::CqEntry>)> {
        store
            .queues()
            .into_iter()
            .map(|(topic, queue_id)| {
                let entries = store.queue_entries(&topic, queue_id, 0, 64).unwrap();
                (topic, queue_id, entries)
            })
            .collect()
    }

    #[test]
    fn recovery_rebuilds_the_entries_the_appender_made() {
        let sim = SimDisk::new(SimConfig::with_seed(21));
        let config = || {
            let mut config = StoreConfig::test_min("/store");
            config.flush_mode = FlushMode::Sync;
            config
        };
        let clock = Clock::starting_at(1_800_000_000_000);
        let inputs = [
            input("Tagged", 0, "TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}"),
            input("Untagged", 1, ""),
            input(SCHEDULE_TOPIC, 2, "DELAY\u{1}3\u{2}"),
            input(TIMER_TOPIC, 0, "TIMER_OUT_MS\u{1}1800000090000\u{2}"),
            input("Tagged", 0, "TAGS\u{1}TagB\u{2}"),
        ];
        let made = run(async {
            let store = Store::open(config(), Rc::new(sim.clone()), clock)
                .await
                .unwrap();
            for outcome in store.put_all(inputs).await {
                outcome.unwrap();
            }
            entries(&store)
            // The process dies here: no clean stop, no checkpoint past the open's.
        });
        assert_eq!(made.len(), 4);
        assert_ne!(made[0].2[0].tags_code, 0, "{made:?}");
        sim.crash_now();
        sim.restart();
        run(async {
            let store = Store::open(config(), Rc::new(sim.clone()), clock)
                .await
                .unwrap();
            assert!(matches!(store.opened(), OpenKind::Recovered { .. }));
            assert_eq!(entries(&store), made);
            let found = store.lookup_keys("Tagged", "k1", 8, 0, i64::MAX).unwrap();
            assert_eq!(found.records.len(), 1);
            store.shutdown().await.unwrap();
        });
    }
}
