//! Where each shard keeps its store under the node's root directory, and the check that an
//! existing root was made for the same number of shards.
//!
//! ```text
//! <root>/
//!   config/         topics.json, consumerOffset.json   (node-wide, every shard uses them)
//!   shard-0/        commitlog/, consumequeue/, checkpoint, abort, lock   (one store, D3)
//!   shard-1/
//!   ...
//! ```
//!
//! Queue ownership is `hash(topic, queueId) mod shards` (see [`super::routing`]), so a
//! root opened with a different shard count would look for each queue's messages in the
//! wrong shard's directory: acknowledged messages would seem lost and offsets would be
//! reused. The start therefore refuses such a root and says which count it was made with.

use std::path::{Path, PathBuf};

/// The store directory of shard `shard` under `root`.
pub fn shard_dir(root: &Path, shard: u8) -> PathBuf {
    root.join(format!("shard-{shard}"))
}

/// Why a store root cannot be opened with the shard count asked for.
#[derive(Debug, thiserror::Error)]
pub enum ShardLayoutError {
    #[error("cannot read {}: {error}", root.display())]
    Unreadable {
        root: PathBuf,
        error: std::io::Error,
    },
    #[error("{} holds {name}, which is not a shard directory of ringmq", root.display())]
    Foreign { root: PathBuf, name: String },
    #[error(
        "{} holds shard directories {found:?}, which are not shard-0 to shard-{}: \
         the store is damaged or was copied in part",
        root.display(),
        found.len() - 1
    )]
    Gap { root: PathBuf, found: Vec<u8> },
    #[error(
        "shards: {} was made with {made_for} shards and cannot be opened with {shards}: \
         queues are assigned to shards by their hash, so changing the count would hide \
         stored messages; start with shards = {made_for}",
        root.display()
    )]
    OtherCount {
        root: PathBuf,
        made_for: u8,
        shards: u8,
    },
}

/// Checks that `root` holds no store made for another shard count: no `shard-<n>`
/// directory with `n >= shards`, and (when `shards > 1`) not only some of them. An empty
/// or new root passes.
pub fn check_shard_count(root: &Path, shards: u8) -> Result<(), ShardLayoutError> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(ShardLayoutError::Unreadable {
                root: root.to_path_buf(),
                error,
            })
        }
    };
    let mut found: Vec<u8> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(number) = name.strip_prefix("shard-") {
            match number.parse::<u8>() {
                // An empty one was created but never opened (a crash during the first
                // start): it holds nothing a count change could hide.
                Ok(_) if is_empty_dir(&entry.path()) => {}
                Ok(n) => found.push(n),
                Err(_) => {
                    return Err(ShardLayoutError::Foreign {
                        root: root.to_path_buf(),
                        name: name.to_string(),
                    })
                }
            }
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    found.sort_unstable();
    let made_for = found.len() as u8;
    let contiguous = found.iter().enumerate().all(|(i, &n)| i as u8 == n);
    if !contiguous {
        return Err(ShardLayoutError::Gap {
            root: root.to_path_buf(),
            found,
        });
    }
    if made_for != shards {
        return Err(ShardLayoutError::OtherCount {
            root: root.to_path_buf(),
            made_for,
            shards,
        });
    }
    Ok(())
}

fn is_empty_dir(path: &Path) -> bool {
    std::fs::read_dir(path)
        .map(|mut entries| entries.next().is_none())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_or_matching_root_passes() {
        let dir = tempfile::tempdir().unwrap();
        check_shard_count(&dir.path().join("absent"), 4).unwrap();
        check_shard_count(dir.path(), 4).unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        for n in 0..2 {
            std::fs::create_dir_all(shard_dir(dir.path(), n).join("commitlog")).unwrap();
        }
        check_shard_count(dir.path(), 2).unwrap();
        // Created and never opened (a crash during the first start) counts as absent.
        std::fs::create_dir_all(shard_dir(dir.path(), 2)).unwrap();
        check_shard_count(dir.path(), 2).unwrap();
    }

    #[test]
    fn another_shard_count_is_refused_naming_the_one_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..2 {
            std::fs::create_dir_all(shard_dir(dir.path(), n).join("commitlog")).unwrap();
        }
        let error = check_shard_count(dir.path(), 1).unwrap_err().to_string();
        assert!(error.contains("made with 2 shards"), "{error}");
        let error = check_shard_count(dir.path(), 3).unwrap_err().to_string();
        assert!(error.contains("shards = 2"), "{error}");
    }

    #[test]
    fn a_gap_in_the_shard_directories_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(shard_dir(dir.path(), 0).join("commitlog")).unwrap();
        std::fs::create_dir_all(shard_dir(dir.path(), 2).join("commitlog")).unwrap();
        let error = check_shard_count(dir.path(), 3).unwrap_err().to_string();
        assert!(error.contains("not shard-0 to shard-1"), "{error}");
    }
}
