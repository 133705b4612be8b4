//! Node configuration: the three sources, their precedence, and every way a value is refused.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ringmq::config::{FlushMode, GIB};
use ringmq::io::IoChoice;
use ringmq::node_config::{BrokerRole, ConfigError, ConfigLoader, NodeConfig};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Defaults with a fixed root and shard count, so expectations do not depend on the machine.
fn base() -> NodeConfig {
    NodeConfig {
        store_path_root_dir: "/srv/ringmq".into(),
        shards: 4,
        ..NodeConfig::default()
    }
}

fn loader() -> ConfigLoader {
    ConfigLoader::from_config(base())
}

const BROKER_CONF: &str = r#"
# A broker.conf as RocketMQ operators write them.
brokerClusterName = ProdCluster
brokerName=broker-b
brokerId = 0
! Java properties also take '!' comments

listenPort=20911
brokerIP1 = 10.1.2.3
namesrvAddr=10.1.2.10:9876;10.1.2.11:9876
storePathRootDir=/data/rocketmq/store
flushDiskType = SYNC_FLUSH
brokerRole=ASYNC_MASTER
mapedFileSizeCommitLog=268435456
mappedFileSizeConsumeQueue=600000
flushIntervalCommitLog=250
flushCommitLogLeastPages=8
flushCommitLogThoroughInterval=20000
syncFlushTimeout=3000
flushIntervalConsumeQueue=2000
maxMessageSize=1048576
autoCreateTopicEnable=false
defaultTopicQueueNums=16
fileReservedTime=48
deleteWhen=03;04
diskMaxUsedSpaceRatio=80
"#;

fn broker_conf_expected() -> NodeConfig {
    NodeConfig {
        broker_cluster_name: "ProdCluster".into(),
        broker_name: "broker-b".into(),
        listen_port: 20911,
        broker_ip: IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        namesrv_addr: Some("10.1.2.10:9876;10.1.2.11:9876".into()),
        store_path_root_dir: "/data/rocketmq/store".into(),
        flush_disk_type: FlushMode::Sync,
        broker_role: BrokerRole::AsyncMaster,
        maped_file_size_commit_log: 256 * 1024 * 1024,
        maped_file_size_consume_queue: 600_000,
        flush_interval_commit_log: Duration::from_millis(250),
        flush_commit_log_least_pages: 8,
        flush_commit_log_thorough_interval: Duration::from_secs(20),
        sync_flush_timeout: Duration::from_secs(3),
        flush_interval_consume_queue: Duration::from_secs(2),
        max_message_size: 1024 * 1024,
        auto_create_topic_enable: false,
        default_topic_queue_nums: 16,
        file_reserved_time: Duration::from_secs(48 * 3600),
        delete_when: vec![3, 4],
        disk_max_used_space_ratio: 80,
        ..base()
    }
}

#[test]
fn defaults_validate() {
    let config = base();
    config.validate().unwrap();
    assert_eq!(config.broker_name, "broker-a");
    assert_eq!(config.broker_cluster_name, "DefaultCluster");
    assert_eq!(
        (config.listen_port, config.namesrv_port, config.metrics_port),
        (10911, 9876, 5557)
    );
    assert_eq!(config.flush_disk_type, FlushMode::Async);
    assert_eq!(config.broker_role, BrokerRole::AsyncMaster);
    assert_eq!(config.io_backend, IoChoice::Auto);
    assert_eq!(config.maped_file_size_commit_log, GIB);
    assert_eq!(config.maped_file_size_consume_queue, 6_000_000);
    assert_eq!(config.max_frame_size, 16 * 1024 * 1024);
    assert_eq!(config.delete_when, vec![4]);
    assert_eq!(config.file_reserved_time, Duration::from_secs(72 * 3600));
    // The replication batches and the table copy's timeout, as they were before they
    // were settings.
    assert_eq!(config.ha_send_batch_bytes, 256 * 1024);
    assert_eq!(config.ha_slave_batch_bytes_max, 4 << 20);
    assert_eq!(
        config.slave_metadata_request_timeout,
        Duration::from_secs(3)
    );

    let machine = NodeConfig::default();
    assert!(machine.shards >= 1 && machine.shards <= 64);
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        assert_eq!(machine.store_path_root_dir, Path::new(&home).join("store"));
        assert_eq!(NodeConfig::load(None, None, &[]).unwrap(), machine);
    }
}

#[test]
fn broker_conf_with_rocketmq_keys() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write(dir.path(), "broker.conf", BROKER_CONF);
    let mut loader = loader();
    loader.broker_conf_file(&conf).unwrap();
    assert!(loader.warnings().is_empty());
    assert_eq!(loader.finish().unwrap(), broker_conf_expected());
}

#[test]
fn broker_conf_with_windows_line_ends_and_trailing_blanks() {
    let text = BROKER_CONF.replace('\n', "  \r\n");
    let mut loader = loader();
    loader.broker_conf_str("broker.conf", &text).unwrap();
    assert_eq!(loader.finish().unwrap(), broker_conf_expected());
}

#[test]
fn toml_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "ringmq.toml",
        r#"
