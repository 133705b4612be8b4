use super::*;

fn header(id: i64) -> RegisterBrokerHeader {
    RegisterBrokerHeader {
        broker_name: "broker-a".into(),
        broker_addr: format!("10.0.0.{}:10911", id + 1),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: format!("10.0.0.{}:10912", id + 1),
        broker_id: id,
        heartbeat_timeout_millis: Some(30_000),
        enable_acting_master: false,
    }
}

fn body() -> RegisterBrokerBody {
    let mut topics = BTreeMap::new();
    let mut t = RegisteredTopic::new("TopicTest", 8);
    t.write_queue_nums = 4;
    t.attributes.insert("+message.type".into(), "NORMAL".into());
    topics.insert(t.topic_name.clone(), t);
    topics.insert("%RETRY%g".into(), RegisteredTopic::new("%RETRY%g", 1));
    RegisterBrokerBody {
        topics,
        data_version: DataVersion {
            timestamp: 1_700_000_000_000,
            counter: 3,
            state_version: 0,
        },
        filter_server_list: vec![],
    }
}

#[test]
fn crc_is_javas_with_the_sign_bit_cleared() {
    // CRC32("123456789") = 0xCBF43926; Java's UtilAll.crc32 clears the top bit.
    assert_eq!(body_crc32(b"123456789"), 0x4BF4_3926);
}

#[test]
fn a_request_round_trips_through_the_decoder() {
    let request = encode_register_broker(&header(1), &body());
    assert_eq!(request.code, codes::REGISTER_BROKER);
    assert_eq!(request.ext_fields.get("compressed"), Some("false"));
    assert_eq!(
        request.ext_fields.get("bodyCrc32"),
        Some(body_crc32(&request.body).to_string().as_str())
    );
    let decoded = decode_register_broker(&request, &RegisterLimits::default()).unwrap();
    assert_eq!(decoded.header, header(1));
    assert_eq!(decoded.body, body());
    // No timeout in the header: the name server's default applies.
    let mut h = header(0);
    h.heartbeat_timeout_millis = None;
    let request = encode_register_broker(&h, &body());
    assert!(!request.ext_fields.contains_key("heartbeatTimeoutMillis"));
    let decoded = decode_register_broker(&request, &RegisterLimits::default()).unwrap();
    assert_eq!(decoded.header.heartbeat_timeout_millis, None);
}

#[test]
fn the_body_is_standard_json_in_the_documented_shape() {
    let mut b = RegisterBrokerBody::default();
    b.topics.insert("T".into(), RegisteredTopic::new("T", 4));
    b.data_version.counter = 1;
    let text = String::from_utf8(encode_body(&b)).unwrap();
    assert_eq!(
        text,
        concat!(
            r#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":"#,
            r#"{"counter":1,"stateVersion":0,"timestamp":0},"topicConfigTable":{"T":"#,
            r#"{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"#,
            r#""topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"#,
            r#""writeQueueNums":4}},"topicQueueMappingInfoMap":{}}}"#
        )
    );
    serde_json::from_str::<Value>(&text).expect("standard JSON");
}

/// What a stock Java 5.x broker sends (fastjson, field order as its getters, extra fields
/// of `TopicConfigAndMappingSerializeWrapper`), with one fastjson integer key thrown in.
#[test]
fn a_java_broker_body_is_read_and_unknown_fields_ignored() {
    let text = br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":7,"stateVersion":0,"timestamp":1712345678901},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1712345678000},"topicConfigTable":{"TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8},"SELF_TEST_TOPIC":{"order":false,"perm":6,"readQueueNums":1,"topicFilterType":"SINGLE_TAG","topicName":"SELF_TEST_TOPIC","topicSysFlag":0,"writeQueueNums":1}},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{0:{}}}}"#;
    let body = decode_body(text, &RegisterLimits::default()).unwrap();
    assert_eq!(body.data_version.counter, 7);
    assert_eq!(body.topics.len(), 2);
    assert_eq!(body.topics["TBW102"].perm, 7);
    assert_eq!(body.topics["SELF_TEST_TOPIC"].read_queue_nums, 1);
    // Missing fields take TopicConfig's defaults.
    let body = decode_body(
        br#"{"topicConfigSerializeWrapper":{"topicConfigTable":{"X":{}}}}"#,
        &RegisterLimits::default(),
    )
    .unwrap();
    assert_eq!(body.topics["X"], RegisteredTopic::new("X", 16));
    assert_eq!(body.data_version, DataVersion::default());
    assert_eq!(
        decode_body(b"", &RegisterLimits::default()).unwrap(),
        RegisterBrokerBody::default()
    );
}

#[test]
fn a_wrong_crc_is_refused_and_zero_is_not_checked() {
    let mut request = encode_register_broker(&header(0), &body());
    let right = body_crc32(&request.body);
    request.put_ext("bodyCrc32", right ^ 1);
    assert_eq!(
        decode_register_broker(&request, &RegisterLimits::default()),
        Err(RegisterError::Crc {
            sent: right ^ 1,
            computed: right
        })
    );
    request.put_ext("bodyCrc32", 0);
    assert!(decode_register_broker(&request, &RegisterLimits::default()).is_ok());
}

#[test]
fn a_compressed_body_is_refused_with_the_setting_to_change() {
    let mut request = encode_register_broker(&header(0), &body());
    request.put_ext("compressed", true);
    let error = decode_register_broker(&request, &RegisterLimits::default()).unwrap_err();
    assert_eq!(error, RegisterError::Compressed);
    assert!(
        error.to_string().contains("compressedRegister=false"),
        "{error}"
    );
}

