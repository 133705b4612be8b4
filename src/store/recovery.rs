//! Opening a store: clean start or crash recovery (D9, D10).
//!
//! | abort marker | checkpoint      | what happens                                             |
//! |--------------|-----------------|----------------------------------------------------------|
//! | absent       | valid, CLEAN    | clean stop: appends resume at its log end, no scan        |
//! | absent       | missing         | new store if the log is empty, else treated as a crash    |
//! | present      | any             | crash: scan from the safe offset (the log's base if none) |
//!
//! Crash recovery, in order:
//! 0. Before anything is cut, the records of the segment the safe offset ends in are read
//!    again below it, CRCs checked ([`check_below_safe`]). The checkpoint promises those
//!    bytes were synced and no torn write can touch them, but a failing disk or a hand
//!    can. A replica's log damaged there recovers as if its safe offset were the first
//!    damaged record (its master streams the rest again, and an election ranks it by what
//!    it really holds); a master's open fails naming the offset, nothing deleted, since
//!    no one else may hold the records after it. (RocketMQ's abnormal recovery also scans
//!    its last segments whole, `checkCRCOnRecover`.)
//! 1. Each ConsumeQueue is cut before its first entry that is unwritten or points at or
//!    past the safe offset (entries below it were synced before the checkpoint said so);
//!    so are the IndexFiles, and the newest one's slots are rebuilt (`index.rs`).
//! 2. The CommitLog is scanned from the safe offset, checking magic, size, body CRC and
//!    the whole-record CRC32C; every valid record is dispatched to its queue (and the
//!    index) again.
//! 3. The first invalid record (bad magic, size or CRC: what a torn write leaves) ends the
//!    log: the rest of its segment is zeroed and later segments are removed, so nothing
//!    half-written can ever be read or served. A record that is whole (its CRC32C holds)
//!    but cannot be taken (a topic today's rules refuse, a queue offset that does not
//!    continue its queue, a phys offset naming another position) is not a torn write:
//!    the open fails naming its offset and nothing of the CommitLog is deleted. The scan's
//!    [`ScanStop`] decides which, never the text of an error.
//! 4. The recovered range is synced, the queues are written and synced, and a checkpoint
//!    at the recovered end is written before the abort marker is (re)created.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::path::Path;
use std::rc::Rc;

use tokio::sync::Notify;

use super::checkpoint::CheckpointFile;
use super::commit_log::CommitLog;
use super::consume_queue::ConsumeQueue;
use super::dispatch::{dispatch_record, DispatchRecord};
use super::index::{Index, INDEX_DIR};
use super::position::LogPos;
use super::record::{RecordView, Verify};
use super::scan::{scan, ScanStop};
use super::segment::segment_name;
use super::segment::SegmentSet;
use super::waiters::{AckCondition, Waiters};
use super::{topic, OpenKind, QueueMap, Shared, StoreError, StoreStats};
use super::{ABORT_FILE, COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, LOCK_FILE};
use crate::clock::Clock;
use crate::config::StoreConfig;
use crate::io::{Disk, FileLock};

/// Bytes read at a time while scanning.
const SCAN_WINDOW: usize = 8 << 20;

pub(crate) async fn open(
    config: StoreConfig,
    disk: Rc<dyn Disk>,
    clock: Clock,
) -> Result<Rc<Shared>, StoreError> {
    config.validate().map_err(StoreError::Config)?;
    let (parts, mut found) = find_state(&config, &disk)?;
    if !found.clean && !found.fresh {
        found.safe = check_below_safe(&config, &parts.segments, found.safe)?;
    }
    let cut = if found.clean { None } else { Some(found.safe) };
    let queues = load_queues(&disk, &config.dir.join(CONSUME_QUEUE_DIR), &config, cut).await?;
    let index = open_index(&config, &disk, cut)?;
    let shared = new_shared(config, disk, clock, parts, found.safe, queues, index);
    let end = recover_or_resume(&shared, &found).await?;
    shared.opened.set(match (found.clean, found.fresh) {
        (true, _) => OpenKind::Clean,
        (false, true) => OpenKind::Fresh,
        (false, false) => OpenKind::Recovered {
            from: found.safe,
            to: end,
        },
    });
    resume_at(&shared, end, found.clean).await?;
    Ok(shared)
}

