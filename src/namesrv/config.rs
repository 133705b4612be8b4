//! The standalone name server's settings (`ringmq namesrv -c namesrv.conf`): RocketMQ's
//! namesrv properties file, read as RocketMQ reads it (`key=value` lines, `#`/`!`
//! comments; `key: value` and `key value` too), every key in RocketMQ's camelCase.
//!
//! Honoured keys ([`KEYS`] lists them with defaults and meanings, rendered into
//! docs/operations.md): RocketMQ's `listenPort` (default 9876), `bindAddress` (RocketMQ
//! 5.x's `NettyServerConfig` key, and the key `ringmq serve` binds with; default
//! `0.0.0.0`), `scanNotActiveBrokerInterval` (ms, default 5000),
//! `serverChannelMaxIdleTimeSeconds` (default 120), `deleteTopicWithBrokerRegistration`
//! (default `false`, as RocketMQ: see the registry) and ringmq's own bounds and timeouts
//! (`maxBrokers`, `maxTopicsPerRegistration`, `maxRegisterBodyBytes`, `maxFrameSize`,
//! `maxConnections`, `maxPartialFrameBytes`, `brokerHeartbeatTimeoutMillis`).
//!
//! Other RocketMQ namesrv keys: those whose every value is safe to ignore (thread pools,
//! paths of files ringmq does not keep) are warned about by name ([`IGNORED_KEYS`]); those
//! that ask for something ringmq does not do are refused unless at RocketMQ's default
//! ([`REFUSED_UNLESS_DEFAULT`]), following the rule of `node_config::rocketmq`. Any other
//! key is refused, naming it and the nearest known key.
//!
//! Not read: line continuations (`\` at a line's end) and `\uXXXX` escapes, which no
//! namesrv key's value needs; a line ending in `\` is refused rather than misread.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::key_table::{KeyError, KeyTable};
use crate::remoting::register_broker::RegisterLimits;
use crate::remoting::DEFAULT_MAX_FRAME_LEN;

use super::registry::{RegistryLimits, DEFAULT_HEARTBEAT_TIMEOUT_MS, DEFAULT_MAX_BROKERS};
use crate::remoting::register_broker::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_TOPICS};

/// The settings of one standalone name server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamesrvConfig {
    pub listen_port: u16,
    pub bind_address: IpAddr,
    pub scan_not_active_broker_interval: Duration,
    pub server_channel_max_idle_time: Duration,
    pub delete_topic_with_broker_registration: bool,
    pub max_brokers: usize,
    pub max_topics_per_registration: usize,
    pub max_register_body_bytes: usize,
    pub max_frame_size: usize,
    pub max_connections: usize,
    pub max_partial_frame_bytes: usize,
    pub broker_heartbeat_timeout_ms: i64,
}

impl Default for NamesrvConfig {
    fn default() -> NamesrvConfig {
        NamesrvConfig {
            listen_port: 9876,
            bind_address: IpAddr::from([0, 0, 0, 0]),
            scan_not_active_broker_interval: Duration::from_millis(5000),
            server_channel_max_idle_time: Duration::from_secs(120),
            delete_topic_with_broker_registration: false,
            max_brokers: DEFAULT_MAX_BROKERS,
            max_topics_per_registration: DEFAULT_MAX_TOPICS,
            max_register_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_frame_size: DEFAULT_MAX_FRAME_LEN,
            max_connections: 10_000,
            max_partial_frame_bytes: 256 * 1024 * 1024,
            broker_heartbeat_timeout_ms: DEFAULT_HEARTBEAT_TIMEOUT_MS,
        }
    }
}

/// One honoured key of `namesrv.conf`.
pub type Key = crate::key_table::Key<NamesrvConfig>;

fn number<T: std::str::FromStr>(value: &str, what: &'static str) -> Result<T, &'static str> {
    value.parse().map_err(|_| what)
}

fn positive(value: &str) -> Result<u64, &'static str> {
    match number::<u64>(value, "a positive integer")? {
        0 => Err("a positive integer"),
        n => Ok(n),
    }
}

fn size(value: &str) -> Result<usize, &'static str> {
    usize::try_from(positive(value)?).map_err(|_| "a positive integer")
}

