//! A slave shard's copy of its master's timer checkpoint (issue 25 item 4/7): the master's
//! progress for this shard ([`TimerProgress`]), clamped to the timer queue this slave
//! holds, written as the checkpoint of the shard's own timer store, so a slave started
//! again as a master recovers the master's pending timers from it.
//!
//! What it owns: the last progress written (a write only when it changed), and the
//! retention hold's floor once one is written.
//!
//! Why writing under the shard's open store is safe: a slave opens its timer store at start
//! (so its state can be read) but never runs the scheduler, never indexes and never
//! checkpoints (`service` skips the stop's checkpoint on a replica), so nothing but this
//! writes the directory while it runs, and the store's memory is never written back over
//! the copy. The write is `replace_file` on tokio's blocking pool: the old checkpoint or the
//! new one after a crash, and no fsync on the shard's reactor.
//!
//! Invariants:
//! - One write at a time (a second one is refused while one runs).
//! - The hold's floor is never above the `runsCover` of the checkpoint on disk: set to the
//!   new one's after its write returned, and to the lower of the old and the new after a
//!   failed one (either may be on disk), so retention never takes an entry a promoted
//!   slave would index.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::Arc;

use crate::io::meta::{replace_file, MetaFiles};

use super::store::progress::TimerProgress;

/// Why a copy was not written.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("a copy of the master's timer checkpoint is being written already")]
    Busy,
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The copy's state on one slave shard.
#[derive(Debug, Default)]
pub struct SlaveCopy {
    /// The progress on disk, if known (unknown after a failed write: written again).
    last: RefCell<Option<TimerProgress>>,
    /// Set once a copy was tried: the hold's floor from then on.
    floor: Cell<Option<u64>>,
    writing: Cell<bool>,
}

/// Clears the writing mark however the write ends (its task may be aborted at a stop).
struct Writing<'a>(&'a Cell<bool>);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl SlaveCopy {
    /// The lowest timer-queue offset the checkpoint on disk may need, once a copy was
    /// tried; before that, the store's own state says.
    pub fn floor(&self) -> Option<u64> {
        self.floor.get()
    }

    /// Writes `progress` (already clamped to this slave's queue) as the checkpoint at
    /// `path` unless it is the one written last; whether it wrote. `floor_now` is the
    /// lowest offset the checkpoint on disk needs now.
    pub async fn take(
        &self,
        files: Arc<dyn MetaFiles>,
        path: PathBuf,
        progress: TimerProgress,
        floor_now: u64,
    ) -> Result<bool, CopyError> {
        if self.last.borrow().as_ref() == Some(&progress) {
            return Ok(false);
        }
        if self.writing.replace(true) {
            return Err(CopyError::Busy);
        }
        let _writing = Writing(&self.writing);
        let bytes = progress.slave_checkpoint();
        let target = path.clone();
        let written =
            tokio::task::spawn_blocking(move || replace_file(&*files, &target, &bytes)).await;
        let error = match written {
            Ok(Ok(())) => {
                self.floor.set(Some(progress.runs_cover()));
                self.last.replace(Some(progress));
                return Ok(true);
            }
            Ok(Err(error)) => error,
            Err(join) => std::io::Error::other(join),
        };
        // What is on disk now is the old checkpoint or the new one: hold for both, and
        // write again next time.
        self.floor.set(Some(floor_now.min(progress.runs_cover())));
        self.last.replace(None);
        Err(CopyError::Write { path, error })
    }
}
