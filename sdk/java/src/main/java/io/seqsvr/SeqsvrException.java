package io.seqsvr;

import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusException;
import io.grpc.StatusRuntimeException;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import seqsvr.v1.Seq.RouteTable;

/**
 * Every error the SDK throws: the gRPC status code, the description (the server's own message
 * for an answer the server gave, the SDK's for a failure it saw itself) and a hint saying what
 * the caller can do about it.
 *
 * <p>The servers' gRPC answers carry no hint field of their own (their messages already say what
 * went wrong and, for load shedding, what to do). The hint is the SDK's: specific where the SDK
 * knows better (its own queue full, no transport chosen, a uid outside every set), else a short
 * advice per code ({@link #codeHint}).
 *
 * <pre>{@code
 * try {
 *   client.next(uid);
 * } catch (SeqsvrException e) {
 *   if (e.getCode() == Status.Code.RESOURCE_EXHAUSTED) { ... back off ... }
 * }
 * }</pre>
 */
public final class SeqsvrException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** Carries an encoded RouteTable on NOT_OWNER answers. */
  public static final String ROUTE_TABLE_METADATA = "seqsvr-route-table-bin";
  /** On a rongcloud NOT_OWNER answer: the uid the session is routed by. */
  public static final String SESSION_UID_METADATA = "x-seqsvr-session-uid";
  /**
   * Value "1": asks the AllocSvr called to answer itself (NOT_OWNER with its route table) rather
   * than forward the call to the owner. The SDK sets it on every call: it follows the route
   * tables itself.
   */
  public static final String NO_FORWARD_METADATA = "seqsvr-no-forward";

  static final Metadata.Key<byte[]> ROUTE_TABLE_KEY =
      Metadata.Key.of(ROUTE_TABLE_METADATA, Metadata.BINARY_BYTE_MARSHALLER);
  static final Metadata.Key<String> SESSION_UID_KEY =
      Metadata.Key.of(SESSION_UID_METADATA, Metadata.ASCII_STRING_MARSHALLER);

  private final Status.Code code;
  private final String description;
  private final String hint;
  private final transient Status status;
  private final transient RouteTable routeTable;
  private final Long sessionUid;

  SeqsvrException(Status.Code code, String description, String hint, Status status,
      RouteTable routeTable, Long sessionUid, Throwable cause) {
    super(format(code, description, hint), cause);
    this.code = code;
    this.description = description == null ? "" : description;
    this.hint = hint == null || hint.isEmpty() ? codeHint(code) : hint;
    this.status = status;
    this.routeTable = routeTable;
    this.sessionUid = sessionUid;
  }

  /** An error the SDK makes itself; an empty hint takes the code's ({@link #codeHint}). */
  static SeqsvrException of(Status.Code code, String hint, String format, Object... args) {
    return new SeqsvrException(code, String.format(format, args), hint, null, null, null, null);
  }

  private static String format(Status.Code code, String description, String hint) {
    String h = hint == null || hint.isEmpty() ? codeHint(code) : hint;
    String text = "seqsvr: " + code + ": " + description;
    return h.isEmpty() ? text : text + " (hint: " + h + ")";
  }

  /** The gRPC status code (UNAVAILABLE, INVALID_ARGUMENT, ...). */
  public Status.Code getCode() {
    return code;
  }

  /** The server's message, or the SDK's where it failed on its own (never null). */
  public String getDescription() {
    return description;
  }

  /** What the caller can do about it (may be empty). */
  public String getHint() {
    return hint;
  }

  /** The server's status when the error is the server's answer, else null. */
  public Status getStatus() {
    return status;
  }

  /** Whether the SDK's retry policy treats the code as worth another attempt. */
  public boolean isRetryable() {
    return RetryPolicy.retryable(code);
  }

  /** The route table a NOT_OWNER answer carried (seqsvr-route-table-bin), else null. */
  RouteTable routeTable() {
    return routeTable;
  }

  /** The session uid a rongcloud NOT_OWNER answer carried, else null. */
  Long sessionUid() {
    return sessionUid;
  }

  /** A NOT_OWNER answer: FAILED_PRECONDITION with message prefix "NOT_OWNER". */
  boolean isNotOwner() {
    return code == Status.Code.FAILED_PRECONDITION && description.startsWith("NOT_OWNER");
  }

  /** The advice the SDK gives with a code when it has nothing more specific. */
  public static String codeHint(Status.Code code) {
    switch (code) {
      case UNAVAILABLE:
        return "transient (hand-over, no lease, no quorum, a server down): the SDK retried "
            + "until the deadline; retry later or give the call more time";
      case DEADLINE_EXCEEDED:
        return "the call's deadline passed; its outcome is unknown (a value may have been "
            + "taken: a gap, never a repeat); retry with more time";
      case RESOURCE_EXHAUSTED:
        return "load shedding or a limit reached: back off before retrying (the SDK does not "
            + "retry it, so as not to put the load straight back)";
      case INVALID_ARGUMENT:
      case OUT_OF_RANGE:
        return "the request is wrong and was not applied; fix it rather than retry";
      case NOT_FOUND:
        return "no such id scheme in the cluster config's [ids.schemes]";
      case PERMISSION_DENIED:
      case UNAUTHENTICATED:
        return "the certificate's identity has no role for this call: use an application "
            + "(client) certificate the cluster's [tls.identities] knows";
      case FAILED_PRECONDITION:
        return "the server refused the call in its present state; it was not applied";
      case UNIMPLEMENTED:
        return "the server does not know this call (an older AllocSvr?)";
      case INTERNAL:
      case DATA_LOSS:
        return "a bug (server or SDK): report it with the message";
      case CANCELLED:
        return "the caller cancelled the call";
      default:
        return "";
    }
  }

  /**
   * What a gRPC call threw, as a SeqsvrException: the status's code and description, and what
   * its trailers carry (a NOT_OWNER's route table and session uid).
   */
  static SeqsvrException fromRpc(Throwable t) {
    while ((t instanceof ExecutionException || t instanceof CompletionException)
        && t.getCause() != null) {
      t = t.getCause();
    }
    if (t instanceof SeqsvrException) {
      return (SeqsvrException) t;
    }
    if (t instanceof CancellationException) {
      return of(Status.Code.CANCELLED, "", "the call was cancelled");
    }
    Status status;
    Metadata trailers;
    if (t instanceof StatusRuntimeException) {
      status = ((StatusRuntimeException) t).getStatus();
      trailers = ((StatusRuntimeException) t).getTrailers();
    } else if (t instanceof StatusException) {
      status = ((StatusException) t).getStatus();
      trailers = ((StatusException) t).getTrailers();
    } else {
      return new SeqsvrException(Status.Code.UNKNOWN, String.valueOf(t), "", null, null, null, t);
    }
    RouteTable table = null;
    Long sessionUid = null;
    if (trailers != null) {
      byte[] raw = trailers.get(ROUTE_TABLE_KEY);
      if (raw != null) {
        try {
          table = RouteTable.parseFrom(raw);
        } catch (com.google.protobuf.InvalidProtocolBufferException e) {
          table = null;
        }
      }
      String uid = trailers.get(SESSION_UID_KEY);
      if (uid != null) {
        try {
          sessionUid = Long.parseUnsignedLong(uid.trim());
        } catch (NumberFormatException e) {
          sessionUid = null;
        }
      }
    }
    String description = status.getDescription();
    if (description == null) {
      description = "";
    }
    if (status.getCause() != null) {
      // A failure the client's transport saw (the server's answers carry no cause).
      String cause = String.valueOf(status.getCause()).replaceAll("\\s*\\n\\s*", " ");
      description = description.replaceAll("\\s*\\n\\s*", " ");
      description = description.isEmpty() ? cause : description + ": " + cause;
    }
    return new SeqsvrException(status.getCode(), description, "", status, table, sessionUid,
        status.getCause());
  }
}
