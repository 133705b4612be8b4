//! Committed consumer offsets per (group, topic, queueId) (reference §9.4, §9.5), as
//! UPDATE_CONSUMER_OFFSET (15), QUERY_CONSUMER_OFFSET (14) (both
//! [`crate::broker::requests::consumer_offset_requests`]) and the `commitOffset` a pull
//! carries when its sysFlag has the commit bit (0x1) set them.
//!
//! What this file owns: the shard's [`ConsumerOffsets`] table and its file,
//! `<store dir>/config/consumerOffset.json`, in RocketMQ's shape:
//!
//! ```text
//! {"offsetTable":{"TopicTest@group1":{"0":5,"1":12}}}
//! ```
//!
//! Java (fastjson) writes the queue ids unquoted (`{0:5}`), which is not JSON; loading accepts
//! both, writing always quotes them. Unknown top-level fields are ignored.
//!
//! Invariants:
//! - The file is only ever replaced whole: written to `consumerOffset.json.tmp`, fsynced,
//!   renamed over the old one, then the directory is fsynced. A reader sees the old table or
//!   the new one, never a mix.
//! - The node writes it every `BrokerConfig::consumer_offset_flush_interval`
//!   ([`crate::broker::CONSUMER_OFFSET_FLUSH_INTERVAL`]) when something changed, and once more at
//!   a clean shutdown. So a clean restart restores every committed offset exactly, and a
//!   crash loses at most the last interval's commits:
//!   consumers then resume from an older offset and see those messages again (at-least-once
//!   redelivery, as with Java's 5 s flush).
//! - A file that cannot be read or parsed stops the node's start with an error naming the
//!   file; a missing file is an empty table. So does an entry the requests would refuse
//!   (names and queue ids by [`crate::broker::naming::names`], offsets below -1), naming the entry too.
//! - Every (group, topic, queue) stored passed [`crate::broker::naming::names`]: neither name holds `@`,
//!   so a `topic@group` key splits back into the same pair and a reload never moves an
//!   offset to another topic or group.
//! - The table is a [`PersistedTable`] changed memory first: a commit is seen at once, and
//!   the periodic flush ([`ConsumerOffsets::write_if_behind`]) queues the write on tokio's
//!   blocking pool, so no shard's connections wait for its fsyncs. It writes through the
//!   disk seam's [`MetaFiles`] (the real filesystem in the node, the simulated disk in
//!   crash tests).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::broker::naming::names;
use crate::broker::tables::mirror::{self, MirrorError, PendingCommits};
use crate::broker::tables::persisted_table::{PersistedTable, WriteFailed};
use crate::io::meta::{MetaFiles, RealFiles};
use crate::sync::Locked;

