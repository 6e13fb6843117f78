package io.seqsvr;

import static io.seqsvr.FakeAlloc.table;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.BeforeClass;
import org.junit.Test;
import seqsvr.v1.Seq.NextResponse;

/**
 * Mutual TLS as the Rust and Go SDKs dial: the AllocSvr's certificate must chain to the CA and
 * name alloc.&lt;server_name&gt;; the server requires the client's certificate. Another server
 * name, a client certificate of another CA and a plaintext client are each refused. Over the
 * JDK's TLS with ALPN h2, as against the real servers.
 */
public class TlsTest {
  static TestPki pki;

  @BeforeClass
  public static void makePki() throws Exception {
    pki = new TestPki().ca("ca").ca("other")
        .issue("ca", "alloc", "alloc.seqsvr", false)
        .issue("ca", "client", null, false)
        .issue("ca", "client-sec1", null, true)
        .issue("other", "stranger", null, false);
  }

  private static TlsFiles files(String serverName, String cert) {
    return new TlsFiles(serverName, pki.file(cert + ".pem"), pki.file(cert + ".key"),
        pki.file("ca.pem"));
  }

  private static SeqsvrException connect(FakeAlloc f, ClientOptions.Builder b) {
    try (SeqsvrClient c = SeqsvrClient.connect(b.seeds(f.addr).build(), Duration.ofSeconds(3))) {
      assertEquals(5, c.next(3, Duration.ofSeconds(2)));
      return null;
    } catch (SeqsvrException e) {
      return e;
    }
  }

  @Test
  public void mutualTlsChecksTheAllocServerName() throws Exception {
    try (FakeAlloc f = new FakeAlloc(TlsFiles.serverContext(pki.file("alloc.pem"),
        pki.file("alloc.key"), pki.file("ca.pem")))) {
      f.table = table(0, 1, 0, 100, f.addr);
      f.nextBatch = req -> seqsvr.v1.Seq.NextBatchResponse.newBuilder().addSeqs(5).build();
      f.next = req -> NextResponse.newBuilder().setSeq(5).build();
      SeqsvrException e = connect(f, ClientOptions.builder().tls(files("seqsvr", "client")));
      assertEquals("the right identity and name: " + e, null, e);
      e = connect(f, ClientOptions.builder().tls(files("seqsvr", "client-sec1")));
      assertEquals("a SEC1 key: " + e, null, e);
      e = connect(f, ClientOptions.builder().tls(files("other", "client")));
      assertNotNull("a server without alloc.other was accepted", e);
      assertEquals(Status.Code.UNAVAILABLE, e.getCode());
      int before = f.calls("Next") + f.calls("NextBatch");
      e = connect(f, ClientOptions.builder().tls(files("seqsvr", "stranger")));
      assertNotNull("a client certificate of another CA got an answer", e);
      e = connect(f, ClientOptions.builder().plaintext(true));
      assertNotNull("a plaintext client got an answer from a TLS server", e);
      assertEquals(before, f.calls("Next") + f.calls("NextBatch"));
      TlsFiles missing = new TlsFiles("seqsvr", pki.file("client.pem"), pki.file("none.key"),
          pki.file("ca.pem"));
      e = connect(f, ClientOptions.builder().tls(missing));
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
      e = connect(f, ClientOptions.builder().tls(files("seqsvr", "client")).plaintext(true));
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
    }
  }

