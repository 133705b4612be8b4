//! The `node` test binary: a node started in-process (`ringmq::node::start`) and driven
//! over its sockets, plus what it is built from on the wire: the remoting codec, the
//! in-project client and load generator, the simulated network, the node's config and its
//! metrics.
//!
//! One binary, one module per former test file (its name kept, so
//! `cargo test --test node node_pop::` selects what `--test node_pop` did). The modules run
//! in parallel threads of one process: none may change process-wide state or measure the
//! process as a whole (its RSS, its global log); such tests live in `tests/alone`.

#[path = "../common/mod.rs"]
mod common;

mod bench_delivery;
mod bench_wire;
mod client_plumbing;
mod cluster_over_sim_net;
mod controller_over_sim_net;
mod failover_over_sim_net;
mod local_node_kill;
mod metrics_count_unknown_request_codes_under_one_label;
mod metrics_endpoint_serves_scrapes_past_slow_clients;
mod net_sim;
mod node_admin_requests;
mod node_bad_input;
mod node_config;
mod node_connection_limits;
mod node_consumer_groups;
mod node_consumer_ids_changed;
mod node_consumer_offsets;
mod node_delay_levels;
mod node_delay_offsets_request;
mod node_hostile_requests;
mod node_long_polling;
mod node_metrics;
mod node_mqadmin_requests;
mod node_name_validation;
mod node_oneway_then_close;
mod node_pop;
mod node_properties_without_final_separator;
mod node_query_assignment;
mod node_query_messages;
mod node_queue_locks;
mod node_rates_and_operator_metrics;
mod node_retention;
mod node_send_and_pull;
mod node_send_back;
mod node_shards;
mod node_subscription_groups;
mod node_system_topics;
mod node_timer_messages;
mod node_timer_progress_requests;
mod node_topics_and_routes;
mod node_transactions;
mod node_zero_copy_pulls;
mod pulls_that_read_cold_data_are_sent_to_the_slave;
mod remoting_codec;
mod replication_faults;
mod replication_is_observable;
mod replication_over_sim_net;
mod slave_applies_frames_in_steps;
mod standalone_namesrv;
mod state_files_checked_on_start;
mod sync_master_answers_at_once_past_fallbehind_max;
mod tables_validated_on_load;
