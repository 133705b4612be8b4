//! What `ringmq store verify` and `store dump` check before they read: that the directory
//! is one shard's store, and that no running node has it open.
//!
//! A running node keeps writing, so a verify of a live store would judge a moving target
//! (a segment growing under the scan, a ConsumeQueue entry past what the scan saw) and
//! print "OK" or "DAMAGED" about a state that never existed. A running store holds an
//! exclusive `flock` on `<dir>/lock` ([`super::LOCK_FILE`]); the tools take the same lock
//! for as long as they read, so they refuse a live store, and a node started meanwhile
//! refuses to open the store instead of changing it under them. A store with no lock file
//! was never opened by a running store (every open creates it), so it is read without one
//! and nothing is created in it; nor in a store the tools may not write to (a read-only
//! copy), where no node of theirs can be running either.

use std::io;
use std::path::Path;

use super::{COMMIT_LOG_DIR, LOCK_FILE};
use crate::io::{Disk, FileLock};

/// Checks `dir` is a shard's store not open elsewhere; returns the lock to hold while
/// reading it (`None` when the store has no lock file, or it cannot be written).
pub fn hold_for_inspection(disk: &dyn Disk, dir: &Path) -> io::Result<Option<FileLock>> {
    if !disk.exists(&dir.join(COMMIT_LOG_DIR)) {
        let shards: Vec<String> = disk
            .list_dir(dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|name| name.starts_with("shard-"))
            .collect();
        if let Some(first) = shards.first() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a node's store root, not a shard's store: pass one shard's directory, e.g. --dir {} ({} here: {})",
                    dir.display(),
                    dir.join(first).display(),
                    shards.len(),
                    shards.join(", ")
                ),
            ));
        }
        // Not a store at all: the reader says what is missing.
        return Ok(None);
    }
    let lock = dir.join(LOCK_FILE);
    if !disk.exists(&lock) {
        return Ok(None);
    }
    match disk.lock(&lock) {
        Ok(held) => Ok(Some(held)),
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "{} is open by a running node (it holds {}): stop the node first, or inspect a copy; a running store changes while it is read",
                dir.display(),
                lock.display()
            ),
        )),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(io::Error::new(
            error.kind(),
            format!("cannot lock {}: {error}", lock.display()),
        )),
    }
}
