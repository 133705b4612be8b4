//! Value parsers: turn a value as a source gave it (TOML typed, or broker.conf and
//! command-line text) into a field's type, refusing what the type cannot hold. Range
//! checks beyond the type are the key's own (see [`super::key::Range`]).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::ValueError;
use crate::config::FlushMode;
use crate::io::IoChoice;

/// A value as a source gave it. TOML values carry their type; properties and command-line
/// values are untyped text, parsed by the key.
#[derive(Clone, Copy, Debug)]
pub(super) enum Value<'a> {
    /// Text from broker.conf, the command line or a key's default.
    Raw(&'a str),
    /// A TOML string.
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

pub(super) fn text(value: Value<'_>) -> Result<&str, ValueError> {
    match value {
        Value::Raw(s) | Value::Str(s) => Ok(s.trim()),
        Value::Int(_) => Err(wrong_type("a string", "an integer")),
        Value::Bool(_) => Err(wrong_type("a string", "a boolean")),
    }
}

pub(super) fn name(value: Value) -> Result<String, ValueError> {
    Ok(text(value)?.to_string())
}

/// `brokerId`: a whole number up to `i64::MAX`, or -1 (RocketMQ's controller-mode
/// spelling, [`super::CONTROLLER_ASSIGNED_ID`]; the relations allow it in controller mode
/// only).
pub(super) fn broker_id(value: Value) -> Result<u64, ValueError> {
    let minus_one = match &value {
        Value::Int(n) => *n == -1,
        Value::Raw(s) => s.trim() == "-1",
        Value::Str(_) | Value::Bool(_) => false,
    };
    match minus_one {
        true => Ok(super::CONTROLLER_ASSIGNED_ID),
        false => uint(value, i64::MAX as u64),
    }
}

/// A whole number, at most `max` (the field type's limit).
pub(super) fn uint(value: Value, max: u64) -> Result<u64, ValueError> {
    let number = match value {
        Value::Int(n) if n < 0 => {
            return Err(ValueError::Negative {
                given: n.to_string(),
            })
        }
        Value::Int(n) => n as u64,
        Value::Raw(s) => {
            let s = s.trim();
            match s.parse::<u64>() {
                Ok(n) => n,
                Err(_) if s.parse::<i64>().is_ok() => {
                    return Err(ValueError::Negative {
                        given: s.to_string(),
                    })
                }
                Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(ValueError::TooLarge {
                        given: s.to_string(),
                        max,
                    })
                }
                Err(_) => return Err(ValueError::refused(s, "is not a whole number")),
            }
        }
        Value::Str(_) => return Err(wrong_type("an integer", "a string")),
        Value::Bool(_) => return Err(wrong_type("an integer", "a boolean")),
    };
    if number > max {
        return Err(ValueError::TooLarge {
            given: number.to_string(),
            max,
        });
    }
    Ok(number)
}

pub(super) fn port(value: Value) -> Result<u16, ValueError> {
    match uint(value, u64::MAX)? {
        n @ 0..=65535 => Ok(n as u16),
        n => Err(ValueError::OutOfRange {
            value: n,
            range: "between 0 and 65535".into(),
        }),
    }
}

/// What `fileReservedTime` text must be.
const NOT_A_RESERVED_TIME: &str = "is not a whole number of hours or a number with s, m or h";

/// `fileReservedTime`: a whole number of hours (RocketMQ's unit, and the only form
/// broker.conf has), or, as ringmq's own finer unit, a number with `s`, `m` or `h`.
pub(super) fn reserved_time(value: Value) -> Result<Duration, ValueError> {
    const MAX_HOURS: u64 = 10 * 365 * 24;
    let hours = |n: u64| -> Result<Duration, ValueError> {
        if n > MAX_HOURS {
            return Err(ValueError::HoursTooLong { hours: n });
        }
        Ok(Duration::from_secs(n * 3600))
    };
    let text = match value {
        Value::Int(_) | Value::Raw(_) if uint(value, u64::MAX).is_ok() => {
            return hours(uint(value, u64::MAX)?)
        }
        Value::Raw(s) | Value::Str(s) => s.trim(),
        other => return uint(other, u64::MAX).and_then(hours),
    };
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(ValueError::refused(text, NOT_A_RESERVED_TIME)),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| ValueError::refused(text, NOT_A_RESERVED_TIME))?;
    let seconds = number
        .checked_mul(scale)
        .filter(|&seconds| seconds <= MAX_HOURS * 3600)
        .ok_or_else(|| ValueError::refused(text, "is more than ten years"))?;
    Ok(Duration::from_secs(seconds))
}

pub(super) fn millis(value: Value) -> Result<Duration, ValueError> {
    Ok(Duration::from_millis(uint(value, u64::MAX)?))
}

pub(super) fn flag(value: Value) -> Result<bool, ValueError> {
    match value {
        Value::Bool(b) => Ok(b),
        Value::Raw(s) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
        Value::Raw(s) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
        Value::Raw(s) => Err(ValueError::refused(s.trim(), "is not true or false")),
        Value::Str(_) => Err(wrong_type("a boolean", "a string")),
        Value::Int(_) => Err(wrong_type("a boolean", "an integer")),
    }
}

pub(super) fn ip(value: Value) -> Result<IpAddr, ValueError> {
    let s = text(value)?;
    s.parse()
        .map_err(|_| ValueError::refused(s, "is not an IP address (host names are not accepted)"))
}

