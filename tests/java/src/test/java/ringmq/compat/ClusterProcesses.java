package ringmq.compat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * A cluster of the target's kind started for one scenario, beside the suite's broker: one
 * standalone name server and two master groups, broker-a and broker-b, registered with it
 * ({@code start-cluster DIR} of the control script, in a directory of its own under the
 * runner's DIR). Closing it stops what is still running ({@code stop-cluster DIR}).
 */
public final class ClusterProcesses implements AutoCloseable {
    private static final Duration CONTROL_DEADLINE = Duration.ofSeconds(240);
    private static final Duration KILL_DEADLINE = Duration.ofSeconds(30);

    private final Target target;
    private final Path dir;
    private final Map<String, String> env;

    private ClusterProcesses(Target target, Path dir) {
        this.target = target;
        this.dir = dir;
        this.env = readEnv(dir.resolve("env"));
    }

    /** Starts the cluster (bounded) and reads where its processes listen. */
    public static ClusterProcesses start() {
        Target target = Target.get();
        Path dir = target.dir().resolve("cluster-" + UUID.randomUUID().toString().substring(0, 8));
        run(target, "start-cluster", dir);
        return new ClusterProcesses(target, dir);
    }

    public String namesrvAddr() {
        return env.get("NAMESRV_ADDR");
    }

    /** The address of group {@code name}'s master ("broker-a" or "broker-b"). */
    public String brokerAddr(String name) {
        return env.get(key(name, "ADDR"));
    }

    /** SIGKILLs group {@code name}'s master and waits (bounded) until it is gone. */
    public void kill(String name) {
        long pid = Long.parseLong(env.get(key(name, "PID")));
        ProcessHandle process = ProcessHandle.of(pid)
                .orElseThrow(() -> new IllegalStateException(name + " (pid " + pid + ") is not running"));
        // destroyForcibly is SIGKILL on Unix.
        process.destroyForcibly();
        Wait.until(KILL_DEADLINE, () -> name + " (pid " + pid + ") still alive after SIGKILL",
                () -> !process.isAlive());
    }

    @Override
    public void close() {
        run(target, "stop-cluster", dir);
    }

    private static String key(String name, String what) {
        if (!name.startsWith("broker-")) {
            throw new IllegalArgumentException("not a group of the cluster: " + name);
        }
        return "BROKER_" + name.substring("broker-".length()).toUpperCase(Locale.ROOT) + "_" + what;
    }

    private static Map<String, String> readEnv(Path file) {
        try {
            Map<String, String> env = new HashMap<>();
            for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                int eq = line.indexOf('=');
                if (eq > 0) {
                    env.put(line.substring(0, eq).trim(), line.substring(eq + 1).trim());
                }
            }
            return env;
        } catch (IOException e) {
            throw new IllegalStateException("read " + file + ": " + e, e);
        }
    }

    private static void run(Target target, String verb, Path dir) {
        Path log = target.dir().resolve("control.log");
        try {
            Process process = new ProcessBuilder(List.of("bash", target.control().toString(), verb, dir.toString()))
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
                    .start();
            if (!process.waitFor(CONTROL_DEADLINE.toSeconds(), TimeUnit.SECONDS)) {
                process.destroyForcibly();
                throw new IllegalStateException(verb + " " + dir + " did not finish within " + CONTROL_DEADLINE);
            }
            if (process.exitValue() != 0) {
                throw new IllegalStateException(verb + " " + dir + " exited " + process.exitValue() + "; see " + log);
            }
        } catch (IOException e) {
            throw new IllegalStateException("run " + verb + ": " + e, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while running " + verb, e);
        }
    }
}
