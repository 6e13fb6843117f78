package io.seqsvr;

import io.grpc.Status;
import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How the SDK retries: the Rust and Go SDKs' policy, rule for rule.
 *
 * <ul>
 *   <li>Back-off: exponential from {@code min}, doubling, capped at {@code max}, with equal
 *       jitter: each wait is drawn uniformly from [base/2, base]. The jitter keeps clients that
 *       failed together from retrying in lockstep; the floor of base/2 bounds how often one
 *       client retries.
 *   <li>Redirects (a NOT_OWNER answer with a newer route table) are followed at once, at most
 *       {@code redirectsMax} in a row; then the loop backs off like any other retry (after which
 *       the budget is full again).
 *   <li>Deadlines: a wait is slept only if the call's deadline leaves room for the longest it can
 *       be and for an attempt after it (base + min); otherwise the call throws its last error at
 *       once instead of sleeping into the deadline.
 *   <li>What is retried: {@link #retryable}.
 * </ul>
 */
public final class RetryPolicy {
  /** 20 ms doubling to 500 ms (jittered to 10–20 ms, 20–40 ms, ... 250–500 ms), 4 redirects. */
  public static final RetryPolicy STANDARD =
      new RetryPolicy(Duration.ofMillis(20), Duration.ofMillis(500), 4);

  final long minNanos;
  final long maxNanos;
  final int redirectsMax;

  /** A policy: first wait {@code min}, doubling up to {@code max}, redirects per round. */
  public RetryPolicy(Duration min, Duration max, int redirectsMax) {
    this.minNanos = min.toNanos();
    this.maxNanos = max.toNanos();
    this.redirectsMax = redirectsMax;
    if (minNanos <= 0 || maxNanos < minNanos || redirectsMax < 0) {
      throw new IllegalArgumentException("need 0 < min <= max and redirectsMax >= 0");
    }
  }

  /**
   * Whether a failed attempt is worth another one within the call's deadline: UNAVAILABLE (the
   * canonical "try again": hand-over, no lease, no quorum, a server down or refusing
   * connections), DEADLINE_EXCEEDED (one attempt's time ran out; the call's deadline is the
   * loop's), CANCELLED (from below: a connection closed under a call; the caller's own
   * interrupt ends the loop before this is asked) and UNKNOWN (transport failures gRPC cannot
   * classify). Every other code is the server's final answer; in particular RESOURCE_EXHAUSTED
   * (load shedding, or a limit) goes back to the caller at once: retrying it would put the load
   * straight back.
   */
  public static boolean retryable(Status.Code code) {
    switch (code) {
      case UNAVAILABLE:
      case DEADLINE_EXCEEDED:
      case CANCELLED:
      case UNKNOWN:
        return true;
      default:
        return false;
    }
  }

  /** A fresh back-off jittered from a per-thread random source. */
  public Backoff newBackoff() {
    return seededBackoff(ThreadLocalRandom.current().nextLong());
  }

  /** A back-off whose jitter is drawn from {@code seed}: one seed draws the same waits. */
  public Backoff seededBackoff(long seed) {
    return new Backoff(this, seed);
  }

  /** The state of one retry loop: the next wait and the redirects left. Not thread-safe. */
  public static final class Backoff {
    private final RetryPolicy policy;
    private final SplittableRandom rng;
    private long base;
    private int redirects;

    Backoff(RetryPolicy policy, long seed) {
      this.policy = policy;
      this.rng = new SplittableRandom(seed);
      this.base = policy.minNanos;
    }

    /** The next wait before jitter (the longest the next wait can be), in nanoseconds. */
    public long baseNanos() {
      return base;
    }

    /**
     * Draws the next wait (uniform in [base/2, base], nanoseconds), doubles the base up to max
     * and starts a new round (the redirect budget is full again).
     */
    public long nextDelayNanos() {
      long half = base / 2;
      long delay = half + rng.nextLong(base - half + 1);
      long next = Math.min(base * 2, policy.maxNanos);
      base = Math.max(next, policy.minNanos);
      redirects = 0;
      return delay;
    }

    /**
     * The next wait if the deadline {@code untilNanos} (System.nanoTime) leaves room for it and
     * an attempt after it (more than base + min left at {@code nowNanos}); -1 when there is no
     * room (nothing is drawn).
     */
    public long delayBefore(long untilNanos, long nowNanos) {
      if (untilNanos - nowNanos <= base + policy.minNanos) {
        return -1;
      }
      return nextDelayNanos();
    }

    /**
     * Sleeps the next wait if the deadline leaves room; false: no room. An interrupt while
     * sleeping is kept on the thread and answers false.
     */
    public boolean await(long untilNanos) {
      long delay = delayBefore(untilNanos, System.nanoTime());
      if (delay < 0) {
        return false;
      }
      try {
        Thread.sleep(delay / 1_000_000, (int) (delay % 1_000_000));
        return true;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }

    /** Takes one redirect from this round's budget: true = follow it at once. */
    public boolean redirect() {
      if (redirects < policy.redirectsMax) {
        redirects++;
        return true;
      }
      return false;
    }

    /** Starts again from min (for loops that outlive one call). */
    public void reset() {
      base = policy.minNanos;
      redirects = 0;
    }
  }
}
