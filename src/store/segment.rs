//! A directory of fixed-size segment files named by their start address: the shape both
//! the CommitLog and every ConsumeQueue have ("mapped file queue" in RocketMQ).
//!
//! ```text
//!   dir/
//!     00000000000000000000   covers [0, size)
//!     00000000000001048576   covers [size, 2*size)
//!     ...
//! ```
//!
//! Invariants:
//! - A file's name is its start address in 20 zero-padded decimal digits, and every start
//!   is `base + k * size` for a whole `k`.
//! - Every loaded segment is exactly `size` bytes long (files are preallocated when
//!   created). A zero-length *last* file, left by a crash between create and allocate, is
//!   removed on load; any other length is an error that names the file.
//! - Addresses are opaque to this module: the CommitLog uses physical offsets (with the
//!   shard id in the top byte), a ConsumeQueue uses logical byte offsets.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::position::{to_u64, to_usize};

use crate::io::file_body::{BodyChunk, FileRange};
use crate::io::{read_exact_at, Disk, FileId};

/// The 20-digit name of the segment starting at `start`.
pub fn segment_name(start: u64) -> String {
    format!("{start:020}")
}

/// Parses a segment name; `None` for anything that is not exactly 20 decimal digits.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    if name.len() != 20 || !name.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// The segments of one directory.
pub struct SegmentSet {
    disk: Rc<dyn Disk>,
    dir: PathBuf,
    size: u64,
    base: u64,
    segments: BTreeMap<u64, FileId>,
}

