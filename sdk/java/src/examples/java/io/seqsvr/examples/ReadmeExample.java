package io.seqsvr.examples;

import io.seqsvr.*;
import java.util.Arrays;

/** The README's example: run from the repository's root against `scripts/dev-cluster.sh up`. */
public class ReadmeExample {
  public static void main(String[] args) {
    ClusterFile cluster = ClusterFile.load("data/local/cluster.toml");
    ClientOptions opts = cluster.options("data/local/certs/client.pem", "data/local/certs/client.key").build();
    try (SeqsvrClient client = SeqsvrClient.connect(opts)) {
      long seq = client.next(42);
      long[] batch = client.nextBatch(42, 42, 2147500042L);
      Ids ids = client.nextIds("snowflake", 3);
      System.out.println("next(42): " + seq + " batch: " + Arrays.toString(batch) + " snowflake ids: " + ids);
    }
  }
}
