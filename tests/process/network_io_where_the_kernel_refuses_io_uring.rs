//! `networkIo` where the kernel refuses io_uring, as a container's default seccomp profile
//! does: the node is started under a seccomp filter that answers `io_uring_setup` with
//! EPERM. With `uring` the start fails and says which key to change; with `auto` the node
//! serves on epoll and says why; without the filter `auto` serves on the ring.
// Allowed here only (the crate denies it): installing a seccomp filter in the child.
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::common;

use common::process_cluster::send;
use common::serve::{refused_command, serve_command, Serve};
use ringmq::remoting::codes::response;

const PATIENCE: Duration = Duration::from_secs(30);

/// Makes `command`'s process (after fork, before exec) refuse `io_uring_setup` with EPERM.
fn refusing_io_uring(mut command: Command) -> Command {
    // SAFETY: the closure runs between fork and exec and calls only prctl(2), which is
    // async-signal-safe, on data it owns.
    unsafe {
        command.pre_exec(|| {
            let filter = [
                // The syscall number (`seccomp_data.nr`, offset 0)...
                bpf(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
                // ...is io_uring_setup: the next instruction, else the one after.
                bpf(
                    libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                    0,
                    1,
                    libc::SYS_io_uring_setup as u32,
                ),
                bpf(
                    libc::BPF_RET | libc::BPF_K,
                    0,
                    0,
                    libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                ),
                bpf(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
            ];
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// A send through the node at `serve` is stored.
fn serves_a_send(serve: &Serve) {
    let answer = send(serve.addr, "NetworkIoTopic", 0, b"through whichever path");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
}

#[test]
fn a_node_asked_for_the_network_ring_does_not_start_where_the_kernel_refuses_io_uring() {
    let dir = tempfile::tempdir().unwrap();
    let command = serve_command(dir.path(), 0, &["--set", "networkIo=uring"]);
    let stderr = refused_command(refusing_io_uring(command), PATIENCE);
    assert!(
        stderr.contains("networkIo=uring")
            && stderr.contains("io_uring_setup")
            && stderr.contains("Operation not permitted")
            && stderr.contains("networkIo=epoll"),
        "a refused ring should stop the start, naming the key and the way out: {stderr}"
    );
}

#[test]
fn a_node_on_auto_serves_on_epoll_where_the_kernel_refuses_io_uring_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let command = serve_command(dir.path(), 0, &["--set", "networkIo=auto"]);
    let mut serve = Serve::start_command(refusing_io_uring(command), "auto, refused");
    serves_a_send(&serve);
    serve.terminate();
    serve.child.wait().expect("reap serve");
    let stderr = serve.startup.clone() + &serve.stderr_after_exit();
    assert!(
        stderr.contains("the kernel refused io_uring; the shard serves its connections on epoll")
            && stderr.contains("Operation not permitted")
            && stderr.contains("ringmq: connections on epoll"),
        "auto under a refusal should fall back to epoll and say so: {stderr}"
    );
}

#[test]
fn a_node_on_auto_serves_on_the_network_ring_where_the_kernel_gives_one() {
    let dir = tempfile::tempdir().unwrap();
    let command = serve_command(dir.path(), 0, &["--set", "networkIo=auto"]);
    let mut serve = Serve::start_command(command, "auto");
    serves_a_send(&serve);
    serve.terminate();
    serve.child.wait().expect("reap serve");
    let stderr = serve.startup.clone() + &serve.stderr_after_exit();
    assert!(
        stderr.contains("ringmq: connections on io_uring") && !stderr.contains("refused io_uring"),
        "auto with io_uring available should serve on the ring: {stderr}"
    );
}
