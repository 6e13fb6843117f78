package io.seqsvr.examples.bench;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.Test;

/** The load generator's Zipf sampler, command line and JSON (the Go driver's main_test.go). */
public class BenchTest {
  // Zipf s = 1 draws every rank in [0, n), favours the low ones as 1/k does (rank 0 about
  // 1/H_n of the draws: 8.27% for n = 100,000) and reaches the high ones too.
  @Test
  public void zipfStaysInRangeAndIsSkewed() {
    final int n = 100_000;
    Bench.Zipf z = new Bench.Zipf(n);
    SplittableRandom rng = new SplittableRandom(1);
    final int draws = 200_000;
    int zero = 0;
    int low = 0;
    int high = 0;
    for (int i = 0; i < draws; i++) {
      long r = z.rank0(rng);
      assertTrue("rank " + r + " out of [0, " + n + ")", r >= 0 && r < n);
      if (r == 0) {
        zero++;
      } else if (r < 10) {
        low++;
      } else if (r >= n / 2) {
        high++;
      }
    }
    // P(rank 0) = 1/H_n = 0.0827 (H_n = 12.090); P(1..9) = (H_10 - 1)/H_n = 0.1595;
    // P(>= n/2) ≈ ln 2 / H_n = 0.0573.
    assertShare("rank 0", zero, draws, 0.0827, 0.004);
    assertShare("ranks 1-9", low, draws, 0.1595, 0.004);
    assertShare("upper half", high, draws, 0.0573, 0.004);
  }

  private static void assertShare(String what, int got, int draws, double want, double tol) {
    double share = (double) got / draws;
    assertTrue(String.format("%s: %.4f of the draws, want %.4f ± %.3f", what, share, want, tol),
        share >= want - tol && share <= want + tol);
  }

  @Test
  public void searchIsGosSortSearchFloat64s() {
    double[] a = {0.1, 0.5, 0.5, 1.0};
    assertEquals(0, Bench.Zipf.searchFloat64s(a, 0.0));
    assertEquals(0, Bench.Zipf.searchFloat64s(a, 0.1));
    assertEquals(1, Bench.Zipf.searchFloat64s(a, 0.3));
    assertEquals(1, Bench.Zipf.searchFloat64s(a, 0.5)); // the first of equal ones
    assertEquals(3, Bench.Zipf.searchFloat64s(a, 0.99));
    assertEquals(4, Bench.Zipf.searchFloat64s(a, 1.5));
    Bench.Zipf one = new Bench.Zipf(1);
    assertEquals(0, one.rank0(new SplittableRandom(5)));
  }

  @Test
  public void defaultsAreTheGoDriversOnes() throws Exception {
    Bench.Args a = Bench.parse(new String[0]);
    assertEquals("seqsvr", a.target);
    assertEquals("data/local/cluster.toml", a.config);
    assertEquals("data/local/certs/client.pem", a.cert);
    assertEquals("data/local/certs/client.key", a.key);
    assertEquals("redis://127.0.0.1:6379", a.redisUrl);
    assertEquals(64, a.concurrency);
    assertEquals(10.0, a.seconds, 0);
    assertEquals(100_000, a.uids);
    assertEquals(0, a.uidBase);
    assertEquals("uniform", a.dist);
    assertFalse(a.noCoalesce);
    assertEquals(Duration.ofSeconds(3), a.timeout);
  }

  @Test
  public void flagsParseAsGosFlagPackage() throws Exception {
    Bench.Args a = Bench.parse(new String[] {"--target", "redis", "-redis-url=redis://127.0.0.1:6391",
        "--concurrency=8", "--seconds", "2.5", "--uids", "100_000", "--uid-base", "3100000",
        "--dist", "zipf", "--no-coalesce", "--timeout", "1m1.5s", "--config", "c.toml",
        "--cert", "c.pem", "--key", "c.key", "positional", "--uids", "7"});
    assertEquals("redis", a.target);
    assertEquals("redis://127.0.0.1:6391", a.redisUrl);
    assertEquals(8, a.concurrency);
    assertEquals(2.5, a.seconds, 0);
    assertEquals(100_000, a.uids); // parsing stopped at "positional"
    assertEquals(3_100_000, a.uidBase);
    assertEquals("zipf", a.dist);
    assertTrue(a.noCoalesce);
    assertEquals(Duration.ofMillis(61_500), a.timeout);
    assertEquals("c.toml", a.config);
    assertEquals("c.pem", a.cert);
    assertEquals("c.key", a.key);
    assertFalse(Bench.parse(new String[] {"--no-coalesce=false"}).noCoalesce);
    assertTrue(Bench.parse(new String[] {"-h"}).help);
    assertEquals(-1L, Bench.parse(new String[] {"--uid-base", "18446744073709551615"}).uidBase);
  }

  @Test
  public void badFlagsAreRefused() {
    String[][] bad = {
      {"--bogus", "1"}, {"--concurrency"}, {"--concurrency", "x"}, {"--uids", "-1"},
      {"--uids", "18446744073709551616"}, {"--seconds", "ten"}, {"--seconds", "1d"},
      {"--timeout", "3"}, {"--timeout", "3 s"}, {"--timeout", "3fortnights"},
      {"--no-coalesce=maybe"}, {"---target", "redis"},
    };
    for (String[] args : bad) {
      try {
        Bench.parse(args);
        fail("accepted " + String.join(" ", args));
      } catch (Bench.UsageException expected) {
        // refused
      }
    }
  }

