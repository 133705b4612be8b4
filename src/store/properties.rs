//! RocketMQ message properties and Java's `String.hashCode`. Pure: no I/O.
//!
//! Properties travel and are stored as one string of `key\x01value\x02` pairs; every
//! pair, the last included, ends with `\x02` (clients may omit the last one:
//! [`normalized`] restores it before anything is appended). Parsing follows the Java broker
//! (`MessageDecoder.string2messageProperties`) so that a string written by either side
//! means the same thing to both: malformed segments are skipped rather than rejected,
//! because a broker must not refuse a message over a property it does not understand.
//!
//! Order carries no meaning in RocketMQ (Java writes `HashMap` order); [`encode`] keeps
//! the caller's order so output is deterministic.

use std::collections::HashMap;

pub const NAME_VALUE_SEPARATOR_BYTE: u8 = 0x01;
pub const PROPERTY_SEPARATOR_BYTE: u8 = 0x02;
pub const NAME_VALUE_SEPARATOR: char = NAME_VALUE_SEPARATOR_BYTE as char;
pub const PROPERTY_SEPARATOR: char = PROPERTY_SEPARATOR_BYTE as char;

pub const KEYS: &str = "KEYS";
pub const TAGS: &str = "TAGS";
pub const UNIQ_KEY: &str = "UNIQ_KEY";
pub const WAIT: &str = "WAIT";

/// Past this many pairs `parse` deduplicates through a map instead of a linear scan, so a
/// hostile 32 KiB properties string cannot make it quadratic.
const LINEAR_DEDUP_MAX: usize = 16;

/// Encodes pairs in the given order; pairs with an empty key or value are skipped.
///
/// Separators inside keys or values are not escaped (RocketMQ has no escaping); such a
/// pair will not parse back as written.
pub fn encode<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        push_pair(&mut out, key, value);
    }
    out
}

/// Appends one pair to a properties string whose last pair is terminated (or which is
/// empty), as [`encode`] writes it; a pair with an empty key or value is skipped.
pub fn push_pair(out: &mut String, key: &str, value: &str) {
    if key.is_empty() || value.is_empty() {
        return;
    }
    out.reserve(key.len() + value.len() + 2);
    out.push_str(key);
    out.push(NAME_VALUE_SEPARATOR);
    out.push_str(value);
    out.push(PROPERTY_SEPARATOR);
}

/// The properties string with its last pair terminated: `properties` itself when it is
/// empty or already ends with `\x02`, else a copy with one `\x02` appended.
///
/// What the send path does before appending its own pairs: clients may omit the final
/// separator (`TAGS\x01tagA`), and a pair appended to that would become part of the last
/// value. [`parse`] gives the same pairs for the string with or without the added
/// separator (the empty segment it makes is dropped), so the client's meaning is kept
/// exactly and its bytes are kept whenever they were already terminated.
pub fn normalized(properties: &str) -> std::borrow::Cow<'_, str> {
    if properties.is_empty() || properties.ends_with(PROPERTY_SEPARATOR) {
        std::borrow::Cow::Borrowed(properties)
    } else {
        let mut terminated = String::with_capacity(properties.len() + 1);
        terminated.push_str(properties);
        terminated.push(PROPERTY_SEPARATOR);
        std::borrow::Cow::Owned(terminated)
    }
}

/// One `\x02`-separated segment as a pair, or `None` where the Java parser drops it.
///
/// Java also skips segments shorter than 3 UTF-16 units; any such segment lacks a
/// non-empty key, separator and non-empty value, so the separator checks cover it.
fn split_pair(segment: &str) -> Option<(&str, &str)> {
    let (key, value) = segment.split_once(NAME_VALUE_SEPARATOR)?;
    if key.is_empty() || value.is_empty() {
        return None;
    }
    Some((key, value))
}

fn pairs(properties: &str) -> impl Iterator<Item = (&str, &str)> {
    properties.split(PROPERTY_SEPARATOR).filter_map(split_pair)
}

