//! The broker's naming facts, pure functions with no I/O and no locks: the rules for the
//! topic names, group names and queue ids requests carry ([`names`]), and message ids, the
//! offsetMsgId and UNIQ_KEY ([`ids`]). The admin CLI and the node's settings use the same
//! rules, so a name one accepts the others accept.
//!
//! May import: `crate::store::topic` (the store's topic rule) and
//! [`super::tables::topics::TopicConfig`] (a queue id is checked against a topic's
//! queues). Nothing else in the broker: every other folder imports this one.

pub mod ids;
pub mod names;
