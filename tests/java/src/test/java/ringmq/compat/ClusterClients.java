package ringmq.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Stock Java clients pointed at the name server of a {@link ClusterProcesses} (not the suite's
 * broker, which {@link Clients} serves), with names unique to the run, closed by
 * {@link #close()}. Clients poll the name server every second, so a killed master leaves their
 * routes within about a second of the name server dropping it.
 */
public final class ClusterClients implements AutoCloseable {
    /** How long one message may be retried until it is answered SEND_OK. */
    public static final Duration SEND_DEADLINE = Duration.ofSeconds(60);
    /** How long the name server may take to route a topic to (or away from) a group. */
    public static final Duration ROUTE_DEADLINE = Duration.ofSeconds(60);

    private final String namesrvAddr;
    private final String run = UUID.randomUUID().toString().substring(0, 8);
    private final List<Runnable> closers = new ArrayList<>();
    private DefaultMQAdminExt admin;

    public ClusterClients(String namesrvAddr) {
        this.namesrvAddr = namesrvAddr;
    }

    /** {@code prefix_run}: unique to this run. */
    public String name(String prefix) {
        return prefix + "_" + run;
    }

    public DefaultMQAdminExt admin() throws Exception {
        if (admin == null) {
            DefaultMQAdminExt started = new DefaultMQAdminExt(10_000);
            started.setNamesrvAddr(namesrvAddr);
            started.setInstanceName(name("admin"));
            started.setAdminExtGroup(name("admin"));
            started.start();
            closers.add(started::shutdown);
            admin = started;
        }
        return admin;
    }

    /** A started producer of group {@code pg_run}. */
    public DefaultMQProducer producer() throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(name("pg"));
        producer.setNamesrvAddr(namesrvAddr);
        producer.setInstanceName(name("producer"));
        producer.setPollNameServerInterval(1000);
        producer.setSendMsgTimeout(5000);
        producer.start();
        closers.add(producer::shutdown);
        return producer;
    }

    /**
     * A started push consumer of group {@code group_run} on {@code topic} (all tags), from the
     * first offset, recording what it gets in {@code delivered}.
     */
    public DefaultMQPushConsumer pushConsumer(String group, String topic, Delivered delivered) throws Exception {
        DefaultMQPushConsumer consumer =
                Clients.newPushConsumer(name(group), namesrvAddr, name(group + "_instance"));
        consumer.subscribe(topic, "*");
        closers.add(consumer::shutdown);
        Clients.startCollecting(consumer, delivered);
        return consumer;
    }

    /**
     * Sends {@code body} to {@code topic}, retried (bounded by {@link #SEND_DEADLINE}) until it
     * is answered SEND_OK; the SEND_OK answer. A retried message may be stored twice (an
     * answer other than SEND_OK can follow a store), which consumers tolerate.
     */
    public static SendResult sendUntilOk(DefaultMQProducer producer, String topic, String body) {
        AtomicReference<String> last = new AtomicReference<>();
        AtomicReference<SendResult> sent = new AtomicReference<>();
        Wait.until(SEND_DEADLINE, () -> "send " + body + ": " + last.get(), () -> {
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
        return sent.get();
    }

    /** Waits (bounded) until {@code topic}'s route names exactly {@code groups}, with queues for each. */
    public void awaitGroups(String topic, Set<String> groups) throws Exception {
        DefaultMQAdminExt admin = admin();
        AtomicReference<Object> seen = new AtomicReference<>();
        Wait.until(ROUTE_DEADLINE, () -> "route of " + topic + " naming " + groups + ": " + seen.get(), () -> {
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

    @Override
    public void close() {
        for (int i = closers.size() - 1; i >= 0; i--) {
            try {
                closers.get(i).run();
            } catch (RuntimeException e) {
                System.err.println("close: " + e);
            }
        }
    }
}
