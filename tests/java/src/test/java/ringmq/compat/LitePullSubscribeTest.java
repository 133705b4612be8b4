package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Test;

/**
 * A subscribed DefaultLitePullConsumer polls every message once and commits; the next consumer
 * of the same group resumes from the commit: it gets what was sent since, and nothing before.
 */
class LitePullSubscribeTest {
    private static DefaultLitePullConsumer subscriber(Clients clients, String group, String topic) throws Exception {
        DefaultLitePullConsumer consumer = clients.litePullConsumer(group);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(false);
        consumer.subscribe(topic, "*");
        consumer.start();
        return consumer;
    }

    private static Delivered pollAll(DefaultLitePullConsumer consumer, Set<String> expected) {
        Delivered delivered = new Delivered();
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (!delivered.counts().keySet().containsAll(expected)) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("polled " + delivered.counts().keySet().size() + " of " + expected.size()
                        + " within 60 s");
            }
            List<MessageExt> batch = consumer.poll(1000);
            delivered.add(batch);
        }
        return delivered;
    }

    private static Set<String> send(DefaultMQProducer producer, String topic, String prefix, int n) throws Exception {
        Set<String> bodies = new TreeSet<>();
        for (int i = 0; i < n; i++) {
            String body = prefix + "-" + i;
            SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
            assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
            bodies.add(body);
        }
        return bodies;
    }

    @Test
    void subscribedConsumerPollsAllCommitsAndTheGroupResumesAfterTheCommit() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("LitePullSubscribe", 4);
            String group = clients.name("cg");
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> before = send(producer, topic, "before", 40);

            DefaultLitePullConsumer first = subscriber(clients, group, topic);
            Delivered polled = pollAll(first, before);
            assertEquals(before, polled.counts().keySet(), "bodies polled");
            assertEquals(Map.of(), polled.duplicates(), "duplicates");
            first.commit(first.assignment(), true);
            first.shutdown();

            Set<String> after = send(producer, topic, "after", 20);
            DefaultLitePullConsumer second = subscriber(clients, group, topic);
            Delivered resumed = pollAll(second, after);
            // The earlier messages sit before the new ones in the same queues: had the commit
            // been lost, they would have come first.
            assertEquals(after, resumed.counts().keySet(), "bodies the group got after the commit");
            assertEquals(Map.of(), resumed.duplicates(), "duplicates after the commit");
        }
    }
}
