//! Pinning a shard's thread to one CPU (D3: one pinned shard per core).
//!
//! Shard `n` runs on the `n`-th CPU the process may use (wrapping around when there are
//! more shards than CPUs). Pinning is best effort: where the affinity call is refused (a
//! restricted container) the shard runs unpinned and the reason is logged once per shard.
// Allowed here only (Cargo.toml denies it crate-wide): sched_setaffinity and the CPU set macros are libc calls.
#![allow(unsafe_code)]

/// Why a thread could not be pinned.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("sched_getaffinity: {0}")]
    ReadAffinity(std::io::Error),
    #[error("the process may run on no CPU")]
    NoCpu,
    #[error("sched_setaffinity to CPU {cpu}: {error}")]
    SetAffinity { cpu: usize, error: std::io::Error },
}

/// Pins the calling thread to the `index`-th CPU of the process's allowed set; returns the
/// CPU number, or why it could not.
pub fn pin_current_thread(index: usize) -> Result<usize, PinError> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size matches the set passed.
    let got =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) };
    if got != 0 {
        return Err(PinError::ReadAffinity(std::io::Error::last_os_error()));
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu < CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) })
        .collect();
    if cpus.is_empty() {
        return Err(PinError::NoCpu);
    }
    let cpu = cpus[index % cpus.len()];
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from the allowed set, so it is below CPU_SETSIZE, and `one` is an
    // initialised set.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: pid 0 is this thread; the size matches the set passed.
    let set = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) };
    if set != 0 {
        return Err(PinError::SetAffinity {
            cpu,
            error: std::io::Error::last_os_error(),
        });
    }
    Ok(cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_the_cpu_it_was_given() {
        std::thread::spawn(|| {
            let cpu = pin_current_thread(0).expect("pinning is allowed here");
            // SAFETY: plain syscall wrapper.
            let running_on = unsafe { libc::sched_getcpu() };
            assert_eq!(running_on as usize, cpu);
        })
        .join()
        .unwrap();
    }
}