/// The honoured keys.
pub const KEYS: &[Key] = &[
    Key {
        name: "listenPort",
        default: "9876",
        meaning: "port the name server listens on; 0 picks a free one",
        set: |c, v| {
            c.listen_port = number(v, "a port number (0-65535)")?;
            Ok(())
        },
    },
    Key {
        name: "bindAddress",
        default: "0.0.0.0",
        meaning: "address the listener binds (as `ringmq serve`'s `bindAddress`)",
        set: |c, v| {
            c.bind_address = number(v, "an IP address")?;
            Ok(())
        },
    },
    Key {
        name: "scanNotActiveBrokerInterval",
        default: "5000",
        meaning: "ms between scans that unregister brokers silent past their heartbeat timeout",
        set: |c, v| {
            c.scan_not_active_broker_interval = Duration::from_millis(positive(v)?);
            Ok(())
        },
    },
    Key {
        name: "serverChannelMaxIdleTimeSeconds",
        default: "120",
        meaning: "seconds a connection may go without a request before it is closed",
        set: |c, v| {
            c.server_channel_max_idle_time = Duration::from_secs(positive(v)?);
            Ok(())
        },
    },
    Key {
        name: "deleteTopicWithBrokerRegistration",
        default: "false",
        meaning: "true: a master's registration replaces its group's topics, dropping the \
                  routes of those it no longer lists (false: they stay routed until \
                  DELETE_TOPIC_IN_NAMESRV; keep false beside RocketMQ brokers, which register \
                  a new topic alone)",
        set: |c, v| {
            c.delete_topic_with_broker_registration = number(v, "true or false")?;
            Ok(())
        },
    },
    Key {
        name: "brokerHeartbeatTimeoutMillis",
        default: "120000",
        meaning: "ms a broker stays registered without registering again, when its request \
                  sets no heartbeatTimeoutMillis (ringmq key; RocketMQ's constant)",
        set: |c, v| {
            let ms = positive(v)?;
            c.broker_heartbeat_timeout_ms = i64::try_from(ms).map_err(|_| "too large")?;
            Ok(())
        },
    },
    Key {
        name: "maxBrokers",
        default: "1024",
        meaning: "broker addresses registered at once; a new one past it is refused (ringmq key)",
        set: |c, v| {
            c.max_brokers = size(v)?;
            Ok(())
        },
    },
    Key {
        name: "maxTopicsPerRegistration",
        default: "32768",
        meaning: "topics one registration may carry; more is refused (ringmq key)",
        set: |c, v| {
            c.max_topics_per_registration = size(v)?;
            Ok(())
        },
    },
    Key {
        name: "maxRegisterBodyBytes",
        default: "8388608",
        meaning: "largest registration body read; larger is refused (ringmq key)",
        set: |c, v| {
            c.max_register_body_bytes = size(v)?;
            Ok(())
        },
    },
    Key {
        name: "maxFrameSize",
        default: "16777216",
        meaning: "largest remoting frame, bytes; a larger one closes the connection (ringmq key)",
        set: |c, v| {
            c.max_frame_size = size(v)?;
            Ok(())
        },
    },
    Key {
        name: "maxConnections",
        default: "10000",
        meaning: "connections open at once; a new one past it is closed at once (ringmq key)",
        set: |c, v| {
            c.max_connections = size(v)?;
            Ok(())
        },
    },
    Key {
        name: "maxPartialFrameBytes",
        default: "268435456",
        meaning: "bytes of frames still arriving held for all connections together; a \
                  connection that would pass it is closed (ringmq key)",
        set: |c, v| {
            c.max_partial_frame_bytes = size(v)?;
            Ok(())
        },
    },
];

/// RocketMQ namesrv keys ignored with a warning: every value is safe to ignore (Java's
/// threading and socket tuning, files ringmq does not keep, a wait ringmq does not need).
pub const IGNORED_KEYS: &[&str] = &[
    "rocketmqHome",
    "kvConfigPath",
    "configStorePath",
    "productEnvName",
    "clusterTest",
    "clientRequestThreadPoolNums",
    "defaultThreadPoolNums",
    "clientRequestThreadPoolQueueCapacity",
    "defaultThreadPoolQueueCapacity",
    "unRegisterBrokerQueueCapacity",
    "notifyMinBrokerIdChanged",
    "needWaitForService",
    "waitSecondsForService",
    "configBlackList",
    "serverWorkerThreads",
    "serverCallbackExecutorThreads",
    "serverSelectorThreads",
    "serverOnewaySemaphoreValue",
    "serverAsyncSemaphoreValue",
    "serverSocketSndBufSize",
    "serverSocketRcvBufSize",
    "serverSocketBacklog",
    "serverPooledByteBufAllocatorEnable",
    "useEpollNativeSelector",
    "writeBufferHighWaterMark",
    "writeBufferLowWaterMark",
    "enableShutdownGracefully",
    "shutdownWaitTimeSeconds",
];

