//! Conformance tests every `Disk` backend must pass, plus backend-specific tests: io_uring
//! concurrency and cancellation, and the sim's crash and fault model.

use std::future::Future;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::task::Poll;

use bytes::Bytes;
use ringmq::io::portable::PortableDisk;
use ringmq::io::sim::{SimConfig, SimDisk, WriteFate};
use ringmq::io::uring::{UringDisk, WritePath};
use ringmq::io::{read_exact_at, Disk, FileId};

/// Runs `future` on a fresh current-thread runtime inside a `LocalSet`, as a shard does.
fn run_local<F: Future>(future: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

/// The io_uring backend, or `None` (with a note) where the ring cannot be set up.
fn uring_or_skip() -> Option<UringDisk> {
    uring_or_skip_with(WritePath::default())
}

/// [`uring_or_skip`] with data writes taking `write_path`.
fn uring_or_skip_with(write_path: WritePath) -> Option<UringDisk> {
    match UringDisk::with_write_path(write_path) {
        Ok(disk) => Some(disk),
        Err(error) => {
            eprintln!("note: skipping io_uring test, the ring cannot be set up here: {error}");
            None
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

fn read_all(disk: &dyn Disk, file: FileId) -> Vec<u8> {
    let len = disk.file_len(file).unwrap() as usize;
    let mut buf = vec![0u8; len];
    read_exact_at(disk, file, 0, &mut buf).unwrap();
    buf
}

/// The behaviour every backend shares.
async fn conformance(disk: &dyn Disk, root: &Path) {
    let before = disk.stats();
    let dir = root.join("conformance");
    disk.create_dir_all(&dir.join("sub")).unwrap();
    disk.create_dir_all(&dir).unwrap(); // already there: still fine
    assert!(disk.exists(&dir));
    assert!(disk.exists(&dir.join("sub")));
    let b_path = dir.join("b.log");
    let b = allocate_write_and_read_back(disk, &b_path, before).await;
    let a_path = dir.join("a.log");
    let a = list_truncate_and_reopen(disk, &dir, &a_path, b).await;
    missing_removed_and_locked(disk, &dir, a, &a_path);
}

/// Allocating, writing inside the allocation and reading back, with the I/O counted
/// since `before`. Returns the open file.
async fn allocate_write_and_read_back(
    disk: &dyn Disk,
    b_path: &Path,
    before: ringmq::io::IoStats,
) -> FileId {
    assert!(!disk.exists(b_path));
    let b = disk.open(b_path, true).unwrap();
    assert!(disk.exists(b_path));
    assert_eq!(disk.file_len(b).unwrap(), 0);

    disk.allocate(b, 64 * 1024).await.unwrap();
    assert_eq!(disk.file_len(b).unwrap(), 65536);
    // allocate never shrinks
    disk.allocate(b, 4096).await.unwrap();
    assert_eq!(disk.file_len(b).unwrap(), 65536);

    disk.write_at(b, 0, Bytes::from_static(b"hello"))
        .await
        .unwrap();
    disk.write_at(b, 4096, Bytes::from_static(b"world!"))
        .await
        .unwrap();
    assert_eq!(
        disk.file_len(b).unwrap(),
        65536,
        "writes inside the allocation keep the length"
    );
    let mut buf = [0u8; 5];
    read_exact_at(disk, b, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    let mut buf = [0u8; 6];
    read_exact_at(disk, b, 4096, &mut buf).unwrap();
    assert_eq!(&buf, b"world!");
    let mut buf = [0xFFu8; 16];
    read_exact_at(disk, b, 5, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 16], "allocated space reads as zeros");

    disk.sync_data(b).await.unwrap();
    let after = disk.stats();
    assert_eq!(
        (
            after.writes - before.writes,
            after.bytes_written - before.bytes_written,
            after.syncs - before.syncs,
        ),
        (2, 11, 1),
        "writes, bytes written and syncs"
    );
    b
}

/// Listing, reads past the end, truncating, a large unaligned write, and reopening `b`
/// (closed after). Returns `a_path`, open.
async fn list_truncate_and_reopen(disk: &dyn Disk, dir: &Path, a_path: &Path, b: FileId) -> FileId {
    let a = disk.open(a_path, true).unwrap();
    let c = disk.open(&dir.join("c.log"), true).unwrap();
    disk.close(c);
    assert_eq!(
        disk.list_dir(dir).unwrap(),
        vec!["a.log", "b.log", "c.log", "sub"]
    );

    // Reads past the end return 0.
    let mut buf = [0u8; 8];
    assert_eq!(disk.read_at(b, 65536, &mut buf).unwrap(), 0);

    // Truncate shrinks durably; what was past it is gone.
    disk.truncate(b, 100).unwrap();
    assert_eq!(disk.file_len(b).unwrap(), 100);
    assert_eq!(disk.read_at(b, 4096, &mut buf).unwrap(), 0);

    // A 1 MiB write, unaligned, extending the file, reads back byte-identical.
    let big = pattern(1 << 20, 7);
    disk.write_at(b, 100, Bytes::from(big.clone()))
        .await
        .unwrap();
    disk.sync_data(b).await.unwrap();
    assert_eq!(disk.file_len(b).unwrap(), 100 + (1 << 20));
    let mut back = vec![0u8; 1 << 20];
    read_exact_at(disk, b, 100, &mut back).unwrap();
    assert!(back == big, "1 MiB write did not read back identically");
    let mut head = [0u8; 5];
    read_exact_at(disk, b, 0, &mut head).unwrap();
    assert_eq!(&head, b"hello");

    // Reopening sees the same bytes through a new handle.
    disk.close(b);
    let b2 = disk.open(&dir.join("b.log"), false).unwrap();
    assert_eq!(disk.file_len(b2).unwrap(), 100 + (1 << 20));
    read_exact_at(disk, b2, 100, &mut back).unwrap();
    assert!(back == big);
    disk.close(b2);
    a
}

/// Missing things, removing `a`, a closed handle, and the lock.
fn missing_removed_and_locked(disk: &dyn Disk, dir: &Path, a: FileId, a_path: &Path) {
    // Missing things are NotFound.
    let missing = disk.open(&dir.join("missing.log"), false).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    assert!(!disk.exists(&dir.join("missing.log")));
    assert_eq!(
        disk.list_dir(&dir.join("nope")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );

    disk.close(a);
    disk.remove_file(a_path).unwrap();
    assert!(!disk.exists(a_path));
    assert_eq!(
        disk.remove_file(a_path).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(disk.list_dir(dir).unwrap(), vec!["b.log", "c.log", "sub"]);
    disk.sync_dir(dir).unwrap();

    // A closed handle is rejected rather than aliasing another file.
    assert!(disk.file_len(a).is_err());

    // The lock is exclusive while held and free again once dropped.
    let lock_path = dir.join("lock");
    let held = disk.lock(&lock_path).unwrap();
    assert!(disk.exists(&lock_path), "taking the lock creates its file");
    let refused = disk.lock(&lock_path).unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::WouldBlock, "{refused}");
    drop(held);
    drop(disk.lock(&lock_path).unwrap());
}

#[test]
fn portable_conformance() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let disk = PortableDisk::new();
        assert_eq!(disk.backend_name(), "portable");
        conformance(&disk, tmp.path()).await;
    });
}

#[test]
fn uring_conformance() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let Some(disk) = uring_or_skip() else { return };
        assert_eq!(disk.backend_name(), "uring");
        conformance(&disk, tmp.path()).await;
    });
}

