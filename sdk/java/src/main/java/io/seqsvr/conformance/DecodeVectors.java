package io.seqsvr.conformance;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import io.seqsvr.Decoded;
import io.seqsvr.Decoder;
import io.seqsvr.Ids;
import io.seqsvr.Layout;
import io.seqsvr.LayoutSpec;
import io.seqsvr.Part;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The language-neutral decode vectors (tests/conformance/decode-vectors.json; its "about" says
 * how they are read) checked against the SDK's pure decoder: every vector decodes to its
 * expected fields (the JSON of {@code seqctl id decode --json}) or fails with exactly its error;
 * every layout error names its reason; every session hash matches. Used by the conformance
 * runner's decode_vectors case and by the unit tests.
 */
public final class DecodeVectors {
  private DecodeVectors() {}

  static Long optLong(JsonObject o, String k) {
    return o.has(k) && !o.get(k).isJsonNull() ? o.get(k).getAsLong() : null;
  }

  static Integer optInt(JsonObject o, String k) {
    return o.has(k) && !o.get(k).isJsonNull() ? o.get(k).getAsInt() : null;
  }

  /** A vector file's "spec" as a LayoutSpec. */
  public static LayoutSpec spec(JsonObject s) {
    return new LayoutSpec(s.get("scheme").getAsString(), optLong(s, "epoch_ms"),
        s.has("unit") ? s.get("unit").getAsString() : null, optInt(s, "time_bits"),
        optInt(s, "worker_bits"), optInt(s, "seq_bits"));
  }

  /** A decoded id as `seqctl id decode --json` shows it: the vectors' "expect" keys. */
  public static Map<String, JsonElement> view(Decoded d) {
    Map<String, JsonElement> v = new LinkedHashMap<>();
    v.put("id", new JsonPrimitive(d.id.toString()));
    v.put("text", new JsonPrimitive(d.text));
    v.put("time", new JsonPrimitive(d.timeRfc3339));
    v.put("time_units", num(d.get(Part.TIME)));
    v.put("unit", new JsonPrimitive(d.unit));
    v.put("epoch", new JsonPrimitive(d.epochRfc3339));
    v.put("unix_ms", num(d.unixMs));
    v.put("worker", d.worker == null ? JsonNull.INSTANCE : num(d.worker));
    v.put("business", opt(d, Part.BUSINESS));
    v.put("session_type", opt(d, Part.SESSION_TYPE));
    v.put("session_hash", opt(d, Part.SESSION_HASH));
    v.put("sequence", num(d.get(Part.SEQUENCE)));
    v.put("rand", d.has(Part.RAND) ? new JsonPrimitive(Long.toUnsignedString(d.get(Part.RAND)))
        : JsonNull.INSTANCE);
    v.put("layout", new JsonPrimitive(d.bits));
    v.put("range", new JsonPrimitive(d.range));
    return v;
  }

  public static JsonElement num(long v) {
    return new JsonPrimitive(new java.math.BigInteger(Long.toUnsignedString(v)));
  }

  public static JsonElement opt(Decoded d, Part p) {
    return d.has(p) ? num(d.get(p)) : JsonNull.INSTANCE;
  }

  /** JSON values compared as values (numbers by their decimal value). */
  public static boolean same(JsonElement want, JsonElement got) {
    if (want.isJsonPrimitive() && got.isJsonPrimitive()
        && want.getAsJsonPrimitive().isNumber() && got.getAsJsonPrimitive().isNumber()) {
      return want.getAsBigDecimal().compareTo(got.getAsBigDecimal()) == 0;
    }
    return want.equals(got);
  }

  /** Checks every vector; returns the mismatches (empty: all pass). Used by the runner too. */
  public static List<String> check(JsonObject v) {
    List<String> bad = new ArrayList<>();
    long now = v.get("now_ms").getAsLong();
    JsonObject layouts = v.getAsJsonObject("layouts");
    int decoded = 0;
    for (JsonElement e : v.getAsJsonArray("decode")) {
      JsonObject c = e.getAsJsonObject();
      String name = c.get("layout").getAsString();
      String input = c.get("input").getAsString();
      JsonObject l = layouts.getAsJsonObject(name);
      long at = l.has("load_at_ms") ? l.get("load_at_ms").getAsLong() : now;
      Layout layout;
      try {
        layout = spec(l.getAsJsonObject("spec")).load(at);
      } catch (IllegalArgumentException ex) {
        bad.add("layout " + name + ": " + ex.getMessage());
        continue;
      }
      decoded++;
      Decoded d;
      try {
        d = Decoder.decode(layout, input);
      } catch (IllegalArgumentException ex) {
        if (!c.has("error") || !c.get("error").getAsString().equals(ex.getMessage())) {
          bad.add(name + " \"" + input + "\": " + ex.getMessage()
              + (c.has("error") ? ", want error " + c.get("error") : ""));
        }
        continue;
      }
      if (c.has("error")) {
        bad.add(name + " \"" + input + "\": decoded, want error " + c.get("error"));
        continue;
      }
      Map<String, JsonElement> got = view(d);
      JsonObject expect = c.getAsJsonObject("expect");
      if (expect == null || expect.size() == 0) {
        bad.add(name + " \"" + input + "\": a vector without expectations");
        continue;
      }
      for (Map.Entry<String, JsonElement> x : expect.entrySet()) {
        JsonElement g = got.get(x.getKey());
        if (g == null) {
          bad.add(name + " \"" + input + "\": unknown field " + x.getKey());
        } else if (!same(x.getValue(), g)) {
          bad.add(name + " \"" + input + "\": " + x.getKey() + " is " + g + ", want "
              + x.getValue());
        }
      }
    }
    if (decoded < 30) {
      bad.add("only " + decoded + " decode vectors");
    }
    for (JsonElement e : v.getAsJsonArray("layout_errors")) {
      JsonObject c = e.getAsJsonObject();
      String want = c.get("error_contains").getAsString();
      try {
        spec(c.getAsJsonObject("spec")).load(c.get("load_at_ms").getAsLong());
        bad.add(c.get("spec") + ": loaded, want an error with \"" + want + "\"");
      } catch (IllegalArgumentException ex) {
        if (!ex.getMessage().contains(want)) {
          bad.add(c.get("spec") + ": " + ex.getMessage() + ", want an error with \"" + want + "\"");
        }
      }
    }
    for (JsonElement e : v.getAsJsonArray("session_hashes")) {
      JsonObject h = e.getAsJsonObject();
      long got = Ids.sessionHashOf(h.get("session_id").getAsString());
      if (got != h.get("hash").getAsLong()) {
        bad.add("session hash of " + h.get("session_id") + ": " + got + ", want " + h.get("hash"));
      }
    }
    return bad;
  }

}
