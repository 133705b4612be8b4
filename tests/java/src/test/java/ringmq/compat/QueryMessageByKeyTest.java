package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.junit.jupiter.api.Test;

/**
 * The admin API's queryMessage(topic, key, max, begin, end) finds a message by each of its keys
 * (the index is built asynchronously: waited for, bounded), and only the messages with that key.
 */
class QueryMessageByKeyTest {
    private static List<String> bodiesByKey(Clients clients, String topic, String key, long begin, long end) {
        try {
            QueryResult result = clients.admin().queryMessage(topic, key, 32, begin, end);
            List<String> bodies = new ArrayList<>();
            for (MessageExt m : result.getMessageList()) {
                bodies.add(Delivered.body(m));
            }
            bodies.sort(null);
            return bodies;
        } catch (Exception e) {
            return List.of("query failed: " + e);
        }
    }

    @Test
    void queryMessageFindsMessagesByKey() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("QueryByKey", 4);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            long begin = System.currentTimeMillis() - 60_000;
            for (int i = 0; i < 10; i++) {
                String body = "keyed-" + i;
                Message message = new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8));
                // Two keys each: one of its own, one shared by the odd or the even ones.
                message.setKeys(List.of("own-" + i, i % 2 == 0 ? "even" : "odd"));
                SendResult result = producer.send(message);
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
            }
            long end = System.currentTimeMillis() + 60_000;

            for (String[] query : new String[][] {
                    {"own-3", "keyed-3"},
                    {"own-8", "keyed-8"},
                    {"odd", "keyed-1 keyed-3 keyed-5 keyed-7 keyed-9"}}) {
                String key = query[0];
                List<String> want = List.of(query[1].split(" "));
                AtomicReference<List<String>> got = new AtomicReference<>();
                Wait.until(Duration.ofSeconds(60), () -> "queryMessage(" + key + ") gives " + want + ", gave " + got.get(),
                        () -> {
                            got.set(bodiesByKey(clients, topic, key, begin, end));
                            return got.get().equals(want);
                        });
            }
            // An unused key: the client reports "no message" (NO_MESSAGE, 208), as it does for
            // an empty answer.
            MQClientException none = assertThrows(MQClientException.class,
                    () -> clients.admin().queryMessage(topic, "no-such-key", 32, begin, end), "query of an unused key");
            assertEquals(ResponseCode.NO_MESSAGE, none.getResponseCode(), "query of an unused key: " + none);
        }
    }
}