/// RocketMQ namesrv keys refused unless at RocketMQ's default: (key, default, why another
/// value cannot be ignored).
pub const REFUSED_UNLESS_DEFAULT: &[(&str, &str, &str)] = &[
    (
        "orderMessageEnable",
        "false",
        "asks the name server to serve order-topic configuration from its KV store; ringmq keeps none",
    ),
    (
        "returnOrderTopicConfigToBroker",
        "true",
        "asks to withhold order-topic configuration from brokers; ringmq has none to return",
    ),
    (
        "enableAllTopicList",
        "true",
        "false asks to refuse the all-topic list; ringmq serves it",
    ),
    (
        "enableTopicList",
        "true",
        "false asks to refuse topic lists; ringmq serves them",
    ),
    (
        "supportActingMaster",
        "false",
        "asks for acting-master routes (a slave serving as master); ringmq does not build them",
    ),
    (
        "enableControllerInNamesrv",
        "false",
        "asks for an embedded DLedger controller; ringmq has none",
    ),
];

/// Why a namesrv.conf cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("line {line}: ends in `\\` (continuation lines are not read): {text:?}")]
    Continuation { line: usize, text: String },
    #[error("maxRegisterBodyBytes = {body} is above maxFrameSize = {frame}: no frame could carry such a body")]
    BodyAboveFrame { body: usize, frame: usize },
}

/// A loaded config and the warnings to log (ignored keys).
pub type Loaded = crate::key_table::Loaded<NamesrvConfig>;

impl NamesrvConfig {
    /// Reads `path` (none = the defaults).
    pub fn load(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let Some(path) = path else {
            return NamesrvConfig::parse("");
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        NamesrvConfig::parse(&text)
    }

    /// Reads properties text.
    pub fn parse(text: &str) -> Result<Loaded, ConfigError> {
        let mut config = NamesrvConfig::default();
        let mut warnings = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            if line.ends_with('\\') {
                return Err(ConfigError::Continuation {
                    line: index + 1,
                    text: line.to_owned(),
                });
            }
            let end = line.find(['=', ':', ' ', '\t']).unwrap_or(line.len());
            let key = &line[..end];
            let rest = line[end..].trim_start();
            let value = rest.strip_prefix(['=', ':']).unwrap_or(rest).trim();
            if let Some(warning) = TABLE.set(&mut config, key, value)? {
                warnings.push(warning);
            }
        }
        if config.max_register_body_bytes > config.max_frame_size {
            return Err(ConfigError::BodyAboveFrame {
                body: config.max_register_body_bytes,
                frame: config.max_frame_size,
            });
        }
        Ok(Loaded { config, warnings })
    }

    /// The registry's bounds.
    pub fn registry_limits(&self) -> RegistryLimits {
        RegistryLimits {
            max_brokers: self.max_brokers,
            default_heartbeat_timeout_ms: self.broker_heartbeat_timeout_ms,
            replace_topics_on_register: self.delete_topic_with_broker_registration,
            register: RegisterLimits {
                max_body_bytes: self.max_register_body_bytes,
                max_topics: self.max_topics_per_registration,
            },
        }
    }

    /// GET_NAMESRV_CONFIG's body: every honoured key, Java properties text.
    pub fn properties_text(&self) -> String {
        let values = [
            ("listenPort", self.listen_port.to_string()),
            ("bindAddress", self.bind_address.to_string()),
            (
                "scanNotActiveBrokerInterval",
                self.scan_not_active_broker_interval.as_millis().to_string(),
            ),
            (
                "serverChannelMaxIdleTimeSeconds",
                self.server_channel_max_idle_time.as_secs().to_string(),
            ),
            (
                "deleteTopicWithBrokerRegistration",
                self.delete_topic_with_broker_registration.to_string(),
            ),
            (
                "brokerHeartbeatTimeoutMillis",
                self.broker_heartbeat_timeout_ms.to_string(),
            ),
            ("maxBrokers", self.max_brokers.to_string()),
            (
                "maxTopicsPerRegistration",
                self.max_topics_per_registration.to_string(),
            ),
            (
                "maxRegisterBodyBytes",
                self.max_register_body_bytes.to_string(),
            ),
            ("maxFrameSize", self.max_frame_size.to_string()),
            ("maxConnections", self.max_connections.to_string()),
            (
                "maxPartialFrameBytes",
                self.max_partial_frame_bytes.to_string(),
            ),
        ];
        values
            .iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }
}

