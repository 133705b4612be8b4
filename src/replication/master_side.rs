//! A master shard's replication state: its epoch, its slaves' streams, and what they
//! mean for the store's puts (D7, D14).
//!
//! Becoming master appends a new epoch starting at the log's written end (at its start
//! when the shard has no history yet: the log written before replication is claimed by
//! the first epoch) and saves the history before any stream is served, so every byte a
//! slave receives is labelled by an epoch that survives a restart.
//!
//! The store hears two things from here:
//! - the replication watermark ([`Store::confirm_replicated`]): the highest ack of any
//!   streaming slave. It only moves forward (a slave that reconnects lower does not pull
//!   it back), and never past the written end (an ack never passes what was sent);
//! - whether a replica is attached ([`Store::set_replica_attached`]): a slave is streaming
//!   and within `haSlaveFallbehindMax` of the written end. Under SYNC_MASTER a put made
//!   while none is attached is answered SLAVE_NOT_AVAILABLE at once (its flush alone
//!   releases it), never held.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use super::epoch_store::{EpochStore, EpochStoreError};
use super::epochs::{EpochCache, EpochEntry, EpochError};
use super::master_link::facts;
use super::master_state::{MasterIdentity, MasterLog, MasterSettings};
use crate::store::Store;

/// The low bits of an epoch that are drawn at random: without a controller to hand out
/// epochs, two nodes that become master apart (a master restarted, its slave promoted
/// while cut off from it) would both take "last + 1" at the same start and their
/// histories would look alike where their bytes differ. With 16 random bits two such
/// choices collide with probability 1/65536; the epoch's high bits still order epochs, and
/// 2^15 promotions fit a Java int. The controller of the failover issue hands out epochs
/// instead, and this goes.
pub const EPOCH_RANDOM_BITS: u32 = 16;

/// The epoch a new master takes after `last`: a higher sequence in the high bits, random
/// low bits.
pub fn next_epoch(last: Option<u32>, random: &mut crate::rng::SplitMix64) -> u32 {
    let sequence = last.map_or(0, |last| last >> EPOCH_RANDOM_BITS) + 1;
    let low = (random.next_u64() & ((1 << EPOCH_RANDOM_BITS) - 1)) as u32;
    let epoch = (sequence << EPOCH_RANDOM_BITS) | low;
    assert!(
        epoch <= super::wire::EPOCH_MAX && last.is_none_or(|last| epoch > last),
        "epoch {epoch} after {last:?}: the sequence {sequence} overflows a Java int"
    );
    epoch
}

/// A seed no other node shares: the time and this process.
fn random_seed() -> crate::rng::SplitMix64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    crate::rng::SplitMix64::new(nanos ^ (u64::from(std::process::id()) << 32))
}

/// `history` with `epoch` appended where a new master's writes begin: at the written end,
/// or at the log's start when there is no history yet (the log written before
/// replication is claimed by the first epoch). Entries that start at or past the written
/// end go first: they label no byte this log holds (a slave killed after saving a new
/// epoch's entry and before that epoch's bytes were durable, cut by recovery).
pub fn with_new_epoch(
    mut history: EpochCache,
    log_start: u64,
    written: u64,
    epoch: u32,
) -> Result<EpochCache, BecomeMasterError> {
    let start = if history.is_empty() {
        log_start
    } else {
        history.truncate_from(written);
        written
    };
    history
        .append(EpochEntry { epoch, start })
        .map_err(|error| BecomeMasterError::History {
            epoch,
            start,
            error,
        })?;
    Ok(history)
}

/// What a master shard's replication runs with.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    pub identity: MasterIdentity,
    pub stream: MasterSettings,
    pub heartbeat: Duration,
    pub housekeeping: Duration,
    /// `haSlaveFallbehindMax`: how far behind a slave may be and still count as attached.
    pub fallbehind_max: u64,
    /// `haSendBatchBytes`: a stream gathers frames into one write until it holds this many
    /// bytes.
    pub send_bytes: usize,
    /// The epoch to take: the controller's master epoch in controller mode (D18), which
    /// must be above every epoch the log holds; `None` draws one ([`next_epoch`]).
    pub epoch: Option<u32>,
}

