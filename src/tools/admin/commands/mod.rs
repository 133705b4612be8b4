//! The admin commands: each checks its arguments (bad input is exit 2 before any
//! request), makes its calls through [`Wire`], reads the bodies with [`super::bodies`] and
//! returns an [`Output`] in both forms.
//!
//! - [`cluster`]: `cluster`, `broker-status`; [`ha`]: `ha-status`, and the roles and
//!   lags `cluster` shows.
//! - [`controller`]: `controller`, `elect-master` (to the controllers of `-a`).
//! - [`topics`]: `topics`, `topic-create`, `topic-update`, `topic-delete`, `topic-route`,
//!   `topic-status`.
//! - [`consumers`]: `groups`, `consumer-progress`, `consumer-connections`, `reset-offset`.
//! - [`groups`]: `group-create`, `group-update`, `group-delete`.
//! - [`messages`]: `query-key`, `query-uniq`, `query-id`, `query-offset`.
//!
//! Which name server: `--namesrv`/`-n`, else `NAMESRV_ADDR`, else 127.0.0.1:9876; of a
//! `;`-separated list, the first that accepts a connection.
//!
//! Which broker: `--broker` when given; with `--cluster`, the first master that cluster
//! lists in the name server's GET_BROKER_CLUSTER_INFO; else the first master it lists of
//! any cluster, else 127.0.0.1:10911 (the node's default port) when the name server cannot
//! say (but not when the name-server address is the wrong thing: a broker or an HTTP port
//! is bad input, exit 2). The commands that change something go to [`Ctx::targets`]:
//! every master of `--cluster`, else that one broker. A topic a command needs is looked up
//! in the broker's own table (GET_ALL_TOPIC_CONFIG), never by a route query, which would
//! create it on a node with `autoCreateTopicEnable`.

pub mod cluster;
pub mod consumers;
pub mod controller;
pub mod groups;
pub mod ha;
pub mod messages;
pub mod topics;
mod transactions;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::remoting::codes::request;

use serde_json::json;

use super::args::{namesrv_list, AdminArgs, AdminCommand};
use super::bodies::{self, BrokerData, TopicConfig};
use super::error::{bad_input, node_error, not_found, AdminError, AdminResult};
use super::output::Output;
use super::wire::{command, resolve, Wire};

/// The broker a command talks to when neither `--broker` nor the name server names one.
pub const DEFAULT_BROKER: &str = "127.0.0.1:10911";

/// What every command works with: the connections and where the name server and broker are.
pub struct Ctx {
    pub wire: Wire,
    namesrvs: Vec<String>,
    chosen_namesrv: Cell<Option<SocketAddr>>,
    broker: Option<String>,
    cluster: Option<String>,
    discovered: Cell<Option<SocketAddr>>,
    /// Whether [`Ctx::broker`] fell back to [`DEFAULT_BROKER`] because the name server
    /// could not say.
    fell_back: Cell<bool>,
}

impl Ctx {
    pub fn new(args: &AdminArgs) -> Ctx {
        Ctx {
            wire: Wire::new(args.timeout),
            namesrvs: namesrv_list(&args.namesrv),
            chosen_namesrv: Cell::new(None),
            broker: args.broker.clone(),
            cluster: args.cluster.clone(),
            discovered: Cell::new(None),
            fell_back: Cell::new(false),
        }
    }

    /// The name server: the one address given, or the first of a list that accepts a
    /// connection (a single address is not connected to here: its request says whether it
    /// can be reached).
    pub async fn namesrv(&self) -> AdminResult<SocketAddr> {
        if let Some(addr) = self.chosen_namesrv.get() {
            return Ok(addr);
        }
        let addr = match self.namesrvs.as_slice() {
            [] => return Err(bad_input("no name server given")),
            [one] => resolve(one)?,
            list => {
                let mut last: Option<AdminError> = None;
                let mut found = None;
                for text in list {
                    let reached = match resolve(text) {
                        Ok(addr) => self.wire.connect(addr).await.map(|()| addr),
                        Err(error) => Err(error),
                    };
                    match reached {
                        Ok(addr) => {
                            found = Some(addr);
                            break;
                        }
                        Err(error) => last = Some(error),
                    }
                }
                match found {
                    Some(addr) => addr,
                    None => {
                        let last = last.map(|e| e.to_string()).unwrap_or_default();
                        return Err(node_error(format!(
                            "no name server of {} could be reached; the last: {last}",
                            list.join(";")
                        )));
                    }
                }
            }
        };
        self.chosen_namesrv.set(Some(addr));
        Ok(addr)
    }

    /// Every address of `--namesrv`, in order.
    pub fn namesrv_addrs(&self) -> AdminResult<Vec<SocketAddr>> {
        self.namesrvs.iter().map(|text| resolve(text)).collect()
    }

    /// Whether the broker is [`DEFAULT_BROKER`] because the name server could not say.
    pub fn broker_fell_back(&self) -> bool {
        self.fell_back.get()
    }

    /// Whether `--broker` was given.
    pub fn broker_given(&self) -> bool {
        self.broker.is_some()
    }

