//! The embedded name server endpoint (D1): a second listener on `namesrvPort`
//! (key `namesrv_port`) on the same shard, served by the same connection code
//! ([`crate::server::connection::serve_connection`]) with [`NameServer`] as the handler.
//! It knows exactly one broker, this node, and answers from the node-wide topic table:
//!
//! - GET_ROUTEINFO_BY_TOPIC (105): TopicRouteData (shape in [`route`]). An unknown topic is
//!   TOPIC_NOT_EXIST (17), unless `autoCreateTopicEnable`, in which case the topic is created
//!   with `defaultTopicQueueNums` queues and its route answered. This differs from Java,
//!   where the name server answers TOPIC_NOT_EXIST, the producer then fetches the route of
//!   the default topic `TBW102` and the broker creates the topic on the first send; the
//!   result for the producer (that many queues on this broker) is the same.
//! - GET_BROKER_CLUSTER_INFO (106): ClusterInfo (shape in [`route`]).
//! - GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): `TopicList`, `{"topicList":["T",…]}`, every
//!   topic of the node's table, in name order.
//! - The admin requests of [`admin`]: WIPE_WRITE_PERM_OF_BROKER (205),
//!   ADD_WRITE_PERM_OF_BROKER (327), DELETE_TOPIC_IN_NAMESRV (216), GET_NAMESRV_CONFIG (319),
//!   GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102) over an empty KV configuration.
//! - Anything else: REQUEST_CODE_NOT_SUPPORTED. Broker requests (sends, pulls) are not
//!   answered here, nor routes on the broker port.
//!
//! JSON is always standard (quoted broker-id keys), whatever the request's version.
//!
//! Beside it, the standalone name server (`ringmq namesrv`), which knows every broker group
//! that registers: [`registry`] (who is registered, pure), [`handler`] (the requests),
//! [`config`] (namesrv.conf), [`standalone`] (the one-thread process). Both answer in the
//! JSON shapes of [`route`].

pub mod admin;
pub mod config;
pub mod handler;
pub mod registry;
pub mod route;
pub mod standalone;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use crate::broker::tables::topics::TopicTable;
use crate::broker::BrokerIdentity;
use crate::clock::Clock;
use crate::remoting::codes::{request, response};
use crate::remoting::command::bad_header;
use crate::remoting::RemotingCommand;
use crate::server::connection::RequestHandler;
use crate::store::topic::validate_topic;

use route::{BrokerData, QueueData};

/// The name-server request handler of one shard: the node's identity and the node-wide
/// topic table are all it reads (and the clock, to stamp a topic it auto-creates).
pub struct NameServer {
    identity: BrokerIdentity,
    topics: Arc<TopicTable>,
    clock: Clock,
    /// What every shard's name server shares (wiped write permissions, settings).
    state: Arc<admin::NamesrvState>,
}

impl NameServer {
    pub fn new(
        identity: BrokerIdentity,
        topics: Arc<TopicTable>,
        clock: Clock,
        state: Arc<admin::NamesrvState>,
    ) -> NameServer {
        NameServer {
            identity,
            topics,
            clock,
            state,
        }
    }

    /// This node, as the master of its broker group.
    fn entry(&self) -> BrokerData {
        let identity = &self.identity;
        BrokerData {
            cluster: identity.cluster_name.clone(),
            broker_name: identity.broker_name.clone(),
            addrs: std::collections::BTreeMap::from([(0, identity.store_host.to_string())]),
            enable_acting_master: false,
        }
    }

    /// Handles one request; every request gets a response.
    pub fn handle(&self, request: &RemotingCommand) -> RemotingCommand {
        match request.code {
            request::GET_ROUTEINFO_BY_TOPIC => self.route(request),
            request::GET_BROKER_CLUSTER_INFO => {
                RemotingCommand::response_to(request, response::SUCCESS, None)
                    .with_body(route::cluster_info_json(&[self.entry()]).into_bytes())
            }
            request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => {
                let configs = self.topics.all();
                let names = configs.iter().map(|config| config.topic_name.as_str());
                RemotingCommand::response_to(request, response::SUCCESS, None)
                    .with_body(route::topic_list_json(names, None).into_bytes())
            }
            request::WIPE_WRITE_PERM_OF_BROKER => admin::write_perm(
                &self.state,
                &self.topics,
                &self.identity.broker_name,
                request,
                true,
            ),
            request::ADD_WRITE_PERM_OF_BROKER => admin::write_perm(
                &self.state,
                &self.topics,
                &self.identity.broker_name,
                request,
                false,
            ),
            request::DELETE_TOPIC_IN_NAMESRV => admin::delete_topic(&self.state, request),
            request::GET_NAMESRV_CONFIG => admin::get_config(&self.state, request),
            request::GET_KV_CONFIG => admin::get_kv_config(request),
            request::DELETE_KV_CONFIG => admin::delete_kv_config(request),
            other => RemotingCommand::response_to(
                request,
                response::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(" request type {other} not supported")),
            ),
        }
    }

    fn route(&self, request: &RemotingCommand) -> RemotingCommand {
        let topic = match request.get_str("topic") {
            Ok(topic) => topic,
            Err(error) => return bad_header(request, error),
        };
        let topics = &self.topics;
        let mut config = match topics.get(topic) {
            Some(config) => config,
            None => {
                let not_exist = || {
                    RemotingCommand::response_to(
                        request,
                        response::TOPIC_NOT_EXIST,
                        Some(format!(
                            "No topic route info in name server for the topic: {topic}"
                        )),
                    )
                };
                // Only auto-create names a send could use (system topics are the node's).
                if !topics.auto_create()
                    || validate_topic(topic).is_err()
                    || crate::broker::naming::names::is_not_allowed_send_topic(topic)
                {
                    return not_exist();
                }
                match topics.get_or_create(topic, || self.clock.now_ms()) {
                    Ok(config) => config,
                    Err((code, remark)) => {
                        return RemotingCommand::response_to(request, code, Some(remark))
                    }
                }
            }
        };
        config.perm = self.state.route_perm(topic, config.perm);
        // The topic table holds queue counts far below i32::MAX; saturating cannot change one.
        let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        let queues = QueueData {
            read_queue_nums: count(config.read_queue_nums),
            write_queue_nums: count(config.write_queue_nums),
            perm: config.perm,
            topic_sys_flag: config.topic_sys_flag,
        };
        let entry = self.entry();
        RemotingCommand::response_to(request, response::SUCCESS, None).with_body(
            route::topic_route_json(
                std::slice::from_ref(&entry),
                &[(&entry.broker_name, queues)],
            )
            .into_bytes(),
        )
    }
}

impl RequestHandler for NameServer {
    async fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        _peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        Some(NameServer::handle(&self, &request))
    }
}
