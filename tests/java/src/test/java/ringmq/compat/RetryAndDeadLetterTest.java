package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/**
 * A push consumer that always answers RECONSUME_LATER, with maxReconsumeTimes 1: the message
 * comes back once (reconsumeTimes 1, no earlier than the 10 s of the first retry level), then
 * lands in %DLQ%group, exactly once, with its body and keys.
 */
class RetryAndDeadLetterTest {
    private static final long CLOCK_TOLERANCE_MS = 100;
    /** The first retry uses delay level 3 (10 s) on both brokers. */
    private static final long FIRST_RETRY_MS = 10_000;

    @Test
    void aMessageFailedPastMaxReconsumeTimesIsRetriedOnceThenDeadLettered() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("RetryDlq", 4);
            String group = clients.name("cg");
            Delivered delivered = new Delivered();
            DefaultMQPushConsumer consumer = clients.pushConsumer(group);
            consumer.setMaxReconsumeTimes(1);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                delivered.add(messages);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            });
            consumer.start();

            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            String body = "doomed";
            SendResult result = producer.send(new Message(topic, "TagA", "key-doomed", body.getBytes(StandardCharsets.UTF_8)));
            assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send: " + result);

            Wait.until(Duration.ofSeconds(60), () -> "2 deliveries of " + body + ", got " + delivered.size(),
                    () -> delivered.of(body).size() >= 2);
            List<MessageExt> deliveries = delivered.of(body);
            List<Long> arrivals = delivered.arrivalsOf(body);
            assertEquals(0, deliveries.get(0).getReconsumeTimes(), "reconsumeTimes of the first delivery");
            assertEquals(1, deliveries.get(1).getReconsumeTimes(), "reconsumeTimes of the redelivery");
            assertEquals(topic, deliveries.get(1).getTopic(), "topic of the redelivery (as the client shows it)");
            long gap = arrivals.get(1) - arrivals.get(0);
            assertTrue(gap >= FIRST_RETRY_MS - CLOCK_TOLERANCE_MS,
                    "the redelivery came " + gap + " ms after the first, before the 10 s of the first retry level");

            // The second failure sends it to the dead letter queue of the group: first the
            // broker must hold exactly one message there ...
            String dlq = MixAll.getDLQTopic(group);
            clients.awaitRoute(dlq, Duration.ofSeconds(60));
            List<MessageQueue> queues = new ArrayList<>(
                    clients.admin().examineTopicRouteInfo(dlq).getQueueDatas().stream()
                            .flatMap(data -> java.util.stream.IntStream.range(0, data.getReadQueueNums())
                                    .mapToObj(id -> new MessageQueue(dlq, data.getBrokerName(), id)))
                            .toList());
            Wait.until(Duration.ofSeconds(60), () -> "a message stored in " + dlq + " " + queues,
                    () -> messagesIn(clients, queues) >= 1);
            assertEquals(1, messagesIn(clients, queues), "messages in " + dlq);
            // ... then a reader of a new group that starts from the first offset gets it. No
            // assign + seek here: seek() racing the pull task that assign() starts can leave
            // the reader at the queue's end (DefaultLitePullConsumerImpl 5.5.0), on either broker.
            DefaultLitePullConsumer reader = clients.litePullConsumer(clients.name("dlqreader"));
            reader.setAutoCommit(false);
            reader.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            reader.start();
            reader.assign(queues);
            List<MessageExt> dead = new ArrayList<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (dead.isEmpty()) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("nothing read from " + dlq + " within 60 s, though it holds "
                            + messagesIn(clients, queues) + " message(s)");
                }
                dead.addAll(reader.poll(1000));
            }
            assertEquals(body, Delivered.body(dead.get(0)), "body in " + dlq);
            assertEquals("key-doomed", dead.get(0).getKeys(), "keys in " + dlq);
            assertEquals(2, delivered.of(body).size(), "deliveries to the consumer: a dead letter is not retried");
        }
    }

    /** The sum of the queues' max offsets, as the broker answers them. */
    private static long messagesIn(Clients clients, List<MessageQueue> queues) {
        long total = 0;
        for (MessageQueue queue : queues) {
            try {
                total += clients.admin().maxOffset(queue);
            } catch (Exception e) {
                throw new AssertionError("maxOffset of " + queue + ": " + e, e);
            }
        }
        return total;
    }
}
