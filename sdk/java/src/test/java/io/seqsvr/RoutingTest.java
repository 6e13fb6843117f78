package io.seqsvr;

import static io.seqsvr.FakeAlloc.notOwner;
import static io.seqsvr.FakeAlloc.plaintext;
import static io.seqsvr.FakeAlloc.status;
import static io.seqsvr.FakeAlloc.table;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.Test;
import seqsvr.v1.Seq.CurrentResponse;
import seqsvr.v1.Seq.NextBatchResponse;
import seqsvr.v1.Seq.NextResponse;
import seqsvr.v1.Seq.RouteTable;

/** Routing, NOT_OWNER, retries and deadlines against in-process fake AllocSvrs. */
public class RoutingTest {
  private static SeqsvrException thrown(Runnable r) {
    try {
      r.run();
    } catch (SeqsvrException e) {
      return e;
    }
    throw new AssertionError("no SeqsvrException");
  }

  @Test
  public void anOlderRouteTableIsNeverInstalled() {
    SeqsvrClient c = SeqsvrClient.unconnected(
        ClientOptions.builder().seeds("127.0.0.1:1").plaintext(true).build(), null);
    c.learnRoutes(table(0, 5, 0, 100, "a:1"));
    c.learnRoutes(table(0, 4, 0, 100, "b:1"), table(0, 5, 0, 100, "c:1"));
    assertEquals(1, c.routeTables().size());
    assertEquals(5, c.routeTables().get(0).getVersion());
    assertEquals("a:1", SeqsvrClient.ownerAddr(c.tableFor(42), 42));
    c.learnRoutes(table(1, 1, 100, 200, "d:1"), table(0, 6, 0, 100, "e:1"));
    assertEquals("e:1", SeqsvrClient.ownerAddr(c.tableFor(42), 42));
    assertEquals("d:1", SeqsvrClient.ownerAddr(c.tableFor(1042), 1042));
    assertNull(c.tableFor(2000));
    assertEquals(3, c.stats().routeTablesInstalled);
    c.close();
  }

