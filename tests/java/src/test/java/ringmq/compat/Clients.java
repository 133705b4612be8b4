package ringmq.compat;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Stock Java clients (rocketmq-client and rocketmq-tools 5.5.0) pointed at the target, with
 * names unique to the run so scenarios never see each other's topics or groups, and closed by
 * {@link #close()} (each scenario owns one instance in a try-with-resources).
 */
public final class Clients implements AutoCloseable {
    private static final AtomicLong SEQUENCE = new AtomicLong();

    private final Target target = Target.get();
    private final String run = UUID.randomUUID().toString().substring(0, 8);
    private final List<Runnable> closers = new ArrayList<>();
    private DefaultMQAdminExt admin;

    public Target target() {
        return target;
    }

    /** A name unique to this run: {@code prefix_run_n} (letters, digits, '_' and '-' only). */
    public String name(String prefix) {
        return prefix + "_" + run + "_" + SEQUENCE.incrementAndGet();
    }

    private void configure(ClientConfig config) {
        configure(config, target.namesrvAddr(), name("instance"));
    }

    /**
     * Points {@code config} at {@code namesrvAddr} as {@code instanceName}, polling routes and
     * heartbeating every second; also used by {@link ClusterClients}, whose name server is
     * not the target's.
     */
    static void configure(ClientConfig config, String namesrvAddr, String instanceName) {
        config.setNamesrvAddr(namesrvAddr);
        config.setInstanceName(instanceName);
        // Learn route changes (a restarted broker, a new topic) within a second, not 30 s.
        config.setPollNameServerInterval(1000);
        config.setHeartbeatBrokerInterval(1000);
    }

    public DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        configure(producer);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        closers.add(producer::shutdown);
        return producer;
    }

    /** A started transactional producer whose local transactions and check-backs {@code listener} answers. */
    public TransactionMQProducer transactionProducer(String group, TransactionListener listener) throws Exception {
        TransactionMQProducer producer = new TransactionMQProducer(group);
        configure(producer);
        producer.setSendMsgTimeout(10_000);
        producer.setTransactionListener(listener);
        producer.start();
        closers.add(producer::shutdown);
        return producer;
    }

    /** A push consumer, configured but not started (the caller subscribes and registers first). */
    public DefaultMQPushConsumer pushConsumer(String group) {
        DefaultMQPushConsumer consumer = newPushConsumer(group, target.namesrvAddr(), name("instance"));
        closers.add(consumer::shutdown);
        return consumer;
    }

    /**
     * A push consumer of {@code group} configured as every one of the suite, neither started
     * nor closed by anyone yet: {@link #configure(ClientConfig, String, String)}, a new group
     * from the first offset, and a failed pull tried again after 200 ms (not 3 s).
     */
    static DefaultMQPushConsumer newPushConsumer(String group, String namesrvAddr, String instanceName) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        configure(consumer, namesrvAddr, instanceName);
        consumer.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPullTimeDelayMillsWhenException(200);
        return consumer;
    }

    /**
     * Starts {@code consumer} (configured and subscribed by the caller) with a listener that
     * records every batch in {@code delivered} and acknowledges it.
     */
    public static void startCollecting(DefaultMQPushConsumer consumer, Delivered delivered)
            throws MQClientException {
        consumer.registerMessageListener(
                (MessageListenerConcurrently) (messages, context) -> {
                    delivered.add(messages);
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
        consumer.start();
    }

    /** A lite pull consumer, configured but not started. */
    public DefaultLitePullConsumer litePullConsumer(String group) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        configure(consumer);
        consumer.setPollTimeoutMillis(1000);
        consumer.setTopicMetadataCheckIntervalMillis(1000);
        closers.add(consumer::shutdown);
        return consumer;
    }

    public DefaultMQAdminExt admin() throws Exception {
        if (admin == null) {
            admin = new DefaultMQAdminExt(10_000);
            configure(admin);
            admin.setAdminExtGroup(name("admin"));
            admin.start();
            DefaultMQAdminExt started = admin;
            closers.add(started::shutdown);
        }
        return admin;
    }

    /** Creates {@code topic} with {@code queues} read and write queues on the target's broker. */
    public String topic(String prefix, int queues) throws Exception {
        String topic = name(prefix);
        TopicConfig config = new TopicConfig(topic, queues, queues);
        admin().createAndUpdateTopicConfig(target.brokerAddr(), config);
        // The route reaches the name server with the broker's next registration (RocketMQ) or
        // at once (ringmq): wait until a client can see it.
        awaitRoute(topic, java.time.Duration.ofSeconds(60));
        return topic;
    }

    /** Waits (bounded) until the name server gives a route with queues for {@code topic}. */
    public void awaitRoute(String topic, java.time.Duration deadline) {
        Wait.until(deadline, () -> "route of " + topic, () -> {
            try {
                return !admin().examineTopicRouteInfo(topic).getQueueDatas().isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
    }

    /** The queues of {@code topic} a started push consumer currently pulls (its rebalance result). */
    public static java.util.Set<MessageQueue> assigned(DefaultMQPushConsumer consumer, String topic) {
        java.util.Set<MessageQueue> queues = new java.util.TreeSet<>();
        for (MessageQueue queue : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                .getProcessQueueTable().keySet()) {
            if (queue.getTopic().equals(topic)) {
                queues.add(queue);
            }
        }
        return queues;
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
