package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.junit.jupiter.api.Test;

/**
 * The admin API's examineConsumeStats(group) (what `mqadmin consumerProgress` shows) reports, for
 * each queue of the group's topic, the broker's end offset and the group's committed offset,
 * which meet once the group has consumed everything.
 */
class ConsumerProgressTest {
    @Test
    void examineConsumeStatsShowsTheGroupCaughtUpOnEveryQueue() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Progress", 4);
            String group = clients.name("cg");
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Map<Integer, Long> ends = new TreeMap<>();
            Set<String> expected = new TreeSet<>();
            for (int i = 0; i < 40; i++) {
                String body = "progress-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                ends.merge(result.getMessageQueue().getQueueId(), result.getQueueOffset() + 1, Math::max);
                expected.add(body);
            }

            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(group);
            consumer.setPersistConsumerOffsetInterval(1000);
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);
            delivered.awaitAll(expected, Duration.ofSeconds(60));

            // queue id -> "consumer/broker" offsets, as examineConsumeStats gives them
            Map<Integer, String> want = new TreeMap<>();
            ends.forEach((queue, end) -> want.put(queue, end + "/" + end));
            AtomicReference<Object> got = new AtomicReference<>();
            Wait.until(Duration.ofSeconds(60), () -> "examineConsumeStats(" + group + ") per queue consumer/broker offsets "
                    + want + ", got " + got.get(), () -> {
                        try {
                            ConsumeStats stats = clients.admin().examineConsumeStats(group);
                            Map<Integer, String> offsets = new TreeMap<>();
                            for (Map.Entry<MessageQueue, OffsetWrapper> e : stats.getOffsetTable().entrySet()) {
                                if (e.getKey().getTopic().equals(topic)) {
                                    offsets.put(e.getKey().getQueueId(),
                                            e.getValue().getConsumerOffset() + "/" + e.getValue().getBrokerOffset());
                                }
                            }
                            got.set(offsets);
                            return offsets.equals(want);
                        } catch (Exception e) {
                            got.set(e.toString());
                            return false;
                        }
                    });
        }
    }
}
