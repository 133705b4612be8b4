//! The controller's settings (`ringmq controller -c controller.conf`): RocketMQ 5's
//! `ControllerConfig` keys, read as RocketMQ reads them (Java properties), so an operator's
//! controller file works unchanged.
//!
//! What RocketMQ 5.5's controller does with its address, and so what this one does: it
//! serves everything (the brokers' requests and the Raft traffic between controllers) on
//! its own `controllerDLegerPeers` address, the entry named by `controllerDLegerSelfId`;
//! `listenPort` is not used. Three controllers therefore run on one host with nothing but
//! their peer list, and brokers' `controllerAddr` names those same addresses.
//!
//! Keys: [`KEYS`] are honoured (defaults and meanings rendered into docs/operations.md);
//! [`IGNORED_KEYS`] are RocketMQ keys whose every value is safe to ignore (thread pools,
//! Java file sizes, metrics exporters ringmq serves differently), warned about by name;
//! [`REFUSED_UNLESS_DEFAULT`] ask for something ringmq does not do and are refused unless at
//! RocketMQ's default. Any other key is refused, naming the nearest known one.
//!
//! Invariants of a loaded config: the peer list is non-empty, its ids and addresses are
//! unique, and the self id is one of them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::key_table::{KeyError, KeyTable};
use crate::properties::parse_properties;

/// One controller of the group: its id as the peer list names it (`n0`) and its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: String,
    pub addr: SocketAddr,
}

/// The settings of one controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    pub group: String,
    pub peers: Vec<Peer>,
    pub self_id: String,
    pub store_path: PathBuf,
    pub scan_not_active_broker_interval: Duration,
    pub scan_inactive_master_interval: Duration,
    pub enable_elect_unclean_master: bool,
    pub elect_master_max_retry_count: u32,
    pub notify_broker_role_changed: bool,
    /// Where the Prometheus endpoint listens (`metricsExporterType=PROM`); `None`: it
    /// serves none, and the controller opens only its peer address.
    pub metrics_endpoint: Option<SocketAddr>,
}

impl ControllerConfig {
    /// This controller's own entry of the peer list.
    pub fn self_peer(&self) -> &Peer {
        let found = self.peers.iter().find(|p| p.id == self.self_id);
        found.unwrap_or_else(|| {
            panic!(
                "controllerDLegerSelfId {} is not in the peer list {:?}: load() checks it",
                self.self_id, self.peers
            )
        })
    }

    /// The index of `id` in the peer list: the Raft node id (stable while the list is).
    pub fn node_id(&self, id: &str) -> Option<u64> {
        let index = self.peers.iter().position(|p| p.id == id)?;
        Some(index as u64)
    }
}

/// One honoured key of `controller.conf`.
pub type Key = crate::key_table::Key<Draft>;

/// A config while its keys are read: the required keys may still be missing.
#[derive(Default)]
pub struct Draft {
    group: Option<String>,
    peers: Option<Vec<Peer>>,
    self_id: Option<String>,
    store_path: Option<PathBuf>,
    scan_not_active_broker_interval_ms: Option<u64>,
    scan_inactive_master_interval_ms: Option<u64>,
    enable_elect_unclean_master: bool,
    elect_master_max_retry_count: Option<u32>,
    notify_broker_role_changed: Option<bool>,
    prometheus: bool,
    metrics_port: Option<u16>,
    metrics_host: Option<std::net::IpAddr>,
}

fn flag(value: &str) -> Result<bool, &'static str> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("true or false"),
    }
}

fn millis(value: &str) -> Result<u64, &'static str> {
    const WHAT: &str = "a whole number of milliseconds from 100 to 3600000";
    let ms: u64 = value.parse().map_err(|_| WHAT)?;
    if !(100..=3_600_000).contains(&ms) {
        return Err(WHAT);
    }
    Ok(ms)
}

fn name(value: &str) -> Result<String, &'static str> {
    const WHAT: &str = "a name of 1-127 letters, digits, '-', '_' or '.'";
    let ok = (1..=127).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(value.to_owned())
    } else {
        Err(WHAT)
    }
}

/// `n0-127.0.0.1:9878;n1-127.0.0.1:9868`: ids and addresses each unique.
pub fn parse_peers(value: &str) -> Result<Vec<Peer>, &'static str> {
    const WHAT: &str = "a `;`-separated list of id-host:port (such as \
                        n0-127.0.0.1:9878;n1-127.0.0.1:9868), ids and addresses unique";
    let mut peers: Vec<Peer> = Vec::new();
    for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry.split_once('-').ok_or(WHAT)?;
        let id = name(id.trim()).map_err(|_| WHAT)?;
        let addr: SocketAddr = addr.trim().parse().map_err(|_| WHAT)?;
        if peers.iter().any(|p| p.id == id || p.addr == addr) {
            return Err(WHAT);
        }
        peers.push(Peer { id, addr });
    }
    if peers.is_empty() {
        return Err(WHAT);
    }
    Ok(peers)
}

