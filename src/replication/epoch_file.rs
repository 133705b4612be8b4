//! The text of a shard store's `epochFileCheckpoint` (reference-2 §6.4, RocketMQ's
//! `CheckpointFile` with `EpochEntrySerializer`), as pure encode and decode: the caller
//! reads and writes the file (temp file and rename, as RocketMQ does, so a reader never
//! sees half a file).
//!
//! ```text
//! 2            <- entry count
//! 773307083    <- CRC32 of the entry block, masked & 0x7FFFFFFF
//! 7-7000       <- epoch-startOffset, one line per entry, oldest first
//! 8-8000
//! ```
//!
//! Every line ends with `\n` (Java's `System.lineSeparator()` on Linux), and the CRC
//! covers the entry lines with their line ends. Decoding is strict where RocketMQ is
//! lenient: a CRC of 0 is checked like any other (RocketMQ skips it; ringmq only reads
//! files it wrote), an unreadable line is refused rather than skipped, and the entries
//! must keep [`EpochCache`]'s invariants.

use super::epochs::{EpochCache, EpochEntry, EpochError};

/// Why an epoch file's text is refused. Lines count from 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EpochFileError {
    /// The text ends before the count and CRC lines, or its last line has no line end
    /// (a torn write).
    #[error("epoch file is truncated: {what}")]
    Truncated { what: &'static str },
    /// A line that should be a whole number is not.
    #[error("epoch file line {line}: '{text}' is not a whole number")]
    BadNumber { line: usize, text: String },
    /// An entry line that is not `epoch-startOffset`.
    #[error("epoch file line {line}: '{text}' is not epoch-startOffset")]
    BadEntry { line: usize, text: String },
    /// The count line disagrees with the entry lines.
    #[error("epoch file states {stated} entries but holds {found}")]
    BadCount { stated: u64, found: usize },
    /// The entry block does not match its CRC.
    #[error("epoch file CRC {stated} does not match its entries' CRC {computed}")]
    BadCrc { stated: u32, computed: u32 },
    /// The entries break the history's order.
    #[error("epoch file entries out of order: {0}")]
    Order(#[from] EpochError),
}

/// The file's text for `history`.
pub fn encode(history: &EpochCache) -> String {
    let block = entry_block(history.entries());
    format!("{}\n{}\n{}", history.len(), masked_crc(&block), block)
}

/// The history in `text`, refused with the first problem found.
pub fn decode(text: &str) -> Result<EpochCache, EpochFileError> {
    let (count_line, rest) = split_line(text, "no entry count line")?;
    let stated_count = parse_number(count_line, 1)?;
    let (crc_line, block) = split_line(rest, "no CRC line")?;
    let stated_crc = parse_number(crc_line, 2)?;
    let entries = parse_entries(block)?;
    if stated_count != entries.len() as u64 {
        return Err(EpochFileError::BadCount {
            stated: stated_count,
            found: entries.len(),
        });
    }
    let computed = masked_crc(block);
    if stated_crc != u64::from(computed) {
        return Err(EpochFileError::BadCrc {
            stated: u32::try_from(stated_crc).unwrap_or(u32::MAX),
            computed,
        });
    }
    Ok(EpochCache::from_entries(&entries)?)
}

fn entry_block(entries: &[EpochEntry]) -> String {
    entries
        .iter()
        .map(|entry| format!("{}-{}\n", entry.epoch, entry.start))
        .collect()
}

/// RocketMQ's `UtilAll.crc32`: the IEEE CRC32 with the top bit cleared, so it prints as a
/// non-negative Java int.
fn masked_crc(block: &str) -> u32 {
    crc32fast::hash(block.as_bytes()) & 0x7FFF_FFFF
}

fn split_line<'a>(
    text: &'a str,
    missing: &'static str,
) -> Result<(&'a str, &'a str), EpochFileError> {
    text.split_once('\n')
        .ok_or(EpochFileError::Truncated { what: missing })
}

fn parse_entries(block: &str) -> Result<Vec<EpochEntry>, EpochFileError> {
    if !block.is_empty() && !block.ends_with('\n') {
        return Err(EpochFileError::Truncated {
            what: "the last entry line has no line end",
        });
    }
    let mut entries = Vec::new();
    for (index, line) in block.lines().enumerate() {
        let number = index + 3;
        let bad = || EpochFileError::BadEntry {
            line: number,
            text: line.to_string(),
        };
        let (epoch, start) = line.split_once('-').ok_or_else(bad)?;
        let epoch = u32::try_from(parse_number(epoch, number)?).map_err(|_| bad())?;
        let start = parse_number(start, number)?;
        if start > i64::MAX as u64 {
            return Err(bad());
        }
        entries.push(EpochEntry { epoch, start });
    }
    Ok(entries)
}

