//! Sending a response's file body from the connection writer (D8).
//!
//! ```text
//!   sendfile:  [TCP_CORK] send(header bytes, MSG_MORE) ─▶ sendfile(range) ... [uncork]
//!   mmap:      writev([header bytes, range, range, ...]) from whole-segment mappings
//!              cached per shard thread (a few segments)
//!   auto:      sendfile for ranges >= AUTO_SENDFILE_MIN, mmap/writev for runs of smaller
//! ```
//!
//! `sendfile(2)` moves page-cache pages to the socket without a user-space copy; writev
//! from the mapping copies nothing into a buffer of ours either, and gathers many small
//! ranges into one call. The mmap path is also the fallback where sendfile answers
//! `EINVAL`/`ENOSYS`. The `body_send` connection setting picks the mode ([`BodySend`]).
//! Either way the bytes on the wire are exactly the file bytes.
//!
//! Invariants:
//! - Every call writes all of its bytes or fails: partial writes are resumed, and
//!   `WouldBlock` on the non-blocking socket waits for writability
//!   ([`KernelSocket::poll_write_with`], which on tokio's sockets clears the reactor's
//!   readiness correctly, and on the io_uring network path first lets the bytes queued on
//!   the ring go out).
//! - Only the connection's writer task calls this, one frame at a time, so frames never
//!   interleave.
//! - A sendfile that reports it cannot work on this file or socket switches this sender to
//!   the mmap path for the rest of the connection; the bytes already sent stay sent and the
//!   range resumes where sendfile stopped.
// Allowed here only (Cargo.toml denies it crate-wide): sendfile and writev from a segment mapping are system calls with raw pointers.
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::traffic::Traffic;
use crate::io::file_body::{BodyChunk, FileBody, FileRange};
use crate::net::{write_with, KernelSocket, WriteHalf};

/// How file bodies go out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BodySend {
    /// `sendfile(2)` for ranges of at least [`AUTO_SENDFILE_MIN`] bytes, `writev` from the
    /// mapping for runs of smaller ones. One sendfile call per small record costs more
    /// than one gathered writev of many (measured, perf/pull_bench.sh: 1 KiB records
    /// scattered over 8 queues went ~40% slower sendfile-only than mmap-only); for large
    /// ranges sendfile saves the kernel's copy into socket buffers.
    #[default]
    Auto,
    /// `sendfile(2)` for every range, falling back to `Mmap` when the kernel refuses it.
    Sendfile,
    /// `writev` from an mmap of the segment file, for every range.
    Mmap,
}

/// In `Auto` mode, the smallest range sent with sendfile.
pub const AUTO_SENDFILE_MIN: u64 = 32 * 1024;

impl BodySend {
    /// The mode as the `body_send` key spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            BodySend::Auto => "auto",
            BodySend::Sendfile => "sendfile",
            BodySend::Mmap => "mmap",
        }
    }
}

impl std::str::FromStr for BodySend {
    type Err = UnknownBodySend;
    fn from_str(text: &str) -> Result<Self, UnknownBodySend> {
        match text {
            "auto" => Ok(BodySend::Auto),
            "sendfile" => Ok(BodySend::Sendfile),
            "mmap" => Ok(BodySend::Mmap),
            other => Err(UnknownBodySend(other.to_string())),
        }
    }
}

/// A `bodySend` value that names no mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown body send mode '{0}': expected auto, sendfile or mmap")]
pub struct UnknownBodySend(pub String);

/// Logged once per process: a sendfile fallback is a property of the machine.
static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

/// The writer side of one connection: its socket's send mode and the shard's counters.
pub struct BodySender {
    mode: BodySend,
    traffic: Arc<Traffic>,
}

impl BodySender {
    /// A sender for a connection whose write half is `writer`: with `mode` on a kernel
    /// socket; on a backend without one (the simulated network) every range is written from
    /// its mapping, as [`BodySend::Mmap`] does, since there is nothing to `sendfile` to.
    pub fn new(mode: BodySend, traffic: Arc<Traffic>, writer: &dyn WriteHalf) -> BodySender {
        let mode = match writer.kernel_socket() {
            Some(_) => mode,
            None => BodySend::Mmap,
        };
        BodySender { mode, traffic }
    }