# ringmq's own format
broker_name = "broker-t"
broker_ip = "192.168.0.7"
bind_address = "192.168.0.7"
listen_port = 30911
namesrv_port = 30876
metrics_port = 30100
store_path_root_dir = "/var/lib/ringmq"
shards = 8
io_backend = "portable"
flush_disk_type = "SYNC_FLUSH"
maped_file_size_commit_log = 134_217_728
max_message_size = 65536
auto_create_topic_enable = false
delete_when = "01;02"
max_connections = 500
max_parked_pulls = 1000
max_frame_size = 1048576
"#,
    );
    let config = NodeConfig::load(Some(&path), None, &[]).unwrap();
    let expected = NodeConfig {
        broker_name: "broker-t".into(),
        broker_ip: "192.168.0.7".parse().unwrap(),
        bind_address: "192.168.0.7".parse().unwrap(),
        listen_port: 30911,
        namesrv_port: 30876,
        metrics_port: 30100,
        store_path_root_dir: "/var/lib/ringmq".into(),
        shards: 8,
        io_backend: IoChoice::Portable,
        flush_disk_type: FlushMode::Sync,
        maped_file_size_commit_log: 128 * 1024 * 1024,
        max_message_size: 65536,
        auto_create_topic_enable: false,
        delete_when: vec![1, 2],
        max_connections: 500,
        max_parked_pulls: 1000,
        max_frame_size: 1024 * 1024,
        ..NodeConfig::default()
    };
    assert_eq!(config, expected);
}

#[test]
fn precedence_toml_then_broker_conf_then_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let toml = write(
        dir.path(),
        "ringmq.toml",
        "store_path_root_dir = \"/from/toml\"\nlisten_port = 1111\nbroker_name = \"toml\"\nshards = 2\nflush_interval_commit_log = 100\n",
    );
    let conf = write(
        dir.path(),
        "broker.conf",
        "listenPort=2222\nbrokerName=conf\nflushIntervalCommitLog=200\n",
    );
    let overrides = vec![
        "brokerName=cli".to_string(),
        "flush_interval_commit_log = 300".to_string(),
    ];
    let config = NodeConfig::load(Some(&toml), Some(&conf), &overrides).unwrap();
    assert_eq!(config.store_path_root_dir, Path::new("/from/toml"));
    assert_eq!(config.shards, 2);
    assert_eq!(config.listen_port, 2222);
    assert_eq!(config.broker_name, "cli");
    assert_eq!(config.flush_interval_commit_log, Duration::from_millis(300));
}

#[test]
fn home_is_expanded() {
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return;
    };
    let mut loader = loader();
    loader.override_arg("storePathRootDir=~/rq").unwrap();
    assert_eq!(
        loader.config().store_path_root_dir,
        Path::new(&home).join("rq")
    );
    loader.override_arg("store_path_root_dir=~").unwrap();
    assert_eq!(loader.config().store_path_root_dir, Path::new(&home));
}

fn expect_error(error: ConfigError, origin: &str, key: &str, fragment: &str) {
    assert_eq!(error.origin, origin, "{error}");
    assert_eq!(error.key, key, "{error}");
    assert!(error.message.contains(fragment), "{error}");
    assert_eq!(
        error.to_string(),
        format!("{origin}: {key}: {}", error.message)
    );
}

#[test]
fn unknown_keys_name_the_key_and_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let toml = write(
        dir.path(),
        "node.toml",
        "listen_port = 1\nlisten_prot = 2\n",
    );
    let error = NodeConfig::load(Some(&toml), None, &[]).unwrap_err();
    expect_error(
        error,
        &toml.display().to_string(),
        "listen_prot",
        "unknown key",
    );

    let toml = write(dir.path(), "camel.toml", "listenPort = 1\n");
    let error = NodeConfig::load(Some(&toml), None, &[]).unwrap_err();
    expect_error(
        error,
        &toml.display().to_string(),
        "listenPort",
        "use listen_port",
    );

    let toml = write(dir.path(), "section.toml", "[broker]\nlisten_port = 1\n");
    let error = NodeConfig::load(Some(&toml), None, &[]).unwrap_err();
    expect_error(error, &toml.display().to_string(), "broker", "top level");

    let conf = write(dir.path(), "broker.conf", "brokerName=a\nbrokerNmae=b\n");
    let error = NodeConfig::load(None, Some(&conf), &[]).unwrap_err();
    expect_error(
        error,
        &conf.display().to_string(),
        "brokerNmae",
        "unknown key",
    );

    let conf = write(dir.path(), "snake.conf", "listen_port=1\n");
    let error = NodeConfig::load(None, Some(&conf), &[]).unwrap_err();
    expect_error(
        error,
        &conf.display().to_string(),
        "listen_port",
        "use listenPort",
    );

    let error = NodeConfig::load(None, None, &["nope=1".into()]).unwrap_err();
    expect_error(error, "command line", "nope", "unknown key");
    let error = NodeConfig::load(None, None, &["listenPort".into()]).unwrap_err();
    expect_error(error, "command line", "listenPort", "key=value");
}

#[test]
fn unreadable_or_malformed_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let error = NodeConfig::load(Some(&missing), None, &[]).unwrap_err();
    assert_eq!(error.origin, missing.display().to_string());
    assert!(error.message.contains("cannot read"), "{error}");

    let bad = write(dir.path(), "bad.toml", "listen_port = = 3\n");
    let error = NodeConfig::load(Some(&bad), None, &[]).unwrap_err();
    assert_eq!(error.key, "");
    assert!(error.message.contains("not valid TOML"), "{error}");
    assert!(error
        .to_string()
        .starts_with(&format!("{}: not valid TOML", bad.display())));

    let array = write(dir.path(), "array.toml", "delete_when = [3, 4]\n");
    let error = NodeConfig::load(Some(&array), None, &[]).unwrap_err();
    expect_error(
        error,
        &array.display().to_string(),
        "delete_when",
        "found array",
    );
}

