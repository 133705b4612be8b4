package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Test;

/**
 * Messages sent with delay level 2 (5 s in the default messageDelayLevel of both brokers) reach a
 * live consumer no earlier than 5 s after the send, within a bound, once each, on their topic.
 */
class DelayLevelTest {
    /** Both brokers and this JVM read the same clock; allow only rounding. */
    private static final long CLOCK_TOLERANCE_MS = 100;
    private static final long LEVEL_2_MS = 5_000;

    @Test
    void delayLevel2ArrivesNoEarlierThanFiveSecondsAfterTheSend() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("DelayLevel", 4);
            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);
            Wait.until(Duration.ofSeconds(60), () -> "consumer on all 4 queues: " + Clients.assigned(consumer, topic),
                    () -> Clients.assigned(consumer, topic).size() == 4);

            // A message without delay first: it shows the consumer is live, so the delayed
            // messages' arrival times measure the broker's delay, not the consumer's start.
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            assertEquals(SendStatus.SEND_OK, producer.send(new Message(topic, "TagA",
                    "immediate".getBytes(StandardCharsets.UTF_8))).getSendStatus(), "send immediate");
            delivered.awaitAll(Set.of("immediate"), Duration.ofSeconds(30));

            Map<String, Long> sentAt = new TreeMap<>();
            for (int i = 0; i < 4; i++) {
                String body = "delayed-" + i;
                Message message = new Message(topic, "TagA", "key-" + body, body.getBytes(StandardCharsets.UTF_8));
                message.setDelayTimeLevel(2);
                long before = System.currentTimeMillis();
                SendResult result = producer.send(message);
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body + ": " + result);
                sentAt.put(body, before);
            }

            Set<String> expected = new TreeSet<>(sentAt.keySet());
            expected.add("immediate");
            delivered.awaitAll(expected, Duration.ofSeconds(30));
            assertEquals(expected, delivered.counts().keySet(), "bodies delivered");
            assertEquals(Map.of(), delivered.duplicates(), "duplicates");
            for (Map.Entry<String, Long> entry : sentAt.entrySet()) {
                String body = entry.getKey();
                long waited = delivered.arrivalsOf(body).get(0) - entry.getValue();
                assertTrue(waited >= LEVEL_2_MS - CLOCK_TOLERANCE_MS,
                        body + " arrived " + waited + " ms after its send, before the 5 s of delay level 2");
                assertTrue(waited <= LEVEL_2_MS + 15_000, body + " arrived only " + waited + " ms after its send");
                MessageExt m = delivered.of(body).get(0);
                assertEquals(topic, m.getTopic(), "topic of " + body);
                assertEquals("TagA", m.getTags(), "tag of " + body);
                assertEquals("key-" + body, m.getKeys(), "keys of " + body);
            }
        }
    }
}
