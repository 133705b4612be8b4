//! Retention: expiring CommitLog segments, and the ConsumeQueue and index files below
//! them, and refusing writes while the disk is nearly full (reference §7, part 2 §4.3),
//! keeping what retention holds (protected consumer groups) still need.
//!
//! The cleaner runs every `cleanResourceInterval`. Each run:
//! 1. Measures the disk (`Disk::space`). At `diskSpaceWarningLevelRatio` or above, puts
//!    are refused (SERVICE_NOT_AVAILABLE, naming the ratio) until a run finds it below.
//! 2. Decides ([`decide`]): delete if the hour (UTC) is one of `deleteWhen`, or usage is at
//!    `diskMaxUsedSpaceRatio` or above; delete even unexpired segments at
//!    `diskSpaceCleanForciblyRatio` or above.
//! 3. Asks every registered holder for its holds (`retention_holds.rs`) and resolves each
//!    to the physical offset of the first record it still needs; the lowest is the floor.
//! 4. Takes segments oldest first, at most `deleteFileBatchMax`, stopping at the first that
//!    may not go, so the log never has a hole ([`plan`]): never the active segment, never
//!    one that reaches past the checkpoint's safe offset (recovery starts there), and,
//!    unless forced, only expired ones, and none that ends after the floor. A closed
//!    segment expires `fileReservedTime` after the store time of the first record of the
//!    segment after it (when it stopped being written), not its file's mtime, which a
//!    rewrite would refresh. The segments the floor alone kept are counted
//!    ([`RetentionStats::segments_kept_for_holds`], a gauge of the last run that decided
//!    to delete).
//! 5. Moves every ConsumeQueue's minimum past the entries below the new log start, one
//!    queue per turn of the shard (the segments are all still there meanwhile, so a
//!    reader never meets a missing one); then, with no await in between, moves the log's
//!    start and drops the index files wholly below it; then unlinks the files off the
//!    shard's thread. A pull below a queue's new minimum is answered PULL_OFFSET_MOVED by
//!    the pull path; committed offsets are left as they are.
//! 6. A forced run ignores the floor: each hold whose queue minimum moved past where it
//!    held from is logged (holder, topic, queue, the offsets lost), counted
//!    ([`RetentionStats::messages_lost_from_holds`]) and reported to its holder.
//!
//! With no holder registered (no `retentionProtectedGroups`) the floor never exists and
//! retention is RocketMQ's, blind to consumers.
//!
//! A crash anywhere in a run leaves a store that opens consistently: opening trims every
//! queue and the index to the log's first segment the same way (`recovery.rs`).

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use super::position::{micros_u64, to_u64, to_u8, LogPos};
use super::record::{store_timestamp_pos, MAGIC_POS, MAGIC_V1, MAGIC_V2, SYSFLAG_POS};
use super::retention_holds::{self, Resolved};
use super::watch::panic_point;
use super::{Shared, StoreError, StoreTask};

/// The retention settings of one store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// `fileReservedTime`: how long a closed segment is kept.
    pub file_reserved: Duration,
    /// `deleteWhen`: the hours of the day (UTC) expired segments are deleted in.
    pub delete_when: Vec<u8>,
    /// `diskMaxUsedSpaceRatio`: at this usage, expired segments go at any hour.
    pub max_used_percent: u8,
    /// `diskSpaceCleanForciblyRatio`: at this usage, the oldest segments go even unexpired.
    pub clean_forcibly_percent: u8,
    /// `diskSpaceWarningLevelRatio`: at this usage, puts are refused.
    pub warning_percent: u8,
    /// `deleteFileBatchMax`: most segments one run deletes.
    pub delete_batch_max: usize,
    /// `cleanResourceInterval`: how often the cleaner runs.
    pub clean_interval: Duration,
}

/// A retention setting out of its range, named by its RocketMQ key (the text operators
/// see when a start is refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetentionConfigError {
    NoDeleteBatch,
    NoCleanInterval,
    BadHour(u8),
    BadPercent { key: &'static str, percent: u8 },
}

impl std::fmt::Display for RetentionConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetentionConfigError::NoDeleteBatch => {
                write!(f, "deleteFileBatchMax: must be at least 1")
            }
            RetentionConfigError::NoCleanInterval => {
                write!(f, "cleanResourceInterval: must be at least 1 ms")
            }
            RetentionConfigError::BadHour(hour) => {
                write!(f, "deleteWhen: hour {hour} is not one of 00 to 23")
            }
            RetentionConfigError::BadPercent { key, percent } => {
                write!(f, "{key}: {percent} is not a percentage from 1 to 100")
            }
        }
    }
}

