package io.seqsvr;

import io.grpc.Status;
import io.netty.handler.ssl.ApplicationProtocolConfig;
import io.netty.handler.ssl.ApplicationProtocolNames;
import io.netty.handler.ssl.ClientAuth;
import io.netty.handler.ssl.IdentityCipherSuiteFilter;
import io.netty.handler.ssl.JdkSslContext;
import io.netty.handler.ssl.SeqsvrJdkAlpn;
import io.netty.handler.ssl.SslContext;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManager;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedKeyManager;

/**
 * The client's mutual TLS identity and the CA it checks the AllocSvrs against.
 *
 * <p>Each AllocSvr's certificate must chain to the CA bundle and name {@code
 * alloc.<serverName>} (the Rust and Go SDKs' rule: addresses are IPs and one CA may issue every
 * role, so the role's name is what is checked). The application's certificate and key are read
 * again at a handshake when their files changed (a rotation; checked at most once a second), the
 * CA bundle once. TLS 1.3 and 1.2 with ALPN h2, from the JDK's own TLS (no native library).
 */
public final class TlsFiles {
  final String serverName;
  final Path certFile;
  final Path keyFile;
  final Path caFile;

  /**
   * @param serverName the cluster file's [tls] server_name
   * @param certFile the application's certificate (chain), PEM
   * @param keyFile its private key, PEM (PKCS#8, or SEC1 EC / PKCS#1 RSA)
   * @param caFile the bundle the AllocSvrs' certificates chain to (the cluster file's store_ca)
   */
  public TlsFiles(String serverName, Path certFile, Path keyFile, Path caFile) {
    this.serverName = serverName;
    this.certFile = certFile;
    this.keyFile = keyFile;
    this.caFile = caFile;
  }

  /** The name an AllocSvr's certificate carries for server name base. */
  public static String allocServerName(String base) {
    return "alloc." + base;
  }

  /** The name checked in each AllocSvr's certificate. */
  public String allocServerName() {
    return allocServerName(serverName);
  }

  private static SeqsvrException bad(String format, Object... args) {
    return SeqsvrException.of(Status.Code.INVALID_ARGUMENT,
        "give the application's certificate and key (PEM) and the cluster's CA bundle", format,
        args);
  }

  /** The Netty TLS context of this identity (client side). */
  SslContext clientContext() {
    if (serverName == null || serverName.isEmpty()) {
      throw bad("no server name: give the cluster file's [tls] server_name");
    }
    List<X509Certificate> cas;
    try {
      cas = readCertificates(caFile);
    } catch (IOException | GeneralSecurityException e) {
      throw bad("cannot read the CA bundle %s: %s", caFile, e.getMessage());
    }
    if (cas.isEmpty()) {
      throw bad("%s holds no PEM certificate", caFile);
    }
    ReloadingKeyManager km = new ReloadingKeyManager(certFile, keyFile);
    try {
      km.current();
    } catch (IOException | GeneralSecurityException | IllegalArgumentException e) {
      throw bad("cannot load the certificate %s and key %s: %s", certFile, keyFile,
          e.getMessage());
    }
    try {
      return context(sslContext(new KeyManager[] {km}, cas), true, ClientAuth.NONE);
    } catch (GeneralSecurityException e) {
      throw bad("cannot set up TLS: %s", e.getMessage());
    }
  }

  /** A JDK SSLContext with these key managers, trusting exactly cas. */
  static SSLContext sslContext(KeyManager[] kms, List<X509Certificate> cas)
      throws GeneralSecurityException {
    KeyStore ts = KeyStore.getInstance("PKCS12");
    try {
      ts.load(null, null);
    } catch (IOException e) {
      throw new GeneralSecurityException(e);
    }
    int i = 0;
    for (X509Certificate c : cas) {
      ts.setCertificateEntry("ca-" + i++, c);
    }
    TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
    tmf.init(ts);
    SSLContext ctx = SSLContext.getInstance("TLS");
    ctx.init(kms, tmf.getTrustManagers(), null);
    return ctx;
  }

