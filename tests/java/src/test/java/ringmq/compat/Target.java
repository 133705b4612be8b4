package ringmq.compat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The broker a scenario runs against: ringmq or Apache RocketMQ, started by the runner script
 * (scripts/java-compat.sh) through scripts/ringmq-node.sh or scripts/rocketmq.sh, which share
 * their verbs and the DIR/env file this class reads.
 *
 * <p>System properties: {@code compat.dir} (the DIR holding env), {@code compat.control} (the
 * control script), {@code compat.target} ("ringmq" or "rocketmq", for messages and reports).
 */
public final class Target {
    private static final Duration CONTROL_DEADLINE = Duration.ofSeconds(180);

    private final Path dir;
    private final Path control;
    private final String name;

    private Target(Path dir, Path control, String name) {
        this.dir = dir;
        this.control = control;
        this.name = name;
    }

    private static Target current;

    /** The target the runner named; fails loudly when the suite was started without one. */
    public static synchronized Target get() {
        if (current == null) {
            String dir = System.getProperty("compat.dir");
            String control = System.getProperty("compat.control");
            if (dir == null || control == null) {
                throw new IllegalStateException(
                        "no broker named: run the suite with scripts/java-compat.sh "
                                + "(it sets -Dcompat.dir, -Dcompat.control and -Dcompat.target)");
            }
            current = new Target(Paths.get(dir), Paths.get(control),
                    System.getProperty("compat.target", "unknown"));
        }
        return current;
    }

    public String name() {
        return name;
    }

    public boolean isRingmq() {
        return name.equals("ringmq");
    }

    private Map<String, String> env() {
        try {
            Map<String, String> env = new HashMap<>();
            for (String line : Files.readAllLines(dir.resolve("env"), StandardCharsets.UTF_8)) {
                int eq = line.indexOf('=');
                if (eq > 0) {
                    env.put(line.substring(0, eq).trim(), line.substring(eq + 1).trim());
                }
            }
            return env;
        } catch (IOException e) {
            throw new IllegalStateException("read " + dir.resolve("env") + ": " + e, e);
        }
    }

    /** The runner's directory (DIR): scenarios that start processes of their own put them under it. */
    Path dir() {
        return dir;
    }

    /** The control script: its verbs start and stop the processes of a scenario. */
    Path control() {
        return control;
    }

    public String namesrvAddr() {
        return env().get("NAMESRV_ADDR");
    }

    public String brokerAddr() {
        return env().get("BROKER_ADDR");
    }

    /** Stops the broker cleanly (SIGTERM) and starts it again on the same store and ports. */
    public void restartBroker() {
        run("restart-broker");
    }

    private void run(String verb) {
        try {
            Process process = new ProcessBuilder(List.of("bash", control.toString(), verb, dir.toString()))
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("control.log").toFile()))
                    .start();
            if (!process.waitFor(CONTROL_DEADLINE.toSeconds(), TimeUnit.SECONDS)) {
                process.destroyForcibly();
                throw new IllegalStateException(control + " " + verb + " did not finish within " + CONTROL_DEADLINE);
            }
            if (process.exitValue() != 0) {
                throw new IllegalStateException(control + " " + verb + " exited " + process.exitValue()
                        + "; see " + dir.resolve("control.log"));
            }
        } catch (IOException e) {
            throw new IllegalStateException("run " + control + " " + verb + ": " + e, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while running " + verb, e);
        }
    }
}
