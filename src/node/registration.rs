//! Registration with the external name servers of `namesrvAddr` (D1, RocketMQ's
//! `BrokerOuterAPI.registerBrokerAll`): how a broker joins a cluster whose routes other
//! processes answer.
//!
//! Runs on shard 0 only, for the whole node: the topic table is node-wide, so one
//! registration describes every shard. What it sends is REGISTER_BROKER (103) with the
//! whole topic table ([`crate::remoting::register_broker`]), to every name server at once
//! and independently: one that is down or slow delays none of the others.
//!
//! When, and why:
//! - at once when the shard serves, so a route exists before the first producer asks;
//! - every `registerNameServerPeriod` (a name server drops a broker silent for its
//!   heartbeat timeout, 120 s);
//! - within [`CHANGE_POLL`] of a change of the topic table (its data version moved), so a
//!   topic created on this broker reaches the routes without waiting for the period;
//! - UNREGISTER_BROKER (104) to each at a clean stop, so routes stop naming this broker at
//!   once instead of after the heartbeat timeout.
//!
//! Each attempt is bounded by `registerBrokerTimeoutMills` (connect and answer together).
//! A failure is logged when a name server's state changes (reachable to not, and back),
//! not on every round, so a dead name server does not fill the log.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use crate::broker::tables::topics::{DataVersion, TopicTable};
use crate::broker::Broker;
use crate::client::Client;
use crate::net::Transport;
use crate::remoting::codes::response;
use crate::remoting::register_broker::{
    self, RegisterBrokerBody, RegisterBrokerHeader, RegisteredTopic, UnregisterBrokerHeader,
};
use crate::remoting::RemotingCommand;
use crate::shard::service::{LocalFuture, ShardService, ShardTask};

use super::replication::MasterAddress;

/// How often the topic table's data version is looked at between registrations: the
/// bound on how late a topic change reaches the name servers.
pub const CHANGE_POLL: Duration = Duration::from_secs(1);

/// What the registration of one node needs besides its broker.
#[derive(Clone, Debug)]
pub struct RegistrationSettings {
    /// The name servers of `namesrvAddr`, resolved at start.
    pub name_servers: Vec<SocketAddr>,
    pub broker_id: u64,
    /// Where slaves of this broker replicate from (`haServerAddr`).
    pub ha_server_addr: SocketAddr,
    pub period: Duration,
    pub timeout: Duration,
    /// Where a slave learns its master's HA address from the name servers' answers.
    pub master: MasterAddress,
    /// `haMasterAddress` is set: it wins over what name servers answer.
    pub master_configured: bool,
    /// Controller mode: the master's broker address the controllers elected. An answer
    /// naming another master (the promoted one has not registered yet) teaches nothing,
    /// and the registration is repeated within [`CHANGE_POLL`] until one names it.
    pub expected_master: Option<SocketAddr>,
    /// Controller mode: set when the run stops for a role change, whose next run registers
    /// under its new id at once. Such a stop does not unregister: the name servers would
    /// drop the group's master entry (the id 0 this run held, which the new master may
    /// hold by now) or its slave, and routes would lack it until a registration period.
    pub role_change: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Controller mode, a master run: its write lease. A master whose lease lapsed may
    /// have been replaced (a paused one resuming): it does not register as the group's
    /// id 0 then, which would take the route from the new master.
    pub lease: Option<crate::store::WriteLease>,
}

/// One name server as the registration sees it.
struct NameServerLink {
    addr: SocketAddr,
    /// The connection, kept between rounds; `None` before the first or after a failure.
    client: RefCell<Option<Client>>,
    /// Whether the last attempt succeeded: what a state change is logged against.
    reachable: Cell<Option<bool>>,
}

/// The registration service of shard 0; its state is shared with its task and its stop.
pub struct Registration<T: Transport> {
    inner: Rc<Inner<T>>,
}

struct Inner<T: Transport> {
    broker: Rc<Broker>,
    settings: RegistrationSettings,
    transport: T,
    links: Vec<Rc<NameServerLink>>,
    /// A name server's last answer named a master other than [`RegistrationSettings::expected_master`].
    stale_master: Cell<bool>,
}

