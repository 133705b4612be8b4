//! "Did you mean": the known key nearest to a misspelt one, so an operator's typo in
//! broker.conf (`brokerNmae`, `flushdisktype`) names the key it was meant to be.

use super::keys::KEYS;
use super::rocketmq::{DERIVED_STORE_PATHS, IGNORED_ROCKETMQ_KEYS, UNSUPPORTED_ROCKETMQ_KEYS};

/// The broker.conf spelling nearest to `key` (case-insensitive edit distance), if it is
/// close enough to be a typo: at most 2 edits, or a quarter of the key's length.
pub fn nearest_conf_key(key: &str) -> Option<&'static str> {
    let known = KEYS
        .iter()
        .flat_map(|k| k.conf.iter().copied())
        .chain(IGNORED_ROCKETMQ_KEYS.iter().copied())
        .chain(UNSUPPORTED_ROCKETMQ_KEYS.iter().map(|(k, _, _)| *k))
        .chain(DERIVED_STORE_PATHS.iter().map(|(k, _, _)| *k));
    crate::typo::nearest(key, known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_names_the_nearest_key_and_nonsense_names_none() {
        assert_eq!(nearest_conf_key("brokerNmae"), Some("brokerName"));
        assert_eq!(nearest_conf_key("flushdisktype"), Some("flushDiskType"));
        assert_eq!(nearest_conf_key("listenPrt"), Some("listenPort"));
        assert_eq!(nearest_conf_key("completelyUnrelated"), None);
    }
}
