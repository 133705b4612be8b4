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
 * A cluster started for one scenario, beside the suite's broker, in a directory of its own
 * under the runner's DIR; closing it stops what is still running ({@code stop-cluster DIR},
 * which stops every process DIR/env names). Three shapes:
 * <ul>
 *   <li>{@link #start()}: the target's standalone name server and two master groups,
 *       broker-a and broker-b ({@code start-cluster DIR} of the control script);</li>
 *   <li>{@link #startHa()}: the target's name server and group broker-a as a SYNC_MASTER and
 *       its SLAVE ({@code start-cluster-ha DIR});</li>
 *   <li>{@link #startControllerGroup()}: three controllers, the target's name server and group
 *       broker-a of two brokers in controller mode, from RocketMQ's controller quick-start
 *       files ({@code start-cluster-controller DIR}); the controllers pick the master;</li>
 *   <li>{@link #startMixed(Kind)}: one ringmq group (broker-ringmq) and one RocketMQ 5.5.0
 *       group (broker-rocketmq) in one cluster behind one name server of the given kind
 *       ({@code start-namesrv} of that kind's script, then {@code start-group} of each).</li>
 * </ul>
 */
public final class ClusterProcesses implements AutoCloseable {
    private static final Duration CONTROL_DEADLINE = Duration.ofSeconds(240);
    private static final Duration KILL_DEADLINE = Duration.ofSeconds(30);

    /** Which broker's control script: ringmq's (scripts/ringmq-node.sh) or RocketMQ's (scripts/rocketmq.sh). */
    public enum Kind {
        RINGMQ("ringmq-node.sh"),
        ROCKETMQ("rocketmq.sh");

        private final String script;

        Kind(String script) {
            this.script = script;
        }

        /** The control script of this kind: a sibling of the runner's. */
        Path control(Target target) {
            return target.control().resolveSibling(script);
        }
    }

    private final Target target;
    private final Path control;
    private final Path dir;
    private final Map<String, String> env;

    private ClusterProcesses(Target target, Path control, Path dir) {
        this.target = target;
        this.control = control;
        this.dir = dir;
        this.env = readEnv(dir.resolve("env"));
    }

    /** Starts two master groups behind a standalone name server (bounded) and reads where they listen. */
    public static ClusterProcesses start() {
        return startShape("start-cluster");
    }

    /** Starts group broker-a as a SYNC_MASTER and its slave behind a standalone name server. */
    public static ClusterProcesses startHa() {
        return startShape("start-cluster-ha");
    }

    /** Starts three controllers and a controller-mode group broker-a of two brokers. */
    public static ClusterProcesses startControllerGroup() {
        return startShape("start-cluster-controller");
    }

    private static ClusterProcesses startShape(String verb) {
        Target target = Target.get();
        Path dir = newDir(target);
        run(target, target.control(), List.of(verb, dir.toString()));
        return new ClusterProcesses(target, target.control(), dir);
    }

    /**
     * Starts a name server of kind {@code namesrv}, then an ASYNC_MASTER ringmq group
     * (broker-ringmq) and an ASYNC_MASTER RocketMQ 5.5.0 group (broker-rocketmq), both in
     * DefaultCluster and registered with it. If a step fails, what started is stopped.
     */
    public static ClusterProcesses startMixed(Kind namesrv) {
        Target target = Target.get();
        Path dir = newDir(target);
        Path control = namesrv.control(target);
        try {
            run(target, control, List.of("start-namesrv", dir.toString()));
            String addr = readEnv(dir.resolve("env")).get("NAMESRV_ADDR");
            run(target, Kind.RINGMQ.control(target), List.of("start-group", dir.toString(), "ringmq", addr));
            run(target, Kind.ROCKETMQ.control(target), List.of("start-group", dir.toString(), "rocketmq", addr));
        } catch (RuntimeException e) {
            run(target, control, List.of("stop-cluster", dir.toString()));
            throw e;
        }
        return new ClusterProcesses(target, control, dir);
    }

    private static Path newDir(Target target) {
        return target.dir().resolve("cluster-" + UUID.randomUUID().toString().substring(0, 8));
    }

    public String namesrvAddr() {
        return env.get("NAMESRV_ADDR");
    }

    /** The address of group {@code name}'s master ("broker-a" or "broker-b"). */
    public String brokerAddr(String name) {
        return env.get(key(name, "ADDR"));
    }

    /** The address of group {@code name}'s slave (brokerId 1; {@link #startHa()} only). */
    public String slaveAddr(String name) {
        return env.get(key(name, "SLAVE_ADDR"));
    }

    /** The controllers' addresses ({@link #startControllerGroup()} only). */
    public List<String> controllerAddrs() {
        return List.of(env.get("CONTROLLER_ADDR").split(";"));
    }

    /** The addresses of group {@code name}'s brokers in start order ({@link #startControllerGroup()} only). */
    public List<String> memberAddrs(String name) {
        List<String> members = new java.util.ArrayList<>();
        for (int n = 0; env.containsKey(key(name, "N" + n + "_ADDR")); n++) {
            members.add(env.get(key(name, "N" + n + "_ADDR")));
        }
        return members;
    }

    /** SIGKILLs the broker of group {@code name} at {@code addr} and waits (bounded) until it is gone. */
    public void killMember(String name, String addr) {
        killPid(name, key(name, "N" + member(name, addr) + "_PID"));
    }

    /** SIGKILLs group {@code name}'s master and waits (bounded) until it is gone. */
    public void kill(String name) {
        killPid(name, key(name, "PID"));
    }

    /**
     * Sends {@code signal} ("STOP", "CONT") to the broker of group {@code name} at {@code addr}:
     * a pause that keeps its sockets open, and the end of it.
     */
    public void signalMember(String name, String addr, String signal) {
        String pid = env.get(key(name, "N" + member(name, addr) + "_PID"));
        try {
            Process kill = new ProcessBuilder("kill", "-" + signal, pid).inheritIO().start();
            if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
                throw new IllegalStateException("kill -" + signal + " " + pid + " failed");
            }
        } catch (IOException e) {
            throw new IllegalStateException("kill -" + signal + " " + pid + ": " + e, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    /** Starts again the (killed) broker of group {@code name} at {@code addr}, with its file and store. */
    public void restartMember(String name, String addr) {
        run(target, control, List.of("restart-member", dir.toString(), name.substring("broker-".length()),
                String.valueOf(member(name, addr))));
        env.putAll(readEnv(dir.resolve("env")));
    }

    /** The number of the member of group {@code name} at {@code addr} (its place in start order). */
    private int member(String name, String addr) {
        int n = memberAddrs(name).indexOf(addr);
        if (n < 0) {
            throw new IllegalArgumentException(addr + " is not a member of " + name + ": " + env);
        }
        return n;
    }

    private void killPid(String name, String pidKey) {
        long pid = Long.parseLong(env.get(pidKey));
        ProcessHandle process = ProcessHandle.of(pid)
                .orElseThrow(() -> new IllegalStateException(name + " (pid " + pid + ") is not running"));
        // destroyForcibly is SIGKILL on Unix.
        process.destroyForcibly();
        Wait.until(KILL_DEADLINE, () -> name + " (pid " + pid + ") still alive after SIGKILL",
                () -> !process.isAlive());
    }

    @Override
    public void close() {
        run(target, control, List.of("stop-cluster", dir.toString()));
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
                    String value = line.substring(eq + 1).trim();
                    // A value the scripts quote for the shell (CONTROLLER_ADDR='a;b;c').
                    if (value.length() >= 2 && value.startsWith("'") && value.endsWith("'")) {
                        value = value.substring(1, value.length() - 1);
                    }
                    env.put(line.substring(0, eq).trim(), value);
                }
            }
            return env;
        } catch (IOException e) {
            throw new IllegalStateException("read " + file + ": " + e, e);
        }
    }

    /** Runs {@code control ARGS...} (bounded), its output appended to the runner's control.log. */
    private static void run(Target target, Path control, List<String> args) {
        Path log = target.dir().resolve("control.log");
        List<String> command = new java.util.ArrayList<>(List.of("bash", control.toString()));
        command.addAll(args);
        try {
            Process process = new ProcessBuilder(command)
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
                    .start();
            if (!process.waitFor(CONTROL_DEADLINE.toSeconds(), TimeUnit.SECONDS)) {
                process.destroyForcibly();
                throw new IllegalStateException(command + " did not finish within " + CONTROL_DEADLINE);
            }
            if (process.exitValue() != 0) {
                throw new IllegalStateException(command + " exited " + process.exitValue() + "; see " + log);
            }
        } catch (IOException e) {
            throw new IllegalStateException("run " + command + ": " + e, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while running " + command, e);
        }
    }
}
