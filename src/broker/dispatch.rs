//! The request dispatch: which code each request code reaches, and on which shard (D3).
//!
//! What this file owns: [`Broker::handle`] (a request as it arrived: counted, routed to
//! the shard owning its queue or answered here), [`Broker::handle_owned`] (the one match
//! from request code to handler), the routing decision itself (`owner_of`: a named queue's
//! owner, a delayed send's level queue, a queue picked for a send that leaves it to the
//! broker, a record's shard by its offset), and the [`OwnerHandler`] and
//! [`RequestHandler`] impls through which the shard's mailbox and connections reach the
//! broker.
//!
//! A request that names a queue ([`crate::shard::routing::queue_fields`]) is first routed:
//! if another shard owns the queue, [`Broker::handle`] forwards it over that shard's
//! bounded mailbox and returns the owner's answer; otherwise [`Broker::handle_owned`]
//! answers it here. A send that leaves the queue to the broker (`queueId` -1) gets a queue
//! this shard owns when the topic has one. A delayed send (`DELAY` above 0) is routed to
//! the owner of its level's `SCHEDULE_TOPIC_XXXX` queue instead, where its scheduler runs.
//!
//! Invariant: every request gets exactly one response (or none when it is oneway): an
//! unknown code is REQUEST_CODE_NOT_SUPPORTED, never a closed connection.
//!
//! May import: every folder of the broker (it is the one place that names them all).

use std::net::SocketAddr;
use std::rc::Rc;

use crate::metrics::{Family, ShardMetrics};
use crate::remoting::codes::{request, response};
use crate::remoting::send_header::SendMessageRequestHeader;
use crate::remoting::RemotingCommand;
use crate::server::connection::{Outbound, Reply, RequestHandler};
use crate::shard::mailbox::{run_owned, DirectReply, NotForwarded, OwnerHandler};
use crate::shard::routing;
use crate::store::topic::{validate_topic, SCHEDULE_TOPIC};

use super::admin::{
    broker_config_requests, broker_consume_stats, clone_offset, consume_by_who, consume_stats,
    consumer_connections, consumer_running_info, ha_status, producer_connections, reset_offset,
    runtime_info, stats_data, subscription_group_requests, topic_config_request, topic_requests,
    topic_stats,
};
use super::naming::names;
use super::requests::{
    assignment, consumer_offset_requests, consumers, lock_requests, offsets, pull, query,
    request_mode_requests, send, send_back,
};
use super::{delay, pop, timer, Broker};

impl Broker {
    /// Handles one request as it arrived on this shard: forwards it to the shard that
    /// owns its queue, or answers it here. `None` for requests that take no response.
    pub async fn handle(
        &self,
        mut request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        // Counted here, where the request arrived, not again on the owner shard.
        let started = std::time::Instant::now();
        let code = request.code;
        self.metrics.request(code);
        // The marker of the shards' own copies ([`fan_out`]) is never a client's to set.
        request.ext_fields.remove(query::SHARD_ONLY);
        request.ext_fields.remove(pop::NO_PARK);
        let response = match self.owner_of(&mut request) {
            Some(owner) if owner != self.shard.id() => {
                ShardMetrics::add(&self.metrics.forwarded, 1);
                Box::pin(self.shard.forward(owner, request, peer)).await
            }
            _ => self.handle_owned(request, peer).await,
        };
        if let Some(response) = &response {
            self.metrics
                .response(response.code, Family::of(code), started.elapsed());
        }
        response
    }

