package io.seqsvr;

import java.util.ArrayList;
import java.util.List;

/**
 * An id layout as the cluster config writes it ({@code [ids.schemes.NAME]}); null fields take
 * the scheme's defaults. Only uid-generator and js53 take widths; uuidv7 takes no epoch or
 * unit. The schemes (the Rust decoder's layouts, crates/seqsvr-core/src/idscheme.rs, bit for
 * bit; most significant bits first):
 *
 * <ul>
 *   <li>snowflake: 1 sign + 41-bit ms + 10-bit worker + 12-bit sequence, from
 *       2010-11-04T01:42:54.657Z.
 *   <li>uid-generator (Baidu): 1 sign + 28-bit seconds + 22-bit worker + 13-bit sequence from
 *       2016-05-20 by default, widths and epoch configurable (its default ran out on 2024-11-20).
 *   <li>weibo: 1 sign + 41-bit ms + 5-bit server (the worker) + 5-bit business + 12-bit
 *       sequence, from 2021-11-12.
 *   <li>rongcloud: 80 bits = 42-bit Unix ms + 12-bit sequence + 4-bit session type + 22-bit
 *       session hash, written XXXX-XXXX-XXXX-XXXX in a base-32 alphabet without 0, 1, I and O.
 *   <li>uuidv7 (RFC 9562): 48-bit Unix ms + version 7 + 12-bit counter + variant 0b10 + 62-bit
 *       rand_b whose top 16 bits are the worker id.
 *   <li>js53: 53 bits = 41-bit ms + 5-bit worker + 7-bit sequence from 2025-01-01 by default
 *       (widths summing to 53, unit and epoch configurable): never above 2^53 - 1.
 * </ul>
 */
public final class LayoutSpec {
  /** The scheme names. */
  public static final String SNOWFLAKE = "snowflake";
  public static final String UID_GENERATOR = "uid-generator";
  public static final String WEIBO = "weibo";
  public static final String RONGCLOUD = "rongcloud";
  public static final String UUIDV7 = "uuidv7";
  public static final String JS53 = "js53";

  /** Epochs (ms since the Unix epoch) of the schemes' defaults. */
  public static final long TWITTER_EPOCH_MS = 1_288_834_974_657L;
  public static final long UID_GENERATOR_EPOCH_MS = 1_463_702_400_000L;
  public static final long WEIBO_EPOCH_MS = 1_636_675_200_000L;
  public static final long JS53_EPOCH_MS = 1_735_689_600_000L;

  final String scheme;
  final Long epochMs;
  final String unit;
  final Integer timeBits;
  final Integer workerBits;
  final Integer seqBits;

  /** A layout as written; nulls take the defaults. unit is "ms" or "s". */
  public LayoutSpec(String scheme, Long epochMs, String unit, Integer timeBits,
      Integer workerBits, Integer seqBits) {
    this.scheme = scheme;
    this.epochMs = epochMs;
    this.unit = unit;
    this.timeBits = timeBits;
    this.workerBits = workerBits;
    this.seqBits = seqBits;
  }

  /** The scheme with all its defaults. */
  public static LayoutSpec of(String scheme) {
    return new LayoutSpec(scheme, null, null, null, null, null);
  }

  /** The scheme's name. */
  public String scheme() {
    return scheme;
  }

  /** How many bits an id of the scheme has (0 for an unknown scheme). */
  static int idBits(String scheme) {
    if (scheme == null) {
      return 0;
    }
    switch (scheme) {
      case SNOWFLAKE:
      case UID_GENERATOR:
      case WEIBO:
        return 64;
      case JS53:
        return 53;
      case RONGCLOUD:
        return 80;
      case UUIDV7:
        return 128;
      default:
        return 0;
    }
  }

  /**
   * Fills in the defaults and validates the layout at nowMs (ms since the Unix epoch), as the
   * AllocSvrs load it: widths summing to the id's size, time and sequence at least one bit, the
   * epoch not in the future and the time field not run out.
   *
   * @throws IllegalArgumentException saying why the layout is refused (the Rust decoder's words)
   */
  public Layout load(long nowMs) {
    Layout l = build();
    l.check(nowMs);
    return l;
  }

  /** Validates everything but the time range (a layout that ran out still decodes). */
  public Layout loadShape() {
    Layout l = build();
    l.check(l.epochMs);
    return l;
  }

