package io.seqsvr;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Status;
import io.seqsvr.conformance.Runner;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.AfterClass;
import org.junit.Assume;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * Live tests against a running cluster (-Dseqsvr.live=DIR: DIR/cluster.toml and
 * DIR/certs/client.pem/.key; `scripts/dev-cluster.sh up` or a shared cluster). They never start,
 * stop or move anything, and use only uids 3000000..3099999 (set 0) and
 * 2200000000..2200099999 (set 1).
 */
public class LiveTest {
  static final long SET0 = 3_000_000L;
  static final long SET1 = 2_200_000_000L;
  static Path dir;
  static ClusterFile cluster;
  static SeqsvrClient client;

  @BeforeClass
  public static void connect() {
    String live = System.getProperty("seqsvr.live");
    Assume.assumeTrue("-Dseqsvr.live=DIR names no running cluster", live != null);
    dir = Path.of(live);
    cluster = ClusterFile.load(dir.resolve("cluster.toml"));
    client = SeqsvrClient.connect(cluster.options(dir.resolve("certs/client.pem").toString(),
        dir.resolve("certs/client.key").toString()).build(), Duration.ofSeconds(10));
  }

  @AfterClass
  public static void close() {
    if (client != null) {
      client.close();
    }
  }

  private static SeqsvrException thrown(Runnable r) {
    try {
      r.run();
    } catch (SeqsvrException e) {
      return e;
    }
    throw new AssertionError("no SeqsvrException");
  }

  @Test
  public void routeTablesOfEverySet() {
    assertEquals(cluster.sets().size(), client.routeTables().size());
    for (ClusterFile.SetConfig s : cluster.sets()) {
      assertNotNull(SeqsvrClient.ownerAddr(client.tableFor(s.uidBegin), s.uidBegin));
    }
  }

  /** Concurrent callers: values strictly increase per caller and in real time per uid. */
  @Test
  public void concurrentCallersStrictlyIncrease() throws Exception {
    long[] uids = {SET0 + 1, SET0 + 2, SET0 + 99_999, SET1 + 1};
    int callers = 16;
    int calls = 60;
    long start = System.nanoTime();
    Map<Long, List<Runner.Point>> points = new HashMap<>();
    ExecutorService pool = Executors.newFixedThreadPool(callers);
    List<Future<String>> done = new ArrayList<>();
    for (int cl = 0; cl < callers; cl++) {
      int caller = cl;
      done.add(pool.submit(() -> {
        Map<Long, Long> own = new HashMap<>();
        for (int i = 0; i < calls; i++) {
          long uid = uids[(caller + i) % uids.length];
          long invoke = System.nanoTime() - start;
          long v = client.next(uid, Duration.ofSeconds(10));
          long complete = System.nanoTime() - start;
          Long last = own.put(uid, v);
          if (last != null && v <= last) {
            return "caller " + caller + " uid " + uid + ": " + v + " after " + last;
          }
          synchronized (points) {
            points.computeIfAbsent(uid, k -> new ArrayList<>())
                .add(new Runner.Point(v, invoke, complete, caller));
          }
        }
        return null;
      }));
    }
    for (Future<String> f : done) {
      assertNull(f.get(60, TimeUnit.SECONDS));
    }
    pool.shutdown();
    assertNull(Runner.checkRealTime(points));
    assertEquals(callers * calls, points.values().stream().mapToInt(List::size).sum());
    assertTrue("concurrent next calls were coalesced", client.stats().coalescedRpcs > 0);
  }

  @Test
  public void nextBatchKeepsOrderAcrossSets() {
    long[] uids = {SET0 + 42, SET1 + 42, SET0 + 42, SET0 + 7, SET0 + 42, SET1 + 42,
        SET0 + 99_042};
    long[] first = client.nextBatch(uids, Duration.ofSeconds(10));
    assertEquals(uids.length, first.length);
    assertTrue(first[0] < first[2] && first[2] < first[4] && first[1] < first[5]);
    long[] second = client.nextBatch(uids, Duration.ofSeconds(10));
    assertTrue(second[0] > first[4] && second[1] > first[5] && second[3] > first[3]);
  }

  @Test
  public void currentAfterNext() {
    for (long uid : new long[] {SET0 + 777, SET1 + 777}) {
      long v = client.next(uid);
      assertEquals(v, client.current(uid));
    }
  }