impl std::error::Error for RetentionConfigError {}

/// For the store config's validation, which reports every setting as text.
impl From<RetentionConfigError> for String {
    fn from(error: RetentionConfigError) -> String {
        error.to_string()
    }
}

impl RetentionConfig {
    pub fn validate(&self) -> Result<(), RetentionConfigError> {
        if self.delete_batch_max == 0 {
            return Err(RetentionConfigError::NoDeleteBatch);
        }
        if self.clean_interval.is_zero() {
            return Err(RetentionConfigError::NoCleanInterval);
        }
        if let Some(&hour) = self.delete_when.iter().find(|&&hour| hour > 23) {
            return Err(RetentionConfigError::BadHour(hour));
        }
        for (key, percent) in [
            ("diskMaxUsedSpaceRatio", self.max_used_percent),
            ("diskSpaceCleanForciblyRatio", self.clean_forcibly_percent),
            ("diskSpaceWarningLevelRatio", self.warning_percent),
        ] {
            if !(1..=100).contains(&percent) {
                return Err(RetentionConfigError::BadPercent { key, percent });
            }
        }
        Ok(())
    }
}

/// What one run does, decided from the hour and the disk usage alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Delete expired segments.
    pub delete: bool,
    /// Delete the oldest segments whether expired or not.
    pub forced: bool,
    /// Refuse puts until a later run finds the disk below the warning ratio.
    pub refuse_writes: bool,
}

/// The cleaner's decision at `hour` (0-23, UTC) with the disk `used_percent` full.
pub fn decide(config: &RetentionConfig, hour: u8, used_percent: u8) -> Decision {
    let forced = used_percent >= config.clean_forcibly_percent;
    Decision {
        delete: forced
            || used_percent >= config.max_used_percent
            || config.delete_when.contains(&hour),
        forced,
        refuse_writes: used_percent >= config.warning_percent,
    }
}

/// The hour of the day (UTC) at `now_ms`.
pub fn hour_of(now_ms: i64) -> u8 {
    to_u8(now_ms.rem_euclid(86_400_000) / 3_600_000)
}

/// What one run deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub segments: usize,
    pub bytes: u64,
    pub queue_files: usize,
    pub index_files: usize,
    /// The log's first offset after the run.
    pub log_start: u64,
    pub used_percent: u8,
    /// Segments this run would have deleted but kept because a hold still needs them.
    pub kept_for_holds: usize,
    /// Messages this (forced) run deleted that a hold still needed.
    pub lost_from_holds: u64,
    /// The longest the run held the shard's thread in one step (one queue's trim, or
    /// moving the log start and the index; the unlinks run elsewhere), in µs.
    pub longest_step_micros: u64,
}

/// Counters of everything the cleaner did, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionStats {
    pub segments_deleted: u64,
    pub bytes_deleted: u64,
    pub queue_files_deleted: u64,
    pub index_files_deleted: u64,
    pub puts_refused_for_space: u64,
    /// Usage at the last run, percent.
    pub used_percent: u8,
    /// Segments the last run that decided to delete kept only because a hold still
    /// needed them (a gauge: the same segments count again at every run).
    pub segments_kept_for_holds: u64,
    /// Messages forced runs deleted that a hold still needed, all holds together.
    pub messages_lost_from_holds: u64,
}

pub(crate) async fn run_cleaner(shared: Rc<Shared>) {
    loop {
        tokio::time::sleep(shared.config.retention.clean_interval).await;
        panic_point(&shared, StoreTask::Cleaner);
        if shared.closing.get() || shared.poisoned().is_some() {
            return;
        }
        if let Err(error) = clean(&shared).await {
            // Nothing acknowledged is at stake: the next run tries again.
            tracing::warn!("retention run failed: {error}");
        }
    }
}

/// One cleaner run (see the module docs). A run asked for while another is under way
/// (the timer's and [`super::Store::clean_now`]) does nothing and reports nothing deleted.
pub(crate) async fn clean(shared: &Shared) -> Result<CleanupReport, StoreError> {
    let Ok(_cleaning) = shared.cleaning.try_lock() else {
        return Ok(CleanupReport {
            log_start: shared.log_start(),
            ..CleanupReport::default()
        });
    };
    clean_exclusively(shared).await
}