#[test]
fn uring_conformance_with_pwrite_writes() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let Some(disk) = uring_or_skip_with(WritePath::Inline) else {
            return;
        };
        assert_eq!(disk.write_path(), WritePath::Inline);
        conformance(&disk, tmp.path()).await;
        assert_eq!(disk.stats().mapped_writes, 0);
    });
}

#[test]
fn portable_conformance_with_pwrite_writes() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let disk = PortableDisk::with_data_writes(ringmq::io::DataWrites::Pwrite);
        conformance(&disk, tmp.path()).await;
        assert_eq!(disk.stats().mapped_writes, 0);
    });
}

/// Mapped writes (the default on both real backends): only inside the bytes `allocate`
/// reserved, visible at once to other readers of the file, and never past its end after
/// a truncate, through whichever handle truncated it.
async fn mapped_writes_stay_inside_the_reserved_bytes(disk: &dyn Disk, root: &Path) {
    let path = root.join("mapped.log");
    let file = disk.open(&path, true).unwrap();
    let mapped = |disk: &dyn Disk| disk.stats().mapped_writes;

    // Not reserved yet: an extending write is a pwrite.
    disk.write_at(file, 0, Bytes::from_static(b"head"))
        .await
        .unwrap();
    assert_eq!(mapped(disk), 0, "a write past the end cannot be mapped");

    disk.allocate(file, 64 * 1024).await.unwrap();
    for (i, offset) in [4u64, 4096 + 17, 60_000].into_iter().enumerate() {
        let data = Bytes::from(pattern(1000, i as u8));
        disk.write_at(file, offset, data).await.unwrap();
    }
    assert_eq!(
        mapped(disk),
        3,
        "writes inside the reservation go through the mapping"
    );
    // Another handle (a plain pread) sees the bytes without any sync.
    let plain = std::fs::File::open(&path).unwrap();
    let mut seen = vec![0u8; 1000];
    std::os::unix::fs::FileExt::read_exact_at(&plain, &mut seen, 4096 + 17).unwrap();
    assert!(
        seen == pattern(1000, 1),
        "a mapped write is in the page cache at once"
    );

    // Straddling the reserved end: the whole write is a pwrite, and extends the file.
    disk.write_at(file, 65_000, Bytes::from(pattern(1000, 9)))
        .await
        .unwrap();
    assert_eq!(mapped(disk), 3);
    assert_eq!(disk.file_len(file).unwrap(), 66_000);

    // Reserved further: the new bytes are mapped too.
    disk.allocate(file, 128 * 1024).await.unwrap();
    disk.write_at(file, 100_000, Bytes::from(pattern(1000, 5)))
        .await
        .unwrap();
    assert_eq!(mapped(disk), 4, "the mapping follows the file as it grows");

    assert_eq!(maps_of(&path), 1, "the file is mapped while written");
    let other = truncate_while_mapped_then_finish(disk, &path, file).await;
    check_mapped_image(disk, file);
    disk.close(other);
    disk.close(file);
}

