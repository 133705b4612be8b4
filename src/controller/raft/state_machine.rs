//! openraft's state machine over a [`ReplicatedState`]: applies each committed entry's
//! bytes, answers the proposer with the response bytes, and builds, saves and installs
//! snapshots through [`super::snapshot_files`].
//!
//! Invariants:
//! - entries are applied in log order, each once: an entry at or below the applied log id
//!   is a bug and panics with both ids;
//! - the state and its applied log id change together (one borrow), so a snapshot's meta
//!   always names the last entry its bytes include;
//! - on open, the state is the last saved snapshot's; openraft then re-applies the
//!   committed entries after it (the committed log id is saved, [`super::log_store`]).

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};

use super::snapshot_files::SnapshotFiles;
use super::types::{LogId, Payload, RaftTypes, Snapshot, SnapshotMeta, StoredMembership};
use crate::controller::replicated::ReplicatedState;
use crate::io::Disk;

/// The state and what openraft needs to know about what it has applied.
pub struct Applied<S> {
    pub state: S,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
}

/// The state machine handle openraft drives; clones share it.
pub struct StateMachine<S> {
    applied: Rc<RefCell<Applied<S>>>,
    snapshots: Rc<tokio::sync::Mutex<SnapshotFiles>>,
}

impl<S> Clone for StateMachine<S> {
    fn clone(&self) -> Self {
        StateMachine {
            applied: self.applied.clone(),
            snapshots: self.snapshots.clone(),
        }
    }
}

impl<S: ReplicatedState> StateMachine<S> {
    /// Opens the snapshot files in `dir` and restores `state` from the last snapshot.
    pub fn open(disk: Rc<dyn Disk>, dir: &Path, mut state: S) -> io::Result<StateMachine<S>> {
        let files = SnapshotFiles::open(disk, dir)?;
        let (last_applied, membership) = match files.current() {
            Some(snapshot) => {
                state.restore(&snapshot.snapshot)?;
                (
                    snapshot.meta.last_log_id,
                    snapshot.meta.last_membership.clone(),
                )
            }
            None => (None, StoredMembership::default()),
        };
        Ok(StateMachine {
            applied: Rc::new(RefCell::new(Applied {
                state,
                last_applied,
                membership,
            })),
            snapshots: Rc::new(tokio::sync::Mutex::new(files)),
        })
    }

    /// The applied state, shared with the adapter for local reads.
    pub fn applied(&self) -> Rc<RefCell<Applied<S>>> {
        self.applied.clone()
    }

    /// Whether a snapshot was ever saved here.
    pub async fn has_snapshot(&self) -> bool {
        self.snapshots.lock().await.current().is_some()
    }

    fn apply_one(&self, log_id: LogId, payload: EntryPayload<Payload, u64, SocketAddr>) -> Payload {
        let mut applied = self.applied.borrow_mut();
        assert!(
            applied
                .last_applied
                .is_none_or(|last| last.index() < log_id.index()),
            "entry {log_id} applied after {:?}",
            applied.last_applied
        );
        applied.last_applied = Some(log_id);
        match payload {
            EntryPayload::Blank => Payload::default(),
            EntryPayload::Normal(command) => Payload(applied.state.apply(&command.0)),
            EntryPayload::Membership(membership) => {
                applied.membership = StoredMembership::new(Some(log_id), membership);
                Payload::default()
            }
        }
    }
}

impl<S: ReplicatedState> RaftSnapshotBuilder<RaftTypes> for StateMachine<S> {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let snapshot = {
            let applied = self.applied.borrow();
            Snapshot {
                meta: SnapshotMeta {
                    last_log_id: applied.last_applied,
                    last_membership: applied.membership.clone(),
                },
                snapshot: applied.state.snapshot(),
            }
        };
        self.snapshots.lock().await.save(snapshot.clone()).await?;
        Ok(snapshot)
    }
}

impl<S: ReplicatedState> RaftStateMachine<RaftTypes> for StateMachine<S> {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.applied.borrow();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<RaftTypes>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = self.apply_one(entry.log_id, entry.payload);
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        // Saved before the state changes: a crash between the two restarts from it.
        let saved = Snapshot {
            meta: meta.clone(),
            snapshot,
        };
        self.snapshots.lock().await.save(saved.clone()).await?;
        let mut applied = self.applied.borrow_mut();
        applied.state.restore(&saved.snapshot)?;
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(self.snapshots.lock().await.current().cloned())
    }
}