impl SegmentSet {
    /// Loads the segments in `dir` (creating the directory if it is missing).
    pub fn load(disk: Rc<dyn Disk>, dir: &Path, size: u64, base: u64) -> io::Result<SegmentSet> {
        disk.create_dir_all(dir)?;
        let mut starts = Vec::new();
        for name in disk.list_dir(dir)? {
            // Names that are not segments (a stray editor file, say) are left alone.
            if let Some(start) = parse_segment_name(&name) {
                starts.push(start);
            }
        }
        starts.sort_unstable();
        let mut set = SegmentSet {
            disk,
            dir: dir.to_path_buf(),
            size,
            base,
            segments: BTreeMap::new(),
        };
        let last = starts.last().copied();
        for start in starts {
            let path = set.dir.join(segment_name(start));
            if start < base || !(start - base).is_multiple_of(size) {
                return Err(invalid(format!(
                    "{}: start {start} is not base {base} plus a multiple of the segment size {size}",
                    path.display()
                )));
            }
            let file = set.disk.open(&path, false)?;
            let len = set.disk.file_len(file)?;
            if len == 0 && Some(start) == last {
                set.disk.close(file);
                set.disk.remove_file(&path)?;
                set.disk.sync_dir(&set.dir)?;
                continue;
            }
            if len != size {
                set.disk.close(file);
                return Err(invalid(format!(
                    "{}: {len} bytes, but segments of this directory are {size} bytes \
                     (was the segment size setting changed?)",
                    path.display()
                )));
            }
            set.segments.insert(start, file);
        }
        Ok(set)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn disk_handle(&self) -> Rc<dyn Disk> {
        self.disk.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Start of the segment that holds `address`.
    pub fn start_of(&self, address: u64) -> u64 {
        assert!(
            address >= self.base,
            "address {address} lies below the base {} of {}",
            self.base,
            self.dir.display()
        );
        address - (address - self.base) % self.size
    }

    pub fn first_start(&self) -> Option<u64> {
        self.segments.keys().next().copied()
    }

    pub fn last_start(&self) -> Option<u64> {
        self.segments.keys().next_back().copied()
    }

    /// The first segment start missing between the first and the last present one, if
    /// any. The log is one contiguous run of segments: a gap is not an end of data.
    pub fn first_gap(&self) -> Option<u64> {
        let mut expected = self.first_start()?;
        for &start in self.segments.keys() {
            if start != expected {
                return Some(expected);
            }
            expected = start + self.size;
        }
        None
    }

    /// Segment starts in ascending order.
    pub fn starts(&self) -> Vec<u64> {
        self.segments.keys().copied().collect()
    }

    /// The open segment starting at `start`, if there is one.
    pub fn file(&self, start: u64) -> Option<FileId> {
        self.segments.get(&start).copied()
    }

    /// Creates and opens the segment file at `start`, returning it for the caller to
    /// preallocate with [`Disk::allocate`] before [`SegmentSet::insert`] admits it.
    pub fn create_file(&self, start: u64) -> io::Result<FileId> {
        assert_eq!(
            self.start_of(start),
            start,
            "segment start {start} is not on a segment boundary of {}",
            self.dir.display()
        );
        let file = self.disk.open(&self.dir.join(segment_name(start)), true)?;
        self.disk.sync_dir(&self.dir)?;
        Ok(file)
    }

    /// Admits a created and preallocated segment.
    pub fn insert(&mut self, start: u64, file: FileId) {
        let previous = self.segments.insert(start, file);
        assert!(
            previous.is_none(),
            "segment {start} of {} inserted twice",
            self.dir.display()
        );
    }

    /// Creates, preallocates and admits the segment at `start` unless it exists.
    pub async fn ensure(this: &std::cell::RefCell<SegmentSet>, start: u64) -> io::Result<FileId> {
        let (disk, file, size) = {
            let set = this.borrow();
            if let Some(file) = set.file(start) {
                return Ok(file);
            }
            (set.disk.clone(), set.create_file(start)?, set.size)
        };
        if let Err(error) = disk.allocate(file, size).await {
            let set = this.borrow();
            disk.close(file);
            // A half-allocated file would fail the length check on the next load.
            let _ = disk.remove_file(&set.dir.join(segment_name(start)));
            return Err(error);
        }
        let mut set = this.borrow_mut();
        if let Some(existing) = set.file(start) {
            // Someone else created it while we were allocating; theirs wins.
            disk.close(file);
            return Ok(existing);
        }
        set.insert(start, file);
        Ok(file)
    }

    /// The file and in-file offset of `[address, address + len)`, which must lie within
    /// one segment.
    fn locate(&self, address: u64, len: u64) -> io::Result<(FileId, u64)> {
        let start = self.start_of(address);
        let within = address - start;
        if within + len > self.size {
            return Err(invalid(format!(
                "read of {len} bytes at {address} crosses the end of segment {start}"
            )));
        }
        let file = self.file(start).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no segment holds address {address}"),
            )
        })?;
        Ok((file, within))
    }

    /// Reads exactly `buf.len()` bytes at `address`, which must lie within one segment.
    pub fn read_exact(&self, address: u64, buf: &mut [u8]) -> io::Result<()> {
        let (file, within) = self.locate(address, to_u64(buf.len()))?;
        read_exact_at(self.disk.as_ref(), file, within, buf)
    }

    /// `[address, address + len)` (within one segment) as a body chunk: a range of the
    /// segment's shared file when the backend has real files, else a copy of the bytes.
    pub fn body_chunk(&self, address: u64, len: u64) -> io::Result<BodyChunk> {
        let (file, within) = self.locate(address, len)?;
        match self.disk.shared_file(file) {
            Some(file) => Ok(BodyChunk::File(FileRange {
                file,
                offset: within,
                len,
            })),
            None => self
                .read_bytes(address, to_usize(len))
                .map(BodyChunk::Bytes),
        }
    }

    /// Reads `len` bytes at `address` into a new buffer.
    pub fn read_bytes(&self, address: u64, len: usize) -> io::Result<Bytes> {
        let mut buf = vec![0u8; len];
        self.read_exact(address, &mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// Forgets (and closes) every segment that ends at or below `address`, keeping at
    /// least the last one; returns their paths for the caller to unlink. Readers holding a
    /// range of one keep reading it (an open descriptor outlives the name).
    pub fn detach_below(&mut self, address: u64) -> Vec<PathBuf> {
        let last = self.last_start();
        let doomed: Vec<u64> = self
            .segments
            .keys()
            .copied()
            .take_while(|&start| start + self.size <= address && Some(start) != last)
            .collect();
        doomed
            .into_iter()
            .map(|start| {
                let file = self.segments.remove(&start).expect("listed above");
                self.disk.close(file);
                self.dir.join(segment_name(start))
            })
            .collect()
    }

    /// Deletes every segment that starts at or after `start`.
    pub fn remove_from(&mut self, start: u64) -> io::Result<()> {
        let doomed: Vec<u64> = self.segments.range(start..).map(|(&key, _)| key).collect();
        for key in doomed.iter().rev() {
            let file = self.segments.remove(key).expect("listed above");
            self.disk.close(file);
            self.disk.remove_file(&self.dir.join(segment_name(*key)))?;
        }
        if !doomed.is_empty() {
            self.disk.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Zeroes `[address, end of its segment)` where it holds anything but zeros, and syncs,
    /// so bytes past a recovered end can never be mistaken for records later.
    pub async fn zero_tail(this: &std::cell::RefCell<SegmentSet>, address: u64) -> io::Result<()> {
        const CHUNK: u64 = 1 << 20;
        let (disk, file, start, size) = {
            let set = this.borrow();
            let start = set.start_of(address);
            match set.file(start) {
                Some(file) => (set.disk.clone(), file, start, set.size),
                None => return Ok(()),
            }
        };
        let mut position = address - start;
        let mut wrote = false;
        let mut buf = vec![0u8; to_usize(CHUNK)];
        while position < size {
            let len = to_usize(CHUNK.min(size - position));
            read_exact_at(disk.as_ref(), file, position, &mut buf[..len])?;
            if buf[..len].iter().any(|&byte| byte != 0) {
                disk.write_at(file, position, Bytes::from(vec![0u8; len]))
                    .await?;
                wrote = true;
            }
            position += to_u64(len);
        }
        if wrote {
            disk.sync_data(file).await?;
        }
        Ok(())
    }

    /// Syncs every segment that holds an address in `[from, to)`.
    pub async fn sync_range(
        this: &std::cell::RefCell<SegmentSet>,
        from: u64,
        to: u64,
    ) -> io::Result<()> {
        if from >= to {
            return Ok(());
        }
        let (disk, files) = {
            let set = this.borrow();
            let first = set.start_of(from);
            let last = set.start_of(to - 1);
            let files: Vec<FileId> = set
                .segments
                .range(first..=last)
                .map(|(_, &file)| file)
                .collect();
            (set.disk.clone(), files)
        };
        for file in files {
            disk.sync_data(file).await?;
        }
        Ok(())
    }

    /// Closes every file (the directory stays as it is on disk).
    pub fn close_all(&mut self) {
        for (_, file) in std::mem::take(&mut self.segments) {
            self.disk.close(file);
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(0), "00000000000000000000");
        assert_eq!(segment_name(1_073_741_824), "00000000001073741824");
        assert_eq!(
            parse_segment_name("00000000001073741824"),
            Some(1_073_741_824)
        );
        assert_eq!(parse_segment_name("0000000000107374182"), None);
        assert_eq!(parse_segment_name("0000000000107374182x"), None);
        assert_eq!(parse_segment_name("+0000000000107374182"), None);
    }
}