    /// The mode in effect (it can turn from `Sendfile` to `Mmap` after a refusal).
    pub fn mode(&self) -> BodySend {
        self.mode
    }

    /// Writes all of `bytes` from our buffer.
    pub async fn write_buffer(&self, writer: &mut dyn WriteHalf, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        writer.write_all(bytes).await?;
        self.traffic.add_copied(bytes.len());
        Ok(())
    }

    /// Sends `pending` (bytes already encoded, ending with this frame's header) and then
    /// `body`. Byte chunks of `body` are appended to `pending` instead of written, so the
    /// caller's batching of byte-only output goes on; on return `pending` holds only such
    /// bytes that follow the body's last file range.
    pub async fn send_body(
        &mut self,
        writer: &mut dyn WriteHalf,
        pending: &mut Vec<u8>,
        body: &FileBody,
    ) -> io::Result<()> {
        let chunks = body.chunks();
        let mut at = 0;
        while at < chunks.len() {
            match &chunks[at] {
                BodyChunk::Bytes(bytes) => {
                    pending.extend_from_slice(bytes);
                    at += 1;
                }
                BodyChunk::File(_) => {
                    // The run of file ranges starting here.
                    let run: Vec<&FileRange> = chunks[at..]
                        .iter()
                        .map_while(|chunk| match chunk {
                            BodyChunk::File(range) => Some(range),
                            BodyChunk::Bytes(_) => None,
                        })
                        .collect();
                    at += run.len();
                    self.send_files(writer, pending, &run).await?;
                    pending.clear();
                }
            }
        }
        Ok(())
    }

    /// Writes `head`, then every range: ranges of at least `sendfile_min` bytes with
    /// sendfile, runs of smaller ones with one writev from their mappings.
    async fn send_files(
        &mut self,
        writer: &mut dyn WriteHalf,
        head: &[u8],
        ranges: &[&FileRange],
    ) -> io::Result<()> {
        // Records of one queue are scattered in the log, so a pull is often one range per
        // record. Each sendfile or write ends a TCP push, and with TCP_NODELAY every one
        // would leave as its own small packet: cork the socket for the frame instead, so
        // it leaves in full segments (uncorking sends the rest at once).
        // All-small ranges go in one writev, which needs no cork.
        let min = self.sendfile_min();
        let corked = ranges.len() > 1
            && ranges.iter().any(|range| range.len >= min)
            && set_cork(writer, true).is_ok();
        let sent = self.send_ranges(writer, head, ranges).await;
        if corked {
            set_cork(writer, false)?;
        }
        sent
    }

    /// The smallest range sendfile is used for in the mode in effect (`u64::MAX`: none).
    fn sendfile_min(&self) -> u64 {
        match self.mode {
            BodySend::Sendfile => 0,
            BodySend::Auto => AUTO_SENDFILE_MIN,
            BodySend::Mmap => u64::MAX,
        }
    }

    async fn send_ranges(
        &mut self,
        writer: &mut dyn WriteHalf,
        mut head: &[u8],
        ranges: &[&FileRange],
    ) -> io::Result<()> {
        let mut at = 0;
        while at < ranges.len() {
            let range = ranges[at];
            if range.len >= self.sendfile_min() {
                // MSG_MORE holds the header back until the records follow it.
                self.send_more(writer, head).await?;
                head = &[];
                let sent = self.sendfile_range(writer, range).await?;
                if sent < range.len {
                    // Sendfile was refused (the mode is now Mmap): the rest is mapped.
                    let rest = FileRange {
                        file: range.file.clone(),
                        offset: range.offset + sent,
                        len: range.len - sent,
                    };
                    self.write_mapped(writer, &[], &[&rest]).await?;
                }
                at += 1;
            } else {
                let small = ranges[at..]
                    .iter()
                    .take_while(|range| range.len < self.sendfile_min())
                    .count();
                self.write_mapped(writer, head, &ranges[at..at + small])
                    .await?;
                head = &[];
                at += small;
            }
        }
        // Only an empty range list leaves the head unsent; send_body never passes one.
        self.send_more(writer, head).await
    }