  /**
   * A closed client fails every call at once with CANCELLED "the client is closed": the SDK's
   * own CANCELLED is not retried as a cut connection's is (before, each call retried until its
   * deadline, 30 s here; the test's 10 s bound only catches that).
   */
  @Test(timeout = 10_000)
  public void aCallOnAClosedClientFailsAtOnce() throws Exception {
    try (FakeAlloc a = new FakeAlloc()) {
      a.table = table(0, 1, 0, 100, a.addr);
      FakeAlloc.Counter n = new FakeAlloc.Counter();
      a.next = req -> NextResponse.newBuilder().setSeq(n.next(req.getUid())).build();
      a.nextBatch = req -> {
        NextBatchResponse.Builder r = NextBatchResponse.newBuilder();
        for (long uid : req.getUidsList()) {
          r.addSeqs(n.next(uid));
        }
        return r.build();
      };
      for (boolean coalescing : new boolean[] {true, false}) {
        SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(!coalescing), a.addr);
        assertTrue(c.next(7) > 0);
        c.close();
        Duration deadline = Duration.ofSeconds(30);
        List<Runnable> calls = List.of(
            () -> c.next(7, deadline),
            () -> c.nextBatch(new long[] {7, 8}, deadline),
            () -> c.nextIds("snowflake", 1, deadline));
        for (Runnable call : calls) {
          SeqsvrException e = thrown(call);
          assertEquals(Status.Code.CANCELLED, e.getCode());
          assertTrue(e.getMessage(), e.getMessage().contains("closed"));
        }
      }
    }
  }

  @Test
  public void groupingFollowsTheCurrentTable() {
    RouteTable t0 = table(0, 3, 0, 5, "a", 5, 50, "b", 60, 100, "a");
    RouteTable t1 = table(1, 7, 100, 200, "c");
    // 7 and 8: section 0 (a); 1042: set 1 (c); 55: section 5 (b); 600: section 60 (a)
    long[] uids = {7, 1042, 55, 8, 600, 505, 2000};
    List<SeqsvrClient.Group> routed = new ArrayList<>();
    List<Integer> unrouted = new ArrayList<>();
    assertNull(SeqsvrClient.groupByOwner(List.of(t0, t1), uids, List.of(0, 1, 2, 3, 4, 5),
        routed, unrouted));
    List<String> got = new ArrayList<>();
    for (SeqsvrClient.Group g : routed) {
      got.add(g.addr + "@v" + g.version + g.idx);
    }
    assertEquals(List.of("a@v3[0, 3, 4]", "c@v7[1]", "b@v3[2]"), got);
    assertEquals(List.of(5), unrouted); // 505: section 50, in a gap: it waits
    assertEquals(Long.valueOf(2000), SeqsvrClient.groupByOwner(List.of(t0, t1), uids,
        List.of(0, 6), new ArrayList<>(), new ArrayList<>()));
  }

  @Test
  public void notOwnerInstallsTheNewerTableAndGoesToTheOwner() throws Exception {
    try (FakeAlloc a = new FakeAlloc(); FakeAlloc b = new FakeAlloc()) {
      RouteTable v1 = table(0, 1, 0, 100, a.addr);
      RouteTable v2 = table(0, 2, 0, 100, b.addr);
      a.table = v1;
      a.next = req -> {
        throw notOwner(v2);
      };
      a.current = req -> {
        throw notOwner(v2);
      };
      FakeAlloc.Counter n = new FakeAlloc.Counter();
      b.next = req -> NextResponse.newBuilder().setSeq(n.next(req.getUid()) + 100).build();
      b.current = req -> CurrentResponse.newBuilder().setSeq(777).build();
      try (SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(true), a.addr)) {
        assertEquals(101, c.next(7));
        assertEquals(2, c.routeTables().get(0).getVersion());
        assertEquals(1, a.calls("Next"));
        assertEquals(1, a.noForward("Next"));
        assertEquals(102, c.next(7)); // straight to the owner now
        assertEquals(1, a.calls("Next"));
        assertEquals(2, b.calls("Next"));
        assertEquals(2, b.noForward("Next"));
        assertEquals(777, c.current(7));
        assertEquals(0, a.calls("Current"));
        assertEquals(1, c.stats().redirects);
        // An AllocSvr answering NOT_OWNER with an older table does not turn the route back.
        b.next = req -> {
          throw notOwner(v1);
        };
        SeqsvrException e = thrown(() -> c.next(7, Duration.ofSeconds(2)));
        assertEquals(Status.Code.FAILED_PRECONDITION, e.getCode());
        assertTrue(e.getDescription(), e.getDescription().startsWith("NOT_OWNER"));
        assertEquals(2, c.routeTables().get(0).getVersion());
        assertEquals(1, a.calls("Next"));
      }
    }
  }

  @Test
  public void retriesAreBoundedByTheDeadline() throws Exception {
    try (FakeAlloc f = new FakeAlloc()) {
      f.table = table(0, 1, 0, 100, f.addr);
      f.next = req -> {
        throw status(Status.Code.UNAVAILABLE, "no lease");
      };
      try (SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(true), f.addr)) {
        Deadline deadline = Deadline.after(400, TimeUnit.MILLISECONDS);
        SeqsvrException e = thrown(() -> c.next(7, deadline));
        assertFalse("the call returned only after its deadline", deadline.isExpired());
        assertEquals(Status.Code.UNAVAILABLE, e.getCode());
        assertEquals("no lease", e.getDescription());
        assertFalse(e.getHint().isEmpty());
        assertTrue(f.calls("Next") + " attempts in 400 ms", f.calls("Next") >= 3);
        assertTrue(c.stats().retries >= 2);

        // A final code is thrown at once, after one attempt.
        f.next = req -> {
          throw status(Status.Code.RESOURCE_EXHAUSTED, "too many waiting calls");
        };
        int before = f.calls("Next");
        e = thrown(() -> c.next(7));
        assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.getCode());
        assertEquals(before + 1, f.calls("Next"));

        // The caller's interrupt ends the loop with CANCELLED.
        f.next = req -> {
          throw status(Status.Code.UNAVAILABLE, "no lease");
        };
        AtomicReference<SeqsvrException> got = new AtomicReference<>();
        AtomicReference<Boolean> flag = new AtomicReference<>();
        int now = f.calls("Next");
        Thread t = new Thread(() -> {
          got.set(thrown(() -> c.next(7, Duration.ofSeconds(20))));
          flag.set(Thread.currentThread().isInterrupted());
        });
        t.start();
        FakeAlloc.eventually("attempts", () -> f.calls("Next") > now);
        t.interrupt();
        t.join(10_000);
        assertEquals(Status.Code.CANCELLED, got.get().getCode());
        assertTrue("the interrupt flag is kept", flag.get());

        // So does a cancel of the caller's gRPC Context.
        Context.CancellableContext ctx = Context.current().withCancellation();
        int then = f.calls("Next");
        Thread u = new Thread(() -> ctx.run(
            () -> got.set(thrown(() -> c.next(7, Duration.ofSeconds(20))))));
        u.start();
        FakeAlloc.eventually("attempts", () -> f.calls("Next") > then);
        ctx.cancel(null);
        u.join(10_000);
        assertEquals(Status.Code.CANCELLED, got.get().getCode());
      }
    }
  }

  @Test
  public void aNotOwnerLoopEndsWithinTheDeadline() throws Exception {
    try (FakeAlloc a = new FakeAlloc(); FakeAlloc b = new FakeAlloc()) {
      AtomicLong version = new AtomicLong(1);
      a.next = req -> {
        throw notOwner(table(0, version.incrementAndGet(), 0, 100, b.addr));
      };
      b.next = req -> {
        throw notOwner(table(0, version.incrementAndGet(), 0, 100, a.addr));
      };
      a.table = table(0, 1, 0, 100, a.addr);
      try (SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(true), a.addr)) {
        // 2 s: the loop stops once less than a back-off and an attempt are left, half a second
        // before the deadline at the capped back-off, so a loaded machine cannot push it past.
        Deadline deadline = Deadline.after(2, TimeUnit.SECONDS);
        SeqsvrException e = thrown(() -> c.next(1, deadline));
        assertFalse(deadline.isExpired());
        assertEquals(Status.Code.FAILED_PRECONDITION, e.getCode());
        SeqsvrClient.Stats s = c.stats();
        assertTrue(s.toString(), s.retries > 0 && s.redirects > 0
            && s.redirects <= RetryPolicy.STANDARD.redirectsMax * (s.retries + 1));
      }
    }
  }

  @Test
  public void deadlinesAreHonoured() throws Exception {
    try (FakeAlloc f = new FakeAlloc()) {
      f.table = table(0, 1, 0, 100, f.addr);
      CountDownLatch never = new CountDownLatch(1);
      f.next = req -> {
        never.await(20, TimeUnit.SECONDS);
        return NextResponse.newBuilder().setSeq(1).build();
      };
      try (SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(true)
          .defaultTimeout(Duration.ofMillis(300)), f.addr)) {
        // The default timeout, a Deadline, a Duration and the current Context's deadline.
        assertEquals(Status.Code.DEADLINE_EXCEEDED, thrown(() -> c.next(1)).getCode());
        Deadline d = Deadline.after(200, TimeUnit.MILLISECONDS);
        assertEquals(Status.Code.DEADLINE_EXCEEDED, thrown(() -> c.next(1, d)).getCode());
        assertEquals(Status.Code.DEADLINE_EXCEEDED,
            thrown(() -> c.next(1, Duration.ofMillis(200))).getCode());
        Context.CancellableContext ctx = Context.current()
            .withDeadlineAfter(100, TimeUnit.MILLISECONDS, java.util.concurrent.Executors
                .newSingleThreadScheduledExecutor(r -> {
                  Thread t = new Thread(r);
                  t.setDaemon(true);
                  return t;
                }));
        // Bounded by the context's 100 ms, not a client's 20 s default (the 10 s bound only
        // tells the two apart, whatever the machine's load).
        try (SeqsvrClient slow = plaintext(ClientOptions.builder().disableCoalescing(true)
            .defaultTimeout(Duration.ofSeconds(20)), f.addr)) {
          long start = System.nanoTime();
          SeqsvrException e = ctx.call(() -> thrown(() -> slow.next(1)));
          ctx.cancel(null);
          assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getCode());
          assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(10));
        }
      } finally {
        never.countDown();
      }
    }
  }

  @Test
  public void nextBatchKeepsOrderAndRegroupsAfterAHandOver() throws Exception {
    try (FakeAlloc a = new FakeAlloc(); FakeAlloc b = new FakeAlloc()) {
      FakeAlloc.Counter n = new FakeAlloc.Counter();
      RouteTable v2 = table(0, 2, 0, 1, a.addr, 1, 10, b.addr);
      FakeAlloc.Handler<seqsvr.v1.Seq.NextBatchRequest, NextBatchResponse> serveA = req -> {
        for (long uid : req.getUidsList()) {
          if (uid >= 10) {
            throw notOwner(v2);
          }
        }
        NextBatchResponse.Builder out = NextBatchResponse.newBuilder();
        req.getUidsList().forEach(uid -> out.addSeqs(n.next(uid)));
        return out.build();
      };
      a.nextBatch = serveA;
      b.nextBatch = req -> {
        for (long uid : req.getUidsList()) {
          if (uid < 10) {
            throw notOwner(v2);
          }
        }
        NextBatchResponse.Builder out = NextBatchResponse.newBuilder();
        req.getUidsList().forEach(uid -> out.addSeqs(n.next(uid)));
        return out.build();
      };
      a.table = table(0, 1, 0, 10, a.addr); // a still thinks it owns everything
      try (SeqsvrClient c = plaintext(ClientOptions.builder(), a.addr)) {
        long[] got = c.nextBatch(15, 3, 15, 4, 3, 20);
        assertArrayEquals(new long[] {1, 1, 2, 1, 2, 1}, got);
        assertEquals(2, c.routeTables().get(0).getVersion());
        assertEquals(Status.Code.INVALID_ARGUMENT, thrown(() -> c.nextBatch()).getCode());
        SeqsvrException e = thrown(() -> c.nextBatch(1, 5000));
        assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
        assertTrue(e.getDescription(), e.getDescription().contains("outside every set"));
        assertEquals(Status.Code.INVALID_ARGUMENT, thrown(() -> c.next(5000)).getCode());
        // A final code from one part fails the batch.
        b.nextBatch = req -> {
          throw status(Status.Code.RESOURCE_EXHAUSTED, "shed");
        };
        assertEquals(Status.Code.RESOURCE_EXHAUSTED, thrown(() -> c.nextBatch(3, 15)).getCode());
      }
    }
  }

  @Test
  public void noTransportIsRefused() {
    SeqsvrException e = thrown(() -> SeqsvrClient.connect(
        ClientOptions.builder().seeds("127.0.0.1:1").build()));
    assertEquals(Status.Code.FAILED_PRECONDITION, e.getCode());
    assertFalse(e.getHint().isEmpty());
    assertEquals(Status.Code.INVALID_ARGUMENT,
        thrown(() -> SeqsvrClient.connect(ClientOptions.builder().plaintext(true).build()))
            .getCode());
  }

  @Test
  public void connectFailsWithinItsTimeoutWhenNoSeedAnswers() throws Exception {
    try (FakeAlloc f = new FakeAlloc()) { // no table: GetRouteTable answers UNAVAILABLE
      long start = System.nanoTime();
      SeqsvrException e = thrown(() -> SeqsvrClient.connect(
          ClientOptions.builder().seeds(f.addr).plaintext(true).build(), Duration.ofSeconds(2)));
      assertEquals(Status.Code.UNAVAILABLE, e.getCode());
      assertTrue(e.getDescription(), e.getDescription().contains("no route table yet"));
      assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(4));
      assertTrue(f.calls("GetRouteTable") >= 2);
    }
    try {
      SeqsvrClient.connect(ClientOptions.builder().seeds("127.0.0.1:1").plaintext(true).build(),
          Duration.ofMillis(200));
      fail("connected to nothing");
    } catch (SeqsvrException e) {
      assertEquals(Status.Code.UNAVAILABLE, e.getCode());
    }
  }

  /**
   * The owner dies (its port refuses connections) and the section is handed over: the call
   * backs off, learns the new table from a seed and succeeds at the new owner within its
   * deadline.
   */
  @Test
  public void aKilledOwnerIsLeftForTheNewOne() throws Exception {
    try (FakeAlloc b = new FakeAlloc()) {
      FakeAlloc a = new FakeAlloc();
      a.table = table(0, 1, 0, 100, a.addr);
      b.table = a.table;
      a.next = req -> NextResponse.newBuilder().setSeq(1).build();
      b.next = req -> NextResponse.newBuilder().setSeq(2).build();
      try (SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(true), a.addr,
          b.addr)) {
        assertEquals(1, c.next(5));
        a.close(); // a kill: connections refused from now on
        b.table = table(0, 2, 0, 100, b.addr); // the hand-over
        assertEquals(2, c.next(5, Duration.ofSeconds(5)));
        assertEquals(2, c.routeTables().get(0).getVersion());
        assertTrue(c.stats().retries >= 1);
      }
    }
  }

  /**
   * The owner dies and comes back on the same address with no hand-over: the client reconnects
   * at once (its channel's reconnect back-off is reset on UNAVAILABLE) and the call succeeds
   * within its deadline.
   */
  @Test
  public void aRestartedOwnerIsReconnectedAtOnce() throws Exception {
    FakeAlloc a = new FakeAlloc();
    int port = a.server.getPort();
    a.table = table(0, 1, 0, 100, a.addr);
    a.next = req -> NextResponse.newBuilder().setSeq(1).build();
    try (SeqsvrClient c = plaintext(ClientOptions.builder().disableCoalescing(true), a.addr)) {
      assertEquals(1, c.next(5));
      a.close();
      // Calls meanwhile fail UNAVAILABLE (retried until their deadline).
      assertEquals(Status.Code.UNAVAILABLE,
          thrown(() -> c.next(5, Duration.ofMillis(6000))).getCode());
      try (FakeAlloc again = new FakeAlloc(null, port)) {
        again.table = a.table;
        again.next = req -> NextResponse.newBuilder().setSeq(7).build();
        assertEquals(7, c.next(5, Duration.ofMillis(1500)));
      }
    }
  }
}
