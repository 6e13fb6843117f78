package io.seqsvr.examples.bench;

import io.seqsvr.ClientOptions;
import io.seqsvr.ClusterFile;
import io.seqsvr.SeqsvrClient;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.math.BigDecimal;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A load generator for the Java SDK, the Java side of docs/benchmarks' SDK comparison and the
 * twin of sdk/go/examples/bench/main.go: the workload of {@code seqbench run} (--concurrency
 * callers, each a platform thread in a closed loop of one call after another on a uid drawn from
 * [--uid-base, --uid-base + --uids), uniform or Zipf s = 1, for --seconds), and prints ONE JSON
 * line with the Go driver's fields ("sdk":"java"): values/s, the latency quantiles and the
 * client's CPU µs per call (this JVM's CPU, user + system, every thread: JIT and GC included,
 * over the timed window only).
 *
 * <pre>
 *   --target seqsvr  the SDK as shipped (blocking next(uid); concurrent calls coalesced into
 *                    NextBatch RPCs; --no-coalesce: one Next RPC per call)
 *   --target redis   INCR seq:{uid} on ONE connection shared by every caller and pipelined: a
 *                    writer thread sends every queued command and flushes once per burst, a
 *                    reader thread takes the replies in order and completes each caller's
 *                    future. Debian packages no Java Redis client (no Jedis, no Lettuce), so
 *                    this is a minimal RESP client over a java.net.Socket (buffered streams).
 * </pre>
 */
public final class Bench {
  private Bench() {}

  static final String REDIS_CLIENT =
      "minimal RESP over java.net.Socket (Debian packages no Java Redis client)";

  /** The command line, with the Go driver's flags and defaults. */
  static final class Args {
    String target = "seqsvr";
    String config = "data/local/cluster.toml";
    String cert = "data/local/certs/client.pem";
    String key = "data/local/certs/client.key";
    String redisUrl = "redis://127.0.0.1:6379";
    int concurrency = 64;
    double seconds = 10;
    long uids = 100_000;
    long uidBase = 0;
    String dist = "uniform";
    boolean noCoalesce = false;
    Duration timeout = Duration.ofSeconds(3);
    Duration warmup = Duration.ZERO;
    boolean help = false;
  }

  /** A bad command line (Go's flag package: the message, the usage, exit 2). */
  static final class UsageException extends Exception {
    UsageException(String msg) {
      super(msg);
    }
  }

  static final String USAGE = String.join("\n",
      "usage: sdk/java/bench [flags]",
      "  --target seqsvr|redis   seqsvr (the SDK) or redis (INCR over one shared pipelined connection) (default seqsvr)",
      "  --config FILE           seqsvr: the cluster file (default data/local/cluster.toml)",
      "  --cert FILE             seqsvr: the application's certificate (default data/local/certs/client.pem)",
      "  --key FILE              seqsvr: its key (default data/local/certs/client.key)",
      "  --redis-url URL         redis: the server (default redis://127.0.0.1:6379)",
      "  --concurrency N         callers (default 64)",
      "  --seconds S             how long the timed window lasts (default 10)",
      "  --uids N                uids drawn from [uid-base, uid-base + uids) (default 100000)",
      "  --uid-base N            the first uid (default 0)",
      "  --dist uniform|zipf     uniform or zipf (s = 1, rank 1 = uid-base) (default uniform)",
      "  --no-coalesce           seqsvr: one Next RPC per call",
      "  --timeout D             each call's deadline, a Go duration (default 3s)",
      "  --warmup D              each caller runs the workload this long before the timed window,",
      "                          uncounted, so the JIT has compiled the hot path (default 0s)");

