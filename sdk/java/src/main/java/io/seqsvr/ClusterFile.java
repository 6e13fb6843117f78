package io.seqsvr;

import io.grpc.Status;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;

/**
 * What the SDK reads of a cluster config (config/cluster.toml's format, the file every server
 * and seqctl read): {@code section_size}, the sets and their AllocSvrs (the seeds), the id
 * schemes ({@code [ids.schemes.NAME]}, for decoding and for routing rongcloud sessions) and the
 * {@code [tls]} section (the server name and the CA bundle the AllocSvrs' certificates chain
 * to). Every other key is ignored.
 */
public final class ClusterFile {
  /** One {@code [[sets]]} table: a set's uid range [uidBegin, uidEnd) and its AllocSvrs. */
  public static final class SetConfig {
    /** The set's id. */
    public final long id;
    /** The first uid of the set. */
    public final long uidBegin;
    /** The uid after the set's last (exclusive). */
    public final long uidEnd;
    /** The set's AllocSvrs (host:port), the seeds. */
    public final List<String> allocs;

    /** A set as the file writes it. */
    public SetConfig(long id, long uidBegin, long uidEnd, List<String> allocs) {
      this.id = id;
      this.uidBegin = uidBegin;
      this.uidEnd = uidEnd;
      this.allocs = Collections.unmodifiableList(new ArrayList<>(allocs));
    }

    /** Whether uid is in [uidBegin, uidEnd) (unsigned). */
    public boolean contains(long uid) {
      return Long.compareUnsigned(uidBegin, uid) <= 0 && Long.compareUnsigned(uid, uidEnd) < 0;
    }
  }

  /** The {@code [tls]} table (the parts a client needs). */
  public static final class TlsSection {
    /** The base of the servers' DNS names: AllocSvrs carry {@code alloc.<serverName>}. */
    public final String serverName;
    /**
     * The CA bundle the AllocSvrs' certificates chain to (AllocSvrs are store-plane members: a
     * client checks them against the store plane's bundle), as written in the file.
     */
    public final String storeCa;
    /** The CA bundle of the client plane, as written (not used by the SDK). */
    public final String clientCa;

    TlsSection(String serverName, String storeCa, String clientCa) {
      this.serverName = serverName;
      this.storeCa = storeCa;
      this.clientCa = clientCa;
    }
  }

  /** The {@code [ids]} table: the most ids per call and the schemes by name. */
  public static final class IdsConfig {
    /** The most ids one call may ask for (0: the AllocSvrs' default). */
    public final long maxCount;
    /** {@code [ids.schemes.NAME]}, by name, in file order. */
    public final Map<String, SchemeConfig> schemes;

    /** The table as the file writes it. */
    public IdsConfig(long maxCount, Map<String, SchemeConfig> schemes) {
      this.maxCount = maxCount;
      this.schemes = Collections.unmodifiableMap(new LinkedHashMap<>(schemes));
    }
  }

  /** One {@code [ids.schemes.NAME]} table. */
  public static final class SchemeConfig {
    /** The layout as written. */
    public final LayoutSpec spec;
    /** rongcloud's session uid range, null where not written (default [0, 2^26)). */
    public final Long sessionUidBegin;
    /** The end (exclusive) of rongcloud's session uid range, null where not written. */
    public final Long sessionUidEnd;

    /** A scheme as the file writes it. */
    public SchemeConfig(LayoutSpec spec, Long sessionUidBegin, Long sessionUidEnd) {
      this.spec = spec;
      this.sessionUidBegin = sessionUidBegin;
      this.sessionUidEnd = sessionUidEnd;
    }

    long sessionBegin() {
      return sessionUidBegin == null ? 0 : sessionUidBegin;
    }

    long sessionEnd() {
      return sessionUidEnd == null ? Ids.SESSION_KEYS : sessionUidEnd;
    }
  }

  private final Path path;
  private final long sectionSize;
  private final List<SetConfig> sets;
  private final IdsConfig ids;
  private final TlsSection tls;

  private ClusterFile(Path path, long sectionSize, List<SetConfig> sets, IdsConfig ids,
      TlsSection tls) {
    this.path = path;
    this.sectionSize = sectionSize;
    this.sets = Collections.unmodifiableList(sets);
    this.ids = ids;
    this.tls = tls;
  }

