package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/**
 * A TransactionMQProducer sends three sets of half messages, interleaved: set A its local
 * transaction commits, set B it rolls back, set C it leaves UNKNOW, and commits when the
 * broker checks it back (checkLocalTransaction). A consumer sees exactly A and C, once each,
 * and the topic holds nothing else; B never reaches it. The broker checks back every message
 * of C (the message on its own topic, with the msgId its send got) and none of A or B, which
 * were decided at once; no message of C arrives before its check was answered. Delivered
 * messages carry the msgId their send got, no REAL_TOPIC or REAL_QID, sysFlag COMMIT, and the
 * CommitLog offset of the half they committed in PREPARED TRANSACTION OFFSET (the record there,
 * viewed by id, is that half; for C, the half its answered check named). The stock Java
 * client's TransactionSendResult has no offsetMsgId (sendMessageInTransaction does not copy
 * it), so the half is found through the delivered message.
 *
 * <p>Both brokers keep their defaults (transactionTimeOut 6 s; transactionCheckInterval 30 s in
 * RocketMQ 5.5.0, 60 s in ringmq; RocketMQ's decisions reach its op queue within
 * transactionOpBatchInterval, 3 s, before a decided half could be checked): the check-back
 * comes within about 40 s on RocketMQ and 70 s on ringmq, so the scenario waits up to 90 s.
 */
class TransactionMessageTest {
    private static final int PER_SET = 3;
    private static final int TRANSACTION_MASK = 0x3 << 2;
    private static final int TRANSACTION_COMMIT_TYPE = 0x2 << 2;

    /** One check-back as the listener saw it. */
    private record Check(String body, String topic, String uniqKey, String producerGroup, long commitLogOffset,
            LocalTransactionState answer, long answeredMs) {
    }

    private static LocalTransactionState decided(String body) {
        if (body.startsWith("tx-commit-")) {
            return LocalTransactionState.COMMIT_MESSAGE;
        }
        if (body.startsWith("tx-rollback-")) {
            return LocalTransactionState.ROLLBACK_MESSAGE;
        }
        return LocalTransactionState.UNKNOW;
    }

