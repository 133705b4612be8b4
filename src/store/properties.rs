//! RocketMQ message properties: `key\x01value\x02` pairs, and Java's `String.hashCode`.
//! Pure: no I/O.

pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
pub const PROPERTY_SEPARATOR: char = '\u{2}';

pub const KEYS: &str = "KEYS";
pub const TAGS: &str = "TAGS";
pub const UNIQ_KEY: &str = "UNIQ_KEY";
pub const WAIT: &str = "WAIT";

/// Encodes pairs in the given order; pairs with an empty key or value are skipped.
pub fn encode<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let _ = pairs.into_iter();
    todo!()
}

/// Parses as RocketMQ does: split on `\x02`, skip segments shorter than 3 chars, key and
/// value must be non-empty; later duplicates win (the returned order keeps the first position).
pub fn parse(properties: &str) -> Vec<(&str, &str)> {
    todo!("{properties}")
}

/// The value of `key`, as `parse` would give it.
pub fn get<'a>(properties: &'a str, key: &str) -> Option<&'a str> {
    todo!("{properties}{key}")
}

/// Java `String.hashCode()`: `h = 31*h + c` over UTF-16 code units, wrapping i32.
pub fn java_string_hash(text: &str) -> i32 {
    todo!("{text}")
}