  /**
   * Reads a cluster config.
   *
   * @throws SeqsvrException INVALID_ARGUMENT if the file cannot be read or is not one
   */
  public static ClusterFile load(Path path) {
    String text;
    try {
      text = new String(Files.readAllBytes(path), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw bad(path, e.toString());
    }
    try {
      return parse(path, text);
    } catch (IllegalArgumentException | ClassCastException e) {
      throw bad(path, e.getMessage());
    }
  }

  /** {@link #load(Path)} of a path given as text. */
  public static ClusterFile load(String path) {
    return load(Path.of(path));
  }

  private static SeqsvrException bad(Path path, String why) {
    return SeqsvrException.of(Status.Code.INVALID_ARGUMENT,
        "give the cluster file every server reads (config/cluster.toml's format)",
        "cannot read the cluster file %s: %s", path, why);
  }

  /** Parses the text of a cluster file read from path (relative [tls] paths are from its dir). */
  @SuppressWarnings("unchecked")
  static ClusterFile parse(Path path, String text) {
    Map<String, Object> doc = Toml.parse(text);
    long sectionSize = num(doc, "section_size", 0L);
    List<SetConfig> sets = new ArrayList<>();
    Object rawSets = doc.get("sets");
    if (rawSets != null) {
      for (Object o : (List<Object>) rawSets) {
        Map<String, Object> s = (Map<String, Object>) o;
        List<String> allocs = new ArrayList<>();
        Object rawAllocs = s.get("allocs");
        if (rawAllocs != null) {
          for (Object a : (List<Object>) rawAllocs) {
            allocs.add((String) a);
          }
        }
        sets.add(new SetConfig(num(s, "id", 0L), num(s, "uid_begin", 0L), num(s, "uid_end", 0L),
            allocs));
      }
    }
    Map<String, SchemeConfig> schemes = new LinkedHashMap<>();
    long maxCount = 0;
    Object rawIds = doc.get("ids");
    if (rawIds != null) {
      Map<String, Object> idsTable = (Map<String, Object>) rawIds;
      maxCount = num(idsTable, "max_count", 0L);
      Object rawSchemes = idsTable.get("schemes");
      if (rawSchemes != null) {
        for (Map.Entry<String, Object> e : ((Map<String, Object>) rawSchemes).entrySet()) {
          Map<String, Object> s = (Map<String, Object>) e.getValue();
          LayoutSpec spec = new LayoutSpec((String) s.get("scheme"), optNum(s, "epoch_ms"),
              (String) s.get("unit"), optInt(s, "time_bits"), optInt(s, "worker_bits"),
              optInt(s, "seq_bits"));
          schemes.put(e.getKey(), new SchemeConfig(spec, optNum(s, "session_uid_begin"),
              optNum(s, "session_uid_end")));
        }
      }
    }
    TlsSection tls = null;
    Object rawTls = doc.get("tls");
    if (rawTls != null) {
      Map<String, Object> t = (Map<String, Object>) rawTls;
      tls = new TlsSection((String) t.get("server_name"), (String) t.get("store_ca"),
          (String) t.get("client_ca"));
    }
    return new ClusterFile(path, sectionSize, sets, new IdsConfig(maxCount, schemes), tls);
  }

  private static long num(Map<String, Object> t, String key, long dflt) {
    Object v = t.get(key);
    return v == null ? dflt : (Long) v;
  }

  private static Long optNum(Map<String, Object> t, String key) {
    return (Long) t.get(key);
  }

  private static Integer optInt(Map<String, Object> t, String key) {
    Long v = (Long) t.get(key);
    return v == null ? null : Math.toIntExact(v);
  }

  /** The file read. */
  public Path path() {
    return path;
  }

  /** {@code section_size} (0 if not written). */
  public long sectionSize() {
    return sectionSize;
  }

  /** The {@code [[sets]]}, in file order. */
  public List<SetConfig> sets() {
    return sets;
  }

  /** The {@code [ids]} table. */
  public IdsConfig ids() {
    return ids;
  }

  /** The {@code [tls]} table, null if the file has none (a plaintext cluster). */
  public TlsSection tls() {
    return tls;
  }

  /** The set whose uid range holds uid, or null. */
  public SetConfig setOf(long uid) {
    for (SetConfig s : sets) {
      if (s.contains(uid)) {
        return s;
      }
    }
    return null;
  }

  /** Every set's AllocSvrs, each once, in file order. */
  public List<String> seeds() {
    LinkedHashSet<String> seen = new LinkedHashSet<>();
    for (SetConfig s : sets) {
      seen.addAll(s.allocs);
    }
    return new ArrayList<>(seen);
  }

  /** The CA bundle of {@code [tls]} store_ca, relative paths from the file's directory. */
  public Path storeCaPath() {
    if (tls == null || tls.storeCa == null) {
      return null;
    }
    Path ca = Path.of(tls.storeCa);
    if (ca.isAbsolute()) {
      return ca;
    }
    Path dir = path.toAbsolutePath().getParent();
    return dir == null ? ca : dir.resolve(ca);
  }

  /**
   * The layout of the scheme named {@code name} in [ids.schemes], loaded at nowMs as the
   * AllocSvrs load it.
   *
   * @throws SeqsvrException NOT_FOUND for no such scheme, INVALID_ARGUMENT for a bad layout
   */
  public Layout layout(String name, long nowMs) {
    SchemeConfig s = ids.schemes.get(name);
    if (s == null) {
      throw SeqsvrException.of(Status.Code.NOT_FOUND, "", "no id scheme \"%s\" in the cluster config",
          name);
    }
    try {
      return s.spec.load(nowMs);
    } catch (IllegalArgumentException e) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT, "", "ids.schemes.%s: %s", name,
          e.getMessage());
    }
  }

  /**
   * The options to connect to the cluster the file describes with the application identity
   * certFile/keyFile (PEM; e.g. client.pem/client.key of {@code seqctl certs init}) over mutual
   * TLS.
   *
   * @throws SeqsvrException INVALID_ARGUMENT if the file has no [tls] section (a plaintext
   *     cluster: use {@link #plaintextOptions()} explicitly)
   */
  public ClientOptions.Builder options(String certFile, String keyFile) {
    if (tls == null) {
      throw SeqsvrException.of(Status.Code.INVALID_ARGUMENT,
          "for a cluster served in plaintext (--insecure) use plaintextOptions(), explicitly",
          "%s has no [tls] section, so it describes no certificate authority to check the "
              + "AllocSvrs against", path);
    }
    Path ca = storeCaPath();
    return ClientOptions.builder().seeds(seeds())
        .tls(new TlsFiles(tls.serverName, Path.of(certFile), Path.of(keyFile), ca))
        .ids(ids);
  }

  /** The options to connect without TLS (servers run with --insecure): only when asked for. */
  public ClientOptions.Builder plaintextOptions() {
    return ClientOptions.builder().seeds(seeds()).plaintext(true).ids(ids);
  }
}