/// Why one registration with one name server failed.
#[derive(Debug, thiserror::Error)]
enum RegisterError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("request failed: {0}")]
    Request(std::io::Error),
    #[error("answered {code} ({remark})")]
    Refused { code: i32, remark: String },
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

impl<T: Transport> Registration<T> {
    /// The service for `broker`, or `None` when there is no name server to register with.
    pub fn open(
        broker: &Rc<Broker>,
        settings: RegistrationSettings,
        transport: T,
    ) -> Option<Registration<T>> {
        if settings.name_servers.is_empty() {
            return None;
        }
        let links = settings
            .name_servers
            .iter()
            .map(|&addr| {
                Rc::new(NameServerLink {
                    addr,
                    client: RefCell::new(None),
                    reachable: Cell::new(None),
                })
            })
            .collect();
        let inner = Rc::new(Inner {
            broker: broker.clone(),
            settings,
            transport,
            links,
            stale_master: Cell::new(false),
        });
        Some(Registration { inner })
    }
}

impl<T: Transport> Inner<T> {
    /// What this broker says of itself when it registers.
    fn header(&self) -> RegisterBrokerHeader {
        let identity = self.broker.identity();
        RegisterBrokerHeader {
            broker_name: identity.broker_name.clone(),
            broker_addr: identity.store_host.to_string(),
            cluster_name: identity.cluster_name.clone(),
            ha_server_addr: self.settings.ha_server_addr.to_string(),
            broker_id: broker_id(self.settings.broker_id),
            heartbeat_timeout_millis: None,
            enable_acting_master: false,
        }
    }

    /// Registers with every name server at once; returns when each answered or timed out.
    /// A name server this broker is not registered with yet gets the [`join_body`] first.
    async fn register_all(self: &Rc<Self>) {
        if self
            .settings
            .lease
            .as_ref()
            .is_some_and(|lease| !lease.holds())
        {
            tracing::debug!(
                "not registering as master: the write lease from the controllers lapsed"
            );
            self.stale_master.set(true);
            return;
        }
        let header = self.header();
        let body = registration_body(&self.broker.topics);
        let join =
            join_body(&body).map(|join| register_broker::encode_register_broker(&header, &join));
        let full = register_broker::encode_register_broker(&header, &body);
        let rounds = self.links.iter().map(|link| {
            let (this, link, join, full) = (self.clone(), link.clone(), join.clone(), full.clone());
            async move {
                if let Some(join) = join.filter(|_| link.reachable.get() != Some(true)) {
                    this.send_to(&link, join, "register").await;
                }
                this.send_to(&link, full, "register").await;
            }
        });
        join_all(rounds).await;
    }

    /// Unregisters from every name server at once (a clean stop).
    async fn unregister_all(self: &Rc<Self>) {
        let header = self.header();
        let command = register_broker::encode_unregister_broker(&UnregisterBrokerHeader {
            broker_name: header.broker_name,
            broker_addr: header.broker_addr,
            cluster_name: header.cluster_name,
            broker_id: header.broker_id,
        });
        self.send_to_all(command, "unregister").await;
    }

    /// Sends `command` to every name server concurrently and waits for every outcome.
    async fn send_to_all(self: &Rc<Self>, command: RemotingCommand, what: &'static str) {
        let rounds = self.links.iter().map(|link| {
            let (this, command, link) = (self.clone(), command.clone(), link.clone());
            async move { this.send_to(&link, command, what).await }
        });
        join_all(rounds).await;
    }

    /// Sends `command` to one name server within the timeout and logs a change of its state.
    async fn send_to(&self, link: &NameServerLink, command: RemotingCommand, what: &'static str) {
        let timeout = self.settings.timeout;
        let outcome = tokio::time::timeout(timeout, self.exchange(link, command))
            .await
            .unwrap_or(Err(RegisterError::TimedOut(timeout)));
        if outcome.is_err() {
            link.client.replace(None);
        }
        let was = link.reachable.replace(Some(outcome.is_ok()));
        match outcome {
            Ok(()) if was != Some(true) => {
                tracing::info!(name_server = %link.addr, "{what}ed with the name server");
            }
            Err(why) if was != Some(false) || what == "unregister" => {
                tracing::warn!(name_server = %link.addr, "cannot {what} with the name server: {why}");
            }
            _ => {}
        }
    }