/// How many mappings of `path` the process holds.
fn maps_of(path: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.to_str().unwrap().to_owned();
    maps.lines().filter(|line| line.ends_with(&name)).count()
}

/// Truncating `file` through a second handle while it is mapped, writing on, then
/// finishing with it. Returns the second handle, open.
async fn truncate_while_mapped_then_finish(disk: &dyn Disk, path: &Path, file: FileId) -> FileId {
    let mapped = |disk: &dyn Disk| disk.stats().mapped_writes;

    // Truncated through a second handle while mapped: the first handle's mapping must
    // not outlive the bytes, or the next store past the new end would fault (SIGBUS)
    // instead of writing.
    let other = disk.open(path, false).unwrap();
    disk.truncate(other, 6000).unwrap();
    assert_eq!(
        maps_of(path),
        0,
        "truncating drops every mapping of the file"
    );
    disk.write_at(file, 4000, Bytes::from(pattern(100, 7)))
        .await
        .unwrap();
    assert_eq!(
        mapped(disk),
        5,
        "mapped again, to the new length, for the next write"
    );
    assert_eq!(maps_of(path), 1);
    disk.write_at(file, 50_000, Bytes::from(pattern(1000, 6)))
        .await
        .unwrap();
    assert_eq!(mapped(disk), 5, "past the new end: a pwrite");

    // Finished with (a full segment): no longer mapped, and still writable.
    disk.finished_writing(file);
    assert_eq!(maps_of(path), 0, "a finished file is unmapped");
    disk.write_at(file, 4100, Bytes::from(pattern(10, 2)))
        .await
        .unwrap();
    assert_eq!(mapped(disk), 6);
    assert_eq!(disk.file_len(file).unwrap(), 51_000);
    disk.sync_data(file).await.unwrap();
    other
}

/// The bytes the mapped-writes test leaves: each write where it went, nothing past the
/// truncation but what was written after it.
fn check_mapped_image(disk: &dyn Disk, file: FileId) {
    let image = read_all(disk, file);
    assert_eq!(&image[..4], b"head");
    assert!(image[4..1004] == pattern(1000, 0)[..]);
    assert!(image[4000..4100] == pattern(100, 7)[..]);
    assert!(image[4100..4110] == pattern(10, 2)[..]);
    assert!(image[4096 + 17..4096 + 1017] == pattern(1000, 1)[..]);
    assert!(
        image[6000..50_000].iter().all(|&b| b == 0),
        "truncated bytes are gone"
    );
    assert!(image[50_000..] == pattern(1000, 6)[..]);
}

#[test]
fn portable_mapped_writes_stay_inside_the_reserved_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let disk = PortableDisk::new();
        mapped_writes_stay_inside_the_reserved_bytes(&disk, tmp.path()).await;
    });
}

#[test]
fn uring_mapped_writes_stay_inside_the_reserved_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let Some(disk) = uring_or_skip() else { return };
        assert_eq!(disk.write_path(), WritePath::Mapped);
        mapped_writes_stay_inside_the_reserved_bytes(&disk, tmp.path()).await;
    });
}

#[test]
fn uring_conformance_with_ring_writes() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let Some(disk) = uring_or_skip_with(WritePath::Ring) else {
            return;
        };
        assert_eq!(disk.write_path(), WritePath::Ring);
        conformance(&disk, tmp.path()).await;
    });
}

#[test]
fn sim_conformance() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let disk = SimDisk::new(SimConfig::with_seed(1));
        assert_eq!(disk.backend_name(), "sim");
        conformance(&disk, tmp.path()).await;
        assert!(
            !tmp.path().join("conformance").exists(),
            "the sim must not touch the real disk"
        );
    });
}

#[test]
fn auto_backend_prefers_uring_when_available() {
    run_local(async {
        let disk =
            ringmq::io::open_backend(ringmq::io::IoChoice::Auto, ringmq::io::DataWrites::Mapped)
                .unwrap();
        let expected = if UringDisk::new().is_ok() {
            "uring"
        } else {
            "portable"
        };
        assert_eq!(disk.backend_name(), expected);
    });
}

