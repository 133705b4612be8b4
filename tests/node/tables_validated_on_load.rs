//! The node-wide tables are validated when the node starts: a `topics.json` entry with an
//! illegal name, a queue count outside 1..=1024, unknown perm bits, an unknown filter type
//! or a key that is not its topicName, and a `consumerOffset.json` entry whose key is not
//! exactly one legal `topic@group` or whose queue id or offset no request could have
//! stored, each stop the start with an error naming the file and the entry. With the entry
//! removed the same directory starts.

use crate::common;

use common::node_config as options;

fn topic(name: &str, read: u64, write: u64, perm: i64, filter: &str) -> serde_json::Value {
    serde_json::json!({"topicName": name, "readQueueNums": read, "writeQueueNums": write,
        "perm": perm, "topicFilterType": filter, "topicSysFlag": 0, "order": false,
        "attributes": {}})
}

/// Starts a node on `dir` with `file` holding `text`; the start must fail naming the file
/// and `entry`. Then the file is removed and the directory must start cleanly.
fn start_is_refused(file: &str, text: &str, entry: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config").join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    let error = match ringmq::node::start(options(dir.path())) {
        Ok(node) => {
            node.shutdown().unwrap();
            panic!("a node started on {file} holding {text}")
        }
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains(file), "{error}");
    assert!(error.contains(&format!("{entry:?}")), "{error}");
    std::fs::remove_file(&path).unwrap();
    ringmq::node::start(options(dir.path()))
        .expect("the directory starts once the entry is gone")
        .shutdown()
        .unwrap();
}

#[test]
fn each_kind_of_bad_topic_entry_stops_the_start_naming_the_file_and_entry() {
    let cases = [
        ("Wide", topic("Wide", 1_000_000, 8, 6, "SINGLE_TAG")),
        ("Huge", topic("Huge", 8, u32::MAX as u64, 6, "SINGLE_TAG")),
        ("Empty", topic("Empty", 0, 8, 6, "SINGLE_TAG")),
        ("../etc", topic("../etc", 8, 8, 6, "SINGLE_TAG")),
        ("a@b", topic("a@b", 8, 8, 6, "SINGLE_TAG")),
        ("Perm", topic("Perm", 8, 8, 0x40, "SINGLE_TAG")),
        ("Filter", topic("Filter", 8, 8, 6, "SQL92")),
        ("Alias", topic("Other", 8, 8, 6, "SINGLE_TAG")),
    ];
    for (key, config) in cases {
        let mut table = serde_json::Map::new();
        table.insert("Fine".into(), topic("Fine", 8, 8, 6, "SINGLE_TAG"));
        table.insert(key.into(), config);
        let text = serde_json::json!({"topicConfigTable": table,
            "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 0}})
        .to_string();
        start_is_refused("topics.json", &text, key);
    }
}

#[test]
fn each_kind_of_bad_offset_entry_stops_the_start_naming_the_file_and_entry() {
    let cases = [
        // The ambiguous key an `abuse@topic`/`grp` commit used to write.
        (
            r#"{"offsetTable":{"T@g":{"0":1},"abuse@topic@grp":{"0":3}}}"#,
            "abuse@topic@grp",
        ),
        (r#"{"offsetTable":{"nogroup":{"0":3}}}"#, "nogroup"),
        (
            r#"{"offsetTable":{"../../etc/x@g":{"0":3}}}"#,
            "../../etc/x@g",
        ),
        (r#"{"offsetTable":{"T@g":{"-5":3}}}"#, "T@g"),
        (r#"{"offsetTable":{"T@g":{"4096":3}}}"#, "T@g"),
        (r#"{"offsetTable":{"T@g":{"0":-9}}}"#, "T@g"),
        // fastjson's bare keys go through the same checks.
        (r#"{"offsetTable":{"T@a@b":{0:3}}}"#, "T@a@b"),
    ];
    for (text, entry) in cases {
        start_is_refused("consumerOffset.json", text, entry);
    }
}
