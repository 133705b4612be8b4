//! A replica's check of its master's bytes before they are written (`replica.rs`): which
//! whole records a frame completes, where they end, what is left incomplete, and the
//! first record that cannot be what the master's appender wrote.
//!
//! ```text
//!   records end          at                      at + len
//!   |  incomplete (kept) |  frame                 |
//!   | rec | rec | rec ............ | rec (partial) |      → records: the whole ones
//!                                   ^ new records end, the rest kept as incomplete
//! ```
//!
//! Every whole record passes the checks recovery's scan makes (`scan.rs`: magic, size,
//! body CRC and whole-record CRC32C, its phys offset field naming its position, the same
//! sorting of decoder errors) and the one dispatch makes (its topic and queue id can have
//! a queue; its queue offset continues its queue, or begins an empty one where
//! [`super::dispatch::may_begin_queue_at`] allows). A blank record must reach its
//! segment's end, and its bytes must be zeros: it closes the segment.
//!
//! Pure: it reads the store's queues and positions but writes nothing, so a refused frame
//! changes nothing before the caller decides what to write.

use std::collections::HashMap;
use std::fmt;

use bytes::{Bytes, BytesMut};

use super::dispatch::may_begin_queue_at;
use super::position::{to_u64, to_usize, QueueOffset};
use super::record::{self, DecodeError, Decoded, RecordView, Verify, BLANK_RECORD_LEN};
use super::scan::{claims_position, stop_for, InvalidRecord, ScanStop};
use super::{topic, Shared};

/// Why a replicated record was refused: it cannot be what the master's appender wrote at
/// its position (a broken or lying peer, or bytes spliced from another log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordFault {
    /// Not a whole record: magic, size or checksum (what recovery calls invalid).
    Invalid(InvalidRecord),
    /// Written whole (its CRC32C holds) but not decodable (a text field not UTF-8).
    Inconsistent(String),
    /// Its phys offset field names another position.
    PhysOffset { stored: i64 },
    /// Its queue offset does not continue its queue.
    QueueOffset {
        topic: String,
        queue_id: i32,
        queue_offset: i64,
        expected: u64,
    },
    /// Its topic or queue id cannot have a queue.
    Undispatchable(String),
    /// A blank record whose bytes after its header are not zeros, the first at `at`.
    BlankNotZero { at: u64 },
}

impl fmt::Display for RecordFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordFault::Invalid(why) => write!(f, "invalid record: {why}"),
            RecordFault::Inconsistent(why) => write!(f, "inconsistent record: {why}"),
            RecordFault::PhysOffset { stored } => {
                write!(f, "its phys offset field says {stored}")
            }
            RecordFault::QueueOffset {
                topic,
                queue_id,
                queue_offset,
                expected,
            } => write!(
                f,
                "queue offset {queue_offset} of {topic}/{queue_id} does not continue the \
                 queue, which expects {expected}"
            ),
            RecordFault::Undispatchable(why) => write!(f, "it cannot have a queue: {why}"),
            RecordFault::BlankNotZero { at } => {
                write!(f, "blank record holds a non-zero byte at {at}")
            }
        }
    }
}

/// What a frame does to a replica's log, once written.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The incomplete bytes kept from earlier frames, then the frame: the log from `start`.
    pub buf: Bytes,
    /// Where `buf` starts: the end of the whole records before the frame.
    pub start: u64,
    /// Offsets in `buf` of the whole records the frame completes, each verified.
    pub records: Vec<usize>,
    /// Where the whole records end now (the segment's end after a blank).
    pub records_end: u64,
    /// A blank record closed the segment.
    pub closes_segment: bool,
    /// The frame ends inside that blank: the segment end it reaches.
    pub blank_until: Option<u64>,
    /// The first refused record: where it starts and why. Nothing from there on is
    /// written; `records_end` is its position.
    pub fault: Option<(u64, RecordFault)>,
}

impl Plan {
    /// The bytes left incomplete at the end (empty after a blank or a fault).
    pub fn incomplete(&self) -> Bytes {
        if self.closes_segment || self.fault.is_some() {
            return Bytes::new();
        }
        self.buf.slice(to_usize(self.records_end - self.start)..)
    }
}

/// Plans a frame at `at` that continues `incomplete` (the bytes from the whole records'
/// end `start`), in the segment ending at `segment_end` (the caller checked that the
/// frame does not cross it).
pub(crate) fn plan(
    shared: &Shared,
    start: u64,
    incomplete: &Bytes,
    frame: &Bytes,
    segment_end: u64,
) -> Plan {
    let buf = if incomplete.is_empty() {
        frame.clone()
    } else {
        let mut joined = BytesMut::with_capacity(incomplete.len() + frame.len());
        joined.extend_from_slice(incomplete);
        joined.extend_from_slice(frame);
        joined.freeze()
    };
    let mut plan = Plan {
        buf,
        start,
        records: Vec::new(),
        records_end: start,
        closes_segment: false,
        blank_until: None,
        fault: None,
    };
    walk(shared, &mut plan, segment_end);
    plan
}