/// The honoured keys.
pub const KEYS: &[Key] = &[
    Key {
        name: "controllerDLegerGroup",
        default: "(required)",
        meaning: "name of the controllers' Raft group; every controller of it names the same",
        set: |d, v| {
            d.group = Some(name(v)?);
            Ok(())
        },
    },
    Key {
        name: "controllerDLegerPeers",
        default: "(required)",
        meaning: "every controller of the group as id-host:port, `;`-separated; each serves \
                  brokers and its peers on its own address (the only port it opens)",
        set: |d, v| {
            d.peers = Some(parse_peers(v)?);
            Ok(())
        },
    },
    Key {
        name: "controllerDLegerSelfId",
        default: "(required)",
        meaning: "this controller's id in controllerDLegerPeers",
        set: |d, v| {
            d.self_id = Some(name(v)?);
            Ok(())
        },
    },
    Key {
        name: "controllerStorePath",
        default: "$HOME/DledgerController",
        meaning: "directory of the controller's Raft vote, log and snapshot (ringmq's own \
                  format: a DLedger directory is refused)",
        set: |d, v| {
            if v.is_empty() {
                return Err("a directory path");
            }
            d.store_path = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Key {
        name: "scanNotActiveBrokerInterval",
        default: "200",
        meaning: "ms between the leader's scans for brokers silent past their heartbeat \
                  timeout (a dead master is replaced after such a scan; RocketMQ's 5000 \
                  would add up to 5 s to a silent master's failover, and a scan is a walk \
                  of an in-memory table)",
        set: |d, v| {
            d.scan_not_active_broker_interval_ms = Some(millis(v)?);
            Ok(())
        },
    },
    Key {
        name: "scanInactiveMasterInterval",
        default: "5000",
        meaning: "ms between the leader's scans for groups with no live master",
        set: |d, v| {
            d.scan_inactive_master_interval_ms = Some(millis(v)?);
            Ok(())
        },
    },
    Key {
        name: "enableElectUncleanMaster",
        default: "false",
        meaning: "true lets an election pick a live replica outside the SyncStateSet when no \
                  member is alive: acknowledged messages may then be lost",
        set: |d, v| {
            d.enable_elect_unclean_master = flag(v)?;
            Ok(())
        },
    },
    Key {
        name: "electMasterMaxRetryCount",
        default: "3",
        meaning: "times an election is recomputed when another change of the group was \
                  committed first",
        set: |d, v| {
            const WHAT: &str = "a whole number from 1 to 100";
            let n: u32 = v.parse().map_err(|_| WHAT)?;
            if !(1..=100).contains(&n) {
                return Err(WHAT);
            }
            d.elect_master_max_retry_count = Some(n);
            Ok(())
        },
    },
    Key {
        name: "notifyBrokerRoleChanged",
        default: "true",
        meaning: "push each election's result to the group's brokers \
                  (NOTIFY_BROKER_ROLE_CHANGED); false leaves them to their own polling",
        set: |d, v| {
            d.notify_broker_role_changed = Some(flag(v)?);
            Ok(())
        },
    },
    Key {
        name: "metricsExporterType",
        default: "DISABLE",
        meaning: "`PROM`: serve the Prometheus text endpoint (`/metrics`, `/health`) on \
                  metricsPromExporterHost:metricsPromExporterPort, a second port; `DISABLE`: \
                  none (RocketMQ's `OTLP_GRPC` and `LOG` are refused)",
        set: |d, v| {
            d.prometheus = match v.trim().to_ascii_uppercase().as_str() {
                "PROM" => true,
                "DISABLE" => false,
                _ => return Err("PROM or DISABLE"),
            };
            Ok(())
        },
    },
    Key {
        name: "metricsPromExporterPort",
        default: "5557",
        meaning: "port of the Prometheus endpoint (with metricsExporterType=PROM)",
        set: |d, v| {
            const WHAT: &str = "a port from 1 to 65535";
            let port: u16 = v.trim().parse().map_err(|_| WHAT)?;
            if port == 0 {
                return Err(WHAT);
            }
            d.metrics_port = Some(port);
            Ok(())
        },
    },
    Key {
        name: "metricsPromExporterHost",
        default: "(the host of this controller's peer address)",
        meaning: "address the Prometheus endpoint binds (with metricsExporterType=PROM)",
        set: |d, v| {
            let host = v.trim();
            if !host.is_empty() {
                d.metrics_host = Some(host.parse().map_err(|_| "an IP address")?);
            }
            Ok(())
        },
    },
];

/// RocketMQ controller keys ignored with a warning: every value is safe to ignore.
pub const IGNORED_KEYS: &[&str] = &[
    "rocketmqHome",
    "configStorePath",
    "controllerThreadPoolNums",
    "controllerRequestThreadPoolQueueCapacity",
    "mappedFileSize",
    "isProcessReadEvent",
    "metricsGrpcExporterTarget",
    "metricsGrpcExporterHeader",
    "metricGrpcExporterTimeOutInMills",
    "metricGrpcExporterIntervalInMills",
    "metricLoggingExporterIntervalInMills",
    "metricsLabel",
    "metricsInDelta",
    "configBlackList",
    // RocketMQ 5.5's controller does not use it either: it serves on its peer address.
    "listenPort",
];

/// RocketMQ controller keys refused unless at RocketMQ's default: (key, default, why).
pub const REFUSED_UNLESS_DEFAULT: &[(&str, &str, &str)] = &[(
    "controllerType",
    "DLedger",
    "asks for the jRaft controller and its jRaft* keys; ringmq's controller is one Raft \
     group configured by the controllerDLeger* keys",
)];

/// Why a controller.conf cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("`{key}` is required (see docs/operations.md, \"Controllers\")")]
    Missing { key: &'static str },
    #[error("controllerDLegerSelfId `{id}` is not one of controllerDLegerPeers ({peers})")]
    SelfNotAPeer { id: String, peers: String },
    #[error(
        "the Prometheus endpoint {addr} (metricsPromExporterHost:metricsPromExporterPort) is \
         this controller's peer address: pick another port"
    )]
    MetricsOnPeerAddress { addr: SocketAddr },
}

