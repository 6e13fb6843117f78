package io.seqsvr;

import static io.seqsvr.FakeAlloc.notOwner;
import static io.seqsvr.FakeAlloc.plaintext;
import static io.seqsvr.FakeAlloc.status;
import static io.seqsvr.FakeAlloc.table;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.Test;
import seqsvr.v1.Seq.NextIdsResponse;

/** Id calls: answer checks, round-robin, and rongcloud sessions sent to their owner. */
public class IdsTest {
  static ByteString be(long... ids) {
    ByteBuffer b = ByteBuffer.allocate(8 * ids.length);
    for (long id : ids) {
      b.putLong(id);
    }
    return ByteString.copyFrom(b.array());
  }

  @Test
  public void aMalformedIdsAnswerIsInternal() {
    ByteString z16 = ByteString.copyFrom(new byte[16]);
    List<NextIdsResponse> bad = List.of(
        NextIdsResponse.newBuilder().addIds(1).addIds(2).build(),
        NextIdsResponse.newBuilder().addIds(1).addIds(3).addIds(3).build(),
        NextIdsResponse.newBuilder().addIds(5).addIds(4).addIds(6).build(),
        NextIdsResponse.newBuilder().addIds128(z16).addIds128(ByteString.copyFrom(new byte[15]))
            .addIds128(z16).build(),
        NextIdsResponse.newBuilder().build(),
        NextIdsResponse.newBuilder().addIds(1).addIds(2).addIds(3).addIds128(z16).build(),
        NextIdsResponse.newBuilder().setIds128Packed(ByteString.copyFrom(new byte[47])).build(),
        NextIdsResponse.newBuilder().setIds64Packed(ByteString.copyFrom(new byte[23])).build(),
        NextIdsResponse.newBuilder().setIds64Packed(be(1, 3, 3)).build(),
        NextIdsResponse.newBuilder().setIds64Packed(be(3, 2, 1)).build(),
        NextIdsResponse.newBuilder().addIds(1).addIds(2).addIds(3).setIds64Packed(be(4, 5, 6))
            .build());
    for (int i = 0; i < bad.size(); i++) {
      try {
        Ids.of("x", bad.get(i), 3);
        fail("#" + i + " accepted");
      } catch (SeqsvrException e) {
        assertEquals("#" + i, Status.Code.INTERNAL, e.getCode());
      }
    }
    Ids good = Ids.of("x", NextIdsResponse.newBuilder().setIds64Packed(be(1, 2, 1L << 63))
        .setWorkerId(9).build(), 3);
    assertArrayEquals(new long[] {1, 2, 1L << 63}, good.u64());
    assertEquals("9223372036854775808", good.get(2).toString());
    assertEquals(9, good.workerId());
  }