async fn clean_exclusively(shared: &Shared) -> Result<CleanupReport, StoreError> {
    let config = &shared.config.retention;
    let dir = &shared.config.dir;
    let used_percent = shared
        .disk
        .space(dir)
        .map_err(|error| StoreError::from_io("measuring the disk", &error))?
        .used_percent();
    let now = shared.clock.now_ms();
    let decision = decide(config, hour_of(now), used_percent);
    set_space_refusal(shared, decision.refuse_writes, used_percent);
    shared.update_retention(|stats| stats.used_percent = used_percent);
    let mut report = CleanupReport {
        used_percent,
        log_start: shared.log_start(),
        ..CleanupReport::default()
    };
    if !decision.delete {
        return Ok(report);
    }
    let holders = shared.retention_holds.borrow().clone();
    let held = retention_holds::resolve(&holders, |topic, queue_id| shared.queue(topic, queue_id))
        .map_err(|error| StoreError::from_io("reading a held queue position", &error))?;
    let floor = if decision.forced {
        None
    } else {
        retention_holds::floor(&held)
    };
    let picked = pick_segments(shared, now, decision.forced, floor)?;
    report_kept(shared, &held, picked.kept_for_holds);
    report.kept_for_holds = picked.kept_for_holds;
    let doomed = picked.doomed;
    let Some(&last) = doomed.last() else {
        return Ok(report);
    };
    let size = shared.log.segment_size();
    let log_start = last + size;
    let mut paths: Vec<PathBuf> = Vec::new();
    let trimming = trim_queues(shared, log_start, &mut report, &mut paths).await?;
    if decision.forced {
        report.lost_from_holds = report_losses(&held, used_percent, config);
    } else {
        assert_holds_kept(&held, floor, log_start);
    }
    let detaching = detach_log_and_index(shared, log_start, &mut report, &mut paths);
    report.longest_step_micros = micros_u64(trimming.max(detaching));
    tracing::info!(
        "retention: deleting {} CommitLog segments ({} bytes) below {log_start}, {} queue \
         files, {} index files (disk {used_percent}% used{})",
        report.segments,
        report.bytes,
        report.queue_files,
        report.index_files,
        if decision.forced { ", forced" } else { "" }
    );
    delete_files(shared, &paths).await?;
    shared.update_retention(|stats| {
        stats.segments_deleted += to_u64(report.segments);
        stats.bytes_deleted += report.bytes;
        stats.queue_files_deleted += to_u64(report.queue_files);
        stats.index_files_deleted += to_u64(report.index_files);
        stats.messages_lost_from_holds += report.lost_from_holds;
    });
    Ok(report)
}

/// First the queues' minimums, one queue per turn of the shard, while the segments are
/// all still there: a reader meanwhile reads below a minimum not yet moved from a
/// segment that still exists. Adds the queue files now wholly below `log_start` to
/// `paths`; returns the longest step.
async fn trim_queues(
    shared: &Shared,
    log_start: u64,
    report: &mut CleanupReport,
    paths: &mut Vec<PathBuf>,
) -> Result<Duration, StoreError> {
    let mut longest_step = Duration::ZERO;
    for queue in shared.all_queues() {
        let began = std::time::Instant::now();
        let removed = queue
            .trim_below(LogPos::new(log_start))
            .map_err(|error| StoreError::from_io("trimming a consume queue", &error))?;
        longest_step = longest_step.max(began.elapsed());
        report.queue_files += removed.len();
        paths.extend(removed);
        tokio::task::yield_now().await;
    }
    Ok(longest_step)
}

/// An unforced run never trims a queue past where a hold keeps it.
fn assert_holds_kept(held: &[Resolved], floor: Option<u64>, log_start: u64) {
    for held in held {
        let min = held.queue.min_offset();
        assert!(
            min <= held.from,
            "an unforced run trimmed {}/{} to {min}, past {} it holds from {} (floor \
             {floor:?}, log start {log_start})",
            held.hold.topic,
            held.hold.queue_id,
            held.hold.holder,
            held.from
        );
    }
}

/// Then, with no await in between, the log start and the index: every queue already
/// starts at or past it. Adds the segments and index files below `log_start` to `paths`
/// and the report; returns how long it took.
fn detach_log_and_index(
    shared: &Shared,
    log_start: u64,
    report: &mut CleanupReport,
    paths: &mut Vec<PathBuf>,
) -> Duration {
    let began = std::time::Instant::now();
    let segment_paths = shared.log.segments.borrow_mut().detach_below(log_start);
    if let Some(index) = &shared.index {
        let removed = index.detach_below(log_start);
        report.index_files += removed.len();
        paths.extend(removed);
    }
    let took = began.elapsed();
    paths.extend(segment_paths.iter().cloned());
    report.segments = segment_paths.len();
    report.bytes = to_u64(segment_paths.len()) * shared.log.segment_size();
    report.log_start = log_start;
    took
}

