package io.seqsvr;

import java.nio.charset.StandardCharsets;

/**
 * Pure decoding of ids of every scheme, without a server: it reads no clock and dials nothing.
 * Bit for bit the Rust decoder's ({@code seqctl id decode}); its error messages too. It passes
 * the language-neutral vectors of tests/conformance/decode-vectors.json.
 */
public final class Decoder {
  private Decoder() {}

  /** Rongcloud's base-32 alphabet: 2-9 and A-Z without I and O, in index (and ASCII) order. */
  public static final String RONGCLOUD_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
  /** How many low bits of a uuidv7 rand_b are random: the top 16 of its 62 carry the worker. */
  public static final int UUID_RANDOM_BITS = 46;
  /** 2^53 - 1, JavaScript's Number.MAX_SAFE_INTEGER: every js53 id is at most this. */
  public static final long JS_MAX_SAFE_INTEGER = (1L << 53) - 1;

  /**
   * Decodes {@code textOrId} in layout: the id's text form (decimal for the schemes held in 64
   * bits, 8-4-4-4-12 hex for uuidv7, XXXX-XXXX-XXXX-XXXX for rongcloud) or, for the wider
   * schemes, the id as a decimal number. Surrounding white space is ignored.
   *
   * @throws IllegalArgumentException saying why the text is not one of the layout's ids
   */
  public static Decoded decode(Layout layout, String textOrId) {
    String text = textOrId.strip();
    U128 id;
    try {
      id = parse(layout, text);
    } catch (IllegalArgumentException e) {
      boolean decimal = layout.idBits() > 64 && !text.isEmpty();
      for (int i = 0; i < text.length() && decimal; i++) {
        decimal = text.charAt(i) >= '0' && text.charAt(i) <= '9';
      }
      U128 n = decimal ? U128.parse(text) : null;
      if (n == null) {
        throw e;
      }
      id = n;
    }
    return decodeId(layout, id);
  }

  /** Decodes the id {@code id} in layout (checking its width and constant bits). */
  public static Decoded decodeId(Layout layout, U128 id) {
    Layout.Fields f = layout.decodeFields(id);
    String text = layout.format(id);
    long unixMs = layout.unixMs(f.get(Part.TIME));
    Long worker;
    switch (layout.scheme) {
      case LayoutSpec.UUIDV7:
        worker = f.get(Part.RAND) >>> UUID_RANDOM_BITS;
        break;
      case LayoutSpec.RONGCLOUD:
        worker = null;
        break;
      default:
        worker = f.get(Part.WORKER);
        break;
    }
    return new Decoded(layout.scheme, id, f, layout.unit, unixMs, worker, text, layout);
  }

  /** Decodes a 64-bit id (unsigned). */
  public static Decoded decodeId(Layout layout, long id) {
    return decodeId(layout, U128.of(id));
  }

  /**
   * Reads an id's text form (rongcloud and UUID letters in either case) and checks the id.
   *
   * @throws IllegalArgumentException saying why it is not one of the layout's ids
   */
  public static U128 parse(Layout layout, String text) {
    String why;
    U128 id = null;
    switch (layout.scheme) {
      case LayoutSpec.RONGCLOUD: {
        Object r = parseRongCloud(text);
        why = r instanceof String ? (String) r : null;
        id = r instanceof U128 ? (U128) r : null;
        break;
      }
      case LayoutSpec.UUIDV7: {
        Object r = parseUuid(text);
        why = r instanceof String ? (String) r : null;
        id = r instanceof U128 ? (U128) r : null;
        break;
      }
      default: {
        Object r = parseU64(text);
        why = r instanceof String ? (String) r : null;
        id = r instanceof Long ? U128.of((Long) r) : null;
        break;
      }
    }
    if (why != null) {
      throw new IllegalArgumentException(layout.scheme + ": cannot parse " + quote(text) + ": "
          + why);
    }
    layout.decodeFields(id);
    return id;
  }

  /** A decimal u64 as Rust's str::parse reads it (an optional '+', digits only), or why not. */
  private static Object parseU64(String text) {
    if (text.isEmpty()) {
      return "not a decimal u64 (cannot parse integer from empty string)";
    }
    String digits = text.startsWith("+") && text.length() > 1 ? text.substring(1) : text;
    for (int i = 0; i < digits.length(); i++) {
      char c = digits.charAt(i);
      if (c < '0' || c > '9') {
        return "not a decimal u64 (invalid digit found in string)";
      }
    }
    try {
      return Long.parseUnsignedLong(digits);
    } catch (NumberFormatException e) {
      return "not a decimal u64 (number too large to fit in target type)";
    }
  }

