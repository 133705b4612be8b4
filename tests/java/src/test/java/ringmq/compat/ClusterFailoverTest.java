package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
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
        try (ClusterProcesses cluster = ClusterProcesses.start();
                ClusterClients clients = new ClusterClients(cluster.namesrvAddr())) {
            String topic = clients.name("Spread");
            for (String broker : new String[] {"broker-a", "broker-b"}) {
                clients.admin().createAndUpdateTopicConfig(cluster.brokerAddr(broker),
                        new TopicConfig(topic, QUEUES, QUEUES));
            }
            clients.awaitGroups(topic, Set.of("broker-a", "broker-b"));

            DefaultMQProducer producer = clients.producer();
            Map<String, Integer> before = sendAll(producer, topic, "before");
            assertEquals(Set.of("broker-a", "broker-b"), before.keySet(), "sends spread over both groups: " + before);

            cluster.kill("broker-a");
            // The name server drops the group when its connection closes.
            clients.awaitGroups(topic, Set.of("broker-b"));
            Map<String, Integer> after = sendAll(producer, topic, "after");
            assertEquals(Map.of("broker-b", SENDS), after, "every send after the kill went to broker-b");
        }
    }

    /** Sends {@link #SENDS} messages, each retried (bounded) until SEND_OK; counts them by group. */
    static Map<String, Integer> sendAll(DefaultMQProducer producer, String topic, String prefix) {
        Map<String, Integer> byGroup = new TreeMap<>();
        for (int i = 0; i < SENDS; i++) {
            String body = prefix + "-" + i;
            byGroup.merge(ClusterClients.sendUntilOk(producer, topic, body).getMessageQueue().getBrokerName(),
                    1, Integer::sum);
        }
        return byGroup;
    }
}
