//! What can go wrong in an admin command, each kind with its exit code:
//!
//! | exit | kind | e.g. |
//! |---|---|---|
//! | 0 | done | |
//! | 1 | [`AdminError::NotFound`] | unknown topic, group, message; a group with no progress |
//! | 2 | [`AdminError::BadInput`] | bad arguments, a malformed id, a bad timestamp, `--perm 9`; `topic-create`/`group-create` of an existing one without `--upsert` (after one request); an address that is the wrong thing (a broker given as the name server, an HTTP port: see [`super::wire`]) |
//! | 3 | [`AdminError::Node`] | the node could not be reached, timed out or answered an error |
//!
//! Bad input is found before any request wherever the arguments alone show it.

use std::process::ExitCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Node(String),
}

impl AdminError {
    /// The process exit code of this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            AdminError::NotFound(_) => 1,
            AdminError::BadInput(_) => 2,
            AdminError::Node(_) => 3,
        }
    }

    pub fn to_exit_code(&self) -> ExitCode {
        ExitCode::from(self.exit_code())
    }
}

pub type AdminResult<T> = Result<T, AdminError>;

pub fn not_found(what: impl Into<String>) -> AdminError {
    AdminError::NotFound(what.into())
}

pub fn bad_input(what: impl Into<String>) -> AdminError {
    AdminError::BadInput(what.into())
}

pub fn node_error(what: impl Into<String>) -> AdminError {
    AdminError::Node(what.into())
}