/// Unlinks `paths` off the shard's thread, then syncs each directory they were in.
async fn delete_files(shared: &Shared, paths: &[PathBuf]) -> Result<(), StoreError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for path in paths {
        shared
            .disk
            .remove_file_off_thread(path)
            .await
            .map_err(|error| {
                StoreError::from_io(&format!("deleting {}", path.display()), &error)
            })?;
        if let Some(parent) = path.parent() {
            if !dirs.iter().any(|dir| dir == parent) {
                dirs.push(parent.to_path_buf());
            }
        }
    }
    for dir in dirs {
        shared
            .disk
            .sync_dir(&dir)
            .map_err(|error| StoreError::from_io("syncing a directory after deletion", &error))?;
    }
    Ok(())
}

/// Sets the kept-for-holds gauge, and logs when it changes, naming the lowest hold.
fn report_kept(shared: &Shared, held: &[Resolved], kept: usize) {
    let before = shared.retention.get().segments_kept_for_holds;
    let kept = to_u64(kept);
    shared.update_retention(|stats| stats.segments_kept_for_holds = kept);
    if kept == before {
        return;
    }
    match held.iter().min_by_key(|held| held.phys) {
        Some(lowest) if kept > 0 => tracing::info!(
            "retention: keeping {kept} expired CommitLog segments from {} on: {} {} has not \
             consumed {} queue {} from offset {}",
            lowest.phys,
            lowest.holds.kind(),
            lowest.hold.holder,
            lowest.hold.topic,
            lowest.hold.queue_id,
            lowest.from
        ),
        _ => tracing::info!("retention: no segment is kept for retention holds any more"),
    }
}

/// After a forced run's trims: logs and reports every hold whose queue minimum moved past
/// where it held from; returns the messages lost, all holds together.
fn report_losses(held: &[Resolved], used_percent: u8, config: &RetentionConfig) -> u64 {
    let mut total = 0;
    for held in held {
        let new_min = held.queue.min_offset();
        let Some(lost) = retention_holds::lost_range(held.from, new_min) else {
            continue;
        };
        let messages = lost.end - lost.start;
        tracing::warn!(
            "retention: disk {used_percent}% used, at or above diskSpaceCleanForciblyRatio \
             {}%: {} {} lost {} queue {} offsets {}..{} ({messages} messages it had not \
             consumed; its offset {} is kept, the queue now starts at {new_min})",
            config.clean_forcibly_percent,
            held.holds.kind(),
            held.hold.holder,
            held.hold.topic,
            held.hold.queue_id,
            lost.start,
            lost.end,
            held.hold.queue_offset
        );
        held.holds.lost(&held.hold, messages);
        total += messages;
    }
    total
}

fn set_space_refusal(shared: &Shared, refuse: bool, used_percent: u8) {
    let mut refusal = shared.space_refusal.borrow_mut();
    let warning = shared.config.retention.warning_percent;
    match (refuse, refusal.is_some()) {
        (true, _) => {
            if refusal.is_none() {
                tracing::warn!(
                    "disk {used_percent}% used, at or above diskSpaceWarningLevelRatio \
                     {warning}%: refusing puts until space returns"
                );
            }
            *refusal = Some(format!(
                "the disk is {used_percent}% used, at or above diskSpaceWarningLevelRatio \
                 {warning}%; writes resume once cleanup brings it below"
            ));
        }
        (false, true) => {
            tracing::info!("disk {used_percent}% used, below {warning}%: accepting puts again");
            *refusal = None;
        }
        (false, false) => {}
    }
}

/// What one run takes ([`plan`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Picked {
    /// The starts of the segments to delete, oldest first.
    pub doomed: Vec<u64>,
    /// Segments after those that every other rule let go, kept because they end after the
    /// holds' floor.
    pub kept_for_holds: usize,
}

/// The rules of one run besides expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub segment_size: u64,
    /// The checkpoint's safe offset: no segment reaching past it goes.
    pub safe_offset: u64,
    pub batch_max: usize,
    /// Expiry is not asked.
    pub forced: bool,
    /// The lowest physical offset a hold still needs; `None`: no hold (or forced).
    pub floor: Option<u64>,
}