  /**
   * A Netty context over the JDK's TLS with ALPN h2, TLS 1.3 and 1.2. Netty's own ALPN support
   * for the JDK provider is used where the Netty build has it; Debian's Netty 4.1.48 leaves it
   * out, and then the SDK's small negotiator ({@code io.netty.handler.ssl.SeqsvrJdkAlpn}, the JDK
   * 9+ ALPN API) takes its place.
   */
  static SslContext context(SSLContext ctx, boolean client, ClientAuth auth) {
    List<String> ciphers = Arrays.asList(ctx.getDefaultSSLParameters().getCipherSuites());
    String[] protocols = {"TLSv1.3", "TLSv1.2"};
    try {
      ApplicationProtocolConfig alpn = new ApplicationProtocolConfig(
          ApplicationProtocolConfig.Protocol.ALPN,
          ApplicationProtocolConfig.SelectorFailureBehavior.NO_ADVERTISE,
          ApplicationProtocolConfig.SelectedListenerFailureBehavior.ACCEPT,
          ApplicationProtocolNames.HTTP_2);
      return new JdkSslContext(ctx, client, ciphers, IdentityCipherSuiteFilter.INSTANCE, alpn,
          auth, protocols, false);
    } catch (UnsupportedOperationException noAlpn) {
      return SeqsvrJdkAlpn.context(ctx, client, ciphers, auth, protocols);
    }
  }

  static List<X509Certificate> readCertificates(Path path)
      throws IOException, GeneralSecurityException {
    CertificateFactory cf = CertificateFactory.getInstance("X.509");
    List<X509Certificate> out = new ArrayList<>();
    for (java.security.cert.Certificate c :
        cf.generateCertificates(new ByteArrayInputStream(Files.readAllBytes(path)))) {
      out.add((X509Certificate) c);
    }
    return out;
  }

  private static final Pattern PEM =
      Pattern.compile("-----BEGIN ([A-Z ]+)-----([A-Za-z0-9+/=\\s]+)-----END \\1-----");

  /** The first private key of a PEM file: PKCS#8, SEC1 ("EC PRIVATE KEY") or PKCS#1 (RSA). */
  static PrivateKey readPrivateKey(Path path) throws IOException, GeneralSecurityException {
    String pem = new String(Files.readAllBytes(path), StandardCharsets.US_ASCII);
    Matcher m = PEM.matcher(pem);
    while (m.find()) {
      String type = m.group(1);
      byte[] der = Base64.getMimeDecoder().decode(m.group(2));
      switch (type) {
        case "PRIVATE KEY":
          for (String alg : new String[] {"EC", "RSA", "Ed25519", "Ed448"}) {
            try {
              return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
              // try the next algorithm
            }
          }
          throw new GeneralSecurityException("a PKCS#8 key of no known algorithm");
        case "EC PRIVATE KEY":
          return KeyFactory.getInstance("EC")
              .generatePrivate(new PKCS8EncodedKeySpec(Der.sec1ToPkcs8(der)));
        case "RSA PRIVATE KEY":
          return KeyFactory.getInstance("RSA")
              .generatePrivate(new PKCS8EncodedKeySpec(Der.pkcs1ToPkcs8(der)));
        default:
          break;
      }
    }
    throw new GeneralSecurityException(path + " holds no PEM private key");
  }

  /** Just enough DER to wrap a SEC1 or PKCS#1 key into PKCS#8. */
  static final class Der {
    private Der() {}

    static byte[] tlv(int tag, byte[] body) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      out.write(tag);
      int n = body.length;
      if (n < 0x80) {
        out.write(n);
      } else if (n < 0x100) {
        out.write(0x81);
        out.write(n);
      } else if (n < 0x10000) {
        out.write(0x82);
        out.write(n >> 8);
        out.write(n);
      } else {
        out.write(0x83);
        out.write(n >> 16);
        out.write(n >> 8);
        out.write(n);
      }
      out.write(body, 0, n);
      return out.toByteArray();
    }

