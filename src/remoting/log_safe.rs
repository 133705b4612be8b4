//! Making what a peer sent safe to put in a log line, and keeping repeated warnings short.
//!
//! A peer chooses the bytes of every topic, group, key, client id and remark it sends, and
//! a refused frame's error text carries them too. Written verbatim into a log line they
//! can forge whole lines (a newline), drive the operator's terminal (an escape byte) or
//! fill the disk (a 4 MiB key). [`log_safe`] is the one way such text reaches a log:
//!
//! - Every character that is not printable (ASCII controls, DEL, the C1 controls, line
//!   and paragraph separators, bidi overrides and other format characters) is written as
//!   a Rust-style escape (`\n`, `\r`, `\t`, `\u{1b}`), and a backslash as `\\`, so the
//!   output is one line whose escapes cannot be confused with the peer's own text.
//! - At most [`LOG_SAFE_MAX_CHARS`] characters of the text are shown (or the limit given
//!   to [`log_safe_max`]); a longer one ends with `...(N bytes)`, N being its whole length.
//!   Escaping never makes the output longer than 10 bytes per shown character plus that
//!   marker, so a log line's length is bounded whatever the peer sent.
//!
//! [`WarnLimiter`] bounds how often one source (a connection, a shard's accept loop) may
//! warn: the first `burst` warnings of an interval are logged, the rest only counted, and
//! the next warning after the interval says how many were left out. It is pure: the
//! caller passes the time, so tests need no clock.

use std::fmt;
use std::time::{Duration, Instant};

/// Characters of peer text a log line shows by default.
pub const LOG_SAFE_MAX_CHARS: usize = 128;

/// `text`, escaped and truncated for a log line (see the module docs).
pub fn log_safe(text: &str) -> LogSafe<'_> {
    log_safe_max(text, LOG_SAFE_MAX_CHARS)
}

/// [`log_safe`] with a limit of `max_chars` shown characters.
pub fn log_safe_max(text: &str, max_chars: usize) -> LogSafe<'_> {
    LogSafe { text, max_chars }
}

/// Bytes a peer sent that may not be UTF-8, shown as text with each invalid sequence
/// as U+FFFD, then escaped and truncated as [`log_safe`] does.
pub fn log_safe_bytes(bytes: &[u8]) -> String {
    // Only the shown prefix is converted: a 4 MiB value costs no 4 MiB copy. Four bytes
    // per character is the most UTF-8 needs.
    let shown = &bytes[..bytes.len().min(LOG_SAFE_MAX_CHARS * 4)];
    let text = String::from_utf8_lossy(shown);
    let cut = text
        .char_indices()
        .nth(LOG_SAFE_MAX_CHARS)
        .map_or(text.len(), |(at, _)| at);
    let mut out = log_safe(&text[..cut]).to_string();
    if cut < text.len() || shown.len() < bytes.len() {
        out.push_str(&format!("...({} bytes)", bytes.len()));
    }
    out
}

/// The [`fmt::Display`] of [`log_safe`]: escapes while it writes, allocating nothing.
#[derive(Clone, Copy)]
pub struct LogSafe<'a> {
    text: &'a str,
    max_chars: usize,
}

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shown, c) in self.text.chars().enumerate() {
            if shown == self.max_chars {
                return write!(out, "...({} bytes)", self.text.len());
            }
            match c {
                '\\' => out.write_str("\\\\")?,
                '\n' => out.write_str("\\n")?,
                '\r' => out.write_str("\\r")?,
                '\t' => out.write_str("\\t")?,
                c if needs_escape(c) => write!(out, "\\u{{{:x}}}", c as u32)?,
                c => fmt::Write::write_char(out, c)?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for LogSafe<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(out, "\"{self}\"")
    }
}

/// True for a character a terminal or a log reader would not show as itself: controls,
/// Unicode format characters (bidi overrides, zero-width joiners), line and paragraph
/// separators, and noncharacters' usual suspects.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}')
}

/// What a [`WarnLimiter`] says about one warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warn {
    /// Log it.
    Log,
    /// Log it, and say that this many warnings before it were left out.
    LogAfterSuppressed(u64),
    /// Leave it out (it is counted).
    Suppress,
}

/// At most `burst` warnings per `interval`; the rest are counted and reported with the
/// next warning that is logged (see the module docs).
#[derive(Debug)]
pub struct WarnLimiter {
    burst: u32,
    interval: Duration,
    window_start: Option<Instant>,
    logged_in_window: u32,
    suppressed: u64,
}

