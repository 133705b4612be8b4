//! The `process` test binary: tests that run the built `ringmq` executable as a real
//! process (`CARGO_BIN_EXE_ringmq`): SIGKILL at seeded moments and the model check of what
//! survived, clean shutdown, what `serve` prints and logs, `ringmq admin` and
//! `ringmq store verify`/`dump`, refusals at start, output into a closed pipe, and clusters of
//! standalone name servers and brokers (`common::process_cluster`).
//!
//! One binary, one module per former test file (its name kept, so
//! `cargo test --test process kill_process::` selects what `--test kill_process` did).
//! The processes these tests start are their own: each on ephemeral ports and its own
//! temporary directory, so they run side by side.

#[path = "../common/mod.rs"]
mod common;

mod a_controller_mode_group_fails_over_and_back_losing_nothing;
mod a_master_acknowledges_only_what_every_member_of_its_set_holds;
mod a_master_and_its_slave_listen_only_on_their_named_ports;
mod a_promoted_slave_keeps_its_masters_transaction_decisions;
mod a_slave_copies_its_masters_tables_and_gives_back_offsets_committed_on_it;
mod a_slave_keeps_its_masters_timer_checkpoint;
mod a_slave_serves_pop_while_its_master_is_away;
mod a_slave_with_a_bad_master_or_config_keeps_serving_and_says_why;
mod admin_acts_on_every_master_of_a_cluster;
mod admin_commands;
mod admin_shows_roles_and_each_slaves_lag;
mod admin_shows_the_controllers_and_elects_a_master;
mod an_empty_slave_copies_a_master_of_several_segments;
mod broker_registers_with_a_name_server_that_starts_late;
mod brokers_register_with_every_name_server;
mod cluster_broker_conf_refusals;
mod cluster_quick_start_configs_load;
mod failover_campaign;
mod kill_during_delay_delivery;
mod kill_during_pop;
mod kill_during_retention;
mod kill_during_timer_delivery;
mod kill_during_transactions;
mod kill_process;
mod name_servers_drop_a_broker_that_dies_or_stops;
mod namesrv_standalone;
mod network_io_where_the_kernel_refuses_io_uring;
mod node_banner;
mod node_clean_shutdown;
mod node_logs;
mod node_port_held_by_another_process;
mod old_master_restarted_as_slave_loses_its_unreplicated_tail;
mod output_into_a_closed_pipe;
mod pop_reset_survives_restarts;
mod serve_c_loads_a_broker_conf_as_mqbroker_does;
mod sync_master_answers_within_slave_timeout_when_its_slave_is_killed;
mod sync_master_killed_under_load_leaves_every_send_ok_on_its_slave;
mod three_controllers_survive_a_leader_kill;
mod timer_limits;
mod verify_and_dump;
