//! What `ringmq serve` logs by default: crash recovery (what was scanned, re-dispatched
//! and cut, and how long it took) is in the default log, not only at `info`; and logs
//! that go to a pipe or a file carry no ANSI colour codes.

use crate::common;

use std::io::{BufRead, BufReader};

use common::serve::{serve_command, Serve};

/// The stderr lines of a `ringmq serve` on `dir`, with `RINGMQ_LOG` as given (unset:
/// the default level), up to its `listening on` line; the node is killed after.
fn start_lines(dir: &std::path::Path, log: Option<&str>) -> Vec<String> {
    let mut command = serve_command(dir, 0, &["--shards", "1"]);
    command.env_remove("RINGMQ_LOG");
    if let Some(log) = log {
        command.env("RINGMQ_LOG", log);
    }
    let mut child = command.spawn().expect("spawn ringmq serve");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).expect("read serve's stderr");
        assert!(read > 0, "serve exited before listening: {lines:#?}");
        let done = line.starts_with("ringmq: listening on ");
        lines.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn crash_recovery_is_in_the_default_log() {
    let dir = tempfile::tempdir().unwrap();
    Serve::start(dir.path(), &["--shards", "1"], "first run").kill();
    let lines = start_lines(dir.path(), None);
    let recovery = lines
        .iter()
        .find(|l| l.contains("recovered after a crash"))
        .unwrap_or_else(|| panic!("no recovery line at the default level: {lines:#?}"));
    for part in ["scanned", "re-dispatched", " ms"] {
        assert!(recovery.contains(part), "{part} in {recovery}");
    }
}

#[test]
fn logs_into_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let lines = start_lines(dir.path(), Some("info"));
    assert!(
        lines.iter().any(|l| l.contains("INFO")),
        "info lines: {lines:#?}"
    );
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "a colour code in {line:?}");
    }
}