  @Test
  public void goDurations() {
    assertEquals(Duration.ZERO, Bench.parseGoDuration("0"));
    assertEquals(Duration.ofSeconds(3), Bench.parseGoDuration("3s"));
    assertEquals(Duration.ofMillis(500), Bench.parseGoDuration("500ms"));
    assertEquals(Duration.ofMillis(500), Bench.parseGoDuration(".5s"));
    assertEquals(Duration.ofNanos(1_500), Bench.parseGoDuration("1.5us"));
    assertEquals(Duration.ofNanos(2_000), Bench.parseGoDuration("2µs"));
    assertEquals(Duration.ofMinutes(62), Bench.parseGoDuration("1h2m"));
    assertEquals(Duration.ofSeconds(-2), Bench.parseGoDuration("-2s"));
  }

  @Test
  public void theJsonLineIsGoLike() {
    java.util.Map<String, Object> m = new java.util.LinkedHashMap<>();
    m.put("sdk", "java");
    m.put("coalesce", true);
    m.put("uids", new Bench.Unsigned(-1L));
    m.put("calls", 12L);
    m.put("calls_per_s", 100000.0);
    m.put("cpu", 12.5);
    m.put("big", 1.2345678e7);
    m.put("first_error", "a \"quoted\"\nline\\");
    assertEquals("{\"sdk\":\"java\",\"coalesce\":true,\"uids\":18446744073709551615,\"calls\":12,"
        + "\"calls_per_s\":100000,\"cpu\":12.5,\"big\":12345678,"
        + "\"first_error\":\"a \\\"quoted\\\"\\nline\\\\\"}", Bench.toJson(m));
  }

  @Test
  public void quantilesAreTheGoDriversIndex() {
    long[] sorted = new long[1000];
    for (int i = 0; i < sorted.length; i++) {
      sorted[i] = (i + 1) * 1000L + 999; // ns; truncated to µs
    }
    assertEquals(500, Bench.quantileUs(sorted, 0.5)); // all[int(0.5 * 999)] = all[499]
    assertEquals(990, Bench.quantileUs(sorted, 0.99));
    assertEquals(999, Bench.quantileUs(sorted, 0.999));
    assertEquals(1000, Bench.quantileUs(sorted, 1));
    assertEquals(0, Bench.quantileUs(new long[0], 0.5));
  }

  @Test
  public void redisUrls() {
    Bench.RedisUrl u = new Bench.RedisUrl("redis://127.0.0.1:6391");
    assertEquals("127.0.0.1", u.host);
    assertEquals(6391, u.port);
    assertEquals(null, u.password);
    assertEquals(0, u.db);
    Bench.RedisUrl v = new Bench.RedisUrl("redis://:s%40cret@localhost/2");
    assertEquals(6379, v.port);
    assertEquals("s@cret", v.password);
    assertEquals(null, v.user);
    assertEquals(2, v.db);
  }

  /**
   * The shared pipeline hands each caller the reply to its own command: callers on their own
   * uids see 1, 2, 3, ... in order, and an error reply fails only the call it answers (a fake
   * RESP server on loopback, INCR only; "seq:666" answers -ERR boom).
   */
  @Test
  public void thePipelineMatchesRepliesToCallers() throws Exception {
    try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      Thread server = new Thread(() -> {
        try (Socket s = ss.accept()) {
          BufferedReader in = new BufferedReader(
              new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII));
          OutputStream out = new BufferedOutputStream(s.getOutputStream());
          Map<String, Long> counts = new HashMap<>();
          while (true) {
            String head = in.readLine();
            if (head == null) {
              return;
            }
            in.readLine(); // $4
            String cmd = in.readLine();
            in.readLine(); // $len
            String key = in.readLine();
            if (!head.equals("*2") || !cmd.equals("INCR")) {
              out.write("-ERR unexpected\r\n".getBytes(StandardCharsets.US_ASCII));
            } else if (key.equals("seq:666")) {
              out.write("-ERR boom\r\n".getBytes(StandardCharsets.US_ASCII));
            } else {
              long v = counts.merge(key, 1L, Long::sum);
              out.write((":" + v + "\r\n").getBytes(StandardCharsets.US_ASCII));
            }
            if (!in.ready()) {
              out.flush();
            }
          }
        } catch (Exception e) {
          // the client closed
        }
      });
      server.setDaemon(true);
      server.start();
      final int callers = 16;
      final int calls = 500;
      try (Bench.RedisPipeline p = new Bench.RedisPipeline(
          new Bench.RedisUrl("redis://127.0.0.1:" + ss.getLocalPort()), 4 * callers)) {
        List<String> wrong = new CopyOnWriteArrayList<>();
        Thread[] ts = new Thread[callers];
        for (int w = 0; w < callers; w++) {
          final long uid = 1000 + w;
          ts[w] = new Thread(() -> {
            try {
              for (long want = 1; want <= calls; want++) {
                long got = p.incr(uid, Duration.ofSeconds(5));
                if (got != want) {
                  wrong.add("uid " + uid + ": got " + got + ", want " + want);
                  return;
                }
              }
            } catch (Exception e) {
              wrong.add("uid " + uid + ": " + e);
            }
          });
          ts[w].start();
        }
        for (Thread t : ts) {
          t.join();
        }
        assertTrue(wrong.toString(), wrong.isEmpty());
        try {
          p.incr(666, Duration.ofSeconds(5));
          fail("no error for seq:666");
        } catch (Bench.RedisError e) {
          assertEquals("ERR boom", e.getMessage());
        }
        assertEquals(calls + 1, p.incr(1000, Duration.ofSeconds(5)));
      }
    }
  }
}
