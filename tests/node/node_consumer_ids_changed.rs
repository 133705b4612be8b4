//! NOTIFY_CONSUMER_IDS_CHANGED (40): when a consumer group gains a member (heartbeat) or
//! loses one (its connection closes), the node sends every remaining member a oneway
//! request naming the group, over that member's own connection, whichever shard holds it;
//! a closed connection takes its client out of the group at once.

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const GROUP: &str = "notified-group";
const TOPIC: &str = "Watched";

/// What this test reads off a [`Raw`] connection: the notifications among its responses.
trait Notices {
    /// Sends `command`; returns its response and the groups of the notifications that
    /// arrived before it, in order.
    fn call_noting(&mut self, command: RemotingCommand) -> (RemotingCommand, Vec<String>);
    fn notification(&mut self) -> RemotingCommand;
}

impl Notices for Raw {
    fn call_noting(&mut self, command: RemotingCommand) -> (RemotingCommand, Vec<String>) {
        let opaque = self.send(command);
        let notices = std::cell::RefCell::new(Vec::new());
        let answer = self.next(Duration::from_secs(10), |f| {
            if f.code == request::NOTIFY_CONSUMER_IDS_CHANGED && !f.is_response() {
                notices
                    .borrow_mut()
                    .push(f.ext_fields["consumerGroup"].to_string());
            }
            f.is_response() && f.opaque == opaque
        });
        (answer, notices.into_inner())
    }

    fn notification(&mut self) -> RemotingCommand {
        self.next(Duration::from_secs(10), |f| {
            f.code == request::NOTIFY_CONSUMER_IDS_CHANGED && !f.is_response()
        })
    }
}

/// `client_id`'s heartbeat as a member of the group, subscribed to every tag.
fn heartbeat(client_id: &str) -> RemotingCommand {
    common::consumer_heartbeat(client_id, GROUP, TOPIC, "*")
}

fn members(raw: &mut Raw) -> Vec<String> {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), GROUP);
    let answer = raw.call(RemotingCommand::request(
        request::GET_CONSUMER_LIST_BY_GROUP,
        fields,
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let mut ids: Vec<String> = body["consumerIdList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[test]
fn members_are_told_when_their_group_gains_or_loses_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.shards = 2;
    let node = ringmq::node::start(options).unwrap();

    let mut a = Raw::connect(node.addr());
    assert_eq!(a.call(heartbeat("client-a")).code, response::SUCCESS);
    // Several connections, so some land on the other shard than `a`'s.
    let mut others: Vec<Raw> = (0..4).map(|_| Raw::connect(node.addr())).collect();
    for (i, other) in others.iter_mut().enumerate() {
        let answer = other.call(heartbeat(&format!("client-{i}")));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let notice = a.notification();
        assert_eq!(&notice.ext_fields["consumerGroup"], GROUP, "{notice:?}");
        assert!(notice.is_oneway(), "{notice:?}");
    }
    assert_eq!(members(&mut a).len(), 5);

    // A heartbeat that changes nothing notifies nobody: the next notice `a` sees is the
    // one the close below causes, and by then client-3 is gone.
    assert_eq!(
        others[0].call(heartbeat("client-0")).code,
        response::SUCCESS
    );
    drop(others.pop());
    a.notification();
    assert_eq!(
        members(&mut a),
        vec!["client-0", "client-1", "client-2", "client-a"]
    );
    node.shutdown().unwrap();
}

/// A heartbeat of `client_id` as a consumer of each of `groups`.
fn heartbeat_in(client_id: &str, groups: &[&str]) -> RemotingCommand {
    let consumers: Vec<serde_json::Value> = groups
        .iter()
        .map(|group| {
            serde_json::json!({"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "subscriptionDataSet": [{"topic": TOPIC,
                "subString": "*", "subVersion": 1}]})
        })
        .collect();
    let body = serde_json::json!({"clientID": client_id, "consumerDataSet": consumers});
    RemotingCommand::request(request::HEART_BEAT, ExtFields::new()).with_body(body.to_string())
}

fn list(group: &str) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), group);
    RemotingCommand::request(request::GET_CONSUMER_LIST_BY_GROUP, fields)
}

#[test]
fn a_closed_connection_notifies_the_members_of_exactly_the_groups_its_clients_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    // One shard: a close is handled, notices and all, before the next request is.
    options.shards = 1;
    let node = ringmq::node::start(options).unwrap();

    let mut a = Raw::connect(node.addr());
    let mut b = Raw::connect(node.addr());
    let (answer, notices) = a.call_noting(heartbeat_in("a@1", &["g1"]));
    assert_eq!(
        (answer.code, notices),
        (response::SUCCESS, vec!["g1".into()])
    );
    let (answer, notices) = b.call_noting(heartbeat_in("b@1", &["g2", "kept"]));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(notices, ["g2", "kept"]);
    // Two clients share connection x: x1 in g1 and g2, x2 in g2.
    let mut x = Raw::connect(node.addr());
    for (client, groups) in [("x1@1", &["g1", "g2"][..]), ("x2@1", &["g2"][..])] {
        let answer = x.call(heartbeat_in(client, groups));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    assert_eq!(a.call_noting(list("g1")).1, ["g1"]);
    assert_eq!(b.call_noting(list("g2")).1, ["g2", "g2"]);

    drop(x);
    // a hears of g1 once the close is handled; b then holds one notice, for g2 (both of
    // its clients left it in the same close), and none for the group x never joined.
    let notice = a.notification();
    assert_eq!(&notice.ext_fields["consumerGroup"], "g1", "{notice:?}");
    let (answer, notices) = b.call_noting(list("g2"));
    assert_eq!(notices, ["g2"]);
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["consumerIdList"], serde_json::json!(["b@1"]));
    let (answer, notices) = a.call_noting(list("g1"));
    assert!(notices.is_empty(), "{notices:?}");
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["consumerIdList"], serde_json::json!(["a@1"]));
    node.shutdown().unwrap();
}
