//! The checkpoint: how far the store is known to be durable and consistent.
//!
//! ```text
//!   checkpoint file: two 512-byte slots, written alternately (slot = sequence % 2)
//!
//!   slot:  0        4        6        8            16             24           32          40       44
//!          | magic  | version| flags  | sequence   | safe offset  | log end    | written at | crc32c |
//!          | "RQCP" | u16 =1 | u16    | u64        | u64          | u64        | i64 ms     | u32    |
//! ```
//!
//! `safe offset`: every CommitLog byte below it is synced, and so is every ConsumeQueue
//! entry for a record below it. It is always a record boundary. After a crash, recovery
//! starts scanning there. `log end` is meaningful only with the CLEAN flag (written by a
//! clean stop): then it equals `safe offset` and is where appends resume, with no scan.
//!
//! Two slots, each within one sector, mean a torn checkpoint write destroys at most the
//! slot being written; the other still holds the previous checkpoint. The CRC32C covers
//! bytes [0, 40) of the slot. Big-endian, like everything else on disk.

use std::io;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;

use crate::io::{read_exact_at, Disk, FileId};

pub const CHECKPOINT_FILE: &str = "checkpoint";
const MAGIC: &[u8; 4] = b"RQCP";
const VERSION: u16 = 1;
const SLOT_LEN: u64 = 512;
const BODY_LEN: usize = 40;
const FLAG_CLEAN: u16 = 1;
/// A slot as written: the body and its CRC32C.
const SLOT_BYTES: usize = BODY_LEN + 4;

// The slot layout, checked when compiling: the body is magic, version, flags and four
// 8-byte fields; a slot must fit one 512-byte sector so a torn write hits only one.
const _: () = assert!(BODY_LEN == 4 + 2 + 2 + 8 + 8 + 8 + 8);
const _: () = assert!(SLOT_BYTES == 44 && SLOT_BYTES as u64 <= SLOT_LEN && SLOT_LEN <= 512);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub sequence: u64,
    pub safe_offset: u64,
    pub log_end: u64,
    pub clean: bool,
    pub written_at_ms: i64,
}

impl Checkpoint {
    pub fn encode(&self) -> [u8; 44] {
        let mut out = [0u8; 44];
        out[0..4].copy_from_slice(MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_be_bytes());
        let flags = if self.clean { FLAG_CLEAN } else { 0 };
        out[6..8].copy_from_slice(&flags.to_be_bytes());
        out[8..16].copy_from_slice(&self.sequence.to_be_bytes());
        out[16..24].copy_from_slice(&self.safe_offset.to_be_bytes());
        out[24..32].copy_from_slice(&self.log_end.to_be_bytes());
        out[32..40].copy_from_slice(&self.written_at_ms.to_be_bytes());
        let crc = crc32c::crc32c(&out[..BODY_LEN]);
        out[40..44].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// `None` for a slot that is empty, torn, or of an unknown version.
    pub fn decode(slot: &[u8]) -> Option<Checkpoint> {
        if slot.len() < 44 || &slot[0..4] != MAGIC {
            return None;
        }
        let stored_crc = u32::from_be_bytes(slot[40..44].try_into().ok()?);
        if crc32c::crc32c(&slot[..BODY_LEN]) != stored_crc {
            return None;
        }
        if u16::from_be_bytes(slot[4..6].try_into().ok()?) != VERSION {
            return None;
        }
        let field = |at: usize| u64::from_be_bytes(slot[at..at + 8].try_into().expect("8 bytes"));
        Some(Checkpoint {
            clean: u16::from_be_bytes(slot[6..8].try_into().ok()?) & FLAG_CLEAN != 0,
            sequence: field(8),
            safe_offset: field(16),
            log_end: field(24),
            // Written from an i64: the same bits back.
            written_at_ms: field(32).cast_signed(),
        })
    }
}

/// The checkpoint file, open for the life of the store.
pub struct CheckpointFile {
    disk: Rc<dyn Disk>,
    file: FileId,
    last: Option<Checkpoint>,
}

impl CheckpointFile {
    /// Opens (creating) the file and reads the newest valid slot.
    pub fn open(disk: Rc<dyn Disk>, dir: &Path) -> io::Result<CheckpointFile> {
        let path = dir.join(CHECKPOINT_FILE);
        let existed = disk.exists(&path);
        let file = disk.open(&path, true)?;
        if !existed {
            disk.sync_dir(dir)?;
        }
        let last = read_newest(disk.as_ref(), file)?;
        Ok(CheckpointFile { disk, file, last })
    }

    pub fn last(&self) -> Option<Checkpoint> {
        self.last
    }

    /// Writes and syncs a new checkpoint into the slot the previous one is not in.
    pub async fn write(
        &mut self,
        safe_offset: u64,
        log_end: u64,
        clean: bool,
        now_ms: i64,
    ) -> io::Result<()> {
        assert!(
            !clean || log_end == safe_offset,
            "a clean checkpoint resumes at its safe offset: log end {log_end}, safe {safe_offset}"
        );
        let sequence = self.last.map(|last| last.sequence + 1).unwrap_or(1);
        let checkpoint = Checkpoint {
            sequence,
            safe_offset,
            log_end,
            clean,
            written_at_ms: now_ms,
        };
        let slot = (sequence % 2) * SLOT_LEN;
        let bytes = Bytes::copy_from_slice(&checkpoint.encode());
        self.disk.write_at(self.file, slot, bytes).await?;
        self.disk.sync_data(self.file).await?;
        self.last = Some(checkpoint);
        Ok(())
    }

    pub fn close(&self) {
        self.disk.close(self.file);
    }
}

/// Reads the newest valid checkpoint of an existing file without opening a store.
pub fn read_checkpoint(disk: &dyn Disk, dir: &Path) -> io::Result<Option<Checkpoint>> {
    let path = dir.join(CHECKPOINT_FILE);
    if !disk.exists(&path) {
        return Ok(None);
    }
    let file = disk.open(&path, false)?;
    let newest = read_newest(disk, file);
    disk.close(file);
    newest
}

fn read_newest(disk: &dyn Disk, file: FileId) -> io::Result<Option<Checkpoint>> {
    let len = disk.file_len(file)?;
    let mut newest: Option<Checkpoint> = None;
    for slot in 0..2u64 {
        let at = slot * SLOT_LEN;
        if at + 44 > len {
            continue;
        }
        let mut buf = [0u8; 44];
        read_exact_at(disk, file, at, &mut buf)?;
        if let Some(checkpoint) = Checkpoint::decode(&buf) {
            if newest.is_none_or(|best| checkpoint.sequence > best.sequence) {
                newest = Some(checkpoint);
            }
        }
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let checkpoint = Checkpoint {
            sequence: 7,
            safe_offset: 4096,
            log_end: 8192,
            clean: true,
            written_at_ms: 1_700_000_000_000,
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint));
        for position in 0..bytes.len() {
            let mut damaged = bytes;
            damaged[position] ^= 0x40;
            assert_eq!(
                Checkpoint::decode(&damaged),
                None,
                "flip at {position} not caught"
            );
        }
        assert_eq!(Checkpoint::decode(&[0u8; 44]), None);
        assert_eq!(Checkpoint::decode(&bytes[..30]), None);
    }
}
