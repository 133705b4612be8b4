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
 * 5.x timer messages (Message.setDeliverTimeMs, the TIMER_DELIVER_MS property) reach a live
 * consumer no earlier than their due time, within a bound, once each, on their topic.
 */
class TimerMessageTest {
    /** Both brokers and this JVM read the same clock; allow only rounding. */
    private static final long CLOCK_TOLERANCE_MS = 100;

    @Test
    void timerMessagesArriveNoEarlierThanDueAndOnce() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Timer", 4);
            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);
            Wait.until(Duration.ofSeconds(60), () -> "consumer on all 4 queues: " + Clients.assigned(consumer, topic),
                    () -> Clients.assigned(consumer, topic).size() == 4);

            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            assertEquals(SendStatus.SEND_OK, producer.send(new Message(topic, "TagA",
                    "immediate".getBytes(StandardCharsets.UTF_8))).getSendStatus(), "send immediate");
            delivered.awaitAll(Set.of("immediate"), Duration.ofSeconds(30));

            Map<String, Long> due = new TreeMap<>();
            for (int i = 0; i < 4; i++) {
                String body = "timer-" + i;
                Message message = new Message(topic, "TagA", "key-" + body, body.getBytes(StandardCharsets.UTF_8));
                // 3 s, 3.25 s, 3.5 s, 3.75 s from now.
                long deliverAt = System.currentTimeMillis() + 3000 + 250L * i;
                message.setDeliverTimeMs(deliverAt);
                SendResult result = producer.send(message);
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body + ": " + result);
                due.put(body, deliverAt);
            }

            Set<String> expected = new TreeSet<>(due.keySet());
            expected.add("immediate");
            delivered.awaitAll(expected, Duration.ofSeconds(30));
            assertEquals(expected, delivered.counts().keySet(), "bodies delivered");
            assertEquals(Map.of(), delivered.duplicates(), "duplicates");
            for (Map.Entry<String, Long> entry : due.entrySet()) {
                String body = entry.getKey();
                long early = entry.getValue() - delivered.arrivalsOf(body).get(0);
                assertTrue(early <= CLOCK_TOLERANCE_MS, body + " arrived " + early + " ms before it was due");
                assertTrue(-early <= 15_000, body + " arrived only " + -early + " ms after it was due");
                MessageExt m = delivered.of(body).get(0);
                assertEquals(topic, m.getTopic(), "topic of " + body);
                assertEquals("key-" + body, m.getKeys(), "keys of " + body);
            }
        }
    }
}
