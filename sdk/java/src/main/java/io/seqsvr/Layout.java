package io.seqsvr;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

/**
 * A validated id layout (from {@link LayoutSpec#load} or {@link ClusterFile#layout}): a scheme,
 * its epoch and time unit, and its bit fields, most significant first. Immutable.
 */
public final class Layout {
  static final class PartWidth {
    final Part part;
    final int width;

    PartWidth(Part part, int width) {
      this.part = part;
      this.width = width;
    }
  }

  final String scheme;
  final long epochMs;
  final String unit;
  final List<PartWidth> parts;

  Layout(String scheme, long epochMs, String unit, List<PartWidth> parts) {
    this.scheme = scheme;
    this.epochMs = epochMs;
    this.unit = unit;
    this.parts = Collections.unmodifiableList(new ArrayList<>(parts));
  }

  /** The scheme's name (snowflake, uid-generator, weibo, rongcloud, uuidv7, js53). */
  public String scheme() {
    return scheme;
  }

  /** The epoch, ms since the Unix epoch. */
  public long epochMs() {
    return epochMs;
  }

  /** The time unit: "ms" or "s". */
  public String unit() {
    return unit;
  }

  /** How many bits the scheme's ids have. */
  public int idBits() {
    return LayoutSpec.idBits(scheme);
  }

  private long unitMs() {
    return unit.equals("s") ? 1000 : 1;
  }

  /** The bit fields, most significant first. */
  public List<Part> parts() {
    List<Part> out = new ArrayList<>();
    for (PartWidth p : parts) {
      out.add(p.part);
    }
    return out;
  }

  /** The width of part (0 if the scheme has none). */
  public int width(Part part) {
    for (PartWidth p : parts) {
      if (p.part == part) {
        return p.width;
      }
    }
    return 0;
  }

  static long maxOf(int width) {
    return width >= 64 ? -1L : (1L << width) - 1;
  }

  /** The last time unit the layout can hold (unsigned). */
  public long maxTime() {
    return maxOf(width(Part.TIME));
  }

  /** The Unix ms at which time unit {@code units} (unsigned) begins, saturating at 2^64 - 1. */
  public long unixMs(long units) {
    long hi = Ids.unsignedMultiplyHigh(units, unitMs());
    if (hi != 0) {
      return -1L;
    }
    long lo = units * unitMs();
    long sum = lo + epochMs;
    if (Long.compareUnsigned(sum, lo) < 0) {
      return -1L;
    }
    return sum;
  }

  /** The first Unix ms the time field cannot hold (2^64 - 1 if beyond it). */
  public long runsOutAtMs() {
    // (max_time + 1) * unit + epoch, in 128 bits.
    long t = maxTime();
    long hi = Ids.unsignedMultiplyHigh(t, unitMs());
    long lo = t * unitMs();
    long s = lo + unitMs();
    if (Long.compareUnsigned(s, lo) < 0) {
      hi++;
    }
    lo = s;
    s = lo + epochMs;
    if (Long.compareUnsigned(s, lo) < 0) {
      hi++;
    }
    lo = s;
    return hi != 0 ? -1L : lo;
  }

  private static final double MS_PER_YEAR = 365.2425 * 86_400_000.0;

  private static double unsignedToDouble(long v) {
    double d = (double) (v >>> 1) * 2.0 + (v & 1);
    return v >= 0 ? (double) v : d;
  }

  /** How many years the time field lasts from the epoch. */
  public double lifetimeYears() {
    return (unsignedToDouble(maxTime()) + 1.0) * (double) unitMs() / MS_PER_YEAR;
  }

  /** x with one decimal, rounded from its exact value as Rust's and Go's {@code %.1f} do. */
  static String oneDecimal(double x) {
    return new BigDecimal(x).setScale(1, RoundingMode.HALF_EVEN).toPlainString();
  }

  /**
   * E.g. "lasts 69.7 years from 2010-11-04T01:42:54.657Z, until 2080-07-10T17:30:30.209Z".
   */
  public String describeRange() {
    return "lasts " + oneDecimal(lifetimeYears()) + " years from " + Decoder.rfc3339Ms(epochMs)
        + ", until " + Decoder.rfc3339Ms(runsOutAtMs());
  }

  /** The bit fields in one line, e.g. "sign 1 + time 41 + worker 10 + sequence 12". */
  public String bits() {
    List<String> texts = new ArrayList<>();
    for (PartWidth p : parts) {
      texts.add(p.part + " " + p.width);
    }
    return String.join(" + ", texts);
  }

