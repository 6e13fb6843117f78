package io.seqsvr;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;

/**
 * Where the cluster is, how to reach it and how the client batches. Seeds and one of TLS and
 * plaintext are required; everything else has a default. Build with {@link #builder()} or
 * {@link ClusterFile#options(String, String)}.
 */
public final class ClientOptions {
  final List<String> seeds;
  final TlsFiles tls;
  final boolean plaintext;
  final ClusterFile.IdsConfig ids;
  final boolean disableCoalescing;
  final int maxCoalesced;
  final int maxInFlight;
  final int maxQueued;
  final Duration defaultTimeout;
  final RetryPolicy retry;

  private ClientOptions(Builder b) {
    LinkedHashSet<String> unique = new LinkedHashSet<>();
    for (String s : b.seeds) {
      if (s != null && !s.isEmpty()) {
        unique.add(s);
      }
    }
    this.seeds = Collections.unmodifiableList(new ArrayList<>(unique));
    this.tls = b.tls;
    this.plaintext = b.plaintext;
    this.ids = b.ids;
    this.disableCoalescing = b.disableCoalescing;
    this.maxCoalesced = b.maxCoalesced;
    this.maxInFlight = b.maxInFlight;
    this.maxQueued = b.maxQueued;
    this.defaultTimeout = b.defaultTimeout;
    this.retry = b.retry;
  }

  /** A builder with the defaults. */
  public static Builder builder() {
    return new Builder();
  }

  /** The seeds, each once. */
  public List<String> seeds() {
    return seeds;
  }

  /** The default timeout of a call given no deadline. */
  public Duration defaultTimeout() {
    return defaultTimeout;
  }

  /** Builds {@link ClientOptions}. */
  public static final class Builder {
    private List<String> seeds = new ArrayList<>();
    private TlsFiles tls;
    private boolean plaintext;
    private ClusterFile.IdsConfig ids;
    private boolean disableCoalescing;
    private int maxCoalesced = 1000;
    private int maxInFlight = 2;
    private int maxQueued = 100_000;
    private Duration defaultTimeout = Duration.ofSeconds(5);
    private RetryPolicy retry = RetryPolicy.STANDARD;

    Builder() {}

    /**
     * AllocSvr addresses (host:port), at least one per set; the client learns the rest from
     * their route tables. {@link ClusterFile#options} lists every set's allocs.
     */
    public Builder seeds(List<String> seeds) {
      this.seeds = new ArrayList<>(seeds);
      return this;
    }

    /** {@link #seeds(List)} as arguments. */
    public Builder seeds(String... seeds) {
      return seeds(List.of(seeds));
    }

    /** The application's mutual TLS identity. Required unless plaintext is asked for. */
    public Builder tls(TlsFiles tls) {
      this.tls = tls;
      return this;
    }

    /**
     * Dials without TLS (a cluster whose servers run with --insecure). Never the default: a
     * client without TLS and without plaintext refuses to connect.
     */
    public Builder plaintext(boolean plaintext) {
      this.plaintext = plaintext;
      return this;
    }

    /**
     * The cluster config's [ids] (ClusterFile sets it): rongcloud sessions are then sent to
     * their owner from the first call.
     */
    public Builder ids(ClusterFile.IdsConfig ids) {
      this.ids = ids;
      return this;
    }

    /**
     * Sends each {@code next} as its own RPC. By default concurrent {@code next} calls bound for
     * one AllocSvr are coalesced into NextBatch RPCs.
     */
    public Builder disableCoalescing(boolean disable) {
      this.disableCoalescing = disable;
      return this;
    }

    /** The most calls in one coalesced RPC (default 1000; within the AllocSvrs' max_batch_uids). */
    public Builder maxCoalesced(int n) {
      this.maxCoalesced = n;
      return this;
    }

    /** How many coalesced RPCs one AllocSvr has from this client at a time (default 2). */
    public Builder maxInFlight(int n) {
      this.maxInFlight = n;
      return this;
    }

    /**
     * The most calls waiting in one AllocSvr's queue (default 100 000); one more fails at once
     * with RESOURCE_EXHAUSTED instead of piling up in memory.
     */
    public Builder maxQueued(int n) {
      this.maxQueued = n;
      return this;
    }

    /** Bounds a call given no deadline of its own (default 5 s). */
    public Builder defaultTimeout(Duration timeout) {
      this.defaultTimeout = timeout;
      return this;
    }

    /** The retry policy (default {@link RetryPolicy#STANDARD}). */
    public Builder retryPolicy(RetryPolicy retry) {
      this.retry = retry;
      return this;
    }

    /** The options. */
    public ClientOptions build() {
      return new ClientOptions(this);
    }
  }
}
