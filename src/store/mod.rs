//! The embedded message store.
pub mod properties;
pub mod record;