    /// One request and its answer on the link's connection (made if there is none).
    async fn exchange(
        &self,
        link: &NameServerLink,
        command: RemotingCommand,
    ) -> Result<(), RegisterError> {
        let kept = link.client.borrow().clone();
        let client = match kept {
            Some(client) if !client.is_closed() => client,
            _ => {
                let client = Client::connect_over(&self.transport, link.addr)
                    .await
                    .map_err(RegisterError::Connect)?;
                client.set_timeout(self.settings.timeout);
                link.client.replace(Some(client.clone()));
                client
            }
        };
        let answer = client
            .request(command)
            .await
            .map_err(RegisterError::Request)?;
        if answer.code != response::SUCCESS {
            return Err(RegisterError::Refused {
                code: answer.code,
                remark: answer.remark.unwrap_or_default(),
            });
        }
        self.learn_master(&answer);
        Ok(())
    }

    /// A slave's registration is answered with its master's HA address (when the master
    /// registered): where its shards stream from, unless `haMasterAddress` says; and its
    /// master's broker address, where it copies the master's tables from.
    fn learn_master(&self, answer: &RemotingCommand) {
        if self.settings.broker_id == 0 {
            return;
        }
        let result = register_broker::decode_register_response(answer);
        let named: Option<SocketAddr> = result.master_addr.as_deref().and_then(|a| a.parse().ok());
        if let Some(expected) = self.settings.expected_master {
            if named != Some(expected) {
                self.stale_master.set(true);
                return;
            }
        }
        if let Some(addr) = named {
            self.settings.master.learned_broker(addr);
        }
        let learned = result
            .ha_server_addr
            .as_deref()
            .and_then(|addr| addr.parse().ok());
        if let Some(addr) = learned {
            self.settings
                .master
                .learned(addr, self.settings.master_configured);
        }
    }

    /// Registers now, then every period and within [`CHANGE_POLL`] of a topic change.
    async fn run(self: Rc<Self>) {
        let mut registered_version = self.broker.topics.data_version();
        self.register_all().await;
        let mut since = tokio::time::Instant::now();
        let mut ticks = tokio::time::interval(CHANGE_POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let version = self.broker.topics.data_version();
            let stale = self.stale_master.replace(false);
            if version == registered_version && since.elapsed() < self.settings.period && !stale {
                continue;
            }
            registered_version = version;
            since = tokio::time::Instant::now();
            self.register_all().await;
        }
    }
}

impl<T: Transport> ShardService for Registration<T> {
    fn name(&self) -> &'static str {
        "name server registration"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        vec![ShardTask::new(
            "name server registration",
            self.inner.clone().run(),
        )]
    }

    fn stop(&self) -> LocalFuture<()> {
        let inner = self.inner.clone();
        let changing = self
            .inner
            .settings
            .role_change
            .as_ref()
            .is_some_and(|flag| flag.load(std::sync::atomic::Ordering::Acquire));
        Box::pin(async move {
            if !changing {
                inner.unregister_all().await;
            }
        })
    }
}

/// RocketMQ's `TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`: the template topic a Java
/// producer asks the name servers for when its own topic has no route; it then sends to
/// the brokers the template's route names, and they create the topic.
const AUTO_CREATE_TEMPLATE: &str = "TBW102";
/// The template's perm in a Java broker's registration: read, write and inherit
/// (`PermName.PERM_INHERIT`, 1).
const AUTO_CREATE_TEMPLATE_PERM: i32 = 7;

