package io.seqsvr;

import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.ForwardingClientCall;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.netty.handler.ssl.SslContext;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import seqsvr.v1.IdServiceGrpc;
import seqsvr.v1.Seq.CurrentRequest;
import seqsvr.v1.Seq.CurrentResponse;
import seqsvr.v1.Seq.DecodeIdRequest;
import seqsvr.v1.Seq.DecodeIdResponse;
import seqsvr.v1.Seq.GetRouteTableRequest;
import seqsvr.v1.Seq.GetRouteTableResponse;
import seqsvr.v1.Seq.NextBatchRequest;
import seqsvr.v1.Seq.NextBatchResponse;
import seqsvr.v1.Seq.NextIdsRequest;
import seqsvr.v1.Seq.NextIdsResponse;
import seqsvr.v1.Seq.NextRequest;
import seqsvr.v1.Seq.NextResponse;
import seqsvr.v1.Seq.RouteEntry;
import seqsvr.v1.Seq.RouteTable;
import seqsvr.v1.SeqServiceGrpc;

/**
 * The seqsvr SDK: per-uid sequence numbers ({@link #next}, {@link #nextBatch}, {@link #current})
 * and globally unique ids ({@link #nextIds}, {@link #nextSessionIds}) from a seqsvr cluster.
 * Thread-safe; one per process is enough. Close it when done.
 *
 * <p>Routing: it keeps each set's route table, learnt from the seeds and refreshed from the
 * tables that ride on replies, and calls each uid's owner directly, marked {@code
 * seqsvr-no-forward: 1}: an AllocSvr that does not own the uid answers NOT_OWNER with its table
 * (trailer {@code seqsvr-route-table-bin}), which the client installs if newer and follows.
 * Route tables never go back: a table is installed only if its version is above the one held
 * for its set, whoever sent it.
 *
 * <p>Retries: UNAVAILABLE, DEADLINE_EXCEEDED (one attempt's), CANCELLED (from below) and UNKNOWN
 * are retried with jittered exponential back-off ({@link RetryPolicy#STANDARD}); NOT_OWNER is
 * followed at once up to 4 times in a row. The whole call is bounded by its deadline: the
 * timeout or {@link Deadline} given to the call, else the current gRPC {@link Context}'s
 * deadline, else {@link ClientOptions.Builder#defaultTimeout} (5 s). A back-off is slept only
 * if the deadline leaves room for it and another attempt. Every other code, RESOURCE_EXHAUSTED
 * included, is thrown at once. An interrupt of the calling thread, or a cancel of its gRPC
 * Context, ends the call with CANCELLED (the thread's interrupt flag stays set).
 *
 * <p>Coalescing: concurrent {@code next} calls bound for one AllocSvr ride one NextBatch RPC
 * (independent entries, in queue order), at most maxInFlight (2) RPCs per AllocSvr at a time and
 * maxCoalesced (1000) calls per RPC; the queue holds maxQueued (100 000) calls, one more fails at
 * once with RESOURCE_EXHAUSTED.
 *
 * <p>Uids, sequence numbers and 64-bit ids are unsigned 64-bit numbers held in {@code long}
 * (the cluster's uids and today's values are far below 2^63; use {@link Long#toUnsignedString}
 * for the rest).
 *
 * <p>Every failure is a {@link SeqsvrException} (unchecked) carrying the gRPC code, the server's
 * message and a hint.
 */
public final class SeqsvrClient implements AutoCloseable {
  /** Bounds one attempt: an AllocSvr that accepts connections but never answers must not eat
   * the whole deadline (the Rust SDK's ATTEMPT_TIMEOUT_MAX). */
  static final long ATTEMPT_TIMEOUT_MAX_NANOS = TimeUnit.SECONDS.toNanos(3);
  /** How long the other seeds may still answer once the first route table arrived. */
  static final long SEED_GRACE_NANOS = TimeUnit.MILLISECONDS.toNanos(200);
  /** Bounds a route refresh between two rounds of an id call. */
  static final long REFRESH_TIMEOUT_MAX_NANOS = TimeUnit.MILLISECONDS.toNanos(500);
  /** The most NOT_OWNER redirects one session call follows before it backs off. */
  static final int SESSION_REDIRECTS_MAX = 8;
  /** The most session uids a client remembers. */
  static final int SESSION_UIDS_MAX = 1 << 16;
  /** Message size limits of SeqService (seqsvr-proto's SEQ_REQUEST_MAX_BYTES, REPLY_MAX_BYTES). */
  static final int REPLY_MAX_BYTES = 16 << 20;

  private static final Metadata.Key<String> NO_FORWARD_KEY =
      Metadata.Key.of(SeqsvrException.NO_FORWARD_METADATA, Metadata.ASCII_STRING_MARSHALLER);

  final ClientOptions opts;
  private final List<String> seeds;
  private final SslContext ssl;
  private final String authority;
  private final Function<String, ManagedChannel> dialer;

  private final Object tablesLock = new Object();
  private volatile List<RouteTable> tables = List.of();

  private final Map<String, Peer> peers = new ConcurrentHashMap<>();
  private volatile boolean closed;
  private final AtomicLong cursor = new AtomicLong();
  private final Map<String, Long> sessions = new HashMap<>();
  final Counters stats = new Counters();

  /** One AllocSvr as this client talks to it: its channel and coalescing queue. */
  static final class Peer {
    final String addr;
    final ManagedChannel managed;
    final Channel channel;
    final Coalescer coalescer;

    Peer(String addr, ManagedChannel managed, Channel channel, Coalescer coalescer) {
      this.addr = addr;
      this.managed = managed;
      this.channel = channel;
      this.coalescer = coalescer;
    }
  }

