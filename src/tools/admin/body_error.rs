//! Why a response body could not be read by [`super::bodies`]: which body (`what`, e.g.
//! `the topic stats` or `the topic config table, topic "t"`) and what in it is wrong. The
//! admin CLI prints it as `{what}: {problem}`, a node error (exit 3: the node answered
//! something the tool cannot read); tests pin the text.

use crate::remoting::fastjson::ParseError;

/// A body that is not what its request answers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {problem}")]
pub struct BodyError {
    /// The body being read, as the message names it.
    pub what: String,
    pub problem: BodyProblem,
}

impl BodyError {
    pub(super) fn new(what: &str, problem: BodyProblem) -> BodyError {
        BodyError {
            what: what.to_string(),
            problem,
        }
    }
}

/// What in a body is wrong; fields are named as the body spells them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyProblem {
    /// Not JSON, in standard or fastjson form.
    #[error(transparent)]
    Json(#[from] ParseError),
    #[error("no `{field}`")]
    NoField { field: &'static str },
    #[error("no `{field}` object")]
    NoObject { field: &'static str },
    #[error("no `{field}` array")]
    NoArray { field: &'static str },
    #[error("`{field}` is not an object")]
    NotAnObject { field: &'static str },
    #[error("`{field}` is not a number")]
    NotANumber { field: &'static str },
    /// A map key that should name a message queue.
    #[error("key {key:?} is not a message queue")]
    NotAQueue { key: String },
    /// A key of `brokerAddrs` that is not a broker id.
    #[error("broker id {id:?} is not a number")]
    NotABrokerId { id: String },
    /// A value of a queue's offset table that is not an offset.
    #[error("the offset of {key} is not a number")]
    NotAnOffset { key: String },
}

/// A body the node sent that cannot be read is the node's error (exit 3).
impl From<BodyError> for super::error::AdminError {
    fn from(error: BodyError) -> Self {
        super::error::AdminError::Node(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::BodyProblem::*;
    use super::*;

    /// The text of each kind, as it was when the readers returned strings.
    #[test]
    fn messages_keep_their_text() {
        let what = "the topic stats";
        let cases = [
            (NoField { field: "maxOffset" }, "no `maxOffset`"),
            (NoObject { field: "table" }, "no `table` object"),
            (NoArray { field: "topicList" }, "no `topicList` array"),
            (
                NotAnObject {
                    field: "offsetTable",
                },
                "`offsetTable` is not an object",
            ),
            (NotANumber { field: "perm" }, "`perm` is not a number"),
            (
                NotAQueue { key: "nope".into() },
                "key \"nope\" is not a message queue",
            ),
            (
                NotABrokerId { id: "x".into() },
                "broker id \"x\" is not a number",
            ),
            (
                NotAnOffset { key: "k".into() },
                "the offset of k is not a number",
            ),
        ];
        for (problem, text) in cases {
            assert_eq!(
                BodyError::new(what, problem).to_string(),
                format!("{what}: {text}")
            );
        }
    }
}