/// A loaded config and the warnings to log (ignored keys).
pub type Loaded = crate::key_table::Loaded<ControllerConfig>;

impl ControllerConfig {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ControllerConfig::parse(&text)
    }

    /// Reads properties text.
    pub fn parse(text: &str) -> Result<Loaded, ConfigError> {
        let mut draft = Draft::default();
        let mut warnings = Vec::new();
        for (key, value) in parse_properties(text) {
            if let Some(warning) = TABLE.set(&mut draft, &key, &value)? {
                warnings.push(warning);
            }
        }
        Ok(Loaded {
            config: draft.finish()?,
            warnings,
        })
    }
}

impl Draft {
    fn finish(self) -> Result<ControllerConfig, ConfigError> {
        let group = self.group.ok_or(ConfigError::Missing {
            key: "controllerDLegerGroup",
        })?;
        let peers = self.peers.ok_or(ConfigError::Missing {
            key: "controllerDLegerPeers",
        })?;
        let self_id = self.self_id.ok_or(ConfigError::Missing {
            key: "controllerDLegerSelfId",
        })?;
        if !peers.iter().any(|p| p.id == self_id) {
            let listed: Vec<&str> = peers.iter().map(|p| p.id.as_str()).collect();
            return Err(ConfigError::SelfNotAPeer {
                id: self_id,
                peers: listed.join(", "),
            });
        }
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
        let own = peers
            .iter()
            .find(|p| p.id == self_id)
            .map(|p| p.addr)
            .expect("checked above");
        let metrics_endpoint = self.prometheus.then(|| {
            SocketAddr::new(
                self.metrics_host.unwrap_or(own.ip()),
                self.metrics_port.unwrap_or(5557),
            )
        });
        if let Some(addr) = metrics_endpoint.filter(|&ep| ep == own) {
            return Err(ConfigError::MetricsOnPeerAddress { addr });
        }
        Ok(ControllerConfig {
            group,
            peers,
            self_id,
            store_path: self
                .store_path
                .unwrap_or_else(|| home.join("DledgerController")),
            scan_not_active_broker_interval: Duration::from_millis(
                self.scan_not_active_broker_interval_ms.unwrap_or(200),
            ),
            scan_inactive_master_interval: Duration::from_millis(
                self.scan_inactive_master_interval_ms.unwrap_or(5000),
            ),
            enable_elect_unclean_master: self.enable_elect_unclean_master,
            elect_master_max_retry_count: self.elect_master_max_retry_count.unwrap_or(3),
            notify_broker_role_changed: self.notify_broker_role_changed.unwrap_or(true),
            metrics_endpoint,
        })
    }
}

/// The whole table, for reading and for the docs check.
pub const TABLE: KeyTable<Draft> = KeyTable {
    file: "controller.conf",
    keys: KEYS,
    ignored: IGNORED_KEYS,
    refused_unless_default: REFUSED_UNLESS_DEFAULT,
};

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