  static final class Counters {
    final AtomicLong calls = new AtomicLong();
    final AtomicLong failed = new AtomicLong();
    final AtomicLong redirects = new AtomicLong();
    final AtomicLong retries = new AtomicLong();
    final AtomicLong refreshes = new AtomicLong();
    final AtomicLong installed = new AtomicLong();
    final AtomicLong coalesced = new AtomicLong();
  }

  /** What the client did so far. */
  public static final class Stats {
    /** Public calls made (next, nextBatch, current); failed: those that ended in an error. */
    public final long calls;
    public final long failed;
    /** Attempts repeated at once after a NOT_OWNER named the owner. */
    public final long redirects;
    /** Attempts repeated after a back-off. */
    public final long retries;
    /** GetRouteTable RPCs; routeTablesInstalled: newer tables installed. */
    public final long routeRefreshes;
    public final long routeTablesInstalled;
    /** The RPCs that carried coalesced next calls. */
    public final long coalescedRpcs;

    Stats(Counters c) {
      calls = c.calls.get();
      failed = c.failed.get();
      redirects = c.redirects.get();
      retries = c.retries.get();
      routeRefreshes = c.refreshes.get();
      routeTablesInstalled = c.installed.get();
      coalescedRpcs = c.coalesced.get();
    }

    @Override
    public String toString() {
      return "calls " + calls + ", failed " + failed + ", redirects " + redirects + ", retries "
          + retries + ", route refreshes " + routeRefreshes + ", tables installed "
          + routeTablesInstalled + ", coalesced RPCs " + coalescedRpcs;
    }
  }

