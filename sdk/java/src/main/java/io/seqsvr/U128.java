package io.seqsvr;

import java.math.BigInteger;

/**
 * An unsigned 128-bit number: an id of any scheme (the 64-bit ones in {@code lo} with {@code hi}
 * 0, rongcloud's 80 bits, uuidv7's 128). Ordered as the numbers compare. Immutable.
 */
public final class U128 implements Comparable<U128> {
  /** 0. */
  public static final U128 ZERO = new U128(0, 0);
  private static final BigInteger TWO_128 = BigInteger.ONE.shiftLeft(128);

  /** The high and low 64 bits, each unsigned. */
  public final long hi;
  public final long lo;

  /** The number hi·2^64 + lo (both unsigned). */
  public U128(long hi, long lo) {
    this.hi = hi;
    this.lo = lo;
  }

  /** The 64-bit id v (unsigned) as a U128. */
  public static U128 of(long v) {
    return new U128(0, v);
  }

  /** Reads 16 big-endian bytes (the RFC 9562 byte order of the wire's 128-bit ids). */
  public static U128 fromBytes(byte[] b, int off) {
    long hi = 0;
    long lo = 0;
    for (int i = 0; i < 8; i++) {
      hi = hi << 8 | (b[off + i] & 0xffL);
      lo = lo << 8 | (b[off + 8 + i] & 0xffL);
    }
    return new U128(hi, lo);
  }

  /** The id as 16 big-endian bytes. */
  public byte[] toBytes() {
    byte[] b = new byte[16];
    for (int i = 0; i < 8; i++) {
      b[7 - i] = (byte) (hi >>> (8 * i));
      b[15 - i] = (byte) (lo >>> (8 * i));
    }
    return b;
  }

  /** Whether this is 0. */
  public boolean isZero() {
    return hi == 0 && lo == 0;
  }

  /** this {@code >>>} n. */
  public U128 shr(int n) {
    if (n == 0) {
      return this;
    }
    if (n >= 128) {
      return ZERO;
    }
    if (n >= 64) {
      return new U128(0, hi >>> (n - 64));
    }
    return new U128(hi >>> n, lo >>> n | hi << (64 - n));
  }

  /** this {@code <<} n. */
  public U128 shl(int n) {
    if (n == 0) {
      return this;
    }
    if (n >= 128) {
      return ZERO;
    }
    if (n >= 64) {
      return new U128(lo << (n - 64), 0);
    }
    return new U128(hi << n | lo >>> (64 - n), lo << n);
  }

  /** this | v. */
  public U128 or(U128 v) {
    return new U128(hi | v.hi, lo | v.lo);
  }

  /** The number as a BigInteger. */
  public BigInteger toBigInteger() {
    BigInteger h = new BigInteger(Long.toUnsignedString(hi));
    return h.shiftLeft(64).or(new BigInteger(Long.toUnsignedString(lo)));
  }

  /** The number (below 2^128) as a U128. */
  public static U128 of(BigInteger n) {
    if (n.signum() < 0 || n.compareTo(TWO_128) >= 0) {
      throw new IllegalArgumentException("not below 2^128: " + n);
    }
    return new U128(n.shiftRight(64).longValue(), n.longValue());
  }

  /**
   * Reads a decimal number below 2^128 (digits only, with an optional leading '+', as Rust's
   * u128 parse takes them); null if it is not one.
   */
  public static U128 parse(String text) {
    String digits = text.startsWith("+") ? text.substring(1) : text;
    if (digits.isEmpty()) {
      return null;
    }
    for (int i = 0; i < digits.length(); i++) {
      char c = digits.charAt(i);
      if (c < '0' || c > '9') {
        return null;
      }
    }
    BigInteger n = new BigInteger(digits);
    if (n.bitLength() > 128) {
      return null;
    }
    return of(n);
  }

  @Override
  public int compareTo(U128 v) {
    int c = Long.compareUnsigned(hi, v.hi);
    return c != 0 ? c : Long.compareUnsigned(lo, v.lo);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof U128 && ((U128) o).hi == hi && ((U128) o).lo == lo;
  }

  @Override
  public int hashCode() {
    return Long.hashCode(hi) * 31 + Long.hashCode(lo);
  }

  /** The number in decimal. */
  @Override
  public String toString() {
    return hi == 0 ? Long.toUnsignedString(lo) : toBigInteger().toString();
  }

  /** "0x..." in lowercase hex, no leading zeros (Go's %#x). */
  public String toHex() {
    if (hi == 0) {
      return "0x" + Long.toHexString(lo);
    }
    return "0x" + Long.toHexString(hi) + String.format("%016x", lo);
  }
}
