//! The standalone name server's request handler ([`Standalone`]): the requests of Java's
//! `DefaultRequestProcessor` over a [`Registry`] of every broker group that registers.
//! One thread serves every connection (the process runs one current-thread runtime), so
//! the registry sits in a `RefCell`, borrowed only inside one synchronous call.
//!
//! - REGISTER_BROKER (103): decoded by [`crate::remoting::register_broker`]; a bad header,
//!   a CRC mismatch, a compressed or oversized body, or the broker limit is SYSTEM_ERROR
//!   with the reason in the remark (Java answers a CRC mismatch so). SUCCESS carries, for
//!   a slave, `masterAddr` and `haServerAddr`.
//! - UNREGISTER_BROKER (104), BROKER_HEARTBEAT (904), QUERY_DATA_VERSION (322: header
//!   `brokerAddr`, body the broker's DataVersion; answer header `changed`, body the one
//!   held).
//! - GET_ROUTEINFO_BY_TOPIC (105): every group serving the topic; TOPIC_NOT_EXIST (17)
//!   when none. GET_BROKER_CLUSTER_INFO (106). The topic lists: all (206), by cluster
//!   (224, header `cluster`), system (304: cluster and broker names, and a broker
//!   address), unit (311), unit-sub (312), unit-sub but not unit (313).
//! - DELETE_TOPIC_IN_NAMESRV (216, `topic`, optional `clusterName`),
//!   WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327) (`brokerName`;
//!   answers `wipeTopicCount` / `addTopicCount`), GET_NAMESRV_CONFIG (319), and
//!   GET_KV_CONFIG (101) / DELETE_KV_CONFIG (102) over an empty KV store as the embedded
//!   server answers them ([`super::admin`]).
//! - Anything else: REQUEST_CODE_NOT_SUPPORTED.
//!
//! A connection that closes unregisters at once every broker that registered over it
//! (Java's `BrokerHousekeepingService.onChannelClose`); [`Standalone::expire`] is the
//! periodic scan. JSON is always standard.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use crate::clock::Clock;
use crate::remoting::codes::{request as code, response};
use crate::remoting::command::bad_header;
use crate::remoting::register_broker as register;
use crate::remoting::RemotingCommand;
use crate::server::connection::{Reply, RequestHandler};

use super::registry::{Registry, RegistryLimits, Removed};
use super::{admin, route};

/// The standalone name server's handler; see the module doc.
pub struct Standalone {
    registry: RefCell<Registry>,
    clock: Clock,
    /// GET_NAMESRV_CONFIG's body.
    config_text: String,
}

fn success(request: &RemotingCommand, body: String) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body.into_bytes())
}

fn system_error(request: &RemotingCommand, error: impl std::fmt::Display) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(error.to_string()))
}

impl Standalone {
    pub fn new(limits: RegistryLimits, clock: Clock, config_text: String) -> Standalone {
        Standalone {
            registry: RefCell::new(Registry::new(limits)),
            clock,
            config_text,
        }
    }

    /// Unregisters every broker silent past its timeout (the periodic scan).
    pub fn expire(&self) -> Vec<Removed> {
        let removed = self.registry.borrow_mut().expire(self.clock.now_ms());
        for gone in &removed {
            tracing::warn!(
                broker = %gone.broker_addr,
                name = %gone.broker_name,
                id = gone.broker_id,
                "broker expired: no registration within its heartbeat timeout"
            );
        }
        removed
    }

