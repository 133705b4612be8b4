//! openraft's log storage on the disk seam: the vote, the committed log id and the
//! purge point in a slot pair ([`super::slots`]), the entries in log files
//! ([`super::log_files`]).
//!
//! Durability, as openraft's storage contract asks:
//! - `save_vote` and `save_committed` return after the meta slot is synced;
//! - `append` writes a batch's records and syncs the file before it reports the batch
//!   flushed (`IOFlushed`); a new file's name is made durable (directory sync) before
//!   anything is written to it;
//! - `truncate_after` removes later files from the last backward, then truncates the file
//!   holding the first removed entry (truncation is durable on the seam): no hole at any
//!   instant;
//! - `purge` records the purge point durably first, then removes the files all of whose
//!   entries it covers, and starts the next append in a new file so the current one can
//!   go at the next purge. With openraft's snapshot policy this bounds the log.
//!
//! Every write I/O runs inside the call that asked for it, so writes are serialized as
//! openraft requires. The entries and the vote are also held in memory (bounded by the
//! purges), shared with the log readers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use serde::{Deserialize, Serialize};

use super::log_files;
use super::slots::SlotPair;
use super::types::{Entry, LogId, RaftTypes, Vote};
use crate::io::{Disk, FileId};

const META_SLOTS: &str = "raft-meta";

/// What the meta slot pair holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct LogMeta {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

/// What the store shares with its readers.
#[derive(Default)]
struct Shared {
    entries: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
}

struct LogFile {
    id: FileId,
    len: u64,
}

/// The log storage of one node.
pub struct LogStore {
    disk: Rc<dyn Disk>,
    dir: PathBuf,
    slots: SlotPair,
    meta: LogMeta,
    /// Log files by first index.
    files: BTreeMap<u64, LogFile>,
    /// Each entry's file (by first index) and offset.
    positions: BTreeMap<u64, (u64, u64)>,
    /// The next append starts a new file (set by a purge).
    roll: bool,
    shared: Rc<RefCell<Shared>>,
}

/// A reader of the entries and the vote, for openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    shared: Rc<RefCell<Shared>>,
}

impl LogStore {
    /// Opens the log in `dir` (creating it), cutting a torn tail; refuses corruption.
    pub fn open(disk: Rc<dyn Disk>, dir: &Path) -> io::Result<LogStore> {
        disk.create_dir_all(dir)?;
        let (slots, meta) = SlotPair::open(disk.clone(), dir, META_SLOTS)?;
        let meta: LogMeta = match meta {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("raft meta in {} does not decode: {error}", dir.display()),
                )
            })?,
            None => LogMeta::default(),
        };
        let mut store = LogStore {
            disk,
            dir: dir.to_path_buf(),
            slots,
            shared: Rc::new(RefCell::new(Shared {
                entries: BTreeMap::new(),
                vote: meta.vote,
            })),
            meta,
            files: BTreeMap::new(),
            positions: BTreeMap::new(),
            roll: false,
        };
        store.recover_files()?;
        Ok(store)
    }

    /// Scans every log file in order, cuts a torn tail, keeps the entries past the purge
    /// point.
    fn recover_files(&mut self) -> io::Result<()> {
        let firsts: Vec<u64> = self
            .disk
            .list_dir(&self.dir)?
            .iter()
            .filter_map(|name| log_files::parse_name(name))
            .collect();
        let purged = self.meta.purged.map(|id| id.index());
        let mut expected: Option<u64> = None;
        for (n, &first) in firsts.iter().enumerate() {
            let path = self.dir.join(log_files::file_name(first));
            let id = self.disk.open(&path, false)?;
            let scanned = log_files::scan(&*self.disk, id, &path, first, n + 1 == firsts.len())?;
            if scanned.torn {
                tracing::warn!(
                    "raft log {}: cutting a torn tail at offset {}",
                    path.display(),
                    scanned.valid_end
                );
                self.disk.truncate(id, scanned.valid_end)?;
            }
            if let Some(expected) = expected.filter(|_| !scanned.entries.is_empty()) {
                if expected != first {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "raft log {} starts at entry {first}, after entry {}",
                            path.display(),
                            expected - 1
                        ),
                    ));
                }
            }
            let mut shared = self.shared.borrow_mut();
            for (entry, offset) in scanned.entries {
                expected = Some(entry.index() + 1);
                if purged.is_none_or(|purged| entry.index() > purged) {
                    self.positions.insert(entry.index(), (first, offset));
                    shared.entries.insert(entry.index(), entry);
                }
            }
            self.files.insert(
                first,
                LogFile {
                    id,
                    len: scanned.valid_end,
                },
            );
        }
        Ok(())
    }

    /// Whether this node has never voted, logged or purged: a new member of a new group.
    pub fn is_fresh(&self) -> bool {
        self.meta.vote.is_none()
            && self.meta.purged.is_none()
            && self.shared.borrow().entries.is_empty()
    }

    async fn save_meta(&mut self) -> io::Result<()> {
        let bytes = serde_json::to_vec(&self.meta).expect("raft meta encodes as JSON");
        self.slots.write(&bytes).await
    }

    /// The file the next batch, starting at `first`, goes to (a new one when needed).
    fn file_for_append(&mut self, first: u64) -> io::Result<u64> {
        match self.files.last_key_value() {
            Some((&current, _)) if !self.roll => Ok(current),
            // Truncated back to its start: the file already bears this batch's name.
            Some((&current, file)) if current == first => {
                assert!(
                    file.len == 0,
                    "log file {current} holds {} bytes before its first entry",
                    file.len
                );
                self.roll = false;
                Ok(current)
            }
            _ => {
                let path = self.dir.join(log_files::file_name(first));
                assert!(
                    !self.files.contains_key(&first),
                    "log file {} exists already",
                    path.display()
                );
                let id = self.disk.open(&path, true)?;
                self.disk.sync_dir(&self.dir)?;
                self.files.insert(first, LogFile { id, len: 0 });
                self.roll = false;
                Ok(first)
            }
        }
    }

    async fn write_batch(&mut self, entries: Vec<Entry>) -> io::Result<()> {
        let Some(first) = entries.first().map(|entry| entry.index()) else {
            return Ok(());
        };
        let last = self
            .shared
            .borrow()
            .entries
            .last_key_value()
            .map(|(index, _)| *index);
        let next = last
            .or(self.meta.purged.map(|id| id.index()))
            .map(|index| index + 1);
        assert!(
            next.is_none_or(|next| next == first),
            "append of entry {first} where entry {next:?} belongs"
        );
        let file_first = self.file_for_append(first)?;
        let file = self
            .files
            .get(&file_first)
            .expect("the append file is open");
        let (id, start) = (file.id, file.len);
        let mut buffer = Vec::new();
        for entry in &entries {
            self.positions
                .insert(entry.index(), (file_first, start + buffer.len() as u64));
            log_files::encode(entry, first, &mut buffer);
        }
        let written = buffer.len() as u64;
        {
            let mut shared = self.shared.borrow_mut();
            for entry in entries {
                shared.entries.insert(entry.index(), entry);
            }
        }
        self.files
            .get_mut(&file_first)
            .expect("the append file is open")
            .len += written;
        self.disk.write_at(id, start, Bytes::from(buffer)).await?;
        self.disk.sync_data(id).await
    }

    /// Removes the files named by `firsts` (last first), then syncs the directory.
    fn remove_files(&mut self, firsts: Vec<u64>) -> io::Result<()> {
        if firsts.is_empty() {
            return Ok(());
        }
        for first in firsts.into_iter().rev() {
            let file = self
                .files
                .remove(&first)
                .expect("a listed log file is open");
            self.disk.close(file.id);
            self.disk
                .remove_file(&self.dir.join(log_files::file_name(first)))?;
        }
        self.disk.sync_dir(&self.dir)
    }
}