/// Plans a frame at `at` that lies in the blank record that closed its segment (its
/// header came earlier; the whole records end at the segment's end, `records_end`):
/// every byte must be zero. A non-zero byte refuses the frame at `at`, nothing written.
pub(crate) fn plan_in_blank(records_end: u64, at: u64, frame: &Bytes, segment_end: u64) -> Plan {
    let end = at + to_u64(frame.len());
    let fault = first_non_zero(frame).map(|index| {
        (
            at,
            RecordFault::BlankNotZero {
                at: at + to_u64(index),
            },
        )
    });
    Plan {
        buf: frame.clone(),
        start: records_end,
        records: Vec::new(),
        records_end,
        // The blank closed the segment already; this frame only carries its zeros.
        closes_segment: true,
        blank_until: (fault.is_none() && end < segment_end).then_some(segment_end),
        fault,
    }
}

fn first_non_zero(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&byte| byte != 0)
}

/// Walks `plan.buf` record by record, filling in the plan.
fn walk(shared: &Shared, plan: &mut Plan, segment_end: u64) {
    let mut next_offsets: HashMap<(String, i32), u64> = HashMap::new();
    let buf = plan.buf.clone();
    let mut at = 0usize;
    while at < buf.len() {
        let here = plan.start + to_u64(at);
        let rest = &buf[at..];
        let checked = match record::decode(rest, Verify::Full) {
            Ok(Decoded::Record(view)) => check_record(shared, &mut next_offsets, here, &view)
                .map(|()| to_usize(view.total_size)),
            Ok(Decoded::Blank { len }) => {
                match check_blank(here, len, rest, segment_end) {
                    Ok(()) => {
                        plan.records_end = segment_end;
                        plan.closes_segment = true;
                        let received = plan.start + to_u64(buf.len());
                        plan.blank_until = (received < segment_end).then_some(segment_end);
                    }
                    Err(fault) => plan.fault = Some((here, fault)),
                }
                return;
            }
            Err(DecodeError::Truncated { needed, .. }) => {
                if here + to_u64(needed) <= segment_end {
                    // An incomplete record: the next frame goes on with it.
                    return;
                }
                Err(RecordFault::Invalid(InvalidRecord::Size(format!(
                    "a record of {needed} bytes at {here} runs past the segment end \
                     {segment_end}"
                ))))
            }
            Err(error) => Err(decode_fault(error)),
        };
        match checked {
            Ok(len) => {
                plan.records.push(at);
                at += len;
                plan.records_end = plan.start + to_u64(at);
            }
            Err(fault) => {
                plan.fault = Some((here, fault));
                return;
            }
        }
    }
}

/// The fault a decoder error makes, sorted as recovery's scan sorts it.
fn decode_fault(error: DecodeError) -> RecordFault {
    match stop_for::<()>(error) {
        ScanStop::Invalid(why) => RecordFault::Invalid(why),
        ScanStop::Inconsistent(why) => RecordFault::Inconsistent(why),
        stop @ (ScanStop::CleanEnd | ScanStop::Refused(())) => {
            unreachable!("a decoder error sorts as invalid or inconsistent, not {stop:?}")
        }
    }
}

/// A blank record at `here` of `len` bytes must reach the segment's end, and what of it
/// the frame holds past its header must be zeros.
fn check_blank(here: u64, len: u32, rest: &[u8], segment_end: u64) -> Result<(), RecordFault> {
    if here + u64::from(len) != segment_end {
        return Err(RecordFault::Invalid(InvalidRecord::Size(format!(
            "blank record of {len} bytes does not reach the segment end"
        ))));
    }
    match first_non_zero(&rest[BLANK_RECORD_LEN..]) {
        Some(index) => Err(RecordFault::BlankNotZero {
            at: here + to_u64(BLANK_RECORD_LEN + index),
        }),
        None => Ok(()),
    }
}

