package io.seqsvr;

import static io.seqsvr.FakeAlloc.eventually;
import static io.seqsvr.FakeAlloc.plaintext;
import static io.seqsvr.FakeAlloc.status;
import static io.seqsvr.FakeAlloc.table;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Status;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.Test;
import seqsvr.v1.Seq.NextBatchResponse;
import seqsvr.v1.Seq.NextResponse;

/** Coalescing of concurrent next calls into NextBatch RPCs (the Go SDK's coalesce.go). */
public class CoalescingTest {
  @Test
  public void coalescedCallsKeepTheirOrderAndGetTheirOwnValues() throws Exception {
    try (FakeAlloc f = new FakeAlloc()) {
      f.table = table(0, 1, 0, 100, f.addr);
      List<List<Long>> batches = Collections.synchronizedList(new ArrayList<>());
      CountDownLatch release = new CountDownLatch(1);
      FakeAlloc.Counter n = new FakeAlloc.Counter();
      f.nextBatch = req -> {
        if (!req.getIndependent()) {
          throw status(Status.Code.INTERNAL, "a coalesced batch has independent entries");
        }
        batches.add(req.getUidsList());
        if (batches.size() == 1) {
          release.await(10, TimeUnit.SECONDS);
        }
        NextBatchResponse.Builder out = NextBatchResponse.newBuilder();
        for (int i = 0; i < req.getUidsCount(); i++) {
          // the entry's index, to check who got what
          out.addSeqs(n.next(req.getUids(i)) * 1000 + i);
        }
        return out.build();
      };
      ExecutorService pool = Executors.newCachedThreadPool();
      try (SeqsvrClient c = plaintext(ClientOptions.builder().maxInFlight(1), f.addr)) {
        Coalescer q = c.peer(f.addr).coalescer;
        List<Future<long[]>> results = new ArrayList<>();
        results.add(pool.submit(() -> new long[] {0, c.next(0)})); // the first batch, held
        eventually("the first batch at the fake", () -> batches.size() == 1);
        // Queued one at a time, so the queue order is known: 1, 2, 3, 1, 4, 1.
        long[] order = {1, 2, 3, 1, 4, 1};
        for (int i = 0; i < order.length; i++) {
          long uid = order[i];
          results.add(pool.submit(() -> new long[] {uid, c.next(uid)}));
          int want = i + 1;
          eventually("queued", () -> q.queued() == want);
        }
        release.countDown();
        Map<Long, List<Long>> byUid = new TreeMap<>();
        for (Future<long[]> r : results) {
          long[] got = r.get(10, TimeUnit.SECONDS);
          byUid.computeIfAbsent(got[0], k -> new ArrayList<>()).add(got[1]);
        }
        assertEquals(2, batches.size());
        assertEquals(List.of(1L, 2L, 3L, 1L, 4L, 1L), batches.get(1));
        for (List<Long> v : byUid.values()) {
          Collections.sort(v);
        }
        // Entry i of the second batch answered i (+ 1000 × the uid's count): each caller has
        // the value of its own entry.
        assertEquals("{0=[1000], 1=[1000, 2003, 3005], 2=[1001], 3=[1002], 4=[1004]}",
            byUid.toString());
        assertEquals(2, c.stats().coalescedRpcs);
        assertEquals(0, f.calls("Next"));
      } finally {
        pool.shutdownNow();
      }
    }
  }

  @Test
  public void aFullQueueRefusesAtOnceAndAZeroIsAskedAlone() throws Exception {
    try (FakeAlloc f = new FakeAlloc()) {
      f.table = table(0, 1, 0, 100, f.addr);
      CountDownLatch release = new CountDownLatch(1);
      AtomicInteger batches = new AtomicInteger();
      FakeAlloc.Counter n = new FakeAlloc.Counter();
      f.nextBatch = req -> {
        if (batches.incrementAndGet() == 1) {
          release.await(10, TimeUnit.SECONDS);
        }
        NextBatchResponse.Builder out = NextBatchResponse.newBuilder();
        req.getUidsList().forEach(uid -> out.addSeqs(0)); // none served at once
        return out.build();
      };
      f.next = req -> NextResponse.newBuilder().setSeq(n.next(req.getUid())).build();
      ExecutorService pool = Executors.newCachedThreadPool();
      try (SeqsvrClient c = plaintext(ClientOptions.builder().maxInFlight(1).maxQueued(2),
          f.addr)) {
        Coalescer q = c.peer(f.addr).coalescer;
        List<Future<Long>> calls = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
          calls.add(pool.submit(() -> c.next(5)));
          if (i == 0) {
            eventually("the first batch sent", () -> batches.get() == 1);
          } else {
            int want = i;
            eventually("queued", () -> q.queued() == want);
          }
        }
        try {
          c.next(5);
          fail("a full queue took a call");
        } catch (SeqsvrException e) {
          assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.getCode());
          assertFalse(e.getHint().isEmpty());
        }
        release.countDown();
        List<Long> got = new ArrayList<>();
        for (Future<Long> call : calls) {
          got.add(call.get(10, TimeUnit.SECONDS));
        }
        Collections.sort(got);
        assertEquals(List.of(1L, 2L, 3L), got); // each 0 was asked again alone
        assertEquals(3, f.calls("Next"));
      } finally {
        pool.shutdownNow();
      }
    }
  }

  @Test
  public void atMostMaxInFlightRpcsPerAllocSvr() throws Exception {
    try (FakeAlloc f = new FakeAlloc()) {
      f.table = table(0, 1, 0, 100, f.addr);
      CountDownLatch release = new CountDownLatch(1);
      AtomicInteger running = new AtomicInteger();
      AtomicInteger most = new AtomicInteger();
      AtomicInteger uidsSeen = new AtomicInteger();
      FakeAlloc.Counter n = new FakeAlloc.Counter();
      f.nextBatch = req -> {
        int now = running.incrementAndGet();
        most.accumulateAndGet(now, Math::max);
        uidsSeen.addAndGet(req.getUidsCount());
        try {
          release.await(10, TimeUnit.SECONDS);
          NextBatchResponse.Builder out = NextBatchResponse.newBuilder();
          req.getUidsList().forEach(uid -> out.addSeqs(n.next(uid)));
          return out.build();
        } finally {
          running.decrementAndGet();
        }
      };
      int callers = 40;
      ExecutorService pool = Executors.newFixedThreadPool(callers);
      try (SeqsvrClient c = plaintext(ClientOptions.builder().maxInFlight(2).maxCoalesced(16),
          f.addr)) {
        Coalescer q = c.peer(f.addr).coalescer;
        List<Future<Long>> calls = new ArrayList<>();
        for (int i = 0; i < callers; i++) {
          calls.add(pool.submit(() -> c.next(9)));
        }
        // Two RPCs held at the fake, the other callers queued behind them.
        eventually("two RPCs in flight and the rest queued",
            () -> running.get() == 2 && q.queued() + uidsSeen.get() == callers);
        assertEquals(2, q.inFlight());
        release.countDown();
        List<Long> got = new ArrayList<>();
        for (Future<Long> call : calls) {
          got.add(call.get(10, TimeUnit.SECONDS));
        }
        Collections.sort(got);
        for (int i = 0; i < callers; i++) {
          assertEquals(i + 1, (long) got.get(i)); // every value once
        }
        assertEquals(2, most.get());
        assertTrue(c.stats().coalescedRpcs >= 3); // 40 calls, at most 16 per RPC
        assertTrue(c.stats().coalescedRpcs < callers);
      } finally {
        pool.shutdownNow();
      }
    }
  }
}
