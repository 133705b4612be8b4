//! The node's settings as the admin requests see them: one copy for the whole node,
//! behind a lock, with a `DataVersion` bumped on every change (GET_BROKER_CONFIG answers
//! it in its `version` header, as Java's `Configuration.getDataVersionJson`).
//!
//! What is kept is the validated `NodeConfig` the node started with, with the values the
//! node actually runs with written over it at start (a port picked free, the options an
//! embedding set), and later the live updates. The broker sees it as a [`LiveConfig`], which
//! the node's config implements (`node_config/live_config.rs`): the broker does not import
//! the config module, which builds the broker's settings and so sits above it. Applying an
//! update to the tables that read the live keys is [`LiveSettings::update`]'s job, under
//! the same lock, so two updates never interleave their changes.
//!
//! Updates are not written to any file: a restart starts from the configuration again
//! (Java writes them back to its broker.conf).

use crate::sync::Locked;

use crate::broker::tables::subscription_groups::SubscriptionGroups;
use crate::broker::tables::topics::{DataVersion, TopicTable};

/// The node's configuration as the admin requests read and change it.
pub trait LiveConfig: Send + Sync + std::fmt::Debug + 'static {
    /// Every setting as `broker.conf` lines: GET_BROKER_CONFIG's body.
    fn conf_text(&self) -> String;

    /// The configuration with the properties of `text` applied (all or none), and the keys
    /// that changed (snake_case); or why the update is refused.
    fn apply(&self, text: &str) -> Result<(Box<dyn LiveConfig>, Vec<&'static str>), Refused>;

    /// `autoCreateTopicEnable`.
    fn auto_create_topic_enable(&self) -> bool;

    /// `autoCreateSubscriptionGroup`.
    fn auto_create_subscription_group(&self) -> bool;
}

/// Why UPDATE_BROKER_CONFIG is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A key that cannot change while the node runs (or that ringmq has not got).
    NotLive { key: String, why: &'static str },
    /// A live key with a value its range or a relation refuses.
    Invalid(String),
}

/// The settings of tables made before a node set its own ([`LiveSettings::unset`]): no
/// text, and every update refused.
#[derive(Debug)]
struct Unset;

impl LiveConfig for Unset {
    fn conf_text(&self) -> String {
        String::new()
    }

    fn apply(&self, _text: &str) -> Result<(Box<dyn LiveConfig>, Vec<&'static str>), Refused> {
        Err(Refused::Invalid(
            "the node has not set its settings yet".into(),
        ))
    }

    fn auto_create_topic_enable(&self) -> bool {
        false
    }

    fn auto_create_subscription_group(&self) -> bool {
        false
    }
}

#[derive(Debug)]
pub struct LiveSettings {
    state: Locked<(Box<dyn LiveConfig>, DataVersion)>,
}

impl LiveSettings {
    pub fn new(settings: Box<dyn LiveConfig>, now_ms: i64) -> LiveSettings {
        LiveSettings {
            state: Locked::new((
                settings,
                DataVersion {
                    counter: 0,
                    state_version: 0,
                    timestamp: now_ms,
                },
            )),
        }
    }

    /// Settings for tables made before a node sets its own (the node replaces them at
    /// start): no text, and every update refused.
    pub fn unset() -> LiveSettings {
        LiveSettings::new(Box::new(Unset), 0)
    }

    /// Every setting as `broker.conf` lines, and the data version as JSON.
    pub fn snapshot(&self) -> (String, String) {
        let state = self.state.lock();
        let version = serde_json::to_string(&state.1).expect("a DataVersion always serializes");
        (state.0.conf_text(), version)
    }

    /// Applies the properties of `text` (all or none) and sets the tables that read the
    /// live keys; the keys that changed (snake_case).
    pub fn update(
        &self,
        text: &str,
        now_ms: i64,
        topics: &TopicTable,
        groups: &SubscriptionGroups,
    ) -> Result<Vec<&'static str>, Refused> {
        let mut state = self.state.lock();
        let (updated, changed) = state.0.apply(text)?;
        topics.set_auto_create(updated.auto_create_topic_enable());
        groups.set_auto_create(updated.auto_create_subscription_group());
        if !changed.is_empty() {
            state.1.counter += 1;
            state.1.timestamp = now_ms;
        }
        state.0 = updated;
        Ok(changed)
    }
}
