//! Timestamps on the command line and in output: `--timestamp`, `--begin` and `--end`
//! take epoch milliseconds, RFC 3339 (`2026-12-02T10:00:00Z`,
//! `2026-12-02T11:30:00.250+01:30`) or `now`; output shows UTC as
//! `2026-12-02T10:00:00.000Z`.

use crate::clock::{civil_from_days, days_from_civil};

const DAY_MS: i64 = 86_400_000;

/// Why a text is not a timestamp; the text as given (trimmed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimestampError {
    #[error("timestamp {0:?} is too large for epoch milliseconds")]
    TooLarge(String),
    #[error(
        "bad timestamp {0:?}: expected epoch milliseconds, RFC 3339 (2026-12-02T10:00:00Z) or `now`"
    )]
    Unreadable(String),
}

/// Milliseconds since the epoch of `text`, or why it is not a timestamp. `now_ms` is what
/// `now` means.
pub fn parse_timestamp(text: &str, now_ms: i64) -> Result<i64, TimestampError> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<i64>()
            .map_err(|_| TimestampError::TooLarge(text.to_string()));
    }
    parse_rfc3339(text).ok_or_else(|| TimestampError::Unreadable(text.to_string()))
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `t`, `z` and a space for `T` are accepted.
fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = bytes.get(range)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(i64::from(year), month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut millis = 0i64;
    if bytes[at] == b'.' {
        at += 1;
        let start = at;
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return None;
        }
        // Milliseconds: the first three digits, the rest dropped.
        let mut ms = String::from_utf8_lossy(&bytes[start..at.min(start + 3)]).into_owned();
        while ms.len() < 3 {
            ms.push('0');
        }
        millis = ms.parse().ok()?;
    }
    let offset_minutes = match bytes.get(at)? {
        b'Z' | b'z' if at + 1 == bytes.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == bytes.len() && bytes[at + 3] == b':' => {
            let (hours, minutes) = (digits(at + 1..at + 3)?, digits(at + 4..at + 6)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = i64::from(hours * 60 + minutes);
            if *sign == b'-' {
                -total
            } else {
                total
            }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::from(year), month, day);
    let seconds = i64::from(hour * 3600 + minute * 60 + second.min(59));
    Some(days * DAY_MS + seconds * 1000 + millis - offset_minutes * 60_000)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (days_from_civil(next_year, next_month, 1) - days_from_civil(year, month, 1)) as u32
}

/// `ms` as UTC, `2026-12-02T10:00:00.000Z`; a negative or zero time (RocketMQ's "none")
/// is `-`.
pub fn format_utc(ms: i64) -> String {
    if ms <= 0 {
        return "-".to_owned();
    }
    let days = ms.div_euclid(DAY_MS);
    let in_day = ms.rem_euclid(DAY_MS);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (second, millis) = (in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

/// The wall clock in epoch milliseconds.
pub fn now_ms() -> i64 {
    crate::clock::Clock::system().now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn accepts_epoch_ms_rfc3339_and_now() {
        assert_eq!(parse_timestamp("now", NOW), Ok(NOW));
        assert_eq!(parse_timestamp("NOW", NOW), Ok(NOW));
        assert_eq!(parse_timestamp("0", NOW), Ok(0));
        assert_eq!(parse_timestamp("1700000000000", NOW), Ok(1_700_000_000_000));
        // 2026-12-02T10:00:00Z
        let base = 1_796_205_600_000;
        assert_eq!(parse_timestamp("2026-12-02T10:00:00Z", NOW), Ok(base));
        assert_eq!(parse_timestamp("2026-12-02t10:00:00z", NOW), Ok(base));
        assert_eq!(parse_timestamp("2026-12-02 10:00:00Z", NOW), Ok(base));
        assert_eq!(
            parse_timestamp("2026-12-02T10:00:00.25Z", NOW),
            Ok(base + 250)
        );
        assert_eq!(
            parse_timestamp("2026-12-02T10:00:00.123456Z", NOW),
            Ok(base + 123)
        );
        assert_eq!(parse_timestamp("2026-12-02T11:30:00+01:30", NOW), Ok(base));
        assert_eq!(parse_timestamp("2026-12-02T08:00:00-02:00", NOW), Ok(base));
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z", NOW), Ok(0));
        assert_eq!(
            parse_timestamp("2024-02-29T00:00:00Z", NOW),
            Ok(1_709_164_800_000)
        );
    }

    #[test]
    fn refuses_what_is_not_a_timestamp() {
        for text in [
            "",
            "yesterday",
            "-5",
            "12.5",
            "99999999999999999999",
            "2026-12-02",
            "2026-12-02T10:00:00",
            "2026-13-02T10:00:00Z",
            "2026-02-30T10:00:00Z",
            "2023-02-29T10:00:00Z",
            "2026-12-02T24:00:00Z",
            "2026-12-02T10:60:00Z",
            "2026-12-02T10:00:00.Z",
            "2026-12-02T10:00:00+0100",
            "2026-12-02T10:00:00+01:00x",
            "2026-12-02T10:00:00Zjunk",
            "2026-1a-02T10:00:00Z",
        ] {
            assert!(parse_timestamp(text, NOW).is_err(), "{text:?}");
        }
    }

    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(format_utc(1_796_205_600_000), "2026-12-02T10:00:00.000Z");
        assert_eq!(format_utc(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(format_utc(0), "-");
        assert_eq!(format_utc(-1), "-");
        for ms in [1, 86_399_999, 951_782_400_000, 4_102_444_800_000] {
            let text = format_utc(ms);
            assert_eq!(parse_timestamp(&text, NOW), Ok(ms), "{text}");
        }
    }
}