/// Why a shard could not become master.
#[derive(Debug, thiserror::Error)]
pub enum BecomeMasterError {
    #[error(transparent)]
    Epochs(#[from] EpochStoreError),
    #[error("the epoch history cannot take epoch {epoch} at {start}: {error}")]
    History {
        epoch: u32,
        start: u64,
        error: EpochError,
    },
}

/// One slave's stream as the master sees it.
#[derive(Clone, Copy, Debug)]
pub struct LinkState {
    pub peer: SocketAddr,
    /// Set once the first report chose where the stream starts.
    pub streaming: bool,
    /// What the slave holds, by its last report.
    pub ack: u64,
    /// Where the stream started (set with `streaming`).
    pub from: u64,
    /// The slave's `brokerId`, from its handshake (set with `streaming`).
    pub slave_id: Option<u64>,
}

/// A master shard's replication state, shared by its streams.
pub struct MasterSide {
    pub(super) store: Store,
    pub(super) identity: MasterIdentity,
    pub(super) stream_settings: MasterSettings,
    pub(super) heartbeat: Duration,
    pub(super) housekeeping: Duration,
    /// `haSendBatchBytes`, see [`MasterConfig::send_bytes`].
    pub(super) send_bytes: usize,
    epochs: EpochCache,
    fallbehind_max: u64,
    links: RefCell<BTreeMap<u64, LinkState>>,
    next_link: Cell<u64>,
    bytes_sent: Cell<u64>,
    started: tokio::time::Instant,
}

impl MasterSide {
    /// Makes `store`'s shard a master: a new epoch from its written end, saved, then the
    /// state its streams share.
    pub async fn become_master(
        store: Store,
        epochs: &EpochStore,
        config: MasterConfig,
    ) -> Result<Rc<MasterSide>, BecomeMasterError> {
        let old = epochs.history();
        let epoch = match config.epoch {
            Some(given) => given,
            None => next_epoch(old.last_epoch(), &mut random_seed()),
        };
        let written = store.log_positions().written;
        let history = with_new_epoch(old, store.log_start(), written, epoch)?;
        let start = history.last().expect("an epoch was just appended").start;
        epochs.save(history.clone()).await?;
        tracing::info!(
            shard = config.identity.shard_index,
            epoch,
            start,
            "shard is master of its replication stream"
        );
        Ok(Rc::new(MasterSide {
            store,
            identity: config.identity,
            stream_settings: config.stream,
            heartbeat: config.heartbeat,
            housekeeping: config.housekeeping,
            send_bytes: config.send_bytes,
            epochs: history,
            fallbehind_max: config.fallbehind_max,
            links: RefCell::new(BTreeMap::new()),
            next_link: Cell::new(0),
            bytes_sent: Cell::new(0),
            started: tokio::time::Instant::now(),
        }))
    }

    /// The store's facts for a stream's state machine.
    pub(super) fn log_facts(&self) -> MasterLog<'_> {
        facts(
            &self.store,
            self.store.log_positions().replicated,
            &self.epochs,
        )
    }

    /// Milliseconds on the stream clock (monotonic; tests may pause it).
    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A new stream from `peer`; its id names it in the other calls.
    pub(super) fn open_link(&self, peer: SocketAddr) -> u64 {
        let id = self.next_link.get();
        self.next_link.set(id + 1);
        self.links.borrow_mut().insert(
            id,
            LinkState {
                peer,
                streaming: false,
                ack: 0,
                from: 0,
                slave_id: None,
            },
        );
        tracing::info!(shard = self.identity.shard_index, %peer, "slave connected");
        id
    }

    /// The stream `link` ended.
    pub(super) fn close_link(&self, link: u64) {
        if let Some(state) = self.links.borrow_mut().remove(&link) {
            tracing::info!(
                shard = self.identity.shard_index,
                peer = %state.peer,
                slave_id = state.slave_id,
                ack = state.ack,
                written = self.store.log_positions().written,
                "slave disconnected"
            );
        }
        self.update_store();
    }

    /// The stream `link` of slave `slave_id` starts at `from`: the slave holds everything
    /// below it.
    pub(super) fn started(&self, link: u64, from: u64, slave_id: Option<u64>) {
        let mut peer = String::new();
        self.set_link(link, |state| {
            state.streaming = true;
            state.ack = from;
            state.from = from;
            state.slave_id = slave_id;
            peer = state.peer.to_string();
        });
        tracing::info!(
            shard = self.identity.shard_index,
            %peer,
            slave_id,
            from,
            written = self.store.log_positions().written,
            "slave streaming"
        );
    }

    /// The slave of `link` holds every byte below `offset`.
    pub(super) fn acked(&self, link: u64, offset: u64) {
        self.set_link(link, |state| state.ack = offset);
    }

    pub(super) fn sent(&self, bytes: u32) {
        self.bytes_sent
            .set(self.bytes_sent.get() + u64::from(bytes));
    }

    fn set_link(&self, link: u64, change: impl FnOnce(&mut LinkState)) {
        if let Some(state) = self.links.borrow_mut().get_mut(&link) {
            change(state);
        }
        self.update_store();
    }

    /// Moves the watermark to what the streaming slaves confirm ([`confirmed`]) and says
    /// whether a slave is attached.
    fn update_store(&self) {
        let written = self.store.log_positions().written;
        let links = self.links.borrow();
        let members = self.store.replica_gate().and_then(|gate| gate.members());
        let attached = links
            .values()
            .filter(|state| state.streaming)
            .any(|state| written.saturating_sub(state.ack) <= self.fallbehind_max);
        if let Some(confirmed) = confirmed(links.values(), members.as_deref()) {
            if confirmed > self.store.log_positions().replicated {
                self.store.confirm_replicated(confirmed.min(written));
            }
        }
        self.store.set_replica_attached(attached);
    }

