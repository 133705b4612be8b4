//! [`PersistedTable`]: the one type behind the node's whole-file tables (topics,
//! subscription groups, consumer offsets, delay offsets, request modes) and the POP replay
//! mark: a value in memory that every shard reads, and its file, written whole through the
//! disk seam's [`replace_file`] (temp file, fsync, rename, directory fsync).
//!
//! What it owns: the in-memory value, the count of changes made to it, the count the file
//! holds, and the writes. A write runs on tokio's blocking pool (the pool the portable disk
//! backend syncs on), never on a shard's reactor: a table's fsyncs used to stall every
//! connection of the shard that wrote it (perf/table_flush_stall.sh measures it).
//!
//! Two ways to change a table, by what its callers were promised:
//! - **Memory first** ([`PersistedTable::change`]): readers see the change at once, the file
//!   follows with the next write ([`PersistedTable::schedule_write`], or the node's periodic
//!   [`PersistedTable::write_if_behind`]); a caller that must answer only once the change
//!   is durable awaits [`PersistedTable::durable`]. Consumer offsets, delay offsets and
//!   subscription groups change this way. Many changes between two writes cost one write.
//! - **File first** ([`PersistedTable::change_written`], and [`PersistedTable::change_synced`]
//!   outside a runtime): the change is made on a copy, the copy is written, and only then do
//!   readers see it; a failed write changes nothing. The topic table, the request modes and
//!   the POP mark (a retention hold: it must never claim more than the file holds) change
//!   this way.
//!
//! Invariants:
//! - Writes run one at a time (`writing`), each of the whole value as it was when it began,
//!   so a file never goes back to an older change: `written` only grows (asserted).
//! - While a write holds a snapshot of the value, a memory-first change copies it
//!   ([`Arc::make_mut`]); otherwise changes are made in place. The snapshot is dropped once
//!   encoded, before the fsyncs, so at most one copy is made per write.
//! - A failed write is remembered with the change it would have covered and why, so a
//!   caller awaiting durability gets the reason, and the next change or periodic write
//!   tries again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::io::meta::{replace_file, MetaFiles};
use crate::sync::Locked;

/// A table's write failed: the file still holds an older version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot write {path}: {reason}")]
pub struct WriteFailed {
    pub path: PathBuf,
    pub reason: String,
}

impl WriteFailed {
    fn new(path: &Path, error: &std::io::Error) -> WriteFailed {
        WriteFailed {
            path: path.to_owned(),
            reason: error.to_string(),
        }
    }
}

impl From<WriteFailed> for std::io::Error {
    fn from(failed: WriteFailed) -> std::io::Error {
        std::io::Error::other(failed.to_string())
    }
}

/// A value persisted whole in one file; cheap to clone (the clones share the value).
#[derive(Debug)]
pub struct PersistedTable<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for PersistedTable<T> {
    fn clone(&self) -> Self {
        PersistedTable {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<T> {
    files: Arc<dyn MetaFiles>,
    path: PathBuf,
    /// The file's bytes for a value.
    encode: fn(&T) -> Vec<u8>,
    state: Locked<Current<T>>,
    /// Held by a write from its snapshot to its rename, so writes land in order.
    writing: Locked<()>,
    /// A background write is queued and will see every change made before it starts.
    scheduled: AtomicBool,
    persisted: tokio::sync::watch::Sender<Persisted>,
}

impl<T> std::fmt::Debug for Inner<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistedTable")
            .field("path", &self.path)
            .field("version", &self.state.lock().version)
            .field("persisted", &*self.persisted.borrow())
            .finish()
    }
}

struct Current<T> {
    value: Arc<T>,
    /// Changes made since the load.
    version: u64,
}

#[derive(Clone, Debug, Default)]
struct Persisted {
    /// The file holds every change up to this one.
    written: u64,
    /// The latest write that failed: the change it would have covered, and why.
    failed: Option<(u64, WriteFailed)>,
}

impl<T: Clone + Send + Sync + 'static> PersistedTable<T> {
    /// A table holding `value` (what the file holds, or the empty table when there is no
    /// file), written to `path` through `files` with `encode`.
    pub fn new(
        files: Arc<dyn MetaFiles>,
        path: PathBuf,
        value: T,
        encode: fn(&T) -> Vec<u8>,
    ) -> PersistedTable<T> {
        PersistedTable {
            inner: Arc::new(Inner {
                files,
                path,
                encode,
                state: Locked::new(Current {
                    value: Arc::new(value),
                    version: 0,
                }),
                writing: Locked::new(()),
                scheduled: AtomicBool::new(false),
                persisted: tokio::sync::watch::Sender::new(Persisted::default()),
            }),
        }
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Reads the value under the table's lock (keep `read` short: every shard shares it).
    pub fn read<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(&self.inner.state.lock().value)
    }

