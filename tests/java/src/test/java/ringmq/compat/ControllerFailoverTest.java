package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;

/**
 * A controller-mode group: three controllers and group broker-a of two brokers started from
 * RocketMQ's controller quick-start broker file ({@code brokerId=-1}, {@code brokerRole=SLAVE},
 * {@code allAckInSyncStateSet=true}). Once the controllers elected a master with both brokers
 * in its SyncStateSet, a producer that polls the name server every second sends; the master
 * is SIGKILLed; the same producer keeps sending until every message is acknowledged again,
 * which only the promoted slave can do; a push consumer of a new group then reads every
 * acknowledged message. Prints the time from the kill to the first SEND_OK.
 *
 * <p>The topic is created on the master only: the promoted slave must have learned it.
 * Against RocketMQ 5.5, whose slave never learns a topic from its master, it is created on
 * the slave too (printed as ADAPTED), so the failover itself is what is measured there.
 */
class ControllerFailoverTest {
    private static final String GROUP = "broker-a";
    private static final int QUEUES = 4;
    /** Sends acknowledged before the kill, and again after it. */
    private static final int SENDS = 200;
    /** How long the consumer may take to read every acknowledged message. */
    private static final Duration READ_DEADLINE = Duration.ofSeconds(60);

    @Test
    void aControllerModeGroupFailsOverForAProducerPollingEverySecond() throws Exception {
        try (ClusterProcesses cluster = ClusterProcesses.startControllerGroup();
                ClusterClients clients = new ClusterClients(cluster.namesrvAddr())) {
            DefaultMQAdminExt admin = clients.admin();
            List<String> members = cluster.memberAddrs(GROUP);
            assertEquals(2, members.size(), "two brokers in the group: " + members);
            String master = ControllerView.awaitFormed(admin, cluster.controllerAddrs(), GROUP, Set.copyOf(members));
            String slave = members.get(0).equals(master) ? members.get(1) : members.get(0);
            System.out.println("controller failover: master " + master + ", slave " + slave);

            String topic = clients.name("Failover");
            admin.createAndUpdateTopicConfig(master, new TopicConfig(topic, QUEUES, QUEUES));
            if (!Target.get().isRingmq()) {
                System.out.println("ADAPTED: rocketmq: the topic is created on the slave too");
                admin.createAndUpdateTopicConfig(slave, new TopicConfig(topic, QUEUES, QUEUES));
            }
            clients.awaitGroups(topic, Set.of(GROUP));

            DefaultMQProducer producer = clients.producer();
            Set<String> acknowledged = new TreeSet<>();
            for (int i = 0; i < SENDS; i++) {
                ClusterClients.sendUntilOk(producer, topic, "before-" + i);
                acknowledged.add("before-" + i);
            }
            // From the signal: the kill waits until the process is gone, which the
            // promotion does not wait for.
            long killed = System.nanoTime();
            cluster.killMember(GROUP, master);
            Duration firstOk = null;
            for (int i = 0; i < SENDS; i++) {
                ClusterClients.sendUntilOk(producer, topic, "after-" + i);
                if (firstOk == null) {
                    firstOk = Duration.ofNanos(System.nanoTime() - killed);
                }
                acknowledged.add("after-" + i);
            }
            System.out.println("controller failover: the first SEND_OK after the master's SIGKILL came "
                    + firstOk.toMillis() + " ms later (the producer polls the name server every 1 s); "
                    + SENDS + " more took " + Duration.ofNanos(System.nanoTime() - killed).toMillis() + " ms");
            assertEquals(slave, ControllerView.syncState(admin, cluster.controllerAddrs(), GROUP).master(),
                    "the slave was promoted");

            Delivered delivered = new Delivered();
            clients.pushConsumer("cg_failover", topic, delivered);
            delivered.awaitAll(acknowledged, READ_DEADLINE);
            Set<String> read = new TreeSet<>(delivered.counts().keySet());
            read.retainAll(acknowledged);
            assertEquals(acknowledged.size(), read.size(), "every SEND_OK message read after the failover");
        }
    }
}
