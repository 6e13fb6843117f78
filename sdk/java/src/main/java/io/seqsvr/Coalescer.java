package io.seqsvr;

import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import io.grpc.Context;
import io.grpc.Status;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import seqsvr.v1.Seq.NextBatchRequest;
import seqsvr.v1.Seq.NextBatchResponse;
import seqsvr.v1.SeqServiceGrpc;

/**
 * One AllocSvr's coalescing of concurrent {@code next} calls (the Go SDK's coalesce.go): a call
 * joins the AllocSvr's queue and waits on its CompletableFuture; whenever one of maxInFlight
 * slots is free, every call waiting (up to maxCoalesced) goes as one NextBatch with independent
 * entries, in queue order, while calls arriving meanwhile pile up for the next one. A full queue
 * (maxQueued) fails the call at once with RESOURCE_EXHAUSTED. No thread of its own: the batch
 * is sent by the call that found a slot free, or by the answer that freed one.
 */
final class Coalescer {
  /** A next call waiting for a coalesced RPC. */
  static final class Pending {
    final long uid;
    final long version;
    final long until;
    /** Its value (0: not served at once), or the RPC's error. */
    final CompletableFuture<Long> result = new CompletableFuture<>();
    /** The caller gave up (its attempt's time ran out, or it was interrupted). */
    volatile boolean abandoned;

    Pending(long uid, long version, long until) {
      this.uid = uid;
      this.version = version;
      this.until = until;
    }
  }

  private final SeqsvrClient client;
  private final SeqsvrClient.Peer peer;
  private final ArrayDeque<Pending> queue = new ArrayDeque<>();
  private int inFlight;
  private boolean closed;

  Coalescer(SeqsvrClient client, SeqsvrClient.Peer peer) {
    this.client = client;
    this.peer = peer;
  }

  /** Calls waiting now (for tests). */
  synchronized int queued() {
    return queue.size();
  }

  /** RPCs in flight now (for tests). */
  synchronized int inFlight() {
    return inFlight;
  }

  /**
   * Queues uid for the next coalesced RPC and waits for its value until {@code until}
   * (System.nanoTime); 0 = not served at once (the caller asks alone).
   */
  long next(long uid, long version, long until) {
    Pending call = new Pending(uid, version, until);
    synchronized (this) {
      if (closed) {
        throw SeqsvrException.of(Status.Code.CANCELLED, "", "the client is closed");
      }
      if (queue.size() >= client.opts.maxQueued) {
        throw SeqsvrException.of(Status.Code.RESOURCE_EXHAUSTED,
            "the AllocSvr answers slower than calls arrive: back off before retrying, or raise "
                + "maxQueued or maxInFlight",
            "%d calls already wait for a coalesced RPC to %s (maxQueued)",
            client.opts.maxQueued, peer.addr);
      }
      queue.add(call);
    }
    dispatch();
    try {
      return call.result.get(Math.max(until - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
    } catch (TimeoutException e) {
      call.abandoned = true;
      throw SeqsvrException.of(Status.Code.DEADLINE_EXCEEDED, "",
          "no answer from the coalesced RPC to %s within the attempt's time", peer.addr);
    } catch (InterruptedException e) {
      call.abandoned = true;
      Thread.currentThread().interrupt();
      throw SeqsvrException.of(Status.Code.CANCELLED, "", "the caller cancelled the call");
    } catch (ExecutionException e) {
      throw SeqsvrException.fromRpc(e.getCause());
    }
  }

  /** Sends batches while a slot is free and calls wait. */
  private void dispatch() {
    while (true) {
      List<Pending> batch = new ArrayList<>();
      synchronized (this) {
        if (closed || inFlight >= client.opts.maxInFlight || queue.isEmpty()) {
          return;
        }
        long now = System.nanoTime();
        while (batch.size() < client.opts.maxCoalesced && !queue.isEmpty()) {
          Pending call = queue.poll();
          if (!call.abandoned && call.until - now > 0) { // callers that gave up are left out
            batch.add(call);
          }
        }
        if (batch.isEmpty()) {
          continue;
        }
        inFlight++;
      }
      send(batch);
    }
  }

  /**
   * Sends one coalesced NextBatch and hands each caller its answer: its value (0: not served
   * at once), or the RPC's error for all of them. Its answer frees the slot.
   */
  private void send(List<Pending> batch) {
    client.stats.coalesced.incrementAndGet();
    long until = batch.get(0).until;
    long version = batch.get(0).version;
    NextBatchRequest.Builder req = NextBatchRequest.newBuilder().setIndependent(true);
    for (Pending call : batch) {
      req.addUids(call.uid);
      if (call.until - until > 0) {
        until = call.until;
      }
      if (Long.compareUnsigned(call.version, version) < 0) {
        version = call.version;
      }
    }
    req.setRouteVersion(version);
    long timeout = SeqsvrClient.attemptTimeout(until);
    if (timeout <= 0) {
      failAll(batch, SeqsvrException.of(Status.Code.DEADLINE_EXCEEDED, "",
          "the deadline passed before the batch was sent"));
      release();
      return;
    }
    ListenableFuture<NextBatchResponse> f;
    try {
      // Under the root Context: the batch carries many callers, so it must not inherit the
      // deadline or cancellation of whichever caller's thread happens to send it.
      Context previous = Context.ROOT.attach();
      try {
        f = SeqsvrClient.rpc(peer, SeqServiceGrpc.getNextBatchMethod(), req.build(), timeout);
      } finally {
        Context.ROOT.detach(previous);
      }
    } catch (RuntimeException e) {
      failAll(batch, SeqsvrException.fromRpc(e));
      release();
      return;
    }
    f.addListener(() -> {
      try {
        NextBatchResponse r;
        try {
          r = f.get();
        } catch (InterruptedException | ExecutionException e) {
          failAll(batch, SeqsvrException.fromRpc(e));
          return;
        }
        if (r.getSeqsCount() != batch.size()) {
          failAll(batch, SeqsvrException.of(Status.Code.INTERNAL, "",
              "%s answered %d values for %d uids", peer.addr, r.getSeqsCount(), batch.size()));
          return;
        }
        if (r.hasRouteTable()) {
          client.install(r.getRouteTable());
        }
        for (int i = 0; i < batch.size(); i++) {
          batch.get(i).result.complete(r.getSeqs(i));
        }
      } finally {
        release();
      }
    }, MoreExecutors.directExecutor());
  }

  private void release() {
    synchronized (this) {
      inFlight--;
    }
    dispatch();
  }

  private static void failAll(List<Pending> batch, SeqsvrException e) {
    for (Pending call : batch) {
      call.result.completeExceptionally(e);
    }
  }

  /** Fails every queued call with CANCELLED (the client closed). */
  void close() {
    List<Pending> left;
    synchronized (this) {
      closed = true;
      left = new ArrayList<>(queue);
      queue.clear();
    }
    failAll(left, SeqsvrException.of(Status.Code.CANCELLED, "", "the client is closed"));
  }
}