  private SeqsvrClient(ClientOptions opts, Function<String, ManagedChannel> dialer) {
    this.opts = opts;
    this.seeds = opts.seeds;
    if (seeds.isEmpty()) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
          "no seed addresses: give one AllocSvr per set");
    }
    if (opts.maxCoalesced < 1 || opts.maxInFlight < 1 || opts.maxQueued < 1) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
          "maxCoalesced, maxInFlight and maxQueued must be at least 1");
    }
    if (opts.defaultTimeout == null || opts.defaultTimeout.isNegative()
        || opts.defaultTimeout.isZero()) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
          "the default timeout must be positive");
    }
    if (dialer != null) {
      this.ssl = null;
      this.authority = null;
    } else if (opts.tls != null && opts.plaintext) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
          "both TLS and plaintext given: choose one");
    } else if (opts.tls != null) {
      this.ssl = opts.tls.clientContext();
      this.authority = opts.tls.allocServerName();
    } else if (opts.plaintext) {
      this.ssl = null;
      this.authority = null;
    } else {
      throw SeqsvrException.of(Status.Code.FAILED_PRECONDITION,
          "give ClientOptions.tls (the application's certificate and key, e.g. from "
              + "ClusterFile.options) or, for a cluster served in plaintext (--insecure), set "
              + "plaintext(true)",
          "no transport chosen: the SDK never falls back to plaintext");
    }
    this.dialer = dialer != null ? dialer : this::dial;
  }

  /**
   * Learns the route tables from the seeds (one per set is enough) and returns the client,
   * within the default timeout.
   *
   * @throws SeqsvrException UNAVAILABLE if no seed answered in time; at once if the options
   *     choose no transport or a file cannot be read
   */
  public static SeqsvrClient connect(ClientOptions opts) {
    return connect(opts, opts.defaultTimeout);
  }

  /** {@link #connect(ClientOptions)} within {@code timeout}. */
  public static SeqsvrClient connect(ClientOptions opts, Duration timeout) {
    return connectWith(opts, null, System.nanoTime() + timeout.toNanos());
  }

  /** For tests: channels from {@code dialer} (e.g. in-process), by address. */
  static SeqsvrClient connectWith(ClientOptions opts, Function<String, ManagedChannel> dialer,
      long until) {
    SeqsvrClient c = new SeqsvrClient(opts, dialer);
    RetryPolicy.Backoff b = opts.retry.newBackoff();
    while (true) {
      List<String> errs = c.refreshFrom(c.seeds, until);
      if (!c.tables.isEmpty()) {
        return c;
      }
      if (!b.await(until)) {
        c.close();
        throw SeqsvrException.of(Status.Code.UNAVAILABLE,
            "check the seed addresses and that the AllocSvrs run; with TLS, that the CA and "
                + "server name are the cluster's",
            "no seed answered with a route table: %s", String.join("; ", errs));
      }
    }
  }

  /** A client that dials nothing yet (for tests of routing without a server). */
  static SeqsvrClient unconnected(ClientOptions opts, Function<String, ManagedChannel> dialer) {
    return new SeqsvrClient(opts, dialer);
  }

  private ManagedChannel dial(String addr) {
    NettyChannelBuilder b = NettyChannelBuilder.forTarget(addr)
        .maxInboundMessageSize(REPLY_MAX_BYTES)
        .directExecutor();
    if (ssl != null) {
      b.sslContext(ssl).overrideAuthority(authority);
    } else {
      b.usePlaintext();
    }
    return b.build();
  }

  /** Ends the client's channels; calls still running fail, queued ones with CANCELLED. */
  @Override
  public void close() {
    // Under the lock peer() adds under: no channel is dialled after the walk and left open.
    synchronized (peers) {
      closed = true;
      for (Peer p : peers.values()) {
        p.coalescer.close();
        p.managed.shutdownNow();
      }
    }
  }

  /**
   * Every retry loop asks first: once closed, a call fails at once with CANCELLED (the SDK's
   * own, not the retryable CANCELLED of a cut connection).
   */
  private void throwIfClosed() {
    if (closed) {
      throw SeqsvrException.of(Status.Code.CANCELLED, "", "the client is closed");
    }
  }

  /** The client's counters so far. */
  public Stats stats() {
    return new Stats(stats);
  }

  // ---- deadlines ----

  /** A call's deadline in System.nanoTime: the current Context's, else the default timeout. */
  long untilDefault() {
    Deadline d = Context.current().getDeadline();
    if (d != null) {
      return untilOf(d);
    }
    return System.nanoTime() + opts.defaultTimeout.toNanos();
  }

  static long untilOf(Duration timeout) {
    return System.nanoTime() + timeout.toNanos();
  }

  static long untilOf(Deadline deadline) {
    return System.nanoTime() + deadline.timeRemaining(TimeUnit.NANOSECONDS);
  }

  /** How long one attempt may take: what is left, at most ATTEMPT_TIMEOUT_MAX. */
  static long attemptTimeout(long until) {
    return Math.min(until - System.nanoTime(), ATTEMPT_TIMEOUT_MAX_NANOS);
  }

  /**
   * Whether the caller gave up: its thread was interrupted, or its gRPC Context was cancelled
   * (a Context whose deadline passed is the deadline, not a cancel).
   */
  private static boolean interrupted() {
    if (Thread.currentThread().isInterrupted()) {
      return true;
    }
    Context c = Context.current();
    return c.isCancelled() && !(c.getDeadline() != null && c.getDeadline().isExpired());
  }

  /** The error of a call whose time ran out or whose thread was interrupted. */
  private static SeqsvrException endError(SeqsvrException last) {
    if (interrupted()) {
      return SeqsvrException.of(Status.Code.CANCELLED, "", "the caller cancelled the call");
    }
    if (last != null) {
      return last;
    }
    return SeqsvrException.of(Status.Code.DEADLINE_EXCEEDED, "", "the deadline passed");
  }

  // ---- RPCs ----

  /** Starts one unary RPC at p with a deadline timeoutNanos from now. */
  static <Q, R> ListenableFuture<R> rpc(Peer p, MethodDescriptor<Q, R> method, Q request,
      long timeoutNanos) {
    ClientCall<Q, R> call = p.channel.newCall(method,
        CallOptions.DEFAULT.withDeadlineAfter(Math.max(timeoutNanos, 1), TimeUnit.NANOSECONDS));
    return ClientCalls.futureUnaryCall(call, request);
  }

  /**
   * Waits for an RPC started by {@link #rpc} (its own deadline bounds it). An interrupt cancels
   * the RPC and throws CANCELLED with the interrupt flag kept.
   */
  static <R> R await(ListenableFuture<R> f) {
    try {
      return f.get();
    } catch (InterruptedException e) {
      f.cancel(true);
      Thread.currentThread().interrupt();
      throw SeqsvrException.of(Status.Code.CANCELLED, "", "the caller cancelled the call");
    } catch (ExecutionException e) {
      throw SeqsvrException.fromRpc(e.getCause());
    }
  }

  /** The AllocSvr at addr (the same one for every table and call that names it). */
  Peer peer(String addr) {
    Peer p = peers.get(addr);
    if (p != null) {
      return p;
    }
    synchronized (peers) {
      p = peers.get(addr);
      if (p != null) {
        return p;
      }
      if (closed) {
        throw SeqsvrException.of(Status.Code.CANCELLED, "", "the client is closed");
      }
      ManagedChannel ch;
      try {
        ch = dialer.apply(addr);
      } catch (RuntimeException e) {
        throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "", "cannot dial \"%s\": %s",
            addr, e.getMessage());
      }
      Channel intercepted = ClientInterceptors.intercept(ch, NO_FORWARD);
      p = new Peer(addr, ch, intercepted, null);
      p = new Peer(addr, ch, intercepted, new Coalescer(this, p));
      peers.put(addr, p);
      return p;
    }
  }

  /** Marks every call seqsvr-no-forward: 1 (the SDK follows the route tables itself). */
  private static final ClientInterceptor NO_FORWARD = new ClientInterceptor() {
    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method,
        CallOptions callOptions, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<Q, R>(
          next.newCall(method, callOptions)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          headers.put(NO_FORWARD_KEY, "1");
          super.start(listener, headers);
        }
      };
    }
  };

  /** After a retryable failure at p: reconnect at once if its channel is backing off. */
  private static void nudge(Peer p, SeqsvrException e) {
    if (p != null && e.getCode() == Status.Code.UNAVAILABLE) {
      p.managed.resetConnectBackoff();
    }
  }

  // ---- route tables ----

  /** The route tables known now, one per set, by uid range. */
  public List<RouteTable> routeTables() {
    return tables;
  }

  /** Keeps each table that is newer than the one held for its set; a table never goes back. */
  public void learnRoutes(RouteTable... learnt) {
    for (RouteTable t : learnt) {
      install(t);
    }
  }

  void install(RouteTable t) {
    if (t == null) {
      return;
    }
    synchronized (tablesLock) {
      List<RouteTable> now = new ArrayList<>(tables);
      for (int i = 0; i < now.size(); i++) {
        RouteTable held = now.get(i);
        if (held.getSetId() == t.getSetId()) {
          if (Long.compareUnsigned(held.getVersion(), t.getVersion()) >= 0) {
            return;
          }
          now.set(i, t);
          tables = List.copyOf(now);
          stats.installed.incrementAndGet();
          return;
        }
      }
      now.add(t);
      now.sort(Comparator.comparing(RouteTable::getUidBegin, Long::compareUnsigned));
      tables = List.copyOf(now);
      stats.installed.incrementAndGet();
    }
  }

  static RouteTable tableIn(List<RouteTable> tables, long uid) {
    for (RouteTable t : tables) {
      if (Long.compareUnsigned(t.getUidBegin(), uid) <= 0
          && Long.compareUnsigned(uid, t.getUidEnd()) < 0) {
        return t;
      }
    }
    return null;
  }

  RouteTable tableFor(long uid) {
    return tableIn(tables, uid);
  }

  /** The entry naming the owner of uid's section (null for a section in a gap). */
  static RouteEntry ownerOf(RouteTable t, long uid) {
    long size = t.getSectionSize() == 0 ? 1 : t.getSectionSize();
    long section = Long.divideUnsigned(uid, size);
    List<RouteEntry> entries = t.getEntriesList();
    int lo = 0;
    int hi = entries.size();
    while (lo < hi) { // the first entry whose end is above section
      int mid = (lo + hi) >>> 1;
      if (Long.compareUnsigned(entries.get(mid).getSectionEnd(), section) > 0) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (lo < entries.size() && hit(entries.get(lo), section)) {
      return entries.get(lo);
    }
    for (RouteEntry e : entries) { // a table not sorted by section
      if (hit(e, section)) {
        return e;
      }
    }
    return null;
  }

  private static boolean hit(RouteEntry e, long section) {
    return Long.compareUnsigned(e.getSectionBegin(), section) <= 0
        && Long.compareUnsigned(section, e.getSectionEnd()) < 0;
  }

  /** The address t names for uid, if uid is in t's set and the entry has one; else null. */
  static String ownerAddr(RouteTable t, long uid) {
    if (t == null || Long.compareUnsigned(uid, t.getUidBegin()) < 0
        || Long.compareUnsigned(uid, t.getUidEnd()) >= 0) {
      return null;
    }
    RouteEntry e = ownerOf(t, uid);
    return e == null || e.getAddr().isEmpty() ? null : e.getAddr();
  }

  /** Where a uid is served: its AllocSvr and its set's table version. */
  static final class Located {
    final Peer peer;
    final long version;

    Located(Peer peer, long version) {
      this.peer = peer;
      this.version = version;
    }
  }

  private String describeSets() {
    List<String> sets = new ArrayList<>();
    for (RouteTable t : tables) {
      sets.add("set " + t.getSetId() + " [" + Long.toUnsignedString(t.getUidBegin()) + ", "
          + Long.toUnsignedString(t.getUidEnd()) + ")");
    }
    return String.join(", ", sets);
  }

  /**
   * uid's owner, learning the tables from the seeds first if no table has uid's set.
   * INVALID_ARGUMENT for a uid outside every set, UNAVAILABLE for a section without an owner.
   */
  Located locate(long uid, long until) {
    RouteTable t = tableFor(uid);
    if (t == null) {
      refreshFrom(seeds, until);
      t = tableFor(uid);
    }
    if (t == null) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT,
          "give a uid of one of the cluster's sets",
          "uid %s is outside every set of the cluster (%s)", Long.toUnsignedString(uid),
          describeSets());
    }
    String addr = ownerAddr(t, uid);
    if (addr == null) {
      throw SeqsvrException.of(Status.Code.UNAVAILABLE, "",
          "no AllocSvr serves uid %s's section yet (route table v%d of set %d)",
          Long.toUnsignedString(uid), t.getVersion(), t.getSetId());
    }
    return new Located(peer(addr), t.getVersion());
  }

  /**
   * Asks every address at once for its route table and installs what comes back; once one
   * table arrived the others get SEED_GRACE more. Returns the failures.
   */
  List<String> refreshFrom(Collection<String> addrs, long until) {
    long left = attemptTimeout(until);
    List<String> errs = new ArrayList<>();
    if (left <= 0 || addrs.isEmpty()) {
      return errs;
    }
    LinkedBlockingQueue<Object[]> answers = new LinkedBlockingQueue<>();
    List<ListenableFuture<GetRouteTableResponse>> started = new ArrayList<>();
    for (String addr : addrs) {
      stats.refreshes.incrementAndGet();
      Peer p;
      try {
        p = peer(addr);
      } catch (SeqsvrException e) {
        answers.add(new Object[] {addr, e});
        continue;
      }
      ListenableFuture<GetRouteTableResponse> f =
          rpc(p, SeqServiceGrpc.getGetRouteTableMethod(), GetRouteTableRequest.getDefaultInstance(),
              left);
      started.add(f);
      f.addListener(() -> {
        try {
          answers.add(new Object[] {addr, f.get()});
        } catch (Exception e) {
          answers.add(new Object[] {addr, SeqsvrException.fromRpc(e)});
        }
      }, MoreExecutors.directExecutor());
    }
    long waitUntil = Math.min(until, System.nanoTime() + left);
    boolean got = false;
    try {
      for (int pending = addrs.size(); pending > 0; pending--) {
        long wait = waitUntil - System.nanoTime();
        Object[] a = wait > 0 ? answers.poll(wait, TimeUnit.NANOSECONDS) : null;
        if (a == null) {
          errs.add(pending + " more did not answer " + (got ? "in time" : "before the deadline"));
          break;
        }
        String addr = (String) a[0];
        if (a[1] instanceof SeqsvrException) {
          errs.add(addr + ": " + ((SeqsvrException) a[1]).getDescription());
        } else if (!((GetRouteTableResponse) a[1]).hasRouteTable()) {
          errs.add(addr + ": empty route table");
        } else {
          install(((GetRouteTableResponse) a[1]).getRouteTable());
          if (!got) {
            got = true;
            waitUntil = Math.min(waitUntil, System.nanoTime() + SEED_GRACE_NANOS);
          }
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      for (ListenableFuture<GetRouteTableResponse> f : started) {
        f.cancel(true);
      }
    }
    return errs;
  }

  /** Refreshes the tables of uids' sets from every AllocSvr in them and the seeds. */
  void refreshFor(long[] uids, long until) {
    LinkedHashSet<String> addrs = new LinkedHashSet<>();
    for (long uid : uids) {
      RouteTable t = tableFor(uid);
      if (t != null) {
        for (RouteEntry e : t.getEntriesList()) {
          if (!e.getAddr().isEmpty()) {
            addrs.add(e.getAddr());
          }
        }
      }
    }
    addrs.addAll(seeds);
    refreshFrom(addrs, until);
  }

  // ---- next, current ----

  /** One try at uid's owner: the value and the table the answer carried. */
  interface Attempt {
    long[] run(Peer p, long version, long attemptUntil, RouteTable[] table);
  }

  private long call(long uid, long until, Attempt attempt) {
    stats.calls.incrementAndGet();
    try {
      return callAttempts(uid, until, attempt);
    } catch (SeqsvrException e) {
      stats.failed.incrementAndGet();
      throw e;
    }
  }

  private long callAttempts(long uid, long until, Attempt attempt) {
    RetryPolicy.Backoff b = opts.retry.newBackoff();
    SeqsvrException last = null;
    long[] uids = {uid};
    while (true) {
      throwIfClosed();
      Located loc = null;
      try {
        loc = locate(uid, until);
      } catch (SeqsvrException e) {
        if (e.getCode() == Status.Code.INVALID_ARGUMENT) {
          throw e;
        }
        last = e;
      }
      if (loc != null) {
        long timeout = attemptTimeout(until);
        if (timeout <= 0 || interrupted()) {
          throw endError(last);
        }
        try {
          RouteTable[] table = new RouteTable[1];
          long[] value = attempt.run(loc.peer, loc.version, System.nanoTime() + timeout, table);
          install(table[0]);
          return value[0];
        } catch (SeqsvrException aerr) {
          if (interrupted() || System.nanoTime() - until >= 0) {
            throw endError(aerr);
          }
          if (aerr.getCode() == Status.Code.FAILED_PRECONDITION && aerr.routeTable() != null) {
            install(aerr.routeTable());
            // At once, a few times in a row; then back off like any retry.
            if (b.redirect()) {
              stats.redirects.incrementAndGet();
              continue;
            }
            last = aerr;
          } else if (RetryPolicy.retryable(aerr.getCode())) {
            last = aerr;
            nudge(loc.peer, aerr);
          } else {
            throw aerr;
          }
        }
      }
      if (!b.await(until)) {
        throw endError(last);
      }
      stats.retries.incrementAndGet();
      refreshFor(uids, until);
    }
  }

  /**
   * The next sequence of uid: above every value returned for uid by a call that completed
   * before this one started. Retried within the default deadline (see the class comment).
   * Concurrent calls bound for one AllocSvr ride one NextBatch RPC.
   *
   * @throws SeqsvrException INVALID_ARGUMENT for a uid outside every set; the last error when
   *     the deadline passed; RESOURCE_EXHAUSTED at once
   */
  public long next(long uid) {
    return next(uid, untilDefault());
  }

  /** {@link #next(long)} within {@code timeout}. */
  public long next(long uid, Duration timeout) {
    return next(uid, untilOf(timeout));
  }

  /** {@link #next(long)} by {@code deadline}. */
  public long next(long uid, Deadline deadline) {
    return next(uid, untilOf(deadline));
  }

  private long next(long uid, long until) {
    return call(uid, until, (p, version, attemptUntil, table) -> {
      if (!opts.disableCoalescing) {
        try {
          long seq = p.coalescer.next(uid, version, attemptUntil);
          if (seq != 0) {
            return new long[] {seq};
          }
          // Not servable at once (hand-over, waiting for an advance): ask alone, and let the
          // AllocSvr wait for it.
        } catch (SeqsvrException e) {
          if (e.getCode() != Status.Code.INVALID_ARGUMENT) {
            throw e;
          }
          // E.g. more calls than the AllocSvr takes in one batch: ask alone.
        }
      }
      NextResponse r = await(rpc(p, SeqServiceGrpc.getNextMethod(),
          NextRequest.newBuilder().setUid(uid).setRouteVersion(version).build(),
          attemptUntil - System.nanoTime()));
      table[0] = r.hasRouteTable() ? r.getRouteTable() : null;
      return new long[] {r.getSeq()};
    });
  }

  /**
   * uid's current sequence without allocating: at least every value handed out for it and below
   * the next one; 0 if its section never allocated anything.
   */
  public long current(long uid) {
    return current(uid, untilDefault());
  }

  /** {@link #current(long)} within {@code timeout}. */
  public long current(long uid, Duration timeout) {
    return current(uid, untilOf(timeout));
  }

  /** {@link #current(long)} by {@code deadline}. */
  public long current(long uid, Deadline deadline) {
    return current(uid, untilOf(deadline));
  }

  private long current(long uid, long until) {
    return call(uid, until, (p, version, attemptUntil, table) -> {
      CurrentResponse r = await(rpc(p, SeqServiceGrpc.getCurrentMethod(),
          CurrentRequest.newBuilder().setUid(uid).setRouteVersion(version).build(),
          attemptUntil - System.nanoTime()));
      table[0] = r.hasRouteTable() ? r.getRouteTable() : null;
      return new long[] {r.getSeq()};
    });
  }

  // ---- nextBatch ----

  /** The uids of a batch still to be answered that go to one AllocSvr. */
  static final class Group {
    final String addr;
    long version;
    final List<Integer> idx = new ArrayList<>();

    Group(String addr, long version) {
      this.addr = addr;
      this.version = version;
    }
  }

  /**
   * The next sequence of each uid, in order; a repeated uid gets increasing values in batch
   * order. One NextBatch RPC per AllocSvr involved, each all-or-nothing; the whole batch is not
   * (a part that failed leaves only gaps, never repeats). Each retry regroups the uids not
   * answered yet by their owners in the current tables.
   *
   * @throws SeqsvrException INVALID_ARGUMENT for an empty batch or a uid outside every set
   */
  public long[] nextBatch(long... uids) {
    return nextBatch(uids, untilDefault());
  }

  /** {@link #nextBatch(long...)} within {@code timeout}. */
  public long[] nextBatch(long[] uids, Duration timeout) {
    return nextBatch(uids, untilOf(timeout));
  }

  /** {@link #nextBatch(long...)} by {@code deadline}. */
  public long[] nextBatch(long[] uids, Deadline deadline) {
    return nextBatch(uids, untilOf(deadline));
  }

  private long[] nextBatch(long[] uids, long until) {
    stats.calls.incrementAndGet();
    try {
      return nextBatchAttempts(uids, until);
    } catch (SeqsvrException e) {
      stats.failed.incrementAndGet();
      throw e;
    }
  }

  private long[] nextBatchAttempts(long[] uids, long until) {
    if (uids == null || uids.length == 0) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "give at least one uid",
          "empty batch");
    }
    long[] out = new long[uids.length];
    List<Integer> pending = new ArrayList<>();
    for (int i = 0; i < uids.length; i++) {
      pending.add(i);
    }
    RetryPolicy.Backoff b = opts.retry.newBackoff();
    while (true) {
      throwIfClosed();
      List<Group> routed = new ArrayList<>();
      List<Integer> unrouted = new ArrayList<>();
      Long missing = groupByOwner(tables, uids, pending, routed, unrouted);
      if (missing != null) {
        // Learns the tables, or says the uid is outside every set.
        try {
          locate(missing, until);
        } catch (SeqsvrException e) {
          if (e.getCode() == Status.Code.INVALID_ARGUMENT) {
            throw e;
          }
        }
        routed.clear();
        unrouted.clear();
        missing = groupByOwner(tables, uids, pending, routed, unrouted);
        if (missing != null) {
          throw SeqsvrException.of(Status.Code.UNAVAILABLE, "",
              "uid %s: no route table has its set yet; retry", Long.toUnsignedString(missing));
        }
      }
      long timeout = attemptTimeout(until);
      if (timeout <= 0 || interrupted()) {
        throw endError(null);
      }
      List<ListenableFuture<NextBatchResponse>> futures = new ArrayList<>();
      List<Peer> groupPeers = new ArrayList<>();
      for (Group g : routed) {
        NextBatchRequest.Builder req = NextBatchRequest.newBuilder().setRouteVersion(g.version);
        for (int i : g.idx) {
          req.addUids(uids[i]);
        }
        Peer p;
        try {
          p = peer(g.addr);
        } catch (SeqsvrException e) {
          for (ListenableFuture<NextBatchResponse> f : futures) {
            f.cancel(true);
          }
          throw e;
        }
        groupPeers.add(p);
        futures.add(rpc(p, SeqServiceGrpc.getNextBatchMethod(), req.build(), timeout));
      }
      // Why the uids still pending must wait (retryable), if anything must.
      SeqsvrException wait = null;
      SeqsvrException redirected = null;
      SeqsvrException fatal = null;
      if (!unrouted.isEmpty()) {
        wait = SeqsvrException.of(Status.Code.UNAVAILABLE, "",
            "no AllocSvr serves uid %s's section yet", Long.toUnsignedString(uids[unrouted.get(0)]));
      }
      boolean[] answered = new boolean[uids.length];
      for (int gi = 0; gi < routed.size(); gi++) {
        Group g = routed.get(gi);
        NextBatchResponse r;
        try {
          r = await(futures.get(gi));
        } catch (SeqsvrException e) {
          if (interrupted()) {
            for (ListenableFuture<NextBatchResponse> f : futures) {
              f.cancel(true);
            }
            throw endError(e);
          }
          if (e.getCode() == Status.Code.FAILED_PRECONDITION && e.routeTable() != null) {
            install(e.routeTable());
            redirected = e;
          } else if (RetryPolicy.retryable(e.getCode())) {
            wait = e;
            nudge(groupPeers.get(gi), e);
          } else if (fatal == null) {
            fatal = e;
          }
          continue;
        }
        if (r.getSeqsCount() != g.idx.size()) {
          if (fatal == null) {
            fatal = SeqsvrException.of(Status.Code.INTERNAL, "", "%s answered %d values for %d uids",
                g.addr, r.getSeqsCount(), g.idx.size());
          }
          continue;
        }
        if (r.hasRouteTable()) {
          install(r.getRouteTable());
        }
        for (int k = 0; k < g.idx.size(); k++) {
          out[g.idx.get(k)] = r.getSeqs(k);
          answered[g.idx.get(k)] = true;
        }
      }
      if (fatal != null) {
        throw fatal;
      }
      pending.removeIf(i -> answered[i]);
      if (pending.isEmpty()) {
        return out;
      }
      if (System.nanoTime() - until >= 0) {
        throw endError(wait != null ? wait : redirected);
      }
      if (wait == null && redirected != null && b.redirect()) {
        stats.redirects.incrementAndGet();
        continue; // regroup at once by the tables the redirects brought
      }
      SeqsvrException last = wait != null ? wait : redirected;
      if (!b.await(until)) {
        throw endError(last);
      }
      stats.retries.incrementAndGet();
      long[] rest = new long[pending.size()];
      for (int k = 0; k < rest.length; k++) {
        rest[k] = uids[pending.get(k)];
      }
      refreshFor(rest, until);
    }
  }

  /**
   * Groups pending (indices into uids, ascending) by the owner of each uid's section in tables:
   * routed gets one group per AllocSvr in order of first appearance, unrouted the uids whose
   * section no AllocSvr serves yet. Returns a uid no table covers (null: none).
   */
  static Long groupByOwner(List<RouteTable> tables, long[] uids, List<Integer> pending,
      List<Group> routed, List<Integer> unrouted) {
    Map<String, Group> byAddr = new LinkedHashMap<>();
    for (int i : pending) {
      long uid = uids[i];
      RouteTable t = tableIn(tables, uid);
      if (t == null) {
        return uid;
      }
      RouteEntry e = ownerOf(t, uid);
      if (e == null || e.getAddr().isEmpty()) {
        unrouted.add(i);
        continue;
      }
      Group g = byAddr.get(e.getAddr());
      if (g == null) {
        g = new Group(e.getAddr(), t.getVersion());
        byAddr.put(e.getAddr(), g);
        routed.add(g);
      }
      if (Long.compareUnsigned(t.getVersion(), g.version) < 0) {
        g.version = t.getVersion();
      }
      g.idx.add(i);
    }
    return null;
  }

  // ---- ids ----

  /** Every AllocSvr known now: the seeds, then those the route tables name. */
  List<String> addresses() {
    LinkedHashSet<String> all = new LinkedHashSet<>(seeds);
    for (RouteTable t : tables) {
      for (RouteEntry e : t.getEntriesList()) {
        if (!e.getAddr().isEmpty()) {
          all.add(e.getAddr());
        }
      }
    }
    return new ArrayList<>(all);
  }

  /** Every AllocSvr known now, starting one further than the last call did. */
  List<String> roundRobin() {
    List<String> all = addresses();
    int start = (int) Long.remainderUnsigned(cursor.incrementAndGet(), all.size());
    List<String> out = new ArrayList<>(all.subList(start, all.size()));
    out.addAll(all.subList(0, start));
    return out;
  }

  private void refreshRoutes(long timeoutNanos) {
    refreshFrom(addresses(), System.nanoTime() + timeoutNanos);
  }

  /**
   * count new ids of scheme (a name of the cluster config's [ids.schemes]) from one AllocSvr,
   * strictly increasing, with the worker id they carry. Calls go round-robin over every AllocSvr
   * known; a retryable failure goes to the next one at once, and after a round in which every
   * one failed the client backs off, refreshes the route tables and tries another round, within
   * the deadline.
   *
   * @throws SeqsvrException NOT_FOUND: no such scheme; INVALID_ARGUMENT: a count or field that
   *     does not fit; RESOURCE_EXHAUSTED: every worker id held, or the time field ran out
   */
  public Ids nextIds(String scheme, int count) {
    return nextIds(scheme, count, 0, untilDefault());
  }

  /** {@link #nextIds(String, int)} within {@code timeout}. */
  public Ids nextIds(String scheme, int count, Duration timeout) {
    return nextIds(scheme, count, 0, untilOf(timeout));
  }

  /** {@link #nextIds(String, int)} with weibo's business number (0..=31), within timeout. */
  public Ids nextIds(String scheme, int count, long business, Duration timeout) {
    return nextIds(scheme, count, business, untilOf(timeout));
  }

  private Ids nextIds(String scheme, int count, long business, long until) {
    if (count <= 0) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
          "count %d: ask for at least one id", count);
    }
    NextIdsRequest req = NextIdsRequest.newBuilder().setScheme(scheme).setCount(count)
        .setBusiness(business).setPackedIds64(true).setPackedIds128(true).build();
    Ids[] out = new Ids[1];
    idCall(until, (p, timeout) -> {
      NextIdsResponse r = await(rpc(p, IdServiceGrpc.getNextIdsMethod(), req, timeout));
      out[0] = Ids.of(p.addr, r, count);
    });
    return out[0];
  }

  /** Asks an AllocSvr to decode text ({@link Decoder} does the same without a server). */
  public DecodeIdResponse decodeOnServer(String scheme, String text, Duration timeout) {
    DecodeIdResponse[] out = new DecodeIdResponse[1];
    idCall(untilOf(timeout), (p, t) -> out[0] = await(rpc(p, IdServiceGrpc.getDecodeMethod(),
        DecodeIdRequest.newBuilder().setScheme(scheme).setText(text).build(), t)));
    return out[0];
  }

  interface IdAttempt {
    void run(Peer p, long timeoutNanos);
  }

  /** The retry loop of the id calls: rounds over the known AllocSvrs. */
  private void idCall(long until, IdAttempt attempt) {
    RetryPolicy.Backoff b = opts.retry.newBackoff();
    while (true) {
      throwIfClosed();
      List<String> failures = new ArrayList<>();
      SeqsvrException last = null;
      for (String addr : roundRobin()) {
        long timeout = attemptTimeout(until);
        if (timeout <= 0 || interrupted()) {
          break;
        }
        Peer p;
        try {
          p = peer(addr);
        } catch (SeqsvrException e) {
          failures.add(addr + ": " + e.getDescription());
          continue;
        }
        try {
          attempt.run(p, timeout);
          return;
        } catch (SeqsvrException aerr) {
          if (interrupted() || System.nanoTime() - until >= 0) {
            throw endError(aerr);
          }
          if (!RetryPolicy.retryable(aerr.getCode())) {
            throw aerr;
          }
          nudge(p, aerr);
          failures.add(addr + ": " + aerr.getCode() + ": " + aerr.getDescription());
          last = aerr;
        }
      }
      if (last == null) {
        throw endError(SeqsvrException.of(Status.Code.DEADLINE_EXCEEDED, "",
            "the deadline passed before an AllocSvr could be asked (%s)",
            String.join("; ", failures)));
      }
      if (!b.await(until)) {
        throw endError(SeqsvrException.of(last.getCode(), last.getHint(),
            "no AllocSvr answered in time; last round: %s", String.join("; ", failures)));
      }
      refreshRoutes(Math.min(until - System.nanoTime(), REFRESH_TIMEOUT_MAX_NANOS));
    }
  }

  private Long knownSessionUid(String scheme, long key) {
    String k = scheme + "\u0000" + key;
    synchronized (sessions) {
      Long uid = sessions.get(k);
      if (uid != null) {
        return uid;
      }
    }
    if (opts.ids == null) {
      return null;
    }
    ClusterFile.SchemeConfig s = opts.ids.schemes.get(scheme);
    if (s == null || !"rongcloud".equals(s.spec.scheme)) {
      return null;
    }
    long begin = s.sessionBegin();
    long end = s.sessionEnd();
    if (Long.compareUnsigned(begin, end) >= 0) {
      return null;
    }
    return Ids.sessionUid(begin, end, key);
  }

  private void rememberSession(String scheme, long key, long uid) {
    synchronized (sessions) {
      if (sessions.size() >= SESSION_UIDS_MAX) {
        sessions.clear();
      }
      sessions.put(scheme + "\u0000" + key, uid);
    }
  }

  private String sessionOwner(String scheme, long key) {
    Long uid = knownSessionUid(scheme, key);
    return uid == null ? null : ownerAddr(tableFor(uid), uid);
  }

  /**
   * count new rongcloud ids of session, strictly increasing (and above every id the session had
   * before), from the owner of the session's section. The client asks the owner directly once it
   * knows the session's uid (from the cluster config, or an earlier answer) and that uid's
   * route; otherwise any AllocSvr, which answers NOT_OWNER with the uid and its route table.
   * Retries as {@link #nextIds}.
   */
  public Ids nextSessionIds(String scheme, int count, Ids.Session session) {
    return nextSessionIds(scheme, count, session, untilDefault());
  }

  /** {@link #nextSessionIds(String, int, Ids.Session)} within {@code timeout}. */
  public Ids nextSessionIds(String scheme, int count, Ids.Session session, Duration timeout) {
    return nextSessionIds(scheme, count, session, untilOf(timeout));
  }

  private Ids nextSessionIds(String scheme, int count, Ids.Session session, long until) {
    if (count <= 0) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
          "count %d: ask for at least one id", count);
    }
    long key = session.key();
    NextIdsRequest.Builder req = NextIdsRequest.newBuilder().setScheme(scheme).setCount(count)
        .setSessionType(session.type).setPackedIds128(true);
    if (session.id != null && !session.id.isEmpty()) {
      req.setSessionId(session.id);
    } else {
      req.setSessionHash(session.hash);
    }
    NextIdsRequest request = req.build();
    RetryPolicy.Backoff b = opts.retry.newBackoff();
    int redirects = 0;
    while (true) {
      throwIfClosed();
      List<String> addrs;
      String owner = sessionOwner(scheme, key);
      if (owner != null && redirects < SESSION_REDIRECTS_MAX) {
        addrs = List.of(owner);
      } else {
        addrs = roundRobin();
      }
      List<String> failures = new ArrayList<>();
      Status.Code lastCode = Status.Code.UNAVAILABLE;
      boolean redirected = false;
      for (String addr : addrs) {
        long timeout = attemptTimeout(until);
        if (timeout <= 0 || interrupted()) {
          break;
        }
        Peer p;
        try {
          p = peer(addr);
        } catch (SeqsvrException e) {
          failures.add(addr + ": " + e.getDescription());
          continue;
        }
        NextIdsResponse r;
        try {
          r = await(rpc(p, IdServiceGrpc.getNextIdsMethod(), request, timeout));
        } catch (SeqsvrException e) {
          if (interrupted() || System.nanoTime() - until >= 0) {
            throw endError(e);
          }
          if (e.isNotOwner()) {
            if (e.sessionUid() != null) {
              rememberSession(scheme, key, e.sessionUid());
            }
            install(e.routeTable());
            redirects++;
            redirected = redirects <= SESSION_REDIRECTS_MAX;
            failures.add(addr + ": " + e.getDescription());
            String now = sessionOwner(scheme, key);
            if (redirected && now != null && !now.equals(addr)) {
              break; // ask the owner now
            }
            continue;
          }
          if (!RetryPolicy.retryable(e.getCode())) {
            throw e;
          }
          nudge(p, e);
          lastCode = e.getCode();
          failures.add(addr + ": " + e.getCode() + ": " + e.getDescription());
          continue;
        }
        rememberSession(scheme, key, r.getSessionUid());
        return Ids.of(addr, r, count);
      }
      if (redirected) {
        continue;
      }
      if (!b.await(until)) {
        throw endError(SeqsvrException.of(lastCode, "",
            "no owner of the session answered in time; last round: %s",
            String.join("; ", failures)));
      }
      redirects = 0;
      refreshRoutes(Math.min(until - System.nanoTime(), REFRESH_TIMEOUT_MAX_NANOS));
    }
  }

  @Override
  public String toString() {
    return "SeqsvrClient" + Arrays.toString(seeds.toArray()) + " " + stats();
  }
}
