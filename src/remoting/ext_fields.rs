//! [`ExtFields`]: the string-to-string "custom header" of a remoting command.
//!
//! Every request and most responses carry one, and the send path decodes one per
//! message, so it is built for the handful of short entries headers really have rather
//! than as a general map:
//!
//! - Entries live in one `Vec`, **sorted by key, keys unique**. Iteration is therefore in
//!   key order (byte-wise, as `str`'s `Ord`), which keeps encoded headers deterministic and
//!   in fastjson's alphabetical order; lookups are binary searches; equality does not
//!   depend on the order entries were inserted in.
//! - Keys and values are [`CompactString`]s: up to 24 bytes are stored inline, so typical
//!   header names and values (`queueId`, `"42"`, a topic name) cost no heap allocation.
//! - Bulk construction ([`FromIterator`], [`From`] an array, and the decoders' internal
//!   path) collects first and sorts once, resolving repeated keys as a JSON object read
//!   into a map does: a later entry replaces an earlier one.

use std::fmt;
use std::ops::Index;

use compact_str::CompactString;

/// `str`'s byte-wise order, deciding on the first byte where it can: keys are a few bytes
/// long (single letters for sends) and mostly differ there, where a `memcmp` call costs
/// more than the compare.
#[inline]
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match (a.first(), b.first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        // Equal first bytes (or an empty key): a key of at most one byte is a prefix of
        // the other, so the lengths decide, again without the call.
        _ if a.len() <= 1 || b.len() <= 1 => a.len().cmp(&b.len()),
        _ => a[1..].cmp(&b[1..]),
    }
}

/// The extFields of a command; see the module doc for its invariants.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct ExtFields {
    /// Sorted by key, no two keys equal.
    entries: Vec<(CompactString, CompactString)>,
}

impl ExtFields {
    pub fn new() -> ExtFields {
        ExtFields::default()
    }

    /// Empty, with room for `capacity` entries.
    pub fn with_capacity(capacity: usize) -> ExtFields {
        ExtFields {
            entries: Vec::with_capacity(capacity),
        }
    }

    /// Built from updates in arrival order: `Some` sets a key, `None` removes it. The last
    /// update of each key decides it, exactly as applying them one by one would, but with
    /// one stable sort instead of a search and shift per update.
    pub(crate) fn from_updates(
        mut updates: Vec<(CompactString, Option<CompactString>)>,
    ) -> ExtFields {
        // Senders that write keys in order (fastjson's alphabetical order, our encoder's)
        // with no duplicates need no sort and no dedup: one pass says so.
        let ordered = updates
            .windows(2)
            .all(|pair| key_order(&pair[0].0, &pair[1].0).is_lt());
        if !ordered {
            ExtFields::sort_and_dedup(&mut updates);
        }
        // Same element size in and out, so this reuses the allocation.
        let entries = updates
            .into_iter()
            .filter_map(|(key, value)| value.map(|value| (key, value)))
            .collect();
        ExtFields { entries }
    }

