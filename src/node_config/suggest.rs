//! "Did you mean": the known key nearest to a misspelt one, so an operator's typo in
//! broker.conf (`brokerNmae`, `flushdisktype`) names the key it was meant to be.

use super::keys::KEYS;
use super::rocketmq::{IGNORED_ROCKETMQ_KEYS, UNSUPPORTED_ROCKETMQ_KEYS};

/// The broker.conf spelling nearest to `key` (case-insensitive edit distance), if it is
/// close enough to be a typo: at most 2 edits, or a quarter of the key's length.
pub fn nearest_conf_key(key: &str) -> Option<&'static str> {
    let wanted = key.to_ascii_lowercase();
    let known = KEYS
        .iter()
        .flat_map(|k| k.conf.iter().copied())
        .chain(IGNORED_ROCKETMQ_KEYS.iter().copied())
        .chain(UNSUPPORTED_ROCKETMQ_KEYS.iter().map(|(k, _, _)| *k));
    let limit = (wanted.len() / 4).max(2);
    known
        .map(|candidate| {
            (
                distance(&wanted, &candidate.to_ascii_lowercase()),
                candidate,
            )
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, over bytes (keys are ASCII).
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
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
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