#[test]
fn uring_outside_a_local_set_is_an_error_not_a_panic() {
    // No runtime at all.
    assert!(UringDisk::new().is_err());
}

#[test]
fn uring_many_concurrent_writes_all_land() {
    for write_path in [WritePath::Ring, WritePath::Inline, WritePath::Mapped] {
        uring_many_concurrent_writes_all_land_with(write_path);
    }
}

fn uring_many_concurrent_writes_all_land_with(write_path: WritePath) {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let Some(disk) = uring_or_skip_with(write_path) else {
            return;
        };
        let disk = Rc::new(disk);
        let file = disk.open(&tmp.path().join("concurrent"), true).unwrap();
        const WRITES: usize = 64;
        const SIZE: usize = 4096 + 17; // odd size: writes straddle pages
        if write_path == WritePath::Mapped {
            // Reserved first, so the writes take the mapping.
            disk.allocate(file, (WRITES * SIZE) as u64).await.unwrap();
        }
        let mut tasks = Vec::new();
        for i in 0..WRITES {
            let disk = Rc::clone(&disk);
            tasks.push(tokio::task::spawn_local(async move {
                let data = Bytes::from(pattern(SIZE, i as u8));
                disk.write_at(file, (i * SIZE) as u64, data).await
            }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        disk.sync_data(file).await.unwrap();
        let image = read_all(&*disk, file);
        assert_eq!(image.len(), WRITES * SIZE);
        for i in 0..WRITES {
            assert!(
                image[i * SIZE..(i + 1) * SIZE] == pattern(SIZE, i as u8)[..],
                "write {i} missing"
            );
        }
        assert_eq!(disk.stats().writes, WRITES as u64);
        let mapped = if write_path == WritePath::Mapped {
            WRITES as u64
        } else {
            0
        };
        assert_eq!(disk.stats().mapped_writes, mapped);
        assert_eq!(disk.stats().syncs, 1);
    });
}

#[test]
fn uring_more_writes_in_flight_than_ring_entries() {
    for write_path in [WritePath::Ring, WritePath::Inline, WritePath::Mapped] {
        uring_more_writes_in_flight_than_ring_entries_with(write_path);
    }
}

fn uring_more_writes_in_flight_than_ring_entries_with(write_path: WritePath) {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        let Some(disk) = uring_or_skip_with(write_path) else {
            return;
        };
        let file = disk.open(&tmp.path().join("many"), true).unwrap();
        // Build 600 futures first and poll them together: more SQEs than the ring holds.
        let futures: Vec<_> = (0..600u64)
            .map(|i| disk.write_at(file, i * 8, Bytes::copy_from_slice(&i.to_le_bytes())))
            .collect();
        for result in join_all(futures).await {
            result.unwrap();
        }
        let image = read_all(&disk, file);
        for i in 0..600u64 {
            assert_eq!(
                image[(i * 8) as usize..(i * 8 + 8) as usize],
                i.to_le_bytes()
            );
        }
    });
}

#[test]
fn uring_dropped_in_flight_write_is_harmless() {
    let tmp = tempfile::tempdir().unwrap();
    run_local(async {
        // Only ring writes can be in flight when their future is dropped.
        let Some(disk) = uring_or_skip_with(WritePath::Ring) else {
            return;
        };
        let file = disk.open(&tmp.path().join("dropped"), true).unwrap();
        let big = Bytes::from(pattern(8 << 20, 3));
        let mut in_flight = disk.write_at(file, 0, big.clone());
        // Poll once so the SQE is submitted, then drop the future while (likely) in flight.
        std::future::poll_fn(|cx| {
            let _ = in_flight.as_mut().poll(cx);
            Poll::Ready(())
        })
        .await;
        drop(in_flight);
        drop(big);
        // Closing the file mid-flight is allowed too: the op keeps its fd open.
        disk.close(file);

        let file = disk.open(&tmp.path().join("dropped"), false).unwrap();
        disk.write_at(file, 0, Bytes::from_static(b"after"))
            .await
            .unwrap();
        disk.sync_data(file).await.unwrap();
        let mut head = [0u8; 5];
        read_exact_at(&disk, file, 0, &mut head).unwrap();
        assert_eq!(&head, b"after");
        // Dropping the disk waits for the abandoned op before freeing its buffer.
        drop(disk);
    });
}

/// Polls all futures concurrently (no `futures` crate in the dependency set).
async fn join_all<T>(mut futures: Vec<ringmq::io::IoFuture<T>>) -> Vec<io::Result<T>> {
    let mut results: Vec<Option<io::Result<T>>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, result) in futures.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *result = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(Option::unwrap).collect()
}

// ---- the sim's crash and fault model ----

const SECTOR: usize = 512;

