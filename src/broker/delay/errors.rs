//! Why a delay setting, a delayed send or a waiting record is refused. Each Display writes
//! the text users see: the config error naming the level, the send's remark, the log line
//! of a skipped delivery.

use std::fmt;

use crate::broker::naming::names::NameError;

use super::MAX_LEVELS;

/// Why a `messageDelayLevel` text does not parse; it names the level (1 first) and the item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelayLevelsError {
    NoNumber {
        level: usize,
        item: String,
    },
    NoUnit {
        level: usize,
        item: String,
    },
    UnknownUnit {
        level: usize,
        item: String,
        unit: String,
    },
    TooLong {
        level: usize,
        item: String,
    },
    NoDelay {
        level: usize,
        item: String,
    },
    NoLevels,
    TooManyLevels(usize),
}

impl fmt::Display for DelayLevelsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DelayLevelsError::NoNumber { level, item } => {
                write!(f, "level {level} '{item}' does not start with a whole number")
            }
            DelayLevelsError::NoUnit { level, item } => write!(
                f,
                "level {level} '{item}' has no unit; write s, m, h or d (or ms) after the number"
            ),
            DelayLevelsError::UnknownUnit { level, item, unit } => write!(
                f,
                "level {level} '{item}' has the unknown unit '{unit}'; the units are s, m, h, d and ms"
            ),
            DelayLevelsError::TooLong { level, item } => {
                write!(f, "level {level} '{item}' is more than 3650 days")
            }
            DelayLevelsError::NoDelay { level, item } => write!(
                f,
                "level {level} '{item}' is no delay; every level waits at least 1 ms"
            ),
            DelayLevelsError::NoLevels => {
                f.write_str("no delay levels; list at least one, e.g. '1s 5s 10s'")
            }
            DelayLevelsError::TooManyLevels(count) => {
                write!(f, "{count} delay levels; at most {MAX_LEVELS}")
            }
        }
    }
}

impl std::error::Error for DelayLevelsError {}

/// For the key table, which reports a bad value as text: the same text.
impl From<DelayLevelsError> for String {
    fn from(error: DelayLevelsError) -> String {
        error.to_string()
    }
}

/// A send's `DELAY` property that is not a whole number; its remark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotADelayLevel(pub String);

impl fmt::Display for NotADelayLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the DELAY property '{}' is not a delay level (a whole number)",
            self.0
        )
    }
}

impl std::error::Error for NotADelayLevel {}

/// Why a waiting record (delay level or timer) can never be delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undeliverable {
    NoRealTopic,
    RealTopic(NameError),
    NoRealQueue,
    TransactionHalf,
}

impl fmt::Display for Undeliverable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undeliverable::NoRealTopic => f.write_str("it has no REAL_TOPIC property"),
            Undeliverable::RealTopic(why) => write!(f, "REAL_TOPIC: {why}"),
            Undeliverable::NoRealQueue => f.write_str("its REAL_QID property is not a queue id"),
            Undeliverable::TransactionHalf => {
                f.write_str("its REAL_TOPIC is the transaction half topic")
            }
        }
    }
}

impl std::error::Error for Undeliverable {}
