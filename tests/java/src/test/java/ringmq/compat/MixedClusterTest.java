package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * ringmq joins an existing RocketMQ cluster: one ringmq group (broker-ringmq) and one
 * RocketMQ 5.5.0 group (broker-rocketmq), both ASYNC_MASTER in DefaultCluster, behind one
 * name server, RocketMQ's or ringmq's. The stock Java client spreads its sends over both
 * groups and a push consumer consumes from both; then one group's master is killed with
 * SIGKILL and sends and consumption go on with the other. Every pairing of name server and
 * killed group runs.
 *
 * <p>Runs in the ringmq pass of scripts/java-compat.sh only: it starts both kinds of broker
 * itself, so the rocketmq pass would repeat it word for word.
 */
class MixedClusterTest {
    private static final int QUEUES = 4;
    private static final int SENDS = 40;
    private static final Set<String> BOTH = Set.of("broker-ringmq", "broker-rocketmq");

    @ParameterizedTest(name = "name server {0}, {1} master killed")
    @CsvSource({"ROCKETMQ, ringmq", "ROCKETMQ, rocketmq", "RINGMQ, ringmq", "RINGMQ, rocketmq"})
    void sendsAndConsumptionSpanBothGroupsAndGoOnWhenOneMasterIsKilled(
            ClusterProcesses.Kind namesrv, String killed) throws Exception {
        Assumptions.assumeTrue(Target.get().isRingmq(),
                "the mixed cluster runs in the ringmq pass (it starts both brokers itself)");
        String victim = "broker-" + killed;
        String survivor = victim.equals("broker-ringmq") ? "broker-rocketmq" : "broker-ringmq";
        try (ClusterProcesses cluster = ClusterProcesses.startMixed(namesrv);
                ClusterClients clients = new ClusterClients(cluster.namesrvAddr())) {
            String topic = clients.name("Mixed");
            for (String broker : BOTH) {
                clients.admin().createAndUpdateTopicConfig(cluster.brokerAddr(broker),
                        new TopicConfig(topic, QUEUES, QUEUES));
            }
            clients.awaitGroups(topic, BOTH);
            Delivered delivered = new Delivered();
            clients.pushConsumer("cg_mixed", topic, delivered);
            DefaultMQProducer producer = clients.producer();

            Map<String, Integer> before = sendAll(producer, topic, "before", delivered);
            assertEquals(BOTH, before.keySet(), "sends spread over both groups: " + before);
            assertEquals(BOTH, consumedFrom(delivered), "consumed from both groups");

            cluster.kill(victim);
            clients.awaitGroups(topic, Set.of(survivor));
            Map<String, Integer> after = sendAll(producer, topic, "after", delivered);
            assertEquals(Map.of(survivor, SENDS), after, "every send after the kill went to " + survivor);
        }
    }

    /**
     * Sends {@link #SENDS} messages (each retried, bounded, until SEND_OK), waits (bounded)
     * until the consumer has them all, and counts the sends by the group that stored them.
     */
    private static Map<String, Integer> sendAll(DefaultMQProducer producer, String topic, String prefix,
            Delivered delivered) {
        Map<String, Integer> byGroup = new TreeMap<>();
        Set<String> bodies = new TreeSet<>();
        for (int i = 0; i < SENDS; i++) {
            String body = prefix + "-" + i;
            byGroup.merge(ClusterClients.sendUntilOk(producer, topic, body).getMessageQueue().getBrokerName(),
                    1, Integer::sum);
            bodies.add(body);
        }
        delivered.awaitAll(bodies, ClusterClients.SEND_DEADLINE);
        return byGroup;
    }

    /** The groups the consumer's messages came from. */
    private static Set<String> consumedFrom(Delivered delivered) {
        Set<String> groups = new TreeSet<>();
        for (MessageExt message : delivered.all()) {
            groups.add(message.getBrokerName());
        }
        return groups;
    }
}
