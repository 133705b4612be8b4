//! Why a key's value is refused: by its parser (the text cannot be the field's type) or
//! by its own range or rule (see [`super::key::Range`]). The `Display` text is the message
//! `ringmq serve` prints after the source and key ([`super::ConfigError`]); tests pin it.

use crate::broker::delay::errors::DelayLevelsError;
use crate::broker::naming::names::NameError;
use crate::config::UnknownValue;
use crate::io::UnknownIoChoice;

/// A refused value of one key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A TOML value of the wrong type: `expected a string, found an integer`.
    #[error("expected {expected}, found {found}")]
    WrongType {
        expected: &'static str,
        found: &'static str,
    },
    /// A negative number where only whole numbers fit, as given.
    #[error("{given} must not be negative")]
    Negative { given: String },
    /// A number past the field type's limit, as given.
    #[error("{given} is too large (at most {max})")]
    TooLarge { given: String, max: u64 },
    /// A number outside the key's range; `range` as the docs state it.
    #[error("{value} must be {range}")]
    OutOfRange { value: u64, range: String },
    /// `fileReservedTime` as a whole number of hours, past ten years.
    #[error("{hours} hours is more than ten years")]
    HoursTooLong { hours: u64 },
    /// Text that is not what the key takes: `'{given}' {problem}`, where `problem` says
    /// what was expected (`is not true or false`).
    #[error("'{given}' {problem}")]
    Refused {
        given: String,
        problem: &'static str,
    },
    /// Empty text where the key needs some; `what` says what (`not be empty`).
    #[error("{what}")]
    Missing { what: &'static str },
    /// A role that parses but does not run yet.
    #[error("{role} is not supported yet (replication comes later); use ASYNC_MASTER")]
    UnsupportedRole { role: &'static str },
    /// An exporter RocketMQ has and ringmq does not.
    #[error("{given} is not supported: ringmq serves PROM (its /metrics endpoint) or DISABLE")]
    UnsupportedExporter { given: String },
    /// An address clients cannot be sent to.
    #[error("{ip} cannot be advertised to clients; give the address they reach this node at")]
    NotAdvertisable { ip: std::net::IpAddr },
    /// A list that names one item twice.
    #[error("group '{group}' is listed twice")]
    Repeated { group: String },
    /// An hour number past 23 (a set value; the parser refuses such text).
    #[error("{hour} is not an hour of the day (0 to 23)")]
    NotAnHour { hour: u8 },
    /// A number whose range is in percent.
    #[error("{0} (percent)")]
    Percent(Box<ValueError>),
    /// A group name as requests check it.
    #[error(transparent)]
    Group(#[from] NameError),
    /// A choice among fixed words (`broker_role`).
    #[error(transparent)]
    Choice(#[from] UnknownValue),
    #[error(transparent)]
    Io(#[from] UnknownIoChoice),
    #[error(transparent)]
    DelayLevels(#[from] DelayLevelsError),
    #[error(transparent)]
    BodySend(#[from] crate::server::body_send::UnknownBodySend),
    #[error(transparent)]
    NetworkIo(#[from] crate::net::UnknownNetworkIo),
}

impl ValueError {
    pub(super) fn refused(given: &str, problem: &'static str) -> ValueError {
        ValueError::Refused {
            given: given.to_string(),
            problem,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of each kind, as it was when the parsers returned strings.
    #[test]
    fn messages_keep_their_text() {
        let cases = [
            (
                ValueError::WrongType {
                    expected: "a string",
                    found: "an integer",
                },
                "expected a string, found an integer",
            ),
            (
                ValueError::Negative { given: "-1".into() },
                "-1 must not be negative",
            ),
            (
                ValueError::TooLarge {
                    given: "101".into(),
                    max: 100,
                },
                "101 is too large (at most 100)",
            ),
            (
                ValueError::HoursTooLong { hours: 87601 },
                "87601 hours is more than ten years",
            ),
            (
                ValueError::refused("yes", "is not true or false"),
                "'yes' is not true or false",
            ),
            (
                ValueError::UnsupportedRole { role: "SLAVE" },
                "SLAVE is not supported yet (replication comes later); use ASYNC_MASTER",
            ),
            (
                ValueError::UnsupportedExporter {
                    given: "LOG".into(),
                },
                "LOG is not supported: ringmq serves PROM (its /metrics endpoint) or DISABLE",
            ),
            (
                ValueError::NotAdvertisable {
                    ip: "0.0.0.0".parse().unwrap(),
                },
                "0.0.0.0 cannot be advertised to clients; give the address they reach this node at",
            ),
            (
                ValueError::Repeated { group: "G".into() },
                "group 'G' is listed twice",
            ),
            (
                ValueError::NotAnHour { hour: 24 },
                "24 is not an hour of the day (0 to 23)",
            ),
            (
                ValueError::Percent(Box::new(ValueError::TooLarge {
                    given: "101".into(),
                    max: 100,
                })),
                "101 is too large (at most 100) (percent)",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
