package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
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
 * A group consumes everything and its progress reaches the broker; with the group stopped, the
 * admin API resets its offsets to a time before the sends (resetOffsetByTimestamp, forced); the
 * group's next start receives every message again.
 */
class ResetOffsetByTimeTest {
    private static DefaultMQPushConsumer start(Clients clients, String group, String topic, Delivered delivered)
            throws Exception {
        DefaultMQPushConsumer consumer = clients.pushConsumer(group);
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.subscribe(topic, "*");
        Clients.startCollecting(consumer, delivered);
        return consumer;
    }

    private static String progress(ConsumeStats stats, String topic) {
        StringBuilder out = new StringBuilder();
        for (Map.Entry<MessageQueue, OffsetWrapper> e : stats.getOffsetTable().entrySet()) {
            if (e.getKey().getTopic().equals(topic)) {
                out.append(" q").append(e.getKey().getQueueId()).append(' ')
                        .append(e.getValue().getConsumerOffset()).append('/').append(e.getValue().getBrokerOffset());
            }
        }
        return out.toString();
    }

    @Test
    void resetToATimeBeforeTheSendsMakesTheGroupReceiveThemAgain() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("ResetByTime", 4);
            String group = clients.name("cg");
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            long beforeSends = System.currentTimeMillis();
            Set<String> expected = new TreeSet<>();
            for (int i = 0; i < 40; i++) {
                String body = "reset-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                expected.add(body);
            }

            Delivered first = new Delivered();
            DefaultMQPushConsumer consumer = start(clients, group, topic, first);
            first.awaitAll(expected, Duration.ofSeconds(60));
            // The group's committed progress on the broker covers every queue before it stops
            // (asked of the broker directly, GET_CONSUME_STATS: ConsumerProgressTest covers the
            // admin's examineConsumeStats(group) on its own).
            String broker = clients.target().brokerAddr();
            Wait.until(Duration.ofSeconds(60), () -> {
                try {
                    return "committed progress at the end of each queue:"
                            + progress(clients.admin().examineConsumeStats(broker, group, topic, 10_000), topic);
                } catch (Exception e) {
                    return "consume stats: " + e;
                }
            }, () -> {
                try {
                    ConsumeStats stats = clients.admin().examineConsumeStats(broker, group, topic, 10_000);
                    long queues = stats.getOffsetTable().entrySet().stream()
                            .filter(e -> e.getKey().getTopic().equals(topic))
                            .filter(e -> e.getValue().getConsumerOffset() == e.getValue().getBrokerOffset())
                            .count();
                    return queues == 4;
                } catch (Exception e) {
                    return false;
                }
            });
            consumer.shutdown();

            Map<MessageQueue, Long> reset = clients.admin().resetOffsetByTimestamp(topic, group, beforeSends - 1000, true);
            long toZero = reset.entrySet().stream().filter(e -> e.getKey().getTopic().equals(topic))
                    .filter(e -> e.getValue() == 0L).count();
            assertEquals(4, toZero, "queues reset to offset 0: " + reset);

            Delivered again = new Delivered();
            start(clients, group, topic, again);
            again.awaitAll(expected, Duration.ofSeconds(60));
            assertEquals(expected, again.counts().keySet(), "bodies received after the reset");
            assertEquals(Map.of(), again.duplicates(), "duplicates after the reset");
        }
    }
}