#[test]
fn recognised_rocketmq_keys_only_warn() {
    let mut loader = loader();
    loader
        .broker_conf_str(
            "broker.conf",
            "haMaxGapNotInSync=100\nslaveReadEnable=true\nenablePropertyFilter=true\n\
             enableDLegerCommitLog=false\ntransientStorePoolEnable = false\nlistenPort=10911\n",
        )
        .unwrap();
    loader.override_arg("sendMessageThreadPoolNums=4").unwrap();
    let warnings = loader.warnings().to_vec();
    assert_eq!(warnings.len(), 5, "{warnings:?}");
    // `slaveReadEnable` is honoured (reads from the slave), so it does not warn.
    assert!(loader.config().slave_read_enable);
    for key in [
        "broker.conf: haMaxGapNotInSync",
        "broker.conf: enablePropertyFilter",
        "broker.conf: enableDLegerCommitLog",
        "broker.conf: transientStorePoolEnable",
        "command line: sendMessageThreadPoolNums",
    ] {
        assert!(warnings.iter().any(|w| w.starts_with(key)), "{key}");
    }
    let mut expected = base();
    expected.slave_read_enable = true;
    assert_eq!(loader.finish().unwrap(), expected);
}

/// A broker.conf of RocketMQ's controller mode loads as it is, its keys honoured.
#[test]
fn a_controller_mode_broker_conf_loads() {
    let mut loader = loader();
    loader
        .broker_conf_str(
            "b.conf",
            "enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878;127.0.0.1:9868;127.0.0.1:9858\n\
             namesrvAddr=127.0.0.1:9876\nbrokerRole=SYNC_MASTER\nbrokerHeartbeatInterval=500\n\
             controllerHeartBeatTimeoutMills=3000\nsyncBrokerMetadataPeriod=2000\n\
             checkSyncStateSetPeriod=3000\nhaMaxTimeSlaveNotCatchup=20000\n",
        )
        .unwrap();
    let config = loader.finish().unwrap();
    assert!(config.enable_controller_mode);
    assert_eq!(
        config.controller_addr.as_deref(),
        Some("127.0.0.1:9878;127.0.0.1:9868;127.0.0.1:9858")
    );
    assert_eq!(config.broker_heartbeat_interval, Duration::from_millis(500));
    assert_eq!(
        config.controller_heart_beat_timeout_mills,
        Duration::from_secs(3)
    );
    assert_eq!(config.sync_broker_metadata_period, Duration::from_secs(2));
    assert_eq!(config.check_sync_state_set_period, Duration::from_secs(3));
    assert_eq!(
        config.ha_max_time_slave_not_catchup,
        Duration::from_secs(20)
    );
}

/// RocketMQ's own controller quick-start broker file (`brokerId=-1`, `brokerRole=SLAVE`,
/// `allAckInSyncStateSet=true`, `storePathCommitLog` at its place under the root) loads
/// as it is: the id and role are the controllers' to choose, the acknowledgement rule is
/// honoured, and the CommitLog path is where RocketMQ would put it anyway (a warning).
#[test]
fn rocketmqs_controller_quick_start_broker_conf_loads_as_it_is() {
    let mut loader = loader();
    loader
        .broker_conf_str(
            "broker-n0.conf",
            "brokerClusterName = DefaultCluster\nbrokerName = broker-a\nbrokerId = -1\n\
             brokerRole = SLAVE\ndeleteWhen = 04\nfileReservedTime = 48\n\
             enableControllerMode = true\ncontrollerAddr = 127.0.0.1:9878\n\
             namesrvAddr = 127.0.0.1:9876\nallAckInSyncStateSet=true\nlistenPort=30911\n\
             storePathRootDir=/tmp/rmqstore/node00\n\
             storePathCommitLog=/tmp/rmqstore/node00/commitlog\n",
        )
        .unwrap();
    loader.check_store_paths().unwrap();
    assert_eq!(loader.warnings().len(), 1, "{:?}", loader.warnings());
    assert!(
        loader.warnings()[0].starts_with("broker-n0.conf: storePathCommitLog: "),
        "{:?}",
        loader.warnings()
    );
    let config = loader.finish().unwrap();
    assert!(config.enable_controller_mode && config.all_ack_in_sync_state_set);
    assert_eq!(config.broker_role, BrokerRole::Slave);
    assert_eq!(
        config.broker_id,
        ringmq::node_config::CONTROLLER_ASSIGNED_ID
    );
}

/// A RocketMQ store path anywhere but RocketMQ's own place under the final root is refused,
/// whichever comes first in the file.
#[test]
fn a_store_path_away_from_rocketmqs_place_stops_the_start() {
    for text in [
        "storePathRootDir=/srv/a\nstorePathCommitLog=/srv/b/commitlog",
        "storePathCommitLog=/srv/a/commitlog\nstorePathRootDir=/srv/b",
        "storePathRootDir=/srv/a\nstorePathConsumeQueue=/srv/a/commitlog",
    ] {
        let mut loader = loader();
        loader.broker_conf_str("b.conf", text).unwrap();
        let error = loader.finish().err().unwrap();
        assert_eq!(error.origin, "b.conf", "{error}");
        assert!(error.key.starts_with("storePath"), "{error}");
        assert!(error.message.contains("not supported"), "{error}");
        assert!(error.message.contains("RocketMQ's place"), "{error}");
    }
    let mut loader = loader();
    loader
        .broker_conf_str(
            "b.conf",
            "storePathIndex=/srv/a/index\nstorePathRootDir=/srv/a",
        )
        .unwrap();
    loader.finish().unwrap();
}

