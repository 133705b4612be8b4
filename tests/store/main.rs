//! The `store` test binary: the library below the node, on the simulated and real disks:
//! the record codec, the store (put, read, index, retention, flush modes, data writes),
//! the disk backends, the failure policy, and the deterministic crash simulations of the
//! store, the node-wide tables, the POP state and the timer store.
//!
//! One binary, one module per former test file (its name kept, so
//! `cargo test --test store crash_simulation::` selects what `--test crash_simulation`
//! did). The modules run in parallel threads of one process: none may change process-wide
//! state (environment, global log subscriber, rlimits); such tests live in `tests/alone`.

#[path = "../common/mod.rs"]
mod common;

mod crash_simulation;
mod fault_poisoning;
mod group_commit_fills_batches;
mod io_backends;
mod pop_crash_simulation;
mod record_golden;
mod recovery_checks_synced_records_below_the_checkpoint;
mod recovery_refuses_undispatchable_records;
mod replica_crash_simulation;
mod replica_cut_outlives_its_caller;
mod replica_stream;
mod store_data_writes;
mod store_index;
mod store_put_and_read;
mod store_retention;
mod store_task_panic_poisons;
mod sync_flush_zero_ahead;
mod table_crash_simulation;
mod timer_store_crash_simulation;
mod transaction_crash_simulation;