    /// Sorts updates by key, keeping only the last update of each key.
    fn sort_and_dedup(updates: &mut Vec<(CompactString, Option<CompactString>)>) {
        // Stable, so equal keys keep their arrival order and the last of a run is the
        // latest.
        updates.sort_by(|a, b| key_order(&a.0, &b.0));
        // Keep the last update of each run of equal keys.
        updates.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                std::mem::swap(&mut later.1, &mut earlier.1);
                true
            } else {
                false
            }
        });
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(probe, _)| key_order(probe, key))
    }

    /// Sets `key` to `value`; returns the value it replaced.
    ///
    /// The key is a concrete type so that the usual `insert("name".into(), value)` infers
    /// it; building one from a literal of up to 24 bytes copies it inline, no allocation.
    pub fn insert(
        &mut self,
        key: CompactString,
        value: impl Into<CompactString>,
    ) -> Option<CompactString> {
        let value = value.into();
        match self.position(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
            Err(at) => {
                self.entries.insert(at, (key, value));
                None
            }
        }
    }

    /// Makes room for `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key)
            .ok()
            .map(|at| self.entries[at].1.as_str())
    }

    /// Removes `key`; returns its value if it had one.
    pub fn remove(&mut self, key: &str) -> Option<CompactString> {
        self.position(key).ok().map(|at| self.entries.remove(at).1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// The entries in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Lookups of an [`ExtFields`] made mostly in ascending key order, as a header decoder
/// reads its fields: a lookup whose key is above every entry already passed walks forward
/// from where the last one stopped, so a decoder reading every field of a sorted header
/// makes one pass over the entries instead of one binary search per field (the send
/// header's single-letter names `a`..`n` are read in that order). Any other lookup falls
/// back to the binary search. Answers are always those of [`ExtFields::get`].
pub struct InOrder<'a> {
    entries: &'a [(CompactString, CompactString)],
    /// Where the next forward walk starts: the entries before it were passed.
    next: std::cell::Cell<usize>,
}

impl ExtFields {
    /// A reader for lookups in ascending key order; see [`InOrder`].
    pub fn in_order(&self) -> InOrder<'_> {
        InOrder {
            entries: &self.entries,
            next: std::cell::Cell::new(0),
        }
    }
}

impl<'a> InOrder<'a> {
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let start = self.next.get();
        // Entries are sorted: walking on from `start` misses nothing iff the last entry
        // passed is below `key`.
        let forward = match start.checked_sub(1) {
            None => true,
            Some(passed) => key_order(&self.entries[passed].0, key).is_lt(),
        };
        if !forward {
            return self
                .entries
                .binary_search_by(|(probe, _)| key_order(probe, key))
                .ok()
                .map(|at| self.entries[at].1.as_str());
        }
        let mut at = start;
        while let Some((probe, value)) = self.entries.get(at) {
            match key_order(probe, key) {
                std::cmp::Ordering::Less => at += 1,
                std::cmp::Ordering::Equal => {
                    self.next.set(at + 1);
                    return Some(value.as_str());
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        self.next.set(at);
        None
    }
}

/// The entries of an [`ExtFields`] in key order, as `(key, value)`.
#[derive(Clone)]
pub struct Iter<'a>(std::slice::Iter<'a, (CompactString, CompactString)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        self.0.next().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// A later pair with an already-seen key replaces the earlier one.
impl<K: Into<CompactString>, V: Into<CompactString>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> ExtFields {
        ExtFields::from_updates(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), Some(v.into())))
                .collect(),
        )
    }
}

impl<K: Into<CompactString>, V: Into<CompactString>, const N: usize> From<[(K, V); N]>
    for ExtFields
{
    fn from(pairs: [(K, V); N]) -> ExtFields {
        pairs.into_iter().collect()
    }
}

/// `fields["key"]`, panicking when the key is absent, as a map's indexing does.
impl Index<&str> for ExtFields {
    type Output = str;

    fn index(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("no extField `{key}`"))
    }
}

