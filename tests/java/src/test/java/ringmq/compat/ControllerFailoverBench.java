package ringmq.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;

/**
 * The failover benchmark of controller mode, with the stock Java client polling the name
 * server every second. Not a scenario of the suite (its name does not end in Test): run it by
 * name against either broker,
 * {@code scripts/java-compat.sh ringmq -Dtest=ControllerFailoverBench -Dfailover.fault=kill
 * -Dfailover.rounds=20}. One cluster ({@code start-cluster-controller}): a producer sends
 * without pause from its own thread; each round waits until both brokers are in the
 * SyncStateSet and the master acknowledged a send, then SIGKILLs the master ({@code kill}; it
 * is started again afterwards) or SIGSTOPs it for 10 s ({@code stop}; then SIGCONT), and
 * times the signal to the first SEND_OK stored by the other broker (the store host in its
 * offsetMsgId). The next round fails over back. At the end a consumer of a new group must
 * read every acknowledged message. Prints each time, the median and the maximum.
 */
class ControllerFailoverBench {
    private static final String GROUP = "broker-a";
    private static final int QUEUES = 4;
    /** The longest a round may take to see the other broker's first SEND_OK. */
    private static final Duration FAILOVER_DEADLINE = Duration.ofSeconds(60);
    /** How long a SIGSTOPped master stays paused. */
    private static final Duration PAUSE = Duration.ofSeconds(10);
    private static final Duration READ_DEADLINE = Duration.ofSeconds(180);

    /** One answered send: when, and the port of the broker that stored it (0: not SEND_OK). */
    private record Answer(long at, int storePort) {}

    @Test
    void failoverTimes() throws Exception {
        int rounds = Integer.getInteger("failover.rounds", 20);
        String fault = System.getProperty("failover.fault", "kill");
        if (!fault.equals("kill") && !fault.equals("stop")) {
            throw new IllegalArgumentException("failover.fault is kill or stop, not " + fault);
        }
        try (ClusterProcesses cluster = ClusterProcesses.startControllerGroup();
                ClusterClients clients = new ClusterClients(cluster.namesrvAddr())) {
            DefaultMQAdminExt admin = clients.admin();
            List<String> members = cluster.memberAddrs(GROUP);
            List<String> controllers = cluster.controllerAddrs();
            String master = ControllerView.awaitFormed(admin, controllers, GROUP, Set.copyOf(members));
            String topic = clients.name("Bench");
            for (String member : members) {
                // ringmq's slave learns the topic from its master (and refuses to be told);
                // RocketMQ 5.5's never does, so it is told.
                if (member.equals(master) || !Target.get().isRingmq()) {
                    admin.createAndUpdateTopicConfig(member, new TopicConfig(topic, QUEUES, QUEUES));
                }
            }
            clients.awaitGroups(topic, Set.of(GROUP));
            DefaultMQProducer producer = clients.producer();
            producer.setSendMsgTimeout(3000);
            ConcurrentLinkedQueue<Answer> answers = new ConcurrentLinkedQueue<>();
            Set<String> acknowledged = Collections.synchronizedSet(new TreeSet<>());
            AtomicBoolean sending = new AtomicBoolean(true);
            Thread sender = new Thread(() -> send(producer, topic, sending, answers, acknowledged), "bench-sender");
            sender.start();

            List<Long> millis = new ArrayList<>();
            try {
                for (int round = 0; round < rounds; round++) {
                    master = ControllerView.awaitFormed(admin, controllers, GROUP, Set.copyOf(members));
                    String other = members.get(0).equals(master) ? members.get(1) : members.get(0);
                    awaitStoredBy(answers, port(master), System.nanoTime(), "steady sends to " + master);
                    long signalled = System.nanoTime();
                    if (fault.equals("kill")) {
                        cluster.killMember(GROUP, master);
                    } else {
                        cluster.signalMember(GROUP, master, "STOP");
                    }
                    long at = awaitStoredBy(answers, port(other), signalled, "the first SEND_OK from " + other);
                    long took = (at - signalled) / 1_000_000;
                    millis.add(took);
                    System.out.println("failover bench: round " + round + ": " + fault + " of " + master
                            + ", first SEND_OK from " + other + " after " + took + " ms");
                    if (fault.equals("kill")) {
                        cluster.restartMember(GROUP, master);
                    } else {
                        Thread.sleep(Math.max(0, PAUSE.toMillis() - took));
                        cluster.signalMember(GROUP, master, "CONT");
                    }
                }
            } finally {
                sending.set(false);
                sender.join();
            }
            List<Long> sorted = new ArrayList<>(millis);
            Collections.sort(sorted);
            System.out.println("failover bench: " + Target.get().name() + ", " + fault + ", " + rounds
                    + " rounds, ms: " + millis + "; median " + sorted.get(sorted.size() / 2)
                    + ", max " + sorted.get(sorted.size() - 1));

            Delivered delivered = new Delivered();
            clients.pushConsumer("cg_bench", topic, delivered);
            Set<String> expected = new TreeSet<>(acknowledged);
            delivered.awaitAll(expected, READ_DEADLINE);
            Set<String> read = new TreeSet<>(delivered.counts().keySet());
            read.retainAll(expected);
            assertEquals(expected.size(), read.size(), "every SEND_OK message read after " + rounds + " failovers");
            System.out.println("failover bench: " + expected.size() + " acknowledged, all read");
        }
    }

    /** Sends until told to stop, one at a time, recording each answer. */
    private static void send(DefaultMQProducer producer, String topic, AtomicBoolean sending,
            ConcurrentLinkedQueue<Answer> answers, Set<String> acknowledged) {
        for (long i = 0; sending.get(); i++) {
            String body = "bench-" + i;
            try {
                SendResult result = producer.send(new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)));
                if (result.getSendStatus() == SendStatus.SEND_OK) {
                    acknowledged.add(body);
                    InetSocketAddress host =
                            (InetSocketAddress) MessageDecoder.decodeMessageId(result.getOffsetMsgId()).getAddress();
                    answers.add(new Answer(System.nanoTime(), host.getPort()));
                    continue;
                }
            } catch (Exception e) {
                // A failed send is retried by the next one; the failover is timed by SEND_OKs.
            }
            try {
                Thread.sleep(10);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /** Waits (bounded) until a SEND_OK stored by the broker at {@code port} was answered after {@code after}; when. */
    private static long awaitStoredBy(ConcurrentLinkedQueue<Answer> answers, int port, long after, String what) {
        long[] found = {0};
        Wait.until(FAILOVER_DEADLINE, () -> what, () -> {
            for (Answer answer : answers) {
                if (answer.storePort() == port && answer.at() >= after) {
                    found[0] = answer.at();
                    return true;
                }
            }
            return false;
        });
        return found[0];
    }

    private static int port(String addr) {
        return Integer.parseInt(addr.substring(addr.lastIndexOf(':') + 1));
    }
}
