package io.seqsvr;

import org.junit.Test;

/** Live tests against a running dev cluster (-Dseqsvr.live=DIR). */
public class LiveTest {
  @Test
  public void placeholder() {}
}
