//! The name server's admin requests, over state shared by every shard's name-server
//! handler ([`NamesrvState`], one per node):
//!
//! - WIPE_WRITE_PERM_OF_BROKER (205), `mqadmin wipeWritePerm`: header `brokerName`. As
//!   Java's `RouteInfoManager.wipeWritePermOfBrokerByLock`: every topic this broker has
//!   loses the write bit in the routes the name server answers (clients stop sending to
//!   it; the broker itself still accepts writes), and the answer's header field
//!   `wipeTopicCount` says how many topics. Another broker name: 0 topics.
//! - ADD_WRITE_PERM_OF_BROKER (327), `mqadmin addWritePerm`: header `brokerName`; undoes a
//!   wipe for every topic, header field `addTopicCount`. Java sets every topic's route to
//!   read-write; here each topic's route shows the topic's own permission again, which is
//!   the same for every read-write topic and keeps a read-only topic read-only.
//! - DELETE_TOPIC_IN_NAMESRV (216), `mqadmin deleteTopic` (after the broker's delete):
//!   header `topic` (and `clusterName`). SUCCESS whether or not the topic exists, as in
//!   Java. The routes here are read off the node's topic table, so a topic the broker has
//!   deleted has no route already; the request forgets the topic's wiped permission.
//! - GET_NAMESRV_CONFIG (319), `mqadmin getNamesrvConfig`: the name server's settings as
//!   Java properties text in the body: those ringmq's embedded name server has
//!   (`listenPort`, `bindAddress`).
//!
//! - GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102): the embedded name server keeps no
//!   KV configuration (PUT_KV_CONFIG stays unsupported), so, as Java's name server answers
//!   a key it does not hold, a read is QUERY_NOT_FOUND (22) `No config item, Namespace: N
//!   Key: K` and a delete is SUCCESS. `mqadmin deleteTopic` and `deleteSubGroup` delete the
//!   topic's ORDER_TOPIC_CONFIG key after the topic itself.
//!
//! A wiped permission is in memory only, as in Java's name server; topics created after a
//! wipe are writable, as they are when a Java broker registers a new topic.

use std::collections::BTreeSet;

use crate::broker::tables::topics::{TopicTable, PERM_WRITE};
use crate::remoting::codes::response;
use crate::remoting::command::bad_header;
use crate::remoting::RemotingCommand;
use crate::sync::Locked;

/// What every shard's name server shares.
#[derive(Debug)]
pub struct NamesrvState {
    /// Topics whose routes have lost the write bit (WIPE_WRITE_PERM_OF_BROKER).
    wiped: Locked<BTreeSet<String>>,
    /// GET_NAMESRV_CONFIG's body.
    config_text: String,
}

impl NamesrvState {
    /// `listen` is the name server's address (port and bind address).
    pub fn new(listen_port: u16, bind_address: std::net::IpAddr) -> NamesrvState {
        NamesrvState {
            wiped: Locked::new(BTreeSet::new()),
            config_text: format!("listenPort={listen_port}\nbindAddress={bind_address}\n"),
        }
    }

    /// The permission the route of `topic` shows, whose own permission is `perm`.
    pub fn route_perm(&self, topic: &str, perm: i32) -> i32 {
        if self.wiped.lock().contains(topic) {
            perm & !PERM_WRITE
        } else {
            perm
        }
    }
}

/// WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327): `wipe` tells which.
pub fn write_perm(
    state: &NamesrvState,
    topics: &TopicTable,
    broker_name: &str,
    request: &RemotingCommand,
    wipe: bool,
) -> RemotingCommand {
    let asked = match request.get_str("brokerName") {
        Ok(name) => name,
        Err(error) => return bad_header(request, error),
    };
    let count = if asked == broker_name {
        let names: Vec<String> = topics.all().into_iter().map(|c| c.topic_name).collect();
        let count = names.len();
        let mut wiped = state.wiped.lock();
        if wipe {
            wiped.extend(names);
        } else {
            wiped.clear();
        }
        count
    } else {
        0
    };
    let field = if wipe {
        "wipeTopicCount"
    } else {
        "addTopicCount"
    };
    let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
    answer.put_ext(field, count);
    answer
}

/// DELETE_TOPIC_IN_NAMESRV (216).
pub fn delete_topic(state: &NamesrvState, request: &RemotingCommand) -> RemotingCommand {
    let topic = match request.get_str("topic") {
        Ok(topic) => topic,
        Err(error) => return bad_header(request, error),
    };
    state.wiped.lock().remove(topic);
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// GET_KV_CONFIG (101): no key is held.
pub fn get_kv_config(request: &RemotingCommand) -> RemotingCommand {
    let (namespace, key) = match (request.get_str("namespace"), request.get_str("key")) {
        (Ok(namespace), Ok(key)) => (namespace, key),
        (Err(error), _) | (_, Err(error)) => return bad_header(request, error),
    };
    RemotingCommand::response_to(
        request,
        response::QUERY_NOT_FOUND,
        Some(format!("No config item, Namespace: {namespace} Key: {key}")),
    )
}

/// DELETE_KV_CONFIG (102): nothing to delete, SUCCESS.
pub fn delete_kv_config(request: &RemotingCommand) -> RemotingCommand {
    if let Err(error) = request.get_str("namespace").and(request.get_str("key")) {
        return bad_header(request, error);
    }
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// GET_NAMESRV_CONFIG (319).
pub fn get_config(state: &NamesrvState, request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(state.config_text.clone().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wiped_topic_loses_only_the_write_bit_until_added_back() {
        let state = NamesrvState::new(9876, "127.0.0.1".parse().unwrap());
        state.wiped.lock().insert("T".into());
        assert_eq!(state.route_perm("T", 6), 4);
        assert_eq!(state.route_perm("T", 4), 4);
        assert_eq!(state.route_perm("U", 6), 6);
        state.wiped.lock().clear();
        assert_eq!(state.route_perm("T", 6), 6);
    }
}
