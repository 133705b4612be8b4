//! Why a global option's value is refused by [`super::args`]: an address that is not
//! `host:port`, a timeout that is not a duration. clap prints the `Display` text after
//! the option (a usage error, exit 2, before any request); tests pin the text.

/// An address (`-n`, `-b`, `NAMESRV_ADDR`) that is not `host:port`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// `text` as given; `why` says what it lacks (`no port`, `port 0`).
    #[error("{text:?} is not host:port: {why}")]
    NotHostPort { text: String, why: &'static str },
    /// The refused address came from `NAMESRV_ADDR` (clap names only the flag).
    #[error("{0} (NAMESRV_ADDR holds it)")]
    FromEnv(Box<AddrError>),
}

/// A `--timeout` that is not `500ms`, `5s`, `2m` or a number of seconds, up to an hour.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} is not a duration (e.g. 500ms, 5s, 1m)")]
    NotANumber { text: String },
    #[error("{text:?}: unknown unit {unit:?} (ms, s or m)")]
    UnknownUnit { text: String, unit: String },
    #[error("{text:?}: a timeout between 1ms and 1h")]
    OutOfRange { text: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of each kind, as it was when the parsers returned strings.
    #[test]
    fn messages_keep_their_text() {
        let addr = AddrError::NotHostPort {
            text: "h".into(),
            why: "no port",
        };
        assert_eq!(addr.to_string(), "\"h\" is not host:port: no port");
        assert_eq!(
            AddrError::FromEnv(Box::new(addr)).to_string(),
            "\"h\" is not host:port: no port (NAMESRV_ADDR holds it)"
        );
        let text = || "5x".to_string();
        assert_eq!(
            DurationError::NotANumber { text: text() }.to_string(),
            "\"5x\" is not a duration (e.g. 500ms, 5s, 1m)"
        );
        assert_eq!(
            DurationError::UnknownUnit {
                text: text(),
                unit: "x".into()
            }
            .to_string(),
            "\"5x\": unknown unit \"x\" (ms, s or m)"
        );
        assert_eq!(
            DurationError::OutOfRange { text: text() }.to_string(),
            "\"5x\": a timeout between 1ms and 1h"
        );
    }
}
