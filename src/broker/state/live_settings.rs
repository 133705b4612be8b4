//! The node's settings as the admin requests see them: one copy for the whole node,
//! behind a lock, with a `DataVersion` bumped on every change (GET_BROKER_CONFIG answers
//! it in its `version` header, as Java's `Configuration.getDataVersionJson`).
//!
//! What is kept is the validated `NodeConfig` the node started with, with the values the
//! node actually runs with written over it at start (a port picked free, the options an
//! embedding set), and later the live updates ([`crate::node_config::live`]). Applying an
//! update to the tables that read the live keys is [`LiveSettings::update`]'s job, under
//! the same lock, so two updates never interleave their changes.
//!
//! Updates are not written to any file: a restart starts from the configuration again
//! (Java writes them back to its broker.conf).

use crate::node_config::live::{apply_live, broker_conf_text, Refused};
use crate::node_config::NodeConfig;
use crate::sync::Locked;

use crate::broker::tables::subscription_groups::SubscriptionGroups;
use crate::broker::tables::topics::{DataVersion, TopicTable};

#[derive(Debug)]
pub struct LiveSettings {
    state: Locked<(NodeConfig, DataVersion)>,
}

impl LiveSettings {
    pub fn new(settings: NodeConfig, now_ms: i64) -> LiveSettings {
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

    /// Every setting as `broker.conf` lines, and the data version as JSON.
    pub fn snapshot(&self) -> (String, String) {
        let state = self.state.lock();
        let version = serde_json::to_string(&state.1).expect("a DataVersion always serializes");
        (broker_conf_text(&state.0), version)
    }

    /// The current settings.
    pub fn current(&self) -> NodeConfig {
        self.state.lock().0.clone()
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
        let (updated, changed) = apply_live(&state.0, text)?;
        topics.set_auto_create(updated.auto_create_topic_enable);
        groups.set_auto_create(updated.auto_create_subscription_group);
        if !changed.is_empty() {
            state.1.counter += 1;
            state.1.timestamp = now_ms;
        }
        state.0 = updated;
        Ok(changed)
    }
}
