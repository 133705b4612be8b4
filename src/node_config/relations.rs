//! Cross-key relations: the rules no single key's range can state. Each names the keys
//! it relates; a broken one is reported against the first of them (the key to change).
//! [`NodeConfig::validate`] checks them after every key's own range.

use super::{BrokerRole, NodeConfig, CONTROLLER_ASSIGNED_ID, FRAME_HEADER_ROOM};
use crate::config::{largest_message_for_segment, RECORD_OVERHEAD_MAX};

/// A broken relation, reported against its first key: the values that break it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelationError {
    #[error("{id} must be 0 for a master (ASYNC_MASTER, SYNC_MASTER)")]
    MasterId { id: u64 },
    #[error("0 is the master's id: a SLAVE's is above 0")]
    SlaveId,
    #[error("is empty and so is namesrv_addr: a SLAVE needs one of them to find its master")]
    SlaveWithoutMaster,
    #[error(
        "is empty: a broker in controller mode (enable_controller_mode) needs its controllers"
    )]
    ControllerModeWithoutControllers,
    #[error(
        "is -1, an id the controllers assign: it needs enable_controller_mode (a master's id \
         is 0, a SLAVE's above 0)"
    )]
    AssignedIdOutsideControllerMode,
    #[error(
        "is set: in controller mode a slave follows the master the controllers elect, and \
         learns its HA address from the name servers"
    )]
    ControllerModeFixedMaster,
    #[error(
        "is empty: a broker in controller mode registers with name servers as its role changes"
    )]
    ControllerModeWithoutNameServers,
    #[error(
        "is 0: the controllers know a broker by its address, which must stay the same \
         across its role changes; name a port"
    )]
    ControllerModePickedPort,
    #[error(
        "{timeout_ms} ms must exceed three brokerHeartbeatInterval ({interval_ms} ms): a \
         master's write lease is the timeout less two beats and must outlast one beat"
    )]
    LeaseTooShort { timeout_ms: u128, interval_ms: u128 },
    /// `port` is also the port of the key `other`.
    #[error("{port} is also {other}")]
    SamePort { port: u16, other: &'static str },
    #[error(
        "{message_size} plus {RECORD_OVERHEAD_MAX} bytes of headers must fit a {segment}-byte \
         CommitLog segment (maped_file_size_commit_log)"
    )]
    MessagePastSegment { message_size: usize, segment: u64 },
    #[error("{partial} must be at least max_frame_size ({frame}): one whole frame must fit")]
    PartialPastFrame { partial: usize, frame: usize },
    #[error(
        "{frame} must be at least max_message_size ({message_size}) + {FRAME_HEADER_ROOM} bytes of header"
    )]
    FramePastMessage { frame: usize, message_size: usize },
}

pub(super) struct Relation {
    /// The keys involved; the error names the first.
    pub keys: &'static [&'static str],
    /// The rule as the docs state it.
    pub doc: fn() -> String,
    pub check: fn(&NodeConfig) -> Result<(), RelationError>,
}