  @Test
  public void idCallsSkipAFailingAllocSvr() throws Exception {
    try (FakeAlloc down = new FakeAlloc(); FakeAlloc up = new FakeAlloc()) {
      down.nextIds = req -> {
        throw status(Status.Code.UNAVAILABLE, "no worker id yet");
      };
      AtomicLong next = new AtomicLong(1);
      up.nextIds = req -> {
        if (!req.getScheme().equals("orders")) {
          throw status(Status.Code.NOT_FOUND, "no scheme");
        }
        assertTrue(req.getPackedIds64());
        NextIdsResponse.Builder out = NextIdsResponse.newBuilder().setWorkerId(3);
        long[] ids = new long[req.getCount()];
        for (int i = 0; i < ids.length; i++) {
          ids[i] = next.getAndIncrement();
        }
        return out.setIds64Packed(be(ids)).build();
      };
      down.table = table(0, 1, 0, 100, down.addr);
      try (SeqsvrClient c = plaintext(ClientOptions.builder(), down.addr, up.addr)) {
        List<Long> all = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
          Ids ids = c.nextIds("orders", 2);
          assertEquals(3, ids.workerId());
          for (long id : ids.u64()) {
            all.add(id);
          }
        }
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L), all);
        assertTrue("the failing one was asked in its turn", down.calls("NextIds") >= 1);
        int before = up.calls("NextIds");
        try {
          c.nextIds("nope", 1);
          fail();
        } catch (SeqsvrException e) {
          assertEquals(Status.Code.NOT_FOUND, e.getCode());
        }
        assertEquals(before + 1, up.calls("NextIds"));
        try {
          c.nextIds("orders", 0);
          fail();
        } catch (SeqsvrException e) {
          assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
        }
      }
    }
  }

  /**
   * A session call at an AllocSvr that does not own the session answers NOT_OWNER with the
   * session's uid and the route table; the client then asks the owner, and asks it directly the
   * next time.
   */
  @Test
  public void aSessionGoesToItsOwner() throws Exception {
    try (FakeAlloc a = new FakeAlloc(); FakeAlloc b = new FakeAlloc()) {
      // Sessions hash onto uids; this one is routed by uid 55 (section 5, owned by b).
      a.table = table(0, 3, 0, 5, a.addr, 5, 100, b.addr);
      a.nextIds = req -> {
        throw notOwner(a.table, 55L);
      };
      AtomicLong seq = new AtomicLong();
      b.nextIds = req -> {
        assertTrue(req.getSessionId().startsWith("group-"));
        ByteBuffer buf = ByteBuffer.allocate(16 * req.getCount());
        for (int i = 0; i < req.getCount(); i++) {
          buf.putLong(0).putLong(seq.incrementAndGet());
        }
        return NextIdsResponse.newBuilder().setIds128Packed(ByteString.copyFrom(buf.array()))
            .setSessionUid(55).build();
      };
      try (SeqsvrClient c = plaintext(ClientOptions.builder(), a.addr)) {
        Ids.Session s1 = Ids.Session.ofId(1, "group-42");
        Ids.Session s2 = Ids.Session.ofId(2, "group-43");
        assertEquals(2995340, s1.hash());
        // Round-robin starts one further each call: the first call is b's, the second a's.
        Ids first = c.nextSessionIds("chats", 2, s1);
        assertEquals(2, first.size());
        assertEquals(55, first.sessionUid());
        assertEquals(0, a.calls("NextIds"));
        Ids second = c.nextSessionIds("chats", 3, s2); // a: NOT_OWNER naming uid 55, then b
        assertEquals(1, a.calls("NextIds"));
        assertEquals(2, b.calls("NextIds"));
        assertTrue(second.get(0).compareTo(first.get(1)) > 0);
        c.nextSessionIds("chats", 1, s2);
        c.nextSessionIds("chats", 1, s1);
        assertEquals(1, a.calls("NextIds")); // straight to the owner now
        assertEquals(4, b.calls("NextIds"));
        try {
          c.nextSessionIds("chats", 1, Ids.Session.ofHash(16, 0));
          fail("session type 16");
        } catch (SeqsvrException e) {
          assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
        }
      }
    }
  }

  @Test
  public void sessionsSpreadOverTheirUidRange() {
    // Key k of [begin, end) goes to begin + k × (end - begin) / 2^26 (the AllocSvrs' rule), in
    // 128-bit arithmetic: checked against BigInteger, for ranges whose products pass 2^64.
    assertEquals(199, Ids.sessionUid(0, 200, Ids.SESSION_KEYS - 1));
    assertEquals(100, Ids.sessionUid(0, 200, 1L << 25));
    long[][] ranges = {{0, 4294900000L}, {1000, 1L << 62}, {5, -1L}};
    for (long[] r : ranges) {
      for (long key : new long[] {0, 1, 12345, 1L << 25, Ids.SESSION_KEYS - 1}) {
        java.math.BigInteger n = new java.math.BigInteger(Long.toUnsignedString(r[1] - r[0]));
        long want = r[0] + n.multiply(java.math.BigInteger.valueOf(key)).shiftRight(26)
            .longValue();
        assertEquals(want, Ids.sessionUid(r[0], r[1], key));
      }
    }
  }
}
