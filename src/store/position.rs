//! Typed positions and checked conversions for the store.
//!
//! Two kinds of number travel together through dispatch, recovery and the ConsumeQueue,
//! and both used to be a bare `u64`:
//!
//! - [`LogPos`]: a byte position in the shard's CommitLog offset space (D4: shard n's
//!   positions start at `n << 56`), where a record starts or ends;
//! - [`QueueOffset`]: the index of an entry in one ConsumeQueue (the message's queue
//!   offset).
//!
//! On disk both are stored as Java `long`s (an `i64`): [`LogPos::to_stored`] and
//! [`QueueOffset::to_stored`] convert with an assertion (no shard's positions reach 2^63),
//! and the `from_stored` constructors return `None` for a negative value, which only
//! damage or a bug can put there, for the caller to report as it must.
//!
//! The free functions convert between integer widths where the caller's invariant says
//! the value fits (a length in memory, a count of entries), and panic with the value and
//! the caller's location when it does not: a silent `as` would truncate or change sign.

use std::any::type_name;
use std::fmt::{self, Display};

/// A byte position in the shard's CommitLog offset space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPos(u64);

impl LogPos {
    pub const fn new(position: u64) -> LogPos {
        LogPos(position)
    }

    pub const fn get(self) -> u64 {
        self.0
    }

    /// The position `len` bytes further on.
    pub fn plus(self, len: u64) -> LogPos {
        LogPos(
            self.0.checked_add(len).unwrap_or_else(|| {
                panic!("CommitLog position {} plus {len} bytes overflows", self.0)
            }),
        )
    }

    /// As a record or ConsumeQueue entry stores it (a Java `long`).
    #[track_caller]
    pub fn to_stored(self) -> i64 {
        to_i64(self.0)
    }

    /// A stored position, or `None` if it is negative (damage, never written by us).
    pub fn from_stored(stored: i64) -> Option<LogPos> {
        u64::try_from(stored).ok().map(LogPos)
    }
}

impl Display for LogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The index of an entry in one ConsumeQueue: a message's queue offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueOffset(u64);

impl QueueOffset {
    pub const fn new(offset: u64) -> QueueOffset {
        QueueOffset(offset)
    }

    pub const fn get(self) -> u64 {
        self.0
    }

    /// As a record stores it (a Java `long`).
    #[track_caller]
    pub fn to_stored(self) -> i64 {
        to_i64(self.0)
    }

    /// A stored queue offset, or `None` if it is negative (damage, never written by us).
    pub fn from_stored(stored: i64) -> Option<QueueOffset> {
        u64::try_from(stored).ok().map(QueueOffset)
    }
}

impl Display for QueueOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// `value` as a `T` the caller's invariant says it fits; panics with the value if not.
#[track_caller]
fn fit<T, V>(value: V) -> T
where
    V: TryInto<T> + Copy + Display,
{
    match value.try_into() {
        Ok(converted) => converted,
        Err(_) => panic!("{value} does not fit a {}", type_name::<T>()),
    }
}

/// A length, index or count as a `usize` (a buffer length or a slice index).
#[track_caller]
pub(crate) fn to_usize<V: TryInto<usize> + Copy + Display>(value: V) -> usize {
    fit(value)
}

/// A length or count as a `u64` (a file position or size).
#[track_caller]
pub(crate) fn to_u64<V: TryInto<u64> + Copy + Display>(value: V) -> u64 {
    fit(value)
}

/// A value as an `i64` (a Java `long` field).
#[track_caller]
pub(crate) fn to_i64<V: TryInto<i64> + Copy + Display>(value: V) -> i64 {
    fit(value)
}

/// A value as a `u32` (a record length or an entry number).
#[track_caller]
pub(crate) fn to_u32<V: TryInto<u32> + Copy + Display>(value: V) -> u32 {
    fit(value)
}

/// A value as an `i32` (a Java `int` field).
#[track_caller]
pub(crate) fn to_i32<V: TryInto<i32> + Copy + Display>(value: V) -> i32 {
    fit(value)
}

/// A value as an `i16` (a Java `short` field).
#[track_caller]
pub(crate) fn to_i16<V: TryInto<i16> + Copy + Display>(value: V) -> i16 {
    fit(value)
}

/// A value as a `u8` (a one-byte length or an ASCII digit).
#[track_caller]
pub(crate) fn to_u8<V: TryInto<u8> + Copy + Display>(value: V) -> u8 {
    fit(value)
}

/// Java's `(int) long`: the low 32 bits of `value` (RocketMQ's tag-code filter compares
/// the tag hash truncated this way).
pub(crate) fn java_int(value: i64) -> i32 {
    let [_, _, _, _, a, b, c, d] = value.to_be_bytes();
    i32::from_be_bytes([a, b, c, d])
}

/// A duration's microseconds as a `u64`, saturating (584 554 years do not come up).
pub(crate) fn micros_u64(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_positions_round_trip_and_refuse_negatives() {
        let position = LogPos::new(1 << 56);
        assert_eq!(LogPos::from_stored(position.to_stored()), Some(position));
        assert_eq!(LogPos::from_stored(-1), None);
        assert_eq!(QueueOffset::from_stored(-20), None);
        assert_eq!(QueueOffset::new(7).to_stored(), 7);
        assert_eq!(position.plus(8).get(), (1 << 56) + 8);
    }

    #[test]
    #[should_panic(expected = "18446744073709551615 does not fit a i64")]
    fn a_position_past_the_stored_range_is_refused_with_its_value() {
        LogPos::new(u64::MAX).to_stored();
    }

    #[test]
    #[should_panic(expected = "-1 does not fit a usize")]
    fn a_negative_length_is_refused_with_its_value() {
        to_usize(-1i32);
    }
}
