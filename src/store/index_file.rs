//! The IndexFile's bytes: RocketMQ's layout (reference §4), pure encoding and decoding
//! with no I/O. `index.rs` owns the files and their life.
//!
//! ```text
//!   0        40                      40 + 4*S                    40 + 4*S + 20*N
//!   +--------+-----------------------+---------------------------+
//!   | header | S hash slots (i32)    | N entries (20 bytes each) |
//!   +--------+-----------------------+---------------------------+
//!   header: beginTimestamp i64, endTimestamp i64, beginPhyOffset i64, endPhyOffset i64,
//!           hashSlotCount i32, indexCount i32                       (all big-endian)
//!   slot:   number of the newest entry of its bucket, 0 = empty
//!   entry:  keyHash i32, phyOffset i64, timeDiff i32 (s since beginTimestamp), prevIndex i32
//! ```
//!
//! Invariants:
//! - Entry 0 is never used: `indexCount` starts at 1, so 0 can mean "none" in a slot and
//!   in `prevIndex`.
//! - A key's hash is `abs(javaHashCode(key))`, 0 for `Integer.MIN_VALUE`, so it is never
//!   negative; its slot is `hash % S`.
//! - The slot count is not in the file: opening a file with another `S` than it was built
//!   with would read the wrong slots, so the store keeps the geometry in its config and
//!   checks every file's length against it.

use super::properties;

pub const HEADER_LEN: u64 = 40;
pub const SLOT_LEN: u64 = 4;
pub const ENTRY_LEN: u64 = 20;
const _: () = assert!(HEADER_LEN == 4 * 8 + 2 * 4);
const _: () = assert!(ENTRY_LEN == 4 + 8 + 4 + 4);
/// [`HEADER_LEN`] and [`ENTRY_LEN`] as buffer lengths.
pub const HEADER_BYTES: usize = 40;
pub const ENTRY_BYTES: usize = 20;
const _: () = assert!(HEADER_BYTES as u64 == HEADER_LEN && ENTRY_BYTES as u64 == ENTRY_LEN);

/// The separator RocketMQ puts between the topic and the key (`topic#key`).
pub const KEY_JOIN: char = '#';
/// Separates the keys of one message in its `KEYS` property.
pub const KEYS_SEPARATOR: char = ' ';

/// RocketMQ's `IndexHeader`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexHeader {
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
    pub begin_phy_offset: i64,
    pub end_phy_offset: i64,
    pub hash_slot_count: i32,
    pub index_count: i32,
}