    /// `--cluster`, if given.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The broker: `--broker`, else the first master of `--cluster`, else discovered (see
    /// the module docs).
    pub async fn broker(&self) -> AdminResult<SocketAddr> {
        if let Some(broker) = &self.broker {
            return resolve(broker);
        }
        if let Some(addr) = self.discovered.get() {
            return Ok(addr);
        }
        if let Some(cluster) = &self.cluster {
            let addr = self.cluster_masters(cluster).await?[0];
            self.discovered.set(Some(addr));
            return Ok(addr);
        }
        let discovered = match self.cluster_brokers().await {
            Ok(brokers) => brokers
                .iter()
                .find_map(|b| b.master().map(str::to_owned))
                .map(|addr| resolve(&addr)),
            // The name-server address is something else (a broker, an HTTP port): say so
            // rather than quietly trying the default broker.
            Err(error @ AdminError::BadInput(_)) => return Err(error),
            Err(error) => {
                tracing::info!(%error, "no broker from the name server; trying {DEFAULT_BROKER}");
                None
            }
        };
        let addr = match discovered {
            Some(addr) => addr?,
            None => {
                self.fell_back.set(true);
                resolve(DEFAULT_BROKER)?
            }
        };
        self.discovered.set(Some(addr));
        Ok(addr)
    }

    /// Every master address of `cluster` in the name server's cluster info, in broker-name
    /// order; a cluster it does not list, or one without a master, is not found.
    pub async fn cluster_masters(&self, cluster: &str) -> AdminResult<Vec<SocketAddr>> {
        let brokers = self.cluster_brokers().await?;
        let mut known: Vec<&str> = brokers.iter().map(|b| b.cluster.as_str()).collect();
        known.dedup();
        let members: Vec<&BrokerData> = brokers.iter().filter(|b| b.cluster == cluster).collect();
        if members.is_empty() {
            return Err(not_found(format!(
                "the name server lists no cluster {cluster} (it lists: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        }
        let masters = members
            .iter()
            .filter_map(|b| b.master())
            .map(resolve)
            .collect::<AdminResult<Vec<_>>>()?;
        if masters.is_empty() {
            return Err(not_found(format!("cluster {cluster} has no master")));
        }
        Ok(masters)
    }

    /// The brokers a command that changes something goes to: every master of `--cluster`,
    /// else [`Ctx::broker`].
    pub async fn targets(&self) -> AdminResult<Vec<SocketAddr>> {
        match (&self.broker, &self.cluster) {
            (None, Some(cluster)) => self.cluster_masters(cluster).await,
            _ => Ok(vec![self.broker().await?]),
        }
    }

    /// The output of a command that changed something on each of [`Ctx::targets`]: one
    /// broker's as it is; with `--cluster`, `{"cluster": C, "results": [...]}` and the
    /// human lines one after the other.
    pub fn combine(&self, mut outputs: Vec<Output>) -> Output {
        match &self.cluster {
            Some(cluster) if self.broker.is_none() => {
                let text: String = outputs.iter().map(|o| o.text.as_str()).collect();
                let results: Vec<_> = outputs.iter_mut().map(|o| o.json.take()).collect();
                Output::new(json!({ "cluster": cluster, "results": results }), text)
            }
            _ => outputs
                .pop()
                .unwrap_or_else(|| Output::new(json!({}), String::new())),
        }
    }

    /// GET_BROKER_CLUSTER_INFO (106) from the name server.
    pub async fn cluster_brokers(&self) -> AdminResult<Vec<BrokerData>> {
        let namesrv = self.namesrv().await?;
        let answer = self
            .wire
            .call_ok(namesrv, command(request::GET_BROKER_CLUSTER_INFO, &[]))
            .await?;
        bodies::cluster_info(&answer.body).map_err(AdminError::from)
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
        bodies::topic_config_table(&answer.body).map_err(AdminError::from)
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
    crate::broker::naming::names::validate_topic(topic)
        .map_err(|why| bad_input(format!("bad topic: {why}")))
}

/// A group name by the node's rules.
pub fn check_group(group: &str) -> AdminResult<()> {
    crate::broker::naming::names::validate_group(group)
        .map_err(|why| bad_input(format!("bad group: {why}")))
}

/// Runs one command.
pub async fn dispatch(ctx: &Ctx, command: &AdminCommand) -> AdminResult<Output> {
    match command {
        AdminCommand::Cluster => cluster::cluster(ctx).await,
        AdminCommand::BrokerStatus => cluster::broker_status(ctx).await,
        AdminCommand::HaStatus => ha::ha_status(ctx).await,
        AdminCommand::Controller(args) => controller::view(ctx, args).await,
        AdminCommand::ElectMaster(args) => controller::elect_master(ctx, args).await,
        AdminCommand::TxPending(args) => transactions::pending(ctx, args).await,
        AdminCommand::Topics => topics::list(ctx).await,
        AdminCommand::TopicCreate(args) => topics::create(ctx, args).await,
        AdminCommand::TopicUpdate(args) => topics::update(ctx, args).await,
        AdminCommand::TopicDelete(args) => topics::delete(ctx, &args.topic).await,
        AdminCommand::TopicRoute(args) => topics::route(ctx, &args.topic).await,
        AdminCommand::TopicStatus(args) => topics::status(ctx, &args.topic).await,
        AdminCommand::Groups => consumers::groups(ctx).await,
        AdminCommand::GroupCreate(args) => groups::create(ctx, args).await,
        AdminCommand::GroupUpdate(args) => groups::update(ctx, args).await,
        AdminCommand::GroupDelete(args) => groups::delete(ctx, args).await,
        AdminCommand::ConsumerProgress(args) => consumers::progress(ctx, args).await,
        AdminCommand::ConsumerConnections(args) => consumers::connections(ctx, &args.group).await,
        AdminCommand::ResetOffset(args) => consumers::reset_offset(ctx, args).await,
        AdminCommand::QueryKey(args) => messages::by_key(ctx, args).await,
        AdminCommand::QueryUniq(args) => messages::by_uniq_key(ctx, args).await,
        AdminCommand::QueryId(args) => messages::by_id(ctx, args).await,
        AdminCommand::QueryOffset(args) => messages::by_offset(ctx, args).await,
    }
}