  @Test
  public void eachBadInputHasItsTypedError() {
    SeqsvrException e = thrown(() -> client.next(4_294_900_000L));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getDescription().contains("outside every set"));
    assertEquals(Status.Code.INVALID_ARGUMENT,
        thrown(() -> client.nextBatch(SET0 + 3, 4_294_967_295L)).getCode());
    assertEquals(Status.Code.INVALID_ARGUMENT, thrown(() -> client.nextBatch()).getCode());
    e = thrown(() -> client.nextIds("snowflake", 100_001));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getStatus() != null); // the server's answer
    assertTrue(!e.getDescription().isEmpty());
    assertEquals(Status.Code.INVALID_ARGUMENT, thrown(() -> client.nextIds("snowflake", 0))
        .getCode());
    e = thrown(() -> client.nextIds("no-such-scheme", 1));
    assertEquals(Status.Code.NOT_FOUND, e.getCode());
    assertTrue(!e.getHint().isEmpty());
    assertTrue(client.next(SET0 + 3) > 0); // a bad input changes nothing
  }

  @Test
  public void idsDecodeToTheWorkerTheirAnswerNames() {
    long now = System.currentTimeMillis();
    for (String name : cluster.ids().schemes.keySet()) {
      Layout layout = cluster.layout(name, now);
      boolean rong = layout.scheme().equals(LayoutSpec.RONGCLOUD);
      Ids ids = rong
          ? client.nextSessionIds(name, 4, Ids.Session.ofId(3, "java-live"))
          : client.nextIds(name, 4);
      assertEquals(4, ids.size());
      for (int i = 0; i < ids.size(); i++) {
        Decoded d = Decoder.decodeId(layout, ids.get(i));
        if (rong) {
          assertNull(d.worker);
          assertEquals(3, d.get(Part.SESSION_TYPE));
          assertEquals(Ids.sessionHashOf("java-live"), d.get(Part.SESSION_HASH));
        } else {
          assertEquals(name, ids.workerId(), (long) d.worker);
        }
        assertTrue(Math.abs(d.unixMs - now) < 60_000 || layout.unit().equals("s"));
        assertEquals(d.text, Decoder.decode(layout, d.text).text);
        if (i > 0) {
          assertTrue(ids.get(i).compareTo(ids.get(i - 1)) > 0);
        }
      }
    }
  }

  @Test
  public void anUnknownCertificateOrServerNameIsRefused() throws Exception {
    TestPki pki = new TestPki().ca("stranger-ca").issue("stranger-ca", "stranger", null, false);
    Path ca = cluster.storeCaPath();
    for (TlsFiles tls : new TlsFiles[] {
        new TlsFiles(cluster.tls().serverName, pki.file("stranger.pem"), pki.file("stranger.key"),
            ca),
        new TlsFiles("not-" + cluster.tls().serverName, dir.resolve("certs/client.pem"),
            dir.resolve("certs/client.key"), ca)}) {
      try (SeqsvrClient c = SeqsvrClient.connect(
          ClientOptions.builder().seeds(cluster.seeds()).tls(tls).build(), Duration.ofSeconds(3))) {
        long v = c.next(SET0 + 9, Duration.ofSeconds(3));
        fail("served " + v + " with " + tls.certFile + " for " + tls.allocServerName());
      } catch (SeqsvrException e) {
        assertTrue(e.toString(), e.getCode() == Status.Code.UNAVAILABLE
            || e.getCode() == Status.Code.UNAUTHENTICATED
            || e.getCode() == Status.Code.PERMISSION_DENIED
            || e.getCode() == Status.Code.DEADLINE_EXCEEDED);
      }
    }
  }

  /**
   * The README's example as printed, run from a directory whose data/local is the live
   * cluster's directory (so that its relative paths hold, whatever SEQSVR_DEV_DIR is).
   */
  @Test
  public void theReadmeExampleRunsAsPrinted() throws Exception {
    Path root = Files.createTempDirectory("seqsvr-readme");
    Files.createDirectories(root.resolve("data"));
    Files.createSymbolicLink(root.resolve("data/local"), dir.toAbsolutePath());
    String cp = System.getProperty("java.class.path");
    Process p = new ProcessBuilder("java", "-cp", cp, "io.seqsvr.examples.ReadmeExample")
        .directory(root.toFile()).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(60, TimeUnit.SECONDS));
    assertEquals(out, 0, p.exitValue());
    assertTrue(out, out.matches("(?s)next\\(3000042\\): \\d+ batch: \\[\\d+, \\d+, \\d+\\] "
        + "snowflake ids: \\[\\d+, \\d+, \\d+\\] worker \\d+\\s*"));
    System.out.println("  README example: " + out.trim());
  }

  @Test
  public void statsCountTheCalls() {
    SeqsvrClient.Stats before = client.stats();
    client.next(SET1 + 5);
    client.nextBatch(SET0 + 5, SET1 + 5);
    SeqsvrClient.Stats after = client.stats();
    assertEquals(before.calls + 2, after.calls);
  }
}
