package io.seqsvr;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.seqsvr.conformance.DecodeVectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.Test;

/**
 * The language-neutral decode vectors (tests/conformance/decode-vectors.json), as the Go SDK's
 * decode_test.go reads them: every vector decodes to its expected fields, or fails with exactly
 * its error; every layout error names its reason; every session hash matches.
 */
public class DecodeVectorsTest {
  static Path root() {
    return Path.of(System.getProperty("seqsvr.root", "../.."));
  }

  static JsonObject vectors() throws Exception {
    Path p = root().resolve("tests/conformance/decode-vectors.json");
    return JsonParser.parseString(Files.readString(p)).getAsJsonObject();
  }

  static List<String> check(JsonObject v) {
    return DecodeVectors.check(v);
  }

  @Test
  public void everyVectorDecodesAsTheRustDecoder() throws Exception {
    List<String> bad = check(vectors());
    assertTrue(String.join("\n", bad), bad.isEmpty());
  }

  /** The check is not vacuous: a vector changed by one field is caught. */
  @Test
  public void aWrongExpectationIsCaught() throws Exception {
    JsonObject v = vectors();
    JsonObject first = v.getAsJsonArray("decode").get(0).getAsJsonObject();
    first.getAsJsonObject("expect").addProperty("sequence", 4);
    List<String> bad = check(v);
    assertEquals(bad.toString(), 1, bad.size());
    assertTrue(bad.get(0), bad.get(0).contains("sequence is 3, want 4"));
  }

  @Test
  public void encodeIsTheInverseOfDecode() {
    Layout weibo = LayoutSpec.of("weibo").load(1_750_000_000_000L);
    Layout.Fields f = new Layout.Fields().set(Part.TIME, 54_763).set(Part.WORKER, 3)
        .set(Part.BUSINESS, 7).set(Part.SEQUENCE, 9);
    U128 id = weibo.encode(f);
    Decoded d = Decoder.decodeId(weibo, id);
    assertEquals(3L, (long) d.worker);
    assertEquals(7, d.get(Part.BUSINESS));
    assertEquals(9, d.get(Part.SEQUENCE));
    assertEquals(54_763, d.get(Part.TIME));
    try {
      weibo.encode(new Layout.Fields().set(Part.BUSINESS, 32));
      fail("business 32 fits in 5 bits?");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("does not fit in 5 bits"));
    }
    Layout uuid = LayoutSpec.of("uuidv7").load(1_750_000_000_000L);
    U128 u = uuid.encode(new Layout.Fields().set(Part.TIME, 1_645_557_742_000L)
        .set(Part.SEQUENCE, 0xcc3).set(Part.RAND, 0x18c4dc0c0c07398fL));
    assertEquals("017f22e2-79b0-7cc3-98c4-dc0c0c07398f", uuid.format(u));
    assertNotNull(Decoder.decode(uuid, "017F22E2-79B0-7CC3-98C4-DC0C0C07398F"));
  }
}
