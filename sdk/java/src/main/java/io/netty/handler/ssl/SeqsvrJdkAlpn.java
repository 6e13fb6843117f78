package io.netty.handler.ssl;

import io.netty.buffer.ByteBufAllocator;
import java.util.List;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;

/**
 * ALPN over the JDK's own TLS (the JDK 9+ API) for a Netty build that leaves it out: Debian's
 * Netty 4.1.48 has no {@code JdkAlpnApplicationProtocolNegotiator}, so its JDK contexts refuse
 * ALPN, which gRPC needs (h2). This is that negotiator's JDK 9 path, on the engine wrapper the
 * Debian build still ships ({@code Java9SslEngine}); it lives in Netty's package because the
 * pieces it joins are package-private there. The seqsvr SDK uses it only where Netty's own ALPN
 * is missing (io.seqsvr.TlsFiles).
 */
public final class SeqsvrJdkAlpn {
  private SeqsvrJdkAlpn() {}

  private static final JdkApplicationProtocolNegotiator.AllocatorAwareSslEngineWrapperFactory
      WRAPPER = new JdkApplicationProtocolNegotiator.AllocatorAwareSslEngineWrapperFactory() {
        @Override
        SSLEngine wrapSslEngine(SSLEngine engine, ByteBufAllocator alloc,
            JdkApplicationProtocolNegotiator negotiator, boolean isServer) {
          return new Java9SslEngine(engine, negotiator, isServer);
        }
      };

  /** A context offering (client) or choosing (server) h2 by ALPN, and failing without it. */
  public static SslContext context(SSLContext ctx, boolean client, List<String> ciphers,
      ClientAuth auth, String[] protocols) {
    JdkApplicationProtocolNegotiator negotiator = new JdkBaseApplicationProtocolNegotiator(WRAPPER,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTOR_FACTORY,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTION_LISTENER_FACTORY,
        ApplicationProtocolNames.HTTP_2);
    return new JdkSslContext(ctx, client, ciphers, IdentityCipherSuiteFilter.INSTANCE, negotiator,
        auth, protocols, false);
  }
}
