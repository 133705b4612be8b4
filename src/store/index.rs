//! The shard's IndexFiles: messages by key and time (reference §4), built by the
//! dispatcher, written out by the checkpointer, recovered past the checkpoint (D9).
//!
//! ```text
//!   index/20261202061234567   sealed: header, slots and entries all on disk
//!         20261202071502001   active: slots in memory (the file's are stale until a
//!                             clean close), entries [1, written] on disk, the rest in
//!                             `tail` until the checkpointer writes them out
//! ```
//!
//! Invariants:
//! - Entries are appended in CommitLog order, so within a file their physical offsets
//!   increase with their number, and each `prevIndex` names an older entry (a smaller
//!   number) of the same bucket.
//! - An entry is added only once its record is visible (the dispatcher adds it with the
//!   record's ConsumeQueue entry), so a lookup never finds a record a pull could not read.
//! - The checkpointer writes every entry out and syncs the files before it records the
//!   safe offset, so entries below the safe offset are durable. A full file is sealed:
//!   its slots and header are written and synced in the next checkpoint, then its memory
//!   is dropped. A clean close writes the active file's slots too, so after a clean stop
//!   every file is exactly RocketMQ's layout.
//! - After a crash, entries at or past the safe offset are cut (re-dispatch adds them
//!   again) and the newest file's slots are rebuilt from its entries: its slots on disk
//!   are not trusted, only its entries and its begin fields (set by its first entry and
//!   rewritten unchanged with the header at every write-out, within the file's first
//!   sector, which a torn write never splits).
//!
//! Memory: the active file's slot table (`maxHashSlotNum` × 4 bytes, 20 MB at the default
//! 5,000,000) and the entries added since the last checkpoint.

use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::index_file::{
    self, file_name, is_file_name, Geometry, IndexEntry, IndexHeader, ENTRY_BYTES, HEADER_BYTES,
    HEADER_LEN,
};
use super::position::{to_i32, to_u32, to_usize, LogPos};
use crate::io::{read_exact_at, Disk, FileId};

pub const INDEX_DIR: &str = "index";

/// RocketMQ's `TRANSACTION_ROLLBACK_TYPE` sysFlag bits: such records are not indexed.
const TRANSACTION_TYPE_MASK: i32 = 0x3 << 2;
const TRANSACTION_ROLLBACK_TYPE: i32 = 0x3 << 2;

/// Entries read at a time when rebuilding slots after a crash.
const REBUILD_CHUNK_ENTRIES: u32 = 64 * 1024;

/// One record a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexHit {
    pub phys_offset: u64,
    /// The store time as the index knows it: to the second (the file keeps seconds from
    /// its begin time).
    pub store_timestamp: i64,
}

/// What the active file keeps in memory.
struct Live {
    slots: Vec<i32>,
    /// Entries `[1, written]` are on disk.
    written: u32,
    /// Entries `written + 1 ..`, not yet written out.
    tail: Vec<IndexEntry>,
    /// The slots differ from the file's.
    slots_dirty: bool,
}

struct IndexFile {
    name: String,
    file: FileId,
    header: IndexHeader,
    /// `Some` while the file is active, or sealed but not yet written out whole.
    live: Option<Live>,
    /// Sealed: takes no more entries; its slots go to disk at the next write-out.
    sealed: bool,
    /// Created since the directory was last synced.
    new: bool,
}

/// The shard's index files, oldest first.
pub struct Index {
    disk: Rc<dyn Disk>,
    dir: PathBuf,
    geometry: Geometry,
    files: RefCell<Vec<IndexFile>>,
    /// Reused buffer of one record's key hashes.
    hashes: RefCell<Vec<i32>>,
}

