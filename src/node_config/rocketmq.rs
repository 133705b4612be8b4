//! RocketMQ broker.conf keys that are not ringmq keys: the ones ringmq recognises and
//! ignores (a warning), and the ones whose meaning it cannot honour (an error saying why),
//! so that a broker's existing file loads as it is or fails for a stated reason.
//!
//! The rule between the two: a key may be ignored only if ignoring it cannot make the node
//! less safe than the file asks for: no open door where it asks for a lock, no weaker
//! durability than it asks for, no data deleted that it asks to keep, nothing accepted that
//! it asks to refuse. Such a key, set to anything but RocketMQ's default, stops the start
//! (as `enableDLegerCommitLog=true` does); at the default it is ignored with a warning.
//!
//! Refused unless at RocketMQ's default ([`UNSUPPORTED_ROCKETMQ_KEYS`]):
//!
//! | key | default | why ignoring another value is a hazard |
//! |---|---|---|
//! | `aclEnable`, `authenticationEnabled`, `authorizationEnabled` | `false` | asks for access control; ringmq has none and would serve every client |
//! | `brokerPermission` | `6` | 2 or 4 asks the broker to refuse reads or writes (draining a broker); ringmq would serve both |
//! | `inSyncReplicas`, `minInSyncReplicas`, `totalReplicas` | `1` | more asks for acknowledgements after several replicas confirm; a SYNC_MASTER waits for one slave (D14) |
//! | `cleanFileForciblyEnable` | `true` | `false` asks never to delete unexpired files when the disk fills; ringmq deletes above `diskSpaceCleanForciblyRatio` |
//! | `enableDLegerCommitLog`, `transientStorePoolEnable` | `false` | a different storage or failover design, not implemented |
//! | `storePathCommitLog`, `storePathConsumeQueue`, `storePathIndex`, `storeCheckpoint`, `abortFile` | RocketMQ's place under `storePathRootDir` ([`DERIVED_STORE_PATHS`]) | each shard keeps these under `<storePathRootDir>/shard-<n>`; another place would be a directory the operator expects filled and ringmq leaves empty |
//!
//! Ignored with a warning ([`IGNORED_ROCKETMQ_KEYS`]), and why that is safe:
//!
//! | keys | why ignoring them is safe |
//! |---|---|
//! | `haMaxGapNotInSync` | RocketMQ 5's in-sync-set gap; ringmq's SYNC_MASTER waits for one slave within `haSlaveFallbehindMax` |
//! | `duplicationEnable` | RocketMQ's duplicate-write switch for a promoted slave; ringmq's slave log is byte-identical to its master's |
//! | `enablePropertyFilter`, `filterServerNums`, `filterSupportRetry`, `enableCalcFilterBitMap`, `enableConsumeQueueExt` | SQL92 filtering: ringmq refuses SQL92 subscriptions on every pull, so nothing is delivered unfiltered |
//! | thread pools and queues (`*ThreadPoolNums`, `*QueueCapacity`, `server*Threads`, `clientWorkerThreads`), `serverSocketRcvBufSize`, `useEpollNativeSelector`, `useReentrantLockWhenPutMessage`, `waitTimeMillsInSendQueue`, `osPageCacheBusyTimeOutMills`, `putMessageTimeout` | Java's threading and socket tuning; ringmq is thread-per-core and bounds its queues with its own keys |
//! | `warmMapedFileEnable`, `flushLeastPagesWhenWarmMapedFile`, `flushCommitLogTimed`, `flushConsumeQueueLeastPages`, `flushConsumeQueueThoroughInterval`, `commitIntervalCommitLog`, `commitCommitLogLeastPages`, `commitCommitLogThoroughInterval` | flush tuning; durability follows `flushDiskType` and the `flushCommitLog*` keys ringmq has; ConsumeQueues are rebuilt from the CommitLog |
//! | `checkCRCOnRecover` | ringmq always checks every record's CRC32C on recovery, which is stricter than either value |
//! | `deleteCommitLogFilesInterval`, `deleteConsumeQueueFilesInterval`, `destroyMapedFileIntervalForcibly`, `redeleteHangedFileInterval` | pacing of deletions RocketMQ spreads out; what is deleted follows `fileReservedTime`, `deleteWhen` and the disk ratios |
//! | `maxTransferBytesOnMessageInMemory`, `maxTransferCountOnMessageInMemory`, `longPollingEnable`, `shortPollingTimeMills`, `notifyConsumerIdsChangedEnable`, `messageIndexSafe`, `defaultQueryMaxNum` | read-path tuning; ringmq always long-polls and notifies, and bounds pulls with its own keys |
//! | `enableScheduleMessageStats`, `clusterTopicEnable`, `brokerTopicEnable`, `traceTopicEnable`, `msgTraceTopicName` | statistics and convenience topics; nothing a client relies on for safety |
//! | `transactionOpMsgMaxSize`, `transactionOpBatchInterval`, `transactionMetricFlushInterval` | how RocketMQ batches a transaction's op records and flushes its metrics; ringmq writes each decision's op record with the decision, which delays nothing and loses nothing |
//! | `fetchNamesrvAddrByAddressServer`, `forceRegister` | name-server discovery and Java's register-only-when-changed shortcut: ringmq takes `namesrvAddr` as given and always sends the whole registration, which is what `forceRegister=true` (RocketMQ's default) does |

