package seqsvr

import (
	"context"
	"errors"
	"fmt"

	"strconv"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Error is every error the SDK returns: the gRPC code, the message (the server's own words for
// an answer the server gave, the SDK's for a failure it saw itself) and a hint saying what the
// caller can do about it.
//
// The servers' gRPC answers carry no hint field of their own (their messages already say what
// went wrong and, for load shedding, what to do; hints as a field exist only in the AllocSvr's
// HTTP API). Hint is the SDK's: set where the SDK knows better (its own queue full, no
// transport chosen, a uid outside every set), else a short advice per code (CodeHint).
//
// Use errors.As to get at it, or Code(err) for the code of any error:
//
//	var e *seqsvr.Error
//	if errors.As(err, &e) && e.Code == codes.ResourceExhausted { ... }
type Error struct {
	// Code is the gRPC status code (codes.Unavailable, codes.InvalidArgument, ...).
	Code codes.Code
	// Message is the server's message, or the SDK's where it failed on its own.
	Message string
	// Hint says what the caller can do (may be empty).
	Hint string
	// Status is the server's status when the error is the server's answer (nil otherwise):
	// its metadata-free form, for callers that want its details.
	Status *status.Status

	// What a NOT_OWNER answer carried: the owner's set's route table
	// (seqsvr-route-table-bin) and, for a rongcloud session, the uid the session is routed by
	// (x-seqsvr-session-uid).
	routeTable *pb.RouteTable
	sessionUID *uint64
}

func (e *Error) Error() string {
	text := fmt.Sprintf("seqsvr: %s: %s", e.Code, e.Message)
	if e.Hint != "" {
		text += " (hint: " + e.Hint + ")"
	}
	return text
}

// GRPCStatus lets status.FromError and status.Code read the code and message.
func (e *Error) GRPCStatus() *status.Status {
	return status.New(e.Code, e.Message)
}

// Code is the gRPC code of err: its *Error's, a gRPC status's, codes.DeadlineExceeded and
// codes.Canceled for the context errors, codes.OK for nil and codes.Unknown for anything else.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return status.Code(err)
}

// CodeHint is the advice the SDK gives with a code when it has nothing more specific.
func CodeHint(code codes.Code) string {
	switch code {
	case codes.Unavailable:
		return "transient (hand-over, no lease, no quorum, a server down): the SDK retried " +
			"until the deadline; retry later or give the call more time"
	case codes.DeadlineExceeded:
		return "the call's deadline passed; its outcome is unknown (a value may have been " +
			"taken: a gap, never a repeat); retry with more time"
	case codes.ResourceExhausted:
		return "load shedding or a limit reached: back off before retrying (the SDK does not " +
			"retry it, so as not to put the load straight back)"
	case codes.InvalidArgument, codes.OutOfRange:
		return "the request is wrong and was not applied; fix it rather than retry"
	case codes.NotFound:
		return "no such id scheme in the cluster config's [ids.schemes]"
	case codes.PermissionDenied, codes.Unauthenticated:
		return "the certificate's identity has no role for this call: use an application " +
			"(client) certificate the cluster's [tls.identities] knows"
	case codes.FailedPrecondition:
		return "the server refused the call in its present state; it was not applied"
	case codes.Unimplemented:
		return "the server does not know this call (an older AllocSvr?)"
	case codes.Internal, codes.DataLoss:
		return "a bug (server or SDK): report it with the message"
	case codes.Canceled:
		return "the caller cancelled the call"
	}
	return ""
}

// newError is an error the SDK makes itself.
func newError(code codes.Code, hint, format string, args ...interface{}) *Error {
	if hint == "" {
		hint = CodeHint(code)
	}
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Hint: hint}
}

// fromRPC turns what a gRPC call returned into an *Error (nil stays nil).
func fromRPC(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return newError(codes.DeadlineExceeded, "", "%v", err)
	case errors.Is(err, context.Canceled):
		return newError(codes.Canceled, "", "%v", err)
	}
	s, ok := status.FromError(err)
	if !ok {
		return newError(codes.Unknown, "", "%v", err)
	}
	return &Error{Code: s.Code(), Message: s.Message(), Hint: CodeHint(s.Code()), Status: s}
}

// ctxError is the error of a call whose context ended: the caller's cancel, or its deadline.
func ctxError(ctx context.Context, last *Error) *Error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return newError(codes.Canceled, "", "the caller cancelled the call")
	}
	if last != nil {
		return last
	}
	return newError(codes.DeadlineExceeded, "", "the deadline passed")
}

// Metadata keys of the wire API (crates/seqsvr-proto/src/lib.rs).
const (
	// RouteTableMetadata carries an encoded RouteTable on NOT_OWNER answers.
	RouteTableMetadata = "seqsvr-route-table-bin"
	// SessionUIDMetadata carries, on a rongcloud NOT_OWNER answer, the uid the session is
	// routed by.
	SessionUIDMetadata = "x-seqsvr-session-uid"
	// NoForwardMetadata (value "1") asks the AllocSvr called to answer itself: NOT_OWNER with
	// its route table rather than forwarding the call to the owner. The SDK sets it on every
	// call: it follows the route tables itself.
	NoForwardMetadata = "seqsvr-no-forward"
)

// fromAnswer is fromRPC with what the answer's trailers (or headers) carry: a NOT_OWNER's route
// table and session uid.
func fromAnswer(err error, mds ...metadata.MD) *Error {
	e := fromRPC(err)
	if e == nil || e.Status == nil {
		return e
	}
	for _, md := range mds {
		if v := md.Get(RouteTableMetadata); len(v) > 0 && e.routeTable == nil {
			var t pb.RouteTable
			if proto.Unmarshal([]byte(v[0]), &t) == nil {
				e.routeTable = &t
			}
		}
		if v := md.Get(SessionUIDMetadata); len(v) > 0 && e.sessionUID == nil {
			if uid, perr := strconv.ParseUint(v[0], 10, 64); perr == nil {
				e.sessionUID = &uid
			}
		}
	}
	return e
}

// isNotOwner reports whether e is a NOT_OWNER answer (FAILED_PRECONDITION, message prefix
// "NOT_OWNER").
func (e *Error) isNotOwner() bool {
	return e.Code == codes.FailedPrecondition && len(e.Message) >= 9 && e.Message[:9] == "NOT_OWNER"
}
