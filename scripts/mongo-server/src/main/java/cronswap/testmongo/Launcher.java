package cronswap.testmongo;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.wire.MongoDatabaseHandler;
import de.bwaldvogel.mongo.wire.MongoWireMessageEncoder;
import de.bwaldvogel.mongo.wire.MongoWireProtocolHandler;
import de.bwaldvogel.mongo.wire.MongoWireReplyEncoder;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.group.ChannelGroup;
import io.netty.channel.group.DefaultChannelGroup;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.util.concurrent.DefaultEventExecutor;
import io.netty.util.concurrent.EventExecutor;

/**
 * Test MongoDB for cronswap: runs de.bwaldvogel's mongo-java-server (in memory, or in an H2 file) with an oplog and
 * change streams, reporting MongoDB 6.0 (wire version 17) so that current drivers accept it.
 *
 * <pre>
 * java -jar mongo-server.jar [--port N] [--host 127.0.0.1] [--h2 FILE] [--server-version 6.0] [--wire-version N]
 *                            [--raw] [--ignore-stdin] [--log-level warn] [--oplog-max-entries N] [--ttl-monitor-secs S]
 * </pre>
 *
 * Prints exactly one line, {@code mongodb://HOST:PORT/}, to stdout once it accepts connections, then runs until
 * stdin reaches EOF (unless {@code --ignore-stdin}) or it gets SIGTERM/SIGINT. Logs go to stderr.
 * {@code --raw} runs the library unchanged (its own oplog, no compatibility layer, no TTL monitor) apart from the
 * version.
 */
public final class Launcher {

    private Launcher() {
    }

    /**
     * The oplog bound of a server with an H2 file unless {@code --oplog-max-entries} says otherwise: a file kept from
     * run to run must not grow without end. The daemon of scripts/run-local.sh writes about 0.7 entries a second, so
     * this keeps about 8 hours of its history (a stopped daemon writes none: it resumes from its token after any
     * pause), for tens of megabytes of heap and file (20,000 entries of job_runs-sized writes: about 70 MB of heap
     * with the records themselves). In memory the default is no bound, as the tests want.
     */
    static final int DEFAULT_H2_OPLOG_MAX_ENTRIES = 20_000;

    /** Seconds between two passes of the TTL monitor, as a real server's {@code ttlMonitorSleepSecs}. */
    static final int DEFAULT_TTL_MONITOR_SECS = 60;

