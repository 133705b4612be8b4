package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/**
 * A DefaultLitePullConsumer assigned all queues of a topic and sought to offset 0 polls every
 * message once, each queue in offset order, with the offsets the sends reported.
 */
class LitePullAssignTest {
    @Test
    void assignedQueuesSoughtToZeroPollEveryMessageInQueueOrder() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("LitePullAssign", 4);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            // queue id -> bodies in send order; body -> offset the send reported
            Map<Integer, List<String>> sent = new TreeMap<>();
            Map<String, Long> offsets = new TreeMap<>();
            for (int i = 0; i < 40; i++) {
                String body = "assigned-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                sent.computeIfAbsent(result.getMessageQueue().getQueueId(), q -> new ArrayList<>()).add(body);
                offsets.put(body, result.getQueueOffset());
            }

            DefaultLitePullConsumer consumer = clients.litePullConsumer(clients.name("cg"));
            consumer.setAutoCommit(false);
            consumer.start();
            Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
            assertEquals(4, queues.size(), "queues of " + topic + ": " + queues);
            consumer.assign(queues);
            for (MessageQueue queue : queues) {
                consumer.seek(queue, 0);
            }

            Map<Integer, List<String>> polled = new TreeMap<>();
            List<MessageExt> all = new ArrayList<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (all.size() < 40) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("polled " + all.size() + " of 40 within 60 s: " + polled);
                }
                for (MessageExt m : consumer.poll(1000)) {
                    all.add(m);
                    polled.computeIfAbsent(m.getQueueId(), q -> new ArrayList<>()).add(Delivered.body(m));
                }
            }

            assertEquals(sent, polled, "per queue, the bodies in poll order");
            for (MessageExt m : all) {
                assertEquals(offsets.get(Delivered.body(m)), m.getQueueOffset(), "queue offset of " + Delivered.body(m));
                assertEquals(topic, m.getTopic(), "topic of " + Delivered.body(m));
            }
        }
    }
}