    /// The value as it is now; holding it makes the next change copy the value.
    pub fn snapshot(&self) -> Arc<T> {
        self.inner.state.lock().value.clone()
    }

    /// The file's bytes for the value as it is now.
    pub fn encoded(&self) -> Vec<u8> {
        (self.inner.encode)(&self.snapshot())
    }

    /// Memory first: applies `edit` in place; if it changed something (`edit` returns
    /// true) readers see it at once and the change's number is returned. The file follows
    /// with the next write, which the caller queues or leaves to the periodic one.
    pub fn change(&self, edit: impl FnOnce(&mut T) -> bool) -> Option<u64> {
        let mut current = self.inner.state.lock();
        if !edit(Arc::make_mut(&mut current.value)) {
            return None;
        }
        current.version += 1;
        Some(current.version)
    }

    /// Whether changes were made that the file does not hold yet.
    pub fn is_behind(&self) -> bool {
        self.inner.persisted.borrow().written < self.inner.state.lock().version
    }

    /// Queues a write on tokio's blocking pool unless one is queued already (it will see
    /// every change made so far). Outside a runtime (tools, tests) it writes at once.
    pub fn schedule_write(&self) {
        if self.inner.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.inner.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || inner.write_logged())),
            Err(_) => inner.write_logged(),
        }
    }

    /// Queues a write if the file is behind the value; what the node's periodic table
    /// flush calls (it never waits for the disk).
    pub fn write_if_behind(&self) {
        if self.is_behind() {
            self.schedule_write();
        }
    }

    /// Writes the value now, on the calling thread, if the file is behind it (true if it
    /// wrote): a clean stop, tools and tests; never a shard's reactor.
    pub fn flush(&self) -> Result<bool, WriteFailed> {
        self.inner.write()
    }

    /// Waits until the file holds change `version` (none: nothing changed, nothing to wait
    /// for), queueing the write; the error is the failed write's.
    pub async fn durable(&self, version: Option<u64>) -> Result<(), WriteFailed> {
        let Some(version) = version else {
            return Ok(());
        };
        let mut persisted = self.inner.persisted.subscribe();
        self.schedule_write();
        let seen = persisted
            .wait_for(|state| {
                state.written >= version
                    || state
                        .failed
                        .as_ref()
                        .is_some_and(|(failed, _)| *failed >= version)
            })
            .await
            .expect("the table owns its sender while a caller holds the table");
        if seen.written >= version {
            return Ok(());
        }
        let (_, failed) = seen.failed.clone().expect("wait_for saw a failed write");
        Err(failed)
    }

    /// Memory first, then waits for the file: [`Self::change`] and [`Self::durable`]. True
    /// if `edit` changed something.
    pub async fn change_durable(
        &self,
        edit: impl FnOnce(&mut T) -> bool,
    ) -> Result<bool, WriteFailed> {
        let version = self.change(edit);
        self.durable(version).await?;
        Ok(version.is_some())
    }

    /// File first, for a shard's reactor: `edit` runs on a copy on tokio's blocking pool,
    /// the copy is written, and only then do readers see it. A failed write changes
    /// nothing. True if `edit` changed something.
    pub async fn change_written(
        &self,
        edit: impl FnOnce(&mut T) -> bool + Send + 'static,
    ) -> Result<bool, WriteFailed> {
        let inner = self.inner.clone();
        match tokio::task::spawn_blocking(move || inner.change_written(edit)).await {
            Ok(changed) => changed,
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }

    /// File first on the calling thread (tools, tests, and callers outside a runtime): as
    /// [`Self::change_written`].
    pub fn change_synced(&self, edit: impl FnOnce(&mut T) -> bool) -> Result<bool, WriteFailed> {
        self.inner.change_written(edit)
    }
}

