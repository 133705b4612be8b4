use super::*;

const THREE: &str = "controllerDLegerGroup = group1\n\
                     controllerDLegerPeers = n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858\n\
                     controllerDLegerSelfId = n1\n\
                     controllerStorePath = /tmp/c1\n";

fn error_of(text: &str) -> String {
    ControllerConfig::parse(text).unwrap_err().to_string()
}

#[test]
fn rocketmqs_three_controller_file_loads_with_rocketmqs_defaults() {
    let loaded = ControllerConfig::parse(THREE).unwrap();
    let c = loaded.config;
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(c.group, "group1");
    assert_eq!(c.peers.len(), 3);
    assert_eq!(c.self_peer().addr, "127.0.0.1:9868".parse().unwrap());
    assert_eq!(c.node_id("n2"), Some(2));
    assert_eq!(c.node_id("n9"), None);
    assert_eq!(c.store_path, PathBuf::from("/tmp/c1"));
    // ringmq's default, not RocketMQ's 5 s: a silent master's failover waits for a scan.
    assert_eq!(
        c.scan_not_active_broker_interval,
        Duration::from_millis(200)
    );
    assert_eq!(c.scan_inactive_master_interval, Duration::from_secs(5));
    assert!(!c.enable_elect_unclean_master);
    assert_eq!(c.elect_master_max_retry_count, 3);
    assert!(c.notify_broker_role_changed);
}

#[test]
fn the_required_keys_are_named_when_missing() {
    assert!(error_of("").contains("controllerDLegerGroup` is required"));
    let no_self = "controllerDLegerGroup=g\ncontrollerDLegerPeers=n0-127.0.0.1:1";
    assert!(error_of(no_self).contains("controllerDLegerSelfId` is required"));
}

#[test]
fn a_self_id_outside_the_peer_list_is_refused_naming_the_list() {
    let text = THREE.replace("SelfId = n1", "SelfId = n7");
    let error = error_of(&text);
    assert!(
        error.contains("`n7` is not one of controllerDLegerPeers (n0, n1, n2)"),
        "{error}"
    );
}

#[test]
fn malformed_or_repeated_peers_are_refused() {
    for peers in [
        "n0-127.0.0.1:9878;n0-127.0.0.1:9868",
        "n0-127.0.0.1:9878;n1-127.0.0.1:9878",
        "n0:127.0.0.1:9878",
        "n0-localhost",
        ";;",
    ] {
        let text = format!("controllerDLegerPeers={peers}");
        let error = error_of(&text);
        assert!(error.contains("controllerDLegerPeers"), "{peers}: {error}");
    }
}

#[test]
fn ignored_keys_warn_and_listen_port_is_one_of_them() {
    let text = format!("{THREE}listenPort=19876\ncontrollerThreadPoolNums=16\n");
    let loaded = ControllerConfig::parse(&text).unwrap();
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("`listenPort`"));
}

#[test]
fn jraft_is_refused_and_dledger_accepted() {
    let error = error_of(&format!("{THREE}controllerType=jRaft\n"));
    assert!(error.contains("only RocketMQ's default DLedger"), "{error}");
    assert!(ControllerConfig::parse(&format!("{THREE}controllerType=DLedger\n")).is_ok());
}

#[test]
fn values_out_of_range_and_typos_are_refused_by_name() {
    let error = error_of(&format!("{THREE}scanNotActiveBrokerInterval=5\n"));
    assert!(error.contains("from 100 to 3600000"), "{error}");
    let error = error_of(&format!("{THREE}electMasterMaxRetryCount=0\n"));
    assert!(error.contains("from 1 to 100"), "{error}");
    let error = error_of(&format!("{THREE}enableElectUncleanMaster=yes\n"));
    assert!(error.contains("true or false"), "{error}");
    let error = error_of(&format!("{THREE}enableElectUncleanMastr=true\n"));
    assert!(
        error.contains("did you mean `enableElectUncleanMaster`"),
        "{error}"
    );
}

/// docs/operations.md lists every key with its default, and every ignored or refused key.
#[test]
fn the_operations_doc_lists_every_key() {
    let missing = TABLE.missing_from(include_str!("../../docs/operations.md"));
    assert!(missing.is_empty(), "docs/operations.md lacks {missing:?}");
}

#[test]
fn the_prometheus_endpoint_is_off_unless_asked_and_never_on_the_peer_address() {
    let config =
        |extra: &str| ControllerConfig::parse(&format!("{THREE}{extra}")).map(|l| l.config);
    assert_eq!(config("").unwrap().metrics_endpoint, None);
    let own_host = config("").unwrap().self_peer().addr.ip();
    assert_eq!(
        config("metricsExporterType=PROM\n")
            .unwrap()
            .metrics_endpoint,
        Some(std::net::SocketAddr::new(own_host, 5557))
    );
    let chosen = config(
        "metricsExporterType=prom\nmetricsPromExporterPort=9100\nmetricsPromExporterHost=0.0.0.0\n",
    )
    .unwrap();
    assert_eq!(
        chosen.metrics_endpoint,
        Some("0.0.0.0:9100".parse().unwrap())
    );
    let error = error_of(&format!("{THREE}metricsExporterType=OTLP_GRPC\n"));
    assert!(error.contains("PROM or DISABLE"), "{error}");
    let own_port = config("").unwrap().self_peer().addr.port();
    let clash = config(&format!(
        "metricsExporterType=PROM\nmetricsPromExporterPort={own_port}\n"
    ));
    let error = clash.expect_err("the peer address is taken").to_string();
    assert!(error.contains("peer address"), "{error}");
}