/// Maps an I/O error to the store's, with what was being done.
fn io_error(context: &str) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |error: std::io::Error| StoreError::from_io(context, &error)
}

/// How the store stopped (the table in the module doc), read before anything is cut.
#[derive(Clone, Copy)]
struct FoundState {
    /// A clean stop: resume at the checkpointed end without scanning.
    clean: bool,
    /// Nothing there yet: no segment, no checkpoint.
    fresh: bool,
    /// Where a scan starts: the checkpoint's safe offset, or the log's base without one.
    safe: u64,
    /// The checkpointed end of the log (a clean stop's), or the base.
    log_end: u64,
}

/// The files an open store holds for its life.
struct OpenParts {
    lock_file: FileLock,
    checkpoint: CheckpointFile,
    segments: SegmentSet,
}

/// Creates and locks the directory, reads the checkpoint and the CommitLog's segments,
/// and refuses a log that a scan would wrongly cut (a missing segment between present
/// ones, a checkpoint promising data the log does not hold).
fn find_state(
    config: &StoreConfig,
    disk: &Rc<dyn Disk>,
) -> Result<(OpenParts, FoundState), StoreError> {
    let dir = &config.dir;
    disk.create_dir_all(dir)
        .map_err(io_error("creating the store directory"))?;
    let lock_file = lock_directory(&**disk, dir)?;
    let crashed = disk.exists(&dir.join(ABORT_FILE));
    let checkpoint =
        CheckpointFile::open(disk.clone(), dir).map_err(io_error("opening the checkpoint"))?;
    let base = config.offset_base();
    let segments = SegmentSet::load(
        disk.clone(),
        &dir.join(COMMIT_LOG_DIR),
        config.commit_log_segment_size,
        base,
    )
    .map_err(|error| StoreError::Corrupt(format!("loading the CommitLog: {error}")))?;
    // Checked before anything may be cut (issue defect 13: only invalid records may cut
    // the log): a scan would otherwise end at the gap and delete every later segment.
    if let Some(missing) = segments.first_gap() {
        return Err(StoreError::Corrupt(format!(
            "CommitLog segment {} is missing between present segments; nothing was deleted",
            dir.join(COMMIT_LOG_DIR)
                .join(segment_name(missing))
                .display()
        )));
    }
    let last = checkpoint.last();
    let safe = last.map(|last| last.safe_offset).unwrap_or(base);
    if safe < base || (safe > base && segments.is_empty()) {
        return Err(StoreError::Corrupt(format!(
            "the checkpoint says the log is durable up to {safe}, but {} holds no segment for it",
            dir.join(COMMIT_LOG_DIR).display()
        )));
    }
    // Nothing below the first present segment exists to scan: retention deleted it (it
    // deletes only below the safe offset, so this changes nothing then), or a replica
    // began its log at its master's minimum and stopped before its first checkpoint
    // there (`replica_cut.rs`).
    let safe = segments.first_start().map_or(safe, |first| safe.max(first));
    let found = FoundState {
        clean: !crashed && last.is_some_and(|last| last.clean),
        fresh: segments.is_empty() && last.is_none(),
        safe,
        log_end: last.map(|last| last.log_end).unwrap_or(base),
    };
    let parts = OpenParts {
        lock_file,
        checkpoint,
        segments,
    };
    Ok((parts, found))
}