/// Shown as a map, `{"key": "value", ...}`.
impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A JSON object (or any serde map) in key order.
impl serde::Serialize for ExtFields {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_is_strs_order() {
        let keys = [
            "", "a", "b", "aa", "ab", "ba", "abc", "abd", "a\u{0}", "\u{0}", "queueId", "queueIds",
            "queue", "é", "e", "topic", "t",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(key_order(a, b), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn in_order_lookups_answer_as_get_does_in_any_order() {
        let fields: ExtFields = [
            ("a", "1"),
            ("c", "3"),
            ("d", "4"),
            ("brokerName", "b"),
            ("n", ""),
        ]
        .into_iter()
        .collect();
        let probes = ["a", "b", "brokerName", "c", "d", "e", "n", "z", "", "A"];
        // Every sequence of three probes (with repeats), ascending or not.
        for first in probes {
            for second in probes {
                for third in probes {
                    let reader = fields.in_order();
                    for key in [first, second, third] {
                        assert_eq!(
                            reader.get(key),
                            fields.get(key),
                            "lookup of {key:?} after {first:?}, {second:?}, {third:?}"
                        );
                    }
                }
            }
        }
    }

    fn keys(fields: &ExtFields) -> Vec<&str> {
        fields.iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn iterates_in_key_order_whatever_the_insert_order() {
        let mut f = ExtFields::new();
        for key in ["queueId", "b", "a", "topic", "A", "é", "aa"] {
            assert_eq!(f.insert(key.into(), key.len().to_string()), None);
        }
        assert_eq!(keys(&f), ["A", "a", "aa", "b", "queueId", "topic", "é"]);
        assert_eq!(f.len(), 7);
        assert_eq!(f.iter().len(), 7);
        assert_eq!(f.iter().next_back(), Some(("é", "2")));
        let collected: Vec<(&str, &str)> = (&f).into_iter().collect();
        assert_eq!(collected[4], ("queueId", "7"));
    }

    #[test]
    fn duplicate_insert_replaces_and_returns_the_old_value() {
        let mut f = ExtFields::new();
        assert_eq!(f.insert("k".into(), "one"), None);
        assert_eq!(
            f.insert("k".into(), String::from("two")).as_deref(),
            Some("one")
        );
        assert_eq!(f.get("k"), Some("two"));
        assert_eq!(&f["k"], "two");
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn remove_contains_clear() {
        let mut f = ExtFields::from([("a", "1"), ("b", "2"), ("c", "3")]);
        assert!(f.contains_key("b"));
        assert_eq!(f.remove("b").as_deref(), Some("2"));
        assert_eq!(f.remove("b"), None);
        assert!(!f.contains_key("b"));
        assert_eq!(f.get("b"), None);
        assert_eq!(keys(&f), ["a", "c"]);
        f.clear();
        assert!(f.is_empty());
        assert_eq!(f, ExtFields::new());
    }

    #[test]
    fn equality_ignores_insert_order() {
        let mut forward = ExtFields::new();
        let mut backward = ExtFields::new();
        let pairs = [("x", "1"), ("m", "2"), ("a", "3")];
        for (k, v) in pairs {
            forward.insert(k.into(), v);
        }
        for (k, v) in pairs.iter().rev() {
            backward.insert((*k).into(), *v);
        }
        assert_eq!(forward, backward);
        backward.insert("m".into(), "changed");
        assert_ne!(forward, backward);
    }

    #[test]
    fn from_iterator_sorts_and_later_duplicates_win() {
        let f: ExtFields = vec![
            ("z".to_string(), "1".to_string()),
            ("a".to_string(), "first".to_string()),
            ("m".to_string(), "2".to_string()),
            ("a".to_string(), "second".to_string()),
            ("a".to_string(), "third".to_string()),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [("a", "third"), ("m", "2"), ("z", "1")]
        );
        assert_eq!(f, ExtFields::from([("m", "2"), ("z", "1"), ("a", "third")]));
    }

    #[test]
    fn updates_apply_as_if_one_by_one() {
        let up = |k: &str, v: Option<&str>| (CompactString::from(k), v.map(CompactString::from));
        let f = ExtFields::from_updates(vec![
            up("gone", Some("x")),
            up("dup", Some("1")),
            up("gone", None),
            up("back", None),
            up("dup", Some("2")),
            up("back", Some("again")),
            up("never", None),
        ]);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [("back", "again"), ("dup", "2")]
        );
    }

    #[test]
    fn short_strings_stay_inline() {
        let f = ExtFields::from([("queueOffset", "1234567890123")]);
        let (key, value) = &f.entries[0];
        assert!(!key.is_heap_allocated() && !value.is_heap_allocated());
    }

    #[test]
    fn debug_and_serialize_look_like_a_map() {
        let f = ExtFields::from([("b", "2"), ("a", "1")]);
        assert_eq!(format!("{f:?}"), r#"{"a": "1", "b": "2"}"#);
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"a":"1","b":"2"}"#);
    }
}