  private static int utf8Length(String s) {
    return s.getBytes(StandardCharsets.UTF_8).length;
  }

  private static Object parseRongCloud(String text) {
    int chars = text.codePointCount(0, text.length());
    if (utf8Length(text) != 19 || chars != 19) {
      return "expected 19 characters (4 groups of 4 joined by '-'), got " + chars;
    }
    U128 id = U128.ZERO;
    for (int i = 0; i < 19; i++) {
      char b = text.charAt(i);
      if (i % 5 == 4) {
        if (b != '-') {
          return "expected '-' at position " + (i + 1);
        }
        continue;
      }
      char upper = b >= 'a' && b <= 'z' ? (char) (b - ('a' - 'A')) : b;
      int index = RONGCLOUD_ALPHABET.indexOf(upper);
      if (index < 0) {
        return quoteChar(b) + " at position " + (i + 1) + " is not one of " + RONGCLOUD_ALPHABET
            + " (0, 1, I and O are left out)";
      }
      id = id.shl(5).or(U128.of(index));
    }
    return id;
  }

  private static Object parseUuid(String text) {
    int chars = text.codePointCount(0, text.length());
    if (utf8Length(text) != 36 || chars != 36) {
      return "expected 36 characters (8-4-4-4-12 hex digits), got " + chars;
    }
    U128 id = U128.ZERO;
    for (int i = 0; i < 36; i++) {
      char b = text.charAt(i);
      if (i == 8 || i == 13 || i == 18 || i == 23) {
        if (b != '-') {
          return "expected '-' at position " + (i + 1);
        }
        continue;
      }
      boolean hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
      int d = hex ? Character.digit(b, 16) : -1;
      if (d < 0) {
        return quoteChar(b) + " at position " + (i + 1) + " is not a hex digit";
      }
      id = id.shl(4).or(U128.of(d));
    }
    return id;
  }

  /** A string as Rust's {@code {:?}} writes it: in double quotes, with escapes. */
  static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    s.codePoints().forEach(c -> {
      if (c == '"') {
        b.append("\\\"");
      } else {
        escape(b, c);
      }
    });
    return b.append('"').toString();
  }

  /** A character as Rust's {@code {:?}} writes it: in single quotes, with escapes. */
  static String quoteChar(int c) {
    StringBuilder b = new StringBuilder("'");
    if (c == '\'') {
      b.append("\\'");
    } else {
      escape(b, c);
    }
    return b.append('\'').toString();
  }

  private static void escape(StringBuilder b, int c) {
    switch (c) {
      case '\\':
        b.append("\\\\");
        break;
      case '\n':
        b.append("\\n");
        break;
      case '\r':
        b.append("\\r");
        break;
      case '\t':
        b.append("\\t");
        break;
      case 0:
        b.append("\\0");
        break;
      default:
        if (Character.isISOControl(c)) {
          b.append("\\u{").append(Integer.toHexString(c)).append('}');
        } else {
          b.appendCodePoint(c);
        }
    }
  }

  private static final long MS_PER_DAY = 86_400_000L;

  /**
   * unixMs (unsigned) as RFC 3339 UTC with milliseconds, e.g. 2024-11-20T21:24:16.000Z (years
   * past 9999 with more digits), as the Rust decoder writes it.
   */
  public static String rfc3339Ms(long unixMs) {
    long days = Long.divideUnsigned(unixMs, MS_PER_DAY);
    long ms = Long.remainderUnsigned(unixMs, MS_PER_DAY);
    // H. Hinnant's civil_from_days
    long z = days + 719_468;
    long era = z / 146_097;
    long doe = z % 146_097;
    long yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long mp = (5 * doy + 2) / 153;
    long d = doy - (153 * mp + 2) / 5 + 1;
    long m = mp < 10 ? mp + 3 : mp - 9;
    long y = yoe + era * 400;
    if (m <= 2) {
      y++;
    }
    return String.format("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d, ms / 3_600_000,
        ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
  }
}