/// The segments a run deletes, oldest first, from the segment `starts` (ascending; the
/// last is the active one): it stops at the first segment that may not go, so the log
/// never has a hole. `expired(next)` says whether the segment before the one starting at
/// `next` has expired (asked only when not forced, in order). A segment that ends after
/// the floor is kept, and so is every later one; they are counted as kept for holds
/// when every other rule would have let them go (the batch limit included).
pub fn plan(
    starts: &[u64],
    limits: Limits,
    mut expired: impl FnMut(u64) -> std::io::Result<bool>,
) -> std::io::Result<Picked> {
    let mut picked = Picked::default();
    for pair in starts.windows(2) {
        let (start, next) = (pair[0], pair[1]);
        let end = start + limits.segment_size;
        if picked.doomed.len() + picked.kept_for_holds >= limits.batch_max
            || end > limits.safe_offset
        {
            break;
        }
        if !limits.forced && !expired(next)? {
            break;
        }
        if limits.floor.is_some_and(|floor| end > floor) {
            picked.kept_for_holds += 1;
        } else {
            assert!(
                picked.kept_for_holds == 0,
                "segment {start} would go after a kept one: a hole (floor {:?})",
                limits.floor
            );
            picked.doomed.push(start);
        }
    }
    Ok(picked)
}

/// The segments this run may delete (see [`plan`]).
fn pick_segments(
    shared: &Shared,
    now: i64,
    forced: bool,
    floor: Option<u64>,
) -> Result<Picked, StoreError> {
    let config = &shared.config.retention;
    let safe = shared
        .checkpoint
        .borrow()
        .as_ref()
        .and_then(|file| file.last())
        .map_or(0, |last| last.safe_offset);
    let segments = shared.log.segments.borrow();
    let limits = Limits {
        segment_size: segments.size(),
        safe_offset: safe,
        batch_max: config.delete_batch_max,
        forced,
        floor,
    };
    let reserved = i64::try_from(config.file_reserved.as_millis()).unwrap_or(i64::MAX);
    plan(&segments.starts(), limits, |next| {
        let closed_at = first_store_timestamp(&segments, next)?;
        Ok(closed_at.is_some_and(|closed| closed.saturating_add(reserved) <= now))
    })
    .map_err(|error| StoreError::from_io("reading a segment's first record", &error))
}

/// Bytes of a record's head that hold its store timestamp, whatever its born host.
const HEAD_LEN: usize = 80;

