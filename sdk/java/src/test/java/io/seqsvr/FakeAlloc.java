package io.seqsvr;

import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.netty.handler.ssl.SslContext;
import java.net.InetSocketAddress;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import seqsvr.v1.IdServiceGrpc;
import seqsvr.v1.Seq.CurrentRequest;
import seqsvr.v1.Seq.CurrentResponse;
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
 * The one test double of these tests: an in-process AllocSvr (a real gRPC server over Netty on
 * a loopback port) whose answers a test scripts through its handlers. Handlers left null answer
 * UNIMPLEMENTED, except GetRouteTable, which answers {@link #table} (UNAVAILABLE while null).
 */
final class FakeAlloc implements AutoCloseable {
  /** A scripted answer; throw a StatusRuntimeException (with trailers) to fail. */
  interface Handler<Q, R> {
    R handle(Q request) throws Exception;
  }

  private static final Metadata.Key<String> NO_FORWARD =
      Metadata.Key.of("seqsvr-no-forward", Metadata.ASCII_STRING_MARSHALLER);

  final Server server;
  final String addr;
  volatile RouteTable table;
  final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
  final Map<String, AtomicInteger> noForward = new ConcurrentHashMap<>();

  volatile Handler<NextRequest, NextResponse> next;
  volatile Handler<NextBatchRequest, NextBatchResponse> nextBatch;
  volatile Handler<CurrentRequest, CurrentResponse> current;
  volatile Handler<NextIdsRequest, NextIdsResponse> nextIds;

  FakeAlloc() throws Exception {
    this(null);
  }

  FakeAlloc(SslContext tls) throws Exception {
    this(tls, 0);
  }

  /** On a given port (0: any), e.g. to start an AllocSvr again where it was. */
  FakeAlloc(SslContext tls, int port) throws Exception {
    ServerInterceptor counting = new ServerInterceptor() {
      @Override
      public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
          ServerCallHandler<Q, R> next) {
        String method = call.getMethodDescriptor().getBareMethodName();
        calls.computeIfAbsent(method, k -> new AtomicInteger()).incrementAndGet();
        if ("1".equals(headers.get(NO_FORWARD))) {
          noForward.computeIfAbsent(method, k -> new AtomicInteger()).incrementAndGet();
        }
        return next.startCall(call, headers);
      }
    };
    NettyServerBuilder b = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", port))
        .addService(ServerInterceptors.intercept(new Seq(), counting))
        .addService(ServerInterceptors.intercept(new IdsImpl(), counting));
    if (tls != null) {
      b.sslContext(tls);
    }
    server = b.build().start();
    addr = "127.0.0.1:" + server.getPort();
  }

  int calls(String method) {
    AtomicInteger n = calls.get(method);
    return n == null ? 0 : n.get();
  }

  int noForward(String method) {
    AtomicInteger n = noForward.get(method);
    return n == null ? 0 : n.get();
  }

  @Override
  public void close() throws InterruptedException {
    server.shutdownNow();
    server.awaitTermination(5, TimeUnit.SECONDS);
  }

  private static <Q, R> void answer(Handler<Q, R> h, Q req, StreamObserver<R> out, String name) {
    if (h == null) {
      out.onError(Status.UNIMPLEMENTED.withDescription(name).asRuntimeException());
      return;
    }
    R r;
    try {
      r = h.handle(req);
    } catch (StatusRuntimeException e) {
      out.onError(e);
      return;
    } catch (Exception e) {
      out.onError(Status.INTERNAL.withDescription(e.toString()).asRuntimeException());
      return;
    }
    out.onNext(r);
    out.onCompleted();
  }

  private final class Seq extends SeqServiceGrpc.SeqServiceImplBase {
    @Override
    public void getRouteTable(GetRouteTableRequest r, StreamObserver<GetRouteTableResponse> o) {
      RouteTable t = table;
      if (t == null) {
        o.onError(Status.UNAVAILABLE.withDescription("no route table yet").asRuntimeException());
        return;
      }
      o.onNext(GetRouteTableResponse.newBuilder().setRouteTable(t).build());
      o.onCompleted();
    }

    @Override
    public void next(NextRequest r, StreamObserver<NextResponse> o) {
      answer(FakeAlloc.this.next, r, o, "Next");
    }

    @Override
    public void nextBatch(NextBatchRequest r, StreamObserver<NextBatchResponse> o) {
      answer(FakeAlloc.this.nextBatch, r, o, "NextBatch");
    }

    @Override
    public void current(CurrentRequest r, StreamObserver<CurrentResponse> o) {
      answer(FakeAlloc.this.current, r, o, "Current");
    }
  }

  private final class IdsImpl extends IdServiceGrpc.IdServiceImplBase {
    @Override
    public void nextIds(NextIdsRequest r, StreamObserver<NextIdsResponse> o) {
      answer(FakeAlloc.this.nextIds, r, o, "NextIds");
    }
  }

  /** The AllocSvr's NOT_OWNER answer: FAILED_PRECONDITION with t in the trailers. */
  static StatusRuntimeException notOwner(RouteTable t) {
    return notOwner(t, null);
  }

  /** NOT_OWNER with t and, for a rongcloud session, the uid it is routed by. */
  static StatusRuntimeException notOwner(RouteTable t, Long sessionUid) {
    Metadata trailers = new Metadata();
    trailers.put(SeqsvrException.ROUTE_TABLE_KEY, t.toByteArray());
    if (sessionUid != null) {
      trailers.put(SeqsvrException.SESSION_UID_KEY, Long.toString(sessionUid));
    }
    return Status.FAILED_PRECONDITION
        .withDescription("NOT_OWNER: section is not served here (route table v" + t.getVersion()
            + ")")
        .asRuntimeException(trailers);
  }

  static StatusRuntimeException status(Status.Code code, String message) {
    return Status.fromCode(code).withDescription(message).asRuntimeException();
  }

  /**
   * A route table of set {@code set} over uids [set·1000, (set+1)·1000) of 10-uid sections;
   * entries as (begin, end, addr) triples.
   */
  static RouteTable table(long set, long version, Object... entries) {
    RouteTable.Builder t = RouteTable.newBuilder().setSetId(set).setVersion(version)
        .setUidBegin(set * 1000).setUidEnd((set + 1) * 1000).setSectionSize(10);
    for (int i = 0; i + 2 < entries.length; i += 3) {
      t.addEntries(RouteEntry.newBuilder().setSectionBegin((Integer) entries[i])
          .setSectionEnd((Integer) entries[i + 1]).setAddr((String) entries[i + 2]));
    }
    return t.build();
  }

  /** A plaintext client of seeds with the builder's other options. */
  static SeqsvrClient plaintext(ClientOptions.Builder b, String... seeds) {
    return SeqsvrClient.connect(b.seeds(seeds).plaintext(true).build());
  }

  /** Polls cond until it holds (a condition wait, not a sleep as synchronisation). */
  static void eventually(String what, BooleanSupplier cond) throws InterruptedException {
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() - until > 0) {
        throw new AssertionError("timed out waiting for: " + what);
      }
      Thread.sleep(1);
    }
  }

  /** Per-uid counters: the values a fake hands out. */
  static final class Counter {
    private final Map<Long, Long> n = new ConcurrentHashMap<>();

    long next(long uid) {
      return n.merge(uid, 1L, Long::sum);
    }
  }
}