/// The register body: every topic of the node-wide table (system, retry and DLQ topics
/// included, as Java sends them), the table's data version, and, while the broker
/// creates topics on their first send (`autoCreateTopicEnable`), the template topic
/// [`AUTO_CREATE_TEMPLATE`] as Java's table holds it: without it a producer going through
/// standalone name servers never finds a broker to auto-create its topic on. A live change
/// of `autoCreateTopicEnable` reaches the name servers with the next registration.
fn registration_body(table: &TopicTable) -> RegisterBrokerBody {
    let DataVersion {
        counter,
        state_version,
        timestamp,
    } = table.data_version();
    let mut topics: std::collections::BTreeMap<String, RegisteredTopic> = table
        .all()
        .into_iter()
        .map(|config| {
            let topic = RegisteredTopic {
                topic_name: config.topic_name.clone(),
                read_queue_nums: queue_count(config.read_queue_nums),
                write_queue_nums: queue_count(config.write_queue_nums),
                perm: config.perm,
                topic_filter_type: config.topic_filter_type,
                topic_sys_flag: config.topic_sys_flag,
                order: config.order,
                attributes: config.attributes,
            };
            (config.topic_name, topic)
        })
        .collect();
    if table.auto_create() && !topics.contains_key(AUTO_CREATE_TEMPLATE) {
        let queues = queue_count(table.default_queue_nums());
        let mut template = RegisteredTopic::new(AUTO_CREATE_TEMPLATE, queues);
        template.perm = AUTO_CREATE_TEMPLATE_PERM;
        topics.insert(AUTO_CREATE_TEMPLATE.into(), template);
    }
    RegisterBrokerBody {
        topics,
        data_version: register_broker::DataVersion {
            timestamp,
            counter,
            state_version,
        },
        filter_server_list: Vec::new(),
    }
}

/// The registration sent before `body` to a name server this broker is not registered
/// with (none answered it yet, or the last answer was a failure), when `body` holds exactly
/// one topic (a fresh broker's auto-create template alone): the same with no topics and a
/// data version one count below the body's, so the full one always reads as a change.
///
/// RocketMQ 5.x's name server reads a one-topic body from a broker it does not list yet as
/// a single-topic update sent before the broker's first registration and refuses it
/// ("register broker failed", `RouteInfoManager.registerBroker`), so such a broker would
/// never join a RocketMQ cluster until it held a second topic. The empty body joins; the
/// full one then adds the topic on every name server (RocketMQ's, ringmq's). Only before
/// the first success: sent every round, it would take the topic off ringmq's routes
/// between the two registrations.
fn join_body(body: &RegisterBrokerBody) -> Option<RegisterBrokerBody> {
    (body.topics.len() == 1).then(|| RegisterBrokerBody {
        topics: Default::default(),
        data_version: register_broker::DataVersion {
            counter: body.data_version.counter.wrapping_sub(1),
            ..body.data_version
        },
        filter_server_list: body.filter_server_list.clone(),
    })
}

/// A queue count as the wire's i32 (counts are bounded far below it by `MAX_QUEUE_NUMS`).
fn queue_count(count: u32) -> i32 {
    i32::try_from(count).unwrap_or_else(|_| panic!("queue count {count} exceeds i32"))
}

/// The broker id as the wire's long (`brokerId` is bounded by i64::MAX at parse).
fn broker_id(id: u64) -> i64 {
    i64::try_from(id).unwrap_or_else(|_| panic!("broker id {id} exceeds i64"))
}

/// Runs `futures` concurrently on the current task and waits for all of them.
async fn join_all<F: std::future::Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|future| future.as_mut().poll(cx).is_pending());
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_topic_is_registered_while_topics_are_auto_created() {
        let dir = tempfile::tempdir().unwrap();
        let creating = TopicTable::load(dir.path(), true, 4).unwrap();
        let body = registration_body(&creating);
        let template = &body.topics[AUTO_CREATE_TEMPLATE];
        let shape = (template.read_queue_nums, template.write_queue_nums);
        assert_eq!((shape, template.perm), ((4, 4), 7));
        let not_creating = TopicTable::load(dir.path(), false, 4).unwrap();
        let body = registration_body(&not_creating);
        assert!(body.topics.is_empty(), "{:?}", body.topics);
    }

    #[test]
    fn a_one_topic_registration_has_an_empty_join_of_another_data_version() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = registration_body(&TopicTable::load(dir.path(), true, 4).unwrap());
        assert_eq!(fresh.topics.len(), 1, "{fresh:?}");
        let join = join_body(&fresh).expect("a one-topic body has a join");
        assert!(join.topics.is_empty(), "{join:?}");
        assert_ne!(join.data_version, fresh.data_version);
        for held in [0, 2] {
            let mut body = fresh.clone();
            body.topics.clear();
            for i in 0..held {
                let name = format!("T{i}");
                body.topics
                    .insert(name.clone(), RegisteredTopic::new(&name, 4));
            }
            assert_eq!(join_body(&body), None, "{held} topics: no join");
        }
    }
}