    /// Every stream now, for status and metrics.
    pub fn links(&self) -> Vec<LinkState> {
        self.links.borrow().values().copied().collect()
    }

    /// Bytes of log sent to slaves since this shard became master.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.get()
    }

    /// The master's store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The epoch this master writes under.
    pub fn epoch(&self) -> u32 {
        self.epochs.last_epoch().expect("a master has an epoch")
    }
}

/// What the streaming slaves of `links` confirm: with `members`, the lowest ack among
/// them (each member by its best link; `None` while one of them has no streaming link, so
/// nothing is confirmed past a member that may be elected without it); without, the best
/// ack of any.
fn confirmed<'a>(
    links: impl Iterator<Item = &'a LinkState>,
    members: Option<&BTreeSet<u64>>,
) -> Option<u64> {
    let streaming = links.filter(|state| state.streaming);
    let Some(members) = members else {
        return streaming.map(|state| state.ack).max();
    };
    let mut best: BTreeMap<u64, u64> = BTreeMap::new();
    for state in streaming {
        if let Some(id) = state.slave_id.filter(|id| members.contains(id)) {
            let ack = best.entry(id).or_default();
            *ack = (*ack).max(state.ack);
        }
    }
    if best.len() < members.len() {
        return None;
    }
    best.into_values().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn link(slave_id: Option<u64>, streaming: bool, ack: u64) -> LinkState {
        LinkState {
            peer: SocketAddr::from(([127, 0, 0, 1], 1)),
            streaming,
            ack,
            from: 0,
            slave_id,
        }
    }

    #[test]
    fn members_confirm_only_what_every_one_of_them_holds() {
        let links = [
            link(Some(2), true, 500),
            link(Some(3), true, 300),
            link(Some(3), false, 900),
            link(Some(4), true, 800),
            link(None, true, 1000),
        ];
        let members = |ids: &[u64]| ids.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(
            confirmed(links.iter(), None),
            Some(1000),
            "classic: the best"
        );
        assert_eq!(confirmed(links.iter(), Some(&members(&[2, 3]))), Some(300));
        assert_eq!(confirmed(links.iter(), Some(&members(&[2, 4]))), Some(500));
        assert_eq!(confirmed(links.iter(), Some(&members(&[4]))), Some(800));
        assert_eq!(
            confirmed(links.iter(), Some(&members(&[2, 5]))),
            None,
            "member 5 streams nowhere: nothing is confirmed past it"
        );
        let again = [link(Some(2), true, 100), link(Some(2), true, 700)];
        assert_eq!(
            confirmed(again.iter(), Some(&members(&[2]))),
            Some(700),
            "a member's best link counts"
        );
    }

    #[test]
    fn a_next_epoch_is_higher_and_two_draws_after_one_epoch_differ_in_their_low_bits() {
        let mut random = SplitMix64::new(7);
        let first = next_epoch(None, &mut random);
        assert_eq!(first >> EPOCH_RANDOM_BITS, 1);
        let a = next_epoch(Some(first), &mut random);
        let b = next_epoch(Some(first), &mut random);
        assert!(a > first && b > first, "{first} -> {a}, {b}");
        assert_eq!(a >> EPOCH_RANDOM_BITS, b >> EPOCH_RANDOM_BITS);
        assert_ne!(a, b, "two masters after one epoch take different epochs");
    }

    #[test]
    fn a_new_master_drops_epochs_that_start_past_its_log_before_it_appends_its_own() {
        let entry = |epoch, start| EpochEntry { epoch, start };
        let torn = EpochCache::from_entries(&[entry(1, 0), entry(2, 27_708)]).unwrap();
        let history = with_new_epoch(torn, 0, 27_306, 3).expect("the torn entry goes");
        assert_eq!(history.entries(), &[entry(1, 0), entry(3, 27_306)]);
        let whole = EpochCache::from_entries(&[entry(1, 0), entry(2, 100)]).unwrap();
        let history = with_new_epoch(whole, 0, 500, 3).unwrap();
        assert_eq!(
            history.entries(),
            &[entry(1, 0), entry(2, 100), entry(3, 500)]
        );
        let none = with_new_epoch(EpochCache::new(), 64, 500, 1).unwrap();
        assert_eq!(
            none.entries(),
            &[entry(1, 64)],
            "a log before replication is claimed"
        );
    }

    #[test]
    fn an_epoch_from_before_random_bits_is_still_followed_by_a_higher_one() {
        let mut random = SplitMix64::new(1);
        for last in [1, 2, 5, 65_535] {
            assert!(next_epoch(Some(last), &mut random) > last);
        }
    }
}