  /**
   * Parses as Go's flag package does: -flag or --flag, a value as the next argument or after
   * '=', a bool flag alone or as --flag=true|false; parsing stops at "--" or the first
   * argument that is not a flag (the rest are ignored, as the Go driver ignores them).
   */
  static Args parse(String[] argv) throws UsageException {
    Args a = new Args();
    for (int i = 0; i < argv.length; i++) {
      String arg = argv[i];
      if (arg.equals("--")) {
        break;
      }
      if (!arg.startsWith("-") || arg.equals("-")) {
        break;
      }
      String name = arg.startsWith("--") ? arg.substring(2) : arg.substring(1);
      String value = null;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.substring(eq + 1);
        name = name.substring(0, eq);
      }
      if (name.isEmpty() || name.startsWith("-")) {
        throw new UsageException("bad flag syntax: " + arg);
      }
      if (name.equals("h") || name.equals("help")) {
        a.help = true;
        return a;
      }
      if (name.equals("no-coalesce")) {
        a.noCoalesce = value == null ? true : parseBool(name, value);
        continue;
      }
      if (value == null) {
        if (!isValueFlag(name)) {
          throw new UsageException("flag provided but not defined: -" + name);
        }
        if (i + 1 >= argv.length) {
          throw new UsageException("flag needs an argument: -" + name);
        }
        value = argv[++i];
      }
      switch (name) {
        case "target":
          a.target = value;
          break;
        case "config":
          a.config = value;
          break;
        case "cert":
          a.cert = value;
          break;
        case "key":
          a.key = value;
          break;
        case "redis-url":
          a.redisUrl = value;
          break;
        case "concurrency":
          a.concurrency = (int) parseInt(name, value, Integer.MIN_VALUE, Integer.MAX_VALUE);
          break;
        case "seconds":
          try {
            if (!value.matches("[+-]?(\\d+\\.?\\d*|\\.\\d+)([eE][+-]?\\d+)?")) {
              throw new NumberFormatException();
            }
            a.seconds = Double.parseDouble(value);
          } catch (NumberFormatException e) {
            throw new UsageException("invalid value \"" + value + "\" for flag -" + name + ": parse error");
          }
          break;
        case "uids":
          a.uids = parseUint(name, value);
          break;
        case "uid-base":
          a.uidBase = parseUint(name, value);
          break;
        case "dist":
          a.dist = value;
          break;
        case "timeout":
          a.timeout = durationFlag(name, value);
          break;
        case "warmup":
          a.warmup = durationFlag(name, value);
          break;
        default:
          throw new UsageException("flag provided but not defined: -" + name);
      }
    }
    return a;
  }

  /** A Go duration flag's value, or the usage error Go's flag package gives. */
  private static Duration durationFlag(String name, String value) throws UsageException {
    try {
      return parseGoDuration(value);
    } catch (IllegalArgumentException e) {
      throw new UsageException("invalid value \"" + value + "\" for flag -" + name + ": " + e.getMessage());
    }
  }

  private static boolean isValueFlag(String name) {
    switch (name) {
      case "target": case "config": case "cert": case "key": case "redis-url": case "concurrency":
      case "seconds": case "uids": case "uid-base": case "dist": case "timeout": case "warmup":
        return true;
      default:
        return false;
    }
  }

  private static boolean parseBool(String name, String v) throws UsageException {
    switch (v) {
      case "1": case "t": case "T": case "true": case "TRUE": case "True":
        return true;
      case "0": case "f": case "F": case "false": case "FALSE": case "False":
        return false;
      default:
        throw new UsageException("invalid boolean value \"" + v + "\" for -" + name + ": parse error");
    }
  }

  private static long parseInt(String name, String v, long min, long max) throws UsageException {
    try {
      long n = Long.parseLong(v.replace("_", ""));
      if (v.startsWith("_") || v.endsWith("_") || v.contains("__") || n < min || n > max) {
        throw new NumberFormatException();
      }
      return n;
    } catch (NumberFormatException e) {
      throw new UsageException("invalid value \"" + v + "\" for flag -" + name + ": parse error");
    }
  }

  /** An unsigned 64-bit number (Go's Uint64 flag), held in a long. */
  private static long parseUint(String name, String v) throws UsageException {
    try {
      if (v.startsWith("+") || v.startsWith("-") || v.startsWith("_") || v.endsWith("_")
          || v.contains("__")) {
        throw new NumberFormatException();
      }
      return Long.parseUnsignedLong(v.replace("_", ""));
    } catch (NumberFormatException e) {
      throw new UsageException("invalid value \"" + v + "\" for flag -" + name + ": parse error");
    }
  }

  /**
   * A Go duration (time.ParseDuration): an optional sign and a sequence of decimal numbers,
   * each with an optional fraction and a unit of ns, us (µs), ms, s, m, h; "0" alone.
   */
  static Duration parseGoDuration(String s) {
    String orig = s;
    boolean neg = false;
    if (s.startsWith("-") || s.startsWith("+")) {
      neg = s.charAt(0) == '-';
      s = s.substring(1);
    }
    if (s.equals("0")) {
      return Duration.ZERO;
    }
    if (s.isEmpty()) {
      throw new IllegalArgumentException("time: invalid duration \"" + orig + "\"");
    }
    BigDecimal total = BigDecimal.ZERO;
    int i = 0;
    while (i < s.length()) {
      int start = i;
      while (i < s.length() && (Character.isDigit(s.charAt(i)) || s.charAt(i) == '.')) {
        i++;
      }
      String num = s.substring(start, i);
      if (num.isEmpty() || num.equals(".") || num.indexOf('.') != num.lastIndexOf('.')) {
        throw new IllegalArgumentException("time: invalid duration \"" + orig + "\"");
      }
      int ustart = i;
      while (i < s.length() && !Character.isDigit(s.charAt(i)) && s.charAt(i) != '.') {
        i++;
      }
      String unit = s.substring(ustart, i);
      long nanos;
      switch (unit) {
        case "ns": nanos = 1L; break;
        case "us": case "µs": case "μs": nanos = 1_000L; break;
        case "ms": nanos = 1_000_000L; break;
        case "s": nanos = 1_000_000_000L; break;
        case "m": nanos = 60_000_000_000L; break;
        case "h": nanos = 3_600_000_000_000L; break;
        case "":
          throw new IllegalArgumentException("time: missing unit in duration \"" + orig + "\"");
        default:
          throw new IllegalArgumentException("time: unknown unit \"" + unit + "\" in duration \"" + orig + "\"");
      }
      String n = num.startsWith(".") ? "0" + num : num.endsWith(".") ? num + "0" : num;
      total = total.add(new BigDecimal(n).multiply(BigDecimal.valueOf(nanos)));
    }
    long ns;
    try {
      ns = total.setScale(0, java.math.RoundingMode.DOWN).longValueExact();
    } catch (ArithmeticException e) {
      throw new IllegalArgumentException("time: invalid duration \"" + orig + "\"");
    }
    return Duration.ofNanos(neg ? -ns : ns);
  }

  /**
   * Zipf s = 1 over ranks 1..n, P(k) ∝ 1/k (rand_distr's Zipf(n, 1.0), which seqbench uses),
   * by binary search in the cumulative distribution, as the Go driver draws it.
   */
  static final class Zipf {
    final double[] cdf;

    Zipf(long n) {
      if (n < 1 || n > Integer.MAX_VALUE - 8) {
        throw new IllegalArgumentException("--dist zipf takes at most " + (Integer.MAX_VALUE - 8) + " uids");
      }
      cdf = new double[(int) n];
      double sum = 0;
      for (int k = 1; k <= n; k++) {
        sum += 1 / (double) k;
        cdf[k - 1] = sum;
      }
      for (int i = 0; i < cdf.length; i++) {
        cdf[i] /= sum;
      }
    }

    /** A rank minus 1, in [0, n). */
    long rank0(SplittableRandom rng) {
      return searchFloat64s(cdf, rng.nextDouble());
    }

    /** Go's sort.SearchFloat64s: the smallest index i with a[i] >= x (a.length if none). */
    static int searchFloat64s(double[] a, double x) {
      int lo = 0;
      int hi = a.length;
      while (lo < hi) {
        int mid = (lo + hi) >>> 1;
        if (a[mid] < x) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      return lo;
    }
  }

  /** One target's call: the value of uid. Each caller thread has its own. */
  interface Caller {
    long call(long uid) throws Exception;
  }

  /** redis://[user:password@]host:port[/db], as redigo's DialURL reads it. */
  static final class RedisUrl {
    final String host;
    final int port;
    final String user;
    final String password;
    final int db;

    RedisUrl(String url) {
      URI u = URI.create(url);
      if (!"redis".equals(u.getScheme())) {
        throw new IllegalArgumentException("invalid redis URL scheme: " + u.getScheme());
      }
      host = u.getHost() == null || u.getHost().isEmpty() ? "localhost" : u.getHost();
      port = u.getPort() < 0 ? 6379 : u.getPort();
      String ui = u.getRawUserInfo();
      if (ui == null) {
        user = null;
        password = null;
      } else {
        int c = ui.indexOf(':');
        String us = c < 0 ? ui : ui.substring(0, c);
        user = us.isEmpty() ? null : URLDecoder.decode(us, StandardCharsets.UTF_8);
        password = c < 0 ? null : URLDecoder.decode(ui.substring(c + 1), StandardCharsets.UTF_8);
      }
      String p = u.getPath() == null ? "" : u.getPath();
      if (p.startsWith("/")) {
        p = p.substring(1);
      }
      db = p.isEmpty() ? 0 : Integer.parseInt(p);
    }
  }

  /** A Redis error reply ("-ERR ..."). */
  static final class RedisError extends Exception {
    RedisError(String msg) {
      super(msg);
    }
  }

  /**
   * One Redis connection shared by every caller: commands are written in the order they are
   * queued and flushed once per burst, replies read back in the same order.
   */
  static final class RedisPipeline implements AutoCloseable {
    private static final byte[] INCR_HEAD = "*2\r\n$4\r\nINCR\r\n$".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] CRLF = {'\r', '\n'};

    static final class Call {
      final byte[] key;
      final CompletableFuture<Long> done = new CompletableFuture<>();

      Call(byte[] key) {
        this.key = key;
      }
    }

    private final Socket sock;
    private final OutputStream out;
    private final InputStream in;
    private final BlockingQueue<Call> queue;
    private final BlockingQueue<Call> inflight;
    private volatile boolean closed;

    RedisPipeline(RedisUrl url, int depth) throws IOException, RedisError {
      sock = new Socket();
      sock.setTcpNoDelay(true);
      sock.connect(new InetSocketAddress(url.host, url.port), 10_000);
      out = new BufferedOutputStream(sock.getOutputStream(), 64 * 1024);
      in = new BufferedInputStream(sock.getInputStream(), 64 * 1024);
      if (url.password != null) {
        if (url.user != null) {
          command("AUTH", url.user, url.password);
        } else {
          command("AUTH", url.password);
        }
      }
      if (url.db != 0) {
        command("SELECT", Integer.toString(url.db));
      }
      queue = new ArrayBlockingQueue<>(depth);
      inflight = new ArrayBlockingQueue<>(depth);
      Thread w = new Thread(this::write, "redis-writer");
      Thread r = new Thread(this::read, "redis-reader");
      w.setDaemon(true);
      r.setDaemon(true);
      w.start();
      r.start();
    }

    /** A command before the pipeline starts, its reply read at once (AUTH, SELECT). */
    private void command(String... args) throws IOException, RedisError {
      StringBuilder b = new StringBuilder("*").append(args.length).append("\r\n");
      for (String a : args) {
        byte[] ab = a.getBytes(StandardCharsets.UTF_8);
        b.append('$').append(ab.length).append("\r\n").append(a).append("\r\n");
      }
      out.write(b.toString().getBytes(StandardCharsets.UTF_8));
      out.flush();
      int t = in.read();
      String line = readLine(in);
      if (t == '-') {
        throw new RedisError(line);
      }
      if (t != '+') {
        throw new IOException("redis: unexpected reply to " + args[0] + ": " + (char) t + line);
      }
    }

    /** The caller's INCR: queued for the writer, completed by the reader. */
    long incr(long uid, Duration timeout) throws Exception {
      Call c = new Call(("seq:" + Long.toUnsignedString(uid)).getBytes(StandardCharsets.US_ASCII));
      queue.put(c);
      try {
        return c.done.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
      } catch (ExecutionException e) {
        Throwable cause = e.getCause();
        throw cause instanceof Exception ? (Exception) cause : e;
      } catch (TimeoutException e) {
        throw new TimeoutException("redis: no reply within " + timeout);
      }
    }

    private void write() {
      try {
        while (true) {
          Call c = queue.take();
          do {
            inflight.put(c);
            out.write(INCR_HEAD);
            writeDecimal(out, c.key.length);
            out.write(CRLF);
            out.write(c.key);
            out.write(CRLF);
            c = queue.poll();
          } while (c != null);
          out.flush();
        }
      } catch (InterruptedException e) {
        // closing
      } catch (IOException e) {
        if (!closed) {
          fatal("redis: send: " + e);
        }
      }
    }

    private void read() {
      try {
        while (true) {
          Call c = inflight.take();
          int t = in.read();
          if (t < 0) {
            throw new EOFException("connection closed by the server");
          }
          String line = readLine(in);
          if (t == ':') {
            c.done.complete(Long.parseLong(line));
          } else if (t == '-') {
            c.done.completeExceptionally(new RedisError(line));
          } else {
            // Any other reply to INCR would leave the stream out of step: stop.
            fatal("redis: unexpected reply to INCR: " + (char) t + line);
          }
        }
      } catch (InterruptedException e) {
        // closing
      } catch (IOException | NumberFormatException e) {
        if (!closed) {
          fatal("redis: receive: " + e);
        }
      }
    }

    private static void writeDecimal(OutputStream out, int n) throws IOException {
      if (n >= 10) {
        writeDecimal(out, n / 10);
      }
      out.write('0' + n % 10);
    }

    private static String readLine(InputStream in) throws IOException {
      StringBuilder b = new StringBuilder(24);
      while (true) {
        int ch = in.read();
        if (ch < 0) {
          throw new EOFException("connection closed by the server");
        }
        if (ch == '\r') {
          if (in.read() != '\n') {
            throw new IOException("redis: malformed reply line");
          }
          return b.toString();
        }
        b.append((char) ch);
      }
    }

    @Override
    public void close() throws IOException {
      closed = true;
      sock.close();
    }
  }

  static void fatal(String msg) {
    System.err.println(msg);
    System.err.flush();
    Runtime.getRuntime().halt(1);
  }

  /** This JVM's CPU time so far (user + system, every thread), in nanoseconds. */
  static long cpuNanos() {
    java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
    if (os instanceof com.sun.management.OperatingSystemMXBean) {
      long t = ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
      if (t >= 0) {
        return t;
      }
    }
    // /proc/self/stat: utime and stime (fields 14 and 15) in clock ticks (USER_HZ, 100 on Linux).
    try {
      String stat = Files.readString(Path.of("/proc/self/stat"));
      String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      return (Long.parseLong(f[11]) + Long.parseLong(f[12])) * 10_000_000L;
    } catch (IOException | RuntimeException e) {
      fatal("client CPU: " + e);
      return 0;
    }
  }

  /** A caller's latencies (ns), grown as needed. */
  static final class Latencies {
    long[] v = new long[1 << 14];
    int n;

    void add(long ns) {
      if (n == v.length) {
        v = Arrays.copyOf(v, v.length * 2);
      }
      v[n++] = ns;
    }
  }

  /** The quantile p of sorted (as the Go driver takes it: all[int(p*(len-1))]), in µs. */
  static long quantileUs(long[] sorted, double p) {
    if (sorted.length == 0) {
      return 0;
    }
    return sorted[(int) (p * (sorted.length - 1))] / 1000;
  }

  public static void main(String[] argv) throws Exception {
    PrintStream err = System.err;
    Args a;
    try {
      a = parse(argv);
    } catch (UsageException e) {
      err.println(e.getMessage());
      err.println(USAGE);
      System.exit(2);
      return;
    }
    if (a.help) {
      err.println(USAGE);
      System.exit(0);
    }
    if (a.concurrency < 1 || a.uids == 0 || a.seconds <= 0 || Double.isNaN(a.seconds)) {
      fatal("--concurrency and --uids must be at least 1, --seconds above 0");
    }
    Zipf zipf = null;
    switch (a.dist) {
      case "uniform":
        if (a.uids < 0) {
          fatal("--uids: at most " + Long.MAX_VALUE);
        }
        break;
      case "zipf":
        try {
          zipf = new Zipf(a.uids);
        } catch (IllegalArgumentException e) {
          fatal(e.getMessage());
        }
        break;
      default:
        fatal("--dist \"" + a.dist + "\": uniform or zipf");
    }

    Map<String, Object> res = new LinkedHashMap<>();
    res.put("sdk", "java");
    res.put("target", a.target);
    SeqsvrClient client = null;
    RedisPipeline pipe = null;
    java.util.function.IntFunction<Caller> call;
    boolean coalesce;
    Duration timeout = a.timeout;
    switch (a.target) {
      case "seqsvr": {
        ClientOptions opts;
        try {
          opts = ClusterFile.load(a.config).options(a.cert, a.key)
              .disableCoalescing(a.noCoalesce).build();
          client = SeqsvrClient.connect(opts, Duration.ofSeconds(10));
        } catch (RuntimeException e) {
          fatal(String.valueOf(e.getMessage() != null ? e.getMessage() : e));
          return;
        }
        coalesce = !a.noCoalesce;
        SeqsvrClient c = client;
        call = w -> uid -> c.next(uid, timeout);
        break;
      }
      case "redis": {
        try {
          pipe = new RedisPipeline(new RedisUrl(a.redisUrl), 4 * a.concurrency);
        } catch (IOException | RedisError | IllegalArgumentException e) {
          fatal("redis: " + e.getMessage());
          return;
        }
        coalesce = true;
        RedisPipeline p = pipe;
        call = w -> uid -> p.incr(uid, timeout);
        break;
      }
      default:
        fatal("--target \"" + a.target + "\": seqsvr or redis");
        return;
    }
    res.put("coalesce", coalesce);
    res.put("concurrency", a.concurrency);
    res.put("dist", a.dist);
    res.put("uids", new Unsigned(a.uids));
    res.put("uid_base", new Unsigned(a.uidBase));
    res.put("warmup_seconds", a.warmup.toNanos() / 1e9);

    AtomicLong calls = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    AtomicReference<String> firstErr = new AtomicReference<>();
    Latencies[] lat = new Latencies[a.concurrency];
    long windowNs = (long) (a.seconds * 1e9);
    long warmupNs = a.warmup.toNanos();
    CountDownLatch begin = new CountDownLatch(1);
    CountDownLatch ready = new CountDownLatch(a.concurrency);
    Thread[] threads = new Thread[a.concurrency];
    final Zipf z = zipf;
    final long uidBase = a.uidBase;
    final long uids = a.uids;
    for (int w = 0; w < a.concurrency; w++) {
      final int wi = w;
      threads[w] = new Thread(() -> {
        Caller next = call.apply(wi);
        SplittableRandom rng = new SplittableRandom(wi + 1);
        Latencies l = new Latencies();
        lat[wi] = l;
        java.util.function.LongSupplier nextUid =
            () -> z != null ? uidBase + z.rank0(rng) : uidBase + rng.nextLong(uids);
        // The warm-up: the same calls, counted nowhere (errors included).
        long warmStop = System.nanoTime() + warmupNs;
        while (System.nanoTime() - warmStop < 0) {
          long uid = nextUid.getAsLong();
          try {
            next.call(uid);
          } catch (Exception e) {
            // counted nowhere
          }
        }
        ready.countDown();
        try {
          begin.await();
        } catch (InterruptedException e) {
          return;
        }
        long stop = System.nanoTime() + windowNs;
        while (true) {
          long start = System.nanoTime();
          if (start - stop >= 0) {
            return;
          }
          long uid = nextUid.getAsLong();
          try {
            next.call(uid);
          } catch (Exception e) {
            if (failed.incrementAndGet() == 1) {
              firstErr.set(e.getMessage() != null ? e.getMessage() : e.toString());
            }
            continue;
          }
          calls.incrementAndGet();
          l.add(System.nanoTime() - start);
        }
      }, "caller-" + w);
      threads[w].start();
    }
    ready.await();
    // The window's edges for `seqbench sdks`, which reads the servers' CPU time at each.
    System.out.println("SEQBENCH_WINDOW start");
    System.out.flush();
    long cpu0 = cpuNanos();
    long t0 = System.nanoTime();
    begin.countDown();
    for (Thread t : threads) {
      t.join();
    }
    long elapsedNs = System.nanoTime() - t0;
    long usedNs = cpuNanos() - cpu0;
    System.out.println("SEQBENCH_WINDOW end");
    System.out.flush();

    int total = 0;
    for (Latencies l : lat) {
      total += l.n;
    }
    long[] all = new long[total];
    int off = 0;
    for (Latencies l : lat) {
      System.arraycopy(l.v, 0, all, off, l.n);
      off += l.n;
    }
    Arrays.sort(all);
    double elapsed = elapsedNs / 1e9;
    long n = calls.get();
    res.put("seconds", elapsed);
    res.put("calls", n);
    res.put("values", n);
    res.put("errors", failed.get());
    if (firstErr.get() != null) {
      res.put("first_error", firstErr.get());
    }
    res.put("calls_per_s", n / elapsed);
    res.put("values_per_s", n / elapsed);
    res.put("p50_us", quantileUs(all, 0.5));
    res.put("p99_us", quantileUs(all, 0.99));
    res.put("p999_us", quantileUs(all, 0.999));
    res.put("max_us", quantileUs(all, 1));
    res.put("client_cpu_us_per_call", n > 0 ? usedNs / 1e3 / n : 0.0);
    res.put("client_cpu_cores", (usedNs / 1e9) / elapsed);
    long coalescedRpcs = 0;
    if (client != null) {
      SeqsvrClient.Stats s = client.stats();
      coalescedRpcs = s.coalescedRpcs;
      res.put("coalesced_rpcs", coalescedRpcs);
      if (coalescedRpcs > 0) {
        res.put("calls_per_coalesced_rpc", (double) s.calls / coalescedRpcs);
      }
    } else {
      res.put("coalesced_rpcs", 0L);
    }
    Runtime rt = Runtime.getRuntime();
    res.put("jvm_available_processors", rt.availableProcessors());
    res.put("jvm_version", System.getProperty("java.vm.name") + " " + System.getProperty("java.runtime.version"));
    List<String> gcs = new ArrayList<>();
    long gcCount = 0;
    long gcMs = 0;
    for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
      gcs.add(gc.getName());
      gcCount += Math.max(0, gc.getCollectionCount());
      gcMs += Math.max(0, gc.getCollectionTime());
    }
    res.put("jvm_gc", String.join(", ", gcs));
    res.put("jvm_gc_collections", gcCount);
    res.put("jvm_gc_ms", gcMs);
    res.put("jvm_max_heap_mb", rt.maxMemory() / (1024 * 1024));
    if (pipe != null) {
      res.put("redis_client", REDIS_CLIENT);
    }
    System.out.println(toJson(res));
    System.out.flush();
    if (client != null) {
      client.close();
    }
    if (pipe != null) {
      pipe.close();
    }
    System.exit(n == 0 ? 1 : 0);
  }

  /** One JSON object of strings, booleans, integers and doubles (as Go prints them: 12.5, 100). */
  static String toJson(Map<String, Object> m) {
    StringBuilder b = new StringBuilder("{");
    for (Map.Entry<String, Object> e : m.entrySet()) {
      if (b.length() > 1) {
        b.append(',');
      }
      quote(b, e.getKey());
      b.append(':');
      Object v = e.getValue();
      if (v instanceof String) {
        quote(b, (String) v);
      } else if (v instanceof Unsigned) {
        b.append(Long.toUnsignedString(((Unsigned) v).v));
      } else if (v instanceof Double) {
        b.append(number((Double) v));
      } else {
        b.append(v);
      }
    }
    return b.append('}').toString();
  }

  /** An unsigned 64-bit number held in a long (a uid), printed as such. */
  static final class Unsigned {
    final long v;

    Unsigned(long v) {
      this.v = v;
    }
  }

  static String number(double d) {
    if (Double.isNaN(d) || Double.isInfinite(d)) {
      return "0";
    }
    if (d == 0) {
      return "0";
    }
    return new BigDecimal(Double.toString(d)).stripTrailingZeros().toPlainString();
  }

  static void quote(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          if (c < 0x20 || c == 0x2028 || c == 0x2029) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    b.append('"');
  }
}