fn sim(seed: u64) -> SimDisk {
    let mut config = SimConfig::with_seed(seed);
    config.sector_size = SECTOR;
    SimDisk::new(config)
}

fn power_loss(error: &io::Error) -> bool {
    error.to_string().contains("simulated power loss")
}

#[test]
fn sim_synced_writes_survive_a_crash_byte_identical() {
    run_local(async {
        let disk = sim(42);
        disk.create_dir_all(Path::new("/data")).unwrap();
        let path = Path::new("/data/seg");
        let file = disk.open(path, true).unwrap();
        disk.sync_dir(Path::new("/data")).unwrap();
        let synced = pattern(10_000, 1);
        disk.write_at(file, 0, Bytes::from(synced.clone()))
            .await
            .unwrap();
        disk.sync_data(file).await.unwrap();
        disk.crash_now();
        assert!(disk.is_crashed());
        let error = disk
            .write_at(file, 0, Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(power_loss(&error), "{error}");
        // Reads of a crashed disk still see the page cache.
        assert_eq!(read_all(&disk, file), synced);
        disk.restart();
        assert!(!disk.is_crashed());
        let file = disk.open(path, false).unwrap();
        assert_eq!(read_all(&disk, file), synced);
        assert!(disk.last_restart().is_empty());
    });
}

/// Writes a synced base image then 64 unsynced 8-sector writes, crashes and restarts.
/// Returns (base image, unsynced writes as (offset, data), image after restart).
async fn crash_with_unsynced_writes(disk: &SimDisk) -> (Vec<u8>, Vec<(usize, Vec<u8>)>, Vec<u8>) {
    let path = Path::new("/seg");
    let file = disk.open(path, true).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let base = vec![0xAAu8; 64 * 8 * SECTOR];
    disk.write_at(file, 0, Bytes::from(base.clone()))
        .await
        .unwrap();
    disk.sync_data(file).await.unwrap();
    let mut writes = Vec::new();
    for i in 0..64usize {
        let data = pattern(8 * SECTOR, i as u8 | 0x40); // never a run of 0xAA sectors
        let offset = i * 8 * SECTOR;
        disk.write_at(file, offset as u64, Bytes::from(data.clone()))
            .await
            .unwrap();
        writes.push((offset, data));
    }
    // One more unsynced write that extends the file.
    disk.write_at(
        file,
        base.len() as u64,
        Bytes::from(vec![0x55u8; 3 * SECTOR]),
    )
    .await
    .unwrap();
    disk.crash_now();
    disk.restart();
    let file = disk.open(path, false).unwrap();
    let image = read_all(disk, file);
    (base, writes, image)
}

#[test]
fn sim_unsynced_writes_are_kept_dropped_or_torn_at_sector_granularity() {
    run_local(async {
        let disk = sim(7);
        let (base, writes, image) = crash_with_unsynced_writes(&disk).await;
        let fates = disk.last_restart();
        assert_eq!(fates.len(), writes.len() + 1);
        let (mut kept, mut dropped, mut torn) = (0, 0, 0);
        for ((offset, data), fate) in writes.iter().zip(&fates) {
            assert_eq!((fate.offset as usize, fate.len), (*offset, data.len()));
            let mut sectors_new = Vec::new();
            for s in 0..data.len() / SECTOR {
                let at = offset + s * SECTOR;
                let got = &image[at..at + SECTOR];
                let is_new = got == &data[s * SECTOR..(s + 1) * SECTOR];
                let is_old = got == &base[at..at + SECTOR];
                assert!(
                    is_new || is_old,
                    "sector at {at} is neither old nor new content"
                );
                sectors_new.push(is_new);
            }
            match &fate.fate {
                WriteFate::Kept => {
                    kept += 1;
                    assert!(sectors_new.iter().all(|&new| new));
                }
                WriteFate::Dropped => {
                    dropped += 1;
                    assert!(sectors_new.iter().all(|&new| !new));
                }
                WriteFate::Torn(pieces) => {
                    torn += 1;
                    assert_eq!(pieces, &sectors_new, "torn pieces must match the image");
                }
            }
        }
        assert!(
            kept > 0 && dropped > 0 && torn > 0,
            "kept {kept} dropped {dropped} torn {torn}"
        );
        // Some torn write really mixes old and new sectors.
        assert!(fates.iter().any(|f| matches!(&f.fate,
            WriteFate::Torn(p) if p.iter().any(|&k| k) && p.iter().any(|&k| !k))));

        // The extending write: the file ends at the base or at its last surviving sector.
        let tail = &image[base.len()..];
        assert!(tail.len() % SECTOR == 0 && tail.len() <= 3 * SECTOR);
        assert!(
            tail.iter().all(|&b| b == 0x55 || b == 0),
            "tail holds only new data or zero gaps"
        );
    });
}

#[test]
fn sim_unaligned_torn_writes_split_on_absolute_sector_boundaries() {
    run_local(async {
        let mut config = SimConfig::with_seed(3);
        config.keep_probability = 0.0;
        config.drop_probability = 0.0; // every unsynced write is torn
        let disk = SimDisk::new(config);
        let file = disk.open(Path::new("/f"), true).unwrap();
        disk.sync_dir(Path::new("/")).unwrap();
        disk.write_at(file, 0, Bytes::from(vec![1u8; 4 * SECTOR]))
            .await
            .unwrap();
        disk.sync_data(file).await.unwrap();
        disk.write_at(file, 100, Bytes::from(vec![2u8; 2 * SECTOR]))
            .await
            .unwrap();
        disk.restart();
        let fates = disk.last_restart();
        let WriteFate::Torn(pieces) = &fates[0].fate else {
            panic!("expected torn")
        };
        // [100, 512), [512, 1024), [1024, 1124): three pieces.
        assert_eq!(pieces.len(), 3);
        let file = disk.open(Path::new("/f"), false).unwrap();
        let image = read_all(&disk, file);
        let bounds = [(100, 512), (512, 1024), (1024, 1124)];
        for ((start, end), &kept) in bounds.iter().zip(pieces) {
            let want = if kept { 2 } else { 1 };
            assert!(image[*start..*end].iter().all(|&b| b == want));
        }
    });
}

#[test]
fn sim_same_seed_same_image() {
    run_local(async {
        let (_, _, first) = crash_with_unsynced_writes(&sim(99)).await;
        let (_, _, second) = crash_with_unsynced_writes(&sim(99)).await;
        assert!(
            first == second,
            "same seed must give the same post-restart image"
        );
        let (_, _, other) = crash_with_unsynced_writes(&sim(100)).await;
        assert!(
            first != other,
            "a different seed should (almost surely) differ"
        );
    });
}

#[test]
fn sim_crash_after_ops_fails_exactly_the_nth_data_op() {
    run_local(async {
        let disk = sim(5);
        let file = disk.open(Path::new("/log"), true).unwrap();
        disk.sync_dir(Path::new("/")).unwrap();
        let ops_before = disk.data_ops();
        disk.crash_after_ops(3);
        disk.write_at(file, 0, Bytes::from_static(b"one"))
            .await
            .unwrap(); // 1
        disk.sync_data(file).await.unwrap(); // 2
        assert!(!disk.is_crashed());
        let error = disk
            .write_at(file, 3, Bytes::from_static(b"two"))
            .await
            .unwrap_err(); // 3
        assert!(power_loss(&error), "{error}");
        assert!(disk.is_crashed());
        assert_eq!(
            read_all(&disk, file),
            b"one",
            "the failed write changed nothing"
        );
        assert!(power_loss(&disk.sync_data(file).await.unwrap_err()));
        assert!(power_loss(&disk.allocate(file, 4096).await.unwrap_err()));
        assert!(power_loss(
            &disk
                .write_at(file, 0, Bytes::from_static(b"x"))
                .await
                .unwrap_err()
        ));
        assert!(power_loss(&disk.truncate(file, 0).unwrap_err()));
        assert!(disk.open(Path::new("/new"), true).is_err());
        assert_eq!(disk.file_len(file).unwrap(), 3);
        assert_eq!(disk.data_ops() - ops_before, 6);

        disk.restart();
        let file = disk.open(Path::new("/log"), false).unwrap();
        assert_eq!(read_all(&disk, file), b"one");
        disk.write_at(file, 3, Bytes::from_static(b"two"))
            .await
            .unwrap();
        assert_eq!(read_all(&disk, file), b"onetwo");
    });
}

#[test]
fn sim_file_ids_are_stale_after_restart() {
    run_local(async {
        let disk = sim(11);
        let old = disk.open(Path::new("/a"), true).unwrap();
        disk.sync_dir(Path::new("/")).unwrap();
        disk.restart();
        let error = disk
            .write_at(old, 0, Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ESTALE));
        assert!(error
            .to_string()
            .to_lowercase()
            .contains("stale file handle"));
        assert_eq!(
            disk.file_len(old).unwrap_err().raw_os_error(),
            Some(libc::ESTALE)
        );
        let new = disk.open(Path::new("/a"), false).unwrap();
        assert_ne!(new, old, "ids are never reused across restarts");
        disk.write_at(new, 0, Bytes::from_static(b"x"))
            .await
            .unwrap();
    });
}

