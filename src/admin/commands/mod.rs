//! The admin commands: each checks its arguments (bad input is exit 2 before any
//! request), makes its calls through [`Wire`], reads the bodies with [`super::bodies`] and
//! returns an [`Output`] in both forms.
//!
//! - [`cluster`]: `cluster`, `broker-status`.
//! - [`topics`]: `topics`, `topic-create`, `topic-update`, `topic-delete`, `topic-route`,
//!   `topic-status`.
//! - [`consumers`]: `groups`, `consumer-progress`, `consumer-connections`, `reset-offset`.
//! - [`messages`]: `query-key`, `query-uniq`, `query-id`, `query-offset`.
//!
//! Which broker: `--broker` when given, else the first master in the name server's
//! GET_BROKER_CLUSTER_INFO, else 127.0.0.1:10911 (the node's default port) when the name
//! server cannot say. A topic a command needs is looked up in the broker's own table
//! (GET_ALL_TOPIC_CONFIG), never by a route query, which would create it on a node with
//! `autoCreateTopicEnable`.

pub mod cluster;
pub mod consumers;
pub mod messages;
pub mod topics;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::remoting::codes::request;

use super::args::{AdminArgs, AdminCommand};
use super::bodies::{self, BrokerData, TopicConfig};
use super::error::{bad_input, node_error, not_found, AdminResult};
use super::output::Output;
use super::wire::{command, resolve, Wire};

/// The broker a command talks to when neither `--broker` nor the name server names one.
pub const DEFAULT_BROKER: &str = "127.0.0.1:10911";

/// What every command works with: the connections and where the name server and broker are.
pub struct Ctx {
    pub wire: Wire,
    namesrv: String,
    broker: Option<String>,
    discovered: Cell<Option<SocketAddr>>,
}

impl Ctx {
    pub fn new(args: &AdminArgs) -> Ctx {
        Ctx {
            wire: Wire::new(args.timeout),
            namesrv: args.namesrv.clone(),
            broker: args.broker.clone(),
            discovered: Cell::new(None),
        }
    }

    pub fn namesrv(&self) -> AdminResult<SocketAddr> {
        resolve(&self.namesrv)
    }

    /// Whether `--broker` was given.
    pub fn broker_given(&self) -> bool {
        self.broker.is_some()
    }

    /// The broker: `--broker`, else discovered (see the module docs).
    pub async fn broker(&self) -> AdminResult<SocketAddr> {
        if let Some(broker) = &self.broker {
            return resolve(broker);
        }
        if let Some(addr) = self.discovered.get() {
            return Ok(addr);
        }
        let discovered = match self.cluster_brokers().await {
            Ok(brokers) => brokers
                .iter()
                .find_map(|b| b.master().map(str::to_owned))
                .map(|addr| resolve(&addr)),
            Err(error) => {
                tracing::info!(%error, "no broker from the name server; trying {DEFAULT_BROKER}");
                None
            }
        };
        let addr = match discovered {
            Some(addr) => addr?,
            None => resolve(DEFAULT_BROKER)?,
        };
        self.discovered.set(Some(addr));
        Ok(addr)
    }

    /// GET_BROKER_CLUSTER_INFO (106) from the name server.
    pub async fn cluster_brokers(&self) -> AdminResult<Vec<BrokerData>> {
        let namesrv = self.namesrv()?;
        let answer = self
            .wire
            .call_ok(namesrv, command(request::GET_BROKER_CLUSTER_INFO, &[]))
            .await?;
        bodies::cluster_info(&answer.body).map_err(node_error)
    }

    /// The broker's topic table (GET_ALL_TOPIC_CONFIG, 21).
    pub async fn topic_table(
        &self,
        broker: SocketAddr,
    ) -> AdminResult<BTreeMap<String, TopicConfig>> {
        let answer = self
            .wire
            .call_ok(broker, command(request::GET_ALL_TOPIC_CONFIG, &[]))
            .await?;
        bodies::topic_config_table(&answer.body).map_err(node_error)
    }

    /// `topic`'s entry in the broker's table; an unknown topic is not found.
    pub async fn require_topic(&self, broker: SocketAddr, topic: &str) -> AdminResult<TopicConfig> {
        self.topic_table(broker)
            .await?
            .remove(topic)
            .ok_or_else(|| not_found(format!("topic {topic} does not exist on {broker}")))
    }
}

/// A topic name by the node's rules.
pub fn check_topic(topic: &str) -> AdminResult<()> {
    crate::broker::names::validate_topic(topic)
        .map_err(|why| bad_input(format!("bad topic: {why}")))
}

/// A group name by the node's rules.
pub fn check_group(group: &str) -> AdminResult<()> {
    crate::broker::names::validate_group(group)
        .map_err(|why| bad_input(format!("bad group: {why}")))
}

/// Runs one command.
pub async fn dispatch(ctx: &Ctx, command: &AdminCommand) -> AdminResult<Output> {
    match command {
        AdminCommand::Cluster => cluster::cluster(ctx).await,
        AdminCommand::BrokerStatus => cluster::broker_status(ctx).await,
        AdminCommand::Topics => topics::list(ctx).await,
        AdminCommand::TopicCreate(args) => topics::create(ctx, args).await,
        AdminCommand::TopicUpdate(args) => topics::update(ctx, args).await,
        AdminCommand::TopicDelete(args) => topics::delete(ctx, &args.topic).await,
        AdminCommand::TopicRoute(args) => topics::route(ctx, &args.topic).await,
        AdminCommand::TopicStatus(args) => topics::status(ctx, &args.topic).await,
        AdminCommand::Groups => consumers::groups(ctx).await,
        AdminCommand::ConsumerProgress(args) => consumers::progress(ctx, args).await,
        AdminCommand::ConsumerConnections(args) => consumers::connections(ctx, &args.group).await,
        AdminCommand::ResetOffset(args) => consumers::reset_offset(ctx, args).await,
        AdminCommand::QueryKey(args) => messages::by_key(ctx, args).await,
        AdminCommand::QueryUniq(args) => messages::by_uniq_key(ctx, args).await,
        AdminCommand::QueryId(args) => messages::by_id(ctx, args).await,
        AdminCommand::QueryOffset(args) => messages::by_offset(ctx, args).await,
    }
}