/// Every relation, in the order they are checked.
pub(super) static RELATIONS: &[Relation] = &[
    Relation {
        keys: &["broker_id", "broker_role", "enable_controller_mode"],
        doc: || {
            "a master (`ASYNC_MASTER`, `SYNC_MASTER`) has `broker_id` 0, a `SLAVE` above 0; in controller mode the controllers assign the id and choose the role, so any id goes, -1 (RocketMQ's spelling for that) included, and -1 only there".into()
        },
        check: |c| match (c.enable_controller_mode, c.broker_role, c.broker_id) {
            (true, _, _) => Ok(()),
            (false, _, CONTROLLER_ASSIGNED_ID) => {
                Err(RelationError::AssignedIdOutsideControllerMode)
            }
            (false, BrokerRole::Slave, 0) => Err(RelationError::SlaveId),
            (false, BrokerRole::Slave, _) | (false, _, 0) => Ok(()),
            (false, _, id) => Err(RelationError::MasterId { id }),
        },
    },
    Relation {
        keys: &["controller_addr", "enable_controller_mode"],
        doc: || "in controller mode `controller_addr` names the controllers".into(),
        check: |c| match c.enable_controller_mode && c.controller_addr.is_none() {
            true => Err(RelationError::ControllerModeWithoutControllers),
            false => Ok(()),
        },
    },
    Relation {
        keys: &["ha_master_address", "enable_controller_mode"],
        doc: || {
            "in controller mode `ha_master_address` is empty: the master is the elected one".into()
        },
        check: |c| match c.enable_controller_mode && c.ha_master_address.is_some() {
            true => Err(RelationError::ControllerModeFixedMaster),
            false => Ok(()),
        },
    },
    Relation {
        keys: &["listen_port", "enable_controller_mode"],
        doc: || {
            "in controller mode `listen_port` is not 0 (picked free): the controllers know the broker by its address".into()
        },
        check: |c| match c.enable_controller_mode && c.listen_port == 0 {
            true => Err(RelationError::ControllerModePickedPort),
            false => Ok(()),
        },
    },
    Relation {
        keys: &[
            "controller_heart_beat_timeout_mills",
            "broker_heartbeat_interval",
            "enable_controller_mode",
        ],
        doc: || {
            "in controller mode `controller_heart_beat_timeout_mills` exceeds three `broker_heartbeat_interval`s (the write lease is the timeout less two beats)".into()
        },
        check: |c| {
            let (timeout, interval) = (
                c.controller_heart_beat_timeout_mills,
                c.broker_heartbeat_interval,
            );
            match c.enable_controller_mode && timeout <= interval * 3 {
                true => Err(RelationError::LeaseTooShort {
                    timeout_ms: timeout.as_millis(),
                    interval_ms: interval.as_millis(),
                }),
                false => Ok(()),
            }
        },
    },
    Relation {
        keys: &["namesrv_addr", "enable_controller_mode"],
        doc: || {
            "in controller mode `namesrv_addr` names the name servers the broker registers with as its role changes".into()
        },
        check: |c| match c.enable_controller_mode && c.namesrv_addr.is_none() {
            true => Err(RelationError::ControllerModeWithoutNameServers),
            false => Ok(()),
        },
    },
    Relation {
        keys: &["ha_master_address", "broker_role", "namesrv_addr"],
        doc: || {
            "a `SLAVE` names its master (`ha_master_address`) or name servers to learn it from (`namesrv_addr`)".into()
        },
        check: |c| match c.broker_role {
            BrokerRole::Slave if c.ha_master_address.is_none() && c.namesrv_addr.is_none() => {
                Err(RelationError::SlaveWithoutMaster)
            }
            _ => Ok(()),
        },
    },
    Relation {
        keys: &[
            "ha_listen_port",
            "listen_port",
            "namesrv_port",
            "metrics_port",
        ],
        doc: || {
            "`ha_listen_port` differs from `listen_port`, `namesrv_port` and `metrics_port` (unless 0)".into()
        },
        check: |c| {
            let Some(port) = c.ha_listen_port.filter(|&p| p != 0) else {
                return Ok(());
            };
            let other = [
                (c.listen_port, "listen_port"),
                (c.namesrv_port, "namesrv_port"),
                (c.metrics_port, "metrics_port"),
            ]
            .into_iter()
            .find(|&(p, _)| p == port);
            match other {
                Some((_, other)) => Err(RelationError::SamePort { port, other }),
                None => Ok(()),
            }
        },
    },
    // Port 0 asks the system for a free port at start (tests, side-by-side runs), so it
    // never collides with another setting.
    Relation {
        keys: &["namesrv_port", "listen_port"],
        doc: || "`namesrv_port` differs from `listen_port` (unless 0)".into(),
        check: |c| {
            if c.namesrv_port != 0 && c.namesrv_port == c.listen_port {
                return Err(RelationError::SamePort {
                    port: c.namesrv_port,
                    other: "listen_port",
                });
            }
            Ok(())
        },
    },
    Relation {
        keys: &["metrics_port", "listen_port", "namesrv_port"],
        doc: || "`metrics_port` differs from `listen_port` and `namesrv_port` (unless 0)".into(),
        check: |c| {
            let port = c.metrics_port;
            let other = if port == 0 {
                None
            } else if port == c.listen_port {
                Some("listen_port")
            } else if port == c.namesrv_port {
                Some("namesrv_port")
            } else {
                None
            };
            match other {
                Some(other) => Err(RelationError::SamePort { port, other }),
                None => Ok(()),
            }
        },
    },
    Relation {
        keys: &["max_message_size", "maped_file_size_commit_log"],
        doc: || {
            format!(
                "`max_message_size` plus {RECORD_OVERHEAD_MAX} bytes of record headers fits \
                 one CommitLog segment (`maped_file_size_commit_log`)"
            )
        },
        check: |c| {
            let segment = c.maped_file_size_commit_log;
            if c.max_message_size as u64 > largest_message_for_segment(segment) {
                return Err(RelationError::MessagePastSegment {
                    message_size: c.max_message_size,
                    segment,
                });
            }
            Ok(())
        },
    },
    Relation {
        keys: &["max_partial_frame_bytes", "max_frame_size"],
        doc: || {
            "`max_partial_frame_bytes` is at least `max_frame_size`: one whole frame fits".into()
        },
        check: |c| {
            if c.max_partial_frame_bytes < c.max_frame_size {
                return Err(RelationError::PartialPastFrame {
                    partial: c.max_partial_frame_bytes,
                    frame: c.max_frame_size,
                });
            }
            Ok(())
        },
    },
    Relation {
        keys: &["max_frame_size", "max_message_size"],
        doc: || {
            format!(
                "`max_frame_size` is at least `max_message_size` + {FRAME_HEADER_ROOM} bytes \
                 of header"
            )
        },
        check: |c| {
            if c.max_frame_size < c.max_message_size + FRAME_HEADER_ROOM {
                return Err(RelationError::FramePastMessage {
                    frame: c.max_frame_size,
                    message_size: c.max_message_size,
                });
            }
            Ok(())
        },
    },
];

