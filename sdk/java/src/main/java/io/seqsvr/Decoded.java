package io.seqsvr;

import java.util.List;

/** An id decoded without a server ({@link Decoder#decode}). Immutable. */
public final class Decoded {
  /** The scheme's name. */
  public final String scheme;
  /** The id as a number. */
  public final U128 id;
  /** The raw fields (0 for a part the scheme lacks: see {@link #has}). */
  public final Layout.Fields fields;
  /** The layout's time unit, "ms" or "s". */
  public final String unit;
  /** The Unix ms the id's time unit starts at. */
  public final long unixMs;
  /** unixMs as RFC 3339 text, e.g. 2024-11-20T21:24:16.000Z. */
  public final String timeRfc3339;
  /**
   * The worker id the id carries (uuidv7: the top 16 bits of rand_b); null for rongcloud, which
   * has none.
   */
  public final Long worker;
  /** The canonical text form. */
  public final String text;
  /** The bit fields, e.g. "sign 1 + time 41 + worker 10 + sequence 12". */
  public final String bits;
  /** The layout's epoch, RFC 3339. */
  public final String epochRfc3339;
  /** How long the layout's time field lasts ({@link Layout#describeRange}). */
  public final String range;
  private final List<Part> parts;

  Decoded(String scheme, U128 id, Layout.Fields fields, String unit, long unixMs, Long worker,
      String text, Layout layout) {
    this.scheme = scheme;
    this.id = id;
    this.fields = fields;
    this.unit = unit;
    this.unixMs = unixMs;
    this.timeRfc3339 = Decoder.rfc3339Ms(unixMs);
    this.worker = worker;
    this.text = text;
    this.bits = layout.bits();
    this.epochRfc3339 = Decoder.rfc3339Ms(layout.epochMs);
    this.range = layout.describeRange();
    this.parts = layout.parts();
  }

  /** Whether the id's scheme has part. */
  public boolean has(Part part) {
    return parts.contains(part);
  }

  /** The value of a field (unsigned; 0 for a part the scheme lacks). */
  public long get(Part part) {
    return fields.get(part);
  }

  /** The layout in one line, as the Decode RPC gives it: bits, unit and epoch, range. */
  public String layoutText() {
    return bits + "; " + unit + " since " + epochRfc3339 + "; " + range;
  }

  @Override
  public String toString() {
    return scheme + " " + text + " at " + timeRfc3339 + (worker == null ? "" : " worker " + worker);
  }
}