impl<T: Clone> Inner<T> {
    /// Writes the value whole if the file is behind it (true if it wrote); one write at a
    /// time.
    fn write(&self) -> Result<bool, WriteFailed> {
        let _writing = self.writing.lock();
        // Changes from here on queue another write.
        self.scheduled.store(false, Ordering::Release);
        let (version, value) = {
            let current = self.state.lock();
            (current.version, current.value.clone())
        };
        if version <= self.persisted.borrow().written {
            return Ok(false);
        }
        let bytes = (self.encode)(&value);
        // Changes made during the fsyncs below are made in place again.
        drop(value);
        self.store(version, &bytes)?;
        Ok(true)
    }

    /// Replaces the file with `bytes`, which hold change `version`, and records it.
    fn store(&self, version: u64, bytes: &[u8]) -> Result<(), WriteFailed> {
        match replace_file(&*self.files, &self.path, bytes) {
            Ok(()) => {
                self.persisted.send_modify(|state| {
                    assert!(
                        state.written <= version,
                        "{} went back from change {} to {version}",
                        self.path.display(),
                        state.written
                    );
                    state.written = version;
                });
                Ok(())
            }
            Err(error) => {
                let failed = WriteFailed::new(&self.path, &error);
                self.persisted
                    .send_modify(|state| state.failed = Some((version, failed.clone())));
                Err(failed)
            }
        }
    }

    /// [`Inner::write`] from the background: a failure is logged (the next change or
    /// periodic write tries again).
    fn write_logged(&self) {
        if let Err(failed) = self.write() {
            tracing::error!("{failed}");
        }
    }

    /// File first: `edit` on a copy, the copy written, then shown.
    fn change_written(&self, edit: impl FnOnce(&mut T) -> bool) -> Result<bool, WriteFailed> {
        let _writing = self.writing.lock();
        let (version, mut next) = {
            let current = self.state.lock();
            (current.version, T::clone(&current.value))
        };
        if !edit(&mut next) {
            return Ok(false);
        }
        let version = version + 1;
        self.store(version, &(self.encode)(&next))?;
        let mut current = self.state.lock();
        // Memory-first changes made meanwhile would be lost by the swap below, and the
        // file would claim them: no table mixes the two ways.
        assert_eq!(
            current.version + 1,
            version,
            "{}: a memory-first change raced a file-first one",
            self.path.display()
        );
        current.value = Arc::new(next);
        current.version = version;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::meta::test_files::RecordingFiles;
    use crate::io::meta::RealFiles;
    use std::collections::BTreeMap;

    type Map = BTreeMap<String, u64>;

    fn encode(map: &Map) -> Vec<u8> {
        serde_json::to_vec(map).unwrap()
    }

    fn table(dir: &Path) -> PersistedTable<Map> {
        PersistedTable::new(
            Arc::new(RealFiles),
            dir.join("config").join("t.json"),
            Map::new(),
            encode,
        )
    }

    fn on_disk(table: &PersistedTable<Map>) -> Option<Map> {
        std::fs::read(table.path())
            .ok()
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn memory_first_changes_are_seen_at_once_and_written_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let table = table(dir.path());
        assert_eq!(
            table.change(|map| map.insert("a".into(), 1).is_none()),
            Some(1)
        );
        assert_eq!(table.change(|_| false), None, "no change, no version");
        assert_eq!(table.read(|map| map["a"]), 1);
        assert!(table.is_behind());
        assert_eq!(on_disk(&table), None, "nothing written before a write");
        table.flush().unwrap();
        assert!(!table.is_behind());
        assert_eq!(on_disk(&table).unwrap()["a"], 1);
    }

    #[test]
    fn durable_returns_once_the_file_holds_the_change_written_off_the_calling_thread() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(RecordingFiles::default());
        let table =
            PersistedTable::new(files.clone(), dir.path().join("t.json"), Map::new(), encode);
        run(async {
            let changed = table
                .change_durable(|map| map.insert("a".into(), 7).is_none())
                .await
                .unwrap();
            assert!(changed);
            assert_eq!(on_disk(&table).unwrap()["a"], 7);
        });
        assert!(!table.is_behind());
        let writers = files.writers();
        assert_eq!(writers.len(), 1);
        assert_ne!(
            writers[0],
            std::thread::current().id(),
            "written on the reactor's thread"
        );
    }

