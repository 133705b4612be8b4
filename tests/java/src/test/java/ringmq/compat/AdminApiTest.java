package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.body.ConsumeStatsList;
import org.apache.rocketmq.remoting.protocol.body.Connection;
import org.apache.rocketmq.remoting.protocol.body.ConsumerRunningInfo;
import org.apache.rocketmq.remoting.protocol.body.ProducerConnection;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;

/**
 * The admin requests behind mqadmin's daily commands, through the stock {@link DefaultMQAdminExt}:
 * GET_TOPIC_CONFIG (351), GET_PRODUCER_CONNECTION_LIST (204), GET_BROKER_CONSUME_STATS (317),
 * GET_CONSUMER_RUNNING_INFO (307, relayed to the consumer), CLONE_GROUP_OFFSET (314),
 * GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25), GET_NAMESRV_CONFIG (319),
 * WIPE_WRITE_PERM_OF_BROKER (205), ADD_WRITE_PERM_OF_BROKER (327), DELETE_TOPIC_IN_NAMESRV (216),
 * QUERY_TOPIC_CONSUME_BY_WHO (300), VIEW_BROKER_STATS_DATA (315), GET_KV_CONFIG (101) and
 * DELETE_KV_CONFIG (102).
 */
class AdminApiTest {
    private static final Duration DEADLINE = Duration.ofSeconds(60);
    private static final int MESSAGES = 12;

    @Test
    void topicProducerConsumerAndOffsetRequestsAnswerAsRocketMq() throws Exception {
        try (Clients clients = new Clients()) {
            DefaultMQAdminExt admin = clients.admin();
            String broker = clients.target().brokerAddr();
            String topic = clients.topic("Admin", 4);
            String producerGroup = clients.name("pg");
            String group = clients.name("cg");
            DefaultMQProducer producer = clients.producer(producerGroup);
            for (int i = 0; i < MESSAGES; i++) {
                byte[] body = ("admin-" + i).getBytes(StandardCharsets.UTF_8);
                producer.send(new Message(topic, "TagA", "admin-key-" + i, body));
            }
            AtomicInteger consumed = new AtomicInteger();
            DefaultMQPushConsumer consumer = clients.pushConsumer(group);
            consumer.setPersistConsumerOffsetInterval(500);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                consumed.addAndGet(messages.size());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            Wait.until(DEADLINE, () -> "consumed " + consumed.get() + " of " + MESSAGES,
                    () -> consumed.get() >= MESSAGES);
            Wait.until(DEADLINE, () -> "committed offsets of " + group + " reach the broker",
                    () -> lag(admin, group, topic) == 0);

            // 351
            TopicConfig config = admin.examineTopicConfig(broker, topic);
            assertEquals(topic, config.getTopicName());
            assertEquals(4, config.getReadQueueNums());
            assertEquals(4, config.getWriteQueueNums());
            assertEquals(PermName.PERM_READ | PermName.PERM_WRITE, config.getPerm());
            MQBrokerException unknown = assertThrows(MQBrokerException.class,
                    () -> admin.examineTopicConfig(broker, clients.name("NoSuchTopic")));
            assertEquals(ResponseCode.TOPIC_NOT_EXIST, unknown.getResponseCode());

            // 204
            Wait.until(DEADLINE, () -> "a connection of producer group " + producerGroup, () -> {
                try {
                    return !admin.examineProducerConnectionInfo(producerGroup, topic)
                            .getConnectionSet().isEmpty();
                } catch (Exception e) {
                    return false;
                }
            });
            ProducerConnection producers = admin.examineProducerConnectionInfo(producerGroup, topic);
            Connection producerConnection = producers.getConnectionSet().iterator().next();
            assertTrue(producerConnection.getClientId().contains("@"), producerConnection.toString());
            assertTrue(producerConnection.getClientAddr().startsWith("127.0.0.1:"),
                    producerConnection.getClientAddr());
            assertEquals("JAVA", producerConnection.getLanguage().name());

            // 317
            ConsumeStatsList all = admin.fetchConsumeStatsInBroker(broker, false, 10_000);
            assertNotNull(all.getBrokerAddr());
            List<ConsumeStats> ours = null;
            for (Map<String, List<ConsumeStats>> entry : all.getConsumeStatsList()) {
                if (entry.containsKey(group)) {
                    ours = entry.get(group);
                }
            }
            assertNotNull(ours, "group " + group + " in " + all.getConsumeStatsList());
            assertEquals(1, ours.size(), "one topic: " + ours);
            assertEquals(4, ours.get(0).getOffsetTable().size());
            assertEquals(0, ours.get(0).computeTotalDiff());

            // 307: the broker asks the consumer and relays its answer.
            String clientId = admin.examineConsumerConnectionInfo(group)
                    .getConnectionSet().iterator().next().getClientId();
            ConsumerRunningInfo info = admin.getConsumerRunningInfo(group, clientId, false);
            assertNotNull(info, "running info of " + clientId);
            assertTrue(info.getSubscriptionSet().stream().anyMatch(s -> s.getTopic().equals(topic)),
                    "subscriptions: " + info.getSubscriptionSet());
            assertFalse(info.getMqTable().isEmpty(), "queues the consumer holds");

            // 300
            Set<String> consumers = admin.queryTopicConsumeByWho(topic).getGroupList();
            assertTrue(consumers.contains(group), "groups consuming " + topic + ": " + consumers);

            // 314
            String clone = clients.name("clone");
            admin.cloneGroupOffset(group, clone, topic, false);
            ConsumeStats source = admin.examineConsumeStats(group, topic);
            ConsumeStats cloned = admin.examineConsumeStats(clone, topic);
            for (Map.Entry<MessageQueue, OffsetWrapper> entry : source.getOffsetTable().entrySet()) {
                OffsetWrapper copy = cloned.getOffsetTable().get(entry.getKey());
                assertNotNull(copy, "queue " + entry.getKey() + " of " + clone);
                assertEquals(entry.getValue().getConsumerOffset(), copy.getConsumerOffset(),
                        "queue " + entry.getKey());
            }
        }
    }