/// Where crash recovery may start: `safe`, once the records below it in its segment
/// (from the segment's start, or the log's first byte) are read and their CRCs hold.
/// Damage there (an invalid record, or zeros where records must be) moves a replica's
/// start back to it; a master's open fails. See step 0 of the module docs.
fn check_below_safe(
    config: &StoreConfig,
    segments: &SegmentSet,
    safe: u64,
) -> Result<u64, StoreError> {
    let Some(first) = segments.first_start() else {
        return Ok(safe);
    };
    if safe <= first {
        return Ok(safe);
    }
    let from = segments.start_of(safe - 1).max(first);
    // The visitor stops the scan at the first record at or past `safe`.
    let result = scan(segments, from, Verify::Full, SCAN_WINDOW, |phys, _| {
        if phys >= safe {
            Err(())
        } else {
            Ok(())
        }
    })
    .map_err(|error| StoreError::from_io("checking the CommitLog below the safe offset", &error))?;
    let damaged_at = result.end;
    if damaged_at >= safe {
        return Ok(safe);
    }
    let why = match result.stop {
        ScanStop::Invalid(why) => why.to_string(),
        ScanStop::CleanEnd => "zeros where records must be".to_string(),
        ScanStop::Inconsistent(why) => format!("a whole record that {why}"),
        ScanStop::Refused(()) => unreachable!("the visitor refuses only at or past {safe}"),
    };
    let lost = safe - damaged_at;
    if config.broker_role != crate::config::BrokerRole::Slave {
        return Err(StoreError::Corrupt(format!(
            "CommitLog of {} is damaged at {damaged_at}, below the checkpoint's safe offset \
             {safe} ({why}): {lost} bytes the checkpoint says were synced are not whole \
             records; nothing was deleted. `ringmq store verify` shows the damage; a slave \
             holding these records can be made master instead",
            config.dir.display()
        )));
    }
    tracing::error!(
        "CommitLog of {} is damaged at {damaged_at}, below the checkpoint's safe offset {safe} \
         ({why}): this replica recovers from {damaged_at}, dropping the {lost} bytes there and \
         everything after them; its master streams them again",
        config.dir.display()
    );
    Ok(damaged_at)
}

/// Opens the index if the store keeps one, cut at `cut` after a crash.
fn open_index(
    config: &StoreConfig,
    disk: &Rc<dyn Disk>,
    cut: Option<u64>,
) -> Result<Option<Index>, StoreError> {
    if !config.message_index_enable {
        return Ok(None);
    }
    let index = Index::open(
        disk.clone(),
        &config.dir.join(INDEX_DIR),
        config.index_geometry,
        cut,
    )
    .map_err(|error| match error.kind() {
        std::io::ErrorKind::InvalidData => StoreError::Config(error.to_string()),
        _ => StoreError::from_io("opening the index", &error),
    })?;
    Ok(Some(index))
}

/// The store's shared state over what was found, every position at the safe offset
/// until recovery or the clean stop's checkpoint says where the log ends.
fn new_shared(
    config: StoreConfig,
    disk: Rc<dyn Disk>,
    clock: Clock,
    parts: OpenParts,
    safe: u64,
    queues: QueueMap,
    index: Option<Index>,
) -> Rc<Shared> {
    Rc::new(Shared {
        log: CommitLog::new(parts.segments, safe),
        queues: RefCell::new(queues),
        pending: RefCell::new(VecDeque::new()),
        appender_wake: Notify::new(),
        flusher_wake: Notify::new(),
        arrivals: Notify::new(),
        visible_hook: RefCell::new(None),
        poison: RefCell::new(None),
        closing: Cell::new(false),
        dispatched_pos: Cell::new(safe),
        // Nothing is known to be replicated until a replica says so.
        replicated_pos: Cell::new(config.offset_base()),
        replica_attached: Cell::new(false),
        replica_gate: RefCell::new(None),
        write_lease: RefCell::new(None),
        confirm_times: super::confirm_timing::ConfirmTimes::default(),
        checkpoint: RefCell::new(Some(parts.checkpoint)),
        stats: Cell::new(StoreStats::default()),
        tasks: RefCell::new(Vec::new()),
        appender_idle: Notify::new(),
        appender_busy: Cell::new(false),
        watchdog_tick: Cell::new(0),
        in_flight: RefCell::new(Vec::new()),
        waiters: RefCell::new(Waiters::new(
            AckCondition::required(config.flush_mode, config.broker_role),
            safe,
        )),
        lock_file: RefCell::new(Some(parts.lock_file)),
        opened: Cell::new(OpenKind::Fresh),
        answer_scope: RefCell::new(Rc::new(|answers: &mut dyn FnMut()| answers())),
        injected_panic: Cell::new(None),
        gather: Default::default(),
        zeroed_until: Default::default(),
        index,
        space_refusal: RefCell::new(None),
        retention: Cell::new(Default::default()),
        cleaning: tokio::sync::Mutex::new(()),
        retention_holds: RefCell::new(Vec::new()),
        checkpoint_lock: tokio::sync::Mutex::new(()),
        flush_lock: tokio::sync::Mutex::new(()),
        role: Cell::new(super::replica::StoreRole::for_broker_role(
            config.broker_role,
        )),
        replica: super::replica::ReplicaState::new(safe),
        config,
        disk,
        clock,
    })
}