/// The checks a whole record must pass besides its checksums: its position, its queue,
/// its queue offset. `next_offsets` holds the offsets the frame's earlier records moved
/// their queues to.
fn check_record(
    shared: &Shared,
    next_offsets: &mut HashMap<(String, i32), u64>,
    here: u64,
    view: &RecordView<'_>,
) -> Result<(), RecordFault> {
    if !claims_position(here, view) {
        return Err(RecordFault::PhysOffset {
            stored: view.phys_offset,
        });
    }
    topic::validate_topic(view.topic)
        .map_err(|error| RecordFault::Undispatchable(error.to_string()))?;
    if view.queue_id < 0 {
        return Err(RecordFault::Undispatchable(format!(
            "queue id {} is negative",
            view.queue_id
        )));
    }
    let key = (view.topic.to_string(), view.queue_id);
    let (expected, empty) = match next_offsets.get(&key) {
        Some(&next) => (next, false),
        None => shared
            .queue(view.topic, view.queue_id)
            .map_or((0, true), |queue| {
                let (min, max) = (queue.min_offset(), queue.max_offset());
                (max, min == max)
            }),
    };
    let fault = || RecordFault::QueueOffset {
        topic: view.topic.to_string(),
        queue_id: view.queue_id,
        queue_offset: view.queue_offset,
        expected,
    };
    let offset = QueueOffset::from_stored(view.queue_offset)
        .ok_or_else(fault)?
        .get();
    if offset != expected && !may_begin_queue_at(shared, empty, expected, offset) {
        return Err(fault());
    }
    next_offsets.insert(key, offset + 1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::rc::Rc;

    use bytes::Bytes;

    use super::*;
    use crate::clock::Clock;
    use crate::config::{BrokerRole, StoreConfig};
    use crate::io::sim::{SimConfig, SimDisk};
    use crate::store::record::{encode_blank, encode_into, RecordInput};
    use crate::store::Store;

    const SEGMENT: u64 = 64 * 1024;

    fn run<F: std::future::Future>(future: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        tokio::task::LocalSet::new().block_on(&runtime, future)
    }

    async fn replica() -> Store {
        let mut config = StoreConfig::test_min("/replica");
        config.broker_role = BrokerRole::Slave;
        let disk = Rc::new(SimDisk::new(SimConfig::with_seed(3)));
        Store::open(config, disk, Clock::starting_at(0))
            .await
            .expect("open")
    }

    /// A record of queue Orders/0 at `phys` with queue offset `queue_offset`.
    fn record(queue_offset: i64, phys: i64) -> Vec<u8> {
        let body = Bytes::from_static(b"checked");
        let input = RecordInput {
            topic: "Orders".to_string(),
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: SocketAddr::from(([10, 0, 0, 1], 1)),
            store_host: SocketAddr::from(([10, 0, 0, 2], 2)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: record::body_crc(&body),
            body,
            properties: String::new(),
        };
        let mut out = Vec::new();
        encode_into(&input, queue_offset, phys, 2, &mut out).expect("encode");
        out
    }

    #[test]
    fn a_frame_ending_inside_a_header_keeps_it_incomplete() {
        run(async {
            let store = replica().await;
            let first = record(0, 0);
            let mut bytes = first.clone();
            bytes.extend_from_slice(&record(1, first.len() as i64)[..5]);
            let plan = plan(
                &store.shared,
                0,
                &Bytes::new(),
                &Bytes::from(bytes),
                SEGMENT,
            );
            assert_eq!(plan.records, vec![0]);
            assert_eq!(plan.records_end, first.len() as u64);
            assert_eq!(plan.incomplete().len(), 5);
            assert!(plan.fault.is_none());
        });
    }

    #[test]
    fn two_records_of_one_queue_in_a_frame_must_continue_each_other() {
        run(async {
            let store = replica().await;
            let first = record(0, 0);
            let mut bytes = first.clone();
            bytes.extend_from_slice(&record(0, first.len() as i64));
            let plan = plan(
                &store.shared,
                0,
                &Bytes::new(),
                &Bytes::from(bytes),
                SEGMENT,
            );
            assert_eq!(plan.records, vec![0]);
            assert!(
                matches!(
                    &plan.fault,
                    Some((at, RecordFault::QueueOffset { expected: 1, .. })) if *at == first.len() as u64
                ),
                "{:?}",
                plan.fault
            );
        });
    }

    #[test]
    fn a_record_longer_than_its_segments_rest_is_refused_before_it_completes() {
        run(async {
            let store = replica().await;
            let whole = record(0, (SEGMENT - 100) as i64);
            let plan = plan(
                &store.shared,
                SEGMENT - 100,
                &Bytes::new(),
                &Bytes::copy_from_slice(&whole[..50]),
                SEGMENT,
            );
            assert!(
                matches!(
                    plan.fault,
                    Some((_, RecordFault::Invalid(InvalidRecord::Size(_))))
                ),
                "{:?}",
                plan.fault
            );
        });
    }

    #[test]
    fn a_blank_must_reach_its_segment_end_and_hold_zeros() {
        run(async {
            let store = replica().await;
            let mut short = Vec::new();
            encode_blank(100, &mut short);
            let at = SEGMENT - 200;
            let plan_short = plan(
                &store.shared,
                at,
                &Bytes::new(),
                &Bytes::from(short),
                SEGMENT,
            );
            assert!(matches!(
                plan_short.fault,
                Some((_, RecordFault::Invalid(_)))
            ));
            let mut dirty = Vec::new();
            encode_blank(200, &mut dirty);
            dirty.extend_from_slice(&[0, 0, 9]);
            let plan_dirty = plan(
                &store.shared,
                at,
                &Bytes::new(),
                &Bytes::from(dirty),
                SEGMENT,
            );
            assert_eq!(
                plan_dirty.fault,
                Some((at, RecordFault::BlankNotZero { at: at + 10 }))
            );
            let mut clean = Vec::new();
            encode_blank(200, &mut clean);
            let plan_clean = plan(
                &store.shared,
                at,
                &Bytes::new(),
                &Bytes::from(clean),
                SEGMENT,
            );
            assert!(plan_clean.closes_segment && plan_clean.fault.is_none());
            assert_eq!(plan_clean.records_end, SEGMENT);
            assert_eq!(plan_clean.blank_until, Some(SEGMENT));
        });
    }
}
