package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/**
 * Two members of one clustering group on a 4-queue topic split the queues between them: every
 * message reaches the group exactly once, each member gets some, and only from its own queues.
 */
class ClusteringConsumptionTest {
    private static DefaultMQPushConsumer member(Clients clients, String group, String topic, Delivered delivered)
            throws Exception {
        DefaultMQPushConsumer consumer = clients.pushConsumer(group);
        consumer.subscribe(topic, "*");
        Clients.startCollecting(consumer, delivered);
        return consumer;
    }

    @Test
    void twoMembersOfOneGroupShareTheQueuesAndGetEveryMessageExactlyOnce() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Clustering", 4);
            String group = clients.name("cg");
            Delivered first = new Delivered();
            Delivered second = new Delivered();
            DefaultMQPushConsumer a = member(clients, group, topic, first);
            DefaultMQPushConsumer b = member(clients, group, topic, second);

            // Send only once the group has settled (2 + 2 disjoint queues), so no queue moves
            // between members while messages are in flight.
            Wait.until(Duration.ofSeconds(60),
                    () -> "rebalance into 2 + 2 queues: a=" + Clients.assigned(a, topic) + " b=" + Clients.assigned(b, topic),
                    () -> {
                        Set<MessageQueue> qa = Clients.assigned(a, topic);
                        Set<MessageQueue> qb = Clients.assigned(b, topic);
                        Set<MessageQueue> union = new HashSet<>(qa);
                        union.addAll(qb);
                        return qa.size() == 2 && qb.size() == 2 && union.size() == 4;
                    });
            Set<MessageQueue> queuesOfA = Clients.assigned(a, topic);
            Set<MessageQueue> queuesOfB = Clients.assigned(b, topic);

            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> expected = new TreeSet<>();
            for (int i = 0; i < 40; i++) {
                String body = "clustered-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                expected.add(body);
            }

            Delivered together = new Delivered();
            Wait.until(Duration.ofSeconds(60), () -> "group received " + (first.size() + second.size()) + " of 40", () -> {
                Set<String> got = new TreeSet<>(first.counts().keySet());
                got.addAll(second.counts().keySet());
                return got.containsAll(expected);
            });
            together.add(first.all());
            together.add(second.all());

            assertEquals(expected, together.counts().keySet(), "bodies received by the group");
            assertEquals(Map.of(), together.duplicates(), "bodies received more than once across the group");
            assertFalse(first.all().isEmpty(), "member a received nothing");
            assertFalse(second.all().isEmpty(), "member b received nothing");
            for (MessageExt m : first.all()) {
                assertTrue(queuesOfA.contains(new MessageQueue(topic, m.getBrokerName(), m.getQueueId())),
                        "member a got " + Delivered.body(m) + " from queue " + m.getQueueId() + ", not one of " + queuesOfA);
            }
            for (MessageExt m : second.all()) {
                assertTrue(queuesOfB.contains(new MessageQueue(topic, m.getBrokerName(), m.getQueueId())),
                        "member b got " + Delivered.body(m) + " from queue " + m.getQueueId() + ", not one of " + queuesOfB);
            }
        }
    }
}