/// Where the log ends: the clean stop's checkpointed end, else what recovery left.
async fn recover_or_resume(shared: &Shared, found: &FoundState) -> Result<u64, StoreError> {
    if found.clean {
        return Ok(found.log_end);
    }
    let safe = found.safe;
    let started_ms = shared.clock.now_ms();
    // A replica's damage below the checkpoint moved the start back (`check_below_safe`):
    // the checkpoint follows first, as a replica's truncation does, so a crash while the
    // log is cut recovers from at or below the damage.
    super::flush::lower_checkpoint(shared, safe).await?;
    let recovered = recover_log(shared, safe).await?;
    if !found.fresh {
        // At WARN, the default level: an operator must see that the last run did not
        // stop cleanly and what the start did about it, without asking for more logs.
        tracing::warn!(
            "store {} recovered after a crash in {} ms: scanned {} bytes of CommitLog from the checkpoint's safe offset {safe} to {}, re-dispatched {} records (ConsumeQueues and index cut back to {safe} first); {}",
            shared.config.dir.display(),
            shared.clock.now_ms().saturating_sub(started_ms),
            recovered.end - safe,
            recovered.end,
            recovered.records,
            recovered.cut,
        );
    }
    Ok(recovered.end)
}

/// Resumes at `end`: every position there, the queues and index trimmed to the log's
/// start, a checkpoint at `end`, then the abort marker (re)created.
async fn resume_at(shared: &Shared, end: u64, clean: bool) -> Result<(), StoreError> {
    shared.log.reset_positions(end);
    shared.dispatched_pos.set(end);
    shared.replica.reset(end);
    trim_to_log_start(shared)?;
    super::append::restart_waiters(shared, end);
    super::flush::checkpoint(shared, false).await?;
    let dir = &shared.config.dir;
    let marker = shared
        .disk
        .open(&dir.join(ABORT_FILE), true)
        .map_err(io_error("creating the abort marker"))?;
    shared.disk.close(marker);
    shared
        .disk
        .sync_dir(dir)
        .map_err(io_error("syncing the store directory"))?;
    tracing::info!(
        "store {} opened after a {} stop: log ends at {end}, {} queues",
        dir.display(),
        if clean { "clean" } else { "crash or first" },
        shared.all_queues().len()
    );
    Ok(())
}

/// Trims every queue and the index to the log's first segment: a crash in the middle of a
/// retention run may have deleted segments before the files that point into them.
fn trim_to_log_start(shared: &Shared) -> Result<(), StoreError> {
    let log_start = shared.log_start();
    let io_error = |error: std::io::Error| StoreError::from_io("trimming to the log start", &error);
    let mut doomed = Vec::new();
    for queue in shared.all_queues() {
        doomed.extend(queue.trim_below(LogPos::new(log_start)).map_err(io_error)?);
    }
    if let Some(index) = &shared.index {
        doomed.extend(index.detach_below(log_start));
    }
    for path in &doomed {
        shared.disk.remove_file(path).map_err(io_error)?;
        tracing::info!(
            "removed {}: wholly below the log start {log_start}",
            path.display()
        );
    }
    let mut dirs: Vec<&Path> = doomed.iter().filter_map(|path| path.parent()).collect();
    dirs.dedup();
    for dir in dirs {
        shared.disk.sync_dir(dir).map_err(io_error)?;
    }
    Ok(())
}

