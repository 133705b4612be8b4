package ringmq.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.common.message.MessageExt;

/** What consumers received, recorded from their threads, checked against what was sent. */
public final class Delivered {
    private final List<MessageExt> messages = new ArrayList<>();
    private final List<Long> arrivals = new ArrayList<>();

    public synchronized void add(Collection<MessageExt> batch) {
        long now = System.currentTimeMillis();
        for (MessageExt message : batch) {
            messages.add(message);
            arrivals.add(now);
        }
    }

    /** The deliveries of {@code body}, in arrival order. */
    public synchronized List<MessageExt> of(String body) {
        List<MessageExt> found = new ArrayList<>();
        for (MessageExt message : messages) {
            if (body(message).equals(body)) {
                found.add(message);
            }
        }
        return found;
    }

    /** When (System.currentTimeMillis() as the listener got it) each delivery of {@code body} arrived. */
    public synchronized List<Long> arrivalsOf(String body) {
        List<Long> found = new ArrayList<>();
        for (int i = 0; i < messages.size(); i++) {
            if (body(messages.get(i)).equals(body)) {
                found.add(arrivals.get(i));
            }
        }
        return found;
    }

    public synchronized List<MessageExt> all() {
        return new ArrayList<>(messages);
    }

    public synchronized int size() {
        return messages.size();
    }

    public static String body(MessageExt message) {
        return new String(message.getBody(), StandardCharsets.UTF_8);
    }

    /** Bodies received, each with how often. */
    public synchronized Map<String, Integer> counts() {
        Map<String, Integer> counts = new TreeMap<>();
        for (MessageExt message : messages) {
            counts.merge(body(message), 1, Integer::sum);
        }
        return counts;
    }

    /** Waits (bounded) until every body in {@code expected} has arrived at least once. */
    public void awaitAll(Set<String> expected, Duration deadline) {
        Wait.until(deadline, () -> {
            Set<String> missing = new TreeSet<>(expected);
            missing.removeAll(counts().keySet());
            return missing.size() + " of " + expected.size() + " not delivered, e.g. "
                    + missing.stream().limit(5).toList();
        }, () -> counts().keySet().containsAll(expected));
    }

    /** Bodies delivered more than once. */
    public Map<String, Integer> duplicates() {
        Map<String, Integer> duplicates = new TreeMap<>();
        counts().forEach((body, count) -> {
            if (count > 1) {
                duplicates.put(body, count);
            }
        });
        return duplicates;
    }
}