/// Parses as RocketMQ does: split on `\x02`, skip segments shorter than 3 chars, key and
/// value must be non-empty; later duplicates win (the returned order keeps the first position).
pub fn parse(properties: &str) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    let mut index: Option<HashMap<&str, usize>> = None;
    for (key, value) in pairs(properties) {
        let found = match &mut index {
            Some(map) => map.get(key).copied(),
            None => out.iter().position(|(k, _)| *k == key),
        };
        match found {
            Some(i) => out[i].1 = value,
            None => {
                out.push((key, value));
                if let Some(map) = &mut index {
                    map.insert(key, out.len() - 1);
                } else if out.len() > LINEAR_DEDUP_MAX {
                    index = Some(out.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect());
                }
            }
        }
    }
    out
}

/// The value of `key`, as `parse` would give it.
///
/// A byte scan rather than [`parse`]'s splitting: the send path looks up several keys per
/// message. Both separators are ASCII, so every cut lands on a char boundary; a segment
/// holds `key` exactly when it starts with `key` followed by its first `\x01`.
pub fn get<'a>(properties: &'a str, key: &str) -> Option<&'a str> {
    if key.is_empty() || key.contains(NAME_VALUE_SEPARATOR) {
        // No pair has such a key (parse drops empty keys; a key ends at its first \x01).
        return None;
    }
    let bytes = properties.as_bytes();
    let mut found = None;
    let mut start = 0;
    while start < bytes.len() {
        let end = memchr::memchr(PROPERTY_SEPARATOR_BYTE, &bytes[start..])
            .map_or(bytes.len(), |at| start + at);
        let segment = &properties[start..end];
        if let Some(rest) = segment.strip_prefix(key) {
            if let Some(value) = rest.strip_prefix(NAME_VALUE_SEPARATOR) {
                if !value.is_empty() {
                    found = Some(value);
                }
            }
        }
        start = end + 1;
    }
    found
}

/// `properties` parsed as [`parse`] does, without the pairs whose key is in `remove` or
/// in `set`, then the pairs of `set` appended in their order: how the broker rebuilds a
/// message's properties when it rewrites some (Java rebuilds the string from the parsed
/// map likewise, so a malformed segment the client sent is dropped the same way).
pub fn rewritten(properties: &str, remove: &[&str], set: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(properties.len() + 64);
    for (key, value) in parse(properties) {
        if remove.contains(&key) || set.iter().any(|(replaced, _)| *replaced == key) {
            continue;
        }
        push_pair(&mut out, key, value);
    }
    for (key, value) in set {
        push_pair(&mut out, key, value);
    }
    out
}

/// Java `String.hashCode()`: `h = 31*h + c` over UTF-16 code units, wrapping i32.
pub fn java_string_hash(text: &str) -> i32 {
    java_string_hash_from(0, text)
}