#[test]
fn sim_fail_next_sync_once() {
    run_local(async {
        let disk = sim(12);
        let file = disk.open(Path::new("/a"), true).unwrap();
        disk.write_at(file, 0, Bytes::from_static(b"data"))
            .await
            .unwrap();
        disk.fail_next_sync(libc::EIO);
        let error = disk.sync_data(file).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        assert_eq!(
            disk.unsynced_bytes(Path::new("/a")),
            4,
            "the failed sync synced nothing"
        );
        assert_eq!(disk.stats().syncs, 0);
        disk.sync_data(file).await.unwrap();
        assert_eq!(disk.unsynced_bytes(Path::new("/a")), 0);
        assert_eq!(disk.durable_image(Path::new("/a")).unwrap(), b"data");
        assert_eq!(disk.stats().syncs, 1);
    });
}

#[test]
fn sim_fail_next_write_once() {
    run_local(async {
        let disk = sim(13);
        let file = disk.open(Path::new("/a"), true).unwrap();
        disk.fail_next_write(libc::EIO);
        let error = disk
            .write_at(file, 0, Bytes::from_static(b"data"))
            .await
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        assert_eq!(disk.file_len(file).unwrap(), 0);
        disk.write_at(file, 0, Bytes::from_static(b"data"))
            .await
            .unwrap();
        assert_eq!(read_all(&disk, file), b"data");
        assert_eq!(disk.stats().writes, 1);
    });
}

