package io.seqsvr;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;

import io.grpc.Status;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.Test;

/** The retry policy, rule for rule (the Go SDK's retry_test.go). */
public class RetryPolicyTest {
  static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

  @Test
  public void theBackoffGrowsByDoublingAndIsCapped() {
    RetryPolicy.Backoff b = RetryPolicy.STANDARD.seededBackoff(1);
    long[] bases = {20, 40, 80, 160, 320, 500, 500};
    for (long base : bases) {
      assertEquals(base * MS, b.baseNanos());
      b.nextDelayNanos();
    }
    b.reset();
    assertEquals(20 * MS, b.baseNanos());
  }

  @Test
  public void theJitterStaysInBoundsAndDiffers() {
    List<Long> first = new ArrayList<>();
    for (int seed = 0; seed < 50; seed++) {
      RetryPolicy.Backoff b = RetryPolicy.STANDARD.seededBackoff(seed);
      for (int i = 0; i < 8; i++) {
        long base = b.baseNanos();
        long d = b.nextDelayNanos();
        assertTrue(d >= base / 2 && d <= base);
        if (i == 0) {
          first.add(d);
        }
      }
    }
    assertTrue("different seeds draw different waits", first.stream().distinct().count() > 10);
    RetryPolicy.Backoff x = RetryPolicy.STANDARD.seededBackoff(7);
    RetryPolicy.Backoff y = RetryPolicy.STANDARD.seededBackoff(7);
    for (int i = 0; i < 8; i++) {
      assertEquals(x.nextDelayNanos(), y.nextDelayNanos());
    }
    assertNotEquals(RetryPolicy.STANDARD.newBackoff().nextDelayNanos(), -1);
  }

  @Test
  public void noWaitEndsPastTheDeadline() {
    RetryPolicy.Backoff b = RetryPolicy.STANDARD.seededBackoff(3);
    long now = 1_000_000_000L;
    // 20 ms base + 20 ms for an attempt after it: with exactly 40 ms left there is no room.
    assertEquals(-1, b.delayBefore(now + 40 * MS, now));
    assertEquals(20 * MS, b.baseNanos()); // nothing drawn
    long d = b.delayBefore(now + 41 * MS, now);
    assertTrue(d >= 10 * MS && d <= 20 * MS);
    // Wherever a loop stands, the wait it sleeps ends before the deadline with room for min.
    for (long left = 0; left < 2000 * MS; left += 7 * MS) {
      RetryPolicy.Backoff c = RetryPolicy.STANDARD.seededBackoff(left);
      long at = now;
      long until = now + left;
      while (true) {
        long w = c.delayBefore(until, at);
        if (w < 0) {
          break;
        }
        at += w;
        assertTrue(until - at > RetryPolicy.STANDARD.minNanos);
      }
    }
  }

  @Test
  public void aWaitingLoopEndsBeforeItsDeadline() {
    RetryPolicy.Backoff b = RetryPolicy.STANDARD.newBackoff();
    long until = System.nanoTime() + 150 * MS;
    int waits = 0;
    while (b.await(until)) {
      waits++;
    }
    assertTrue(System.nanoTime() < until);
    assertTrue(waits >= 1);
  }

  @Test
  public void theRedirectBudgetIsEnforcedPerRound() {
    RetryPolicy.Backoff b = RetryPolicy.STANDARD.seededBackoff(5);
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < RetryPolicy.STANDARD.redirectsMax; i++) {
        assertTrue(b.redirect());
      }
      assertFalse(b.redirect());
      b.nextDelayNanos(); // a back-off starts a new round
    }
  }

  @Test
  public void theRetryableCodes() {
    for (Status.Code code : Status.Code.values()) {
      boolean want = code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED
          || code == Status.Code.CANCELLED || code == Status.Code.UNKNOWN;
      assertEquals(code.toString(), want, RetryPolicy.retryable(code));
    }
  }
}
