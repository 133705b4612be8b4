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
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.junit.jupiter.api.Test;

/** Two members of one broadcasting group on a 4-queue topic each receive every message, once. */
class BroadcastingConsumptionTest {
    private static DefaultMQPushConsumer member(Clients clients, String group, String topic, Delivered delivered)
            throws Exception {
        DefaultMQPushConsumer consumer = clients.pushConsumer(group);
        consumer.setMessageModel(MessageModel.BROADCASTING);
        consumer.subscribe(topic, "*");
        Clients.startCollecting(consumer, delivered);
        return consumer;
    }

    @Test
    void everyMemberOfABroadcastingGroupReceivesEveryMessageOnce() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Broadcasting", 4);
            String group = clients.name("cg");
            Delivered first = new Delivered();
            Delivered second = new Delivered();
            DefaultMQPushConsumer a = member(clients, group, topic, first);
            DefaultMQPushConsumer b = member(clients, group, topic, second);
            Wait.until(Duration.ofSeconds(60), () -> "both members on all 4 queues: a=" + Clients.assigned(a, topic)
                    + " b=" + Clients.assigned(b, topic),
                    () -> Clients.assigned(a, topic).size() == 4 && Clients.assigned(b, topic).size() == 4);

            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            Set<String> expected = new TreeSet<>();
            for (int i = 0; i < 30; i++) {
                String body = "broadcast-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                expected.add(body);
            }

            first.awaitAll(expected, Duration.ofSeconds(60));
            second.awaitAll(expected, Duration.ofSeconds(60));
            assertEquals(expected, first.counts().keySet(), "bodies member a received");
            assertEquals(expected, second.counts().keySet(), "bodies member b received");
            assertEquals(Map.of(), first.duplicates(), "duplicates at member a");
            assertEquals(Map.of(), second.duplicates(), "duplicates at member b");
        }
    }
}
