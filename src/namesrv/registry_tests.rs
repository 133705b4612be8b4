use super::*;
use crate::remoting::register_broker::{RegisterBrokerBody, RegisterBrokerHeader, RegisteredTopic};

fn request(
    name: &str,
    id: i64,
    addr: &str,
    topics: &[(&str, i32)],
    counter: i64,
) -> RegisterBrokerRequest {
    let mut body = RegisterBrokerBody::default();
    for (topic, queues) in topics {
        body.topics
            .insert((*topic).to_owned(), RegisteredTopic::new(topic, *queues));
    }
    body.data_version.counter = counter;
    RegisterBrokerRequest {
        header: RegisterBrokerHeader {
            broker_name: name.into(),
            broker_addr: addr.into(),
            cluster_name: "DefaultCluster".into(),
            ha_server_addr: addr.replace(":10911", ":10912"),
            broker_id: id,
            heartbeat_timeout_millis: None,
            enable_acting_master: false,
        },
        body,
    }
}

fn conn(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

fn queue_nums(registry: &Registry, topic: &str) -> Vec<(String, i32)> {
    registry
        .route(topic)
        .map(|route| {
            route
                .queues
                .into_iter()
                .map(|(name, q)| (name, q.write_queue_nums))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_slave_learns_its_master_and_does_not_change_queue_data() {
    let mut registry = Registry::new(RegistryLimits::default());
    let master = request("a", 0, "10.0.0.1:10911", &[("T", 4)], 1);
    assert_eq!(
        registry.register(&master, conn(1), 0).unwrap(),
        RegisterBrokerResult::default()
    );
    // The slave lists other topics and counts: they do not count.
    let slave = request("a", 1, "10.0.0.2:10911", &[("T", 9), ("U", 9)], 5);
    let result = registry.register(&slave, conn(2), 0).unwrap();
    assert_eq!(result.master_addr.as_deref(), Some("10.0.0.1:10911"));
    assert_eq!(result.ha_server_addr.as_deref(), Some("10.0.0.1:10912"));
    assert_eq!(queue_nums(&registry, "T"), [("a".to_owned(), 4)]);
    assert!(registry.route("U").is_none());
    let brokers = registry.route("T").unwrap().brokers;
    assert_eq!(
        brokers[0].addrs,
        BTreeMap::from([(0, "10.0.0.1:10911".into()), (1, "10.0.0.2:10911".into())])
    );
    // A slave before its master gets no addresses.
    let orphan = request("b", 1, "10.0.1.2:10911", &[], 0);
    assert_eq!(
        registry.register(&orphan, None, 0).unwrap(),
        RegisterBrokerResult::default()
    );
}

#[test]
fn routes_merge_every_group_serving_the_topic() {
    let mut registry = Registry::new(RegistryLimits::default());
    let a = request("a", 0, "10.0.0.1:10911", &[("T", 4), ("OnlyA", 1)], 1);
    let b = request("b", 0, "10.0.1.1:10911", &[("T", 8)], 1);
    registry.register(&a, None, 0).unwrap();
    registry.register(&b, None, 0).unwrap();
    assert_eq!(
        queue_nums(&registry, "T"),
        [("a".to_owned(), 4), ("b".to_owned(), 8)]
    );
    let brokers = registry.route("T").unwrap().brokers;
    let names: Vec<&str> = brokers.iter().map(|b| b.broker_name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(registry.topic_names().collect::<Vec<_>>(), ["OnlyA", "T"]);
    assert_eq!(registry.topics_of_cluster("DefaultCluster"), ["OnlyA", "T"]);
    assert!(registry.topics_of_cluster("Nope").is_empty());
    assert_eq!(registry.brokers().len(), 2);
}

#[test]
fn with_replacement_a_master_registration_replaces_its_topic_set_when_its_version_changes() {
    let mut registry = Registry::new(RegistryLimits {
        replace_topics_on_register: true,
        ..RegistryLimits::default()
    });
    registry
        .register(
            &request("a", 0, "10.0.0.1:10911", &[("T", 4), ("Old", 1)], 1),
            None,
            0,
        )
        .unwrap();
    // Same data version: the table is not read again (Java's isBrokerTopicConfigChanged).
    registry
        .register(&request("a", 0, "10.0.0.1:10911", &[("T", 2)], 1), None, 1)
        .unwrap();
    assert_eq!(queue_nums(&registry, "T"), [("a".to_owned(), 4)]);
    assert!(registry.route("Old").is_some());
    registry
        .register(&request("a", 0, "10.0.0.1:10911", &[("T", 2)], 2), None, 2)
        .unwrap();
    assert_eq!(queue_nums(&registry, "T"), [("a".to_owned(), 2)]);
    assert!(registry.route("Old").is_none());
}

#[test]
fn by_default_a_dropped_topic_keeps_its_route_as_in_java() {
    let mut registry = Registry::new(RegistryLimits {
        default_heartbeat_timeout_ms: 5,
        ..RegistryLimits::default()
    });
    registry
        .register(
            &request("a", 0, "10.0.0.1:10911", &[("T", 4), ("Old", 1)], 1),
            None,
            0,
        )
        .unwrap();
    registry
        .register(&request("a", 0, "10.0.0.1:10911", &[("T", 2)], 2), None, 0)
        .unwrap();
    assert_eq!(queue_nums(&registry, "T"), [("a".to_owned(), 2)]);
    assert_eq!(queue_nums(&registry, "Old"), [("a".to_owned(), 1)]);
    assert_eq!(
        registry.expire(6).len(),
        1,
        "the configured default timeout"
    );
}

#[test]
fn brokers_expire_past_their_own_timeout_by_the_injected_clock() {
    let mut registry = Registry::new(RegistryLimits::default());
    let mut quick = request("a", 0, "10.0.0.1:10911", &[("T", 4)], 1);
    quick.header.heartbeat_timeout_millis = Some(10_000);
    registry.register(&quick, None, 1_000).unwrap();
    registry
        .register(
            &request("b", 0, "10.0.1.1:10911", &[("T", 4)], 1),
            None,
            1_000,
        )
        .unwrap();
    assert!(
        registry.expire(11_000).is_empty(),
        "exactly at the timeout is not past it"
    );
    let gone = registry.expire(11_001);
    assert_eq!(
        gone,
        [Removed {
            broker_addr: "10.0.0.1:10911".into(),
            broker_name: "a".into(),
            broker_id: 0
        }]
    );
    assert_eq!(queue_nums(&registry, "T"), [("b".to_owned(), 4)]);
    // The default, 120 s.
    assert!(registry
        .expire(1_000 + DEFAULT_HEARTBEAT_TIMEOUT_MS)
        .is_empty());
    assert_eq!(
        registry.expire(1_001 + DEFAULT_HEARTBEAT_TIMEOUT_MS).len(),
        1
    );
    assert!(registry.route("T").is_none());
    assert!(registry.brokers().is_empty());
    assert_eq!(registry.system_topics(), (vec![], None));
}

#[test]
fn a_refreshed_broker_does_not_expire() {
    let mut registry = Registry::new(RegistryLimits::default());
    let a = request("a", 0, "10.0.0.1:10911", &[("T", 4)], 1);
    registry.register(&a, None, 0).unwrap();
    registry.register(&a, None, 100_000).unwrap();
    assert!(registry.expire(200_000).is_empty());
    assert!(registry.heartbeat("10.0.0.1:10911", 200_000));
    assert!(!registry.heartbeat("10.9.9.9:1", 200_000));
    let (changed, held) =
        registry.query_data_version("10.0.0.1:10911", &a.body.data_version, 300_000);
    assert_eq!((changed, held), (false, Some(a.body.data_version)));
    assert!(registry.expire(400_000).is_empty());
    assert_eq!(registry.expire(420_001).len(), 1);
    let (changed, held) = registry.query_data_version("10.0.0.1:10911", &a.body.data_version, 0);
    assert_eq!((changed, held), (true, None));
}

#[test]
fn unregistering_the_master_keeps_queue_data_for_the_slaves_until_the_group_empties() {
    let mut registry = Registry::new(RegistryLimits::default());
    registry
        .register(&request("a", 0, "10.0.0.1:10911", &[("T", 4)], 1), None, 0)
        .unwrap();
    registry
        .register(&request("a", 1, "10.0.0.2:10911", &[], 1), None, 0)
        .unwrap();
    assert!(!registry.unregister("10.0.0.1:10911", "a", 1), "wrong id");
    assert!(
        !registry.unregister("10.0.0.9:10911", "a", 0),
        "wrong address"
    );
    assert!(registry.unregister("10.0.0.1:10911", "a", 0));
    let route = registry.route("T").unwrap();
    let (brokers, queues) = (route.brokers, route.queues);
    assert_eq!(
        brokers[0].addrs,
        BTreeMap::from([(1, "10.0.0.2:10911".into())])
    );
    assert_eq!(queues[0].1.perm, 6, "no acting master: the write bit stays");
    assert!(registry.unregister("10.0.0.2:10911", "a", 1));
    assert!(registry.route("T").is_none());
    assert!(registry.brokers().is_empty());
    assert_eq!(registry.live_count(), 0);
}

#[test]
fn with_an_acting_master_a_masterless_group_loses_the_write_bit() {
    let mut registry = Registry::new(RegistryLimits::default());
    let mut master = request("a", 0, "10.0.0.1:10911", &[("T", 4)], 1);
    master.header.enable_acting_master = true;
    registry.register(&master, None, 0).unwrap();
    let mut slave = request("a", 1, "10.0.0.2:10911", &[], 1);
    slave.header.enable_acting_master = true;
    registry.register(&slave, None, 0).unwrap();
    registry.unregister("10.0.0.1:10911", "a", 0);
    assert_eq!(registry.route("T").unwrap().queues[0].1.perm, 4);
}

#[test]
fn a_closed_connection_removes_its_brokers_at_once() {
    let mut registry = Registry::new(RegistryLimits::default());
    registry
        .register(
            &request("a", 0, "10.0.0.1:10911", &[("T", 4)], 1),
            conn(5000),
            0,
        )
        .unwrap();
    registry
        .register(
            &request("b", 0, "10.0.1.1:10911", &[("T", 4)], 1),
            conn(5001),
            0,
        )
        .unwrap();
    assert!(registry.connection_closed(conn(6000).unwrap()).is_empty());
    let gone = registry.connection_closed(conn(5000).unwrap());
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].broker_name, "a");
    assert_eq!(queue_nums(&registry, "T"), [("b".to_owned(), 4)]);
    // Re-registered over another connection: closing the first one no longer matters.
    registry
        .register(
            &request("b", 0, "10.0.1.1:10911", &[("T", 4)], 1),
            conn(5002),
            0,
        )
        .unwrap();
    assert!(registry.connection_closed(conn(5001).unwrap()).is_empty());
}

#[test]
fn an_address_or_id_that_moves_leaves_no_stale_entry() {
    let mut registry = Registry::new(RegistryLimits::default());
    registry
        .register(&request("a", 1, "10.0.0.2:10911", &[], 1), None, 0)
        .unwrap();
    // The slave's address comes back as the master (a role switch).
    registry
        .register(&request("a", 0, "10.0.0.2:10911", &[("T", 4)], 1), None, 0)
        .unwrap();
    assert_eq!(
        registry.brokers()[0].addrs,
        BTreeMap::from([(0, "10.0.0.2:10911".into())])
    );
    // The master id moves to a new address: the old address is no broker any more.
    registry
        .register(&request("a", 0, "10.0.0.3:10911", &[("T", 4)], 1), None, 0)
        .unwrap();
    assert_eq!(registry.live_count(), 1);
    // Another cluster: the group moves.
    let mut moved = request("a", 0, "10.0.0.3:10911", &[("T", 4)], 1);
    moved.header.cluster_name = "Other".into();
    registry.register(&moved, None, 0).unwrap();
    assert_eq!(registry.system_topics().0, ["Other", "a"]);
    assert_eq!(registry.expire(i64::MAX).len(), 1);
}

#[test]
fn write_perm_is_wiped_and_added_back_and_topics_delete_by_cluster() {
    let mut registry = Registry::new(RegistryLimits::default());
    registry
        .register(
            &request("a", 0, "10.0.0.1:10911", &[("T", 4), ("U", 4)], 1),
            None,
            0,
        )
        .unwrap();
    let mut other = request("b", 0, "10.0.1.1:10911", &[("T", 4)], 1);
    other.header.cluster_name = "Other".into();
    registry.register(&other, None, 0).unwrap();
    assert_eq!(registry.set_write_perm("a", false), 2);
    assert_eq!(registry.route("T").unwrap().queues[0].1.perm, 4);
    assert_eq!(registry.set_write_perm("a", true), 2);
    assert_eq!(registry.route("T").unwrap().queues[0].1.perm, 6);
    assert_eq!(registry.set_write_perm("nobody", false), 0);
    registry.delete_topic("T", Some("Other"));
    assert_eq!(queue_nums(&registry, "T"), [("a".to_owned(), 4)]);
    registry.delete_topic("T", Some("NoSuchCluster"));
    assert!(registry.route("T").is_some());
    registry.delete_topic("T", None);
    assert!(registry.route("T").is_none());
    registry.delete_topic("Never", None);
}

#[test]
fn unit_flags_select_topic_lists() {
    let mut registry = Registry::new(RegistryLimits::default());
    let mut req = request(
        "a",
        0,
        "10.0.0.1:10911",
        &[("Plain", 1), ("Unit", 1), ("Sub", 1)],
        1,
    );
    req.body.topics.get_mut("Unit").unwrap().topic_sys_flag = FLAG_UNIT;
    req.body.topics.get_mut("Sub").unwrap().topic_sys_flag = FLAG_UNIT_SUB;
    registry.register(&req, None, 0).unwrap();
    assert_eq!(registry.topics_by_flags(Some(true), None), ["Unit"]);
    assert_eq!(registry.topics_by_flags(None, Some(true)), ["Sub"]);
    assert_eq!(registry.topics_by_flags(Some(false), Some(true)), ["Sub"]);
    let (names, addr) = registry.system_topics();
    assert_eq!(names, ["DefaultCluster", "a"]);
    assert_eq!(addr, Some("10.0.0.1:10911"));
}

#[test]
fn a_flood_of_brokers_stops_at_the_limit_naming_it() {
    let limits = RegistryLimits {
        max_brokers: 50,
        ..RegistryLimits::default()
    };
    let mut registry = Registry::new(limits);
    let mut refused = 0;
    for i in 0..1_000 {
        let addr = format!("10.1.{}.{}:10911", i / 250, i % 250);
        let req = request(&format!("g{i}"), 0, &addr, &[("T", 1)], 1);
        match registry.register(&req, None, 0) {
            Ok(_) => {}
            Err(error) => {
                assert!(error.to_string().contains("maxBrokers"), "{error}");
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 950);
    assert_eq!(registry.live_count(), 50);
    assert_eq!(registry.route("T").unwrap().queues.len(), 50);
    // A registered broker still refreshes at the limit.
    let again = request("g0", 0, "10.1.0.0:10911", &[("T", 1)], 2);
    assert!(registry.register(&again, None, 1).is_ok());
}
