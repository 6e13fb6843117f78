package io.seqsvr;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import java.util.Arrays;
import java.util.List;
import seqsvr.v1.Seq.NextIdsResponse;

/**
 * One {@code nextIds} or {@code nextSessionIds} answer: strictly increasing ids, all carrying
 * {@link #workerId()}. The 64-bit schemes (snowflake, uid-generator, weibo, js53) fill {@link
 * #u64()}, uuidv7 and rongcloud {@link #u128()}.
 */
public final class Ids {
  /** Rongcloud session types (4 bits). */
  public static final long SESSION_TYPES = 1L << 4;
  /** Rongcloud session hashes (22 bits). */
  public static final long SESSION_HASHES = 1L << 22;
  /** The number of (type, hash) keys: the default session uid range. */
  public static final long SESSION_KEYS = 1L << 26;

  private final long[] u64;
  private final U128[] u128;
  private final long workerId;
  private final long sessionUid;

  Ids(long[] u64, U128[] u128, long workerId, long sessionUid) {
    this.u64 = u64;
    this.u128 = u128;
    this.workerId = workerId;
    this.sessionUid = sessionUid;
  }

  /** The ids of the 64-bit schemes (unsigned; empty for uuidv7 and rongcloud). */
  public long[] u64() {
    return u64.clone();
  }

  /** The ids of uuidv7 and rongcloud (empty for the 64-bit schemes). */
  public List<U128> u128() {
    return List.of(u128);
  }

  /** How many ids the answer holds. */
  public int size() {
    return u64.length + u128.length;
  }

  /** Id n as a U128 (either width). */
  public U128 get(int n) {
    return u64.length > 0 ? U128.of(u64[n]) : u128[n];
  }

  /** The worker id every id carries (0 for rongcloud). */
  public long workerId() {
    return workerId;
  }

  /** For rongcloud: the uid the session is routed by. */
  public long sessionUid() {
    return sessionUid;
  }

  @Override
  public String toString() {
    return (u64.length > 0 ? Arrays.toString(Arrays.stream(u64).mapToObj(Long::toUnsignedString)
        .toArray()) : Arrays.toString(u128)) + " worker " + workerId;
  }

  /**
   * A NextIds answer checked against what was asked and what the service promises: count ids,
   * all of one width, strictly increasing. Anything else is a server bug (INTERNAL), never handed
   * on: a repeated or reordered id could be handed out twice.
   */
  static Ids of(String addr, NextIdsResponse r, int count) {
    int n64 = r.getIdsCount() + (r.getIds64Packed().size() + 7) / 8;
    int n128 = r.getIds128Count() + (r.getIds128Packed().size() + 15) / 16;
    long[] u64 = new long[0];
    U128[] u128 = new U128[0];
    if (n64 > 0 && n128 > 0) {
      throw bad(addr, "both 64-bit and 128-bit ids");
    } else if (n64 == 0 && n128 == 0) {
      throw bad(addr, "no ids for a count of " + count);
    } else if (n64 > 0) {
      ByteString packed = r.getIds64Packed();
      if (packed.isEmpty()) {
        u64 = r.getIdsList().stream().mapToLong(Long::longValue).toArray();
      } else if (r.getIdsCount() > 0) {
        throw bad(addr, "both ids and ids64_packed hold ids");
      } else if (packed.size() % 8 != 0) {
        throw bad(addr, "ids64_packed has " + packed.size() + " bytes, not a multiple of 8");
      } else {
        u64 = new long[packed.size() / 8];
        java.nio.ByteBuffer buf = packed.asReadOnlyByteBuffer();
        for (int i = 0; i < u64.length; i++) {
          u64[i] = buf.getLong();
        }
      }
    } else {
      ByteString packed = r.getIds128Packed();
      if (packed.isEmpty()) {
        u128 = new U128[r.getIds128Count()];
        for (int i = 0; i < u128.length; i++) {
          ByteString raw = r.getIds128(i);
          if (raw.size() != 16) {
            throw bad(addr, "ids128[" + i + "] has " + raw.size() + " bytes, not 16");
          }
          u128[i] = U128.fromBytes(raw.toByteArray(), 0);
        }
      } else if (r.getIds128Count() > 0) {
        throw bad(addr, "both ids128 and ids128_packed hold ids");
      } else if (packed.size() % 16 != 0) {
        throw bad(addr, "ids128_packed has " + packed.size() + " bytes, not a multiple of 16");
      } else {
        byte[] all = packed.toByteArray();
        u128 = new U128[all.length / 16];
        for (int i = 0; i < u128.length; i++) {
          u128[i] = U128.fromBytes(all, 16 * i);
        }
      }
    }
    Ids ids = new Ids(u64, u128, r.getWorkerId(), r.getSessionUid());
    if (ids.size() != count) {
      throw bad(addr, ids.size() + " ids for a count of " + count);
    }
    for (int i = 1; i < ids.size(); i++) {
      if (ids.get(i).compareTo(ids.get(i - 1)) <= 0) {
        throw bad(addr, "id #" + i + " (" + ids.get(i) + ") is not above the one before it ("
            + ids.get(i - 1) + ")");
      }
    }
    return ids;
  }

  private static SeqsvrException bad(String addr, String why) {
    return SeqsvrException.of(Status.Code.INTERNAL, "", "%s answered NextIds wrongly: %s", addr,
        why);
  }

  /**
   * The 22-bit session hash of a rongcloud session id: the low 22 bits of Java's {@code
   * String.hashCode()} of it, as the AllocSvrs compute it.
   */
  public static long sessionHashOf(String sessionId) {
    return Integer.toUnsignedLong(sessionId.hashCode()) & (SESSION_HASHES - 1);
  }

  /**
   * A rongcloud session: its type (0..=15) and its id, as text (hashed as the AllocSvrs hash it:
   * {@link #sessionHashOf}) or as the 22-bit hash itself.
   */
  public static final class Session {
    final int type;
    final String id;
    final long hash;

    private Session(int type, String id, long hash) {
      this.type = type;
      this.id = id;
      this.hash = hash;
    }

    /** A session by its id (text). */
    public static Session ofId(int type, String id) {
      return new Session(type, id, sessionHashOf(id));
    }

    /** A session by its 22-bit hash. */
    public static Session ofHash(int type, long hash) {
      return new Session(type, null, hash);
    }

    /** The session type. */
    public int type() {
      return type;
    }

    /** The session's 22-bit hash. */
    public long hash() {
      return hash;
    }

    /** type << 22 | hash; INVALID_ARGUMENT if either does not fit. */
    long key() {
      if (type < 0 || type >= SESSION_TYPES || hash < 0 || hash >= SESSION_HASHES) {
        throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "",
            "session type %d and hash %d must be below %d and %d", type, hash, SESSION_TYPES,
            SESSION_HASHES);
      }
      return (long) type << 22 | hash;
    }
  }

  /**
   * The uid whose section's owner issues session key's ids: keys scaled onto [begin, end) in
   * order, begin + key × (end - begin) / 2^26 (the AllocSvrs' rule).
   */
  static long sessionUid(long begin, long end, long key) {
    long n = end - begin;
    long hi = unsignedMultiplyHigh(key, n);
    long lo = key * n;
    return begin + (hi << (64 - 26) | lo >>> 26);
  }

  /** The high 64 bits of the unsigned 128-bit product (Math.unsignedMultiplyHigh is JDK 18). */
  static long unsignedMultiplyHigh(long a, long b) {
    return Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
  }
}