#[test]
fn keys_ringmq_cannot_honour_stop_the_start() {
    // Refused as it is read.
    let error = loader()
        .broker_conf_str("b.conf", "enableDLegerCommitLog=true")
        .err()
        .unwrap();
    expect_error(error, "b.conf", "enableDLegerCommitLog", "not supported");
    // Refused once the root is known: not RocketMQ's place under it.
    let mut loader = loader();
    loader
        .broker_conf_str("b.conf", "storePathCommitLog=/data/commitlog")
        .unwrap();
    let error = loader.finish().err().unwrap();
    expect_error(error, "b.conf", "storePathCommitLog", "not supported");
}

/// A setting that asks for protection ringmq does not give (access control, read-only or
/// write-only brokers, replica acknowledgements, keeping files on a full disk) stops the start instead of being ignored; at RocketMQ's default it only warns.
#[test]
fn settings_asking_for_protection_ringmq_lacks_stop_the_start() {
    for (text, key) in [
        ("aclEnable=true", "aclEnable"),
        ("authenticationEnabled=true", "authenticationEnabled"),
        ("authorizationEnabled=true", "authorizationEnabled"),
        ("brokerPermission=4", "brokerPermission"),
        ("inSyncReplicas=2", "inSyncReplicas"),
        ("minInSyncReplicas=2", "minInSyncReplicas"),
        ("totalReplicas=3", "totalReplicas"),
        ("cleanFileForciblyEnable=false", "cleanFileForciblyEnable"),
    ] {
        let error = loader().broker_conf_str("b.conf", text).err();
        let error = error.unwrap_or_else(|| panic!("{text} was accepted"));
        expect_error(error, "b.conf", key, "not supported");
    }
    let mut loader = loader();
    loader
        .broker_conf_str(
            "b.conf",
            "aclEnable=false\nbrokerPermission=6\ninSyncReplicas=1\ncleanFileForciblyEnable=true\n",
        )
        .unwrap();
    assert_eq!(loader.warnings().len(), 4, "{:?}", loader.warnings());
}

/// The transaction keys are ringmq's now, with RocketMQ's names and meanings; RocketMQ's op
/// batching keys are ignored with a warning (ringmq writes each op with its decision).
#[test]
fn transaction_keys_keep_rocketmq_names_and_their_limits() {
    let mut first = loader();
    first
        .broker_conf_str(
            "b.conf",
            "rejectTransactionMessage=true\ntransactionTimeOut=3000\ntransactionCheckInterval=1000\ntransactionCheckMax=5\ntransactionOpBatchInterval=3000\n",
        )
        .unwrap();
    assert_eq!(first.warnings().len(), 1, "{:?}", first.warnings());
    let config = first.finish().unwrap();
    assert!(config.reject_transaction_message);
    assert_eq!(
        config.transaction_time_out,
        std::time::Duration::from_millis(3000)
    );
    assert_eq!(
        config.transaction_check_interval,
        std::time::Duration::from_millis(1000)
    );
    assert_eq!(config.transaction_check_max, 5);
    for (text, key) in [
        ("transactionCheckMax=0", "transactionCheckMax"),
        ("transactionCheckMax=64", "transactionCheckMax"),
        ("transactionTimeOut=5", "transactionTimeOut"),
        ("transactionCheckInterval=99", "transactionCheckInterval"),
    ] {
        let mut loader = loader();
        let error = match loader.broker_conf_str("b.conf", text) {
            Err(error) => error,
            Ok(_) => loader.finish().expect_err(text),
        };
        assert!(error.to_string().contains(key), "{error}");
    }
}

/// A broker.conf with several mistakes reports them all in one start, each naming its key.
#[test]
fn every_bad_key_of_a_broker_conf_is_reported_in_one_start() {
    let text = "brokerNmae=a\nlistenPort=abc\naclEnable=true\nbrokerName=b\n";
    let error = loader().broker_conf_str("b.conf", text).err().unwrap();
    let all = error.to_string();
    for key in [
        "b.conf: brokerNmae",
        "b.conf: listenPort",
        "b.conf: aclEnable",
    ] {
        assert!(all.contains(key), "{key} in {all}");
    }
}

/// An unknown key that is a typo of a known one names the known one.
#[test]
fn a_misspelt_key_names_the_nearest_known_key() {
    let error = loader()
        .broker_conf_str("b.conf", "flushDiskTyp=SYNC_FLUSH\n")
        .err();
    expect_error(
        error.unwrap(),
        "b.conf",
        "flushDiskTyp",
        "did you mean flushDiskType?",
    );
}

/// An oversized maxMessageSize against the default maxFrameSize blames the key the file
/// set and names the one to raise, instead of "defaults".
#[test]
fn an_oversized_max_message_size_names_max_frame_size_to_raise() {
    let mut loader = loader();
    loader
        .broker_conf_str("b.conf", "maxMessageSize=20000000\n")
        .unwrap();
    let error = loader.finish().unwrap_err();
    expect_error(error, "b.conf", "maxMessageSize", "raise maxFrameSize");
}