/// What [`recover_log`] did.
struct Recovered {
    /// Where the log ends now.
    end: u64,
    /// Records re-dispatched.
    records: u64,
    /// What was cut after `end`, in words.
    cut: String,
}

/// Scans from `safe`, re-dispatching every valid record, and cuts the log after the last.
///
/// Only a stop that [`ScanStop::may_cut`] allows (a clean end or an invalid record) cuts
/// the tail. Any other stop is a whole record recovery cannot take: the open fails with
/// an error naming its offset, before anything of the CommitLog is deleted or zeroed,
/// since the acknowledged records after it are still there for an operator to save.
async fn recover_log(shared: &Shared, safe: u64) -> Result<Recovered, StoreError> {
    let mut recovered = 0u64;
    let result = {
        let segments = shared.log.segments.borrow();
        scan(&segments, safe, Verify::Full, SCAN_WINDOW, |phys, view| {
            redispatch(shared, phys, view).map(|()| recovered += 1)
        })
    };
    let scan_end = result.map_err(|error| StoreError::from_io("scanning the CommitLog", &error))?;
    let end = scan_end.end;
    assert!(
        end >= safe,
        "the scan from {safe} ended before it, at {end}"
    );
    let mut cut = match scan_end.stop {
        ScanStop::CleanEnd => "the log ended cleanly there".to_string(),
        ScanStop::Invalid(why) => {
            tracing::warn!(
                "CommitLog ends at {end}: invalid record ({why}); the rest is discarded as never \
                 acknowledged"
            );
            format!("cut the torn tail after it (invalid record: {why})")
        }
        ScanStop::Inconsistent(why) => {
            return Err(StoreError::Corrupt(format!(
                "CommitLog record at {end} was written whole but {why}; nothing was deleted"
            )))
        }
        ScanStop::Refused(error) => return Err(error),
    };
    let io_error =
        |error: std::io::Error| StoreError::from_io("cutting the CommitLog tail", &error);
    let removed = cut_log_at(shared, end).await.map_err(io_error)?;
    if removed > 0 {
        cut.push_str(&format!(", removed {removed} later segment(s)"));
    }
    SegmentSet::sync_range(&shared.log.segments, safe, end)
        .await
        .map_err(io_error)?;
    Ok(Recovered {
        end,
        records: recovered,
        cut,
    })
}

/// Cuts the CommitLog at `end`, a record boundary: removes every later segment and zeroes
/// (and syncs) the rest of `end`'s segment, so nothing past it can be read or scanned as a
/// record again. Returns how many segments it removed. Recovery cuts a torn tail with it,
/// a replica's truncation the records its master does not have (`replica_cut.rs`).
pub(crate) async fn cut_log_at(shared: &Shared, end: u64) -> std::io::Result<usize> {
    let segments = &shared.log.segments;
    let size = shared.log.segment_size();
    let end_segment = segments.borrow().start_of(end);
    let before = segments.borrow().starts().len();
    segments.borrow_mut().remove_from(end_segment + size)?;
    let removed = before - segments.borrow().starts().len();
    SegmentSet::zero_tail(segments, end).await?;
    Ok(removed)
}

/// Dispatches the valid record at `phys` again (`dispatch.rs`, as the appender did). A record whose
/// topic or queue id today's rules refuse, or whose queue offset does not continue its
/// queue, is corruption naming the offset; an I/O error creating its queue stays one.
fn redispatch(shared: &Shared, phys: u64, view: &RecordView<'_>) -> Result<(), StoreError> {
    let queue = queue_for(shared, view.topic, view.queue_id).map_err(|error| match error {
        StoreError::MessageIllegal(why) => StoreError::Corrupt(format!(
            "CommitLog record at {phys} (valid CRC32C) cannot be dispatched: topic {:?} queue \
             {}: {why}; nothing was deleted",
            view.topic, view.queue_id
        )),
        StoreError::Io(why) => StoreError::Io(format!(
            "dispatching CommitLog record at {phys}: {why}; nothing was deleted"
        )),
        StoreError::DiskFull(why) => StoreError::DiskFull(format!(
            "dispatching CommitLog record at {phys}: {why}; nothing was deleted"
        )),
        other => other,
    })?;
    let record = DispatchRecord::from_view(LogPos::new(phys), view).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "CommitLog record at {phys} cannot be dispatched: its queue offset {} is \
             negative; nothing was deleted",
            view.queue_offset
        ))
    })?;
    // A duplicate is a record the queue kept from before the crash: dispatch is
    // idempotent, and the index skips what it holds.
    let dispatched = dispatch_record(shared, &queue, &record).map_err(|why| {
        StoreError::Corrupt(format!(
            "CommitLog record at {phys} cannot be dispatched: {why}; nothing was deleted"
        ))
    })?;
    dispatched
        .indexed
        .map(|_| ())
        .map_err(|error| StoreError::from_io("indexing a re-dispatched record", &error))
}

