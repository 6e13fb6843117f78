package io.seqsvr.conformance;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.Status;
import io.seqsvr.ClientOptions;
import io.seqsvr.ClusterFile;
import io.seqsvr.Decoded;
import io.seqsvr.Decoder;
import io.seqsvr.Ids;
import io.seqsvr.Layout;
import io.seqsvr.LayoutSpec;
import io.seqsvr.Part;
import io.seqsvr.SeqsvrClient;
import io.seqsvr.SeqsvrException;
import io.seqsvr.TlsFiles;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * The Java SDK's conformance runner (issue 32): the protocol of tests/conformance/README.md
 * over tests/conformance/cases.json, through the SDK's public API only.
 *
 * <pre>
 * Runner static --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY \
 *               --foreign-cert PEM --foreign-key KEY --out DIR
 * Runner load   --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --out DIR
 * </pre>
 *
 * <p>static runs every case without "phase": "load", one after the other (exit 0: all passed,
 * 1: one failed, 2: it could not run). load runs the case with "phase": "load" until DIR/stop
 * exists (checked every 50 ms), waits for the calls in flight, closes the client and exits 0
 * (1: it could not start). Both write DIR/results.jsonl (static afresh, load adds its line) and,
 * for the concurrent_next and fault_load cases, DIR/NAME.history.jsonl in seqcheck's format
 * (crates/seqsvr-check/src/history.rs), one line written and flushed as each call completes,
 * times from {@link System#nanoTime} since the run started. The runner never retries a call
 * itself: the SDK's own retries are what is being tested.
 */
public final class Runner {
  /** Bounds each call of the static cases (the SDK retries within it). */
  static final Duration CALL_TIMEOUT = Duration.ofSeconds(10);
  /** Bounds each call under faults: longer than a lease plus the hand-over. */
  static final Duration LOAD_CALL_TIMEOUT = Duration.ofSeconds(15);
  /** How long a refused_connection client has to fail. */
  static final Duration REFUSE_WITHIN = Duration.ofSeconds(3);
  /** How often load mode looks for DIR/stop (the protocol: at least every 100 ms). */
  static final long STOP_POLL_MS = 50;

  private static final Gson GSON = new Gson();

  private final Path casesDir;
  private final ClusterFile cluster;
  private final String cert;
  private final String key;
  private final String foreignCert;
  private final String foreignKey;
  private final Path out;
  private final long start = System.nanoTime();
  private SeqsvrClient client;
  private SeqsvrException connectError;
  private final OutputStream results;
  private volatile BooleanSupplier stopRequested = () -> false;

  Runner(Path casesDir, ClusterFile cluster, String cert, String key, String foreignCert,
      String foreignKey, Path out, OutputStream results) {
    this.casesDir = casesDir;
    this.cluster = cluster;
    this.cert = cert;
    this.key = key;
    this.foreignCert = foreignCert;
    this.foreignKey = foreignKey;
    this.out = out;
    this.results = results;
  }

  /** A case's failure, with what was seen. */
  static final class CaseFailure extends Exception {
    private static final long serialVersionUID = 1L;

    CaseFailure(String detail) {
      super(detail);
    }
  }

  /** Nanoseconds since the run started, on the process's one monotonic clock. */
  long now() {
    return System.nanoTime() - start;
  }

  long setOf(long uid) {
    ClusterFile.SetConfig s = cluster.setOf(uid);
    return s == null ? 0 : s.id;
  }

  void connect() {
    try {
      client = SeqsvrClient.connect(cluster.options(cert, key).build(), CALL_TIMEOUT);
    } catch (SeqsvrException e) {
      connectError = e;
    }
  }

  synchronized void record(String name, boolean ok, String detail) throws IOException {
    JsonObject o = new JsonObject();
    o.addProperty("case", name);
    o.addProperty("ok", ok);
    o.addProperty("detail", detail);
    results.write((GSON.toJson(o) + "\n").getBytes(StandardCharsets.UTF_8));
    results.flush();
  }

  // ---- histories ----

  /** One case's history file, a line written and flushed as each call completes. */
  public static final class History implements AutoCloseable {
    private final OutputStream f;
    private IOException error;

    public History(Path path) throws IOException {
      f = Files.newOutputStream(path);
    }

    public synchronized void record(int client, long set, long[] uids, long invokeNs, long completeNs,
        JsonObject outcome) {
      JsonObject op = new JsonObject();
      op.addProperty("client", client);
      op.addProperty("set", set);
      op.add("uids", unsignedArray(uids));
      op.addProperty("invoke_ns", invokeNs);
      op.addProperty("complete_ns", completeNs);
      op.add("outcome", outcome);
      try {
        f.write((GSON.toJson(op) + "\n").getBytes(StandardCharsets.UTF_8));
        f.flush();
      } catch (IOException e) {
        if (error == null) {
          error = e;
        }
      }
    }

    @Override
    public synchronized void close() throws IOException {
      f.close();
      if (error != null) {
        throw error;
      }
    }
  }

  static JsonArray unsignedArray(long[] values) {
    JsonArray a = new JsonArray();
    for (long v : values) {
      a.add(new java.math.BigInteger(Long.toUnsignedString(v)));
    }
    return a;
  }

  /** The gRPC code as the protocol spells it (INVALID_ARGUMENT). */
  static String codeName(Status.Code code) {
    return code.name();
  }

  /**
   * What a call's answer is in a history: ok with one value per uid, fail only for
   * INVALID_ARGUMENT and NOT_FOUND (never applied), unknown for every other error (it may have
   * been applied), malformed for another number of values than uids.
   */
  public static JsonObject outcomeOf(long[] uids, long[] values, SeqsvrException err) {
    JsonObject o = new JsonObject();
    if (err == null) {
      if (values.length != uids.length) {
        o.addProperty("type", "malformed");
        o.addProperty("reason", values.length + " values for " + uids.length + " uids");
        return o;
      }
      o.addProperty("type", "ok");
      o.add("values", unsignedArray(values));
      return o;
    }
    if (err.getCode() == Status.Code.INVALID_ARGUMENT || err.getCode() == Status.Code.NOT_FOUND) {
      o.addProperty("type", "fail");
      o.addProperty("code", codeName(err.getCode()));
      return o;
    }
    o.addProperty("type", "unknown");
    o.addProperty("reason", err.getMessage());
    return o;
  }

  /** One ok value of one uid (for the in-process real-time check). */
  public static final class Point {
    final long value;
    final long invoke;
    final long complete;
    final int client;

    public Point(long value, long invoke, long complete, int client) {
      this.value = value;
      this.invoke = invoke;
      this.complete = complete;
      this.client = client;
    }
  }

  /**
   * Invariant I1 as seqcheck checks it, per uid: every value distinct, and a call invoked after
   * another completed got a higher value. The first violation, or null.
   */
  public static String checkRealTime(Map<Long, List<Point>> byUid) {
    for (Map.Entry<Long, List<Point>> e : new TreeMap<>(byUid).entrySet()) {
      long uid = e.getKey();
      List<Point> list = e.getValue();
      Map<Long, Integer> seen = new HashMap<>();
      for (Point p : list) {
        Integer c = seen.put(p.value, p.client);
        if (c != null) {
          return "uid " + uid + ": value " + Long.toUnsignedString(p.value)
              + " handed out twice (callers " + c + " and " + p.client + ")";
        }
      }
      List<Point> byInvoke = new ArrayList<>(list);
      byInvoke.sort((a, b) -> Long.compare(a.invoke, b.invoke));
      List<Point> byComplete = new ArrayList<>(list);
      byComplete.sort((a, b) -> Long.compare(a.complete, b.complete));
      Point best = null;
      int k = 0;
      for (Point p : byInvoke) {
        while (k < byComplete.size() && byComplete.get(k).complete < p.invoke) {
          if (best == null || Long.compareUnsigned(byComplete.get(k).value, best.value) > 0) {
            best = byComplete.get(k);
          }
          k++;
        }
        if (best != null && Long.compareUnsigned(p.value, best.value) <= 0) {
          return "uid " + uid + ": caller " + p.client + "'s call invoked at " + p.invoke
              + " ns got " + p.value + ", but " + best.value + " had been returned to caller "
              + best.client + " at " + best.complete + " ns";
        }
      }
    }
    return null;
  }

  // ---- the cases ----

  static final List<String> KINDS = List.of("concurrent_next", "batch_order",
      "current_after_next", "error", "refused_connection", "decode_vectors", "ids_decode",
      "fault_load");

  /** Runs one case into its result: {ok, detail}. */
  Object[] run(JsonObject c) {
    String kind = str(c, "kind");
    if (!KINDS.contains(kind)) {
      return new Object[] {false, "unknown case kind \"" + kind + "\": this runner does not know it"};
    }
    boolean needsClient = !kind.equals("decode_vectors") && !kind.equals("refused_connection");
    if (needsClient && client == null) {
      return new Object[] {false, "the client could not connect: " + connectError};
    }
    try {
      String detail;
      switch (kind) {
        case "concurrent_next":
          detail = concurrentNext(c);
          break;
        case "batch_order":
          detail = batchOrder(c);
          break;
        case "current_after_next":
          detail = currentAfterNext(c);
          break;
        case "error":
          detail = errorCase(c);
          break;
        case "refused_connection":
          detail = refusedConnection(c);
          break;
        case "decode_vectors":
          detail = decodeVectors(c);
          break;
        case "ids_decode":
          detail = idsDecode(c);
          break;
        default:
          detail = faultLoad(c);
          break;
      }
      return new Object[] {true, detail};
    } catch (CaseFailure e) {
      return new Object[] {false, e.getMessage()};
    } catch (Exception | AssertionError e) {
      return new Object[] {false, "the runner failed: " + e};
    }
  }

  static String str(JsonObject c, String k) {
    JsonElement e = c.get(k);
    return e == null || e.isJsonNull() ? "" : e.getAsString();
  }

  static int integer(JsonObject c, String k) {
    JsonElement e = c.get(k);
    return e == null || e.isJsonNull() ? 0 : e.getAsInt();
  }

  static long[] uids(JsonObject c, String k) {
    JsonElement e = c.get(k);
    if (e == null || e.isJsonNull()) {
      return new long[0];
    }
    JsonArray a = e.getAsJsonArray();
    long[] out = new long[a.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = Long.parseUnsignedLong(a.get(i).getAsString());
    }
    return out;
  }

  static String show(long[] v) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < v.length; i++) {
      b.append(i > 0 ? " " : "").append(Long.toUnsignedString(v[i]));
    }
    return b.append(']').toString();
  }

  /** Per caller: its own values per uid strictly increase. */
  static final class PerCaller {
    private final Map<Long, Long> last = new HashMap<>();

    String add(long uid, long value) {
      Long prev = last.put(uid, value);
      if (prev != null && Long.compareUnsigned(value, prev) <= 0) {
        return "uid " + uid + ": got " + value + " after " + prev;
      }
      return null;
    }
  }

  /**
   * concurrent_next: callers × calls_per_caller next(uid) over uids; every call succeeds, each
   * caller's values per uid strictly increase, and the history passes I1 (checked here as
   * seqcheck does; the script runs seqcheck on the file too).
   */
  String concurrentNext(JsonObject c) throws Exception {
    int callers = integer(c, "callers");
    int calls = integer(c, "calls_per_caller");
    long[] uids = uids(c, "uids");
    if (callers <= 0 || calls <= 0 || uids.length == 0) {
      throw new CaseFailure("the case needs callers, calls_per_caller and uids");
    }
    String name = str(c, "name");
    Map<Long, List<Point>> points = new HashMap<>();
    String[] problems = new String[callers];
    int[] ops = new int[1];
    try (History h = new History(out.resolve(name + ".history.jsonl"))) {
      ExecutorService pool = Executors.newFixedThreadPool(callers);
      List<Future<?>> done = new ArrayList<>();
      for (int cl = 0; cl < callers; cl++) {
        int caller = cl;
        done.add(pool.submit(() -> {
          PerCaller own = new PerCaller();
          for (int i = 0; i < calls; i++) {
            long uid = uids[(caller + i) % uids.length];
            long[] one = {uid};
            long v = 0;
            SeqsvrException err = null;
            long invoke = now();
            try {
              v = client.next(uid, CALL_TIMEOUT);
            } catch (SeqsvrException e) {
              err = e;
            }
            long complete = now();
            h.record(caller, setOf(uid), one, invoke, complete,
                outcomeOf(one, new long[] {v}, err));
            synchronized (points) {
              ops[0]++;
              if (err == null) {
                points.computeIfAbsent(uid, k -> new ArrayList<>())
                    .add(new Point(v, invoke, complete, caller));
              }
            }
            if (problems[caller] != null) {
              continue;
            }
            if (err != null) {
              problems[caller] = "caller " + caller + " call " + i + " next(" + uid + "): " + err;
            } else {
              String p = own.add(uid, v);
              if (p != null) {
                problems[caller] = "caller " + caller + ": its own values not increasing: " + p;
              }
            }
          }
        }));
      }
      for (Future<?> f : done) {
        f.get();
      }
      pool.shutdown();
    }
    List<String> failed = new ArrayList<>();
    for (String p : problems) {
      if (p != null) {
        failed.add(p);
      }
    }
    if (!failed.isEmpty()) {
      throw new CaseFailure(failed.size() + " of " + callers + " callers saw a problem; "
          + String.join("; ", failed));
    }
    String v = checkRealTime(points);
    if (v != null) {
      throw new CaseFailure("the history breaks I1: " + v);
    }
    return callers + " callers x " + calls + " calls over " + show(uids)
        + ": every call succeeded, each caller's values per uid increase, I1 holds in-process; "
        + "history " + name + ".history.jsonl (" + ops[0] + " operations)";
  }

  /**
   * batch_order: one next_batch gives one value per place, increasing over a uid's places; a
   * second gives every uid a value above its first call's largest.
   */
  String batchOrder(JsonObject c) throws CaseFailure {
    long[] uids = uids(c, "uids");
    long[] first;
    try {
      first = client.nextBatch(uids, CALL_TIMEOUT);
    } catch (SeqsvrException e) {
      throw new CaseFailure("next_batch(" + show(uids) + "): " + e);
    }
    if (first.length != uids.length) {
      throw new CaseFailure("next_batch(" + show(uids) + ") answered " + first.length
          + " values: " + show(first));
    }
    Map<Long, Long> largest = new HashMap<>();
    for (int i = 0; i < uids.length; i++) {
      Long last = largest.get(uids[i]);
      if (last != null && Long.compareUnsigned(first[i], last) <= 0) {
        throw new CaseFailure("next_batch(" + show(uids) + ") = " + show(first) + ": uid "
            + uids[i] + "'s place " + i + " got " + first[i] + ", not above its earlier place's "
            + last);
      }
      largest.put(uids[i], first[i]);
    }
    long[] second;
    try {
      second = client.nextBatch(uids, CALL_TIMEOUT);
    } catch (SeqsvrException e) {
      throw new CaseFailure("the second next_batch(" + show(uids) + "): " + e);
    }
    if (second.length != uids.length) {
      throw new CaseFailure("the second next_batch(" + show(uids) + ") answered "
          + second.length + " values: " + show(second));
    }
    for (int i = 0; i < uids.length; i++) {
      if (Long.compareUnsigned(second[i], largest.get(uids[i])) <= 0) {
        throw new CaseFailure("the second next_batch = " + show(second) + ": uid " + uids[i]
            + " got " + second[i] + ", not above the first call's " + largest.get(uids[i])
            + " (first " + show(first) + ")");
      }
    }
    return "next_batch(" + show(uids) + ") = " + show(first) + ", then " + show(second);
  }

  /** current_after_next: current(uid) == next(uid) just returned. */
  String currentAfterNext(JsonObject c) throws CaseFailure {
    long[] uids = uids(c, "uids");
    if (uids.length == 0) {
      throw new CaseFailure("the case has no uids");
    }
    List<String> seen = new ArrayList<>();
    for (long uid : uids) {
      long v;
      long cur;
      try {
        v = client.next(uid, CALL_TIMEOUT);
      } catch (SeqsvrException e) {
        throw new CaseFailure("next(" + uid + "): " + e);
      }
      try {
        cur = client.current(uid, CALL_TIMEOUT);
      } catch (SeqsvrException e) {
        throw new CaseFailure("current(" + uid + ") after next = " + v + ": " + e);
      }
      if (cur != v) {
        throw new CaseFailure("uid " + uid + ": next = " + v + ", then current = " + cur);
      }
      seen.add(uid + ": next " + v + " current " + cur);
    }
    return String.join("; ", seen);
  }

  /**
   * error: the call fails with the SDK's typed error of the case's code and a message; next(42)
   * works afterwards.
   */
  String errorCase(JsonObject c) throws CaseFailure {
    JsonObject call = c.getAsJsonObject("call");
    if (call == null) {
      throw new CaseFailure("the case has no call");
    }
    String want = str(c, "code");
    String op = str(call, "op");
    String what;
    Object got;
    SeqsvrException err = null;
    try {
      switch (op) {
        case "next": {
          if (!call.has("uid")) {
            throw new CaseFailure("a next call without uid");
          }
          long uid = Long.parseUnsignedLong(call.get("uid").getAsString());
          what = "next(" + Long.toUnsignedString(uid) + ")";
          got = client.next(uid, CALL_TIMEOUT);
          break;
        }
        case "next_batch": {
          long[] uids = uids(call, "uids");
          what = "next_batch(" + show(uids) + ")";
          got = show(client.nextBatch(uids, CALL_TIMEOUT));
          break;
        }
        case "next_ids": {
          String scheme = str(call, "scheme");
          int count = integer(call, "count");
          what = "next_ids(\"" + scheme + "\", " + count + ")";
          got = client.nextIds(scheme, count, CALL_TIMEOUT);
          break;
        }
        default:
          throw new CaseFailure("unknown op \"" + op + "\"");
      }
    } catch (SeqsvrException e) {
      err = e;
      what = op;
      got = null;
    }
    if (err == null) {
      throw new CaseFailure(what + " succeeded with " + got + "; want " + want);
    }
    if (!codeName(err.getCode()).equals(want)) {
      throw new CaseFailure(op + " failed with " + codeName(err.getCode()) + ", want " + want
          + ": " + err);
    }
    if (err.getDescription().isEmpty()) {
      throw new CaseFailure(op + " failed with " + codeName(err.getCode())
          + " but an empty message");
    }
    long v;
    try {
      v = client.next(42, CALL_TIMEOUT);
    } catch (SeqsvrException e) {
      throw new CaseFailure(op + " failed as it should (" + err + "), but next(42) afterwards "
          + "failed: " + e);
    }
    return call + ": " + err.getMessage() + "; next(42) afterwards = " + v;
  }

  /**
   * refused_connection: a client with the case's certificate (and server name) cannot connect,
   * or its first next(42) fails, within 3 s; no value comes back. The runner's own client then
   * still gets next(42), so the refusal is not the cluster being down.
   */
  String refusedConnection(JsonObject c) throws CaseFailure {
    String which = str(c, "certificate");
    String useCert;
    String useKey;
    switch (which) {
      case "own":
        useCert = cert;
        useKey = key;
        break;
      case "foreign":
        useCert = foreignCert;
        useKey = foreignKey;
        if (useCert == null || useKey == null) {
          throw new CaseFailure("no --foreign-cert/--foreign-key given");
        }
        break;
      default:
        throw new CaseFailure("unknown certificate \"" + which + "\" (own or foreign)");
    }
    String serverName = str(c, "server_name_prefix") + cluster.tls().serverName;
    ClientOptions opts;
    try {
      opts = cluster.options(useCert, useKey)
          .tls(new TlsFiles(serverName, Path.of(useCert), Path.of(useKey), cluster.storeCaPath()))
          .build();
    } catch (SeqsvrException e) {
      throw new CaseFailure("options: " + e);
    }
    long began = System.nanoTime();
    long until = began + REFUSE_WITHIN.toNanos();
    String how;
    try (SeqsvrClient refused = SeqsvrClient.connect(opts, REFUSE_WITHIN)) {
      long left = Math.max(until - System.nanoTime(), 1);
      try {
        long v = refused.next(42, Duration.ofNanos(left));
        throw new CaseFailure("the client (certificate " + which + ", server name " + serverName
            + ") was served: next(42) = " + v);
      } catch (SeqsvrException e) {
        how = "connected, but next(42) failed after " + ms(began) + ": " + e;
      }
    } catch (SeqsvrException e) {
      how = "connect failed after " + ms(began) + ": " + e;
    }
    if (client == null) {
      throw new CaseFailure("refused (" + how + "), but the runner's own client could not "
          + "connect either (" + connectError + "): the refusal proves nothing");
    }
    try {
      client.next(42, CALL_TIMEOUT);
    } catch (SeqsvrException e) {
      throw new CaseFailure("refused (" + how + "), but the runner's own client's next(42) "
          + "failed too: " + e);
    }
    return "certificate " + which + ", server name " + serverName + ": " + how;
  }

  private static String ms(long began) {
    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - began) + "ms";
  }

  /** decode_vectors: the pure decoder gives every vector of the file exactly. */
  String decodeVectors(JsonObject c) throws Exception {
    Path file = casesDir.resolve(str(c, "file"));
    JsonObject v = JsonParser.parseString(Files.readString(file)).getAsJsonObject();
    List<String> bad = DecodeVectors.check(v);
    if (!bad.isEmpty()) {
      throw new CaseFailure(bad.size() + " vectors differ: " + String.join("; ", bad));
    }
    return v.getAsJsonArray("decode").size() + " decode vectors, "
        + v.getAsJsonArray("layout_errors").size() + " layout errors, "
        + v.getAsJsonArray("session_hashes").size() + " session hashes: all as expected";
  }

  /**
   * ids_decode: for every scheme of the cluster file, count ids (rongcloud: of the case's
   * session) that decode with the file's layout at now, strictly increase and carry the worker
   * id the answer names (rongcloud: no worker; the session's type and hash).
   */
  String idsDecode(JsonObject c) throws CaseFailure {
    int count = integer(c, "count");
    if (count <= 0) {
      throw new CaseFailure("the case has no count");
    }
    List<String> names = new ArrayList<>(cluster.ids().schemes.keySet());
    names.sort(null);
    if (names.isEmpty()) {
      throw new CaseFailure("the cluster file has no [ids.schemes]");
    }
    JsonObject session = c.getAsJsonObject("session");
    List<String> seen = new ArrayList<>();
    for (String name : names) {
      String scheme = cluster.ids().schemes.get(name).spec.scheme();
      Layout layout;
      try {
        layout = cluster.layout(name, System.currentTimeMillis());
      } catch (SeqsvrException e) {
        throw new CaseFailure(name + ": the cluster file's layout: " + e);
      }
      boolean rong = scheme.equals(LayoutSpec.RONGCLOUD);
      Ids ids;
      int type = 0;
      String sid = null;
      try {
        if (rong) {
          if (session == null) {
            throw new CaseFailure(name + ": the case has no session for rongcloud");
          }
          type = integer(session, "type");
          sid = str(session, "id");
          ids = client.nextSessionIds(name, count, Ids.Session.ofId(type, sid), CALL_TIMEOUT);
        } else {
          ids = client.nextIds(name, count, CALL_TIMEOUT);
        }
      } catch (SeqsvrException e) {
        throw new CaseFailure(name + ": " + e);
      }
      if (ids.size() != count) {
        throw new CaseFailure(name + ": asked for " + count + " ids, got " + ids.size());
      }
      Decoded first = null;
      for (int i = 0; i < ids.size(); i++) {
        Decoded d;
        try {
          d = Decoder.decodeId(layout, ids.get(i));
        } catch (IllegalArgumentException e) {
          throw new CaseFailure(name + ": id " + ids.get(i) + " does not decode: "
              + e.getMessage());
        }
        if (rong) {
          long want = Ids.sessionHashOf(sid);
          if (d.worker != null || d.get(Part.SESSION_TYPE) != type
              || d.get(Part.SESSION_HASH) != want) {
            throw new CaseFailure(name + ": id " + d.text + " decodes to worker " + d.worker
                + ", session type " + d.get(Part.SESSION_TYPE) + ", hash "
                + d.get(Part.SESSION_HASH) + "; want no worker, type " + type + ", hash " + want);
          }
        } else if (d.worker == null || d.worker != ids.workerId()) {
          throw new CaseFailure(name + ": id " + d.text + " carries worker " + d.worker
              + ", the answer names " + ids.workerId());
        }
        if (i > 0 && ids.get(i).compareTo(ids.get(i - 1)) <= 0) {
          throw new CaseFailure(name + ": id " + ids.get(i) + " is not above " + ids.get(i - 1));
        }
        if (first == null) {
          first = d;
        }
      }
      String worker = rong ? "session type " + first.get(Part.SESSION_TYPE) + " hash "
          + first.get(Part.SESSION_HASH) : "worker " + ids.workerId();
      seen.add(name + ": " + ids.size() + " ids, " + worker + ", first " + first.text + " ("
          + first.timeRfc3339 + ")");
    }
    return String.join("; ", seen);
  }

  /**
   * fault_load: callers loop over uids as concurrent_next does, every batch_every-th call a
   * next_batch(uids), until stop; each caller's own values per uid must increase and no call
   * may fail as never applied (the script checks the history with seqcheck and that calls
   * succeed after each fault).
   */
  String faultLoad(JsonObject c) throws Exception {
    int callers = integer(c, "callers");
    int batchEvery = integer(c, "batch_every");
    long[] all = uids(c, "uids");
    if (callers <= 0 || all.length == 0) {
      throw new CaseFailure("the case needs callers and uids");
    }
    String name = str(c, "name");
    long[][] tallies = new long[callers][4]; // ok, fail, unknown, malformed
    String[] problems = new String[callers];
    String[] lastUnknown = new String[callers];
    try (History h = new History(out.resolve(name + ".history.jsonl"))) {
      ExecutorService pool = Executors.newFixedThreadPool(callers);
      List<Future<?>> done = new ArrayList<>();
      for (int cl = 0; cl < callers; cl++) {
        int caller = cl;
        done.add(pool.submit(() -> {
          PerCaller own = new PerCaller();
          for (int i = 0; !stopRequested.getAsBoolean(); i++) {
            long[] uids;
            long[] values;
            SeqsvrException err = null;
            long invoke = now();
            if (batchEvery > 0 && (i + 1) % batchEvery == 0) {
              uids = all;
              try {
                values = client.nextBatch(uids, LOAD_CALL_TIMEOUT);
              } catch (SeqsvrException e) {
                err = e;
                values = new long[uids.length];
              }
            } else {
              uids = new long[] {all[(caller + i) % all.length]};
              values = new long[1];
              try {
                values[0] = client.next(uids[0], LOAD_CALL_TIMEOUT);
              } catch (SeqsvrException e) {
                err = e;
              }
            }
            long complete = now();
            JsonObject outcome = outcomeOf(uids, values, err);
            h.record(caller, setOf(uids[0]), uids, invoke, complete, outcome);
            String type = outcome.get("type").getAsString();
            switch (type) {
              case "ok":
                tallies[caller][0]++;
                for (int k = 0; k < uids.length; k++) {
                  String p = own.add(uids[k], values[k]);
                  if (p != null && problems[caller] == null) {
                    problems[caller] = "caller " + caller + ": its own values not increasing: "
                        + p;
                  }
                }
                break;
              case "fail":
                tallies[caller][1]++;
                if (problems[caller] == null) {
                  problems[caller] = "caller " + caller + ": " + show(uids)
                      + " failed as never applied: " + err;
                }
                break;
              case "unknown":
                tallies[caller][2]++;
                lastUnknown[caller] = outcome.get("reason").getAsString();
                break;
              default:
                tallies[caller][3]++;
                if (problems[caller] == null) {
                  problems[caller] = "caller " + caller + ": " + show(uids) + ": "
                      + outcome.get("reason").getAsString();
                }
            }
          }
        }));
      }
      for (Future<?> f : done) {
        f.get();
      }
      pool.shutdown();
    }
    long[] sum = new long[4];
    String unknown = null;
    List<String> bad = new ArrayList<>();
    for (int cl = 0; cl < callers; cl++) {
      for (int k = 0; k < 4; k++) {
        sum[k] += tallies[cl][k];
      }
      if (lastUnknown[cl] != null) {
        unknown = lastUnknown[cl];
      }
      if (problems[cl] != null) {
        bad.add(problems[cl]);
      }
    }
    String counts = (sum[0] + sum[1] + sum[2] + sum[3]) + " calls: " + sum[0] + " ok, " + sum[2]
        + " unknown, " + sum[1] + " fail, " + sum[3] + " malformed"
        + (unknown != null ? " (an unknown: " + unknown + ")" : "");
    if (!bad.isEmpty()) {
      throw new CaseFailure(counts + "; " + String.join("; ", bad));
    }
    if (sum[0] == 0) {
      throw new CaseFailure(counts + ": no call succeeded");
    }
    return callers + " callers over " + show(all) + " (every " + batchEvery + "-th a batch): "
        + counts + "; history " + name + ".history.jsonl";
  }

  // ---- main ----

  static void usage(PrintStream err) {
    err.println("usage:\n"
        + "  Runner static --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY "
        + "--foreign-cert PEM --foreign-key KEY --out DIR\n"
        + "  Runner load   --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --out DIR");
  }

  /** The runner's command line; exits with its code. */
  public static void main(String[] args) {
    int code = run(args, System.err);
    System.exit(code);
  }

  /** The runner; its value is the exit code. */
  public static int run(String[] args, PrintStream err) {
    if (args.length == 0 || (!args[0].equals("static") && !args[0].equals("load"))) {
      usage(err);
      return 2;
    }
    String mode = args[0];
    int cannot = mode.equals("load") ? 1 : 2;
    Map<String, String> flags = new LinkedHashMap<>();
    List<String> known = Arrays.asList("--cases", "--cluster", "--cert", "--key",
        "--foreign-cert", "--foreign-key", "--out");
    for (int i = 1; i < args.length; i++) {
      String a = args[i];
      String value;
      if (a.contains("=")) {
        value = a.substring(a.indexOf('=') + 1);
        a = a.substring(0, a.indexOf('='));
      } else if (i + 1 < args.length) {
        value = args[++i];
      } else {
        err.println("missing the value of " + a);
        usage(err);
        return cannot;
      }
      if (a.startsWith("-") && !a.startsWith("--")) {
        a = "-" + a;
      }
      if (!known.contains(a)) {
        err.println("unknown argument " + a);
        usage(err);
        return cannot;
      }
      flags.put(a, value);
    }
    List<String> missing = new ArrayList<>();
    for (String f : List.of("--cases", "--cluster", "--cert", "--key", "--out")) {
      if (!flags.containsKey(f) || flags.get(f).isEmpty()) {
        missing.add(f);
      }
    }
    if (mode.equals("static") && (!flags.containsKey("--foreign-cert")
        || !flags.containsKey("--foreign-key"))) {
      missing.add("--foreign-cert/--foreign-key");
    }
    if (!missing.isEmpty()) {
      err.println("missing " + missing);
      usage(err);
      return cannot;
    }
    Path casesPath = Path.of(flags.get("--cases"));
    JsonObject cases;
    ClusterFile cluster;
    try {
      cases = JsonParser.parseString(Files.readString(casesPath)).getAsJsonObject();
      cluster = ClusterFile.load(flags.get("--cluster"));
      for (String f : List.of("--cert", "--key", "--foreign-cert", "--foreign-key")) {
        if (flags.containsKey(f) && !Files.isReadable(Path.of(flags.get(f)))) {
          err.println("cannot read " + flags.get(f) + " (" + f + ")");
          return cannot;
        }
      }
      if (cluster.tls() == null) {
        err.println(flags.get("--cluster") + " has no [tls] section");
        return cannot;
      }
    } catch (IOException | RuntimeException e) {
      err.println(e);
      return cannot;
    }
    Path out = Path.of(flags.get("--out"));
    OutputStream results;
    try {
      Files.createDirectories(out);
      results = mode.equals("load")
          ? Files.newOutputStream(out.resolve("results.jsonl"), StandardOpenOption.CREATE,
              StandardOpenOption.APPEND)
          : Files.newOutputStream(out.resolve("results.jsonl"));
    } catch (IOException e) {
      err.println(e);
      return cannot;
    }
    Path casesDir = casesPath.toAbsolutePath().getParent();
    Runner r = new Runner(casesDir, cluster, flags.get("--cert"), flags.get("--key"),
        flags.get("--foreign-cert"), flags.get("--foreign-key"), out, results);
    List<JsonObject> chosen = new ArrayList<>();
    for (JsonElement e : cases.getAsJsonArray("cases")) {
      JsonObject c = e.getAsJsonObject();
      if (str(c, "phase").equals("load") == mode.equals("load")) {
        chosen.add(c);
      }
    }
    try {
      if (mode.equals("load")) {
        if (chosen.size() != 1) {
          err.println(casesPath + " has " + chosen.size() + " cases of phase load, want one");
          return 1;
        }
        return r.load(chosen.get(0), err);
      }
      if (chosen.isEmpty()) {
        err.println(casesPath + " has no static cases");
        return 2;
      }
      r.connect();
      if (r.client == null) {
        err.println("the client could not connect: " + r.connectError);
      }
      int failed = 0;
      for (JsonObject c : chosen) {
        long began = System.nanoTime();
        Object[] res = r.run(c);
        try {
          r.record(str(c, "name"), (Boolean) res[0], (String) res[1]);
        } catch (IOException e) {
          err.println("writing results.jsonl: " + e);
          return 2;
        }
        if (!(Boolean) res[0]) {
          failed++;
        }
        err.println(((Boolean) res[0] ? "ok   " : "FAIL ") + str(c, "name") + " (" + ms(began)
            + "): " + res[1]);
      }
      err.println((chosen.size() - failed) + " of " + chosen.size() + " cases passed");
      return failed > 0 ? 1 : 0;
    } finally {
      if (r.client != null) {
        r.client.close();
      }
      try {
        results.close();
      } catch (IOException e) {
        err.println(e);
      }
    }
  }

  /** Runs the load case until DIR/stop exists; 0 once stopped, 1 if it could not start. */
  int load(JsonObject c, PrintStream err) {
    connect();
    if (client == null) {
      err.println("the client could not connect: " + connectError);
      return 1;
    }
    Path stopFile = out.resolve("stop");
    Thread watcher = new Thread(() -> {
      while (!Files.exists(stopFile)) {
        try {
          Thread.sleep(STOP_POLL_MS);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "stop-watcher");
    watcher.setDaemon(true);
    watcher.start();
    stopRequested = () -> !watcher.isAlive();
    err.println("load: " + str(c, "name") + " until " + stopFile + " exists");
    long began = System.nanoTime();
    Object[] res = run(c);
    client.close();
    client = null;
    try {
      record(str(c, "name"), (Boolean) res[0], (String) res[1]);
    } catch (IOException e) {
      err.println("writing results.jsonl: " + e);
    }
    err.println(((Boolean) res[0] ? "ok   " : "FAIL ") + str(c, "name") + " (" + ms(began)
        + "): " + res[1]);
    return 0;
  }
}
