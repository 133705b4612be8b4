//! Settings derived from a [`NodeConfig`] by pure functions: one shard's store settings,
//! one shard's broker settings, the limits of one connection, and the metrics endpoint's
//! bounds. The few settings in
//! them that are not keys are named constants of the module that uses them.

use std::net::SocketAddr;

use super::{NodeConfig, CQ_ENTRY_SIZE};
use crate::broker::{self, BrokerConfig};
use crate::config::StoreConfig;
use crate::metrics::http::HttpLimits;
use crate::metrics::rates::StatsCaps;
use crate::server::connection::{self, ConnectionLimits};
use crate::shard::layout;

/// The store settings of shard `shard`: directory `<store_path_root_dir>/shard-<shard>`,
/// STOREHOST `broker_ip:listen_port`, and the flush, size and limit settings.
///
/// Panics if `shard` is not below `shards`.
pub fn store_config(config: &NodeConfig, shard: u8) -> StoreConfig {
    assert!(
        shard < config.shards,
        "shard {shard} does not exist: the node has {} shards",
        config.shards
    );
    StoreConfig {
        dir: layout::shard_dir(&config.store_path_root_dir, shard),
        shard_id: shard,
        flush_mode: config.flush_disk_type,
        broker_role: config.broker_role,
        commit_log_segment_size: config.maped_file_size_commit_log,
        consume_queue_entries_per_file: config.maped_file_size_consume_queue / CQ_ENTRY_SIZE,
        flush_interval: config.flush_interval_commit_log,
        flush_least_pages: config.flush_commit_log_least_pages,
        flush_thorough_interval: config.flush_commit_log_thorough_interval,
        sync_flush_timeout: config.sync_flush_timeout,
        slave_timeout: config.slave_timeout,
        replica_fallbehind_max: config.ha_slave_fallbehind_max,
        checkpoint_interval: config.flush_interval_consume_queue,
        max_message_size: config.max_message_size,
        max_batch_bytes: config.max_batch_bytes,
        group_commit_max_wait: config.group_commit_max_wait,
        sync_zero_ahead_bytes: config.sync_zero_ahead_bytes,
        max_pending_puts: config.max_pending_puts,
        store_host: store_host(config),
        max_transfer_count: config.max_transfer_count,
        max_transfer_bytes: config.max_transfer_bytes,
        in_memory_window_bytes: crate::config::in_memory_window_bytes(
            config.access_message_in_memory_max_ratio,
        ),
        message_index_enable: config.message_index_enable,
        index_geometry: crate::store::index_file::Geometry {
            slots: config.max_hash_slot_num,
            entries: config.max_index_num,
        },
        retention: crate::store::retention::RetentionConfig {
            file_reserved: config.file_reserved_time,
            delete_when: config.delete_when.clone(),
            max_used_percent: config.disk_max_used_space_ratio,
            clean_forcibly_percent: config.disk_space_clean_forcibly_ratio,
            warning_percent: config.disk_space_warning_level_ratio,
            delete_batch_max: config.delete_file_batch_max,
            clean_interval: config.clean_resource_interval,
        },
        schedule_delays_ms: config.message_delay_level.as_millis().to_vec(),
    }
}

/// `broker_ip:listen_port`: the address clients reach and STOREHOST records.
pub fn store_host(config: &NodeConfig) -> SocketAddr {
    SocketAddr::new(config.broker_ip, config.listen_port)
}

/// One shard's broker settings. The node-wide `max_parked_pulls` is split evenly between
/// the shards (at least one each).
pub fn broker_config(config: &NodeConfig) -> BrokerConfig {
    BrokerConfig {
        role_notices: None,
        max_suspend: broker::MAX_SUSPEND,
        max_parked_pulls: per_shard(config.max_parked_pulls, config.shards),
        max_heartbeat_subscriptions: config.max_heartbeat_subscriptions,
        max_subscription_expression_bytes: config.max_subscription_expression_bytes,
        max_client_registrations: config.max_client_registrations,
        max_subscription_groups: config.max_subscription_groups,
        max_batch_ack_entries: config.max_batch_ack_entries,
        max_batch_ack_bitset_bytes: config.max_batch_ack_bitset_bytes,
        client_expiry: config.channel_expired_timeout,
        client_sweep_interval: config.client_sweep_interval,
        client_call_timeout: config.client_call_timeout,
        consumer_offset_flush_interval: broker::CONSUMER_OFFSET_FLUSH_INTERVAL,
        retention_protected_groups: config.retention_protected_groups.clone(),
        delay_levels: config.message_delay_level.clone(),
        delay_offset_flush_interval: config.flush_delay_offset_interval,
        timer_enabled: config.timer_wheel_enable,
        timer_max_delay_sec: config.timer_max_delay_sec,
        timer_max_pending: per_shard(
            config.timer_max_pending.min(usize::MAX as u64) as usize,
            config.shards,
        ) as u64,
        timer_limits: broker::timer::store::TimerLimits {
            buffer_entries: config.timer_memory_entries,
            ..broker::timer::store::TimerLimits::default()
        },
        schedule_delivery_window: config.schedule_delivery_window,
        slave_read_enable: config.slave_read_enable,
        transactions: broker::transaction::TransactionSettings {
            reject: config.reject_transaction_message,
            timeout: config.transaction_time_out,
            check_interval: config.transaction_check_interval,
            check_max: config.transaction_check_max,
        },
    }
}

