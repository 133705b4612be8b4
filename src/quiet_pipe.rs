//! Output into a closed pipe ends the command quietly, as Unix tools end: `ringmq store
//! dump ... | head -1` and `ringmq bench ... | head` stop when the reader goes, with no
//! message and no panic.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails with `EPIPE` instead, which
//! `println!` turns into a panic (exit 101) and `?` into an error message (exit 2).
//! Restoring SIGPIPE's default action at start would be simpler but would also let a
//! socket write kill the node or a load generator whose peer closed (writev and sendfile
//! on sockets raise SIGPIPE), so the signal stays ignored and stdout's `EPIPE` is caught
//! where it surfaces: a panic hook for `println!` anywhere, and [`is_closed_stdout`] for
//! errors returned to `main`. Either way the process then dies of SIGPIPE, by restoring
//! the default action and raising it, so a shell sees exactly what it sees from `cat`
//! (status 141, and nothing printed).

// Two libc calls (poll of stdout, and restoring and raising SIGPIPE): nix's `signal`
// feature is not enabled, and neither call touches memory Rust owns.
#![allow(unsafe_code)]

/// Installs a panic hook that turns a panic from printing to a closed stdout into a quiet
/// death by SIGPIPE, and leaves every other panic to the hook that was there.
pub fn install() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        // std's wording for a failed `print!`: "failed printing to stdout: <io error>".
        if message.starts_with("failed printing to stdout")
            && message.contains(&format!("(os error {})", libc::EPIPE))
        {
            die_of_sigpipe();
        }
        previous(info);
    }));
}

/// Whether an error is a write into a closed stdout: an `EPIPE` in its chain while
/// stdout's reader is gone. Both, because a load generator's `EPIPE` from a socket the
/// node closed is a failure to report, not a reader that has read enough.
pub fn is_closed_stdout(error: &anyhow::Error) -> bool {
    let broken_pipe = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    broken_pipe && stdout_reader_gone()
}

/// Whether stdout is a pipe (or socket) with no reader left: poll reports an error on a
/// pipe's write end once its read end is closed.
fn stdout_reader_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Ends the process as a write into a closed pipe ends a Unix tool: killed by SIGPIPE.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: setting a signal's action to the default and raising it are async-signal-safe
    // and touch no Rust state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // The signal's default action ends the process before this; if something blocks it,
    // end with the status a shell gives a process killed by it.
    std::process::exit(128 + libc::SIGPIPE)
}
