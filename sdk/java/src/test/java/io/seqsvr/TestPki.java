package io.seqsvr;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** A throw-away PKI made with openssl for the TLS tests (ECDSA P-256). */
final class TestPki {
  final Path dir;

  TestPki() throws IOException {
    dir = Files.createTempDirectory("seqsvr-java-pki");
    dir.toFile().deleteOnExit();
  }

  private void openssl(String... args) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>();
    cmd.add("openssl");
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.waitFor() != 0) {
      throw new IOException("openssl " + String.join(" ", args) + ": " + out);
    }
  }

  /** A self-signed CA: NAME.pem, NAME.key. */
  TestPki ca(String name) throws Exception {
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + name,
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign");
    return this;
  }

  /**
   * A certificate NAME.pem / NAME.key (PKCS#8) signed by ca: a server's with dnsName and
   * 127.0.0.1 (dnsName non-null), else a client's. sec1 writes the key as "EC PRIVATE KEY".
   */
  TestPki issue(String ca, String name, String dnsName, boolean sec1) throws Exception {
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
        name + ".raw", "-out", name + ".csr", "-subj", "/CN=" + name);
    String ext = dnsName != null
        ? "subjectAltName=DNS:" + dnsName + ",IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        : "extendedKeyUsage=clientAuth\n";
    Files.writeString(dir.resolve(name + ".ext"), ext);
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
        "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext");
    if (sec1) {
      openssl("ec", "-in", name + ".raw", "-out", name + ".key");
    } else {
      openssl("pkcs8", "-topk8", "-nocrypt", "-in", name + ".raw", "-out", name + ".key");
    }
    return this;
  }

  Path file(String name) {
    return dir.resolve(name);
  }
}