  void check(long nowMs) {
    long sum = 0;
    for (PartWidth p : parts) {
      sum += p.width;
    }
    if (sum != idBits()) {
      if (scheme.equals(LayoutSpec.JS53)) {
        throw new IllegalArgumentException("js53: the widths (" + bits() + ") sum to " + sum
            + " bits, but its ids have exactly 53 so that none ever exceeds 2^53 - 1 = "
            + "9007199254740991 (JavaScript's Number.MAX_SAFE_INTEGER) in the layout's whole "
            + "life; choose time_bits + worker_bits + seq_bits = 53");
      }
      throw new IllegalArgumentException(scheme + ": the widths (" + bits() + ") sum to " + sum
          + " bits, but its ids have " + idBits());
    }
    for (Part p : new Part[] {Part.TIME, Part.SEQUENCE}) {
      if (width(p) == 0) {
        throw new IllegalArgumentException(scheme + ": the " + p + " field needs at least 1 bit");
      }
    }
    if (Long.compareUnsigned(epochMs, nowMs) > 0) {
      throw new IllegalArgumentException(scheme + ": the epoch " + Decoder.rfc3339Ms(epochMs)
          + " is in the future (now is " + Decoder.rfc3339Ms(nowMs) + ")");
    }
    if (Long.compareUnsigned(nowMs, runsOutAtMs()) >= 0) {
      throw new IllegalArgumentException(scheme + ": " + width(Part.TIME) + " bits of " + unit
          + " from " + Decoder.rfc3339Ms(epochMs) + " last " + oneDecimal(lifetimeYears())
          + " years and ran out at " + Decoder.rfc3339Ms(runsOutAtMs()) + " (now is "
          + Decoder.rfc3339Ms(nowMs) + "); choose a later epoch or more time bits");
    }
  }

  /** The variable parts of one id (a part the layout lacks is 0). */
  public static final class Fields {
    final Map<Part, Long> values = new EnumMap<>(Part.class);

    /** The value of part (unsigned; 0 if absent). */
    public long get(Part part) {
      Long v = values.get(part);
      return v == null ? 0 : v;
    }

    /** Sets part to v; returns this. */
    public Fields set(Part part, long v) {
      values.put(part, v);
      return this;
    }
  }

  /** Packs fields into an id; a part the layout lacks must be 0 and each must fit. */
  public U128 encode(Fields f) {
    for (Map.Entry<Part, Long> e : f.values.entrySet()) {
      Part p = e.getKey();
      long v = e.getValue();
      if (p.constant() >= 0) {
        continue;
      }
      int w = width(p);
      if (w == 0 && v != 0) {
        throw new IllegalArgumentException(scheme + " has no " + p + " field, but it was given as "
            + Long.toUnsignedString(v) + " (must be 0)");
      }
      if (Long.compareUnsigned(v, maxOf(w)) > 0) {
        throw new IllegalArgumentException(scheme + ": " + p + " " + Long.toUnsignedString(v)
            + " does not fit in " + w + " bits (at most " + Long.toUnsignedString(maxOf(w)) + ")");
      }
    }
    U128 id = U128.ZERO;
    for (PartWidth p : parts) {
      long v = p.part.constant() >= 0 ? p.part.constant() : f.get(p.part);
      id = id.shl(p.width).or(U128.of(v));
    }
    return id;
  }

  /**
   * Unpacks an id, checking its width and its constant bits (sign, UUID version and variant).
   */
  public Fields decodeFields(U128 id) {
    int width = idBits();
    if (width < 128 && !id.shr(width).isZero()) {
      throw new IllegalArgumentException(scheme + ": " + id.toHex() + " has more than " + width
          + " bits");
    }
    Fields f = new Fields();
    U128 rest = id;
    for (int i = parts.size() - 1; i >= 0; i--) {
      PartWidth p = parts.get(i);
      long v = rest.lo & maxOf(p.width);
      rest = rest.shr(p.width);
      long expected = p.part.constant();
      if (expected >= 0) {
        if (v != expected) {
          throw new IllegalArgumentException(scheme + ": the " + p.part + " bits are 0b"
              + Long.toBinaryString(v) + ", expected 0b" + Long.toBinaryString(expected));
        }
        continue;
      }
      f.set(p.part, v);
    }
    return f;
  }

  /**
   * An id's text form: decimal for the schemes held in 64 bits, the canonical 8-4-4-4-12
   * lowercase form for uuidv7, XXXX-XXXX-XXXX-XXXX for rongcloud. Checks the id as {@link
   * #decodeFields} does.
   */
  public String format(U128 id) {
    decodeFields(id);
    switch (scheme) {
      case LayoutSpec.RONGCLOUD: {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < 16; i++) {
          if (i > 0 && i % 4 == 0) {
            b.append('-');
          }
          b.append(Decoder.RONGCLOUD_ALPHABET.charAt((int) (id.shr(75 - 5 * i).lo & 0x1f)));
        }
        return b.toString();
      }
      case LayoutSpec.UUIDV7: {
        String hex = String.format("%016x%016x", id.hi, id.lo);
        return hex.substring(0, 8) + "-" + hex.substring(8, 12) + "-" + hex.substring(12, 16)
            + "-" + hex.substring(16, 20) + "-" + hex.substring(20, 32);
      }
      default:
        return id.toString();
    }
  }

  @Override
  public String toString() {
    return bits() + "; " + unit + " since " + Decoder.rfc3339Ms(epochMs) + "; " + describeRange();
  }
}
