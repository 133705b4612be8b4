package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Test;

/**
 * The admin API's viewMessage finds a message by its offsetMsgId (broker address + CommitLog
 * offset, SendResult.getOffsetMsgId()) and by its unique key (SendResult.getMsgId(), found
 * through the index: waited for, bounded), each giving the right body, topic, keys and ids.
 */
class ViewMessageByIdTest {
    @Test
    void viewMessageByOffsetMsgIdAndByUniqueKeyGiveTheRightMessage() throws Exception {
        try (Clients clients = new Clients()) {
            String topic = clients.topic("ViewById", 4);
            DefaultMQProducer producer = clients.producer(clients.name("pg"));
            List<SendResult> results = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                String body = "viewed-" + i;
                SendResult result = producer.send(new Message(topic, "TagA", "key-" + body, body.getBytes(StandardCharsets.UTF_8)));
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "send " + body);
                assertNotEquals(result.getMsgId(), result.getOffsetMsgId(), "unique key and offsetMsgId of " + body);
                results.add(result);
            }

            for (int i = 0; i < results.size(); i++) {
                String body = "viewed-" + i;
                SendResult sent = results.get(i);

                MessageExt byOffset = clients.admin().viewMessage(topic, sent.getOffsetMsgId());
                assertEquals(body, Delivered.body(byOffset), "body by offsetMsgId " + sent.getOffsetMsgId());
                assertEquals(topic, byOffset.getTopic(), "topic by offsetMsgId");
                assertEquals("key-" + body, byOffset.getKeys(), "keys by offsetMsgId");
                assertEquals(sent.getMsgId(), byOffset.getMsgId(), "unique key of the message found by offsetMsgId");
                assertEquals(sent.getQueueOffset(), byOffset.getQueueOffset(), "queue offset by offsetMsgId");
                assertEquals(sent.getMessageQueue().getQueueId(), byOffset.getQueueId(), "queue id by offsetMsgId");

                AtomicReference<String> last = new AtomicReference<>();
                AtomicReference<MessageExt> byKey = new AtomicReference<>();
                Wait.until(Duration.ofSeconds(60), () -> "viewMessage by unique key " + sent.getMsgId() + ": " + last.get(),
                        () -> {
                            try {
                                MessageExt found = clients.admin().viewMessage(topic, sent.getMsgId());
                                byKey.set(found);
                                last.set(found == null ? "null" : Delivered.body(found));
                                return found != null;
                            } catch (Exception e) {
                                last.set(e.toString());
                                return false;
                            }
                        });
                assertEquals(body, Delivered.body(byKey.get()), "body by unique key " + sent.getMsgId());
                assertEquals(topic, byKey.get().getTopic(), "topic by unique key");
                assertEquals("key-" + body, byKey.get().getKeys(), "keys by unique key");
                assertEquals(sent.getMsgId(), MessageClientIDSetter.getUniqID(byKey.get()), "unique key of the message found by it");
                assertEquals(byOffset.getCommitLogOffset(), byKey.get().getCommitLogOffset(),
                        "CommitLog offset of the message found by unique key and by offsetMsgId");
            }
        }
    }
}