impl WarnLimiter {
    /// A limiter logging at most `burst` warnings (at least 1) per `interval`.
    pub fn new(burst: u32, interval: Duration) -> WarnLimiter {
        WarnLimiter {
            burst: burst.max(1),
            interval,
            window_start: None,
            logged_in_window: 0,
            suppressed: 0,
        }
    }

    /// Whether a warning at `now` is logged.
    pub fn check(&mut self, now: Instant) -> Warn {
        let window_over = match self.window_start {
            None => true,
            Some(start) => now.saturating_duration_since(start) >= self.interval,
        };
        if window_over {
            self.window_start = Some(now);
            self.logged_in_window = 0;
        }
        if self.logged_in_window == self.burst {
            self.suppressed += 1;
            return Warn::Suppress;
        }
        self.logged_in_window += 1;
        assert!(
            self.logged_in_window <= self.burst,
            "{} warnings logged in a window of {}",
            self.logged_in_window,
            self.burst
        );
        match std::mem::take(&mut self.suppressed) {
            0 => Warn::Log,
            left_out => Warn::LogAfterSuppressed(left_out),
        }
    }

    /// Warnings left out and not reported yet (a connection reports them when it ends).
    pub fn take_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_is_shown_as_it_is() {
        assert_eq!(
            log_safe("TopicTest@grp_1 ü 中").to_string(),
            "TopicTest@grp_1 ü 中"
        );
        assert_eq!(log_safe("").to_string(), "");
    }

    #[test]
    fn controls_newlines_escapes_and_format_characters_are_escaped() {
        let forged = "a\nWARN forged line\r\x1b[31mred\x07\t\\u{41}\u{202e}rtl\u{2028}\u{85}\x7f";
        let shown = log_safe(forged).to_string();
        assert_eq!(
            shown,
            "a\\nWARN forged line\\r\\u{1b}[31mred\\u{7}\\t\\\\u{41}\\u{202e}rtl\\u{2028}\\u{85}\\u{7f}"
        );
        assert!(shown.chars().all(|c| !c.is_control() && !needs_escape(c)));
    }

    #[test]
    fn long_text_is_cut_at_the_limit_with_its_whole_length() {
        let long = "k".repeat(4 * 1024 * 1024);
        let shown = log_safe(&long).to_string();
        assert_eq!(shown, format!("{}...(4194304 bytes)", "k".repeat(128)));
        assert_eq!(
            log_safe_max("abcdef", 3).to_string(),
            "abc...(6 bytes)",
            "the limit counts characters"
        );
        assert_eq!(
            log_safe_max("abc", 3).to_string(),
            "abc",
            "exactly at the limit"
        );
        // The worst case: every shown character escaped.
        let hostile = "\u{1}".repeat(10_000);
        let shown = log_safe(&hostile).to_string();
        assert!(
            shown.len() <= LOG_SAFE_MAX_CHARS * 10 + 32,
            "{}",
            shown.len()
        );
        assert!(shown.ends_with("...(10000 bytes)"), "{shown}");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_lossily_and_bounded() {
        assert_eq!(log_safe_bytes(b"ok\xff\n"), "ok\u{fffd}\\n");
        let mut big = vec![b'x'; 1 << 20];
        big[0] = b'\n';
        let shown = log_safe_bytes(&big);
        assert!(shown.starts_with("\\nxxx"), "{shown}");
        assert!(shown.ends_with("...(1048576 bytes)"), "{shown}");
        assert!(shown.len() < 200, "{}", shown.len());
    }

    #[test]
    fn the_limiter_logs_a_burst_then_counts_and_reports_the_rest_next_interval() {
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let mut limiter = WarnLimiter::new(3, second);
        let first: Vec<Warn> = (0..10).map(|_| limiter.check(start)).collect();
        assert_eq!(&first[..3], &[Warn::Log; 3]);
        assert!(first[3..].iter().all(|w| *w == Warn::Suppress), "{first:?}");
        // Still inside the interval: still suppressed.
        assert_eq!(limiter.check(start + second / 2), Warn::Suppress);
        // The next interval reports the 8 left out, once.
        assert_eq!(limiter.check(start + second), Warn::LogAfterSuppressed(8));
        assert_eq!(limiter.check(start + second), Warn::Log);
        assert_eq!(limiter.check(start + second), Warn::Log);
        assert_eq!(limiter.check(start + second), Warn::Suppress);
        assert_eq!(limiter.take_suppressed(), 1);
        assert_eq!(limiter.take_suppressed(), 0);
        // A burst of 0 is taken as 1: the first warning is never lost.
        let mut one = WarnLimiter::new(0, second);
        assert_eq!(one.check(start), Warn::Log);
        assert_eq!(one.check(start), Warn::Suppress);
    }
}
