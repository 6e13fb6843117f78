package io.seqsvr;

import java.util.ArrayList;
import java.util.List;
import org.junit.runner.JUnitCore;
import org.junit.runner.Request;
import org.junit.runner.Result;
import org.junit.runner.notification.Failure;
import org.junit.runner.notification.RunListener;

/**
 * Runs the unit tests (or, with -Dseqsvr.live=DIR, the live tests against that cluster) and
 * ends with a line "N passed, N failed"; exits 1 if any failed.
 */
public final class AllTests {
  static final Class<?>[] UNIT = {
    DecodeVectorsTest.class, RetryPolicyTest.class, RoutingTest.class, CoalescingTest.class,
    IdsTest.class, TlsTest.class, RunnerTest.class,
  };

  public static void main(String[] args) {
    boolean live = System.getProperty("seqsvr.live") != null;
    Class<?>[] classes = live ? new Class<?>[] {LiveTest.class} : UNIT;
    JUnitCore core = new JUnitCore();
    List<String> lines = new ArrayList<>();
    core.addListener(new RunListener() {
      @Override
      public void testFinished(org.junit.runner.Description d) {
        System.out.println("  ran " + d.getClassName().replace("io.seqsvr.", "") + "." + d.getMethodName());
      }

      @Override
      public void testFailure(Failure f) {
        lines.add(f.getTestHeader() + ": " + f.getMessage());
        System.out.println("  FAILED " + f.getTestHeader() + ":\n" + f.getTrace());
      }
    });
    Result r = core.run(Request.classes(classes));
    int failed = r.getFailureCount();
    int passed = r.getRunCount() - failed;
    for (String l : lines) {
      System.out.println("failed: " + l);
    }
    System.out.println((live ? "live: " : "unit: ") + passed + " passed, " + failed + " failed"
        + (r.getIgnoreCount() > 0 ? ", " + r.getIgnoreCount() + " skipped" : ""));
    System.exit(failed == 0 && r.getRunCount() > 0 ? 0 : 1);
  }
}