    /// The shard that must answer `request`, if it names a queue. A send that leaves the
    /// queue to the broker gets one here (written into its header), preferring a queue of
    /// this shard; a header too broken to route is answered locally, with the handler's
    /// own error.
    pub(in crate::broker) fn owner_of(&self, request: &mut RemotingCommand) -> Option<u8> {
        if matches!(
            request.code,
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2
        ) {
            // Before routing: a retry that is due for the DLQ goes to the DLQ's owner.
            send_back::dead_letter_if_due(self, request);
        }
        if self.shard.count() == 1 {
            return None;
        }
        if let Some(shard) = timer::progress_requests::routed_shard(request, self.shard.count()) {
            // A shard's timer progress is that shard's to answer (or to take, on a slave).
            return Some(shard);
        }
        if request.code == request::END_TRANSACTION {
            // The half is in the CommitLog its offset's top byte names (D4).
            return query::offset_owner(request, "commitLogOffset", self.shard.count());
        }
        if request.code == request::VIEW_MESSAGE_BY_ID
            || request.code == request::CONSUMER_SEND_MSG_BACK
        {
            // Both name a record by its CommitLog offset: the shard is its top byte (D4).
            return query::view_owner(request, self.shard.count());
        }
        let (fields, topic, queue_id) = routing::named_queue(request)?;
        let delay_level = if fields.is_send {
            self.delay_level_of(request)
        } else {
            None
        };
        if let (Some(level), true) = (delay_level, queue_id >= 0) {
            // Stored on the owner of its level's queue (`delay`); the real queue needs
            // picking here only when the broker is to pick it.
            return Some(self.shard.owner(SCHEDULE_TOPIC, level as i32 - 1));
        }
        if queue_id >= 0 {
            return Some(self.shard.owner(topic, queue_id));
        }
        // A send the broker refuses is answered here, before a topic is created for it.
        if !fields.is_send
            || validate_topic(topic).is_err()
            || names::is_not_allowed_send_topic(topic)
        {
            return None;
        }
        let topic = topic.to_owned();
        let config = self.topics.get_or_create(&topic, || self.now_ms()).ok()?;
        let mut counter = self.next_queue.get();
        let queue_id = routing::pick_queue(
            &topic,
            config.write_queue_nums,
            self.shard.id(),
            self.shard.count(),
            &mut counter,
        );
        self.next_queue.set(counter);
        request.put_ext(fields.queue_id, queue_id);
        Some(match delay_level {
            Some(level) => self.shard.owner(SCHEDULE_TOPIC, level as i32 - 1),
            None => self.shard.owner(&topic, queue_id),
        })
    }

    /// The delay level a single-message send asks for, as [`delay::requested_level`]
    /// reads it on the shard that stores it; `None` for a plain send, a batch (refused
    /// where it lands) or a header too broken to say (answered where it lands).
    fn delay_level_of(&self, request: &RemotingCommand) -> Option<u32> {
        let properties = match request.code {
            request::SEND_MESSAGE => request.opt_str("properties")?,
            request::SEND_MESSAGE_V2 => request.opt_str("i")?,
            _ => return None,
        };
        if !properties.contains(delay::DELAY) {
            return None;
        }
        let header = SendMessageRequestHeader::from_command(request).ok()?;
        delay::requested_level(
            &header.properties,
            header.sys_flag,
            &self.config.delay_levels,
        )
        .ok()
        .flatten()
    }