#[test]
fn sim_capacity_gives_enospc_and_changes_nothing() {
    run_local(async {
        let disk = sim(14);
        let a = disk.open(Path::new("/a"), true).unwrap();
        let b = disk.open(Path::new("/b"), true).unwrap();
        disk.set_capacity(Some(10_000));
        disk.allocate(a, 6_000).await.unwrap();
        let error = disk.allocate(b, 5_000).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(disk.file_len(b).unwrap(), 0);
        let error = disk
            .write_at(b, 0, Bytes::from(vec![1u8; 4_001]))
            .await
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(disk.file_len(b).unwrap(), 0);
        // Exactly full is fine; overwriting inside a file never needs space.
        disk.write_at(b, 0, Bytes::from(vec![1u8; 4_000]))
            .await
            .unwrap();
        disk.write_at(a, 0, Bytes::from(vec![2u8; 6_000]))
            .await
            .unwrap();
        disk.set_capacity(None);
        disk.write_at(b, 4_000, Bytes::from(vec![1u8; 4_000]))
            .await
            .unwrap();
        assert_eq!(disk.file_len(b).unwrap(), 8_000);
    });
}

#[test]
fn sim_metadata_other_than_names_is_durable_immediately() {
    run_local(async {
        let disk = sim(15);
        disk.create_dir_all(Path::new("/d/e")).unwrap();
        let file = disk.open(Path::new("/d/e/f"), true).unwrap();
        disk.sync_dir(Path::new("/d/e")).unwrap();
        disk.allocate(file, 8192).await.unwrap();
        disk.write_at(file, 0, Bytes::from_static(b"unsynced"))
            .await
            .unwrap();
        disk.crash_now();
        disk.restart();
        assert_eq!(disk.list_dir(Path::new("/d")).unwrap(), vec!["e"]);
        let file = disk.open(Path::new("/d/e/f"), false).unwrap();
        assert_eq!(
            disk.file_len(file).unwrap(),
            8192,
            "allocation survives without a sync"
        );
        // truncate is ftruncate + fsync: it makes earlier writes durable too.
        disk.write_at(file, 0, Bytes::from_static(b"kept"))
            .await
            .unwrap();
        disk.truncate(file, 4).unwrap();
        disk.restart();
        let file = disk.open(Path::new("/d/e/f"), false).unwrap();
        assert_eq!(read_all(&disk, file), b"kept");
        // Creating a file in a missing directory fails like a real filesystem.
        assert_eq!(
            disk.open(Path::new("/nope/f"), true).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    });
}

#[test]
fn uring_inside_a_runtime_but_outside_a_local_set_is_an_error() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // tokio panics in spawn_local here; new() must turn that into an error.
    let result = runtime.block_on(async { UringDisk::new().map(|_| ()) });
    assert!(result.is_err());
}

/// Creates /d/kept (synced, dir synced) and /d/new (data synced, dir not synced),
/// crashes and returns what /d lists afterwards.
async fn create_then_crash(seed: u64) -> Vec<String> {
    let disk = sim(seed);
    disk.create_dir_all(Path::new("/d")).unwrap();
    let kept = disk.open(Path::new("/d/kept"), true).unwrap();
    disk.write_at(kept, 0, Bytes::from_static(b"k"))
        .await
        .unwrap();
    disk.sync_data(kept).await.unwrap();
    disk.sync_dir(Path::new("/d")).unwrap();
    assert!(disk.durably_named(Path::new("/d/kept")));
    let new = disk.open(Path::new("/d/new"), true).unwrap();
    disk.write_at(new, 0, Bytes::from_static(b"n"))
        .await
        .unwrap();
    disk.sync_data(new).await.unwrap();
    assert!(!disk.durably_named(Path::new("/d/new")));
    disk.crash_now();
    disk.restart();
    let kept = disk.open(Path::new("/d/kept"), false).unwrap();
    assert_eq!(read_all(&disk, kept), b"k");
    if let Ok(new) = disk.open(Path::new("/d/new"), false) {
        assert_eq!(
            read_all(&disk, new),
            b"n",
            "a surviving new file has its synced data"
        );
    }
    disk.list_dir(Path::new("/d")).unwrap()
}

