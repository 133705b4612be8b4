//! The node's configuration as the broker's admin requests see it: [`NodeConfig`] as a
//! [`LiveConfig`], so the broker reads and changes the live settings without importing
//! this module (which builds the broker's settings and so sits above it).

use super::live::{apply_live, broker_conf_text, Refused as LiveRefused};
use super::NodeConfig;
use crate::broker::state::live_settings::{LiveConfig, Refused};

impl LiveConfig for NodeConfig {
    fn conf_text(&self) -> String {
        broker_conf_text(self)
    }

    fn apply(&self, text: &str) -> Result<(Box<dyn LiveConfig>, Vec<&'static str>), Refused> {
        match apply_live(self, text) {
            Ok((updated, changed)) => Ok((Box::new(updated), changed)),
            Err(LiveRefused::NotLive { key, why }) => Err(Refused::NotLive { key, why }),
            Err(LiveRefused::Invalid(why)) => Err(Refused::Invalid(why)),
        }
    }

    fn auto_create_topic_enable(&self) -> bool {
        self.auto_create_topic_enable
    }

    fn auto_create_subscription_group(&self) -> bool {
        self.auto_create_subscription_group
    }
}
