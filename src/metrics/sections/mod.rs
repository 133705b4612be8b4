//! The feature engines' sections of the metrics page, one file each (see `SECTIONS` in
//! [`super`]): what an engine counts lives in [`super::ShardMetrics`], how it is shown here.

pub mod delay;
pub mod pop;
pub mod replication;
pub mod timer;
pub mod transactions;
