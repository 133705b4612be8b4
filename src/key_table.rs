//! One table of a RocketMQ properties file's keys, as the standalone processes read them
//! (`namesrv.conf`, `controller.conf`): the keys honoured (name, default, meaning, setter),
//! the RocketMQ keys safe to ignore (warned about by name), and those refused unless at
//! RocketMQ's default because ignoring another value would not do what the file asks. Any
//! other key is refused, naming the nearest known one ([`crate::typo::nearest`]).
//!
//! The docs render each table; [`KeyTable::missing_from`] is the check that they do.

/// One honoured key of a config `C`: its name, default and meaning (for the docs), and
/// how it is set (`Err` names what the value must be).
pub struct Key<C> {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
    pub set: fn(&mut C, &str) -> Result<(), &'static str>,
}

/// A loaded config and the warnings to log (ignored keys).
#[derive(Debug)]
pub struct Loaded<C> {
    pub config: C,
    pub warnings: Vec<String>,
}

/// The keys of one file.
pub struct KeyTable<C: 'static> {
    /// The file's name as operators know it (`namesrv.conf`), for the warnings.
    pub file: &'static str,
    pub keys: &'static [Key<C>],
    pub ignored: &'static [&'static str],
    /// (key, RocketMQ's default, why another value cannot be ignored).
    pub refused_unless_default: &'static [(&'static str, &'static str, &'static str)],
}

/// Why one key of a file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("unknown key `{key}`{}", match suggestion {
        Some(near) => format!(" (did you mean `{near}`?)"),
        None => String::new(),
    })]
    UnknownKey {
        key: String,
        suggestion: Option<&'static str>,
    },
    #[error("`{key}` = {value:?} is not {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("`{key}` = {value:?}: only RocketMQ's default {default} is accepted: it {why}")]
    Refused {
        key: &'static str,
        value: String,
        default: &'static str,
        why: &'static str,
    },
}

impl<C> KeyTable<C> {
    /// Sets one key on `target`; a warning to log for an ignored one.
    pub fn set(&self, target: &mut C, key: &str, value: &str) -> Result<Option<String>, KeyError> {
        let file = self.file;
        if let Some(known) = self.keys.iter().find(|k| k.name == key) {
            (known.set)(target, value).map_err(|expected| KeyError::BadValue {
                key: key.to_owned(),
                value: value.to_owned(),
                expected,
            })?;
            return Ok(None);
        }
        if self.ignored.contains(&key) {
            return Ok(Some(format!(
                "{file} key `{key}` is a RocketMQ setting ringmq does not use; ignored"
            )));
        }
        let refused = self.refused_unless_default.iter().find(|r| r.0 == key);
        if let Some(&(name, default, why)) = refused {
            if !value.eq_ignore_ascii_case(default) {
                return Err(KeyError::Refused {
                    key: name,
                    value: value.to_owned(),
                    default,
                    why,
                });
            }
            return Ok(Some(format!(
                "{file} key `{key}` is at RocketMQ's default; ignored"
            )));
        }
        Err(KeyError::UnknownKey {
            key: key.to_owned(),
            suggestion: self.nearest(key),
        })
    }

    /// The known key nearest to `key`, if close enough to be a typo.
    pub fn nearest(&self, key: &str) -> Option<&'static str> {
        let known = self
            .keys
            .iter()
            .map(|k| k.name)
            .chain(self.ignored.iter().copied())
            .chain(self.refused_unless_default.iter().map(|r| r.0));
        crate::typo::nearest(key, known)
    }

    /// What `doc` lacks of this table: each honoured key's row `| name | default | meaning
    /// |`, each ignored key's name, each refused key's row `| key | default | why |`.
    pub fn missing_from(&self, doc: &str) -> Vec<String> {
        let rows = self
            .keys
            .iter()
            .map(|k| format!("| `{}` | `{}` | {} |", k.name, k.default, k.meaning));
        let ignored = self.ignored.iter().map(|key| format!("`{key}`"));
        let refused = self
            .refused_unless_default
            .iter()
            .map(|(key, default, why)| format!("| `{key}` | `{default}` | {why} |"));
        rows.chain(ignored)
            .chain(refused)
            .filter(|wanted| !doc.contains(wanted.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Conf {
        port: u16,
    }

    const TABLE: KeyTable<Conf> = KeyTable {
        file: "test.conf",
        keys: &[Key {
            name: "listenPort",
            default: "1",
            meaning: "the port",
            set: |c, v| {
                c.port = v.parse().map_err(|_| "a port")?;
                Ok(())
            },
        }],
        ignored: &["rocketmqHome"],
        refused_unless_default: &[("enableFoo", "false", "asks for foo")],
    };

    #[test]
    fn each_kind_of_key_is_set_warned_refused_or_suggested() {
        let mut conf = Conf::default();
        assert!(TABLE.set(&mut conf, "listenPort", "7").unwrap().is_none());
        assert_eq!(conf.port, 7);
        let bad = TABLE
            .set(&mut conf, "listenPort", "x")
            .unwrap_err()
            .to_string();
        assert_eq!(bad, "`listenPort` = \"x\" is not a port");
        let warned = TABLE.set(&mut conf, "rocketmqHome", "/x").unwrap().unwrap();
        assert!(
            warned.starts_with("test.conf key `rocketmqHome`"),
            "{warned}"
        );
        assert!(TABLE
            .set(&mut conf, "enableFoo", "FALSE")
            .unwrap()
            .is_some());
        let refused = TABLE
            .set(&mut conf, "enableFoo", "true")
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("only RocketMQ's default false"),
            "{refused}"
        );
        let typo = TABLE
            .set(&mut conf, "listenPrt", "1")
            .unwrap_err()
            .to_string();
        assert!(typo.contains("did you mean `listenPort`"), "{typo}");
    }

    #[test]
    fn a_doc_missing_a_row_is_found() {
        let full = "| `listenPort` | `1` | the port |\n`rocketmqHome`\n\
                    | `enableFoo` | `false` | asks for foo |";
        assert!(TABLE.missing_from(full).is_empty());
        let gaps = TABLE.missing_from("`rocketmqHome`");
        assert_eq!(gaps.len(), 2, "{gaps:?}");
    }
}