/// Bad values: (broker.conf line, key as named in the error, message fragment).
const INVALID_VALUES: &[(&str, &str, &str)] = &[
    ("listenPort=abc", "listenPort", "not a whole number"),
    ("listenPort=65536", "listenPort", "between 0 and 65535"),
    ("listenPort=-1", "listenPort", "negative"),
    ("namesrvPort=99999", "namesrvPort", "between 0 and 65535"),
    (
        "metricsPromExporterPort=70000",
        "metricsPromExporterPort",
        "65535",
    ),
    ("brokerId=-3", "brokerId", "negative"),
    ("brokerId=1", "brokerId", "master"),
    ("brokerRole=SLAVE", "brokerRole", "a SLAVE's is above 0; broker_id is at its default: raise brokerId"),
    ("brokerRole=SLAVE\nbrokerId=1", "brokerRole", "a SLAVE needs one of them to find its master; ha_master_address is at its default: set haMasterAddress"),
    ("brokerRole=MASTER", "brokerRole", "ASYNC_MASTER"),
    ("enableControllerMode=true", "enableControllerMode", "needs its controllers; controller_addr is at its default: set controllerAddr"),
    ("controllerAddr=controller-1", "controllerAddr", "is not host:port"),
    ("enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878", "enableControllerMode", "registers with name servers as its role changes; namesrv_addr is at its default: set namesrvAddr"),
    ("brokerId=-1", "brokerId", "an id the controllers assign: it needs enable_controller_mode"),
    ("brokerId=-1\nbrokerRole=SLAVE\nhaMasterAddress=127.0.0.1:10912", "brokerId", "it needs enable_controller_mode"),
    ("enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878\nnamesrvAddr=127.0.0.1:9876\nhaMasterAddress=127.0.0.1:10912", "haMasterAddress", "follows the master the controllers elect"),
    ("enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878\nnamesrvAddr=127.0.0.1:9876\nlistenPort=0", "listenPort", "must stay the same across its role changes"),
    ("brokerHeartbeatInterval=10", "brokerHeartbeatInterval", "between 50"),
    ("syncBrokerMetadataPeriod=60001", "syncBrokerMetadataPeriod", "between 100"),
    ("checkSyncStateSetPeriod=99", "checkSyncStateSetPeriod", "between 100"),
    ("haMaxTimeSlaveNotCatchup=999", "haMaxTimeSlaveNotCatchup", "between 1000"),
    ("controllerHeartBeatTimeoutMills=100", "controllerHeartBeatTimeoutMills", "between 200"),
    ("brokerIP1=broker.example.com", "brokerIP1", "not an IP"),
    ("brokerIP1=0.0.0.0", "brokerIP1", "cannot be advertised"),
    ("brokerIP2=ha.example.com", "brokerIP2", "not an IP"),
    ("brokerIP2=0.0.0.0", "brokerIP2", "cannot be advertised"),
    ("brokerName=", "brokerName", "empty"),
    ("brokerName=a b", "brokerName", "spaces"),
    ("storePathRootDir=", "storePathRootDir", "empty"),
    ("shards=0", "shards", "between 1 and 64"),
    ("shards=65", "shards", "between 1 and 64"),
    ("shards=1000", "shards", "too large"),
    (
        "syncZeroAheadBytes=1073741825",
        "syncZeroAheadBytes",
        "too large",
    ),
    ("ioBackend=epoll", "ioBackend", "auto, uring or portable"),
    (
        "flushDiskType=SYNC",
        "flushDiskType",
        "SYNC_FLUSH, ASYNC_FLUSH",
    ),
    (
        "mapedFileSizeCommitLog=1000",
        "mapedFileSizeCommitLog",
        "multiple of 4096",
    ),
    (
        "mapedFileSizeCommitLog=-4096",
        "mapedFileSizeCommitLog",
        "negative",
    ),
    (
        "mappedFileSizeCommitLog=0",
        "mappedFileSizeCommitLog",
        "multiple of 4096",
    ),
    (
        "mapedFileSizeConsumeQueue=30",
        "mapedFileSizeConsumeQueue",
        "multiple of 20",
    ),
    (
        "mapedFileSizeConsumeQueue=0",
        "mapedFileSizeConsumeQueue",
        "multiple of 20",
    ),
    (
        "flushIntervalCommitLog=0",
        "flushIntervalCommitLog",
        "at least 1 ms",
    ),
    (
        "flushIntervalCommitLog=1s",
        "flushIntervalCommitLog",
        "not a whole number",
    ),
    ("syncFlushTimeout=0", "syncFlushTimeout", "at least 1 ms"),
    (
        "flushIntervalConsumeQueue=0",
        "flushIntervalConsumeQueue",
        "at least 1 ms",
    ),
    ("maxMessageSize=0", "maxMessageSize", "at least 1"),
    ("maxMessageSize=2147483648", "maxMessageSize", "must fit"),
    (
        "maxTransferCountOnMessageInDisk=0",
        "maxTransferCountOnMessageInDisk",
        "at least 1",
    ),
    ("maxBatchBytes=100", "maxBatchBytes", "at least 4096"),
    ("maxConnections=0", "maxConnections", "at least 1"),
    ("maxParkedPulls=0", "maxParkedPulls", "at least 1"),
    (
        "channelExpiredTimeout=0",
        "channelExpiredTimeout",
        "at least 1 ms",
    ),
    (
        "clientSweepInterval=0",
        "clientSweepInterval",
        "at least 1 ms",
    ),
    (
        "flushDelayOffsetInterval=9",
        "flushDelayOffsetInterval",
        "between 10 and 3600000 ms",
    ),
    (
        "flushDelayOffsetInterval=3600001",
        "flushDelayOffsetInterval",
        "between 10 and 3600000 ms",
    ),
    (
        "flushDelayOffsetInterval=1s",
        "flushDelayOffsetInterval",
        "not a whole number",
    ),
    ("maxFrameSize=1048576", "maxFrameSize", "max_message_size"),
    (
        "shardMailboxCapacity=0",
        "shardMailboxCapacity",
        "at least 1",
    ),
    (
        "autoCreateTopicEnable=yes",
        "autoCreateTopicEnable",
        "true or false",
    ),
    (
        "defaultTopicQueueNums=0",
        "defaultTopicQueueNums",
        "between 1 and 1024",
    ),
    (
        "fileReservedTime=abc",
        "fileReservedTime",
        "whole number of hours",
    ),
    ("fileReservedTime=90x", "fileReservedTime", "with s, m or h"),
    (
        "diskSpaceWarningLevelRatio=5",
        "diskSpaceWarningLevelRatio",
        "between 10 and 100",
    ),
    (
        "deleteFileBatchMax=0",
        "deleteFileBatchMax",
        "between 1 and 10000",
    ),
    (
        "cleanResourceInterval=0",
        "cleanResourceInterval",
        "at least 1 ms",
    ),
    (
        "maxHashSlotNum=0",
        "maxHashSlotNum",
        "between 1 and 50000000",
    ),
    (
        "maxHashSlotNum=50000001",
        "maxHashSlotNum",
        "between 1 and 50000000",
    ),
    ("maxIndexNum=1", "maxIndexNum", "between 2 and 200000000"),
    (
        "messageIndexEnable=maybe",
        "messageIndexEnable",
        "true or false",
    ),
    ("deleteWhen=25", "deleteWhen", "hour of the day"),
    ("deleteWhen=04;x", "deleteWhen", "hour of the day"),
    (
        "diskMaxUsedSpaceRatio=101",
        "diskMaxUsedSpaceRatio",
        "at most 100",
    ),
    (
        "diskMaxUsedSpaceRatio=5",
        "diskMaxUsedSpaceRatio",
        "between 10 and 95",
    ),
    (
        "timerMemoryEntries=15",
        "timerMemoryEntries",
        "between 16 and 16777216",
    ),
    (
        "timerMemoryEntries=16777217",
        "timerMemoryEntries",
        "at most 16777216",
    ),
    ("timerMaxPending=0", "timerMaxPending", "between 1 and"),
    (
        "scheduleDeliveryWindow=0",
        "scheduleDeliveryWindow",
        "between 1 and 65536",
    ),
    (
        "scheduleDeliveryWindow=65537",
        "scheduleDeliveryWindow",
        "at most 65536",
    ),
    ("networkIo=kqueue", "networkIo", "expected epoll, uring or auto"),
    (
        "networkRingEntries=63",
        "networkRingEntries",
        "between 64 and 32768",
    ),
    (
        "networkRingEntries=32769",
        "networkRingEntries",
        "at most 32768",
    ),
    (
        "networkRecvBuffers=15",
        "networkRecvBuffers",
        "between 16 and 32768",
    ),
    (
        "networkRecvBufferBytes=1023",
        "networkRecvBufferBytes",
        "between 1024 and 1048576",
    ),
    (
        "networkSendQueueBytes=4095",
        "networkSendQueueBytes",
        "between 4096 and 1073741824",
    ),
    ("namesrvAddr=10.0.0.1", "namesrvAddr", "host:port"),
    (
        "haSendBatchBytes=16777217",
        "haSendBatchBytes",
        "16777217 must be between 4096 and 16777216",
    ),
    (
        "haSendBatchBytes=4095",
        "haSendBatchBytes",
        "between 4096 and 16777216",
    ),
    (
        "haSlaveBatchBytesMax=67108865",
        "haSlaveBatchBytesMax",
        "67108865 must be between 4096 and 67108864",
    ),
    (
        "haSlaveBatchBytesMax=0",
        "haSlaveBatchBytesMax",
        "between 4096 and 67108864",
    ),
    (
        "slaveMetadataRequestTimeout=60001",
        "slaveMetadataRequestTimeout",
        "60001 must be between 100 and 60000 ms",
    ),
    (
        "slaveMetadataRequestTimeout=99",
        "slaveMetadataRequestTimeout",
        "between 100 and 60000 ms",
    ),
    (
        "metricsPromExporterPort=10911",
        "metricsPromExporterPort",
        "listen_port",
    ),
    ("namesrvPort=10911", "namesrvPort", "listen_port"),
    (
        "metricsExporterType=OTLP_GRPC",
        "metricsExporterType",
        "ringmq serves PROM",
    ),
    (
        "metricsExporterType=prom",
        "metricsExporterType",
        "PROM, DISABLE",
    ),
    ("pinShardThreads=1", "pinShardThreads", "true or false"),
    ("bodySend=zerocopy", "bodySend", "auto, sendfile or mmap"),
    (
        "serverSocketSndBufSize=1073741825",
        "serverSocketSndBufSize",
        "too large",
    ),
    (
        "connectionWarnBurst=0",
        "connectionWarnBurst",
        "between 1 and",
    ),
    (
        "connectionWarnInterval=0",
        "connectionWarnInterval",
        "between 1 and 86400000 ms",
    ),
];

