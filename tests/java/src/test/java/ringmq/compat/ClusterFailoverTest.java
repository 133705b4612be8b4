package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;

/**
 * Two broker groups behind one standalone name server: a producer spreads its sends over both;
 * when one master is killed with SIGKILL, the name server drops it, and every send goes on,
 * to the other group.
 */
class ClusterFailoverTest {
    private static final int QUEUES = 4;
    private static final int SENDS = 40;

    @Test
    void sendsGoOnToTheOtherGroupWhenAMasterIsKilled() throws Exception {
        String run = UUID.randomUUID().toString().substring(0, 8);
        try (ClusterProcesses cluster = ClusterProcesses.start()) {
            DefaultMQAdminExt admin = new DefaultMQAdminExt(10_000);
            admin.setNamesrvAddr(cluster.namesrvAddr());
            admin.setInstanceName("admin_" + run);
            admin.setAdminExtGroup("admin_" + run);
            admin.start();
            DefaultMQProducer producer = new DefaultMQProducer("pg_" + run);
            try {
                String topic = "Spread_" + run;
                for (String broker : new String[] {"broker-a", "broker-b"}) {
                    admin.createAndUpdateTopicConfig(cluster.brokerAddr(broker), new TopicConfig(topic, QUEUES, QUEUES));
                }
                awaitGroups(admin, topic, Set.of("broker-a", "broker-b"));

                producer.setNamesrvAddr(cluster.namesrvAddr());
                producer.setInstanceName("producer_" + run);
                producer.setPollNameServerInterval(1000);
                producer.setSendMsgTimeout(5000);
                producer.start();
                Map<String, Integer> before = sendAll(producer, topic, "before");
                assertEquals(Set.of("broker-a", "broker-b"), before.keySet(), "sends spread over both groups: " + before);

                cluster.kill("broker-a");
                // The name server drops the group when its connection closes.
                awaitGroups(admin, topic, Set.of("broker-b"));
                Map<String, Integer> after = sendAll(producer, topic, "after");
                assertEquals(Map.of("broker-b", SENDS), after, "every send after the kill went to broker-b");
            } finally {
                producer.shutdown();
                admin.shutdown();
            }
        }
    }

    /** Sends {@link #SENDS} messages, each retried (bounded) until SEND_OK; counts them by group. */
    private static Map<String, Integer> sendAll(DefaultMQProducer producer, String topic, String prefix) {
        Map<String, Integer> byGroup = new TreeMap<>();
        for (int i = 0; i < SENDS; i++) {
            String body = prefix + "-" + i;
            AtomicReference<String> last = new AtomicReference<>();
            AtomicReference<SendResult> sent = new AtomicReference<>();
            Wait.until(Duration.ofSeconds(60), () -> "send " + body + ": " + last.get(), () -> {
                try {
                    SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                    last.set(String.valueOf(result));
                    if (result.getSendStatus() != SendStatus.SEND_OK) {
                        return false;
                    }
                    sent.set(result);
                    return true;
                } catch (Exception e) {
                    last.set(e.toString());
                    return false;
                }
            });
            byGroup.merge(sent.get().getMessageQueue().getBrokerName(), 1, Integer::sum);
        }
        return byGroup;
    }

    /** Waits (bounded) until {@code topic}'s route names exactly {@code groups}, with queues for each. */
    private static void awaitGroups(DefaultMQAdminExt admin, String topic, Set<String> groups) {
        AtomicReference<Object> seen = new AtomicReference<>();
        Wait.until(Duration.ofSeconds(60), () -> "route of " + topic + " naming " + groups + ": " + seen.get(), () -> {
            try {
                Set<String> routed = new TreeSet<>();
                for (QueueData queues : admin.examineTopicRouteInfo(topic).getQueueDatas()) {
                    routed.add(queues.getBrokerName());
                }
                seen.set(routed);
                return routed.equals(groups);
            } catch (Exception e) {
                seen.set(e.toString());
                return false;
            }
        });
    }
}
