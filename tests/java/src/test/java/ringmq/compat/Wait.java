package ringmq.compat;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/** Bounded waits on a condition: no scenario sleeps for a fixed time to let something happen. */
public final class Wait {
    private Wait() {
    }

    /** Polls {@code condition} every 50 ms until it holds; fails with {@code what()} past the deadline. */
    public static void until(Duration deadline, Supplier<String> what, BooleanSupplier condition) {
        long end = System.nanoTime() + deadline.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > end) {
                throw new AssertionError("not within " + deadline + ": " + what.get());
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted while waiting: " + what.get(), e);
            }
        }
    }
}