/// Java's `String.hashCode` of the string whose hash is `prefix_hash` followed by `text`,
/// computed without building the joined string (`java_string_hash_from(0, s)` is
/// `java_string_hash(s)`).
pub fn java_string_hash_from(prefix_hash: i32, text: &str) -> i32 {
    let step = |h: i32, unit: i32| h.wrapping_mul(31).wrapping_add(unit);
    if text.is_ascii() {
        // An ASCII byte is its own UTF-16 code unit.
        return text.bytes().fold(prefix_hash, |h, b| step(h, i32::from(b)));
    }
    text.encode_utf16()
        .fold(prefix_hash, |h, unit| step(h, i32::from(unit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewritten_drops_and_replaces_pairs_and_appends_the_set_ones() {
        let original =
            "TAGS\u{1}a\u{2}DELAY\u{1}3\u{2}bad\u{2}KEYS\u{1}k\u{2}TIMER_DELAY_SEC\u{1}9";
        let out = rewritten(
            original,
            &["TIMER_DELAY_SEC"],
            &[("DELAY", "2"), ("REAL_TOPIC", "T")],
        );
        assert_eq!(
            out,
            "TAGS\u{1}a\u{2}KEYS\u{1}k\u{2}DELAY\u{1}2\u{2}REAL_TOPIC\u{1}T\u{2}"
        );
        assert_eq!(
            parse(&out),
            vec![
                ("TAGS", "a"),
                ("KEYS", "k"),
                ("DELAY", "2"),
                ("REAL_TOPIC", "T")
            ]
        );
        assert_eq!(rewritten("", &["X"], &[]), "");
    }

    #[test]
    fn encode_terminates_every_pair_and_skips_empty_parts() {
        assert_eq!(
            encode([("A", "1"), ("", "x"), ("B", ""), ("C", "3")]),
            "A\u{1}1\u{2}C\u{1}3\u{2}"
        );
        assert_eq!(encode([]), "");
    }

    #[test]
    fn parse_follows_the_java_rules() {
        // Empty value, empty key, no separator, too short, empty segments: all dropped.
        let s = "k\u{1}\u{2}\u{1}v\u{2}ab\u{2}x\u{2}\u{2}good\u{1}v\u{1}w\u{2}";
        assert_eq!(parse(s), vec![("good", "v\u{1}w")]);
        // Missing trailing separator still yields the last pair.
        assert_eq!(parse("a\u{1}b"), vec![("a", "b")]);
        // Later duplicates win but keep the first position.
        let s = "a\u{1}1\u{2}b\u{1}2\u{2}a\u{1}3\u{2}";
        assert_eq!(parse(s), vec![("a", "3"), ("b", "2")]);
        assert_eq!(get(s, "a"), Some("3"));
        assert_eq!(get(s, "b"), Some("2"));
        assert_eq!(get(s, "c"), None);
        assert_eq!(get("k\u{1}\u{2}", "k"), None);
    }

    #[test]
    fn get_agrees_with_parse_on_awkward_strings() {
        let strings = [
            "",
            "\u{2}",
            "a\u{1}1",
            "a\u{1}1\u{2}a\u{1}\u{2}",
            "a\u{1}1\u{2}a\u{1}2\u{2}",
            "ab\u{1}1\u{2}a\u{1}2\u{2}b\u{1}\u{1}\u{2}",
            "\u{1}a\u{2}a\u{1}\u{1}x\u{2}aa\u{1}y",
            "é\u{1}ü\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}K\u{2}",
            "TAGS\u{2}TAGS\u{1}\u{2}\u{2}TAGSX\u{1}no\u{2}",
        ];
        for s in strings {
            let parsed = parse(s);
            for key in [
                "a", "aa", "ab", "b", "é", "TAGS", "UNIQ_KEY", "", "a\u{1}1", "x",
            ] {
                let expected = parsed.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
                assert_eq!(get(s, key), expected, "get({s:?}, {key:?})");
            }
        }
    }

    #[test]
    fn a_pair_appended_after_normalising_keeps_every_value_whole() {
        let strings = [
            "TAGS\u{1}tagA",
            "TAGS\u{1}tagA\u{2}",
            "TAGS\u{1}",
            "TAGS",
            "\u{1}",
            "a\u{1}1\u{2}b\u{1}2",
            "",
        ];
        for s in strings {
            let normal = normalized(s);
            assert_eq!(parse(&normal), parse(s), "{s:?}");
            let mut appended = normal.into_owned();
            appended.push_str(&encode([(UNIQ_KEY, "K1")]));
            let mut expected = parse(s);
            expected.push((UNIQ_KEY, "K1"));
            assert_eq!(parse(&appended), expected, "{s:?}");
            assert_eq!(get(&appended, UNIQ_KEY), Some("K1"), "{s:?}");
        }
        assert_eq!(get(&normalized("TAGS\u{1}tagA"), TAGS), Some("tagA"));
        // Already terminated strings are kept as they are, without a copy.
        assert!(matches!(
            normalized("TAGS\u{1}tagA\u{2}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn parse_dedups_many_pairs_through_the_map() {
        let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
        let mut s = encode(keys.iter().map(|k| (k.as_str(), "old")));
        s.push_str(&encode(keys.iter().rev().map(|k| (k.as_str(), "new"))));
        let parsed = parse(&s);
        assert_eq!(parsed.len(), 50);
        for (i, (k, v)) in parsed.iter().enumerate() {
            assert_eq!(*k, keys[i]);
            assert_eq!(*v, "new");
        }
    }

    #[test]
    fn java_hash_known_values() {
        assert_eq!(java_string_hash(""), 0);
        // T=84, a=97, g=103, A=65: ((84*31+97)*31+103)*31+65 = 2598919.
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        // Non-BMP: one char, two UTF-16 units 0xD83D 0xDE00: 55357*31 + 56832.
        assert_eq!(java_string_hash("\u{1F600}"), 1_772_899);
        // Wraps like Java int arithmetic ("polygenelubricants".hashCode() == i32::MIN).
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }
}
