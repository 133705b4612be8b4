//! What one configuration key is: its names, its default, its range check and its doc
//! line, next to the parser and printer that move its value in and out of [`NodeConfig`].
//! The table of every key is [`super::keys::KEYS`].

use super::error::ValueError;
use super::parse::Value;
use super::NodeConfig;

/// One setting.
pub(super) struct Key {
    /// snake_case: the field, the TOML key.
    pub name: &'static str,
    /// broker.conf spellings: the canonical one first, then accepted alternatives.
    pub conf: &'static [&'static str],
    /// The broker.conf name is ringmq's own (RocketMQ has no such setting).
    pub ours: bool,
    pub default: Preset,
    pub range: Range,
    /// The doc line: what the setting means.
    pub meaning: &'static str,
    /// Parses a value into the field (refusing what its type cannot hold).
    pub set: fn(&mut NodeConfig, Value) -> Result<(), ValueError>,
    /// The field's value as a source would write it.
    pub get: fn(&NodeConfig) -> String,
}

impl Key {
    /// The key's own range check on `config`'s value; the message names the bound.
    pub fn check(&self, config: &NodeConfig) -> Result<(), ValueError> {
        match &self.range {
            Range::Parsed(_) => Ok(()),
            Range::Number(bounds) => {
                let text = (self.get)(config);
                let value = text.parse::<u64>().map_err(|_| {
                    ValueError::refused(&text, "is not a whole number (the key's printer is wrong)")
                })?;
                bounds.check(value)
            }
            Range::Rule { check, .. } => check(config),
        }
    }

    /// Sets the default on `config`. A default that cannot be worked out on this machine
    /// (no `$HOME`) leaves the field as it was, for [`NodeConfig::validate`] to report.
    ///
    /// Panics if a default does not parse: the table is wrong (a unit test catches it).
    pub fn apply_default(&self, config: &mut NodeConfig) {
        let Some(text) = self.default.text() else {
            return;
        };
        if let Err(message) = (self.set)(config, Value::Raw(&text)) {
            panic!(
                "the default of {} ('{text}') does not parse: {message}",
                self.name
            );
        }
    }

    /// The range as the docs state it.
    pub fn range_doc(&self) -> String {
        match &self.range {
            Range::Parsed(doc) | Range::Rule { doc, .. } => doc.to_string(),
            Range::Number(bounds) => bounds.describe(),
        }
    }
}

/// A key's default, in the one place it is written.
pub(super) enum Preset {
    /// The value as a source would write it; applied through the key's parser.
    Text(&'static str),
    /// A constant another module owns (the wire protocol's frame limit), printed as text.
    Constant(fn() -> String),
    /// Depends on the machine: `shown` is what the docs say; `value` is `None` when it
    /// cannot be worked out here.
    Machine {
        shown: &'static str,
        value: fn() -> Option<String>,
    },
}

impl Preset {
    /// The default as text, if this machine has one.
    pub fn text(&self) -> Option<String> {
        match self {
            Preset::Text(text) => Some(text.to_string()),
            Preset::Constant(value) => Some(value()),
            Preset::Machine { value, .. } => value(),
        }
    }

    /// The default as the docs show it.
    pub fn doc(&self) -> String {
        match self {
            Preset::Machine { shown, .. } => shown.to_string(),
            other => match other.text().unwrap_or_default() {
                text if text.is_empty() => "none".into(),
                text => format!("`{text}`"),
            },
        }
    }
}

/// What a key accepts beyond what its parser refuses.
pub(super) enum Range {
    /// The parser's own limits are the range; `doc` says what it takes.
    Parsed(&'static str),
    /// A whole number, in the unit a source writes it in (checked on the key's text).
    Number(Bounds),
    /// Any other rule on the key's own value; `doc` says what it wants.
    Rule {
        doc: &'static str,
        check: fn(&NodeConfig) -> Result<(), ValueError>,
    },
}

/// The unit of a number as a source writes it; only for messages and docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    Plain,
    Millis,
    Seconds,
    Percent,
}

impl Unit {
    fn amount(self, n: u64) -> String {
        let plural = if n == 1 { "" } else { "s" };
        match self {
            Unit::Plain => n.to_string(),
            Unit::Millis => format!("{n} ms"),
            Unit::Seconds => format!("{n} second{plural}"),
            Unit::Percent => format!("{n} (percent)"),
        }
    }
}

/// `min` to `max` (or unbounded above), a multiple of `step`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    pub min: u64,
    pub max: Option<u64>,
    pub step: u64,
    pub unit: Unit,
}

impl Bounds {
    pub const fn at_least(min: u64, unit: Unit) -> Bounds {
        Bounds {
            min,
            max: None,
            step: 1,
            unit,
        }
    }

    pub const fn between(min: u64, max: u64, unit: Unit) -> Bounds {
        Bounds {
            min,
            max: Some(max),
            step: 1,
            unit,
        }
    }

    pub const fn multiple_of(self, step: u64) -> Bounds {
        Bounds { step, ..self }
    }

    pub fn contains(&self, value: u64) -> bool {
        value >= self.min
            && self.max.is_none_or(|max| value <= max)
            && value.is_multiple_of(self.step)
    }

    pub fn check(&self, value: u64) -> Result<(), ValueError> {
        if self.contains(value) {
            Ok(())
        } else {
            Err(ValueError::OutOfRange {
                value,
                range: self.describe(),
            })
        }
    }

    /// `at least 1 ms`, `between 1 and 64`, `a multiple of 4096, at least 4096`.
    pub fn describe(&self) -> String {
        let span = match self.max {
            // The unit once, at the end: `between 10 and 95 (percent)`.
            Some(max) => format!("between {} and {}", self.min, self.unit.amount(max)),
            None => format!("at least {}", self.unit.amount(self.min)),
        };
        if self.step > 1 {
            format!("a multiple of {}, {span}", self.step)
        } else {
            span
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_describe_and_check() {
        let ms = Bounds::at_least(1, Unit::Millis);
        assert_eq!(
            ms.check(0).unwrap_err().to_string(),
            "0 must be at least 1 ms"
        );
        assert!(ms.check(1).is_ok());
        let seconds = Bounds::at_least(1, Unit::Seconds);
        assert_eq!(
            seconds.check(0).unwrap_err().to_string(),
            "0 must be at least 1 second"
        );
        let ratio = Bounds::between(10, 95, Unit::Percent);
        assert_eq!(
            ratio.check(96).unwrap_err().to_string(),
            "96 must be between 10 and 95 (percent)"
        );
        let segment = Bounds::at_least(4096, Unit::Plain).multiple_of(4096);
        assert_eq!(
            segment.check(1000).unwrap_err().to_string(),
            "1000 must be a multiple of 4096, at least 4096"
        );
        assert!(segment.check(8192).is_ok());
        assert!(segment.check(8193).is_err());
    }
}
