//! Request and response codes of the RocketMQ remoting protocol (reference §9.1, §9.2).
//!
//! The numbers are the wire values of Java's `RequestCode`, `ResponseCode` and
//! `RemotingSysResponseCode`; the names are theirs too, so a grep for a Java constant finds
//! ours. Request and response codes live in separate modules because the two spaces
//! overlap (215 is `DELETE_TOPIC_IN_BROKER` as a request and `FLOW_CONTROL` as a response).
//!
//! ringmq-private request codes are in 30000-30999, a range RocketMQ's `RequestCode.java`
//! leaves empty (its highest codes below the 2000xx POP codes are the 30xx ACL ones) and
//! below `i16::MAX` (so the binary header carries them), and are named `RINGMQ_*`. A
//! RocketMQ broker answers them REQUEST_CODE_NOT_SUPPORTED, which is how a ringmq node
//! asking one tells the two apart.
//!
//! Each table also generates a `name(code)` function for logs and metrics. The constants
//! are used as match patterns there, so two names with the same number would make that
//! match unreachable and fail the `-D warnings` build: the tables cannot silently collide.

/// Defines the constants of one code space and its `name` lookup from one list.
macro_rules! code_table {
    ($($(#[$doc:meta])* $name:ident = $value:expr,)*) => {
        $( $(#[$doc])* pub const $name: i32 = $value; )*

        /// Every code of this table as `(name, value)`, in declaration order.
        pub const ALL: &[(&str, i32)] = &[$((stringify!($name), $name),)*];

        /// The Java constant name of `code`, if this table knows it.
        pub fn name(code: i32) -> Option<&'static str> {
            match code {
                $( $name => Some(stringify!($name)), )*
                _ => None,
            }
        }
    };
}

/// Request codes (`R/protocol/RequestCode.java`).
pub mod request {
    code_table! {
        SEND_MESSAGE = 10,
        PULL_MESSAGE = 11,
        QUERY_MESSAGE = 12,
        QUERY_BROKER_OFFSET = 13,
        QUERY_CONSUMER_OFFSET = 14,
        UPDATE_CONSUMER_OFFSET = 15,
        UPDATE_AND_CREATE_TOPIC = 17,
        GET_ALL_TOPIC_CONFIG = 21,
        UPDATE_BROKER_CONFIG = 25,
        GET_BROKER_CONFIG = 26,
        GET_BROKER_RUNTIME_INFO = 28,
        SEARCH_OFFSET_BY_TIMESTAMP = 29,
        GET_MAX_OFFSET = 30,
        GET_MIN_OFFSET = 31,
        GET_EARLIEST_MSG_STORETIME = 32,
        VIEW_MESSAGE_BY_ID = 33,
        HEART_BEAT = 34,
        UNREGISTER_CLIENT = 35,
        CONSUMER_SEND_MSG_BACK = 36,
        END_TRANSACTION = 37,
        GET_CONSUMER_LIST_BY_GROUP = 38,
        /// Broker to producer.
        CHECK_TRANSACTION_STATE = 39,
        /// Broker to consumer, oneway.
        NOTIFY_CONSUMER_IDS_CHANGED = 40,
        LOCK_BATCH_MQ = 41,
        UNLOCK_BATCH_MQ = 42,
        GET_ALL_CONSUMER_OFFSET = 43,
        GET_ALL_DELAY_OFFSET = 45,
        /// Name server.
        PUT_KV_CONFIG = 100,
        /// Name server.
        GET_KV_CONFIG = 101,
        /// Name server.
        DELETE_KV_CONFIG = 102,
        /// Name server.
        REGISTER_BROKER = 103,
        /// Name server.
        UNREGISTER_BROKER = 104,
        /// Name server.
        GET_ROUTEINFO_BY_TOPIC = 105,
        /// Name server.
        GET_BROKER_CLUSTER_INFO = 106,
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200,
        GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201,
        /// Admin tools (`mqadmin topicStatus`); not in the reference, from `RequestCode.java`.
        GET_TOPIC_STATS_INFO = 202,
        /// Admin tools; not in the reference, from `RequestCode.java`.
        GET_CONSUMER_CONNECTION_LIST = 203,
        /// Admin tools; not in the reference, from `RequestCode.java`.
        GET_PRODUCER_CONNECTION_LIST = 204,
        /// Name server (`mqadmin wipeWritePerm`); from `RequestCode.java`.
        WIPE_WRITE_PERM_OF_BROKER = 205,
        /// Name server.
        GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206,
        /// Admin tools (`mqadmin deleteSubGroup`); from `RequestCode.java`.
        DELETE_SUBSCRIPTIONGROUP = 207,
        /// Admin tools (`mqadmin consumerProgress`); not in the reference, from `RequestCode.java`.
        GET_CONSUME_STATS = 208,
        /// Admin tools; not in the reference, from `RequestCode.java`.
        DELETE_TOPIC_IN_BROKER = 215,
        /// Name server (`mqadmin deleteTopic`); from `RequestCode.java`.
        DELETE_TOPIC_IN_NAMESRV = 216,
        /// Name server.
        REGISTER_TOPIC_IN_NAMESRV = 217,
        /// Broker to consumer.
        RESET_CONSUMER_CLIENT_OFFSET = 220,
        /// Name server (`mqadmin topicList -c`); from `RequestCode.java`.
        GET_TOPICS_BY_CLUSTER = 224,
        /// Name server; from `RequestCode.java`.
        GET_SYSTEM_TOPIC_LIST_FROM_NS = 304,
        /// Name server; from `RequestCode.java`.
        GET_UNIT_TOPIC_LIST = 311,
        /// Name server; from `RequestCode.java`.
        GET_HAS_UNIT_SUB_TOPIC_LIST = 312,
        /// Name server; from `RequestCode.java`.
        GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313,
        /// Broker to name server (when `forceRegister=false`); from `RequestCode.java`.
        QUERY_DATA_VERSION = 322,
        /// Admin tools (`mqadmin resetOffsetByTime`); from `RequestCode.java`.
        INVOKE_BROKER_TO_RESET_OFFSET = 222,
        /// Broker to consumer.
        GET_CONSUMER_STATUS_FROM_CLIENT = 221,
        /// Admin tools (`mqadmin queryMsgById`, `queryMsgByOffset`); from `RequestCode.java`.
        QUERY_TOPIC_CONSUME_BY_WHO = 300,
        /// Admin tools to the broker (`mqadmin consumerStatus`), which relays it to the
        /// consumer.
        GET_CONSUMER_RUNNING_INFO = 307,
        /// Broker to consumer.
        CONSUME_MESSAGE_DIRECTLY = 309,
        /// Admin tools (`mqadmin cloneGroupOffset`); from `RequestCode.java`.
        CLONE_GROUP_OFFSET = 314,
        /// Admin tools (`mqadmin statsAll`); from `RequestCode.java`.
        VIEW_BROKER_STATS_DATA = 315,
        /// Admin tools (`mqadmin brokerConsumeStats`); from `RequestCode.java`.
        GET_BROKER_CONSUME_STATS = 317,
        /// Name server (`mqadmin getNamesrvConfig`); from `RequestCode.java`.
        GET_NAMESRV_CONFIG = 319,
        /// Send with the single-letter header names (`SendMessageRequestHeaderV2`).
        SEND_MESSAGE_V2 = 310,
        /// V2 header; body in the batch format of `send_header::decode_batch`.
        SEND_BATCH_MESSAGE = 320,
        SEND_REPLY_MESSAGE = 324,
        SEND_REPLY_MESSAGE_V2 = 325,
        /// Broker to requester.
        PUSH_REPLY_MESSAGE_TO_CLIENT = 326,
        /// Name server (`mqadmin addWritePerm`); from `RequestCode.java`.
        ADD_WRITE_PERM_OF_BROKER = 327,
        /// Admin tools (`mqadmin topicStatus`, `consumerProgress`); from `RequestCode.java`.
        GET_TOPIC_CONFIG = 351,
        /// Same header as `PULL_MESSAGE`.
        LITE_PULL_MESSAGE = 361,
        QUERY_ASSIGNMENT = 400,
        /// Not in the reference, from `RequestCode.java`.
        SET_MESSAGE_REQUEST_MODE = 401,
        /// A slave copies its master's request modes (`RequestCode.java`).
        GET_ALL_MESSAGE_REQUEST_MODE = 402,
        /// Broker to controller (controller mode, reference-2 §6.2); the name server
        /// also answers it in Java.
        BROKER_HEARTBEAT = 904,
        /// Admin tools (`mqadmin haStatus`, `ringmq admin ha-status`): the broker's
        /// replication as `HARuntimeInfo`; from `RequestCode.java`.
        GET_BROKER_HA_STATUS = 907,
        /// Controller (reference-2 §6.2): the master shrinks or expands its SyncStateSet.
        CONTROLLER_ALTER_SYNC_STATE_SET = 1001,
        /// Controller: elect a master (`designateElect` for the admin's choice).
        CONTROLLER_ELECT_MASTER = 1002,
        /// Controller: a broker with an applied id announces its address.
        CONTROLLER_REGISTER_BROKER = 1003,
        /// Controller: the group's master, its epoch and the SyncStateSet.
        CONTROLLER_GET_REPLICA_INFO = 1004,
        /// Controller: the controller group's leader and peers.
        CONTROLLER_GET_METADATA_INFO = 1005,
        /// Controller (admin): the replicas of the named groups, in sync or not.
        CONTROLLER_GET_SYNC_STATE_DATA = 1006,
        /// Broker admin: the broker's epoch entries; from `RequestCode.java`.
        GET_BROKER_EPOCH_CACHE = 1007,
        /// Controller to broker, oneway: the group's new master and epochs.
        NOTIFY_BROKER_ROLE_CHANGED = 1008,
        /// Controller admin; from `RequestCode.java`.
        UPDATE_CONTROLLER_CONFIG = 1009,
        /// Controller admin; from `RequestCode.java`.
        GET_CONTROLLER_CONFIG = 1010,
        /// Controller admin: forget a group, or some of its broker ids.
        CLEAN_BROKER_DATA = 1011,
        /// Controller: the id a new broker of the group should apply for.
        CONTROLLER_GET_NEXT_BROKER_ID = 1012,
        /// Controller: a broker claims an id (with its `registerCheckCode`).
        CONTROLLER_APPLY_BROKER_ID = 1013,
        /// ringmq-private: a slave asks its master's broker port for the timer progress of
        /// shard `shard` (`broker::timer::progress_requests`). Not RocketMQ's
        /// GET_TIMER_CHECK_POINT (60), which carries the read positions of Java's timing
        /// wheel, meaningless to ringmq's timer store.
        RINGMQ_GET_TIMER_PROGRESS = 30000,
        /// ringmq-private, inside one slave node: its shard 0 hands shard `shard` the
        /// master's timer progress to write; refused when a connection brings it.
        RINGMQ_TAKE_TIMER_PROGRESS = 30001,
        /// ringmq-private, for `ringmq admin tx-pending`: the undecided half messages of a
        /// producer group on every shard (`broker::transaction::pending`).
        RINGMQ_LIST_PENDING_HALVES = 30002,
        /// Above `i16::MAX`: JSON headers only.
        POP_MESSAGE = 200050,
        /// Above `i16::MAX`: JSON headers only.
        ACK_MESSAGE = 200051,
        /// Above `i16::MAX`: JSON headers only.
        PEEK_MESSAGE = 200052,
        /// Above `i16::MAX`: JSON headers only.
        CHANGE_MESSAGE_INVISIBLETIME = 200053,
        /// Above `i16::MAX`: JSON headers only.
        NOTIFICATION = 200054,
        /// Above `i16::MAX`: JSON headers only.
        POLLING_INFO = 200055,
        /// Above `i16::MAX`: JSON headers only.
        POP_ROLLBACK = 200056,
        /// Above `i16::MAX`: JSON headers only.
        BATCH_ACK_MESSAGE = 200151,
    }
}

/// Response codes (`R/protocol/ResponseCode.java`, `RemotingSysResponseCode.java`).
pub mod response {
    code_table! {
        SUCCESS = 0,
        SYSTEM_ERROR = 1,
        /// Java's overload answer (`[OVERLOAD]`, `[REJECTREQUEST]` remarks).
        SYSTEM_BUSY = 2,
        /// Remark `" request type N not supported"`.
        REQUEST_CODE_NOT_SUPPORTED = 3,
        TRANSACTION_FAILED = 4,
        /// Stored, but not flushed in time: the client does not throw.
        FLUSH_DISK_TIMEOUT = 10,
        SLAVE_NOT_AVAILABLE = 11,
        /// Stored, but not replicated in time: the client does not throw.
        FLUSH_SLAVE_TIMEOUT = 12,
        MESSAGE_ILLEGAL = 13,
        SERVICE_NOT_AVAILABLE = 14,
        VERSION_NOT_SUPPORTED = 15,
        NO_PERMISSION = 16,
        TOPIC_NOT_EXIST = 17,
        TOPIC_EXIST_ALREADY = 18,
        /// Nothing new; with the suspend bit the broker parks the pull first.
        PULL_NOT_FOUND = 19,
        PULL_RETRY_IMMEDIATELY = 20,
        PULL_OFFSET_MOVED = 21,
        QUERY_NOT_FOUND = 22,
        SUBSCRIPTION_PARSE_FAILED = 23,
        SUBSCRIPTION_NOT_EXIST = 24,
        SUBSCRIPTION_NOT_LATEST = 25,
        SUBSCRIPTION_GROUP_NOT_EXIST = 26,
        FILTER_DATA_NOT_EXIST = 27,
        FILTER_DATA_NOT_LATEST = 28,
        INVALID_PARAMETER = 29,
        TRANSACTION_SHOULD_COMMIT = 200,
        TRANSACTION_SHOULD_ROLLBACK = 201,
        TRANSACTION_STATE_UNKNOW = 202,
        CONSUMER_NOT_ONLINE = 206,
        NO_MESSAGE = 208,
        POLLING_FULL = 209,
        POLLING_TIMEOUT = 210,
        FLOW_CONTROL = 215,
        NOT_LEADER_FOR_QUEUE = 501,
        /// A producer's own END_TRANSACTION after its half's check immunity ran out.
        ILLEGAL_OPERATION = 604,
        /// 5.3.2+ clients: the server is shutting down.
        GO_AWAY = 1500,
        /// Controller: the request's master epoch is not the group's.
        CONTROLLER_FENCED_MASTER_EPOCH = 2000,
        /// Controller: the request's SyncStateSet epoch is not the group's.
        CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001,
        /// Controller: the sender is not the group's master.
        CONTROLLER_INVALID_MASTER = 2002,
        /// Controller: a proposed replica is not a registered broker of the group.
        CONTROLLER_INVALID_REPLICAS = 2003,
        /// Controller: the master is gone and no replica can take over.
        CONTROLLER_MASTER_NOT_AVAILABLE = 2004,
        CONTROLLER_INVALID_REQUEST = 2005,
        /// Controller: a proposed replica sends no heartbeats.
        CONTROLLER_BROKER_NOT_ALIVE = 2006,
        /// This controller is not the leader of its group.
        CONTROLLER_NOT_LEADER = 2007,
        CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008,
        CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009,
        CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010,
        /// An election found the master alive and valid: nothing changed.
        CONTROLLER_MASTER_STILL_EXIST = 2011,
        CONTROLLER_ELECT_MASTER_FAILED = 2012,
        CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013,
        CONTROLLER_BROKER_ID_INVALID = 2014,
        CONTROLLER_JRAFT_INTERNAL_ERROR = 2015,
        CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_spaces_overlap() {
        for &(name, code) in request::ALL {
            assert_eq!(request::name(code), Some(name));
        }
        for &(name, code) in response::ALL {
            assert_eq!(response::name(code), Some(name));
        }
        assert_eq!(request::name(215), Some("DELETE_TOPIC_IN_BROKER"));
        assert_eq!(response::name(215), Some("FLOW_CONTROL"));
        assert_eq!(request::name(9999), None);
    }

    #[test]
    fn spot_check_numbers() {
        // The numbers clients depend on most, restated so a typo in the table fails here.
        let expected = [
            (request::SEND_MESSAGE, 10),
            (request::PULL_MESSAGE, 11),
            (request::HEART_BEAT, 34),
            (request::GET_ROUTEINFO_BY_TOPIC, 105),
            (request::SEND_MESSAGE_V2, 310),
            (request::SEND_BATCH_MESSAGE, 320),
            (request::LITE_PULL_MESSAGE, 361),
            (request::QUERY_ASSIGNMENT, 400),
            (request::POP_MESSAGE, 200_050),
            (response::PULL_NOT_FOUND, 19),
            (response::PULL_RETRY_IMMEDIATELY, 20),
            (response::PULL_OFFSET_MOVED, 21),
            (response::SUBSCRIPTION_GROUP_NOT_EXIST, 26),
            (request::CONTROLLER_ALTER_SYNC_STATE_SET, 1001),
            (request::CONTROLLER_APPLY_BROKER_ID, 1013),
            (response::CONTROLLER_FENCED_MASTER_EPOCH, 2000),
            (response::CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS, 2016),
        ];
        for (constant, number) in expected {
            assert_eq!(constant, number);
        }
    }
}