impl Index {
    /// Opens `dir`'s files. `cut` is the safe offset after a crash (`None` after a clean
    /// stop): entries at or past it are dropped and the newest file's slots rebuilt.
    pub fn open(
        disk: Rc<dyn Disk>,
        dir: &Path,
        geometry: Geometry,
        cut: Option<u64>,
    ) -> io::Result<Index> {
        disk.create_dir_all(dir)?;
        let mut names: Vec<String> = disk
            .list_dir(dir)?
            .into_iter()
            .filter(|name| is_file_name(name))
            .collect();
        names.sort();
        let mut files = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(&name);
            let file = disk.open(&path, false)?;
            let len = disk.file_len(file)?;
            if len != geometry.file_len() {
                disk.close(file);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "index file {} is {len} bytes, but maxHashSlotNum={} and \
                         maxIndexNum={} make {} (the slot count is not stored in the file: \
                         keep the settings it was built with, or remove the index directory \
                         to start a new index)",
                        path.display(),
                        geometry.slots,
                        geometry.entries,
                        geometry.file_len()
                    ),
                ));
            }
            let mut bytes = [0u8; HEADER_BYTES];
            read_exact_at(&*disk, file, 0, &mut bytes)?;
            files.push(IndexFile {
                name,
                file,
                header: IndexHeader::decode(&bytes),
                live: None,
                sealed: true,
                new: false,
            });
        }
        let index = Index {
            disk,
            dir: dir.to_path_buf(),
            geometry,
            files: RefCell::new(files),
            hashes: RefCell::new(Vec::new()),
        };
        match cut {
            Some(safe) => index.recover(safe)?,
            None => index.load_active_slots()?,
        }
        Ok(index)
    }

    /// After a clean stop: the newest file, unless full, takes new entries; its slots on
    /// disk are current.
    fn load_active_slots(&self) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let Some(newest) = files.last_mut() else {
            return Ok(());
        };
        let mut slots = vec![0i32; to_usize(self.geometry.slots)];
        let mut bytes = vec![0u8; to_usize(self.geometry.slots) * 4];
        read_exact_at(&*self.disk, newest.file, index_file::HEADER_LEN, &mut bytes)?;
        for (slot, chunk) in slots.iter_mut().zip(bytes.chunks_exact(4)) {
            *slot = i32::from_be_bytes(chunk.try_into().expect("4"));
        }
        newest.live = Some(Live {
            slots,
            written: newest.header.entries(),
            tail: Vec::new(),
            slots_dirty: false,
        });
        newest.sealed = false;
        Ok(())
    }

    /// Cuts every entry whose record starts at or past `cut`, on a live index, as
    /// recovery's cut after a crash does (the same `Index::recover` once everything is
    /// written out): a replica truncating to its master's log (`replica_cut.rs`). The
    /// newest file's header and slots reach the disk at the next write-out.
    pub async fn cut_from(&self, cut: u64) -> io::Result<()> {
        self.write_out_and_sync(false).await?;
        self.recover(cut)
    }

    /// After a crash: cuts entries at or past `safe`, removes files left empty, rebuilds
    /// the newest file's slots and header from its entries.
    fn recover(&self, safe: u64) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let mut kept = 0;
        while let Some(newest) = files.last() {
            kept = self.entries_below(newest, safe)?;
            if kept > 0 {
                break;
            }
            let doomed = files.pop().expect("checked above");
            self.disk.close(doomed.file);
            self.disk.remove_file(&self.dir.join(&doomed.name))?;
            self.disk.sync_dir(&self.dir)?;
            tracing::info!(
                "index file {} held only entries past {safe}: removed",
                doomed.name
            );
        }
        let Some(newest) = files.last_mut() else {
            return Ok(());
        };
        let mut slots = vec![0i32; to_usize(self.geometry.slots)];
        let mut used_slots = 0i32;
        let mut last = IndexEntry::default();
        let mut number = 1u32;
        while number <= kept {
            let count = REBUILD_CHUNK_ENTRIES.min(kept + 1 - number);
            let mut bytes = vec![0u8; to_usize(count) * ENTRY_BYTES];
            read_exact_at(
                &*self.disk,
                newest.file,
                self.geometry.entry_pos(number),
                &mut bytes,
            )?;
            for chunk in bytes.chunks_exact(ENTRY_BYTES) {
                let entry = IndexEntry::decode(chunk);
                let slot = &mut slots[to_usize(self.geometry.slot_of(entry.key_hash.max(0)))];
                if *slot == 0 {
                    used_slots += 1;
                }
                *slot = to_i32(number);
                last = entry;
                number += 1;
            }
        }
        let header = &mut newest.header;
        header.index_count = to_i32(kept) + 1;
        header.hash_slot_count = used_slots;
        header.end_phy_offset = last.phys_offset;
        // The entry keeps whole seconds: the record was stored within that second.
        header.end_timestamp = header.begin_timestamp + i64::from(last.time_diff) * 1000 + 999;
        newest.live = Some(Live {
            slots,
            written: kept,
            tail: Vec::new(),
            slots_dirty: true,
        });
        newest.sealed = false;
        tracing::info!(
            "index file {} recovered with {kept} entries below {safe}",
            newest.name
        );
        Ok(())
    }

    /// How many of `file`'s entries, from 1 and within its header's count, are whole and
    /// point below `safe`. Entries below `safe` were synced; past them an unsynced write
    /// may have left anything, so the scan stops at the first entry that does not continue
    /// the file (a physical offset going back, a `prevIndex` not naming an older entry).
    fn entries_below(&self, file: &IndexFile, safe: u64) -> io::Result<u32> {
        let entries = file.header.entries().min(self.geometry.entries - 1);
        let mut kept = 0u32;
        let mut last_phys = i64::MIN;
        while kept < entries {
            let number = kept + 1;
            let entry = self.read_entry(file, number)?;
            let continues = entry.phys_offset >= last_phys
                && LogPos::from_stored(entry.phys_offset).is_some_and(|phys| phys.get() < safe)
                && entry.key_hash >= 0
                && (0..to_i32(number)).contains(&entry.prev_index);
            if !continues {
                break;
            }
            last_phys = entry.phys_offset;
            kept = number;
        }
        Ok(kept)
    }

    fn read_entry(&self, file: &IndexFile, number: u32) -> io::Result<IndexEntry> {
        if let Some(live) = &file.live {
            if number > live.written {
                return Ok(live.tail[to_usize(number - live.written - 1)]);
            }
        }
        let mut bytes = [0u8; ENTRY_BYTES];
        read_exact_at(
            &*self.disk,
            file.file,
            self.geometry.entry_pos(number),
            &mut bytes,
        )?;
        Ok(IndexEntry::decode(&bytes))
    }

    fn read_slot(&self, file: &IndexFile, slot: u32) -> io::Result<i32> {
        if let Some(live) = &file.live {
            return Ok(live.slots[to_usize(slot)]);
        }
        let mut bytes = [0u8; 4];
        read_exact_at(
            &*self.disk,
            file.file,
            self.geometry.slot_pos(slot),
            &mut bytes,
        )?;
        Ok(i32::from_be_bytes(bytes))
    }

    /// Indexes one visible record under its keys (`topic#UNIQ_KEY`, `topic#k` for each of
    /// `KEYS`). A record below the newest file's end is already indexed (re-dispatch) and
    /// skipped. `now_ms` is called only when a new file is needed: its time names it. Returns
    /// the entries added.
    pub fn add_record(
        &self,
        topic: &str,
        properties: &str,
        sys_flag: i32,
        phys_offset: LogPos,
        store_timestamp: i64,
        now_ms: impl Fn() -> i64,
    ) -> io::Result<usize> {
        if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE {
            return Ok(0);
        }
        let mut hashes = self.hashes.borrow_mut();
        hashes.clear();
        index_file::record_key_hashes(topic, properties, &mut hashes);
        if hashes.is_empty() {
            return Ok(0);
        }
        let phys = phys_offset.to_stored();
        if let Some(newest) = self.files.borrow().last() {
            if newest.header.entries() > 0 && phys <= newest.header.end_phy_offset {
                return Ok(0);
            }
        }
        for &hash in hashes.iter() {
            self.put_key(hash, phys, store_timestamp, &now_ms)?;
        }
        Ok(hashes.len())
    }

    fn put_key(
        &self,
        key_hash: i32,
        phys: i64,
        store_timestamp: i64,
        now_ms: &impl Fn() -> i64,
    ) -> io::Result<()> {
        let needs_file = self.files.borrow().last().is_none_or(|newest| {
            newest.sealed
                || u32::try_from(newest.header.index_count)
                    .map_or(true, |count| count >= self.geometry.entries)
        });
        if needs_file {
            self.roll(now_ms())?;
        }
        let mut files = self.files.borrow_mut();
        let active = files.last_mut().expect("rolled above");
        let header = &mut active.header;
        let live = active.live.as_mut().expect("the active file is live");
        if header.index_count <= 1 {
            header.begin_phy_offset = phys;
            header.begin_timestamp = store_timestamp;
        }
        let slot = to_usize(self.geometry.slot_of(key_hash));
        let number = header.index_count;
        let prev = live.slots[slot];
        assert!(
            (0..number).contains(&prev),
            "index {}: slot {slot} names entry {prev}, but only {number} exist",
            active.name
        );
        live.tail.push(IndexEntry {
            key_hash,
            phys_offset: phys,
            time_diff: index_file::time_diff(header.begin_timestamp, store_timestamp),
            prev_index: prev,
        });
        live.slots[slot] = number;
        live.slots_dirty = true;
        if prev == 0 {
            header.hash_slot_count += 1;
        }
        header.index_count += 1;
        header.end_phy_offset = phys;
        header.end_timestamp = store_timestamp;
        Ok(())
    }

    /// Seals the newest file (its slots are written out at the next checkpoint) and starts
    /// a new one named by `now_ms`, its begin and end seeded with the last file's end.
    fn roll(&self, now_ms: i64) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let mut created = now_ms;
        if let Some(newest) = files.last_mut() {
            newest.sealed = true;
            // Names must sort in creation order even when two come in one millisecond.
            while file_name(created) <= newest.name {
                created += 1;
            }
        }
        let name = file_name(created);
        let file = self.disk.open(&self.dir.join(&name), true)?;
        self.disk.truncate(file, self.geometry.file_len())?;
        let mut header = IndexHeader::empty();
        if let Some(newest) = files.last() {
            header.begin_timestamp = newest.header.end_timestamp;
            header.end_timestamp = newest.header.end_timestamp;
            header.begin_phy_offset = newest.header.end_phy_offset;
            header.end_phy_offset = newest.header.end_phy_offset;
        }
        tracing::debug!("index file {name} started");
        files.push(IndexFile {
            name,
            file,
            header,
            live: Some(Live {
                slots: vec![0i32; to_usize(self.geometry.slots)],
                written: 0,
                tail: Vec::new(),
                slots_dirty: true,
            }),
            sealed: false,
            new: true,
        });
        Ok(())
    }

    /// Writes every live file's new entries and header out; a sealed file's slots too, and
    /// also the active file's when `with_slots` (a clean close). Then syncs what was
    /// written (and the directory of new files), and drops the memory of sealed files.
    pub async fn write_out_and_sync(&self, with_slots: bool) -> io::Result<()> {
        // By name, not position: retention may drop the oldest files while this awaits.
        let names: Vec<String> = self.files.borrow().iter().map(|f| f.name.clone()).collect();
        let mut new_files = false;
        for name in names {
            let Some(at) = self.position(&name) else {
                continue;
            };
            let Some((file, writes, entries, sealed, slots_written)) =
                self.snapshot(at, with_slots)
            else {
                let mut files = self.files.borrow_mut();
                let index_file = &mut files[at];
                // A sealed file with nothing left to write needs its memory no more.
                if index_file.sealed {
                    index_file.live = None;
                }
                continue;
            };
            for (offset, bytes) in writes {
                self.disk.write_at(file, offset, bytes).await?;
            }
            self.disk.sync_data(file).await?;
            let Some(at) = self.position(&name) else {
                continue;
            };
            let mut files = self.files.borrow_mut();
            let index_file = &mut files[at];
            new_files |= std::mem::take(&mut index_file.new);
            let live = index_file.live.as_mut().expect("snapshotted live");
            assert!(
                live.tail.len() >= to_usize(entries),
                "index {}: wrote {entries} entries out of a tail of {}",
                index_file.name,
                live.tail.len()
            );
            live.written += entries;
            live.tail.drain(..to_usize(entries));
            if slots_written {
                live.slots_dirty = false;
            }
            if sealed && live.tail.is_empty() {
                index_file.live = None;
            }
        }
        if new_files {
            self.disk.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.files
            .borrow()
            .iter()
            .position(|file| file.name == name)
    }

    /// What writing out file `at` takes: its writes, how many tail entries they cover,
    /// whether it is sealed, and whether its slots are among the writes. `None` if nothing
    /// is to write.
    #[allow(clippy::type_complexity)]
    fn snapshot(
        &self,
        at: usize,
        with_slots: bool,
    ) -> Option<(FileId, Vec<(u64, Bytes)>, u32, bool, bool)> {
        let files = self.files.borrow();
        let file = &files[at];
        let live = file.live.as_ref()?;
        let write_slots = (file.sealed || with_slots) && live.slots_dirty;
        if live.tail.is_empty() && !write_slots && !file.new {
            return None;
        }
        let mut writes = Vec::new();
        if !live.tail.is_empty() {
            let mut bytes = Vec::with_capacity(live.tail.len() * ENTRY_BYTES);
            for entry in &live.tail {
                entry.encode(&mut bytes);
            }
            writes.push((
                self.geometry.entry_pos(live.written + 1),
                Bytes::from(bytes),
            ));
        }
        if write_slots {
            let mut bytes = Vec::with_capacity(live.slots.len() * 4);
            for slot in &live.slots {
                bytes.extend_from_slice(&slot.to_be_bytes());
            }
            writes.push((HEADER_LEN, Bytes::from(bytes)));
        }
        writes.push((0, Bytes::copy_from_slice(&file.header.encode())));
        Some((
            file.file,
            writes,
            to_u32(live.tail.len()),
            file.sealed,
            write_slots,
        ))
    }

    /// The records indexed under `topic#key` stored within `[begin_ms, end_ms]`, newest
    /// first, at most `max`. Hash collisions may add records of other keys: callers (the
    /// client, RocketMQ's too) filter by the actual key.
    pub fn lookup(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> io::Result<Vec<IndexHit>> {
        let hash = index_file::query_key_hash(topic, key);
        let slot = self.geometry.slot_of(hash);
        let mut hits = Vec::new();
        let files = self.files.borrow();
        for file in files.iter().rev() {
            if hits.len() >= max {
                break;
            }
            let header = &file.header;
            if header.entries() == 0
                || header.begin_timestamp > end_ms
                || header.end_timestamp < begin_ms
            {
                if header.begin_timestamp < begin_ms && header.entries() > 0 {
                    break;
                }
                continue;
            }
            let mut number = self.read_slot(file, slot)?;
            while number > 0 && number < header.index_count && hits.len() < max {
                // `number > 0`, checked by the loop.
                let entry = self.read_entry(file, number.unsigned_abs())?;
                let stored = header.begin_timestamp + i64::from(entry.time_diff) * 1000;
                // The entry keeps whole seconds, so the record was stored within
                // [stored, stored + 999].
                if stored + 999 < begin_ms {
                    break;
                }
                // A negative position is damage: no record is there to check.
                let phys = LogPos::from_stored(entry.phys_offset);
                if let Some(phys) = phys.filter(|_| entry.key_hash == hash && stored <= end_ms) {
                    hits.push(IndexHit {
                        phys_offset: phys.get(),
                        store_timestamp: stored,
                    });
                }
                if entry.prev_index <= 0 || entry.prev_index >= number {
                    break;
                }
                number = entry.prev_index;
            }
            if header.begin_timestamp < begin_ms {
                break;
            }
        }
        Ok(hits)
    }

    /// Forgets (and closes) every file but the newest whose entries all point below
    /// `log_start`; returns their paths for the caller to unlink.
    pub fn detach_below(&self, log_start: u64) -> Vec<PathBuf> {
        let mut files = self.files.borrow_mut();
        let mut doomed = Vec::new();
        while files.len() > 1 {
            let oldest = &files[0];
            let below = oldest.header.entries() == 0
                || LogPos::from_stored(oldest.header.end_phy_offset)
                    .is_some_and(|end| end.get() < log_start);
            if !below || oldest.live.is_some() {
                break;
            }
            let file = files.remove(0);
            self.disk.close(file.file);
            doomed.push(self.dir.join(&file.name));
        }
        doomed
    }

    /// The newest file's end: RocketMQ's `indexLastUpdateTimestamp` and
    /// `indexLastUpdatePhyoffset`.
    pub fn last_update(&self) -> (i64, i64) {
        self.files
            .borrow()
            .last()
            .map(|file| (file.header.end_timestamp, file.header.end_phy_offset))
            .unwrap_or((0, 0))
    }

    /// Entries in every file.
    pub fn entry_count(&self) -> u64 {
        self.files
            .borrow()
            .iter()
            .map(|file| u64::from(file.header.entries()))
            .sum()
    }

    /// How many files there are.
    pub fn file_count(&self) -> usize {
        self.files.borrow().len()
    }

    pub fn close(&self) {
        for file in self.files.borrow_mut().drain(..) {
            self.disk.close(file.file);
        }
    }
}
