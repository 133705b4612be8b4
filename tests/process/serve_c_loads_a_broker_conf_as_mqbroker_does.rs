//! `ringmq serve -c broker.conf` is RocketMQ's `mqbroker -c broker.conf`: the short flag
//! loads the same file as `--broker-conf`, so an operator's start script needs only the
//! program name changed.

use std::process::Command;

/// What `ringmq serve --print-config` prints with `args` before it.
fn printed(args: &[&str], conf: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .arg("serve")
        .args(args)
        .arg(conf)
        .arg("--print-config")
        .output()
        .expect("run ringmq serve --print-config");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 settings")
}

#[test]
fn serve_dash_c_loads_the_same_settings_as_broker_conf() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("broker.conf");
    // Values that differ from every default, so the file visibly took effect.
    let text = "brokerClusterName=ClusterC\nbrokerName=broker-c\nbrokerId=1\n\
                brokerRole=SLAVE\nhaMasterAddress=127.0.0.1:10912\nlistenPort=10931\n\
                shards=2\nstorePathRootDir=/tmp/ringmq-dash-c\n";
    std::fs::write(&conf, text).unwrap();
    let short = printed(&["-c"], &conf);
    let long = printed(&["--broker-conf"], &conf);
    assert_eq!(short, long, "-c and --broker-conf load the same settings");
    for value in ["ClusterC", "broker-c", "SLAVE", "127.0.0.1:10912", "10931"] {
        assert!(
            short
                .lines()
                .any(|line| line.ends_with(&format!(" = {value}"))),
            "{value} is not what -c runs with:\n{short}"
        );
    }
}

#[test]
fn serve_dash_c_names_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.conf");
    let output = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .args(["serve", "--print-config", "-c"])
        .arg(&missing)
        .output()
        .expect("run ringmq serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("absent.conf"),
        "the refusal names the file: {stderr}"
    );
}
