package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/**
 * A push consumer subscribed with "TagA || TagC" receives exactly the TagA and TagC messages of a
 * topic that also carries TagB and untagged messages, and its progress still covers the queue.
 */
class TagFilterTest {
    @Test
    void subscriptionTagAOrTagCReceivesOnlyThoseTags() throws Exception {
        try (Clients clients = new Clients()) {
            // One queue: the consumer's progress past the last offset proves it has seen (and
            // filtered) everything before, so "nothing else arrived" is checked, not hoped.
            String topic = clients.topic("TagFilter", 1);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> expected = new TreeSet<>();
            // Each round ends with a TagC message, so the progress reaches the end as soon as the
            // last matching message is consumed (not after a long poll times out).
            String[] tags = {null, "TagB", "TagA", "TagC"};
            int sent = 0;
            for (int i = 0; i < 10; i++) {
                for (String tag : tags) {
                    String body = (tag == null ? "untagged" : tag) + "-" + i;
                    Message message = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
                    if (tag != null) {
                        message.setTags(tag);
                    }
                    SendResult result = producer.send(message);
                    assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                    sent++;
                    if ("TagA".equals(tag) || "TagC".equals(tag)) {
                        expected.add(body);
                    }
                }
            }

            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "TagA || TagC");
            Clients.startCollecting(consumer, delivered);

            delivered.awaitAll(expected, Duration.ofSeconds(60));
            MessageQueue queue = new MessageQueue(topic, clients.admin().examineTopicRouteInfo(topic)
                    .getQueueDatas().get(0).getBrokerName(), 0);
            long end = sent;
            Wait.until(Duration.ofSeconds(60), () -> "consumer progress on " + queue + " reaches " + end + ", is "
                    + consumer.getDefaultMQPushConsumerImpl().getOffsetStore().readOffset(queue, ReadOffsetType.READ_FROM_MEMORY),
                    () -> consumer.getDefaultMQPushConsumerImpl().getOffsetStore()
                            .readOffset(queue, ReadOffsetType.READ_FROM_MEMORY) == end);

            assertEquals(expected, delivered.counts().keySet(), "bodies received with TagA || TagC");
            assertEquals(Map.of(), delivered.duplicates(), "duplicates");
            for (MessageExt m : delivered.all()) {
                assertEquals(Delivered.body(m).substring(0, 4), m.getTags(), "tag of " + Delivered.body(m));
            }
        }
    }
}
