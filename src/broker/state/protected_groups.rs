//! Protected consumer groups (`retentionProtectedGroups`): the broker's retention holds.
//!
//! What this module owns: [`ProtectedGroups`], the [`RetentionHolds`] a shard registers on
//! its store ([`protect`]) when the setting names groups. Each committed offset of a
//! protected group in the node-wide [`ConsumerOffsets`] table is a hold on that queue from
//! that offset on; the store keeps every segment holding a record at or past it while the
//! disk is below `diskSpaceCleanForciblyRatio` (`store/retention_holds.rs`), and reports
//! what forced cleanup deleted anyway, which is counted here per group
//! (`ringmq_retention_unconsumed_lost_total{group}`).
//!
//! Rules:
//! - A queue a protected group never committed an offset on is not protected: the broker
//!   cannot tell which records the group will want (it may start from the end, or never
//!   subscribe). A group's retry topic (`%RETRY%<group>`) is a queue like any other: its
//!   committed offsets hold it too.
//! - Committed offsets are read as they are in the table (a commit still to be written
//!   to `consumerOffset.json` holds already); a forced run never changes them, so a
//!   consumer behind the new minimum gets PULL_OFFSET_MOVED as without protection.
//! - The table is node-wide; each shard's store ignores the holds on queues it does not
//!   have (another shard owns them, D3), so every shard registers the same holder.
//! - No groups, no holder: retention is RocketMQ's, blind to consumers.

use std::rc::Rc;
use std::sync::Arc;

use crate::broker::tables::consumer_offsets::ConsumerOffsets;
use crate::broker::Broker;
use crate::metrics::ShardMetrics;
use crate::store::retention_holds::{Hold, RetentionHolds};

/// The retention holds of the protected consumer groups of one shard.
pub struct ProtectedGroups {
    groups: Vec<String>,
    offsets: Arc<ConsumerOffsets>,
    metrics: Arc<ShardMetrics>,
}

impl ProtectedGroups {
    /// Holds for `groups` (validated group names) from `offsets`, losses counted in
    /// `metrics` (each group's series starts at 0).
    pub fn new(
        groups: Vec<String>,
        offsets: Arc<ConsumerOffsets>,
        metrics: Arc<ShardMetrics>,
    ) -> ProtectedGroups {
        metrics.protect_groups(&groups);
        ProtectedGroups {
            groups,
            offsets,
            metrics,
        }
    }
}

impl RetentionHolds for ProtectedGroups {
    fn kind(&self) -> &'static str {
        "protected consumer group"
    }

    fn holds(&self) -> Vec<Hold> {
        self.offsets
            .committed_by(&self.groups)
            .into_iter()
            .map(|(group, topic, queue_id, offset)| Hold {
                holder: group,
                topic,
                queue_id,
                queue_offset: offset,
            })
            .collect()
    }

    fn lost(&self, hold: &Hold, messages: u64) {
        self.metrics.add_unconsumed_lost(&hold.holder, messages);
    }
}

/// Registers the broker's protected groups (its [`crate::broker::BrokerConfig`]) on its store; with
/// none, registers nothing. Call it before the first await after the store opened.
pub fn protect(broker: &Broker) {
    let groups = &broker.config.retention_protected_groups;
    if groups.is_empty() {
        return;
    }
    broker
        .store
        .add_retention_holds(Rc::new(ProtectedGroups::new(
            groups.clone(),
            broker.consumer_offsets.clone(),
            broker.metrics.clone(),
        )));
}

/// Consumer-aware retention as a shard service ([`crate::shard::service`]): the holds of
/// [`protect`], no task, nothing to do at stop.
pub fn open_service(
    broker: &Rc<Broker>,
) -> anyhow::Result<Rc<dyn crate::shard::service::ShardService>> {
    protect(broker);
    Ok(Rc::new(ProtectedGroupsService))
}

struct ProtectedGroupsService;

impl crate::shard::service::ShardService for ProtectedGroupsService {
    fn name(&self) -> &'static str {
        "consumer-aware retention"
    }
}
