package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Test;

/**
 * A producer picks the queue by order id (MessageQueueSelector); an orderly push consumer
 * (MessageListenerOrderly) gets each order's steps exactly in send order, none twice.
 */
class OrderlyConsumptionTest {
    private static final int ORDERS = 8;
    private static final int STEPS = 12;

    @Test
    void eachOrdersMessagesArriveInSendOrder() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("Orderly", 4);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            MessageQueueSelector byOrderId = (queues, message, arg) -> queues.get((Integer) arg % queues.size());
            Map<Integer, List<String>> sent = new TreeMap<>();
            // Interleave the orders so each queue holds several orders' steps mixed together.
            for (int step = 0; step < STEPS; step++) {
                for (int order = 0; order < ORDERS; order++) {
                    String body = "order-" + order + "-step-" + step;
                    Message message = new Message(topic, "TagA", "order-" + order, body.getBytes(StandardCharsets.UTF_8));
                    SendResult result = producer.send(message, byOrderId, order);
                    assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                    assertEquals(order % 4, result.getMessageQueue().getQueueId(), "queue of " + body);
                    sent.computeIfAbsent(order, o -> new ArrayList<>()).add(body);
                }
            }

            Map<Integer, List<String>> received = new TreeMap<>();
            DefaultMQPushConsumer consumer = clients.pushConsumer(clients.name("cg"));
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
                synchronized (received) {
                    for (MessageExt m : messages) {
                        String body = Delivered.body(m);
                        int order = Integer.parseInt(body.split("-")[1]);
                        received.computeIfAbsent(order, o -> new ArrayList<>()).add(body);
                    }
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
            consumer.start();

            Wait.until(Duration.ofSeconds(60), () -> {
                synchronized (received) {
                    return "all " + ORDERS * STEPS + " steps, got " + received;
                }
            }, () -> {
                synchronized (received) {
                    return received.values().stream().mapToInt(List::size).sum() >= ORDERS * STEPS;
                }
            });
            synchronized (received) {
                assertEquals(sent, received, "per order id, the bodies in arrival order");
            }
        }
    }
}