/// The Prometheus endpoint's bounds.
pub fn http_limits(config: &NodeConfig) -> HttpLimits {
    HttpLimits {
        header_timeout: config.metrics_idle_timeout,
        max_connections: config.metrics_max_connections,
        ..HttpLimits::default()
    }
}

/// Topics and (group, topic) pairs each shard keeps figures for.
pub fn stats_caps(config: &NodeConfig) -> StatsCaps {
    StatsCaps {
        topics: config.metrics_max_topics,
        groups: config.metrics_max_groups,
    }
}

/// A node-wide bound's share for each of `shards` shards (at least 1).
fn per_shard(node_wide: usize, shards: u8) -> usize {
    (node_wide / shards.max(1) as usize).max(1)
}

/// The limits of one connection (broker and name-server listeners alike).
pub fn connection_limits(config: &NodeConfig) -> ConnectionLimits {
    ConnectionLimits {
        max_frame_len: config.max_frame_size,
        read_buffer: connection::READ_BUFFER,
        body_send: config.body_send,
        max_requests_in_flight: config.max_requests_in_flight_per_connection,
        max_parked_requests: config.max_parked_requests_per_connection,
        max_queued_response_bytes: config.max_queued_response_bytes_per_connection,
        shard_max_requests_in_flight: per_shard(config.max_requests_in_flight, config.shards),
        shard_max_queued_response_bytes: per_shard(config.max_queued_response_bytes, config.shards),
        frame_timeout: config.frame_timeout,
        idle_timeout: config.server_channel_max_idle_time_seconds,
        warn_burst: config.connection_warn_burst,
        warn_interval: config.connection_warn_interval,
        socket_send_buffer: config.server_socket_snd_buf_size,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn connection_limits_carry_the_connection_keys() {
        let config = NodeConfig {
            max_frame_size: 1 << 20,
            max_requests_in_flight_per_connection: 7,
            max_queued_response_bytes_per_connection: 9000,
            frame_timeout: Duration::from_millis(1500),
            server_channel_max_idle_time_seconds: Duration::from_secs(5),
            ..NodeConfig::default()
        };
        let limits = connection_limits(&config);
        assert_eq!(limits.max_frame_len, 1 << 20);
        assert_eq!(limits.max_requests_in_flight, 7);
        assert_eq!(limits.max_queued_response_bytes, 9000);
        assert_eq!(limits.frame_timeout, Duration::from_millis(1500));
        assert_eq!(limits.idle_timeout, Duration::from_secs(5));
    }

    #[test]
    fn the_node_wide_backlog_bounds_are_split_between_the_shards() {
        let config = NodeConfig {
            max_requests_in_flight: 1000,
            max_queued_response_bytes: 3 << 20,
            shards: 3,
            ..NodeConfig::default()
        };
        let limits = connection_limits(&config);
        assert_eq!(
            (
                limits.shard_max_requests_in_flight,
                limits.shard_max_queued_response_bytes
            ),
            (333, 1 << 20)
        );
    }

    #[test]
    fn parked_pulls_are_split_between_the_shards() {
        let config = NodeConfig {
            max_parked_pulls: 100,
            shards: 3,
            ..NodeConfig::default()
        };
        assert_eq!(broker_config(&config).max_parked_pulls, 33);
        let config = NodeConfig {
            max_parked_pulls: 2,
            shards: 3,
            ..config
        };
        assert_eq!(broker_config(&config).max_parked_pulls, 1);
    }

    #[test]
    fn the_store_defaults_are_the_node_defaults() {
        let node = NodeConfig::default();
        let store = StoreConfig::new("/x");
        let derived = store_config(&node, 0);
        assert_eq!(store.dir, std::path::Path::new("/x"));
        assert_eq!(
            format!(
                "{:?}",
                StoreConfig {
                    dir: "/x".into(),
                    ..derived
                }
            ),
            format!("{store:?}")
        );
    }
}