    /// Answers a request whose queue (if it names one) this shard owns.
    pub async fn handle_owned(
        &self,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        // Tried in turn; each gives the request back when the code is not one of its own.
        let request = match self.client_request(request, peer).await {
            Ok(response) => return Some(response),
            Err(request) => request,
        };
        let request = match self.engine_request(request).await {
            Ok(response) => return Some(response),
            Err(request) => request,
        };
        if request.code == crate::remoting::codes::request::NOTIFY_BROKER_ROLE_CHANGED {
            if let Some(notices) = &self.config.role_notices {
                notices.notify_one();
                return Some(RemotingCommand::response_to(
                    &request,
                    response::SUCCESS,
                    None,
                ));
            }
        }
        let response = match self.admin_request(request, peer).await {
            Ok(response) => response,
            Err(request) => RemotingCommand::response_to(
                &request,
                response::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(" request type {} not supported", request.code)),
            ),
        };
        Some(response)
    }

    /// The requests of [`super::requests`]: what clients send in their normal work.
    async fn client_request(
        &self,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Result<RemotingCommand, RemotingCommand> {
        Ok(match request.code {
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2 => {
                Box::pin(send::send_message(self, &request, peer)).await
            }
            request::SEND_BATCH_MESSAGE => Box::pin(send::send_batch(self, &request, peer)).await,
            request::PULL_MESSAGE | request::LITE_PULL_MESSAGE => {
                Box::pin(pull::pull(self, &request)).await
            }
            request::QUERY_MESSAGE => Box::pin(query::query_message(self, &request, peer)).await,
            request::VIEW_MESSAGE_BY_ID => query::view_message(self, &request),
            request::GET_MAX_OFFSET => offsets::max_offset(self, &request),
            request::GET_MIN_OFFSET => offsets::min_offset(self, &request),
            request::SEARCH_OFFSET_BY_TIMESTAMP => offsets::search_by_timestamp(self, &request),
            request::GET_EARLIEST_MSG_STORETIME => offsets::earliest_store_time(self, &request),
            request::QUERY_CONSUMER_OFFSET => consumer_offset_requests::query(self, &request),
            request::HEART_BEAT => consumers::heartbeat(self, &request, peer),
            request::UNREGISTER_CLIENT => consumers::unregister_client(self, &request),
            request::GET_CONSUMER_LIST_BY_GROUP => consumers::consumer_list(self, &request),
            request::QUERY_ASSIGNMENT => assignment::query_assignment(self, &request),
            request::CONSUMER_SEND_MSG_BACK => Box::pin(send_back::send_back(self, &request)).await,
            request::LOCK_BATCH_MQ => lock_requests::lock_batch(self, &request, peer),
            request::UNLOCK_BATCH_MQ => lock_requests::unlock_batch(self, &request),
            request::SET_MESSAGE_REQUEST_MODE => {
                request_mode_requests::set_message_request_mode(self, &request).await
            }
            _ => return Err(request),
        })
    }

    /// The requests the feature engines answer: POP, the delay cursors, and a shard's timer
    /// progress. (An UPDATE_CONSUMER_OFFSET goes through POP too: a commit may start a
    /// popped queue over.)
    async fn engine_request(
        &self,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, RemotingCommand> {
        Ok(match request.code {
            request::UPDATE_CONSUMER_OFFSET => {
                Box::pin(pop::reset::update_consumer_offset(self, &request)).await
            }
            request::POP_MESSAGE => Box::pin(pop::pop_message(self, &request)).await,
            request::ACK_MESSAGE => Box::pin(pop::ack_message(self, &request)).await,
            request::BATCH_ACK_MESSAGE => Box::pin(pop::batch_ack(self, &request)).await,
            request::CHANGE_MESSAGE_INVISIBLETIME => {
                Box::pin(pop::change_invisible_time(self, &request)).await
            }
            request::END_TRANSACTION => {
                Box::pin(crate::broker::transaction::end_transaction(self, &request)).await
            }
            request::GET_ALL_DELAY_OFFSET => delay::offsets::get_all(self, &request),
            request::RINGMQ_GET_TIMER_PROGRESS => {
                timer::progress_requests::get_progress(self, &request)
            }
            request::RINGMQ_TAKE_TIMER_PROGRESS => {
                Box::pin(timer::progress_requests::take_progress(self, &request)).await
            }
            _ => return Err(request),
        })
    }

    /// The requests of [`super::admin`]: tools and dashboards.
    async fn admin_request(
        &self,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Result<RemotingCommand, RemotingCommand> {
        Ok(match request.code {
            request::UPDATE_AND_CREATE_TOPIC => {
                topic_requests::update_and_create(self, &request).await
            }
            request::GET_ALL_TOPIC_CONFIG => topic_requests::get_all(self, &request),
            request::GET_ALL_CONSUMER_OFFSET => consumer_offset_requests::get_all(self, &request),
            request::GET_ALL_MESSAGE_REQUEST_MODE => request_mode_requests::get_all(self, &request),
            request::DELETE_TOPIC_IN_BROKER => topic_requests::delete(self, &request).await,
            request::GET_TOPIC_CONFIG => topic_config_request::get_topic_config(self, &request),
            request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => {
                subscription_group_requests::get_all(self, &request)
            }
            request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => {
                Box::pin(subscription_group_requests::update_and_create(
                    self, &request,
                ))
                .await
            }
            request::DELETE_SUBSCRIPTIONGROUP => {
                Box::pin(subscription_group_requests::delete(self, &request)).await
            }
            request::GET_BROKER_CONFIG => broker_config_requests::get_broker_config(self, &request),
            request::UPDATE_BROKER_CONFIG => {
                broker_config_requests::update_broker_config(self, &request)
            }
            _ => return Box::pin(self.admin_figures_request(request, peer)).await,
        })
    }

    /// The admin requests that read the node's figures, connections and progress, or move
    /// a group's offsets.
    async fn admin_figures_request(
        &self,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Result<RemotingCommand, RemotingCommand> {
        Ok(match request.code {
            request::GET_BROKER_RUNTIME_INFO => {
                Box::pin(runtime_info::runtime_info(self, &request, peer)).await
            }
            request::GET_BROKER_HA_STATUS => {
                Box::pin(ha_status::ha_status(self, &request, peer)).await
            }
            request::RINGMQ_LIST_PENDING_HALVES => {
                Box::pin(crate::broker::transaction::pending::list_pending(
                    self, &request, peer,
                ))
                .await
            }
            request::GET_TOPIC_STATS_INFO => {
                Box::pin(topic_stats::topic_stats(self, &request, peer)).await
            }
            request::GET_CONSUME_STATS => {
                Box::pin(consume_stats::consume_stats(self, &request, peer)).await
            }
            request::GET_BROKER_CONSUME_STATS => {
                Box::pin(broker_consume_stats::broker_consume_stats(
                    self, &request, peer,
                ))
                .await
            }
            request::VIEW_BROKER_STATS_DATA => stats_data::view_broker_stats_data(&request),
            request::INVOKE_BROKER_TO_RESET_OFFSET => {
                Box::pin(reset_offset::reset_offset(self, &request, peer)).await
            }
            request::CLONE_GROUP_OFFSET => clone_offset::clone_group_offset(self, &request),
            request::GET_CONSUMER_CONNECTION_LIST => {
                consumer_connections::consumer_connections(self, &request)
            }
            request::GET_PRODUCER_CONNECTION_LIST => {
                producer_connections::producer_connections(self, &request)
            }
            request::QUERY_TOPIC_CONSUME_BY_WHO => {
                consume_by_who::query_topic_consume_by_who(self, &request)
            }
            request::GET_CONSUMER_RUNNING_INFO => {
                Box::pin(consumer_running_info::consumer_running_info(self, &request)).await
            }
            _ => return Err(request),
        })
    }
}

impl OwnerHandler for Broker {
    /// A forwarded single-message send is stored without a task, its response going
    /// straight to the asking connection; anything else runs in a task.
    fn handle_owned_now(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
        reply: DirectReply,
    ) {
        if matches!(
            request.code,
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2
        ) {
            send::send_message_then(&self, &request, peer, move |response| {
                reply.answer(Some(response))
            });
        } else {
            run_owned(self, request, peer, reply);
        }
    }

    async fn handle_owned(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        Broker::handle_owned(&self, request, peer).await
    }

    /// A delayed message another shard's scheduler delivers to a queue of this shard.
    fn put_owned(
        self: Rc<Self>,
        record: crate::store::record::RecordInput,
        reply: crate::shard::mailbox::PutReply,
    ) {
        self.store.put_with(record, move |outcome| {
            // The scheduler may have stopped meanwhile; its cursor did not move then.
            let _ = reply.send(outcome);
        });
    }
}

impl RequestHandler for Broker {
    /// Takes a single-message send whose queue this shard owns: checked and queued in the
    /// store here, answered from the store's callback (see [`send::send_message_then`]).
    /// Counted in the metrics as [`Broker::handle`] counts. Anything else goes back.
    fn handle_now(
        self: Rc<Self>,
        mut request: RemotingCommand,
        peer: SocketAddr,
        reply: Reply,
    ) -> Option<RemotingCommand> {
        let code = request.code;
        if !matches!(code, request::SEND_MESSAGE | request::SEND_MESSAGE_V2) {
            return Some(request);
        }
        let started = std::time::Instant::now();
        let metrics = self.metrics.clone();
        // Counted as `handle` counts: here, where the request arrived, whoever stores it.
        let respond = move |response: RemotingCommand| {
            metrics.response(response.code, Family::of(code), started.elapsed());
            reply.send(response);
        };
        match self.owner_of(&mut request) {
            Some(owner) if owner != self.shard.id() => {
                match self.shard.try_forward(owner, request, peer, respond) {
                    Ok(()) | Err(NotForwarded::Unavailable) => {}
                    // A full mailbox: a task waits for room, as `handle` does.
                    Err(NotForwarded::Full(request)) => return Some(*request),
                }
                ShardMetrics::add(&self.metrics.forwarded, 1);
            }
            _ => send::send_message_then(&self, &request, peer, respond),
        }
        self.metrics.request(code);
        None
    }

    fn connection_opened(&self, peer: SocketAddr, outbound: Outbound) {
        self.links.open(peer, outbound);
    }

    /// The clients leave their groups (and the members left are told) in
    /// [`consumers::reap_closed_connections`], a bounded step per turn of the shard.
    fn response_arrived(&self, peer: SocketAddr, response: RemotingCommand) {
        self.links.answered(peer, response);
    }

    fn connection_closed(&self, peer: SocketAddr) {
        self.links.close(peer);
        self.locks.connection_closed(peer);
        self.closed.push(peer);
    }

    async fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        Broker::handle(&self, request, peer).await
    }
}
