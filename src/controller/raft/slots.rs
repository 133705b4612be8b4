//! A value that is replaced whole and must survive a crash at any instant, on a seam that
//! has no rename: two slot files written alternately.
//!
//! Each slot file holds one record: `magic u32 | seq u64 | len u32 | crc32c u32 | payload`
//! (little-endian; the checksum covers `seq`, `len` and the payload). A write goes to the
//! slot *not* holding the newest record, with the next sequence number, then is synced;
//! the newest valid slot is the value. A crash during a write can only tear the slot
//! being written, whose record then fails its checksum (or keeps its older, lower
//! sequence number), so the other slot still holds the value the last completed write
//! left: the value read back is always one that a [`SlotPair::write`] returned for, or a
//! newer one whose write was under way.
//!
//! Both slot files are created (and their directory synced) when the pair is opened, so
//! no write ever depends on a name becoming durable.

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use crate::io::{Disk, FileId};

const MAGIC: u32 = 0x534c_4f54; // "SLOT"
const HEADER: usize = 20;
/// A slot larger than this is corrupt, not big: it bounds what a bad length can allocate.
pub const MAX_SLOT_PAYLOAD: usize = 256 << 20;

/// Two alternating slot files `<name>.0` and `<name>.1` in one directory.
pub struct SlotPair {
    disk: Rc<dyn Disk>,
    paths: [PathBuf; 2],
    files: [FileId; 2],
    /// Sequence number of the newest valid record (0: none yet) and which slot holds it.
    newest: Option<(u64, usize)>,
}

impl SlotPair {
    /// Opens (creating) both slots and reads the newest valid record, if any.
    pub fn open(
        disk: Rc<dyn Disk>,
        dir: &Path,
        name: &str,
    ) -> io::Result<(SlotPair, Option<Vec<u8>>)> {
        let paths = [dir.join(format!("{name}.0")), dir.join(format!("{name}.1"))];
        let created = paths.iter().any(|path| !disk.exists(path));
        let files = [disk.open(&paths[0], true)?, disk.open(&paths[1], true)?];
        if created {
            disk.sync_dir(dir)?;
        }
        let mut pair = SlotPair {
            disk,
            paths,
            files,
            newest: None,
        };
        let mut value = None;
        for slot in 0..2 {
            if let Some((seq, payload)) = pair.read_slot(slot)? {
                if pair.newest.is_none_or(|(newest, _)| seq > newest) {
                    pair.newest = Some((seq, slot));
                    value = Some(payload);
                }
            }
        }
        Ok((pair, value))
    }

    /// Replaces the value; durable when this returns.
    pub async fn write(&mut self, payload: &[u8]) -> io::Result<()> {
        assert!(
            payload.len() <= MAX_SLOT_PAYLOAD,
            "slot payload of {} bytes exceeds {MAX_SLOT_PAYLOAD}",
            payload.len()
        );
        let (seq, slot) = match self.newest {
            Some((seq, slot)) => (seq + 1, 1 - slot),
            None => (1, 1),
        };
        let record = encode(seq, payload);
        let file = self.files[slot];
        self.disk.write_at(file, 0, Bytes::from(record)).await?;
        self.disk.sync_data(file).await?;
        self.newest = Some((seq, slot));
        Ok(())
    }

    /// The record in `slot` if it is whole and valid; an empty or torn slot is `None`.
    fn read_slot(&self, slot: usize) -> io::Result<Option<(u64, Vec<u8>)>> {
        let file = self.files[slot];
        let len = self.disk.file_len(file)?;
        if len < HEADER as u64 {
            return Ok(None);
        }
        let mut header = [0u8; HEADER];
        crate::io::read_exact_at(&*self.disk, file, 0, &mut header)?;
        let magic = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(header[4..12].try_into().expect("8 bytes"));
        let payload_len = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
        if magic != MAGIC || payload_len > MAX_SLOT_PAYLOAD || (HEADER + payload_len) as u64 > len {
            tracing::debug!("slot {} holds no whole record", self.paths[slot].display());
            return Ok(None);
        }
        let mut payload = vec![0u8; payload_len];
        crate::io::read_exact_at(&*self.disk, file, HEADER as u64, &mut payload)?;
        if checksum(seq, &payload) != crc {
            tracing::debug!(
                "slot {} fails its checksum (a torn write)",
                self.paths[slot].display()
            );
            return Ok(None);
        }
        Ok(Some((seq, payload)))
    }
}

impl Drop for SlotPair {
    fn drop(&mut self) {
        for file in self.files {
            self.disk.close(file);
        }
    }
}

fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&seq.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &(payload.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

fn encode(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER + payload.len());
    record.extend_from_slice(&MAGIC.to_le_bytes());
    record.extend_from_slice(&seq.to_le_bytes());
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    record.extend_from_slice(&checksum(seq, payload).to_le_bytes());
    record.extend_from_slice(payload);
    record
}
