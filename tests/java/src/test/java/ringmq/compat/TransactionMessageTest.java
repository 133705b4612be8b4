package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/**
 * A TransactionMQProducer sends three half messages: one its local transaction commits, one it
 * rolls back, one it leaves UNKNOW, which the broker's check-back then commits. Consumers see
 * exactly the two committed ones, once each, and the rolled-back one never reaches the topic.
 *
 * <p>The real broker keeps its defaults (transactionTimeOut 6 s, transactionCheckInterval 30 s):
 * the check-back comes within about 40 s, so the scenario waits up to 90 s for it.
 */
class TransactionMessageTest {
    @Test
    void committedAndCheckedBackCommittedHalvesAreDeliveredRolledBackOneIsNot() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Transaction", 1);
            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);

            List<String> checked = new ArrayList<>();
            TransactionListener listener = new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                    switch (new String(message.getBody(), StandardCharsets.UTF_8)) {
                        case "tx-commit":
                            return LocalTransactionState.COMMIT_MESSAGE;
                        case "tx-rollback":
                            return LocalTransactionState.ROLLBACK_MESSAGE;
                        default:
                            return LocalTransactionState.UNKNOW;
                    }
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt message) {
                    String body = Delivered.body(message);
                    synchronized (checked) {
                        checked.add(body);
                    }
                    return body.equals("tx-rollback") ? LocalTransactionState.ROLLBACK_MESSAGE
                            : LocalTransactionState.COMMIT_MESSAGE;
                }
            };
            TransactionMQProducer producer = clients.transactionProducer(clients.name("txpg"), listener);

            for (String[] send : new String[][] {
                    {"tx-commit", "COMMIT_MESSAGE"}, {"tx-rollback", "ROLLBACK_MESSAGE"}, {"tx-unknown", "UNKNOW"}}) {
                Message message = new Message(topic, "TagA", "key-" + send[0], send[0].getBytes(StandardCharsets.UTF_8));
                TransactionSendResult result = producer.sendMessageInTransaction(message, null);
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "half message " + send[0] + ": " + result);
                assertEquals(send[1], result.getLocalTransactionState().name(), "local transaction of " + send[0]);
            }

            delivered.awaitAll(Set.of("tx-commit"), Duration.ofSeconds(30));
            delivered.awaitAll(Set.of("tx-unknown"), Duration.ofSeconds(90));

            // One queue: the consumer's progress at the queue's end means it has seen all of it.
            MessageQueue queue = new MessageQueue(topic, clients.admin().examineTopicRouteInfo(topic)
                    .getQueueDatas().get(0).getBrokerName(), 0);
            long end = clients.admin().maxOffset(queue);
            Wait.until(Duration.ofSeconds(30), () -> "consumer progress reaches " + end + ", is "
                    + consumer.getDefaultMQPushConsumerImpl().getOffsetStore().readOffset(queue, ReadOffsetType.READ_FROM_MEMORY),
                    () -> consumer.getDefaultMQPushConsumerImpl().getOffsetStore()
                            .readOffset(queue, ReadOffsetType.READ_FROM_MEMORY) == end);
            assertEquals(Map.of("tx-commit", 1, "tx-unknown", 1), delivered.counts(), "bodies delivered, with counts");
            assertEquals(2, end, "messages in the topic (the two committed ones)");
            synchronized (checked) {
                assertTrue(checked.contains("tx-unknown"), "the broker checked back tx-unknown: checks " + checked);
            }
            for (MessageExt m : delivered.all()) {
                assertEquals(topic, m.getTopic(), "topic of " + Delivered.body(m));
                assertEquals("key-" + Delivered.body(m), m.getKeys(), "keys of " + Delivered.body(m));
            }
        }
    }
}
