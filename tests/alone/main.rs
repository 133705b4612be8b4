//! The `alone` test binary: tests that observe the whole test process, so no other test
//! may run beside them. `node_unread_responses` measures the process's RSS;
//! `node_log_injection` and `retention_keeps_what_protected_groups_have_not_consumed`
//! install the process's one global log subscriber ([`common::log`]) and read what was
//! logged (the first asserts that a window of the log holds only its own warn lines and
//! grows by less than a bound). Among many other tests their figures would count other
//! tests' nodes and logs, and a second global subscriber would panic.
//!
//! Every test here takes [`alone`] first, so they run one after another even though the
//! harness starts them on parallel threads.
//!
//! `module_layering` is the one exception: it reads `src/` as text (no node, no log, no
//! figure of the process), checking that the crate's modules form no import cycle and
//! keep their floors. It lives here because this binary is the one `cargo test` runs
//! that owns no other concern, and it does not take [`alone`].

/// Held for the whole of each test in this binary: the tests here run one at a time.
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; the next test still runs alone.
    ALONE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[path = "../common/mod.rs"]
mod common;

mod module_layering;
mod node_log_injection;
mod node_unread_responses;
mod retention_keeps_what_protected_groups_have_not_consumed;
