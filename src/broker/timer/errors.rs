//! Why a timer send is refused, and why a due timer record cannot be delivered. Each
//! Display writes the text users see: the send's remark, the log line of a skipped
//! delivery.

use std::fmt;

use crate::broker::delay::errors::Undeliverable;
use crate::store::StoreError;

use super::{TIMER_DELIVER_MS, TIMER_DEL_UNIQKEY};

/// Why a send's timer properties are refused; its remark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimerRequestError {
    /// `TIMER_DEL_UNIQKEY` without the due time of the message it cancels.
    CancelWithoutDue,
    /// A timer property that is not a whole number.
    NotANumber { key: &'static str, value: String },
    /// A cancellation whose due time has already passed.
    CancelPast { due: i64, now_ms: i64 },
    /// A due time further ahead than `timerMaxDelaySec`.
    TooFar { ahead_ms: i64, max_delay_sec: u64 },
}

impl fmt::Display for TimerRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerRequestError::CancelWithoutDue => write!(
                f,
                "{TIMER_DEL_UNIQKEY} needs the due time of the message it cancels ({TIMER_DELIVER_MS})"
            ),
            TimerRequestError::NotANumber { key, value } => write!(
                f,
                "the {key} property '{value}' is not a whole number of the timer"
            ),
            TimerRequestError::CancelPast { due, now_ms } => write!(
                f,
                "a cancellation ({TIMER_DEL_UNIQKEY}) for a due time already past ({due}, now {now_ms})"
            ),
            TimerRequestError::TooFar {
                ahead_ms,
                max_delay_sec,
            } => write!(
                f,
                "the timer is due in {ahead_ms} ms, more than timerMaxDelaySec ({max_delay_sec} s) ahead"
            ),
        }
    }
}

impl std::error::Error for TimerRequestError {}

/// Why a due timer record cannot be read back or delivered.
#[derive(Debug)]
pub enum TimerRecordError {
    /// Its queue entry could not be read.
    QueueEntry(StoreError),
    /// Retention removed its queue entry.
    Gone,
    /// Its record could not be read.
    Record(StoreError),
    /// Its entry points at no record (what the decoder found, for the log).
    NoRecord(String),
    /// The record names no place to deliver to.
    Undeliverable(Undeliverable),
}

impl fmt::Display for TimerRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerRecordError::QueueEntry(error) => {
                write!(f, "cannot read its queue entry: {error}")
            }
            TimerRecordError::Gone => {
                f.write_str("its queue entry is no longer stored (retention)")
            }
            TimerRecordError::Record(error) => write!(f, "cannot read its record: {error}"),
            TimerRecordError::NoRecord(found) => {
                write!(f, "its entry points at no record: {found}")
            }
            TimerRecordError::Undeliverable(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for TimerRecordError {}