#[cfg(test)]
mod tests {
    use super::super::keys::find_snake;
    use super::*;

    #[test]
    fn relations_name_real_keys_and_hold_for_the_defaults() {
        let config = NodeConfig::default();
        for relation in RELATIONS {
            assert!(relation.keys.len() >= 2, "{}", (relation.doc)());
            for key in relation.keys {
                assert!(find_snake(key).is_some(), "{key}");
            }
            (relation.check)(&config).unwrap();
        }
    }

    /// The message of each broken relation, as `ringmq serve` prints it after the key.
    #[test]
    fn broken_relations_say_what_breaks_them() {
        let broken = |change: fn(&mut NodeConfig)| {
            let mut config = NodeConfig::default();
            change(&mut config);
            RELATIONS
                .iter()
                .find_map(|relation| (relation.check)(&config).err())
                .expect("a relation breaks")
                .to_string()
        };
        assert_eq!(
            broken(|c| c.broker_id = 2),
            "2 must be 0 for a master (ASYNC_MASTER, SYNC_MASTER)"
        );
        assert_eq!(
            broken(|c| c.namesrv_port = c.listen_port),
            "10911 is also listen_port"
        );
        assert_eq!(
            broken(|c| c.metrics_port = c.namesrv_port),
            "9876 is also namesrv_port"
        );
        assert_eq!(
            broken(|c| c.maped_file_size_commit_log = 8192),
            format!(
                "{} plus {RECORD_OVERHEAD_MAX} bytes of headers must fit a 8192-byte \
                 CommitLog segment (maped_file_size_commit_log)",
                NodeConfig::default().max_message_size
            )
        );
        assert_eq!(
            broken(|c| c.max_partial_frame_bytes = c.max_frame_size - 1),
            format!(
                "{} must be at least max_frame_size ({}): one whole frame must fit",
                NodeConfig::default().max_frame_size - 1,
                NodeConfig::default().max_frame_size
            )
        );
        assert_eq!(
            broken(|c| c.max_frame_size = c.max_message_size),
            format!(
                "{0} must be at least max_message_size ({0}) + {FRAME_HEADER_ROOM} bytes of header",
                NodeConfig::default().max_message_size
            )
        );
    }
}