/// Each bad value, given through `source`, names `source` and the key as written there.
#[test]
fn invalid_values_name_their_key() {
    for (line, key, fragment) in INVALID_VALUES {
        let mut loader = loader();
        let error = match loader.broker_conf_str("broker.conf", line) {
            Err(error) => error,
            Ok(_) => loader.finish().expect_err(line),
        };
        expect_error(error, "broker.conf", key, fragment);
    }
}

#[test]
fn invalid_values_from_toml_and_overrides() {
    let cases: &[(&str, &str, &str)] = &[
        ("listen_port = \"10911\"", "listen_port", "found a string"),
        ("listen_port = -5", "listen_port", "negative"),
        ("listen_port = 70000", "listen_port", "between 0 and 65535"),
        ("shards = 0", "shards", "between 1 and 64"),
        (
            "auto_create_topic_enable = \"true\"",
            "auto_create_topic_enable",
            "found a string",
        ),
        (
            "maped_file_size_consume_queue = 21",
            "maped_file_size_consume_queue",
            "multiple of 20",
        ),
        ("broker_name = 3", "broker_name", "found an integer"),
        (
            "flush_interval_commit_log = 1.5",
            "flush_interval_commit_log",
            "found float",
        ),
    ];
    for (line, key, fragment) in cases {
        let mut loader = loader();
        let error = match loader.toml_str("node.toml", line) {
            Err(error) => error,
            Ok(_) => loader.finish().expect_err(line),
        };
        expect_error(error, "node.toml", key, fragment);
    }

    // fileReservedTime: whole hours in broker.conf (0 expires a closed segment at once),
    // and ringmq's finer unit in its own file.
    let mut hours = loader();
    hours
        .broker_conf_str("broker.conf", "fileReservedTime=0")
        .unwrap();
    assert_eq!(hours.finish().unwrap().file_reserved_time, Duration::ZERO);
    let mut seconds = loader();
    seconds
        .toml_str("node.toml", "file_reserved_time = \"90s\"")
        .unwrap();
    assert_eq!(
        seconds.finish().unwrap().file_reserved_time,
        Duration::from_secs(90)
    );

    // A relationship error names the source that set the value last, as spelled there.
    let mut loader = loader();
    loader.toml_str("node.toml", "metrics_port = 9000").unwrap();
    loader.override_arg("namesrvPort=9000").unwrap();
    expect_error(
        loader.finish().unwrap_err(),
        "node.toml",
        "metrics_port",
        "namesrv_port",
    );
    // A default that an override made invalid: the override is blamed, and the default
    // named as the key to raise.
    let mut loader = ConfigLoader::from_config(base());
    loader.override_arg("max_message_size=16777216").unwrap();
    expect_error(
        loader.finish().unwrap_err(),
        "command line",
        "max_message_size",
        "max_frame_size 16777216 must be at least max_message_size",
    );
}

