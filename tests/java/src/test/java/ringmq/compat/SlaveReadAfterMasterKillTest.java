package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.junit.jupiter.api.Test;

/**
 * A SYNC_MASTER and its slave (group broker-a behind a standalone name server): a backlog is
 * sent and every message answered SEND_OK (so the slave confirmed holding it); the master is
 * killed with SIGKILL; a push consumer of a new group, started after the kill, reads every
 * acknowledged message from the slave.
 *
 * <p>The topic is created on the master only: the slave must learn it from its master, as an
 * operator expects. RocketMQ 5.5's slave never does (tests/java/expected-failures.txt).
 */
class SlaveReadAfterMasterKillTest {
    private static final int QUEUES = 4;
    private static final int BACKLOG = 1000;
    /** How long the consumer may take to read the backlog from the slave. */
    private static final Duration READ_DEADLINE = Duration.ofSeconds(45);

    @Test
    void aConsumerReadsEveryAcknowledgedMessageFromTheSlaveAfterTheMasterIsKilled() throws Exception {
        try (ClusterProcesses cluster = ClusterProcesses.startHa();
                ClusterClients clients = new ClusterClients(cluster.namesrvAddr())) {
            String topic = clients.name("Backlog");
            clients.admin().createAndUpdateTopicConfig(cluster.brokerAddr("broker-a"),
                    new TopicConfig(topic, QUEUES, QUEUES));
            clients.awaitGroups(topic, Set.of("broker-a"));

            DefaultMQProducer producer = clients.producer();
            Set<String> acknowledged = new TreeSet<>();
            for (int i = 0; i < BACKLOG; i++) {
                String body = "backlog-" + i;
                ClusterClients.sendUntilOk(producer, topic, body);
                acknowledged.add(body);
            }
            producer.shutdown();

            cluster.kill("broker-a");
            Delivered delivered = new Delivered();
            clients.pushConsumer("cg_slave_read", topic, delivered);
            delivered.awaitAll(acknowledged, READ_DEADLINE);
            Set<String> read = new TreeSet<>(delivered.counts().keySet());
            read.retainAll(acknowledged);
            assertEquals(acknowledged.size(), read.size(), "every SEND_OK message read from the slave");
        }
    }
}
