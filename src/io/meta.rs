//! The seam for the node's small whole files: `config/topics.json`,
//! `config/consumerOffset.json` (D5).
//!
//! What it owns: the [`MetaFiles`] trait, its real-filesystem backend [`RealFiles`] (the
//! `uring` and `portable` backends make metadata changes with the same plain syscalls, so
//! one implementation serves both), and [`replace_file`], the one way a table is written.
//! The simulated disk implements [`MetaFiles`] too, so crash tests cover the tables.
//!
//! Why a second trait beside [`super::Disk`]: the tables are node-wide, shared by every
//! shard thread and written from the one that changed them (and from the main thread at
//! shutdown), so their seam must be `Send + Sync` and synchronous; a [`super::Disk`]
//! belongs to one shard thread and returns futures.
//!
//! Invariants:
//! - [`replace_file`] leaves the old content or the new one at `path` after a crash at any
//!   point, never a mix, an empty file or a missing one: the bytes go to `<path>.tmp`,
//!   which is fsynced before the rename; the directory is fsynced after it, so once
//!   `replace_file` returns `Ok` the new content is what a crash leaves.
//! - [`MetaFiles::write_file_synced`] returns only once the data and size are durable.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Synchronous whole-file operations for the node's tables. Implementations are shared
/// between threads.
pub trait MetaFiles: Send + Sync + std::fmt::Debug {
    /// The whole content of the file at `path`; `NotFound` when there is none.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// Creates (or truncates) the file at `path`, writes `bytes` and fsyncs it. The
    /// file's *name* is only durable once its directory is synced.
    fn write_file_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;

    /// Atomically renames `from` over `to` (replacing it). Durable once the directory
    /// is synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Creates a directory and its parents; succeeds if it exists.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Makes the directory's entries (created, renamed or removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Up to `len` bytes of the file at `path` from `offset` (fewer at its end). What
    /// lets a table larger than memory should hold be read a block at a time (the timer
    /// store's runs).
    fn read_range(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>>;

    /// Removes the file at `path`. Durable once the directory is synced.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// The names of the entries of `dir`, sorted.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
}

/// `<path>.tmp`: where [`replace_file`] stages the new content.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut temp: OsString = path.as_os_str().to_owned();
    temp.push(".tmp");
    PathBuf::from(temp)
}

/// Replaces the file at `path` with `bytes` so that a crash leaves the old content or the
/// new one: write and fsync `<path>.tmp`, rename it over `path`, fsync the directory.
pub fn replace_file(files: &dyn MetaFiles, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    files.create_dir_all(dir)?;
    let temp = temp_path(path);
    files.write_file_synced(&temp, bytes)?;
    files.rename(&temp, path)?;
    // Without this the rename may not survive a crash: the old table comes back although
    // the caller was told the new one is stored.
    files.sync_dir(dir)
}

/// The real filesystem, through `std::fs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFiles;

impl MetaFiles for RealFiles {
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn write_file_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        file.write_all(bytes)?;
        // sync_all, not sync_data: the new size is metadata.
        file.sync_all()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        // A new directory is an entry of its parent: sync the parents of the ones created
        // here, or a crash can lose `config/` with every table in it.
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.is_dir())
            .collect();
        std::fs::create_dir_all(dir)?;
        for created in missing {
            match created.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => {
                    super::portable::sync_dir(parent)?
                }
                _ => super::portable::sync_dir(Path::new("."))?,
            }
        }
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        super::portable::sync_dir(dir)
    }
    fn read_range(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::open(path)?;
        let mut out = vec![0; len];
        let mut filled = 0;
        while filled < len {
            match file.read_at(&mut out[filled..], offset + filled as u64)? {
                0 => break,
                read => filled += read,
            }
        }
        out.truncate(filled);
        Ok(out)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_content_and_no_temp_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config").join("t.json");
        replace_file(&RealFiles, &path, b"old").unwrap();
        replace_file(&RealFiles, &path, b"new").unwrap();
        assert_eq!(RealFiles.read_file(&path).unwrap(), b"new");
        assert!(!temp_path(&path).exists(), "the temp file was renamed away");
        assert_eq!(
            RealFiles
                .read_file(&dir.path().join("missing"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }
}

/// A [`MetaFiles`] for unit tests: the real filesystem, optionally slow, recording the thread
/// each file write ran on (whether table writes left the reactor, and how many there were).
#[cfg(test)]
pub(crate) mod test_files {
    use super::{MetaFiles, RealFiles};
    use crate::sync::Locked;
    use std::io;
    use std::path::Path;
    use std::thread::{Thread, ThreadId};
    use std::time::Duration;

    #[derive(Debug, Default)]
    pub(crate) struct RecordingFiles {
        /// Each `write_file_synced` waits this long first: a slow fsync.
        delay: Duration,
        writers: Locked<Vec<Thread>>,
    }

    impl RecordingFiles {
        pub(crate) fn slow(delay: Duration) -> RecordingFiles {
            RecordingFiles {
                delay,
                ..RecordingFiles::default()
            }
        }

        /// Files written so far.
        pub(crate) fn writes(&self) -> usize {
            self.writers.lock().len()
        }

        /// The threads that wrote them, in order.
        pub(crate) fn writers(&self) -> Vec<ThreadId> {
            self.writers.lock().iter().map(Thread::id).collect()
        }

        /// Those threads' names.
        pub(crate) fn names(&self) -> Vec<Option<String>> {
            let writers = self.writers.lock();
            writers
                .iter()
                .map(|t| t.name().map(str::to_owned))
                .collect()
        }
    }

    impl MetaFiles for RecordingFiles {
        fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
            RealFiles.read_file(path)
        }
        fn write_file_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
            self.writers.lock().push(std::thread::current());
            std::thread::sleep(self.delay);
            RealFiles.write_file_synced(path, bytes)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            RealFiles.rename(from, to)
        }
        fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
            RealFiles.create_dir_all(dir)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            RealFiles.sync_dir(dir)
        }
        fn read_range(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
            RealFiles.read_range(path, offset, len)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            RealFiles.remove_file(path)
        }
        fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
            RealFiles.list_dir(dir)
        }
    }
}