/// Loads every `consumequeue/<topic>/<queueId>` directory.
async fn load_queues(
    disk: &Rc<dyn Disk>,
    root: &Path,
    config: &StoreConfig,
    cut: Option<u64>,
) -> Result<QueueMap, StoreError> {
    let io_error = |error: std::io::Error| StoreError::from_io("loading consume queues", &error);
    disk.create_dir_all(root).map_err(io_error)?;
    let mut queues = QueueMap::new();
    for topic_name in disk.list_dir(root).map_err(io_error)? {
        if topic::validate_topic(&topic_name).is_err() {
            tracing::warn!(
                "ignoring {}: not a topic name",
                root.join(&topic_name).display()
            );
            continue;
        }
        let topic_dir = root.join(&topic_name);
        for queue_name in disk.list_dir(&topic_dir).map_err(io_error)? {
            let Ok(queue_id) = queue_name.parse::<i32>() else {
                tracing::warn!(
                    "ignoring {}: not a queue id",
                    topic_dir.join(&queue_name).display()
                );
                continue;
            };
            let queue = ConsumeQueue::load(
                disk.clone(),
                &topic_dir.join(&queue_name),
                &topic_name,
                queue_id,
                config.consume_queue_entries_per_file,
                cut.map(LogPos::new),
            )
            .await
            .map_err(io_error)?;
            queues
                .entry(topic_name.clone())
                .or_default()
                .insert(queue_id, Rc::new(queue));
        }
    }
    Ok(queues)
}

/// The queue of (topic, queue id), created empty on first use.
pub(crate) fn queue_for(
    shared: &Shared,
    topic_name: &str,
    queue_id: i32,
) -> Result<Rc<ConsumeQueue>, StoreError> {
    if let Some(queue) = shared.queue(topic_name, queue_id) {
        return Ok(queue);
    }
    topic::validate_topic(topic_name)
        .map_err(|error| StoreError::MessageIllegal(error.to_string()))?;
    if queue_id < 0 {
        return Err(StoreError::MessageIllegal(format!(
            "queue id {queue_id} is negative"
        )));
    }
    let dir = shared
        .config
        .dir
        .join(CONSUME_QUEUE_DIR)
        .join(topic_name)
        .join(queue_id.to_string());
    let queue = ConsumeQueue::new_empty(
        shared.disk.clone(),
        &dir,
        topic_name,
        queue_id,
        shared.config.consume_queue_entries_per_file,
    )
    .map_err(|error| StoreError::from_io("creating a consume queue", &error))?;
    let queue = Rc::new(queue);
    shared
        .queues
        .borrow_mut()
        .entry(topic_name.to_string())
        .or_default()
        .insert(queue_id, queue.clone());
    Ok(queue)
}

/// Takes the store's exclusive lock on `<dir>/lock` through the disk seam, for as long as
/// the returned lock lives: a second store on the same directory is refused.
fn lock_directory(disk: &dyn Disk, dir: &Path) -> Result<FileLock, StoreError> {
    disk.lock(&dir.join(LOCK_FILE)).map_err(|error| {
        if error.kind() == std::io::ErrorKind::WouldBlock {
            StoreError::Locked(dir.display().to_string())
        } else {
            StoreError::from_io("locking the store directory", &error)
        }
    })
}
