package ringmq.compat;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What the controllers say of a controller-mode group, through the stock admin client
 * (mqadmin getSyncStateSet's call): its master and the addresses of its SyncStateSet.
 */
final class ControllerView {
    /** How long the controllers may take to elect a master with every member in sync. */
    static final Duration FORM_DEADLINE = Duration.ofSeconds(90);

    private ControllerView() {}

    /** A group's master and the addresses of its SyncStateSet. */
    record SyncState(String master, Set<String> inSync) {}

    /** Asks each controller in turn (the client finds the leader from any of them). */
    static SyncState syncState(DefaultMQAdminExt admin, List<String> controllers, String group) throws Exception {
        Exception last = null;
        for (String controller : controllers) {
            try {
                BrokerReplicasInfo info = admin.getInSyncStateData(controller, List.of(group));
                BrokerReplicasInfo.ReplicasInfo replicas = info.getReplicasInfoTable().get(group);
                if (replicas == null || replicas.getMasterAddress() == null
                        || replicas.getMasterAddress().isEmpty()) {
                    throw new IllegalStateException(group + " has no master yet at " + controller);
                }
                Set<String> inSync = new TreeSet<>();
                for (BrokerReplicasInfo.ReplicaIdentity replica : replicas.getInSyncReplicas()) {
                    inSync.add(replica.getBrokerAddress());
                }
                return new SyncState(replicas.getMasterAddress(), inSync);
            } catch (Exception e) {
                last = e;
            }
        }
        throw last;
    }

    /** Waits (bounded) until the group has a master and every member is in its SyncStateSet; the master. */
    static String awaitFormed(DefaultMQAdminExt admin, List<String> controllers, String group, Set<String> members) {
        AtomicReference<Object> seen = new AtomicReference<>();
        AtomicReference<String> master = new AtomicReference<>();
        Wait.until(FORM_DEADLINE, () -> group + " with " + members + " in sync: " + seen.get(), () -> {
            try {
                SyncState state = syncState(admin, controllers, group);
                seen.set(state);
                master.set(state.master());
                return state.inSync().equals(new TreeSet<>(members));
            } catch (Exception e) {
                seen.set(e.toString());
                return false;
            }
        });
        return master.get();
    }
}