    @Test
    void brokerConfigIsReadAndALiveKeyUpdated() throws Exception {
        try (Clients clients = new Clients()) {
            DefaultMQAdminExt admin = clients.admin();
            String broker = clients.target().brokerAddr();
            // 26
            Properties config = admin.getBrokerConfig(broker);
            assertEquals("broker-a", config.getProperty("brokerName"));
            assertEquals(broker.substring(broker.lastIndexOf(':') + 1), config.getProperty("listenPort"));
            assertEquals("true", config.getProperty("autoCreateSubscriptionGroup"));
            // 25: a key both change while running (its current value, so nothing else changes).
            Properties update = new Properties();
            update.setProperty("autoCreateSubscriptionGroup", "true");
            admin.updateBrokerConfig(broker, update);
            assertEquals("true", admin.getBrokerConfig(broker).getProperty("autoCreateSubscriptionGroup"));
            // 315: a stats item the broker does not hold (no put to this name ever).
            String unseen = clients.name("Unseen");
            MQClientException noStats = assertThrows(MQClientException.class,
                    () -> admin.viewBrokerStatsData(broker, "TOPIC_PUT_NUMS", unseen));
            assertEquals(ResponseCode.SYSTEM_ERROR, noStats.getResponseCode());
            assertEquals("The stats <TOPIC_PUT_NUMS> <" + unseen + "> not exist", noStats.getErrorMessage());
            if (clients.target().isRingmq()) {
                // ringmq reads this key only at start: refused as RocketMQ refuses a black-listed key.
                Properties notLive = new Properties();
                notLive.setProperty("fileReservedTime", "48");
                MQBrokerException refused = assertThrows(MQBrokerException.class,
                        () -> admin.updateBrokerConfig(broker, notLive));
                assertEquals(ResponseCode.NO_PERMISSION, refused.getResponseCode());
                assertTrue(refused.getErrorMessage().contains("fileReservedTime"), refused.getErrorMessage());
            }
        }
    }

    @Test
    void nameServerConfigWritePermAndTopicDeletion() throws Exception {
        try (Clients clients = new Clients()) {
            DefaultMQAdminExt admin = clients.admin();
            String namesrv = clients.target().namesrvAddr();
            String broker = clients.target().brokerAddr();
            // 319
            Map<String, Properties> namesrvConfig = admin.getNameServerConfig(Collections.singletonList(namesrv));
            Properties properties = namesrvConfig.get(namesrv);
            assertNotNull(properties, "config of " + namesrv + ": " + namesrvConfig);
            assertEquals(namesrv.substring(namesrv.lastIndexOf(':') + 1), properties.getProperty("listenPort"));

            // 205 and 327
            String topic = clients.topic("Perm", 2);
            int wiped = admin.wipeWritePermOfBroker(namesrv, "broker-a");
            try {
                assertTrue(wiped >= 1, "topics wiped: " + wiped);
                int perm = admin.examineTopicRouteInfo(topic).getQueueDatas().get(0).getPerm();
                assertFalse(PermName.isWriteable(perm), "perm after wipe: " + perm);
                assertTrue(PermName.isReadable(perm), "perm after wipe: " + perm);
            } finally {
                int added = admin.addWritePermOfBroker(namesrv, "broker-a");
                assertEquals(wiped, added, "topics given write back");
            }
            int perm = admin.examineTopicRouteInfo(topic).getQueueDatas().get(0).getPerm();
            assertTrue(PermName.isWriteable(perm), "perm after add: " + perm);

            // 216, after the broker's own delete (as mqadmin deleteTopic does).
            String doomed = clients.topic("Doomed", 2);
            admin.deleteTopicInBroker(Set.of(broker), doomed);
            admin.deleteTopicInNameServer(Set.of(namesrv), doomed);
            Wait.until(DEADLINE, () -> doomed + " gone from the topic list", () -> {
                try {
                    return !admin.fetchAllTopicList().getTopicList().contains(doomed);
                } catch (Exception e) {
                    return false;
                }
            });
            // Deleting what is not there succeeds too.
            admin.deleteTopicInNameServer(Set.of(namesrv), clients.name("NeverThere"));

            // 101 and 102: a key the name server does not hold (mqadmin deleteTopic deletes
            // the topic's ORDER_TOPIC_CONFIG key).
            String key = clients.name("NoKey");
            MQClientException missing = assertThrows(MQClientException.class,
                    () -> admin.getKVConfig("ORDER_TOPIC_CONFIG", key));
            assertEquals(ResponseCode.QUERY_NOT_FOUND, missing.getResponseCode());
            admin.deleteKvConfig("ORDER_TOPIC_CONFIG", key);
        }
    }

    /** The group's lag on the topic; -1 while the broker has no figures for it yet. */
    private static long lag(DefaultMQAdminExt admin, String group, String topic) {
        try {
            ConsumeStats stats = admin.examineConsumeStats(group, topic);
            return stats.getOffsetTable().isEmpty() ? -1 : stats.computeTotalDiff();
        } catch (Exception e) {
            return -1;
        }
    }
}
