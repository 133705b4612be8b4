package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.junit.jupiter.api.Test;

/**
 * POP consumption the way the Java client does it: an admin sets the group's request mode to
 * POP on the broker (SET_MESSAGE_REQUEST_MODE), a push consumer with server-side rebalance
 * (setClientRebalance(false)) learns it from QUERY_ASSIGNMENT and pops: it gets everything once,
 * and the one message it fails comes again (after the 10 s invisible time the client asks for).
 */
class PopConsumptionTest {
    private static final long CLOCK_TOLERANCE_MS = 100;

    @Test
    void popModePushConsumerGetsEverythingAndAFailedMessageAgain() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Pop", 4);
            String group = clients.name("cg");
            clients.admin().setMessageRequestMode(clients.target().brokerAddr(), topic, group,
                    MessageRequestMode.POP, 0, 10_000);

            Delivered delivered = new Delivered();
            String failOnce = "pop-7";
            AtomicBoolean failed = new AtomicBoolean();
            DefaultMQPushConsumer consumer = clients.pushConsumer(group);
            consumer.setClientRebalance(false);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                delivered.add(messages);
                for (MessageExt m : messages) {
                    if (Delivered.body(m).equals(failOnce) && failed.compareAndSet(false, true)) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();

            Wait.until(Duration.ofSeconds(60), () -> "a POP assignment of " + topic + ": pop queues "
                    + consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getPopProcessQueueTable().keySet()
                    + ", pull queues " + Clients.assigned(consumer, topic),
                    () -> consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getPopProcessQueueTable().keySet()
                            .stream().anyMatch(q -> q.getTopic().equals(topic)));
            assertEquals(Set.<MessageQueue>of(), Clients.assigned(consumer, topic), "queues pulled (not popped)");

            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> expected = new TreeSet<>();
            for (int i = 0; i < 20; i++) {
                String body = "pop-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                expected.add(body);
            }

            delivered.awaitAll(expected, Duration.ofSeconds(60));
            Wait.until(Duration.ofSeconds(60), () -> failOnce + " again after its failure: deliveries "
                    + delivered.of(failOnce).size(), () -> delivered.of(failOnce).size() >= 2);

            assertEquals(expected, delivered.counts().keySet(), "bodies popped");
            Map<String, Integer> duplicates = delivered.duplicates();
            assertEquals(Map.of(failOnce, 2), duplicates, "bodies delivered more than once");
            List<MessageExt> again = delivered.of(failOnce);
            assertTrue(again.get(1).getReconsumeTimes() >= 1, "reconsumeTimes of the redelivery: " + again.get(1));
            assertEquals(topic, again.get(1).getTopic(), "topic of the redelivery (as the client shows it)");
            List<Long> arrivals = delivered.arrivalsOf(failOnce);
            long gap = arrivals.get(1) - arrivals.get(0);
            assertTrue(gap >= 10_000 - CLOCK_TOLERANCE_MS,
                    "the failed message came again " + gap + " ms later, before the 10 s invisible time");
            Map<String, String> noHandle = new HashMap<>();
            for (MessageExt m : delivered.all()) {
                if (m.getProperty(MessageConst.PROPERTY_POP_CK) == null) {
                    noHandle.put(Delivered.body(m), String.valueOf(m.getProperties()));
                }
            }
            assertEquals(Map.of(), noHandle, "deliveries without a pop handle (POP_CK), i.e. not popped");
            assertNotNull(again.get(1).getProperty(MessageConst.PROPERTY_POP_CK), "pop handle of the redelivery");
        }
    }
}