impl IndexHeader {
    /// A new file's header: no entry yet (`indexCount` 1, entry 0 unused).
    pub fn empty() -> IndexHeader {
        IndexHeader {
            index_count: 1,
            ..IndexHeader::default()
        }
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        out[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        out[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        out[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        out[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        out[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> IndexHeader {
        let i64_at = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8"));
        let i32_at = |at: usize| i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4"));
        IndexHeader {
            begin_timestamp: i64_at(0),
            end_timestamp: i64_at(8),
            begin_phy_offset: i64_at(16),
            end_phy_offset: i64_at(24),
            hash_slot_count: i32_at(32),
            index_count: i32_at(36),
        }
    }

    /// Entries in use (entry 0 never is).
    pub fn entries(&self) -> u32 {
        self.index_count.max(1).unsigned_abs() - 1
    }
}

/// One 20-byte entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexEntry {
    pub key_hash: i32,
    pub phys_offset: i64,
    /// Seconds from the file's `beginTimestamp` to the record's store time.
    pub time_diff: i32,
    /// The previous entry of the same bucket, 0 at the end of the chain.
    pub prev_index: i32,
}

impl IndexEntry {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.key_hash.to_be_bytes());
        out.extend_from_slice(&self.phys_offset.to_be_bytes());
        out.extend_from_slice(&self.time_diff.to_be_bytes());
        out.extend_from_slice(&self.prev_index.to_be_bytes());
    }

    /// Decodes the first 20 bytes of `bytes` (which must hold them).
    pub fn decode(bytes: &[u8]) -> IndexEntry {
        let i32_at = |at: usize| i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4"));
        IndexEntry {
            key_hash: i32_at(0),
            phys_offset: i64::from_be_bytes(bytes[4..12].try_into().expect("8")),
            time_diff: i32_at(12),
            prev_index: i32_at(16),
        }
    }
}

/// A file's shape: its slot and entry counts (`maxHashSlotNum`, `maxIndexNum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub slots: u32,
    /// Entry numbers a file can hold, entry 0 included (so `entries - 1` are usable).
    pub entries: u32,
}

impl Geometry {
    pub fn file_len(&self) -> u64 {
        HEADER_LEN + u64::from(self.slots) * SLOT_LEN + u64::from(self.entries) * ENTRY_LEN
    }

    pub fn slot_of(&self, key_hash: i32) -> u32 {
        assert!(key_hash >= 0, "key hash {key_hash} is negative");
        key_hash.unsigned_abs() % self.slots
    }

    pub fn slot_pos(&self, slot: u32) -> u64 {
        assert!(slot < self.slots, "slot {slot} of {}", self.slots);
        HEADER_LEN + u64::from(slot) * SLOT_LEN
    }

    pub fn entry_pos(&self, number: u32) -> u64 {
        assert!(number < self.entries, "entry {number} of {}", self.entries);
        HEADER_LEN + u64::from(self.slots) * SLOT_LEN + u64::from(number) * ENTRY_LEN
    }
}

/// RocketMQ's key hash: `abs(String.hashCode())`, 0 when that overflows.
pub fn key_hash(java_hash: i32) -> i32 {
    java_hash.checked_abs().unwrap_or(0)
}

/// The `UNIQ_KEY` and `KEYS` values of a properties string in one pass; as
/// [`properties::get`], the last non-empty value of a name wins.
fn uniq_and_keys(properties_text: &str) -> (Option<&str>, Option<&str>) {
    let (mut uniq, mut keys) = (None, None);
    for pair in properties_text.split(properties::PROPERTY_SEPARATOR) {
        let Some((name, value)) = pair.split_once(properties::NAME_VALUE_SEPARATOR) else {
            continue;
        };
        if value.is_empty() {
            continue;
        }
        if name == properties::UNIQ_KEY {
            uniq = Some(value);
        } else if name == properties::KEYS {
            keys = Some(value);
        }
    }
    (uniq, keys)
}

/// The key hashes a record is indexed under: `topic#UNIQ_KEY` and `topic#k` for each
/// space-separated `k` of `KEYS`, in that order (RocketMQ's `IndexService.buildIndex`).
pub fn record_key_hashes(topic: &str, properties_text: &str, out: &mut Vec<i32>) {
    let (uniq, keys) = uniq_and_keys(properties_text);
    if uniq.is_none() && keys.is_none() {
        return;
    }
    let prefix = key_prefix_hash(topic);
    if let Some(uniq) = uniq {
        out.push(key_hash(properties::java_string_hash_from(prefix, uniq)));
    }
    if let Some(keys) = keys {
        for key in keys.split(KEYS_SEPARATOR).filter(|key| !key.is_empty()) {
            out.push(key_hash(properties::java_string_hash_from(prefix, key)));
        }
    }
}

/// The hash a query for `key` of `topic` looks up.
pub fn query_key_hash(topic: &str, key: &str) -> i32 {
    key_hash(properties::java_string_hash_from(
        key_prefix_hash(topic),
        key,
    ))
}

/// The Java hash of `topic#`, which every key of the topic extends.
fn key_prefix_hash(topic: &str) -> i32 {
    let mut join = [0u8; 4];
    let join: &str = KEY_JOIN.encode_utf8(&mut join);
    properties::java_string_hash_from(properties::java_string_hash(topic), join)
}

/// Seconds from `begin_timestamp` to `store_timestamp`, as RocketMQ stores them: clamped to
/// `[0, i32::MAX]`, and 0 while the file has no begin time.
pub fn time_diff(begin_timestamp: i64, store_timestamp: i64) -> i32 {
    if begin_timestamp <= 0 {
        return 0;
    }
    let seconds = ((store_timestamp - begin_timestamp) / 1000).clamp(0, i64::from(i32::MAX));
    i32::try_from(seconds).expect("clamped to the i32 range")
}

/// An index file's name: its creation time as `yyyyMMddHHmmssSSS` (UTC here; RocketMQ uses
/// the broker's local time). Names sort in creation order.
pub fn file_name(created_ms: i64) -> String {
    let ms = created_ms.max(0);
    let (days, in_day) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = crate::clock::civil_from_days(days);
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}{:03}",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// Whether `name` is an index file's name (17 digits).
pub fn is_file_name(name: &str) -> bool {
    name.len() == 17 && name.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_entry_round_trip_big_endian() {
        let header = IndexHeader {
            begin_timestamp: 1_700_000_000_000,
            end_timestamp: 1_700_000_123_456,
            begin_phy_offset: 7,
            end_phy_offset: 1 << 56,
            hash_slot_count: 3,
            index_count: 9,
        };
        let bytes = header.encode();
        assert_eq!(&bytes[32..40], &[0, 0, 0, 3, 0, 0, 0, 9]);
        assert_eq!(IndexHeader::decode(&bytes), header);
        assert_eq!(header.entries(), 8);
        assert_eq!(IndexHeader::empty().entries(), 0);

        let entry = IndexEntry {
            key_hash: 0x0102_0304,
            phys_offset: -2,
            time_diff: 5,
            prev_index: 6,
        };
        let mut out = Vec::new();
        entry.encode(&mut out);
        assert_eq!(out.len(), ENTRY_BYTES);
        assert_eq!(&out[0..4], &[1, 2, 3, 4]);
        assert_eq!(IndexEntry::decode(&out), entry);
    }

    #[test]
    fn geometry_places_slots_after_the_header_and_entries_after_the_slots() {
        let default = Geometry {
            slots: 5_000_000,
            entries: 20_000_000,
        };
        assert_eq!(
            default.file_len(),
            420_000_040,
            "RocketMQ's default file size"
        );
        let small = Geometry {
            slots: 10,
            entries: 4,
        };
        assert_eq!(small.slot_pos(0), 40);
        assert_eq!(small.slot_pos(9), 76);
        assert_eq!(small.entry_pos(0), 80);
        assert_eq!(small.entry_pos(3), 140);
        assert_eq!(small.file_len(), 160);
        assert_eq!(small.slot_of(23), 3);
    }

    #[test]
    fn key_hashes_match_java_on_the_joined_string() {
        let joined = |topic: &str, key: &str| {
            key_hash(properties::java_string_hash(&format!("{topic}#{key}")))
        };
        assert_eq!(query_key_hash("TopicTest", "k1"), joined("TopicTest", "k1"));
        assert_eq!(query_key_hash("T", "ключ"), joined("T", "ключ"));
        // "polygenelubricants".hashCode() is Integer.MIN_VALUE: abs overflows, RocketMQ uses 0.
        assert_eq!(properties::java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(key_hash(i32::MIN), 0);
        assert_eq!(key_hash(-5), 5);

        let props = properties::encode([("KEYS", "a  b"), ("UNIQ_KEY", "U1"), ("TAGS", "t")]);
        let mut hashes = Vec::new();
        record_key_hashes("Top", &props, &mut hashes);
        assert_eq!(
            hashes,
            vec![joined("Top", "U1"), joined("Top", "a"), joined("Top", "b")]
        );
        hashes.clear();
        record_key_hashes("Top", &properties::encode([("TAGS", "t")]), &mut hashes);
        assert!(hashes.is_empty());
        // The last non-empty value of a name wins, as properties::get reads it.
        let twice = "KEYS\u{1}old\u{2}UNIQ_KEY\u{1}\u{2}KEYS\u{1}new\u{2}";
        assert_eq!(uniq_and_keys(twice), (None, Some("new")));
        assert_eq!(
            uniq_and_keys(twice).1,
            properties::get(twice, properties::KEYS)
        );
    }

    #[test]
    fn time_diffs_are_whole_seconds_clamped() {
        assert_eq!(time_diff(0, 5_000), 0, "no begin time yet");
        assert_eq!(time_diff(10_000, 12_999), 2);
        assert_eq!(time_diff(10_000, 9_000), 0);
        assert_eq!(time_diff(1, i64::MAX), i32::MAX);
    }

    #[test]
    fn file_names_are_utc_creation_times_that_sort() {
        assert_eq!(file_name(0), "19700101000000000");
        // 2026-12-02T06:12:34.567Z
        assert_eq!(file_name(1_796_191_954_567), "20261202061234567");
        assert_eq!(
            file_name(951_782_400_000),
            "20000229000000000",
            "a leap day"
        );
        assert!(is_file_name(&file_name(1)));
        assert!(!is_file_name("2026120206123456"));
        assert!(!is_file_name("2026120206123456x"));
        assert!(file_name(1_000) < file_name(1_001));
    }
}
