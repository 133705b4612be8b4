//! The last snapshot, on the disk seam: openraft's meta and the state's bytes in a slot
//! pair ([`super::slots`]), so a crash while a new snapshot is written leaves the previous
//! one whole. Payload: `meta_len u32 | meta JSON | state bytes`.
//!
//! A snapshot is durable before openraft learns it exists (built or installed), so the
//! log it covers may be purged: a restart restores this snapshot and replays the log
//! entries after it.

use std::io;
use std::path::Path;
use std::rc::Rc;

use super::slots::SlotPair;
use super::types::{Snapshot, SnapshotMeta};
use crate::io::Disk;

const SNAPSHOT_SLOTS: &str = "raft-snapshot";

/// The snapshot slot pair and a copy of the snapshot it holds.
pub struct SnapshotFiles {
    slots: SlotPair,
    current: Option<Snapshot>,
}

impl SnapshotFiles {
    pub fn open(disk: Rc<dyn Disk>, dir: &Path) -> io::Result<SnapshotFiles> {
        disk.create_dir_all(dir)?;
        let (slots, payload) = SlotPair::open(disk, dir, SNAPSHOT_SLOTS)?;
        let current = payload.map(|payload| decode(&payload, dir)).transpose()?;
        Ok(SnapshotFiles { slots, current })
    }

    /// The last snapshot saved.
    pub fn current(&self) -> Option<&Snapshot> {
        self.current.as_ref()
    }

    /// Saves `snapshot` durably, replacing the previous one.
    pub async fn save(&mut self, snapshot: Snapshot) -> io::Result<()> {
        let meta = serde_json::to_vec(&snapshot.meta).expect("snapshot meta encodes as JSON");
        let mut payload = Vec::with_capacity(4 + meta.len() + snapshot.snapshot.len());
        payload.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        payload.extend_from_slice(&meta);
        payload.extend_from_slice(&snapshot.snapshot);
        self.slots.write(&payload).await?;
        self.current = Some(snapshot);
        Ok(())
    }
}

fn decode(payload: &[u8], dir: &Path) -> io::Result<Snapshot> {
    let bad = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft snapshot in {}: {why}", dir.display()),
        )
    };
    let meta_len = payload
        .get(..4)
        .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| bad(format!("{} bytes, no meta length", payload.len())))?;
    let meta_bytes = payload.get(4..4 + meta_len).ok_or_else(|| {
        bad(format!(
            "meta of {meta_len} bytes in a payload of {}",
            payload.len()
        ))
    })?;
    let meta: SnapshotMeta = serde_json::from_slice(meta_bytes)
        .map_err(|error| bad(format!("meta does not decode: {error}")))?;
    Ok(Snapshot {
        meta,
        snapshot: payload[4 + meta_len..].to_vec(),
    })
}