    /// `send(2)` with `MSG_MORE` until every byte is out.
    async fn send_more(&self, writer: &mut dyn WriteHalf, mut bytes: &[u8]) -> io::Result<()> {
        let Some(stream) = writer.kernel_socket() else {
            // No kernel socket, so no MSG_MORE: a plain write.
            return self.write_buffer(writer, bytes).await;
        };
        let fd = stream.raw_fd();
        while !bytes.is_empty() {
            let result = write_with(stream, || {
                // SAFETY: `bytes` is a live slice; fd is the open socket we own.
                let sent = unsafe {
                    libc::send(
                        fd,
                        bytes.as_ptr().cast(),
                        bytes.len(),
                        libc::MSG_MORE | libc::MSG_NOSIGNAL,
                    )
                };
                if sent < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(sent as usize)
                }
            })
            .await;
            match result {
                Ok(sent) => {
                    self.traffic.add_copied(sent);
                    bytes = &bytes[sent..];
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Sendfile's the whole range; returns how much went before sendfile was refused
    /// (`range.len` when all of it went), having switched this sender to `Mmap`.
    async fn sendfile_range(
        &mut self,
        writer: &mut dyn WriteHalf,
        range: &FileRange,
    ) -> io::Result<u64> {
        let Some(stream) = writer.kernel_socket() else {
            // BodySender::new chose Mmap for such a writer, and Mmap never sendfiles.
            return Err(io::Error::other(format!(
                "sendfile of {range:?} on a connection without a kernel socket (mode {:?})",
                self.mode
            )));
        };
        let socket = stream.raw_fd();
        let file = range.file.as_raw_fd();
        let mut sent = 0u64;
        while sent < range.len {
            let result = write_with(stream, || {
                let mut offset = (range.offset + sent) as libc::off_t;
                let count = (range.len - sent) as usize;
                // SAFETY: both descriptors are open for the duration of the call (the
                // range's Arc keeps the file open; we own the socket).
                let moved = unsafe { libc::sendfile(socket, file, &mut offset, count) };
                if moved < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(moved as usize)
                }
            })
            .await
            .map(|moved| moved as u64);
            match result {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("sendfile hit the end of the file in {range:?}"),
                    ))
                }
                Ok(moved) => {
                    self.traffic.add_sendfile(moved as usize);
                    sent += moved;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if refused(&error) => {
                    if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            %error,
                            "sendfile is not usable here; pull bodies go out with writev from mmap"
                        );
                    }
                    self.mode = BodySend::Mmap;
                    return Ok(sent);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(sent)
    }

    /// Writes `head` and every range (from the cached mappings of their files) with
    /// vectored writes until all is out.
    async fn write_mapped(
        &mut self,
        writer: &mut dyn WriteHalf,
        head: &[u8],
        ranges: &[&FileRange],
    ) -> io::Result<()> {
        let maps = ranges
            .iter()
            .map(|range| SHARD_MAPS.with(|maps| maps.borrow_mut().get(&range.file)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut slices = Vec::with_capacity(maps.len() + 1);
        if !head.is_empty() {
            slices.push(IoSlice::new(head));
        }
        for (map, range) in maps.iter().zip(ranges) {
            slices.push(IoSlice::new(map.slice(range.offset, range.len)?));
        }
        let mut head_left = head.len();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let written = match writer.kernel_socket() {
                Some(socket) => write_vectored(socket, rest).await,
                None => writer.write_vectored(rest).await,
            };
            let written = match written {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                written => written?,
            };
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let from_head = written.min(head_left);
            head_left -= from_head;
            self.traffic.add_copied(from_head);
            self.traffic.add_mmap(written - from_head);
            IoSlice::advance_slices(&mut rest, written);
        }
        Ok(())
    }
}

/// One `writev` of `slices` to `socket` once it can take bytes.
async fn write_vectored(socket: &dyn KernelSocket, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    let fd = socket.raw_fd();
    let count = slices.len().min(1024) as libc::c_int;
    write_with(socket, || {
        // SAFETY: `IoSlice` is ABI-compatible with `iovec`, and the slices are live for
        // the call; fd is the open socket we own.
        let written = unsafe { libc::writev(fd, slices.as_ptr().cast(), count) };
        if written < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(written as usize)
        }
    })
    .await
}

/// Sets or clears TCP_CORK on the socket.
fn set_cork(writer: &dyn WriteHalf, on: bool) -> io::Result<()> {
    let Some(stream) = writer.kernel_socket() else {
        return Err(io::ErrorKind::Unsupported.into());
    };
    let value: libc::c_int = on.into();
    // SAFETY: a valid option pointer and length for an int option on our open socket.
    let result = unsafe {
        libc::setsockopt(
            stream.raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The errors with which sendfile says "not on this file or socket" rather than failing.
fn refused(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
    )
}

/// Whole-file mappings of the files sent from most recently. Mapping per range would
/// cost an mmap, a munmap and fresh page faults for every record; a segment mapped once
/// serves every later pull from it. Entries hold their `Arc<File>`, so a file's address
/// cannot be reused by another file while it is cached (and a segment retention removed
/// stays open until its entry is evicted).
#[derive(Default)]
struct MapCache {
    entries: Vec<(Arc<std::fs::File>, Rc<Mapping>)>,
}

/// Files mapped at once per shard thread: pulls mostly touch the few newest segments.
const MAP_CACHE_FILES: usize = 8;

thread_local! {
    /// The mappings of this shard thread, shared by all its connections: one mapping per
    /// segment however many connections pull from it (a per-connection cache would
    /// multiply mappings by connections, against `vm.max_map_count`).
    static SHARD_MAPS: std::cell::RefCell<MapCache> = std::cell::RefCell::default();
}

impl MapCache {
    fn get(&mut self, file: &Arc<std::fs::File>) -> io::Result<Rc<Mapping>> {
        if let Some(index) = self
            .entries
            .iter()
            .position(|(cached, _)| Arc::ptr_eq(cached, file))
        {
            let entry = self.entries.remove(index);
            let map = entry.1.clone();
            self.entries.insert(0, entry);
            return Ok(map);
        }
        let map = Rc::new(Mapping::new(file)?);
        self.entries.insert(0, (file.clone(), map.clone()));
        self.entries.truncate(MAP_CACHE_FILES);
        Ok(map)
    }
}

/// A read-only shared mapping of a whole file, unmapped on drop.
struct Mapping {
    base: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(file: &std::fs::File) -> io::Result<Mapping> {
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map an empty file",
            ));
        }
        // SAFETY: a fresh read-only mapping of an open file; the kernel picks the address.
        // Segments are preallocated to their full size and never shrunk while the store
        // serves them, so every mapped page exists (no SIGBUS).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { base, len })
    }