#[test]
fn sim_a_file_created_without_a_directory_sync_may_be_lost_at_a_crash() {
    run_local(async {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..32 {
            seen.insert(create_then_crash(seed).await);
        }
        let lost = vec!["kept".to_string()];
        let kept = vec!["kept".to_string(), "new".to_string()];
        assert_eq!(seen, [lost, kept].into_iter().collect(), "both fates occur");
    });
}

/// Writes "old" to /d/t durably, then "new" to /d/t.tmp (synced) and renames it over
/// /d/t; syncs /d only when `sync_dir`. Returns what /d holds after a crash.
async fn rename_then_crash(seed: u64, sync_dir: bool) -> (Vec<String>, Vec<u8>) {
    let disk = sim(seed);
    disk.create_dir_all(Path::new("/d")).unwrap();
    let old = disk.open(Path::new("/d/t"), true).unwrap();
    disk.write_at(old, 0, Bytes::from_static(b"old"))
        .await
        .unwrap();
    disk.sync_data(old).await.unwrap();
    disk.sync_dir(Path::new("/d")).unwrap();
    let new = disk.open(Path::new("/d/t.tmp"), true).unwrap();
    disk.write_at(new, 0, Bytes::from_static(b"new"))
        .await
        .unwrap();
    disk.sync_data(new).await.unwrap();
    ringmq::io::meta::MetaFiles::rename(&disk, Path::new("/d/t.tmp"), Path::new("/d/t")).unwrap();
    // The handles name the files, not the paths: both still read what they wrote.
    assert_eq!(read_all(&disk, new), b"new");
    assert_eq!(read_all(&disk, old), b"old");
    if sync_dir {
        disk.sync_dir(Path::new("/d")).unwrap();
    }
    disk.crash_now();
    disk.restart();
    let file = disk.open(Path::new("/d/t"), false).unwrap();
    (
        disk.list_dir(Path::new("/d")).unwrap(),
        read_all(&disk, file),
    )
}

#[test]
fn sim_a_rename_without_a_directory_sync_may_be_undone_at_a_crash() {
    run_local(async {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..32 {
            seen.insert(rename_then_crash(seed, false).await);
        }
        let t = || vec!["t".to_string()];
        let t_and_tmp = vec!["t".to_string(), "t.tmp".to_string()];
        let expected = [
            (t(), b"old".to_vec()),       // the creation of t.tmp was lost
            (t_and_tmp, b"old".to_vec()), // t.tmp created, the rename lost
            (t(), b"new".to_vec()),       // both reached the disk
        ];
        assert_eq!(
            seen,
            expected.into_iter().collect(),
            "every fate occurs, no other"
        );
    });
}

#[test]
fn sim_a_rename_followed_by_a_directory_sync_survives_a_crash() {
    run_local(async {
        for seed in 0..8 {
            let (names, content) = rename_then_crash(seed, true).await;
            assert_eq!(names, vec!["t"], "seed {seed}");
            assert_eq!(content, b"new", "seed {seed}");
        }
    });
}

#[test]
fn sim_fail_next_read_once() {
    run_local(async {
        let disk = sim(18);
        let file = disk.open(Path::new("/a"), true).unwrap();
        disk.write_at(file, 0, Bytes::from_static(b"data"))
            .await
            .unwrap();
        disk.fail_next_read(libc::EIO);
        let mut buf = [0u8; 4];
        let error = disk.read_at(file, 0, &mut buf).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        assert_eq!(read_all(&disk, file), b"data", "only one read fails");
        disk.fail_next_read(libc::EIO);
        let error = ringmq::io::meta::MetaFiles::read_file(&disk, Path::new("/a")).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        assert_eq!(
            ringmq::io::meta::MetaFiles::read_file(&disk, Path::new("/a")).unwrap(),
            b"data"
        );
    });
}

#[test]
fn sim_a_crash_releases_locks_and_a_stale_lock_cannot_release_a_new_one() {
    let disk = sim(19);
    let path = Path::new("/lock");
    let stale = disk.lock(path).unwrap();
    disk.crash_now();
    disk.restart();
    let fresh = disk.lock(path).expect("the crashed holder's lock is gone");
    drop(stale);
    assert_eq!(
        disk.lock(path).unwrap_err().kind(),
        io::ErrorKind::WouldBlock,
        "dropping the pre-crash lock must not release the new holder's"
    );
    drop(fresh);
    disk.lock(path).unwrap();
}
