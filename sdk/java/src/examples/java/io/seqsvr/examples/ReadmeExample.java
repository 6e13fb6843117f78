package io.seqsvr.examples;

import io.seqsvr.ClusterFile;
import io.seqsvr.Ids;
import io.seqsvr.SeqsvrClient;
import java.util.Arrays;

/** The README's example: run from the repository's root against `scripts/dev-cluster.sh up`. */
public class ReadmeExample {
  public static void main(String[] args) {
    ClusterFile cluster = ClusterFile.load("data/local/cluster.toml");
    try (SeqsvrClient client = SeqsvrClient.connect(
        cluster.options("data/local/certs/client.pem", "data/local/certs/client.key").build())) {
      long seq = client.next(3000042);
      long[] batch = client.nextBatch(3000042, 3000042, 2200000042L);
      Ids ids = client.nextIds("snowflake", 3);
      System.out.println("next(3000042): " + seq + " batch: " + Arrays.toString(batch)
          + " snowflake ids: " + ids);
    }
  }
}