  private static int widthOr(Integer w, int dflt) {
    return w == null ? dflt : w;
  }

  Layout build() {
    boolean custom = timeBits != null || workerBits != null || seqBits != null;
    boolean takesWidths = UID_GENERATOR.equals(scheme) || JS53.equals(scheme);
    if (idBits(scheme) == 0) {
      throw new IllegalArgumentException("unknown id scheme " + Decoder.quote(String.valueOf(
          scheme)) + ": expected one of snowflake, uid-generator, weibo, rongcloud, uuidv7, js53");
    }
    if (custom && !takesWidths) {
      throw new IllegalArgumentException(scheme + "'s widths are fixed; only uid-generator and "
          + "js53 take time_bits, worker_bits and seq_bits");
    }
    boolean emptyUnit = unit == null || unit.isEmpty();
    if (!emptyUnit && !unit.equals("ms") && !unit.equals("s")) {
      throw new IllegalArgumentException("unknown time unit " + Decoder.quote(unit) + ": ms or s");
    }
    long epoch = 0;
    String u = "ms";
    List<Layout.PartWidth> parts = new ArrayList<>();
    switch (scheme) {
      case SNOWFLAKE:
        epoch = TWITTER_EPOCH_MS;
        parts.add(new Layout.PartWidth(Part.SIGN, 1));
        parts.add(new Layout.PartWidth(Part.TIME, 41));
        parts.add(new Layout.PartWidth(Part.WORKER, 10));
        parts.add(new Layout.PartWidth(Part.SEQUENCE, 12));
        break;
      case UID_GENERATOR:
        epoch = UID_GENERATOR_EPOCH_MS;
        u = "s";
        parts.add(new Layout.PartWidth(Part.SIGN, 1));
        parts.add(new Layout.PartWidth(Part.TIME, widthOr(timeBits, 28)));
        parts.add(new Layout.PartWidth(Part.WORKER, widthOr(workerBits, 22)));
        parts.add(new Layout.PartWidth(Part.SEQUENCE, widthOr(seqBits, 13)));
        break;
      case JS53:
        epoch = JS53_EPOCH_MS;
        parts.add(new Layout.PartWidth(Part.TIME, widthOr(timeBits, 41)));
        parts.add(new Layout.PartWidth(Part.WORKER, widthOr(workerBits, 5)));
        parts.add(new Layout.PartWidth(Part.SEQUENCE, widthOr(seqBits, 7)));
        break;
      case WEIBO:
        epoch = WEIBO_EPOCH_MS;
        parts.add(new Layout.PartWidth(Part.SIGN, 1));
        parts.add(new Layout.PartWidth(Part.TIME, 41));
        parts.add(new Layout.PartWidth(Part.WORKER, 5));
        parts.add(new Layout.PartWidth(Part.BUSINESS, 5));
        parts.add(new Layout.PartWidth(Part.SEQUENCE, 12));
        break;
      case RONGCLOUD:
        parts.add(new Layout.PartWidth(Part.TIME, 42));
        parts.add(new Layout.PartWidth(Part.SEQUENCE, 12));
        parts.add(new Layout.PartWidth(Part.SESSION_TYPE, 4));
        parts.add(new Layout.PartWidth(Part.SESSION_HASH, 22));
        break;
      case UUIDV7:
        if ((epochMs != null && epochMs != 0) || (!emptyUnit && !unit.equals("ms"))) {
          throw new IllegalArgumentException(
              "uuidv7's epoch (the Unix epoch) and unit (ms) are fixed by RFC 9562 §5.7");
        }
        parts.add(new Layout.PartWidth(Part.TIME, 48));
        parts.add(new Layout.PartWidth(Part.VERSION, 4));
        parts.add(new Layout.PartWidth(Part.SEQUENCE, 12));
        parts.add(new Layout.PartWidth(Part.VARIANT, 2));
        parts.add(new Layout.PartWidth(Part.RAND, 62));
        break;
      default:
        throw new IllegalStateException(scheme);
    }
    if (epochMs != null) {
      epoch = epochMs;
    }
    if (!emptyUnit) {
      u = unit;
    }
    return new Layout(scheme, epoch, u, parts);
  }
}