impl Drop for LogStore {
    fn drop(&mut self) {
        for file in self.files.values() {
            self.disk.close(file.id);
        }
    }
}

impl RaftLogReader<RaftTypes> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self
            .shared
            .borrow()
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.shared.borrow().vote)
    }
}

impl RaftLogReader<RaftTypes> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.reader().try_get_log_entries(range).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.meta.vote)
    }
}

impl LogStore {
    fn reader(&self) -> LogReader {
        LogReader {
            shared: self.shared.clone(),
        }
    }
}

impl RaftLogStorage<RaftTypes> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<RaftTypes>, io::Error> {
        let last = self
            .shared
            .borrow()
            .entries
            .last_key_value()
            .map(|(_, entry)| entry.log_id());
        Ok(LogState {
            last_purged_log_id: self.meta.purged,
            last_log_id: last.or(self.meta.purged),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.meta.vote = Some(*vote);
        self.save_meta().await?;
        self.shared.borrow_mut().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.meta.committed = committed;
        self.save_meta().await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.meta.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<RaftTypes>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let result = self.write_batch(entries.into_iter().collect()).await;
        match &result {
            Ok(()) => callback.io_completed(Ok(())),
            Err(error) => {
                callback.io_completed(Err(io::Error::new(error.kind(), error.to_string())))
            }
        }
        result
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        let from = last.map_or(0, |id| id.index() + 1);
        let Some(&(file_first, offset)) = self.positions.get(&from) else {
            assert!(
                self.positions.range(from..).next().is_none(),
                "truncation after {last:?} reaches below the first entry kept ({:?})",
                self.positions.keys().next()
            );
            return Ok(());
        };
        let later: Vec<u64> = self
            .files
            .range(file_first + 1..)
            .map(|(first, _)| *first)
            .collect();
        self.remove_files(later)?;
        let file = self
            .files
            .get_mut(&file_first)
            .expect("the file of a logged entry is open");
        self.disk.truncate(file.id, offset)?;
        file.len = offset;
        self.positions.split_off(&from);
        self.shared.borrow_mut().entries.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        assert!(
            self.meta
                .purged
                .is_none_or(|purged| purged.index() <= log_id.index()),
            "purge to {log_id} below the purge point {:?}",
            self.meta.purged
        );
        self.meta.purged = Some(log_id);
        self.save_meta().await?;
        let up_to = log_id.index();
        self.positions = self.positions.split_off(&(up_to + 1));
        {
            let mut shared = self.shared.borrow_mut();
            shared.entries = shared.entries.split_off(&(up_to + 1));
        }
        // A file can go when the next one starts at or below the first entry kept, or, for
        // the last, when no entry past the purge point is in it.
        let firsts: Vec<u64> = self.files.keys().copied().collect();
        let mut removable = Vec::new();
        for (n, &first) in firsts.iter().enumerate() {
            let covered = match firsts.get(n + 1) {
                Some(&next) => next <= up_to + 1,
                None => self.positions.range(first..).next().is_none(),
            };
            if covered {
                removable.push(first);
            }
        }
        self.remove_files(removable)?;
        self.roll = true;
        Ok(())
    }
}
