package io.seqsvr;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.Status;
import io.seqsvr.conformance.Runner;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** The conformance runner's pieces that need no cluster: outcomes, histories, I1, arguments. */
public class RunnerTest {
  @Test
  public void outcomesAsSeqcheckReadsThem() {
    long[] one = {42};
    assertEquals("{\"type\":\"ok\",\"values\":[18446744073709551615]}",
        Runner.outcomeOf(one, new long[] {-1L}, null).toString());
    assertEquals("malformed", Runner.outcomeOf(new long[] {1, 2}, new long[] {1}, null)
        .get("type").getAsString());
    JsonObject fail = Runner.outcomeOf(one, new long[1],
        SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "", "outside"));
    assertEquals("{\"type\":\"fail\",\"code\":\"INVALID_ARGUMENT\"}", fail.toString());
    assertEquals("fail", Runner.outcomeOf(one, new long[1],
        SeqsvrException.of(Status.Code.NOT_FOUND, "", "no scheme")).get("type").getAsString());
    for (Status.Code code : new Status.Code[] {Status.Code.UNAVAILABLE,
        Status.Code.DEADLINE_EXCEEDED, Status.Code.FAILED_PRECONDITION,
        Status.Code.RESOURCE_EXHAUSTED}) {
      JsonObject o = Runner.outcomeOf(one, new long[1], SeqsvrException.of(code, "", "x"));
      assertEquals("unknown", o.get("type").getAsString());
      assertTrue(o.get("reason").getAsString().contains(code.name()));
    }
  }

  @Test
  public void historyLinesAreSeqchecksOperations() throws Exception {
    Path dir = Files.createTempDirectory("seqsvr-history");
    Path file = dir.resolve("h.history.jsonl");
    try (Runner.History h = new Runner.History(file)) {
      h.record(3, 1, new long[] {2147500042L, 7}, 1200, 98000,
          Runner.outcomeOf(new long[] {2147500042L, 7}, new long[] {10007, 5}, null));
      // Flushed as each call completes: readable before the file closes.
      assertEquals(1, Files.readAllLines(file).size());
    }
    JsonObject op = JsonParser.parseString(Files.readAllLines(file).get(0)).getAsJsonObject();
    assertEquals(3, op.get("client").getAsInt());
    assertEquals(1, op.get("set").getAsInt());
    assertEquals("[2147500042,7]", op.get("uids").toString());
    assertEquals(1200, op.get("invoke_ns").getAsLong());
    assertEquals(98000, op.get("complete_ns").getAsLong());
    assertEquals("{\"type\":\"ok\",\"values\":[10007,5]}", op.get("outcome").toString());
  }

  @Test
  public void theRealTimeCheckCatchesWhatSeqcheckWould() {
    Map<Long, List<Runner.Point>> ok = new HashMap<>();
    ok.computeIfAbsent(1L, k -> new ArrayList<>()).add(new Runner.Point(5, 0, 10, 0));
    ok.get(1L).add(new Runner.Point(4, 5, 20, 1)); // overlaps the first: any order is fine
    ok.get(1L).add(new Runner.Point(9, 30, 40, 2));
    assertNull(Runner.checkRealTime(ok));
    Map<Long, List<Runner.Point>> late = new HashMap<>(ok);
    late.put(1L, new ArrayList<>(ok.get(1L)));
    late.get(1L).add(new Runner.Point(8, 50, 60, 3)); // invoked after 9 was returned
    assertNotNull(Runner.checkRealTime(late));
    Map<Long, List<Runner.Point>> twice = new HashMap<>();
    twice.put(2L, new ArrayList<>(List.of(new Runner.Point(3, 0, 10, 0),
        new Runner.Point(3, 0, 10, 1))));
    assertTrue(Runner.checkRealTime(twice).contains("handed out twice"));
  }

  @Test
  public void badArgumentsAreExitTwoForStaticAndOneForLoad() {
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    PrintStream p = new PrintStream(err, true, StandardCharsets.UTF_8);
    assertEquals(2, Runner.run(new String[] {}, p));
    assertEquals(2, Runner.run(new String[] {"static", "--cases", "x.json"}, p));
    assertEquals(1, Runner.run(new String[] {"load", "--cases", "x.json"}, p));
    assertEquals(2, Runner.run(new String[] {"static", "--bogus", "1"}, p));
    assertTrue(err.toString(StandardCharsets.UTF_8).contains("usage"));
  }
}