    private static final String USAGE = "usage: java -jar mongo-server.jar [--port N (0 = any free port; default 0)] "
        + "[--host 127.0.0.1] [--h2 FILE] [--server-version 6.0] [--wire-version N] [--raw] [--ignore-stdin] "
        + "[--oplog-max-entries N (keep the newest N entries, 0 = all; default " + DEFAULT_H2_OPLOG_MAX_ENTRIES
        + " with --h2, all in memory)] [--ttl-monitor-secs S (seconds between TTL passes, 0 = none; default "
        + DEFAULT_TTL_MONITOR_SECS + ")] [--log-level warn]";

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = 0;
        String h2File = null;
        String serverVersion = "6.0.0";
        Integer wireVersion = null;
        boolean raw = false;
        boolean ignoreStdin = false;
        String logLevel = null;
        Integer oplogMaxEntries = null;
        int ttlMonitorSecs = DEFAULT_TTL_MONITOR_SECS;
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            String value = null;
            int eq = arg.indexOf('=');
            if (arg.startsWith("--") && eq > 0) {
                value = arg.substring(eq + 1);
                arg = arg.substring(0, eq);
            }
            switch (arg) {
                case "--port":
                    port = Integer.parseInt(value != null ? value : next(args, ++i, arg));
                    break;
                case "--host":
                    host = value != null ? value : next(args, ++i, arg);
                    break;
                case "--h2":
                    h2File = value != null ? value : next(args, ++i, arg);
                    break;
                case "--server-version":
                    serverVersion = value != null ? value : next(args, ++i, arg);
                    break;
                case "--wire-version":
                    wireVersion = Integer.valueOf(value != null ? value : next(args, ++i, arg));
                    break;
                case "--log-level":
                    logLevel = value != null ? value : next(args, ++i, arg);
                    break;
                case "--oplog-max-entries":
                    oplogMaxEntries = nonNegative(arg, value != null ? value : next(args, ++i, arg));
                    break;
                case "--ttl-monitor-secs":
                    ttlMonitorSecs = nonNegative(arg, value != null ? value : next(args, ++i, arg));
                    break;
                case "--raw":
                    raw = true;
                    break;
                case "--ignore-stdin":
                    ignoreStdin = true;
                    break;
                case "-h":
                case "--help":
                    System.out.println(USAGE);
                    return;
                default:
                    System.err.println("unknown argument: " + args[i]);
                    System.err.println(USAGE);
                    System.exit(2);
            }
        }
        if (logLevel != null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", logLevel);
            for (String quiet : List.of("MongoDatabaseHandler", "MongoWireProtocolHandler", "MongoExceptionHandler")) {
                System.setProperty("org.slf4j.simpleLogger.log.de.bwaldvogel.mongo.wire." + quiet, logLevel);
            }
        }

        Version version = Version.parse(serverVersion, wireVersion);
        if (oplogMaxEntries == null) {
            oplogMaxEntries = h2File != null ? DEFAULT_H2_OPLOG_MAX_ENTRIES : 0;
        }
        Server server = raw ? new RawServer(h2File, version)
            : new CompatServer(h2File, version, oplogMaxEntries, ttlMonitorSecs);
        InetSocketAddress address;
        try {
            address = server.start(new InetSocketAddress(host, port));
        } catch (RuntimeException e) {
            System.err.println("mongo-server: cannot start on " + host + ":" + port + ": " + e);
            server.stop();
            System.exit(1);
            return;
        }

        CountDownLatch stopped = new CountDownLatch(1);
        AtomicBoolean stopping = new AtomicBoolean();
        Runnable stop = () -> {
            if (stopping.compareAndSet(false, true)) {
                try {
                    server.stop();
                } finally {
                    stopped.countDown();
                }
            }
        };
        Runtime.getRuntime().addShutdownHook(new Thread(stop, "mongo-server-shutdown"));

        PrintStream out = System.out;
        out.println("mongodb://" + hostForUri(address) + ":" + address.getPort() + "/");
        out.flush();

        if (!ignoreStdin) {
            Thread stdinWatcher = new Thread(() -> {
                drain(System.in);
                stop.run();
                System.exit(0);
            }, "mongo-server-stdin");
            stdinWatcher.setDaemon(true);
            stdinWatcher.start();
        }
        stopped.await();
    }

    private static String hostForUri(InetSocketAddress address) {
        String host = address.getHostString();
        return host.contains(":") ? "[" + host + "]" : host;
    }

    private static void drain(InputStream in) {
        byte[] buffer = new byte[256];
        try {
            while (in.read(buffer) >= 0) {
                // ignore input; EOF means the parent is gone
            }
        } catch (IOException e) {
            // treat like EOF
        }
    }

    private static int nonNegative(String flag, String value) {
        try {
            int n = Integer.parseInt(value);
            if (n >= 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // below
        }
        System.err.println(flag + " needs a number of 0 or more, not " + value);
        System.err.println(USAGE);
        System.exit(2);
        return 0;
    }

    private static String next(String[] args, int i, String flag) {
        if (i >= args.length) {
            System.err.println("missing value for " + flag);
            System.err.println(USAGE);
            System.exit(2);
        }
        return args[i];
    }

    /** The version reported by isMaster/hello and buildInfo. */
    record Version(List<Integer> versionArray, int wireVersion) implements MongoVersion {
        static Version parse(String text, Integer wireOverride) {
            String[] parts = text.split("\\.");
            int major = Integer.parseInt(parts[0]);
            int minor = parts.length > 1 ? Integer.parseInt(parts[1]) : 0;
            int patch = parts.length > 2 ? Integer.parseInt(parts[2]) : 0;
            int wire;
            if (wireOverride != null) {
                wire = wireOverride;
            } else if (major >= 8) {
                wire = 25;
            } else if (major == 7) {
                wire = 21;
            } else if (major == 6) {
                wire = 17;
            } else if (major == 5) {
                wire = 13;
            } else if (major == 4 && minor >= 4) {
                wire = 9;
            } else if (major == 4 && minor >= 2) {
                wire = 8;
            } else {
                wire = 7;
            }
            return new Version(List.of(major, minor, patch), wire);
        }

        @Override
        public List<Integer> getVersionArray() {
            return versionArray;
        }

        @Override
        public int getWireVersion() {
            return wireVersion;
        }
    }

    interface Server {
        InetSocketAddress start(InetSocketAddress address);

        void stop();
    }

    /** The library as it is: MongoServer + backend + its own oplog; only the version differs. */
    static final class RawServer implements Server {
        private final MongoServer server;

        RawServer(String h2File, Version version) {
            MongoBackend backend = h2File != null ? new H2Backend(h2File) : new MemoryBackend();
            backend.version(version);
            server = new MongoServer(backend);
            server.enableOplog();
        }

        @Override
        public InetSocketAddress start(InetSocketAddress address) {
            server.bind(address);
            return server.getLocalAddress();
        }

        @Override
        public void stop() {
            server.shutdownNow();
        }
    }

    /**
     * The library's wire handlers behind our own netty bootstrap: each connection gets its own handler thread (as
     * mongod has), so a change-stream getMore that waits for events blocks only its own connection. A TTL monitor
     * thread deletes expired documents every ttlMonitorSecs.
     */
    static final class CompatServer implements Server {
        private final CompatBackend backend;
        private final int ttlMonitorSecs;
        private ScheduledExecutorService ttlMonitor;
        private EventLoopGroup bossGroup;
        private EventLoopGroup workerGroup;
        private ChannelGroup channelGroup;
        private Channel serverChannel;
        private final AtomicLong connections = new AtomicLong();

        CompatServer(String h2File, Version version, int oplogMaxEntries, int ttlMonitorSecs) {
            MongoBackend inner = h2File != null ? new H2Storage(h2File, oplogMaxEntries)
                : new IndexedMemory.Backend(oplogMaxEntries);
            inner.version(version);
            inner.enableOplog();
            backend = new CompatBackend(inner);
            this.ttlMonitorSecs = ttlMonitorSecs;
        }

        @Override
        public InetSocketAddress start(InetSocketAddress address) {
            bossGroup = new MultiThreadIoEventLoopGroup(1, NioIoHandler.newFactory());
            workerGroup = new MultiThreadIoEventLoopGroup(0, NioIoHandler.newFactory());
            channelGroup = new DefaultChannelGroup("mongodb-channels", workerGroup.next());
            ServerBootstrap bootstrap = new ServerBootstrap()
                .group(bossGroup, workerGroup)
                .channel(NioServerSocketChannel.class)
                .option(ChannelOption.SO_BACKLOG, 128)
                .option(ChannelOption.SO_REUSEADDR, Boolean.TRUE)
                .localAddress(address)
                .childOption(ChannelOption.TCP_NODELAY, Boolean.TRUE)
                .childHandler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    public void initChannel(SocketChannel ch) {
                        long n = connections.incrementAndGet();
                        EventExecutor executor = new DefaultEventExecutor(runnable -> {
                            Thread thread = new Thread(runnable, "conn" + n);
                            thread.setDaemon(true);
                            return thread;
                        });
                        // a quiet period, because the pipeline still runs inactive/unregistered on it after close
                        ch.closeFuture().addListener(future -> executor.shutdownGracefully(1, 5, TimeUnit.SECONDS));
                        ch.pipeline().addLast(new MongoWireReplyEncoder());
                        ch.pipeline().addLast(new MongoWireMessageEncoder());
                        ch.pipeline().addLast(new MongoWireProtocolHandler());
                        ch.pipeline().addLast(executor, new MongoDatabaseHandler(backend, channelGroup));
                        ch.pipeline().addLast(executor, new ConnectionErrors());
                    }
                });
            serverChannel = bootstrap.bind().syncUninterruptibly().channel();
            if (ttlMonitorSecs > 0) {
                ttlMonitor = Executors.newSingleThreadScheduledExecutor(runnable -> {
                    Thread thread = new Thread(runnable, "ttl-monitor");
                    thread.setDaemon(true);
                    return thread;
                });
                ttlMonitor.scheduleWithFixedDelay(this::expireTtl, ttlMonitorSecs, ttlMonitorSecs, TimeUnit.SECONDS);
            }
            return (InetSocketAddress) serverChannel.localAddress();
        }

        private void expireTtl() {
            try {
                backend.expireTtl();
            } catch (RuntimeException e) {
                // as a server's TTL monitor: log, and try again next time
                System.err.println("mongo-server: TTL monitor: " + e);
            }
        }

        @Override
        public void stop() {
            if (ttlMonitor != null) {
                ttlMonitor.shutdownNow();
            }
            if (serverChannel != null) {
                serverChannel.close().syncUninterruptibly();
            }
            if (channelGroup != null) {
                channelGroup.close().awaitUninterruptibly(2, TimeUnit.SECONDS);
            }
            if (bossGroup != null) {
                bossGroup.shutdownGracefully(0, 2, TimeUnit.SECONDS);
            }
            if (workerGroup != null) {
                workerGroup.shutdownGracefully(0, 2, TimeUnit.SECONDS);
            }
            backend.close();
        }
    }
}