    /// `len` bytes from `offset`, which must lie within the mapping.
    fn slice(&self, offset: u64, len: u64) -> io::Result<&[u8]> {
        if offset.saturating_add(len) > self.len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "range {offset}+{len} is past the end of a {}-byte file",
                    self.len
                ),
            ));
        }
        // SAFETY: checked above to lie within the mapping, which lives as long as self.
        Ok(unsafe {
            std::slice::from_raw_parts(self.base.cast::<u8>().add(offset as usize), len as usize)
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned; nothing borrows it now.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse::<BodySend>(), Ok(BodySend::Auto));
        assert_eq!("sendfile".parse::<BodySend>(), Ok(BodySend::Sendfile));
        assert_eq!("mmap".parse::<BodySend>(), Ok(BodySend::Mmap));
        assert!("splice".parse::<BodySend>().is_err());
    }

    #[test]
    fn mappings_read_ranges_and_are_cached() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).unwrap();
        let file = Arc::new(file);
        let mut cache = MapCache::default();
        let map = cache.get(&file).unwrap();
        assert_eq!(map.slice(4097, 3000).unwrap(), &data[4097..7097]);
        assert!(map.slice(9_999, 2).is_err(), "past the end");
        assert!(Rc::ptr_eq(&map, &cache.get(&file).unwrap()), "mapped once");
        for _ in 0..MAP_CACHE_FILES {
            let other = Arc::new(tempfile::tempfile().unwrap());
            other.set_len(10).unwrap();
            cache.get(&other).unwrap();
        }
        assert_eq!(cache.entries.len(), MAP_CACHE_FILES, "bounded");
        assert!(!Rc::ptr_eq(&map, &cache.get(&file).unwrap()), "evicted");
    }

    #[test]
    fn refusals_are_recognised() {
        assert!(refused(&io::Error::from_raw_os_error(libc::EINVAL)));
        assert!(refused(&io::Error::from_raw_os_error(libc::ENOSYS)));
        assert!(!refused(&io::Error::from_raw_os_error(libc::EPIPE)));
    }
}