    /// Answers one request that arrived from `peer`.
    pub fn answer(&self, request: &RemotingCommand, peer: SocketAddr) -> RemotingCommand {
        match request.code {
            code::REGISTER_BROKER => self.register(request, peer),
            code::UNREGISTER_BROKER => self.unregister(request),
            code::BROKER_HEARTBEAT => self.heartbeat(request),
            code::QUERY_DATA_VERSION => self.query_data_version(request),
            code::GET_ROUTEINFO_BY_TOPIC => self.route(request),
            code::GET_BROKER_CLUSTER_INFO => success(
                request,
                route::cluster_info_json(&self.registry.borrow().brokers()),
            ),
            code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
            | code::GET_TOPICS_BY_CLUSTER
            | code::GET_SYSTEM_TOPIC_LIST_FROM_NS
            | code::GET_UNIT_TOPIC_LIST
            | code::GET_HAS_UNIT_SUB_TOPIC_LIST
            | code::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST => self.topic_list(request),
            code::DELETE_TOPIC_IN_NAMESRV => self.delete_topic(request),
            code::WIPE_WRITE_PERM_OF_BROKER => self.write_perm(request, false),
            code::ADD_WRITE_PERM_OF_BROKER => self.write_perm(request, true),
            code::GET_NAMESRV_CONFIG => success(request, self.config_text.clone()),
            code::GET_KV_CONFIG => admin::get_kv_config(request),
            code::DELETE_KV_CONFIG => admin::delete_kv_config(request),
            other => RemotingCommand::response_to(
                request,
                response::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(" request type {other} not supported")),
            ),
        }
    }

    fn register(&self, request: &RemotingCommand, peer: SocketAddr) -> RemotingCommand {
        let mut registry = self.registry.borrow_mut();
        let limits = registry.limits().register;
        let decoded = match register::decode_register_broker(request, &limits) {
            Ok(decoded) => decoded,
            Err(error) => return system_error(request, error),
        };
        let known = registry.live_count();
        match registry.register(&decoded, Some(peer), self.clock.now_ms()) {
            Ok(result) => {
                let header = &decoded.header;
                if registry.live_count() > known {
                    tracing::info!(
                        broker = %header.broker_addr,
                        name = %header.broker_name,
                        id = header.broker_id,
                        cluster = %header.cluster_name,
                        topics = decoded.body.topics.len(),
                        "broker registered"
                    );
                }
                register::encode_register_response(request, &result)
            }
            Err(error) => system_error(request, error),
        }
    }

    fn unregister(&self, request: &RemotingCommand) -> RemotingCommand {
        let header = match register::decode_unregister_broker(request) {
            Ok(header) => header,
            Err(error) => return bad_header(request, error),
        };
        let removed = self.registry.borrow_mut().unregister(
            &header.broker_addr,
            &header.broker_name,
            header.broker_id,
        );
        if removed {
            tracing::info!(broker = %header.broker_addr, name = %header.broker_name, "broker unregistered");
        }
        RemotingCommand::response_to(request, response::SUCCESS, None)
    }

    fn heartbeat(&self, request: &RemotingCommand) -> RemotingCommand {
        let addr = match request.get_str("brokerAddr") {
            Ok(addr) => addr,
            Err(error) => return bad_header(request, error),
        };
        self.registry
            .borrow_mut()
            .heartbeat(addr, self.clock.now_ms());
        RemotingCommand::response_to(request, response::SUCCESS, None)
    }

    fn query_data_version(&self, request: &RemotingCommand) -> RemotingCommand {
        let addr = match request.get_str("brokerAddr") {
            Ok(addr) => addr,
            Err(error) => return bad_header(request, error),
        };
        let version = match register::decode_data_version(&request.body) {
            Ok(version) => version,
            Err(error) => return system_error(request, error),
        };
        let (changed, held) =
            self.registry
                .borrow_mut()
                .query_data_version(addr, &version, self.clock.now_ms());
        let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
        answer.put_ext("changed", changed);
        match held {
            Some(held) => answer.with_body(register::encode_data_version(&held)),
            None => answer,
        }
    }

    fn route(&self, request: &RemotingCommand) -> RemotingCommand {
        let topic = match request.get_str("topic") {
            Ok(topic) => topic,
            Err(error) => return bad_header(request, error),
        };
        let Some(found) = self.registry.borrow().route(topic) else {
            return RemotingCommand::response_to(
                request,
                response::TOPIC_NOT_EXIST,
                Some(format!(
                    "No topic route info in name server for the topic: {topic}"
                )),
            );
        };
        let queues: Vec<(&str, route::QueueData)> = found
            .queues
            .iter()
            .map(|(name, queue)| (name.as_str(), *queue))
            .collect();
        success(request, route::topic_route_json(&found.brokers, &queues))
    }

    fn topic_list(&self, request: &RemotingCommand) -> RemotingCommand {
        let registry = self.registry.borrow();
        let body = match request.code {
            code::GET_TOPICS_BY_CLUSTER => match request.get_str("cluster") {
                Ok(cluster) => route::topic_list_json(registry.topics_of_cluster(cluster), None),
                Err(error) => return bad_header(request, error),
            },
            code::GET_SYSTEM_TOPIC_LIST_FROM_NS => {
                let (names, addr) = registry.system_topics();
                route::topic_list_json(names, addr)
            }
            code::GET_UNIT_TOPIC_LIST => {
                route::topic_list_json(registry.topics_by_flags(Some(true), None), None)
            }
            code::GET_HAS_UNIT_SUB_TOPIC_LIST => {
                route::topic_list_json(registry.topics_by_flags(None, Some(true)), None)
            }
            code::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST => {
                route::topic_list_json(registry.topics_by_flags(Some(false), Some(true)), None)
            }
            _ => route::topic_list_json(registry.topic_names(), None),
        };
        success(request, body)
    }

    fn delete_topic(&self, request: &RemotingCommand) -> RemotingCommand {
        let topic = match request.get_str("topic") {
            Ok(topic) => topic,
            Err(error) => return bad_header(request, error),
        };
        let cluster = request.opt_str("clusterName").filter(|c| !c.is_empty());
        self.registry.borrow_mut().delete_topic(topic, cluster);
        RemotingCommand::response_to(request, response::SUCCESS, None)
    }

    fn write_perm(&self, request: &RemotingCommand, grant: bool) -> RemotingCommand {
        let name = match request.get_str("brokerName") {
            Ok(name) => name,
            Err(error) => return bad_header(request, error),
        };
        let count = self.registry.borrow_mut().set_write_perm(name, grant);
        let field = if grant {
            "addTopicCount"
        } else {
            "wipeTopicCount"
        };
        let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
        answer.put_ext(field, count);
        answer
    }
}

impl RequestHandler for Standalone {
    fn connection_closed(&self, peer: SocketAddr) {
        let removed = self.registry.borrow_mut().connection_closed(peer);
        for gone in removed {
            tracing::info!(
                broker = %gone.broker_addr,
                name = %gone.broker_name,
                id = gone.broker_id,
                %peer,
                "broker unregistered: its connection closed"
            );
        }
    }

    /// Every request is answered at once, without a task: none waits for anything.
    fn handle_now(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
        reply: Reply,
    ) -> Option<RemotingCommand> {
        reply.send(self.answer(&request, peer));
        None
    }

    async fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        Some(self.answer(&request, peer))
    }
}
