//! The Raft log's on-disk format and its recovery scan.
//!
//! The log is a sequence of files in one directory, each named `log-<first index, 20
//! digits>` and holding consecutive entries from that index on. An entry is one record:
//!
//! `len u32 | crc32c u32 | batch_first u64 | entry JSON`
//!
//! (little-endian; `len` counts what follows the checksum; the checksum covers `len` and
//! all that follows). `batch_first` is the index of the first entry of the `append` call
//! that wrote it: every append is synced before the next one starts, so only the last
//! batch of the last file can be unsynced at a crash.
//!
//! Recovery ([`scan`]) reads records in order and stops at the first that is not whole
//! and valid. That is a torn tail, which is cut, when it is in the last file and no valid
//! record of a *later* batch follows it; anything else (a bad record in a sealed file, or
//! followed by a newer batch, or a valid record out of order) is corruption of synced
//! data, and opening fails naming the file and offset.

use std::io;
use std::path::Path;

use crate::io::{read_exact_at, Disk, FileId};

use super::types::Entry;
use openraft::entry::RaftEntry;

const HEADER: u64 = 8;
/// `batch_first` before the entry's JSON.
const BATCH_FIELD: usize = 8;
/// A record longer than this is corrupt, not big (it bounds what a bad length allocates).
pub const MAX_RECORD: u32 = 64 << 20;
const PREFIX: &str = "log-";

/// The name of the log file whose first entry has index `first`.
pub fn file_name(first: u64) -> String {
    format!("{PREFIX}{first:020}")
}

/// The first index a log file's name gives, or `None` for another file.
pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

/// Appends the record of `entry`, written in the batch starting at `batch_first`.
pub fn encode(entry: &Entry, batch_first: u64, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(entry).expect("a log entry encodes as JSON");
    let len = (BATCH_FIELD + json.len()) as u32;
    assert!(
        len <= MAX_RECORD,
        "log entry {} of {len} bytes exceeds {MAX_RECORD}",
        entry.index()
    );
    let mut crc = crc32c::crc32c(&len.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &batch_first.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &json);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&batch_first.to_le_bytes());
    out.extend_from_slice(&json);
}

/// One file's valid records: each entry and the offset of its record, and where the
/// valid part ends.
pub struct Scanned {
    pub entries: Vec<(Entry, u64)>,
    pub valid_end: u64,
    /// Bytes past `valid_end`: a torn tail the caller cuts.
    pub torn: bool,
}

/// A record read whole with a good checksum.
struct Record {
    batch_first: u64,
    payload: Vec<u8>,
    next: u64,
}

/// Reads the record at `offset`: `None` if it is not whole or fails its checksum.
fn read_record(
    disk: &dyn Disk,
    file: FileId,
    offset: u64,
    file_len: u64,
) -> io::Result<Option<Record>> {
    if file_len < offset + HEADER {
        return Ok(None);
    }
    let mut header = [0u8; HEADER as usize];
    read_exact_at(disk, file, offset, &mut header)?;
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let next = offset + HEADER + len as u64;
    if (len as usize) <= BATCH_FIELD || len > MAX_RECORD || next > file_len {
        return Ok(None);
    }
    let mut body = vec![0u8; len as usize];
    read_exact_at(disk, file, offset + HEADER, &mut body)?;
    if crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), &body) != crc {
        return Ok(None);
    }
    let batch_first = u64::from_le_bytes(body[..BATCH_FIELD].try_into().expect("8 bytes"));
    body.drain(..BATCH_FIELD);
    Ok(Some(Record {
        batch_first,
        payload: body,
        next,
    }))
}

fn corrupt(path: &Path, offset: u64, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "raft log {} is corrupt at offset {offset}: {why}",
            path.display()
        ),
    )
}

/// Reads the valid records of the log file at `path`, whose first entry is `first`.
/// `last_file`: only the last file may have a torn tail.
pub fn scan(
    disk: &dyn Disk,
    file: FileId,
    path: &Path,
    first: u64,
    last_file: bool,
) -> io::Result<Scanned> {
    let file_len = disk.file_len(file)?;
    let mut entries = Vec::new();
    let mut offset = 0;
    while offset < file_len {
        let expected = first + entries.len() as u64;
        let Some(record) = read_record(disk, file, offset, file_len)? else {
            check_torn_tail(disk, file, path, offset, expected, file_len, last_file)?;
            return Ok(Scanned {
                entries,
                valid_end: offset,
                torn: true,
            });
        };
        let entry: Entry = serde_json::from_slice(&record.payload)
            .map_err(|error| corrupt(path, offset, format!("entry does not decode: {error}")))?;
        if entry.index() != expected || record.batch_first > expected {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "entry {} (batch from {}) where entry {expected} belongs",
                    entry.index(),
                    record.batch_first
                ),
            ));
        }
        entries.push((entry, offset));
        offset = record.next;
    }
    Ok(Scanned {
        entries,
        valid_end: offset,
        torn: false,
    })
}

/// A bad record at `offset` (which should hold entry `expected`) is a torn tail only in
/// the last file and when no valid record of a *later* batch follows it (records of its
/// own batch may: the crash tore that unsynced batch in the middle).
fn check_torn_tail(
    disk: &dyn Disk,
    file: FileId,
    path: &Path,
    offset: u64,
    expected: u64,
    file_len: u64,
    last_file: bool,
) -> io::Result<()> {
    if !last_file {
        return Err(corrupt(path, offset, "a bad record in a sealed log file"));
    }
    if file_len < offset + HEADER {
        return Ok(());
    }
    let mut header = [0u8; HEADER as usize];
    read_exact_at(disk, file, offset, &mut header)?;
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    if len > MAX_RECORD {
        return Ok(());
    }
    let mut next = offset + HEADER + len as u64;
    while let Some(after) = read_record(disk, file, next, file_len)? {
        if after.batch_first > expected {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "a bad record followed by a valid batch from entry {}",
                    after.batch_first
                ),
            ));
        }
        next = after.next;
    }
    Ok(())
}
