//! One shard's epoch history on disk: `epochFileCheckpoint` in the shard's store
//! directory, RocketMQ's name and text format ([`super::epoch_file`]).
//!
//! Written as RocketMQ writes it: the whole text to a temporary file, synced, renamed over
//! the old one, and the directory synced, so a crash leaves the old history or the new,
//! never a mix. The write runs on tokio's blocking pool: a shard's reactor never waits
//! for an fsync or a rename (the history changes at a role change or a new epoch on a
//! stream, never per message).
//!
//! Invariant: the history in memory is what the file holds once [`EpochStore::save`]
//! returned; a failed save leaves the memory copy unchanged, so the caller never acts on
//! a history that would not survive a restart.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::epoch_file::{self, EpochFileError};
use super::epochs::EpochCache;

/// RocketMQ's file name (`EpochFileCache`'s checkpoint), in the shard's store directory.
pub const EPOCH_FILE: &str = "epochFileCheckpoint";

/// Why the epoch history could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum EpochStoreError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} is damaged: {error}")]
    Damaged {
        path: PathBuf,
        error: EpochFileError,
    },
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// One shard's epoch history and its file.
pub struct EpochStore {
    path: PathBuf,
    history: RefCell<EpochCache>,
}

impl EpochStore {
    /// Loads the history of the store in `dir`; a missing file is an empty history.
    pub fn load(dir: &Path) -> Result<EpochStore, EpochStoreError> {
        let path = dir.join(EPOCH_FILE);
        let history = match std::fs::read_to_string(&path) {
            Ok(text) => epoch_file::decode(&text).map_err(|error| EpochStoreError::Damaged {
                path: path.clone(),
                error,
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => EpochCache::new(),
            Err(error) => return Err(EpochStoreError::Read { path, error }),
        };
        Ok(EpochStore {
            path,
            history: RefCell::new(history),
        })
    }

    /// The history as last saved.
    pub fn history(&self) -> EpochCache {
        self.history.borrow().clone()
    }

    /// Makes `history` the saved history: written and synced off the reactor, then kept.
    pub async fn save(&self, history: EpochCache) -> Result<(), EpochStoreError> {
        if *self.history.borrow() == history {
            return Ok(());
        }
        let text = epoch_file::encode(&history);
        let path = self.path.clone();
        let written = tokio::task::spawn_blocking(move || write_replacing(&path, text.as_bytes()))
            .await
            .unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())));
        written.map_err(|error| EpochStoreError::Write {
            path: self.path.clone(),
            error,
        })?;
        self.history.replace(history);
        Ok(())
    }
}

/// Writes `bytes` to `path` through a synced temporary file and a rename, then syncs the
/// directory so the rename itself survives a crash.
fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::epochs::EpochEntry;

    fn history(entries: &[(u32, u64)]) -> EpochCache {
        let entries: Vec<EpochEntry> = entries
            .iter()
            .map(|&(epoch, start)| EpochEntry { epoch, start })
            .collect();
        EpochCache::from_entries(&entries).unwrap()
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_saved_history_is_what_the_next_load_finds() {
        let dir = tempfile::tempdir().unwrap();
        let store = EpochStore::load(dir.path()).unwrap();
        assert!(store.history().is_empty(), "no file is an empty history");
        let saved = history(&[(1, 0), (2, 4096)]);
        run(store.save(saved.clone())).unwrap();
        assert_eq!(store.history(), saved);
        assert_eq!(EpochStore::load(dir.path()).unwrap().history(), saved);
        assert!(!dir.path().join("epochFileCheckpoint.tmp").exists());
    }

    #[test]
    fn a_damaged_file_fails_the_load_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = EpochStore::load(dir.path()).unwrap();
        run(store.save(history(&[(1, 0), (3, 100)]))).unwrap();
        let path = dir.path().join(EPOCH_FILE);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("3-100", "3-101");
        std::fs::write(&path, text).unwrap();
        let error = EpochStore::load(dir.path())
            .err()
            .expect("a bad CRC is refused");
        let message = error.to_string();
        assert!(
            message.contains("epochFileCheckpoint") && message.contains("damaged"),
            "{message}"
        );
    }

    #[test]
    fn a_failed_save_keeps_the_old_history() {
        let dir = tempfile::tempdir().unwrap();
        let store = EpochStore::load(&dir.path().join("missing-dir")).unwrap();
        let error = run(store.save(history(&[(1, 0)]))).expect_err("no directory");
        assert!(error.to_string().contains("cannot write"), "{error}");
        assert!(store.history().is_empty());
    }
}
