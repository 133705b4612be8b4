// The live clients scripts/mqadmin-table.sh needs beside mqadmin, as a single-file Java
// program (java -cp 'tests/java/target/rocketmq-lib/*' scripts/mqadmin-table-clients.java):
// a producer that sends N messages with keys, a push consumer that consumes them, both kept
// running (heartbeating) for SECONDS so producerConnection, consumerConnection and
// consumerStatus find them. Prints "READY msgId=.. offsetMsgId=.. key=.." once the consumer
// has consumed every message and committed (or "FAILED why" and exits 1), then sleeps.
// Usage: NAMESRV TOPIC CONSUMER_GROUP PRODUCER_GROUP N SECONDS
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

public class MqadminTableClients {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2], producerGroup = args[3];
        int n = Integer.parseInt(args[4]);
        long seconds = Long.parseLong(args[5]);
        DefaultMQProducer producer = new DefaultMQProducer(producerGroup);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("table-producer");
        producer.setHeartbeatBrokerInterval(1000);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        SendResult first = null;
        long routeDeadline = System.currentTimeMillis() + 60_000;
        for (int i = 0; i < n; i++) {
            Message message = new Message(topic, "TagA", "table-key-" + i, ("message " + i).getBytes());
            SendResult result;
            try {
                result = producer.send(message);
            } catch (Exception e) {
                // The route may not have reached the name server yet: retry, bounded.
                if (first != null || System.currentTimeMillis() > routeDeadline) throw e;
                Thread.sleep(500);
                i--;
                continue;
            }
            if (first == null) first = result;
        }
        AtomicInteger consumed = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("table-consumer");
        consumer.setHeartbeatBrokerInterval(1000);
        consumer.setPersistConsumerOffsetInterval(500);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            consumed.addAndGet(messages.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.currentTimeMillis() + 60_000;
        while (consumed.get() < n && System.currentTimeMillis() < deadline) Thread.sleep(100);
        if (consumed.get() < n) {
            System.out.println("FAILED consumed " + consumed.get() + " of " + n + " within 60 s");
            System.exit(1);
        }
        Thread.sleep(2000); // two offset persist rounds: the committed offsets reach the broker
        System.out.println("READY msgId=" + first.getMsgId() + " offsetMsgId=" + first.getOffsetMsgId()
                + " key=table-key-0 queueId=" + first.getMessageQueue().getQueueId()
                + " queueOffset=" + first.getQueueOffset());
        System.out.flush();
        Thread.sleep(seconds * 1000);
        consumer.shutdown();
        producer.shutdown();
        System.exit(0);
    }
}
