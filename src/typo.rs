//! "Did you mean": the known name nearest to a misspelt one, for config files whose
//! operators mistype keys (`brokerNmae`, `flushdisktype`). One rule for every file ringmq
//! reads: case-insensitive edit distance, close enough to be a typo when at most 2 edits
//! or a quarter of the name's length.

/// The candidate nearest to `wanted`, if it is close enough to be a typo of it.
pub fn nearest(
    wanted: &str,
    candidates: impl Iterator<Item = &'static str>,
) -> Option<&'static str> {
    let wanted = wanted.to_ascii_lowercase();
    let limit = (wanted.len() / 4).max(2);
    candidates
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
    fn the_distance_counts_edits() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(
            nearest("listenPrt", ["listenPort", "namesrvAddr"].into_iter()),
            Some("listenPort")
        );
        assert_eq!(
            nearest("completelyUnrelated", ["listenPort"].into_iter()),
            None
        );
    }
}