  /**
   * A rotated identity is picked up at the next handshake: the key manager reads the files again
   * once they changed; a half-done rotation (a certificate that does not parse) keeps the old.
   */
  @Test
  public void aRotatedCertificateIsReadAgain() throws Exception {
    Path dir = Files.createTempDirectory("seqsvr-rotate");
    Path cert = dir.resolve("c.pem");
    Path key = dir.resolve("c.key");
    Files.copy(pki.file("client.pem"), cert);
    Files.copy(pki.file("client.key"), key);
    TlsFiles.ReloadingKeyManager km = new TlsFiles.ReloadingKeyManager(cert, key);
    km.current();
    String first = km.getCertificateChain("x")[0].getSubjectX500Principal().getName();
    assertEquals("CN=client", first);
    Files.writeString(cert, "not a certificate");
    km.chooseEngineClientAlias(new String[] {"EC"}, null, null);
    assertEquals("CN=client", km.getCertificateChain("x")[0].getSubjectX500Principal().getName());
    Files.copy(pki.file("stranger.pem"), cert, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    Files.copy(pki.file("stranger.key"), key, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    FakeAlloc.eventually("the new identity", () -> {
      km.chooseEngineClientAlias(new String[] {"EC"}, null, null);
      return km.getCertificateChain("x")[0].getSubjectX500Principal().getName()
          .equals("CN=stranger");
    });
  }

  @Test
  public void theClusterFileGivesSeedsAndTls() throws Exception {
    String text = String.join("\n",
        "section_size = 100000 # uids per section",
        "[[sets]]", "id = 0", "uid_begin = 0", "uid_end = 100",
        "stores = [{ id = 1, addr = \"127.0.0.1:7101\" }]",
        "allocs = [\"a:1\", \"b:1\"]",
        "[[sets]]", "id = 1", "uid_begin = 100", "uid_end = 200",
        "stores = [", "  { id = 1, addr = \"127.0.0.1:7111\" },", "]",
        "allocs = [\"c:1\", \"a:1\"]",
        "[ids]", "max_count = 100_000",
        "[ids.schemes.orders]", "scheme = \"snowflake\"",
        "[ids.schemes.chats]", "scheme = \"rongcloud\"", "session_uid_begin = 0",
        "session_uid_end = 200",
        "[ids.schemes.u]", "scheme = 'uid-generator'", "epoch_ms = 1735689600000",
        "time_bits = 30", "worker_bits = 20", "seq_bits = 13",
        "[tls]", "server_name = \"seqsvr\"", "client_ca = \"certs/client-bundle.pem\"",
        "store_ca = \"certs/cluster-ca.pem\"", "peer_ca = \"certs/cluster-ca.pem\"",
        "[tls.identities]", "\"alloc-0-1\" = { role = \"alloc\", set = 0 }",
        "\"admin\" = \"admin\"", "");
    Path dir = Files.createTempDirectory("seqsvr-cluster");
    Path file = dir.resolve("cluster.toml");
    Files.writeString(file, text);
    ClusterFile f = ClusterFile.load(file);
    assertEquals(100000, f.sectionSize());
    assertEquals(List.of("a:1", "b:1", "c:1"), f.seeds());
    assertEquals(1, f.setOf(150).id);
    assertEquals(null, f.setOf(200));
    assertEquals(100000, f.ids().maxCount);
    ClientOptions o = f.options("c.pem", "c.key").build();
    assertEquals(List.of("a:1", "b:1", "c:1"), o.seeds());
    assertEquals("alloc.seqsvr", o.tls.allocServerName());
    assertEquals(dir.resolve("certs/cluster-ca.pem"), o.tls.caFile);
    assertFalse(o.plaintext);
    assertEquals("snowflake", f.layout("orders", 1_750_000_000_000L).scheme());
    assertEquals(30, f.layout("u", 1_750_000_000_000L).width(Part.TIME));
    try {
      f.layout("nope", 1_750_000_000_000L);
      fail();
    } catch (SeqsvrException e) {
      assertEquals(Status.Code.NOT_FOUND, e.getCode());
    }
    Path plain = dir.resolve("plain.toml");
    Files.writeString(plain, "[[sets]]\nid = 0\nallocs = [\"x:1\"]\n");
    ClusterFile p = ClusterFile.load(plain);
    try {
      p.options("c.pem", "c.key");
      fail("a file without [tls] gave TLS options");
    } catch (SeqsvrException e) {
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
    }
    ClientOptions po = p.plaintextOptions().build();
    assertTrue(po.plaintext);
    assertEquals(List.of("x:1"), po.seeds());
    Files.writeString(plain, "[[sets]\nid = 0\n");
    try {
      ClusterFile.load(plain);
      fail("a broken file was read");
    } catch (SeqsvrException e) {
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getDescription(), e.getDescription().contains("line 1"));
    }
  }

  /** The repository's own config/cluster.toml reads as the servers read it. */
  @Test
  public void theRepositorysClusterFileReads() {
    ClusterFile f = ClusterFile.load(DecodeVectorsTest.root().resolve("config/cluster.toml"));
    assertEquals(100000, f.sectionSize());
    assertEquals(2, f.sets().size());
    assertEquals(2147500000L, f.sets().get(1).uidBegin);
    assertEquals(4294900000L, f.sets().get(1).uidEnd);
    assertEquals(List.of("127.0.0.1:7201", "127.0.0.1:7202", "127.0.0.1:7211", "127.0.0.1:7212"),
        f.seeds());
    assertEquals(6, f.ids().schemes.size());
    assertEquals(4294900000L, (long) f.ids().schemes.get("rongcloud").sessionUidEnd);
    for (String name : f.ids().schemes.keySet()) {
      assertNotNull(f.layout(name, System.currentTimeMillis()));
    }
  }
}