    @Test
    void committedAndCheckedBackCommittedHalvesAreDeliveredRolledBackOneIsNot() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Transaction", 1);
            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);

            List<Check> checks = new ArrayList<>();
            TransactionListener listener = new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                    return decided(new String(message.getBody(), StandardCharsets.UTF_8));
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt message) {
                    String body = Delivered.body(message);
                    // What the producer knows by now: C committed, A and B as decided.
                    LocalTransactionState answer = body.startsWith("tx-rollback-")
                            ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.COMMIT_MESSAGE;
                    synchronized (checks) {
                        checks.add(new Check(body, message.getTopic(), MessageClientIDSetter.getUniqID(message),
                                message.getProperty(MessageConst.PROPERTY_PRODUCER_GROUP),
                                message.getCommitLogOffset(), answer, System.currentTimeMillis()));
                    }
                    return answer;
                }
            };
            String group = clients.name("txpg");
            TransactionMQProducer producer = clients.transactionProducer(group, listener);

            Map<String, TransactionSendResult> sent = new TreeMap<>();
            Set<String> committed = new TreeSet<>();
            Set<String> unknown = new TreeSet<>();
            for (int i = 0; i < PER_SET; i++) {
                for (String set : new String[] {"tx-commit-", "tx-rollback-", "tx-unknown-"}) {
                    String body = set + i;
                    Message message = new Message(topic, "TagA", "key-" + body, body.getBytes(StandardCharsets.UTF_8));
                    TransactionSendResult result = producer.sendMessageInTransaction(message, null);
                    assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "half message " + body + ": " + result);
                    assertEquals(decided(body), result.getLocalTransactionState(), "local transaction of " + body);
                    assertNotNull(result.getMsgId(), "msgId of " + body);
                    assertEquals(result.getMsgId(), result.getTransactionId(),
                            "the send response's transactionId is the message's unique key: " + result);
                    sent.put(body, result);
                    if (!set.equals("tx-rollback-")) {
                        committed.add(body);
                    }
                    if (set.equals("tx-unknown-")) {
                        unknown.add(body);
                    }
                }
            }

            delivered.awaitAll(committed, Duration.ofSeconds(90));

            // One queue: the consumer's progress at the queue's end means it has seen all of it.
            MessageQueue queue = new MessageQueue(topic, clients.admin().examineTopicRouteInfo(topic)
                    .getQueueDatas().get(0).getBrokerName(), 0);
            long end = clients.admin().maxOffset(queue);
            Wait.until(Duration.ofSeconds(30), () -> "consumer progress reaches " + end + ", is "
                    + consumer.getDefaultMQPushConsumerImpl().getOffsetStore().readOffset(queue, ReadOffsetType.READ_FROM_MEMORY),
                    () -> consumer.getDefaultMQPushConsumerImpl().getOffsetStore()
                            .readOffset(queue, ReadOffsetType.READ_FROM_MEMORY) == end);
            Map<String, Integer> once = new TreeMap<>();
            committed.forEach(body -> once.put(body, 1));
            assertEquals(once, delivered.counts(), "bodies delivered, with counts");
            assertEquals(committed.size(), end, "messages in the topic (the committed ones)");

            List<Check> seen;
            synchronized (checks) {
                seen = new ArrayList<>(checks);
            }
            Set<String> checkedBodies = new TreeSet<>();
            for (Check check : seen) {
                checkedBodies.add(check.body());
                assertTrue(unknown.contains(check.body()),
                        "checked back though decided at once (or not sent here): " + check + "; checks " + seen);
                assertEquals(topic, check.topic(), "topic of the checked message: " + check);
                assertEquals(sent.get(check.body()).getMsgId(), check.uniqKey(),
                        "UNIQ_KEY of the checked message is the msgId its send got: " + check);
                assertEquals(group, check.producerGroup(), "PGROUP of the checked message: " + check);
            }
            assertEquals(unknown, checkedBodies, "the UNKNOW halves the broker checked back");

            for (MessageExt m : delivered.all()) {
                String body = Delivered.body(m);
                TransactionSendResult half = sent.get(body);
                assertEquals(topic, m.getTopic(), "topic of " + body);
                assertEquals("key-" + body, m.getKeys(), "keys of " + body);
                assertEquals(half.getMsgId(), m.getMsgId(), "msgId of " + body + " is the one its send got");
                assertNull(m.getProperty(MessageConst.PROPERTY_REAL_TOPIC), "REAL_TOPIC left on " + m);
                assertNull(m.getProperty(MessageConst.PROPERTY_REAL_QUEUE_ID), "REAL_QID left on " + m);
                assertEquals(TRANSACTION_COMMIT_TYPE, m.getSysFlag() & TRANSACTION_MASK, "sysFlag of " + m);
                // The record PREPARED TRANSACTION OFFSET names (VIEW_MESSAGE_BY_ID) is this message's half.
                MessageExt halfRecord = clients.admin().viewMessage(topic,
                        MessageDecoder.createMessageId(m.getStoreHost(), m.getPreparedTransactionOffset()));
                assertEquals(m.getMsgId(), MessageClientIDSetter.getUniqID(halfRecord),
                        "UNIQ_KEY of the record at PREPARED TRANSACTION OFFSET " + m.getPreparedTransactionOffset()
                                + " of " + body + ": " + halfRecord);
                assertEquals(topic, halfRecord.getProperty(MessageConst.PROPERTY_REAL_TOPIC),
                        "REAL_TOPIC of the half of " + body + ": " + halfRecord);
                if (unknown.contains(body)) {
                    List<Check> answered = seen.stream().filter(c -> c.body().equals(body)
                            && c.answer() == LocalTransactionState.COMMIT_MESSAGE).toList();
                    assertFalse(answered.isEmpty(), body + " delivered, never checked back");
                    long arrival = delivered.arrivalsOf(body).get(0);
                    assertTrue(arrival >= answered.get(0).answeredMs(),
                            body + " delivered " + (answered.get(0).answeredMs() - arrival)
                                    + " ms before its check was answered");
                    assertTrue(answered.stream().anyMatch(c -> c.commitLogOffset() == m.getPreparedTransactionOffset()),
                            "PREPARED TRANSACTION OFFSET " + m.getPreparedTransactionOffset() + " of " + body
                                    + " names none of the halves its checks named: " + answered);
                }
            }
        }
    }
}
