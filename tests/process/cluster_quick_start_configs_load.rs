//! The broker.conf files of docs/operations.md's cluster quick start are what `ringmq
//! serve` accepts: each loads (`--print-config`) with the group, cluster and name servers
//! it names, so a reader pasting them gets a cluster, and an edit that breaks one fails here.

use std::process::Command;

const DOC: &str = include_str!("../../docs/operations.md");
const SECTION: &str = "## Cluster quick start";

/// The `properties` blocks of the quick start whose first line is `# broker-*.conf`.
fn broker_confs() -> Vec<(String, String)> {
    let start = DOC.find(SECTION).expect("the quick start section");
    let section = &DOC[start..];
    let end = section[SECTION.len()..]
        .find("\n## ")
        .map_or(section.len(), |end| end + SECTION.len());
    let mut confs = Vec::new();
    for block in section[..end].split("```properties\n").skip(1) {
        let text = block.split("```").next().expect("a closed block");
        let first = text.lines().next().unwrap_or_default();
        if let Some(name) = first.strip_prefix("# broker-") {
            confs.push((format!("broker-{name}"), text.to_string()));
        }
    }
    confs
}

#[test]
fn the_quick_start_broker_confs_load_with_what_they_name() {
    let confs = broker_confs();
    assert!(confs.len() >= 2, "{confs:?}");
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in confs {
        let path = dir.path().join(&name);
        std::fs::write(&path, &text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_ringmq"))
            .args(["serve", "--print-config", "--broker-conf"])
            .arg(&path)
            .output()
            .expect("run ringmq serve --print-config");
        let printed = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{name}:\n{text}\n{stderr}");
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let (key, value) = line.split_once('=').expect("key=value");
            let value = value.trim();
            assert!(
                printed
                    .lines()
                    .any(|printed| printed.ends_with(&format!(" = {value}"))),
                "{name}: {key}={value} is not what it runs with:\n{printed}"
            );
        }
    }
}