pub const IGNORED_ROCKETMQ_KEYS: &[&str] = &[
    "haMaxGapNotInSync",
    "enablePropertyFilter",
    "filterServerNums",
    "filterSupportRetry",
    "enableCalcFilterBitMap",
    "sendMessageThreadPoolNums",
    "pullMessageThreadPoolNums",
    "queryMessageThreadPoolNums",
    "adminBrokerThreadPoolNums",
    "clientManageThreadPoolNums",
    "consumerManageThreadPoolNums",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity",
    "serverWorkerThreads",
    "serverSelectorThreads",
    "serverCallbackExecutorThreads",
    "serverSocketRcvBufSize",
    "clientWorkerThreads",
    "useEpollNativeSelector",
    "useReentrantLockWhenPutMessage",
    "waitTimeMillsInSendQueue",
    "osPageCacheBusyTimeOutMills",
    "putMessageTimeout",
    "warmMapedFileEnable",
    "flushLeastPagesWhenWarmMapedFile",
    "flushCommitLogTimed",
    "flushConsumeQueueLeastPages",
    "flushConsumeQueueThoroughInterval",
    "commitIntervalCommitLog",
    "commitCommitLogLeastPages",
    "commitCommitLogThoroughInterval",
    "checkCRCOnRecover",
    "deleteCommitLogFilesInterval",
    "deleteConsumeQueueFilesInterval",
    "destroyMapedFileIntervalForcibly",
    "redeleteHangedFileInterval",
    "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInMemory",
    "longPollingEnable",
    "shortPollingTimeMills",
    "notifyConsumerIdsChangedEnable",
    "messageIndexSafe",
    "defaultQueryMaxNum",
    "enableScheduleMessageStats",
    "clusterTopicEnable",
    "brokerTopicEnable",
    "traceTopicEnable",
    "msgTraceTopicName",
    "fetchNamesrvAddrByAddressServer",
    "forceRegister",
    "transactionOpMsgMaxSize",
    "transactionOpBatchInterval",
    "transactionMetricFlushInterval",
    "duplicationEnable",
    "enableConsumeQueueExt",
];

/// One RocketMQ store path key: `(key, name under storePathRootDir, why another place is
/// refused)`.
pub(super) type StorePath = (&'static str, &'static str, &'static str);

/// RocketMQ's store paths, each harmless at the place RocketMQ derives from
/// `storePathRootDir` (`(key, name under the root, why another place is refused)`), as
/// RocketMQ's own files spell them out (its controller quick-start sets
/// `storePathCommitLog=<root>/commitlog`). Checked once every source applied, since the
/// root may come later in the file.
pub(super) const DERIVED_STORE_PATHS: &[StorePath] = &[
    (
        "storePathCommitLog",
        "commitlog",
        "each shard keeps its CommitLog in <storePathRootDir>/shard-<n>/commitlog; remove this key",
    ),
    (
        "storePathConsumeQueue",
        "consumequeue",
        "each shard keeps its ConsumeQueues under <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "storePathIndex",
        "index",
        "each shard keeps its IndexFiles under <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "storeCheckpoint",
        "checkpoint",
        "each shard keeps its checkpoint in <storePathRootDir>/shard-<n>; remove this key",
    ),
    (
        "abortFile",
        "abort",
        "each shard keeps its abort marker in <storePathRootDir>/shard-<n>; remove this key",
    ),
];

/// RocketMQ keys whose meaning ringmq cannot honour: `(key, harmless value, why)`. The
/// harmless value (RocketMQ's default) is ignored with a warning; any other value, or any
/// value when there is none, stops the start.
pub(super) const UNSUPPORTED_ROCKETMQ_KEYS: &[(&str, Option<&str>, &str)] = &[
    (
        "aclEnable",
        Some("false"),
        "access control is not implemented: this node would serve every client",
    ),
    (
        "authenticationEnabled",
        Some("false"),
        "authentication is not implemented: this node would serve every client",
    ),
    (
        "authorizationEnabled",
        Some("false"),
        "authorization is not implemented: this node would serve every client",
    ),
    (
        "brokerPermission",
        Some("6"),
        "per-broker permissions are not implemented: this node would serve reads and writes; give the topics the permission instead (`ringmq admin topic-update --perm`)",
    ),
    (
        "inSyncReplicas",
        Some("1"),
        "replication is not implemented: no acknowledgement waits for a replica",
    ),
    (
        "minInSyncReplicas",
        Some("1"),
        "replication is not implemented: no acknowledgement waits for a replica",
    ),
    (
        "totalReplicas",
        Some("1"),
        "replication is not implemented: there is one copy",
    ),
    (
        "cleanFileForciblyEnable",
        Some("true"),
        "forced cleanup cannot be switched off: above diskSpaceCleanForciblyRatio unexpired segments are deleted; raise that ratio instead",
    ),
    (
        "enableDLegerCommitLog",
        Some("false"),
        "the DLedger CommitLog is not implemented",
    ),
    (
        "transientStorePoolEnable",
        Some("false"),
        "the transient store pool is not implemented",
    ),
];