    static byte[] concat(byte[]... parts) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      for (byte[] p : parts) {
        out.write(p, 0, p.length);
      }
      return out.toByteArray();
    }

    private static final byte[] VERSION_0 = {0x02, 0x01, 0x00};
    private static final byte[] OID_EC_PUBLIC_KEY =
        {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
    private static final byte[] OID_RSA =
        {0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01};
    private static final byte[] NULL = {0x05, 0x00};

    /** The element starting at off: {tag, header length, body length}. */
    static int[] header(byte[] der, int off) {
      int tag = der[off] & 0xff;
      int len = der[off + 1] & 0xff;
      int hdr = 2;
      if (len >= 0x80) {
        int k = len & 0x7f;
        len = 0;
        for (int i = 0; i < k; i++) {
          len = len << 8 | (der[off + 2 + i] & 0xff);
        }
        hdr += k;
      }
      return new int[] {tag, hdr, len};
    }

    /** SEC1 ECPrivateKey { version, key, [0] curve OID, [1] public key } into PKCS#8. */
    static byte[] sec1ToPkcs8(byte[] sec1) throws GeneralSecurityException {
      int[] seq = header(sec1, 0);
      int off = seq[1];
      int end = seq[1] + seq[2];
      byte[] curve = null;
      while (off < end) {
        int[] h = header(sec1, off);
        if (h[0] == 0xa0) {
          curve = Arrays.copyOfRange(sec1, off + h[1], off + h[1] + h[2]);
        }
        off += h[1] + h[2];
      }
      if (curve == null) {
        throw new GeneralSecurityException("an EC key without its curve");
      }
      return tlv(0x30, concat(VERSION_0, tlv(0x30, concat(OID_EC_PUBLIC_KEY, curve)),
          tlv(0x04, sec1)));
    }

    /** PKCS#1 RSAPrivateKey into PKCS#8. */
    static byte[] pkcs1ToPkcs8(byte[] pkcs1) {
      return tlv(0x30, concat(VERSION_0, tlv(0x30, concat(OID_RSA, NULL)), tlv(0x04, pkcs1)));
    }
  }

  /** An identity read again when its files' modification times or sizes changed. */
  static final class ReloadingKeyManager extends X509ExtendedKeyManager {
    private static final String ALIAS = "seqsvr";
    private final Path cert;
    private final Path key;
    private X509Certificate[] chain;
    private PrivateKey privateKey;
    private String stamp;
    private long checkedNanos;

    ReloadingKeyManager(Path cert, Path key) {
      this.cert = cert;
      this.key = key;
    }

    private String stamp() {
      StringBuilder b = new StringBuilder();
      for (Path p : new Path[] {cert, key}) {
        try {
          b.append(Files.getLastModifiedTime(p).toMillis()).append(':').append(Files.size(p))
              .append(';');
        } catch (IOException e) {
          b.append("-;");
        }
      }
      return b.toString();
    }

    /** Loads (or reloads) the identity; throws only when none ever loaded. */
    synchronized void current() throws IOException, GeneralSecurityException {
      long now = System.nanoTime();
      if (chain != null && now - checkedNanos < 1_000_000_000L) {
        return;
      }
      checkedNanos = now;
      String s = stamp();
      if (chain != null && s.equals(stamp)) {
        return;
      }
      try {
        List<X509Certificate> certs = readCertificates(cert);
        if (certs.isEmpty()) {
          throw new GeneralSecurityException(cert + " holds no PEM certificate");
        }
        PrivateKey k = readPrivateKey(key);
        chain = certs.toArray(new X509Certificate[0]);
        privateKey = k;
        stamp = s;
      } catch (IOException | GeneralSecurityException | IllegalArgumentException e) {
        if (chain == null) {
          throw e;
        }
        // A rotation half done (the certificate renamed in before its key): keep the identity
        // that worked until both files match again.
      }
    }

    private void refresh() {
      try {
        current();
      } catch (IOException | GeneralSecurityException | IllegalArgumentException e) {
        // keep what is loaded
      }
    }

    @Override
    public String chooseEngineClientAlias(String[] keyType, Principal[] issuers, SSLEngine e) {
      refresh(); // once per handshake, before the chain and key are read
      return ALIAS;
    }

    @Override
    public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
      refresh();
      return ALIAS;
    }

    @Override
    public String[] getClientAliases(String keyType, Principal[] issuers) {
      return new String[] {ALIAS};
    }

    @Override
    public String[] getServerAliases(String keyType, Principal[] issuers) {
      return new String[] {ALIAS};
    }

    @Override
    public String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
      return ALIAS;
    }

    @Override
    public String chooseEngineServerAlias(String keyType, Principal[] issuers, SSLEngine e) {
      return ALIAS;
    }

    @Override
    public synchronized X509Certificate[] getCertificateChain(String alias) {
      return chain == null ? null : chain.clone();
    }

    @Override
    public synchronized PrivateKey getPrivateKey(String alias) {
      return privateKey;
    }
  }

  /** For tests: a server-side context (client certificates required) from PEM files. */
  static SslContext serverContext(Path cert, Path key, Path ca) throws Exception {
    ReloadingKeyManager km = new ReloadingKeyManager(cert, key);
    km.current();
    return context(sslContext(new KeyManager[] {km}, readCertificates(ca)), false,
        ClientAuth.REQUIRE);
  }
}
