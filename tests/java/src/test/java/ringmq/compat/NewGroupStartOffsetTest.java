package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.junit.jupiter.api.Test;

/**
 * A new group asking to start from the last offset (the client's default) on a young topic
 * still gets what was sent before it started: the broker answers its offset query with 0 while
 * each queue's first message is in memory (QUERY_CONSUMER_OFFSET without setZeroIfNotFound).
 */
class NewGroupStartOffsetTest {
    @Test
    void aNewLastOffsetGroupOnAYoungTopicGetsTheMessagesSentBeforeItStarted() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("YoungTopic", 4);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> expected = new TreeSet<>();
            for (int i = 0; i < 12; i++) {
                String body = "before-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                expected.add(body);
            }

            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
            consumer.subscribe(topic, "*");
            Clients.startCollecting(consumer, delivered);

            delivered.awaitAll(expected, Duration.ofSeconds(60));
            assertEquals(Set.of(), delivered.duplicates().keySet(), "bodies delivered twice");
        }
    }
}
