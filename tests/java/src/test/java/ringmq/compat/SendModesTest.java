package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.junit.jupiter.api.Test;

/** Sync, async, oneway and batch sends of one producer all reach a clustering consumer, once. */
class SendModesTest {
    private static Message message(String topic, String body) {
        Message message = new Message(topic, "TagA", "key-" + body, body.getBytes(StandardCharsets.UTF_8));
        return message;
    }

    @Test
    void syncAsyncOnewayAndBatchSendsAreAllConsumedOnce() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("SendModes", 4);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> expected = new TreeSet<>();

            for (int i = 0; i < 20; i++) {
                String body = "sync-" + i;
                SendResult result = producer.send(message(topic, body));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "sync send " + body);
                assertTrue(result.getQueueOffset() >= 0, "queue offset of " + body + ": " + result);
                expected.add(body);
            }

            CountDownLatch acked = new CountDownLatch(20);
            AtomicReference<Throwable> asyncError = new AtomicReference<>();
            for (int i = 0; i < 20; i++) {
                String body = "async-" + i;
                producer.send(message(topic, body), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                        if (result.getSendStatus() != SendStatus.SEND_OK) {
                            asyncError.compareAndSet(null, new AssertionError(body + ": " + result));
                        }
                        acked.countDown();
                    }

                    @Override
                    public void onException(Throwable error) {
                        asyncError.compareAndSet(null, error);
                        acked.countDown();
                    }
                });
                expected.add(body);
            }
            assertTrue(acked.await(30, TimeUnit.SECONDS), "async acknowledgements within 30 s");
            assertEquals(null, asyncError.get(), "async send failure");

            for (int i = 0; i < 20; i++) {
                String body = "oneway-" + i;
                producer.sendOneway(message(topic, body));
                expected.add(body);
            }

            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                String body = "batch-" + i;
                batch.add(message(topic, body));
                expected.add(body);
            }
            SendResult batchResult = producer.send(batch);
            assertEquals(SendStatus.SEND_OK, batchResult.getSendStatus(), "batch send: " + batchResult);
            assertEquals(20, batchResult.getMsgId().split(",").length, "one id per batched message: " + batchResult);

            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);

            delivered.awaitAll(expected, Duration.ofSeconds(60));
            assertEquals(expected, delivered.counts().keySet(), "delivered bodies");
            assertEquals(java.util.Map.of(), delivered.duplicates(), "duplicates in one healthy group");
            delivered.all().forEach(m -> {
                assertEquals("TagA", m.getTags(), "tag of " + Delivered.body(m));
                assertEquals("key-" + Delivered.body(m), m.getKeys(), "keys of " + Delivered.body(m));
            });
        }
    }
}