/// The whole table, for reading and for the docs check.
pub const TABLE: KeyTable<NamesrvConfig> = KeyTable {
    file: "namesrv.conf",
    keys: KEYS,
    ignored: IGNORED_KEYS,
    refused_unless_default: REFUSED_UNLESS_DEFAULT,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_rocketmqs_and_the_keys_table_says_them() {
        let loaded = NamesrvConfig::parse("").unwrap();
        assert_eq!(loaded.config, NamesrvConfig::default());
        assert!(loaded.warnings.is_empty());
        // Every documented default parses to the default value.
        let text: String = KEYS
            .iter()
            .map(|k| format!("{}={}\n", k.name, k.default))
            .collect();
        assert_eq!(
            NamesrvConfig::parse(&text).unwrap().config,
            NamesrvConfig::default()
        );
        assert_eq!(NamesrvConfig::default().listen_port, 9876);
        // GET_NAMESRV_CONFIG's text reads back to the same settings.
        let config = NamesrvConfig::default();
        assert_eq!(
            NamesrvConfig::parse(&config.properties_text())
                .unwrap()
                .config,
            config
        );
    }

    /// docs/operations.md lists every key with its default, and every ignored or refused key.
    #[test]
    fn the_operations_doc_lists_every_key() {
        let missing = TABLE.missing_from(include_str!("../../docs/operations.md"));
        assert!(missing.is_empty(), "docs/operations.md lacks {missing:?}");
    }

    #[test]
    fn a_file_sets_keys_in_every_separator_form() {
        let text = "# a comment\n! another\n\nlistenPort=9877\nbindAddress : 127.0.0.1\n\
                    scanNotActiveBrokerInterval 1000\nmaxBrokers=3\n";
        let config = NamesrvConfig::parse(text).unwrap().config;
        assert_eq!(config.listen_port, 9877);
        assert_eq!(config.bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(
            config.scan_not_active_broker_interval,
            Duration::from_secs(1)
        );
        assert_eq!(config.registry_limits().max_brokers, 3);
    }

    #[test]
    fn unknown_keys_are_refused_by_name_with_the_nearest_one() {
        let error = NamesrvConfig::parse("listenPrt=9876").unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown key `listenPrt` (did you mean `listenPort`?)"
        );
        let error = NamesrvConfig::parse("nothingLikeIt=1").unwrap_err();
        assert_eq!(error.to_string(), "unknown key `nothingLikeIt`");
    }

    #[test]
    fn rocketmq_keys_are_warned_about_or_refused_off_their_default() {
        let loaded =
            NamesrvConfig::parse("rocketmqHome=/opt/rmq\nenableAllTopicList=true\n").unwrap();
        assert_eq!(loaded.warnings.len(), 2);
        assert!(
            loaded.warnings[0].contains("`rocketmqHome`"),
            "{:?}",
            loaded.warnings
        );
        let error = NamesrvConfig::parse("supportActingMaster=true").unwrap_err();
        assert!(
            error.to_string().contains("`supportActingMaster`"),
            "{error}"
        );
    }

    #[test]
    fn bad_values_and_relations_are_refused_naming_the_key() {
        for (text, expected) in [
            (
                "listenPort=70000",
                "`listenPort` = \"70000\" is not a port number",
            ),
            ("bindAddress=localhost", "is not an IP address"),
            ("scanNotActiveBrokerInterval=0", "is not a positive integer"),
            ("maxBrokers=-1", "`maxBrokers`"),
            ("deleteTopicWithBrokerRegistration=yes", "true or false"),
            ("listenPort=1 \\", "continuation"),
            (
                "maxRegisterBodyBytes=2000\nmaxFrameSize=1000",
                "above maxFrameSize",
            ),
        ] {
            let error = NamesrvConfig::parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let error = NamesrvConfig::load(Some(Path::new("/nonexistent/namesrv.conf")))
            .unwrap_err()
            .to_string();
        assert!(error.contains("/nonexistent/namesrv.conf"), "{error}");
    }
}
