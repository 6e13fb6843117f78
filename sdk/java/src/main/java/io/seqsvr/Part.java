package io.seqsvr;

/** One bit field of an id layout; sign, version and variant hold constants. */
public enum Part {
  SIGN("sign"),
  TIME("time"),
  WORKER("worker"),
  BUSINESS("business"),
  SESSION_TYPE("session type"),
  SESSION_HASH("session hash"),
  SEQUENCE("sequence"),
  VERSION("version"),
  VARIANT("variant"),
  RAND("rand_b");

  private final String text;

  Part(String text) {
    this.text = text;
  }

  /** The constant a part holds (sign 0, version 7, variant 0b10), or -1 for a field. */
  long constant() {
    switch (this) {
      case SIGN:
        return 0;
      case VERSION:
        return 7;
      case VARIANT:
        return 0b10;
      default:
        return -1;
    }
  }

  /** The name the Rust decoder gives the part (in layout texts and errors). */
  @Override
  public String toString() {
    return text;
  }
}