/// The store time of the record at the start of the segment at `start`, if one is there.
fn first_store_timestamp(
    segments: &super::segment::SegmentSet,
    start: u64,
) -> std::io::Result<Option<i64>> {
    let mut head = [0u8; HEAD_LEN];
    segments.read_exact(start, &mut head)?;
    let be_i32 = |at: usize| i32::from_be_bytes(head[at..at + 4].try_into().expect("4"));
    let magic = be_i32(MAGIC_POS);
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Ok(None);
    }
    let at = store_timestamp_pos(be_i32(SYSFLAG_POS));
    assert!(
        at + 8 <= HEAD_LEN,
        "a store timestamp at {at} past the {HEAD_LEN}-byte head"
    );
    Ok(Some(i64::from_be_bytes(
        head[at..at + 8].try_into().expect("8"),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RetentionConfig {
        RetentionConfig {
            file_reserved: Duration::from_secs(72 * 3600),
            delete_when: vec![4],
            max_used_percent: 75,
            clean_forcibly_percent: 85,
            warning_percent: 90,
            delete_batch_max: 10,
            clean_interval: Duration::from_secs(10),
        }
    }

    #[test]
    fn decisions_follow_the_hour_and_the_ratios() {
        let config = config();
        let none = Decision {
            delete: false,
            forced: false,
            refuse_writes: false,
        };
        assert_eq!(decide(&config, 3, 10), none);
        assert_eq!(
            decide(&config, 4, 10),
            Decision {
                delete: true,
                ..none
            }
        );
        assert_eq!(
            decide(&config, 3, 75),
            Decision {
                delete: true,
                ..none
            }
        );
        assert_eq!(
            decide(&config, 3, 85),
            Decision {
                delete: true,
                forced: true,
                refuse_writes: false
            }
        );
        assert_eq!(
            decide(&config, 3, 90),
            Decision {
                delete: true,
                forced: true,
                refuse_writes: true
            }
        );
    }

    const SIZE: u64 = 100;

    fn limits(floor: Option<u64>) -> Limits {
        Limits {
            segment_size: SIZE,
            safe_offset: 1_000,
            batch_max: 10,
            forced: false,
            floor,
        }
    }

    /// Segments at 0, 100, ... 500; the one at 500 is active.
    fn starts() -> Vec<u64> {
        (0..6).map(|n| n * SIZE).collect()
    }

    fn all_expired(_: u64) -> std::io::Result<bool> {
        Ok(true)
    }

    #[test]
    fn without_holds_every_expired_closed_segment_goes_never_the_active_one() {
        let picked = plan(&starts(), limits(None), all_expired).unwrap();
        assert_eq!(picked.doomed, vec![0, 100, 200, 300, 400]);
        assert_eq!(picked.kept_for_holds, 0);
    }

    #[test]
    fn segments_ending_after_the_floor_are_kept_and_counted() {
        // The floor inside the segment at 200: it and the later closed ones stay.
        let picked = plan(&starts(), limits(Some(250)), all_expired).unwrap();
        assert_eq!(picked.doomed, vec![0, 100]);
        assert_eq!(picked.kept_for_holds, 3);
        // A floor at a segment's start keeps that segment, not the one ending there.
        let picked = plan(&starts(), limits(Some(200)), all_expired).unwrap();
        assert_eq!(picked.doomed, vec![0, 100]);
        // A floor at the first record keeps everything.
        let picked = plan(&starts(), limits(Some(0)), all_expired).unwrap();
        assert_eq!(
            picked,
            Picked {
                doomed: vec![],
                kept_for_holds: 5
            }
        );
        // A floor in the active segment keeps nothing closed.
        let picked = plan(&starts(), limits(Some(520)), all_expired).unwrap();
        assert_eq!(picked.doomed.len(), 5);
        assert_eq!(picked.kept_for_holds, 0);
    }

    #[test]
    fn only_what_the_other_rules_let_go_counts_as_kept_for_holds() {
        // Expired only up to the segment at 300: the floor keeps 200, not 300 or 400.
        let expired = |next: u64| Ok(next <= 300);
        let picked = plan(&starts(), limits(Some(250)), expired).unwrap();
        assert_eq!(
            picked,
            Picked {
                doomed: vec![0, 100],
                kept_for_holds: 1
            }
        );
        // The safe offset stops at 300.
        let picked = plan(
            &starts(),
            Limits {
                safe_offset: 300,
                ..limits(Some(150))
            },
            all_expired,
        )
        .unwrap();
        assert_eq!(
            picked,
            Picked {
                doomed: vec![0],
                kept_for_holds: 2
            }
        );
        // The batch: three segments a run, kept ones included.
        let picked = plan(
            &starts(),
            Limits {
                batch_max: 3,
                ..limits(Some(150))
            },
            all_expired,
        )
        .unwrap();
        assert_eq!(
            picked,
            Picked {
                doomed: vec![0],
                kept_for_holds: 2
            }
        );
    }

    #[test]
    fn a_forced_run_takes_unexpired_segments_and_no_floor_is_given_to_it() {
        let never = |_: u64| -> std::io::Result<bool> { panic!("expiry asked when forced") };
        let picked = plan(
            &starts(),
            Limits {
                forced: true,
                ..limits(None)
            },
            never,
        )
        .unwrap();
        assert_eq!(picked.doomed, vec![0, 100, 200, 300, 400]);
        let picked = plan(&starts(), limits(Some(250)), |_| Ok(false)).unwrap();
        assert_eq!(
            picked,
            Picked::default(),
            "nothing expired: nothing kept for holds"
        );
    }

    #[test]
    fn hours_are_utc_hours_of_the_day() {
        assert_eq!(hour_of(0), 0);
        assert_eq!(hour_of(4 * 3_600_000 + 59 * 60_000), 4);
        assert_eq!(hour_of(86_400_000 + 23 * 3_600_000), 23);
        assert_eq!(hour_of(-1), 23);
    }

    #[test]
    fn bad_settings_are_refused_naming_the_key() {
        let mut bad = config();
        bad.delete_batch_max = 0;
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("deleteFileBatchMax"));
        let mut bad = config();
        bad.warning_percent = 0;
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("diskSpaceWarningLevelRatio"));
        let mut bad = config();
        bad.delete_when = vec![24];
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("deleteWhen"));
        config().validate().unwrap();
    }
}
