//! The settings of a running node as RocketMQ's admin requests see them: every key as a
//! `broker.conf` line (GET_BROKER_CONFIG), and the few keys that change while the node
//! runs (UPDATE_BROKER_CONFIG).
//!
//! A key is live only where every reader of it looks at one shared value each time it
//! needs it, so a change is whole and immediate on every shard:
//! - `autoCreateTopicEnable`: the node-wide topic table's flag (sends and route queries);
//! - `autoCreateSubscriptionGroup`: the node-wide subscription-group table's flag.
//!
//! Every other key is read once at start into per-shard settings (stores, flushers,
//! retention, limits), so changing it live would leave shards disagreeing or a limit
//! half-applied; an update naming one is refused, naming the key. An update is all or
//! nothing: one refused key refuses the whole request, and the result is validated as a
//! start would validate it (ranges and relations) before anything changes.

use super::keys::{find_conf, find_snake, KEYS};
use super::{ConfigLoader, NodeConfig, IGNORED_ROCKETMQ_KEYS};
use crate::properties::parse_properties;

/// The keys (snake_case) UPDATE_BROKER_CONFIG may change; see the module docs for why
/// these.
pub const LIVE_KEYS: &[&str] = &["auto_create_topic_enable", "auto_create_subscription_group"];

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A key that cannot change while the node runs (or that ringmq has not got).
    NotLive { key: String, why: &'static str },
    /// A live key with a value its range or a relation refuses.
    Invalid(String),
}

/// Every setting as `broker.conf` lines (`key=value`, the canonical spelling), in the key
/// table's order: GET_BROKER_CONFIG's body, which Java's tools read as properties.
pub fn broker_conf_text(config: &NodeConfig) -> String {
    let mut text = String::new();
    for key in KEYS {
        text.push_str(key.conf[0]);
        text.push('=');
        text.push_str(&escape((key.get)(config)));
        text.push('\n');
    }
    text
}

/// A value as a properties file writes it: `\`, line breaks and leading spaces escaped.
fn escape(value: String) -> String {
    let mut out = String::with_capacity(value.len());
    for (index, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            ' ' if index == 0 => out.push_str("\\ "),
            c => out.push(c),
        }
    }
    out
}

/// `config` with the properties of `text` applied, and the keys (snake_case) they
/// changed; refused as a whole if any key is not live or the result is not valid.
pub fn apply_live(
    config: &NodeConfig,
    text: &str,
) -> Result<(NodeConfig, Vec<&'static str>), Refused> {
    for (key, _) in parse_properties(text) {
        let refuse = |why| Refused::NotLive {
            key: key.clone(),
            why,
        };
        match find_conf(&key).or_else(|| find_snake(&key)) {
            Some(def) if LIVE_KEYS.contains(&def.name) => {}
            Some(_) => {
                return Err(refuse(
                    "ringmq reads it only at start: set it in the node's configuration and restart",
                ))
            }
            None if IGNORED_ROCKETMQ_KEYS.contains(&key.as_str()) => {
                return Err(refuse("ringmq does not act on this RocketMQ setting"))
            }
            None => return Err(refuse("ringmq has no such setting")),
        }
    }
    let mut loader = ConfigLoader::from_config(config.clone());
    let mut properties = String::new();
    // Both spellings were accepted above; the loader reads broker.conf spellings only.
    for (key, value) in parse_properties(text) {
        let def = find_conf(&key).or_else(|| find_snake(&key));
        let def = def.expect("every key was found above");
        properties.push_str(&format!("{}={}\n", def.conf[0], escape(value)));
    }
    loader
        .broker_conf_str("UPDATE_BROKER_CONFIG", &properties)
        .map_err(|error| Refused::Invalid(error.to_string()))?;
    let updated = loader
        .finish()
        .map_err(|error| Refused::Invalid(error.to_string()))?;
    let changed = KEYS
        .iter()
        .filter(|key| (key.get)(config) != (key.get)(&updated))
        .map(|key| key.name)
        .collect::<Vec<_>>();
    assert!(
        changed.iter().all(|name| LIVE_KEYS.contains(name)),
        "a live update changed {changed:?}, not only live keys"
    );
    Ok((updated, changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NodeConfig {
        NodeConfig::default()
    }

    #[test]
    fn every_key_is_one_line_in_its_broker_conf_spelling() {
        let text = broker_conf_text(&config());
        assert_eq!(text.lines().count(), KEYS.len());
        assert!(text.contains("\nautoCreateTopicEnable=true\n"), "{text}");
        assert!(text.contains("\nflushDiskType=ASYNC_FLUSH\n"), "{text}");
        let parsed = parse_properties(&text);
        assert_eq!(parsed.len(), KEYS.len());
    }

    #[test]
    fn live_keys_change_and_others_are_refused_by_name() {
        let before = config();
        let (after, changed) = apply_live(&before, "autoCreateTopicEnable=false\n").unwrap();
        assert!(!after.auto_create_topic_enable);
        assert_eq!(changed, ["auto_create_topic_enable"]);
        let (_, none) = apply_live(&before, "autoCreateTopicEnable=true").unwrap();
        assert!(none.is_empty());
        match apply_live(&before, "autoCreateTopicEnable=false\nfileReservedTime=1") {
            Err(Refused::NotLive { key, .. }) => assert_eq!(key, "fileReservedTime"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            apply_live(&before, "brokerIP1=1.2.3.4"),
            Err(Refused::NotLive { .. })
        ));
        assert!(matches!(
            apply_live(&before, "noSuchKey=1"),
            Err(Refused::NotLive { .. })
        ));
        assert!(matches!(
            apply_live(&before, "autoCreateSubscriptionGroup=maybe"),
            Err(Refused::Invalid(_))
        ));
    }
}
