//! Output into a closed pipe ends a command quietly, as it ends `cat`: killed by SIGPIPE,
//! nothing on stderr (no panic from `println!`, no "Broken pipe" error line).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");

/// Waits for `child` and checks it died of SIGPIPE with nothing on stderr.
fn ends_quietly(mut child: Child, what: &str) {
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let status = child.wait().expect("reap");
    assert_eq!(
        status.signal(),
        Some(libc::SIGPIPE),
        "{what}: {status:?}, stderr: {stderr}"
    );
    assert_eq!(stderr, "", "{what}");
}

#[test]
fn store_dump_into_a_pipe_closed_after_one_line_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new(BIN)
        .args([
            "bench",
            "store",
            "--quiet",
            "--size",
            "200",
            "--messages",
            "3000",
        ])
        .args(["--io", "portable", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let mut child = Command::new(BIN)
        .args(["store", "dump", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `head -1`: read one line, then go.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with('{'), "{first}");
    ends_quietly(child, "store dump | head -1");
}

#[test]
fn a_bench_summary_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "bench",
            "store",
            "--quiet",
            "--messages",
            "200",
            "--io",
            "portable",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the summary is printed.
    drop(child.stdout.take());
    ends_quietly(child, "bench store | (closed)");
}
