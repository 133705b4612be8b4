package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.junit.jupiter.api.Test;

/**
 * A producer and a push consumer keep working across a broker restart (SIGTERM, start again on
 * the same store and ports): sends succeed again within a bound and every message, sent before
 * or after, reaches the consumer at least once.
 */
class BrokerRestartTest {
    @Test
    void producerAndPushConsumerSurviveABrokerRestart() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Restart", 4);
            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);

            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> before = new TreeSet<>();
            for (int i = 0; i < 20; i++) {
                String body = "before-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                before.add(body);
            }
            delivered.awaitAll(before, Duration.ofSeconds(60));

            clients.target().restartBroker();

            Set<String> all = new TreeSet<>(before);
            for (int i = 0; i < 20; i++) {
                String body = "after-" + i;
                AtomicReference<String> last = new AtomicReference<>();
                // Retry each send until the broker takes it again (bounded).
                Wait.until(Duration.ofSeconds(90), () -> "send " + body + " after the restart: " + last.get(), () -> {
                    try {
                        SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                        last.set(String.valueOf(result));
                        return result.getSendStatus() == SendStatus.SEND_OK;
                    } catch (Exception e) {
                        last.set(e.toString());
                        return false;
                    }
                });
                all.add(body);
            }

            delivered.awaitAll(all, Duration.ofSeconds(90));
            assertEquals(all, delivered.counts().keySet(), "bodies delivered across the restart");
        }
    }
}