    #[test]
    fn a_failed_write_is_reported_to_the_waiter_and_retried_by_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        // `config` is a file, so nothing can be written below it.
        std::fs::write(dir.path().join("config"), b"not a directory").unwrap();
        let table = table(dir.path());
        let failed =
            run(table.change_durable(|map| map.insert("a".into(), 1).is_none())).unwrap_err();
        assert!(failed.path.ends_with("config/t.json"), "{failed}");
        assert!(!failed.reason.is_empty());
        assert!(table.is_behind(), "the change stays, unwritten");
        std::fs::remove_file(dir.path().join("config")).unwrap();
        table.write_if_behind();
        assert!(!table.is_behind());
        assert_eq!(on_disk(&table).unwrap()["a"], 1);
    }

    #[test]
    fn file_first_changes_are_shown_only_once_written_and_a_failure_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), b"not a directory").unwrap();
        let table = table(dir.path());
        let failed = table.change_synced(|map| map.insert("a".into(), 1).is_none());
        assert!(failed.is_err());
        assert!(
            table.read(|map| map.is_empty()),
            "a failed write changes nothing"
        );
        assert!(!table.is_behind());
        std::fs::remove_file(dir.path().join("config")).unwrap();
        let changed = run(table.change_written(|map| map.insert("a".into(), 2).is_none()));
        assert!(changed.unwrap());
        assert_eq!(table.read(|map| map["a"]), 2);
        assert_eq!(on_disk(&table).unwrap()["a"], 2);
        assert!(!run(table.change_written(|_| false)).unwrap());
    }

    #[test]
    fn a_change_during_a_write_copies_the_value_and_the_write_keeps_its_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let table = table(dir.path());
        table.change(|map| map.insert("a".into(), 1).is_none());
        let held = table.snapshot();
        table.change(|map| map.insert("a".into(), 2).is_some());
        assert_eq!(held["a"], 1, "the snapshot is not changed under its holder");
        assert_eq!(table.read(|map| map["a"]), 2);
    }

    #[test]
    fn changes_made_while_a_write_is_queued_are_taken_by_that_write() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(RecordingFiles::default());
        let table =
            PersistedTable::new(files.clone(), dir.path().join("t.json"), Map::new(), encode);
        run(async {
            // A slow disk: the queued write waits for the lock a running write would hold.
            let running = table.inner.writing.lock();
            let mut last = None;
            for n in 0..100 {
                last = table.change(|map| map.insert("a".into(), n) != Some(n));
                table.schedule_write();
            }
            drop(running);
            table.durable(last).await.unwrap();
        });
        assert_eq!(on_disk(&table).unwrap()["a"], 99);
        assert_eq!(files.writes(), 1, "100 changes, one write");
    }
}