/// Digits only: no sign, no spaces, nothing `u64::from_str` would also take.
fn parse_number(text: &str, line: usize) -> Result<u64, EpochFileError> {
    let bad = || EpochFileError::BadNumber {
        line,
        text: text.to_string(),
    };
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(u32, u64)]) -> EpochCache {
        let entries: Vec<EpochEntry> = entries
            .iter()
            .map(|&(epoch, start)| EpochEntry { epoch, start })
            .collect();
        EpochCache::from_entries(&entries).unwrap()
    }

    /// A file's text with a correct count and CRC around `block`.
    fn framed(block: &str, count: usize) -> String {
        format!("{count}\n{}\n{block}", masked_crc(block))
    }

    #[test]
    fn encodes_the_reference_layout_and_decodes_it_back() {
        let original = history(&[(7, 7000), (8, 8000)]);
        let text = encode(&original);
        let crc = crc32fast::hash(b"7-7000\n8-8000\n") & 0x7FFF_FFFF;
        assert_eq!(text, format!("2\n{crc}\n7-7000\n8-8000\n"));
        assert_eq!(decode(&text), Ok(original));
        let empty = encode(&EpochCache::new());
        assert_eq!(empty, "0\n0\n");
        assert_eq!(decode(&empty), Ok(EpochCache::new()));
    }

    #[test]
    fn a_changed_byte_fails_the_crc() {
        let text = encode(&history(&[(1, 0), (2, 1000)])).replace("1000", "1001");
        let error = decode(&text).unwrap_err();
        assert!(matches!(error, EpochFileError::BadCrc { .. }), "{error}");
        assert!(error.to_string().starts_with("epoch file CRC "), "{error}");
    }

    #[test]
    fn a_count_that_disagrees_is_refused() {
        let text = framed("1-0\n2-5\n", 3);
        assert_eq!(
            decode(&text).unwrap_err().to_string(),
            "epoch file states 3 entries but holds 2"
        );
    }

    #[test]
    fn non_increasing_epochs_are_refused_even_with_a_good_crc() {
        let text = framed("2-0\n2-5\n", 2);
        assert_eq!(
            decode(&text).unwrap_err().to_string(),
            "epoch file entries out of order: epoch 2 does not follow epoch 2: \
             epochs must strictly increase"
        );
        let text = framed("1-9\n2-5\n", 2);
        assert!(matches!(
            decode(&text),
            Err(EpochFileError::Order(EpochError::StartBackwards { .. }))
        ));
    }

    #[test]
    fn garbage_and_torn_text_is_refused_with_the_line() {
        assert_eq!(
            decode(""),
            Err(EpochFileError::Truncated {
                what: "no entry count line"
            })
        );
        assert!(matches!(
            decode("1\n"),
            Err(EpochFileError::Truncated { .. })
        ));
        let torn = encode(&history(&[(1, 0), (2, 77)]));
        let torn = &torn[..torn.len() - 1];
        assert!(matches!(
            decode(torn),
            Err(EpochFileError::Truncated { .. })
        ));
        let cases = [
            ("x\n0\n", "epoch file line 1: 'x' is not a whole number"),
            ("0\n-5\n", "epoch file line 2: '-5' is not a whole number"),
            (
                "1\n0\n+1-0\n",
                "epoch file line 3: '+1' is not a whole number",
            ),
            (
                "1\n0\n10\n",
                "epoch file line 3: '10' is not epoch-startOffset",
            ),
            (
                "1\n0\n1--5\n",
                "epoch file line 3: '-5' is not a whole number",
            ),
            (
                "1\n0\n4294967296-0\n",
                "epoch file line 3: '4294967296-0' is not epoch-startOffset",
            ),
            (
                "1\n0\n1-9223372036854775808\n",
                "epoch file line 3: '1-9223372036854775808' is not epoch-startOffset",
            ),
            (
                "1\n0\n1-0 \n",
                "epoch file line 3: '0 ' is not a whole number",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(decode(text).unwrap_err().to_string(), message, "{text:?}");
        }
    }
}