/// The file's name inside `<store dir>/config/`.
pub const FILE_NAME: &str = "consumerOffset.json";

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct OffsetFile {
    #[serde(default)]
    offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// (topic, group) → queueId → committed offset.
type Table = BTreeMap<(String, String), BTreeMap<i32, i64>>;

/// The shard's committed consumer offsets.
#[derive(Debug)]
pub struct ConsumerOffsets {
    table: PersistedTable<Table>,
    /// On a slave that copies its master's table ([`ConsumerOffsets::mirror`]): the
    /// commits made here not yet given to the master ([`super::mirror`]); `None` on a
    /// master, which keeps none.
    pending: Locked<Option<PendingCommits>>,
}

impl ConsumerOffsets {
    /// `<store dir>/config/consumerOffset.json`.
    pub fn file_path(store_dir: &Path) -> PathBuf {
        store_dir.join("config").join(FILE_NAME)
    }

    /// Loads the table of the store in `store_dir` from the real filesystem; a missing
    /// file is an empty table.
    pub fn load(store_dir: &Path) -> anyhow::Result<ConsumerOffsets> {
        ConsumerOffsets::load_from(Arc::new(RealFiles), store_dir)
    }

    /// [`ConsumerOffsets::load`] through `files`, which the table also writes through.
    pub fn load_from(
        files: Arc<dyn MetaFiles>,
        store_dir: &Path,
    ) -> anyhow::Result<ConsumerOffsets> {
        let path = ConsumerOffsets::file_path(store_dir);
        let table = match files.read_file(&path) {
            Ok(bytes) => std::str::from_utf8(&bytes)
                .map_err(anyhow::Error::from)
                .and_then(parse)
                .with_context(|| format!("corrupt {}", path.display()))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Table::new(),
            Err(error) => {
                return Err(error).with_context(|| format!("cannot read {}", path.display()))
            }
        };
        Ok(ConsumerOffsets {
            table: PersistedTable::new(files, path, table, encode),
            pending: Locked::new(None),
        })
    }

    /// An empty table persisted nowhere useful until [`ConsumerOffsets::persist`] (tests).
    pub fn in_memory(store_dir: &Path) -> ConsumerOffsets {
        ConsumerOffsets {
            table: PersistedTable::new(
                Arc::new(RealFiles),
                ConsumerOffsets::file_path(store_dir),
                Table::new(),
                encode,
            ),
            pending: Locked::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        self.table.path()
    }

    /// Stores `offset` for the queue. The caller validated the names
    /// ([`crate::broker::naming::names::validate_group_topic_queue`]); a name with `@` would make the file
    /// ambiguous, so it is refused here outright.
    pub fn commit(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        assert!(
            !topic.contains('@') && !group.contains('@'),
            "an unvalidated name reached the offset table: topic {topic:?}, group {group:?}"
        );
        // Locks in the order `mirror` takes them (pending, then the table), so a copy
        // of the master's table never lands between this change and its note.
        let mut pending = self.pending.lock();
        self.table.change(|table| {
            let queues = table
                .entry((topic.to_owned(), group.to_owned()))
                .or_default();
            queues.insert(queue_id, offset) != Some(offset)
        });
        if let Some(pending) = pending.as_mut() {
            pending.insert((topic.to_owned(), group.to_owned(), queue_id), offset);
        }
    }

    /// From now on, commits made here are kept for the master ([`super::mirror`]): a
    /// slave's table, copied from its master by [`ConsumerOffsets::mirror`].
    pub fn keep_commits_for_master(&self) {
        self.pending.lock().get_or_insert_with(PendingCommits::new);
    }

    /// The commits made here that the master has not confirmed yet, as `(topic, group,
    /// queue id, offset)`.
    pub fn pending_for_master(&self) -> Vec<(String, String, i32, i64)> {
        self.pending
            .lock()
            .as_ref()
            .map_or_else(Vec::new, |pending| {
                pending
                    .iter()
                    .map(|((topic, group, queue), &offset)| {
                        (topic.clone(), group.clone(), *queue, offset)
                    })
                    .collect()
            })
    }

    /// The master confirmed `offset` for the queue: the commit is no longer pending,
    /// unless a newer one was made here meanwhile.
    pub fn given_to_master(&self, topic: &str, group: &str, queue_id: i32, offset: i64) {
        if let Some(pending) = self.pending.lock().as_mut() {
            let key = (topic.to_owned(), group.to_owned(), queue_id);
            if pending.get(&key) == Some(&offset) {
                pending.remove(&key);
            }
        }
    }

    /// Takes the master's whole table (GET_ALL_CONSUMER_OFFSET's body, checked as the
    /// file is), with the commits still pending here over it ([`mirror::merge_offsets`]).
    /// True if the table changed.
    pub fn mirror(&self, body: &[u8]) -> Result<bool, MirrorError> {
        let master = std::str::from_utf8(body)
            .map_err(anyhow::Error::from)
            .and_then(parse)
            .map_err(|why| MirrorError::invalid("consumer offsets", format!("{why:#}")))?;
        // The lock is held across the change so a commit cannot slip between the merge
        // and the swap and be lost.
        let pending = self.pending.lock();
        let merged =
            mirror::merge_offsets(master, pending.as_ref().unwrap_or(&PendingCommits::new()));
        let changed = self.table.change(|table| {
            if *table == merged {
                return false;
            }
            *table = merged;
            true
        });
        Ok(changed.is_some())
    }

    /// The whole table as its file holds it: GET_ALL_CONSUMER_OFFSET's body.
    pub fn to_json(&self) -> Vec<u8> {
        self.table.encoded()
    }

    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.table.read(|table| {
            table
                .get(&(topic.to_owned(), group.to_owned()))?
                .get(&queue_id)
                .copied()
        })
    }

    /// Copies `src`'s committed offsets on `topic` to `dest`, replacing what `dest` had
    /// there, as Java's `cloneOffset` does (CLONE_GROUP_OFFSET); the queues copied (0 when
    /// `src` has none on the topic, which leaves `dest` as it was).
    pub fn clone_offsets(&self, src: &str, dest: &str, topic: &str) -> usize {
        assert!(
            !topic.contains('@') && !dest.contains('@'),
            "an unvalidated name reached the offset table: topic {topic:?}, group {dest:?}"
        );
        let mut copied = 0;
        self.table.change(|table| {
            let Some(queues) = table.get(&(topic.to_owned(), src.to_owned())).cloned() else {
                return false;
            };
            copied = queues.len();
            table.insert((topic.to_owned(), dest.to_owned()), queues.clone()) != Some(queues)
        });
        copied
    }

    /// Forgets every committed offset of `group` (its subscription group was deleted with
    /// `cleanOffset`); how many (topic, group) entries went.
    pub fn remove_group(&self, group: &str) -> usize {
        let mut removed = 0;
        self.table.change(|table| {
            let before = table.len();
            table.retain(|(_, g), _| g != group);
            removed = before - table.len();
            removed > 0
        });
        removed
    }

    /// The topics `group` has committed offsets on, in name order.
    pub fn topics_of(&self, group: &str) -> Vec<String> {
        self.table.read(|table| {
            table
                .keys()
                .filter(|(_, g)| g == group)
                .map(|(topic, _)| topic.clone())
                .collect()
        })
    }

    /// The groups with committed offsets on `topic`, in name order (Java's
    /// `whichGroupByTopic`).
    pub fn groups_of(&self, topic: &str) -> Vec<String> {
        self.table.read(|table| {
            table
                .keys()
                .filter(|(t, _)| t == topic)
                .map(|(_, group)| group.clone())
                .collect()
        })
    }

    /// Every group with a committed offset, in name order.
    pub fn groups(&self) -> Vec<String> {
        self.table.read(|table| {
            let groups: std::collections::BTreeSet<&String> =
                table.keys().map(|(_, g)| g).collect();
            groups.into_iter().cloned().collect()
        })
    }

    /// The whole table, `((topic, group), queue id → offset)`, copied under the lock (the
    /// metrics sampler's lag, every 10 s).
    pub fn snapshot(&self) -> Vec<((String, String), BTreeMap<i32, i64>)> {
        self.table.read(|table| {
            table
                .iter()
                .map(|(pair, queues)| (pair.clone(), queues.clone()))
                .collect()
        })
    }

    /// Every committed offset of the groups in `groups`, as `(group, topic, queue id,
    /// offset)`, in table order; offsets below 0 (fastjson's "nothing committed") are left
    /// out. One pass over the table under its lock (retention asks once per run).
    pub fn committed_by(&self, groups: &[String]) -> Vec<(String, String, i32, u64)> {
        self.table.read(|table| {
            let mut found = Vec::new();
            for ((topic, group), queues) in table.iter() {
                if !groups.iter().any(|wanted| wanted == group) {
                    continue;
                }
                for (&queue_id, &offset) in queues {
                    if let Ok(offset) = u64::try_from(offset) {
                        found.push((group.clone(), topic.clone(), queue_id, offset));
                    }
                }
            }
            found
        })
    }

    /// Queues a write of the table on tokio's blocking pool if commits were made since the
    /// last write: the node's periodic flush, which never waits for the disk.
    pub fn write_if_behind(&self) {
        self.table.write_if_behind();
    }

    /// Writes the file on the calling thread if anything changed since the last write;
    /// true if it wrote (tools, tests).
    pub fn persist_if_changed(&self) -> Result<bool, WriteFailed> {
        self.table.flush()
    }

    /// Writes the whole table atomically on the calling thread unless the file holds it
    /// already (a clean stop, tools, tests; never a shard's reactor).
    pub fn persist(&self) -> Result<(), WriteFailed> {
        self.table.flush().map(drop)
    }
}

/// The file's bytes: `{"offsetTable":{"topic@group":{"0":5}}}`, queue ids quoted.
fn encode(table: &Table) -> Vec<u8> {
    let file = OffsetFile {
        offset_table: table
            .iter()
            .map(|((topic, group), queues)| (names::offset_key(topic, group), queues.clone()))
            .collect(),
    };
    serde_json::to_vec_pretty(&file).expect("integer maps always serialise")
}

fn parse(text: &str) -> anyhow::Result<Table> {
    let file: OffsetFile = match serde_json::from_str(text) {
        Ok(file) => file,
        // fastjson's unquoted integer keys.
        Err(error) => serde_json::from_str(&quote_bare_keys(text)).map_err(|_| error)?,
    };
    let mut table = Table::new();
    for (key, queues) in file.offset_table {
        check_entry(&key, &queues)
            .map_err(|why| anyhow::anyhow!("entry {key:?}: {why}; fix or remove it"))?;
        let (topic, group) = key.split_once('@').expect("check_entry split it");
        table.insert((topic.to_owned(), group.to_owned()), queues);
    }
    Ok(table)
}

/// One loaded entry against the rules the requests apply. The topic table may no longer
/// hold the topic (deleted topics keep their offsets), so queue ids are bounded by
/// [`names::MAX_QUEUE_NUMS`]. -1 is accepted as an offset: fastjson files written by
/// Java hold it for queues with nothing committed yet.
fn check_entry(key: &str, queues: &BTreeMap<i32, i64>) -> Result<(), BadEntry> {
    let (topic, group) = names::split_offset_key(key)?;
    for (&queue_id, &offset) in queues {
        names::validate_group_topic_queue(group, topic, None, queue_id)?;
        if offset < -1 {
            return Err(BadEntry::Offset { queue_id, offset });
        }
    }
    Ok(())
}

/// Why a loaded entry is refused.
#[derive(Debug, thiserror::Error)]
enum BadEntry {
    #[error(transparent)]
    Name(#[from] names::NameError),
    #[error("queue {queue_id} has the offset {offset}")]
    Offset { queue_id: i32, offset: i64 },
}

/// Quotes object keys that are bare integers (`{0:5}` → `{"0":5}`), leaving strings and
/// array elements alone.
pub(crate) fn quote_bare_keys(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let (mut in_string, mut escaped, mut key_position) = (false, false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if key_position && (c.is_ascii_digit() || c == '-') {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '-') {
                i += 1;
            }
            let token: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if next == Some(&':') {
                out.push('"');
                out.push_str(&token);
                out.push('"');
            } else {
                out.push_str(&token);
            }
            key_position = false;
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | ',' => key_position = true,
            c if c.is_whitespace() => {}
            _ => key_position = false,
        }
        if c == '"' {
            key_position = false;
        }
        out.push(c);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slave_keeps_its_own_commits_over_the_masters_until_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = ConsumerOffsets::in_memory(dir.path());
        offsets.keep_commits_for_master();
        offsets
            .mirror(br#"{"offsetTable":{"T@g":{"0":5,"1":6}}}"#)
            .unwrap();
        assert_eq!(offsets.query("g", "T", 0), Some(5));
        assert!(
            offsets.pending_for_master().is_empty(),
            "copies are not commits"
        );
        offsets.commit("g", "T", 0, 9);
        // The master's older offset does not undo the commit made here.
        offsets
            .mirror(br#"{"offsetTable":{"T@g":{"0":5,"1":7}}}"#)
            .unwrap();
        assert_eq!(
            (offsets.query("g", "T", 0), offsets.query("g", "T", 1)),
            (Some(9), Some(7))
        );
        assert_eq!(
            offsets.pending_for_master(),
            vec![("T".into(), "g".into(), 0, 9)]
        );
        // Given back (the master confirmed 9), the master's word counts again.
        offsets.given_to_master("T", "g", 0, 9);
        offsets
            .mirror(br#"{"offsetTable":{"T@g":{"0":3,"1":7}}}"#)
            .unwrap();
        assert_eq!(offsets.query("g", "T", 0), Some(3));
        // A commit made while the give-back was under way stays pending.
        offsets.commit("g", "T", 1, 20);
        offsets.given_to_master("T", "g", 1, 19);
        assert_eq!(
            offsets.pending_for_master(),
            vec![("T".into(), "g".into(), 1, 20)]
        );
    }

    #[test]
    fn a_bad_table_from_the_master_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = ConsumerOffsets::in_memory(dir.path());
        offsets.commit("g", "T", 0, 4);
        for body in [
            &b"{not json"[..],
            br#"{"offsetTable":{"T@g@x":{"0":1}}}"#,
            br#"{"offsetTable":{"T@g":{"0":-5}}}"#,
        ] {
            let error = offsets.mirror(body).unwrap_err().to_string();
            assert!(
                error.contains("refused the master's consumer offsets"),
                "{error}"
            );
        }
        assert_eq!(offsets.query("g", "T", 0), Some(4));
        assert!(
            offsets.pending_for_master().is_empty(),
            "a master keeps no pending commits"
        );
    }

    #[test]
    fn fastjson_bare_keys_load() {
        let table =
            parse(r#"{"offsetTable":{"T@g":{0:5, 1 :7},"%RETRY%g@g":{0:-1}},"x":[1,2]}"#).unwrap();
        assert_eq!(table[&("T".into(), "g".into())][&1], 7);
        assert_eq!(table[&("%RETRY%g".into(), "g".into())][&0], -1);
    }

    #[test]
    fn entries_the_requests_would_refuse_stop_the_load_naming_the_entry() {
        for (text, entry) in [
            (
                r#"{"offsetTable":{"abuse@topic@grp":{"0":1}}}"#,
                "abuse@topic@grp",
            ),
            (r#"{"offsetTable":{"nogroup":{"0":1}}}"#, "nogroup"),
            (
                r#"{"offsetTable":{"../../etc/x@g":{"0":1}}}"#,
                "../../etc/x@g",
            ),
            (r#"{"offsetTable":{"T@g":{"-5":1}}}"#, "T@g"),
            (r#"{"offsetTable":{"T@g":{"1024":1}}}"#, "T@g"),
            (r#"{"offsetTable":{"T@g":{"0":-2}}}"#, "T@g"),
        ] {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(&format!("{entry:?}")), "{text}: {error}");
        }
        assert!(parse(r#"{"offsetTable":{"T@g":{"1023":-1}}}"#).is_ok());
    }

    #[test]
    fn a_written_table_reads_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = ConsumerOffsets::in_memory(dir.path());
        offsets.commit("g", "T", 3, 42);
        offsets.commit("h", "T", 0, 1);
        assert!(offsets.persist_if_changed().unwrap());
        assert!(!offsets.persist_if_changed().unwrap());
        let text = std::fs::read_to_string(offsets.path()).unwrap();
        assert!(text.contains("\"T@g\""), "{text}");
        let loaded = ConsumerOffsets::load(dir.path()).unwrap();
        assert_eq!(loaded.query("g", "T", 3), Some(42));
        assert_eq!(loaded.query("h", "T", 0), Some(1));
        assert_eq!(loaded.query("h", "T", 1), None);
    }

    #[test]
    fn committed_offsets_are_listed_for_the_groups_asked_only() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = ConsumerOffsets::in_memory(dir.path());
        offsets.commit("g", "T", 3, 42);
        offsets.commit("g", "%RETRY%g", 0, 7);
        offsets.commit("h", "T", 0, 1);
        offsets.commit("g", "U", 1, -1);
        let listed = offsets.committed_by(&["g".into(), "absent".into()]);
        assert_eq!(
            listed,
            vec![
                ("g".into(), "%RETRY%g".into(), 0, 7),
                ("g".into(), "T".into(), 3, 42),
            ]
        );
        assert!(offsets.committed_by(&[]).is_empty());
    }
}
