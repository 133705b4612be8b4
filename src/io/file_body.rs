//! A message body that lives in files: the byte ranges a pull response sends straight
//! from the CommitLog segments (D8).
//!
//! A [`FileBody`] is an ordered list of [`BodyChunk`]s; its bytes are the chunks' bytes
//! back to back. A chunk is either a [`FileRange`] (a segment file, an offset, a length)
//! or plain [`Bytes`] (what a backend without real files, the simulator, hands out).
//!
//! Invariants:
//! - A `FileRange` keeps its file open (`Arc<File>`), so the range stays readable after the
//!   store closes or removes the segment (retention unlinks a file; an open descriptor
//!   still reads it). The store only hands out ranges of visible records, and visible
//!   CommitLog bytes are never rewritten while the store runs, so a range's bytes are
//!   fixed from the moment it is made.
//! - Everything here is `Send`: a later multi-shard node moves pull responses between
//!   shard threads over channels.
//! - This module never reads the file except in [`FileBody::copy_into`], the copying
//!   path for callers that need the bytes in memory (tools, tests).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

/// `len` bytes of `file` from `offset`.
#[derive(Clone)]
pub struct FileRange {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: u64,
}

impl fmt::Debug for FileRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::fd::AsRawFd;
        write!(
            f,
            "FileRange(fd {} @ {} +{})",
            self.file.as_raw_fd(),
            self.offset,
            self.len
        )
    }
}

/// Two ranges are equal when they name the same open file and the same bytes of it.
impl PartialEq for FileRange {
    fn eq(&self, other: &FileRange) -> bool {
        Arc::ptr_eq(&self.file, &other.file) && self.offset == other.offset && self.len == other.len
    }
}

impl Eq for FileRange {}

/// One piece of a [`FileBody`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyChunk {
    File(FileRange),
    Bytes(Bytes),
}

impl BodyChunk {
    pub fn len(&self) -> u64 {
        match self {
            BodyChunk::File(range) => range.len,
            BodyChunk::Bytes(bytes) => bytes.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bytes to send that mostly live in files. Empty by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileBody {
    chunks: Vec<BodyChunk>,
}

impl FileBody {
    pub fn new() -> FileBody {
        FileBody::default()
    }

    /// Appends a chunk; empty chunks are dropped so a writer never sends zero bytes.
    pub fn push(&mut self, chunk: BodyChunk) {
        if !chunk.is_empty() {
            self.chunks.push(chunk);
        }
    }

    pub fn chunks(&self) -> &[BodyChunk] {
        &self.chunks
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        self.chunks.iter().map(BodyChunk::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Whether any chunk is a file range (the writer's zero-copy path applies).
    pub fn has_files(&self) -> bool {
        self.chunks
            .iter()
            .any(|chunk| matches!(chunk, BodyChunk::File(_)))
    }

    /// Appends every byte to `out`, reading the file ranges with `pread`.
    pub fn copy_into(&self, out: &mut Vec<u8>) -> io::Result<()> {
        for chunk in &self.chunks {
            match chunk {
                BodyChunk::Bytes(bytes) => out.extend_from_slice(bytes),
                BodyChunk::File(range) => {
                    let start = out.len();
                    out.resize(start + range.len as usize, 0);
                    range.file.read_exact_at(&mut out[start..], range.offset)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn assert_send<T: Send + Sync>() {}

    #[test]
    fn is_send_and_sync() {
        assert_send::<FileBody>();
        assert_send::<FileRange>();
    }

    #[test]
    fn copies_files_and_bytes_in_order() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let file = Arc::new(file);
        let mut body = FileBody::new();
        body.push(BodyChunk::File(FileRange {
            file: file.clone(),
            offset: 2,
            len: 3,
        }));
        body.push(BodyChunk::Bytes(Bytes::from_static(b"ab")));
        body.push(BodyChunk::Bytes(Bytes::new()));
        body.push(BodyChunk::File(FileRange {
            file,
            offset: 8,
            len: 2,
        }));
        assert_eq!(body.chunks().len(), 3, "the empty chunk is dropped");
        assert_eq!(body.len(), 7);
        assert!(body.has_files());
        let mut out = b">".to_vec();
        body.copy_into(&mut out).unwrap();
        assert_eq!(out, b">234ab89");
    }
}