/// An IP address, or nothing for an empty value.
pub(super) fn optional_ip(value: Value) -> Result<Option<IpAddr>, ValueError> {
    match text(value)?.is_empty() {
        true => Ok(None),
        false => ip(value).map(Some),
    }
}

/// `deleteWhen`: `;`-separated hours of the day, returned ascending without repeats.
pub(super) fn hours_of_day(value: Value) -> Result<Vec<u8>, ValueError> {
    let s = match value {
        Value::Int(_) => return Ok(vec![uint(value, 23)? as u8]),
        other => text(other)?,
    };
    let mut hours = Vec::new();
    for part in s.split(';') {
        let part = part.trim();
        match part.parse::<u8>() {
            Ok(h) if h <= 23 && !part.is_empty() => hours.push(h),
            _ => {
                return Err(ValueError::refused(
                    part,
                    "is not an hour of the day (00 to 23); list several with ';'",
                ))
            }
        }
    }
    hours.sort_unstable();
    hours.dedup();
    Ok(hours)
}

/// `retentionProtectedGroups`: `;`-separated consumer group names, each checked as
/// requests check a group ([`crate::broker::naming::names::validate_group`]); returned in the
/// order given without repeats. Empty text is no group.
pub(super) fn group_names(value: Value) -> Result<Vec<String>, ValueError> {
    let s = text(value)?;
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let mut groups: Vec<String> = Vec::new();
    for part in s.split(';') {
        let part = part.trim();
        if part.is_empty() {
            return Err(ValueError::refused(
                s,
                "has an empty group name; list several with ';'",
            ));
        }
        crate::broker::naming::names::validate_group(part)?;
        if !groups.iter().any(|known| known == part) {
            groups.push(part.to_string());
        }
    }
    Ok(groups)
}

/// A path; a leading `~` is `$HOME`.
pub(super) fn root_dir(value: Value) -> Result<PathBuf, ValueError> {
    let s = text(value)?;
    if s.is_empty() {
        return Err(ValueError::Missing {
            what: "must not be empty",
        });
    }
    if s == "~" || s.starts_with("~/") {
        let home = home_dir()
            .ok_or_else(|| ValueError::refused(s, "starts with ~ but HOME is not set"))?;
        return Ok(match s.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => home,
        });
    }
    Ok(PathBuf::from(s))
}

pub(super) fn flush_mode(value: Value) -> Result<FlushMode, ValueError> {
    match text(value)? {
        "SYNC_FLUSH" => Ok(FlushMode::Sync),
        "ASYNC_FLUSH" => Ok(FlushMode::Async),
        other => Err(ValueError::refused(
            other,
            "is not one of SYNC_FLUSH, ASYNC_FLUSH",
        )),
    }
}

fn wrong_type(expected: &'static str, found: &'static str) -> ValueError {
    ValueError::WrongType { expected, found }
}

pub(super) fn io_name(choice: IoChoice) -> &'static str {
    match choice {
        IoChoice::Auto => "auto",
        IoChoice::Uring => "uring",
        IoChoice::Portable => "portable",
    }
}

pub(super) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_by_type() {
        assert_eq!(uint(Value::Raw(" 42 "), 100), Ok(42));
        assert!(uint(Value::Raw("-1"), 100)
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(uint(Value::Int(-1), 100)
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(uint(Value::Raw("1k"), 100)
            .unwrap_err()
            .to_string()
            .contains("not a whole number"));
        assert!(uint(Value::Raw("101"), 100)
            .unwrap_err()
            .to_string()
            .contains("at most 100"));
        assert!(uint(Value::Raw("99999999999999999999999"), 100)
            .unwrap_err()
            .to_string()
            .contains("too large"));
        assert!(uint(Value::Str("5"), 100)
            .unwrap_err()
            .to_string()
            .contains("found a string"));
        assert_eq!(flag(Value::Raw("TRUE")), Ok(true));
        assert!(flag(Value::Raw("yes")).is_err());
        assert_eq!(hours_of_day(Value::Raw("04;03; 04")), Ok(vec![3, 4]));
        assert!(hours_of_day(Value::Raw("24")).is_err());
        assert!(hours_of_day(Value::Raw("03;")).is_err());
        assert_eq!(port(Value::Raw("0")), Ok(0));
        assert!(port(Value::Raw("65536")).is_err());
        assert!(ip(Value::Raw("broker.local"))
            .unwrap_err()
            .to_string()
            .contains("not an IP"));
        assert_eq!(flush_mode(Value::Raw("SYNC_FLUSH")), Ok(FlushMode::Sync));
        assert_eq!(
            group_names(Value::Raw(" CG_a; %RETRY%CG_b ;CG_a")),
            Ok(vec!["CG_a".to_string(), "%RETRY%CG_b".to_string()])
        );
        assert_eq!(group_names(Value::Str("")), Ok(vec![]));
        assert!(group_names(Value::Raw("CG_a;"))
            .unwrap_err()
            .to_string()
            .contains("empty group name"));
        assert!(group_names(Value::Raw("CG a"))
            .unwrap_err()
            .to_string()
            .contains("character ' '"));
        assert!(group_names(Value::Int(3))
            .unwrap_err()
            .to_string()
            .contains("found an integer"));
        assert!(flush_mode(Value::Raw("sync")).is_err());
    }
}
