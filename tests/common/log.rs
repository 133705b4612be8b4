//! The test process's log, captured: one global `tracing` subscriber at info and above
//! writing into memory, for tests that check what the library logs.
//!
//! A process has one global subscriber, installed by the first call here and kept for the
//! life of the process: every test in the binary logs into it from then on. The tests
//! that read it therefore live in `tests/alone`, which runs its tests one at a time.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// Everything the process logs at info and above, from the first call on.
pub fn captured() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        log
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
