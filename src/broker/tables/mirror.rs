//! A slave's copies of its master's tables (issue 25 item 4): what a table does with the
//! master's whole table, and the one rule that is not "take the master's": consumer
//! offsets committed on the slave.
//!
//! Each table's `mirror` method parses the master's body with the checks its own file's
//! load applies (a master is a peer: what it sends is input, and a bad body changes
//! nothing), and replaces its value when the master's differs (by data version where the
//! table has one). The slave's node copies them every `slaveMetadataSyncInterval`
//! (`node::metadata_sync`).
//!
//! Offsets committed on the slave ([`merge_offsets`]): consumers commit to the slave while
//! its master is gone (Java's client commits to any broker of the group the route names).
//! RocketMQ's slave overwrites them with the master's older offsets at its next sync, and
//! its consumers read those messages again after a switch (apache/rocketmq#7790). Here a
//! commit made on the slave is kept, over the master's, until the slave has given it to
//! the master (UPDATE_CONSUMER_OFFSET) and the master confirmed it; then the master's
//! offset is taken again, so a later reset on the master wins.

use std::collections::BTreeMap;

use crate::broker::tables::persisted_table::WriteFailed;

/// Why a master's table was not taken.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("refused the master's {table}: {why}")]
    Invalid { table: &'static str, why: String },
    #[error(transparent)]
    Write(#[from] WriteFailed),
}

impl MirrorError {
    pub fn invalid(table: &'static str, why: impl std::fmt::Display) -> MirrorError {
        MirrorError::Invalid {
            table,
            why: why.to_string(),
        }
    }
}

/// (topic, group) → queue id → offset: the consumer offset table's shape.
pub type OffsetTable = BTreeMap<(String, String), BTreeMap<i32, i64>>;

/// One offset committed on the slave and not yet given to the master: (topic, group,
/// queue id) → offset.
pub type PendingCommits = BTreeMap<(String, String, i32), i64>;

/// The slave's offset table after a sync: the master's, with every commit still pending
/// on the slave over it.
pub fn merge_offsets(master: OffsetTable, pending: &PendingCommits) -> OffsetTable {
    let mut merged = master;
    for ((topic, group, queue_id), &offset) in pending {
        merged
            .entry((topic.clone(), group.clone()))
            .or_default()
            .insert(*queue_id, offset);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, &str, i32, i64)]) -> OffsetTable {
        let mut table = OffsetTable::new();
        for &(topic, group, queue, offset) in entries {
            table
                .entry((topic.into(), group.into()))
                .or_default()
                .insert(queue, offset);
        }
        table
    }

    #[test]
    fn commits_made_on_the_slave_stay_over_the_masters_older_offsets() {
        let master = table(&[("T", "g", 0, 10), ("T", "g", 1, 20), ("U", "h", 0, 5)]);
        let pending = PendingCommits::from([
            (("T".into(), "g".into(), 1), 35),
            (("V".into(), "k".into(), 2), 7),
        ]);
        let merged = merge_offsets(master, &pending);
        assert_eq!(
            merged,
            table(&[
                ("T", "g", 0, 10),
                ("T", "g", 1, 35),
                ("U", "h", 0, 5),
                ("V", "k", 2, 7)
            ])
        );
    }

    #[test]
    fn with_nothing_pending_the_slave_takes_the_masters_table() {
        let master = table(&[("T", "g", 0, 10)]);
        assert_eq!(
            merge_offsets(master.clone(), &PendingCommits::new()),
            master
        );
    }
}