#[test]
fn bad_headers_name_the_field() {
    let mut request = encode_register_broker(&header(0), &body());
    request.ext_fields.remove("brokerAddr");
    let error = decode_register_broker(&request, &RegisterLimits::default()).unwrap_err();
    assert_eq!(error.to_string(), "missing header field `brokerAddr`");
    let mut request = encode_register_broker(&header(0), &body());
    request.put_ext("brokerId", "one");
    let error = decode_register_broker(&request, &RegisterLimits::default()).unwrap_err();
    assert!(error.to_string().contains("brokerId"), "{error}");
    request.put_ext("brokerId", 0);
    request.put_ext("enableActingMaster", "yes");
    let error = decode_register_broker(&request, &RegisterLimits::default()).unwrap_err();
    assert!(error.to_string().contains("enableActingMaster"), "{error}");
}

#[test]
fn bad_bodies_are_typed_errors() {
    let limits = RegisterLimits::default();
    let cases: [(&[u8], &str); 8] = [
        (b"{", "bad JSON"),
        (b"{\"topicConfigSerializeWrapper\":", "bad JSON"),
        (b"[]", "`(body)` is not an object"),
        (br#"{"topicConfigSerializeWrapper":3}"#, "`topicConfigSerializeWrapper` is not"),
        (
            br#"{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"6"}}}}"#,
            "`topicConfigTable.T.perm` is not a 64-bit integer",
        ),
        (
            br#"{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":4294967296}}}}"#,
            "does not fit a 32-bit integer",
        ),
        (
            br#"{"topicConfigSerializeWrapper":{"dataVersion":{"counter":true}}}"#,
            "`dataVersion.counter`",
        ),
        (br#"{"filterServerList":[1]}"#, "`filterServerList` has an item"),
    ];
    for (text, expected) in cases {
        let error = decode_body(text, &limits).unwrap_err();
        assert!(
            error.to_string().contains(expected),
            "{:?}: {error}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn a_flood_is_refused_by_size_or_topic_count_before_it_is_kept() {
    let limits = RegisterLimits {
        max_body_bytes: 4096,
        max_topics: 10,
    };
    let mut big = RegisterBrokerBody::default();
    for i in 0..11 {
        let name = format!("T{i}");
        big.topics
            .insert(name.clone(), RegisteredTopic::new(&name, 1));
    }
    let request = encode_register_broker(&header(0), &big);
    assert_eq!(
        decode_register_broker(&request, &limits).unwrap_err(),
        RegisterError::TooManyTopics { count: 11, max: 10 }
    );
    for i in 11..100 {
        let name = format!("T{i}");
        big.topics
            .insert(name.clone(), RegisteredTopic::new(&name, 1));
    }
    let request = encode_register_broker(&header(0), &big);
    let len = request.body.len();
    assert_eq!(
        decode_register_broker(&request, &limits).unwrap_err(),
        RegisterError::BodyTooLarge { len, max: 4096 }
    );
}

#[test]
fn seeded_garbage_bodies_never_panic() {
    let mut rng = crate::rng::SplitMix64::new(25);
    let good = encode_body(&body());
    for _ in 0..2_000 {
        let mut bytes = good.clone();
        let flips = 1 + rng.next_u64() % 4;
        for _ in 0..flips {
            let at = (rng.next_u64() % bytes.len() as u64) as usize;
            bytes[at] = (rng.next_u64() & 0xFF) as u8;
        }
        let cut = (rng.next_u64() % (bytes.len() as u64 + 1)) as usize;
        let _ = decode_body(&bytes[..cut], &RegisterLimits::default());
    }
}

#[test]
fn the_response_carries_the_masters_addresses_for_a_slave() {
    let request = encode_register_broker(&header(1), &body());
    let result = RegisterBrokerResult {
        master_addr: Some("10.0.0.1:10911".into()),
        ha_server_addr: Some("10.0.0.1:10912".into()),
    };
    let response = encode_register_response(&request, &result);
    assert_eq!(response.code, crate::remoting::codes::response::SUCCESS);
    assert_eq!(decode_register_response(&response), result);
    let master = encode_register_response(&request, &RegisterBrokerResult::default());
    assert!(master.ext_fields.is_empty());
    assert_eq!(
        decode_register_response(&master),
        RegisterBrokerResult::default()
    );
}

#[test]
fn unregister_round_trips_and_names_a_missing_field() {
    let header = UnregisterBrokerHeader {
        broker_name: "broker-a".into(),
        broker_addr: "10.0.0.2:10911".into(),
        cluster_name: "DefaultCluster".into(),
        broker_id: 1,
    };
    let mut request = encode_unregister_broker(&header);
    assert_eq!(request.code, codes::UNREGISTER_BROKER);
    assert_eq!(decode_unregister_broker(&request).unwrap(), header);
    request.ext_fields.remove("brokerId");
    assert_eq!(
        decode_unregister_broker(&request).unwrap_err().to_string(),
        "missing header field `brokerId`"
    );
}

#[test]
fn a_data_version_round_trips_and_garbage_is_an_error() {
    let version = DataVersion {
        timestamp: 5,
        counter: 6,
        state_version: 7,
    };
    assert_eq!(
        decode_data_version(&encode_data_version(&version)),
        Ok(version)
    );
    assert!(decode_data_version(b"[1]").is_err());
    assert!(decode_data_version(br#"{"counter":"x"}"#).is_err());
}