#[test]
fn validate_on_its_own_names_the_field() {
    let config = NodeConfig {
        metrics_port: 10911,
        ..base()
    };
    let error = config.validate().unwrap_err();
    expect_error(error, "config", "metrics_port", "listen_port");
}

#[test]
fn per_shard_store_settings() {
    let mut loader = loader();
    loader
        .broker_conf_str(
            "broker.conf",
            "brokerIP1=10.9.8.7\nlistenPort=12345\nflushDiskType=SYNC_FLUSH\n\
             mapedFileSizeCommitLog=67108864\nmapedFileSizeConsumeQueue=2000\n\
             flushIntervalCommitLog=300\nflushCommitLogLeastPages=2\n\
             flushCommitLogThoroughInterval=7000\nsyncFlushTimeout=1500\n\
             flushIntervalConsumeQueue=900\nmaxMessageSize=65536\n",
        )
        .unwrap();
    let config = loader.finish().unwrap();
    assert_eq!(config.shards, 4);
    for shard in 0..config.shards {
        let store = config.store_config_for_shard(shard);
        store.validate().unwrap();
        assert_eq!(
            store.dir,
            Path::new("/srv/ringmq").join(format!("shard-{shard}"))
        );
        assert_eq!(store.shard_id, shard);
        assert_eq!(store.offset_base(), (shard as u64) << 56);
        assert_eq!(
            store.store_host,
            "10.9.8.7:12345".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(store.flush_mode, FlushMode::Sync);
        assert_eq!(store.commit_log_segment_size, 64 * 1024 * 1024);
        assert_eq!(store.consume_queue_entries_per_file, 100);
        assert_eq!(store.flush_interval, Duration::from_millis(300));
        assert_eq!(store.flush_least_pages, 2);
        assert_eq!(store.flush_thorough_interval, Duration::from_secs(7));
        assert_eq!(store.sync_flush_timeout, Duration::from_millis(1500));
        assert_eq!(store.checkpoint_interval, Duration::from_millis(900));
        assert_eq!(store.max_message_size, 65536);
        assert_eq!(store.max_batch_bytes, config.max_batch_bytes);
        assert_eq!(store.max_pending_puts, config.max_pending_puts);
        assert_eq!(store.max_transfer_count, 32);
        assert_eq!(store.max_transfer_bytes, 256 * 1024);
    }
}

#[test]
#[should_panic(expected = "shard 4 does not exist")]
fn shard_out_of_range_panics() {
    base().store_config_for_shard(4);
}

#[test]
fn the_channel_expiry_and_client_sweep_interval_reach_the_broker_settings() {
    let mut loader = loader();
    loader
        .broker_conf_str(
            "broker.conf",
            "channelExpiredTimeout=30000\nclientSweepInterval=500\n",
        )
        .unwrap();
    let config = loader.finish().unwrap();
    let broker = ringmq::node_config::broker_config(&config);
    assert_eq!(broker.client_expiry, Duration::from_secs(30));
    assert_eq!(broker.client_sweep_interval, Duration::from_millis(500));
}

#[test]
fn the_delay_offset_flush_interval_defaults_to_a_second_and_reaches_the_broker_settings() {
    let broker = ringmq::node_config::broker_config(&base());
    assert_eq!(broker.delay_offset_flush_interval, Duration::from_secs(1));
    let mut loader = loader();
    loader
        .broker_conf_str("broker.conf", "flushDelayOffsetInterval=250\n")
        .unwrap();
    let config = loader.finish().unwrap();
    let broker = ringmq::node_config::broker_config(&config);
    assert_eq!(
        broker.delay_offset_flush_interval,
        Duration::from_millis(250)
    );
}

#[test]
fn retention_protected_groups_from_each_source_reach_the_broker_settings() {
    assert!(
        base().retention_protected_groups.is_empty(),
        "none by default"
    );
    let mut conf = loader();
    conf.broker_conf_str(
        "broker.conf",
        "retentionProtectedGroups = CG_orders; CG_billing;CG_audit-2\n",
    )
    .unwrap();
    let config = conf.finish().unwrap();
    let groups = vec![
        "CG_orders".to_string(),
        "CG_billing".to_string(),
        "CG_audit-2".to_string(),
    ];
    assert_eq!(config.retention_protected_groups, groups);
    let broker = ringmq::node_config::broker_config(&config);
    assert_eq!(broker.retention_protected_groups, groups);

    let mut toml = loader();
    toml.toml_str(
        "node.toml",
        "retention_protected_groups = \"CG_orders;CG_orders\"",
    )
    .unwrap();
    let config = toml.finish().unwrap();
    assert_eq!(config.retention_protected_groups, vec!["CG_orders"]);
    let mut cli = loader();
    cli.override_arg("retentionProtectedGroups=").unwrap();
    assert!(cli.finish().unwrap().retention_protected_groups.is_empty());
}

#[test]
fn a_bad_protected_group_is_refused_naming_the_key_and_the_group() {
    let long = format!("retentionProtectedGroups={}", "g".repeat(256));
    let cases: &[(&str, &str)] = &[
        (
            "retentionProtectedGroups=CG orders",
            "group 'CG orders' has the character ' '",
        ),
        (
            "retentionProtectedGroups=CG_a;topic@CG_b",
            "has the character '@'",
        ),
        ("retentionProtectedGroups=CG_a;;CG_b", "empty group name"),
        ("retentionProtectedGroups=CG_a;", "empty group name"),
        (&long, "at most 255"),
    ];
    for (line, fragment) in cases {
        let error = loader().broker_conf_str("broker.conf", line).err().unwrap();
        expect_error(error, "broker.conf", "retentionProtectedGroups", fragment);
    }
    let error = loader()
        .toml_str("node.toml", "retention_protected_groups = 7")
        .err()
        .unwrap();
    expect_error(
        error,
        "node.toml",
        "retention_protected_groups",
        "found an integer",
    );
    // A config built in code is checked too.
    let config = NodeConfig {
        retention_protected_groups: vec!["CG_a".into(), "CG_a".into()],
        ..base()
    };
    expect_error(
        config.validate().unwrap_err(),
        "config",
        "retention_protected_groups",
        "listed twice",
    );
}

/// A node whose segments cannot hold its largest message is refused at start, naming
/// both keys, whoever built its settings (tests included): nothing lowers
/// `max_message_size` to fit, and nothing is created or bound before the refusal.
#[test]
fn a_node_whose_max_message_size_does_not_fit_its_segment_is_refused_naming_both_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::node_config(dir.path());
    config.maped_file_size_commit_log = 64 * 1024;
    config.max_message_size = 4 * 1024 * 1024;
    let error = ringmq::node::start(config.clone()).err().expect("refused");
    let message = format!("{error:#}");
    assert!(
        message.contains("max_message_size")
            && message.contains("maped_file_size_commit_log")
            && message.contains("4194304"),
        "{message}"
    );
    assert!(
        !dir.path().join("shard-0").exists(),
        "a refused start made the store"
    );
    // The largest message a 64 KiB segment holds starts.
    config.max_message_size = ringmq::config::largest_message_for_segment(64 * 1024) as usize;
    ringmq::node::start(config).unwrap().shutdown().unwrap();

    // The same from a broker.conf that shrinks the segment and keeps the default size.
    let mut loader = loader();
    loader
        .broker_conf_str("broker.conf", "mapedFileSizeCommitLog=65536\n")
        .unwrap();
    let error = loader.finish().unwrap_err();
    assert_eq!(
        (error.origin.as_str(), error.key.as_str()),
        ("broker.conf", "mapedFileSizeCommitLog"),
        "{error}"
    );
    assert!(error.message.contains("max_message_size"), "{error}");
}

/// `metricsExporterType=DISABLE` (what the test builder sets) starts a node without a
/// metrics listener; `PROM` (the default) serves one on `metrics_port`, 0 picking it.
#[test]
fn the_metrics_exporter_type_decides_whether_a_metrics_endpoint_serves() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::common::node_config(dir.path());
    assert_eq!(
        config.metrics_exporter_type,
        ringmq::node_config::MetricsExporter::Disable
    );
    let node = ringmq::node::start(config.clone()).unwrap();
    assert_eq!(node.metrics_addr(), None);
    node.shutdown().unwrap();
    let node = ringmq::node::start(ringmq::node_config::NodeConfig {
        metrics_exporter_type: ringmq::node_config::MetricsExporter::Prom,
        ..config
    })
    .unwrap();
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    assert_ne!(metrics.port(), 0);
    node.shutdown().unwrap();
    assert_eq!(NodeConfig::default().metrics_exporter_type.as_str(), "PROM");
}
