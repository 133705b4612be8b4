//! Sending a response's file body from the connection writer (ARCHITECTURE D8).
//!
//! ```text
//!   sendfile mode:  send(header bytes, MSG_MORE) ─▶ sendfile(range) ─▶ sendfile(range) ...
//!   mmap mode:      mmap every range ─▶ writev([header bytes, range, range, ...])
//! ```
//!
//! `sendfile(2)` moves page-cache pages to the socket without a user-space copy; the mmap
//! path is the fallback (kernels or filesystems where sendfile answers `EINVAL`/`ENOSYS`,
//! or chosen by the `body_send` connection setting) and also avoids copying the records
//! into a buffer of ours. Either way the bytes on the wire are exactly the file bytes.
//!
//! Invariants:
//! - Every call writes all of its bytes or fails: partial writes are resumed, and
//!   `WouldBlock` on the non-blocking socket waits for writability (tokio readiness via
//!   `writable()` + `try_io`, so the reactor's readiness is cleared correctly).
//! - Only the connection's writer task calls this, one frame at a time, so frames never
//!   interleave.
//! - A sendfile that reports it cannot work on this file or socket switches this sender to
//!   the mmap path for the rest of the connection; the bytes already sent stay sent and the
//!   range resumes where sendfile stopped.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;

use super::traffic::Traffic;
use crate::io::file_body::{BodyChunk, FileBody, FileRange};

/// How file bodies go out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BodySend {
    /// `sendfile(2)`, falling back to `Mmap` when the kernel refuses it.
    #[default]
    Sendfile,
    /// `writev` from an mmap of the segment file.
    Mmap,
}

impl std::str::FromStr for BodySend {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "sendfile" => Ok(BodySend::Sendfile),
            "mmap" => Ok(BodySend::Mmap),
            other => Err(format!(
                "unknown body send mode '{other}': expected sendfile or mmap"
            )),
        }
    }
}

/// Logged once per process: a sendfile fallback is a property of the machine.
static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

/// The writer side of one connection: its socket's send mode and the shard's counters.
pub struct BodySender {
    mode: BodySend,
    traffic: Arc<Traffic>,
}

impl BodySender {
    pub fn new(mode: BodySend, traffic: Arc<Traffic>) -> BodySender {
        BodySender { mode, traffic }
    }

    /// The mode in effect (it can turn from `Sendfile` to `Mmap` after a refusal).
    pub fn mode(&self) -> BodySend {
        self.mode
    }

    /// Writes all of `bytes` from our buffer.
    pub async fn write_buffer(&self, writer: &mut OwnedWriteHalf, bytes: &[u8]) -> io::Result<()> {
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
        writer: &mut OwnedWriteHalf,
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

    /// Writes `head`, then every range, with the mode in effect.
    async fn send_files(
        &mut self,
        writer: &mut OwnedWriteHalf,
        head: &[u8],
        ranges: &[&FileRange],
    ) -> io::Result<()> {
        if self.mode == BodySend::Mmap {
            return self.write_mapped(writer, head, ranges).await;
        }
        // MSG_MORE holds the header back until the records follow it, so a pull leaves
        // in full segments even with TCP_NODELAY set.
        self.send_more(writer, head).await?;
        for (index, range) in ranges.iter().enumerate() {
            let sent = self.sendfile_range(writer, range).await?;
            if sent < range.len {
                // Sendfile was refused: the rest goes through the mmap path.
                let rest = FileRange {
                    file: range.file.clone(),
                    offset: range.offset + sent,
                    len: range.len - sent,
                };
                let mut remaining = vec![&rest];
                remaining.extend_from_slice(&ranges[index + 1..]);
                return self.write_mapped(writer, &[], &remaining).await;
            }
        }
        Ok(())
    }

    /// `send(2)` with `MSG_MORE` until every byte is out.
    async fn send_more(&self, writer: &mut OwnedWriteHalf, mut bytes: &[u8]) -> io::Result<()> {
        let stream = writer.as_ref();
        let fd = stream.as_raw_fd();
        while !bytes.is_empty() {
            stream.writable().await?;
            let result = stream.try_io(Interest::WRITABLE, || {
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
            });
            match result {
                Ok(sent) => {
                    self.traffic.add_copied(sent);
                    bytes = &bytes[sent..];
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
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
        writer: &mut OwnedWriteHalf,
        range: &FileRange,
    ) -> io::Result<u64> {
        let stream = writer.as_ref();
        let socket = stream.as_raw_fd();
        let file = range.file.as_raw_fd();
        let mut sent = 0u64;
        while sent < range.len {
            stream.writable().await?;
            let result = stream.try_io(Interest::WRITABLE, || {
                let mut offset = (range.offset + sent) as libc::off_t;
                let count = (range.len - sent) as usize;
                // SAFETY: both descriptors are open for the duration of the call (the
                // range's Arc keeps the file open; we own the socket).
                let moved = unsafe { libc::sendfile(socket, file, &mut offset, count) };
                if moved < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(moved as u64)
                }
            });
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
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
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

    /// Maps every range and writes `head` and them with vectored writes until all is out.
    async fn write_mapped(
        &self,
        writer: &mut OwnedWriteHalf,
        head: &[u8],
        ranges: &[&FileRange],
    ) -> io::Result<()> {
        let maps = ranges
            .iter()
            .map(|range| Mapping::new(range))
            .collect::<io::Result<Vec<_>>>()?;
        let mut slices = Vec::with_capacity(maps.len() + 1);
        if !head.is_empty() {
            slices.push(IoSlice::new(head));
        }
        slices.extend(maps.iter().map(|map| IoSlice::new(map.bytes())));
        let mut head_left = head.len();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let written = writer.write_vectored(rest).await?;
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

/// The errors with which sendfile says "not on this file or socket" rather than failing.
fn refused(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
    )
}

/// A read-only shared mapping of one file range, unmapped on drop.
struct Mapping {
    base: *mut libc::c_void,
    map_len: usize,
    skip: usize,
    len: usize,
}

impl Mapping {
    fn new(range: &FileRange) -> io::Result<Mapping> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        let aligned = range.offset - range.offset % page;
        let skip = (range.offset - aligned) as usize;
        let map_len = skip + range.len as usize;
        // SAFETY: a fresh read-only mapping of an open file; the kernel picks the address.
        // Segments are preallocated to their full size and never shrunk while served, so
        // the mapped pages exist (no SIGBUS).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                range.file.as_raw_fd(),
                aligned as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base,
            map_len,
            skip,
            len: range.len as usize,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping covers `skip + len` readable bytes and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.base.cast::<u8>().add(self.skip), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned; nothing borrows it now.
        unsafe {
            libc::munmap(self.base, self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("sendfile".parse::<BodySend>(), Ok(BodySend::Sendfile));
        assert_eq!("mmap".parse::<BodySend>(), Ok(BodySend::Mmap));
        assert!("splice".parse::<BodySend>().is_err());
    }

    #[test]
    fn mapping_reads_an_unaligned_range() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).unwrap();
        let range = FileRange {
            file: Arc::new(file),
            offset: 4097,
            len: 3000,
        };
        let map = Mapping::new(&range).unwrap();
        assert_eq!(map.bytes(), &data[4097..7097]);
    }

    #[test]
    fn refusals_are_recognised() {
        assert!(refused(&io::Error::from_raw_os_error(libc::EINVAL)));
        assert!(refused(&io::Error::from_raw_os_error(libc::ENOSYS)));
        assert!(!refused(&io::Error::from_raw_os_error(libc::EPIPE)));
    }
}
