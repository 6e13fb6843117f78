//! Exit codes and errors a person can act on: what was asked of which address, what came back,
//! and what to try next.

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;
use tonic::Code;

/// How a command ended (documented in `seqctl --help`, `cli::EXIT_CODES_HELP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done (`health`: SERVING).
    Ok = 0,
    /// The cluster answered but refused, or only part of it answered (`health`: not SERVING).
    Refused = 1,
    /// No usable answer: nothing answered in time, bad config or arguments (`health`: the server
    /// could not be reached or the call failed).
    NoAnswer = 2,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The worse of two outcomes.
    pub fn max(self, other: Exit) -> Exit {
        if other.code() > self.code() {
            other
        } else {
            self
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// An error for the person at the terminal: `error: <what>` and, when there is one, `hint: <hint>`.
#[derive(Debug)]
pub struct CtlError {
    pub exit: Exit,
    pub what: String,
    pub hint: Option<String>,
}

impl CtlError {
    /// Bad arguments or config: nothing was sent.
    pub fn usage(what: impl Into<String>, hint: impl Into<String>) -> CtlError {
        CtlError { exit: Exit::NoAnswer, what: what.into(), hint: Some(hint.into()) }
    }

    /// A failed gRPC call: `action` is what was asked, `target` who was asked (addresses).
    pub fn grpc(action: &str, target: &str, status: &tonic::Status, timeout: Duration) -> CtlError {
        CtlError {
            exit: exit_for(status.code()),
            what: format!("{action} ({target}): {}", coded(status, timeout)),
            hint: hint_for(status.code(), timeout),
        }
    }
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.what)?;
        if let Some(hint) = &self.hint {
            write!(f, "\nhint: {hint}")?;
        }
        Ok(())
    }
}

/// A refusal (1) when the server answered with a verdict; no answer (2) when it could not be
/// reached, did not answer in time, or the call broke on the way.
pub fn exit_for(code: Code) -> Exit {
    match code {
        Code::Ok => Exit::Ok,
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            Exit::NoAnswer
        }
        _ => Exit::Refused,
    }
}

/// What to try after a failed call.
pub fn hint_for(code: Code, timeout: Duration) -> Option<String> {
    let ms = timeout.as_millis();
    Some(match code {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => format!(
            "is the server running and reachable at that address? `seqctl status` shows which \
             members answer (locally: `scripts/dev-cluster.sh status`); a set without a leader \
             or a slow cluster may need a larger --timeout-ms (now {ms})"
        ),
        Code::InvalidArgument | Code::OutOfRange => {
            "check the arguments against the cluster (`seqctl route`, `seqctl status`) and \
             `seqctl <command> --help`"
                .to_string()
        }
        Code::FailedPrecondition | Code::Aborted | Code::AlreadyExists | Code::NotFound => {
            "the cluster refused in its current state: `seqctl status` shows it; retry once \
             the state allows the change"
                .to_string()
        }
        Code::Unimplemented => "the server there does not offer this call: is it a StoreSvr \
                                or AllocSvr of this seqctl's version?"
            .to_string(),
        _ => return None,
    })
}

/// What went wrong with a call, for a table cell or an error line: a timeout says how long was
/// waited; a transport error carries its cause (`tcp connect error: Connection refused ...`).
pub fn describe(status: &tonic::Status, waited: Duration) -> String {
    match status.code() {
        Code::DeadlineExceeded | Code::Cancelled => {
            format!("no answer within {} ms", waited.as_millis())
        }
        _ => {
            let mut text = status.message().to_string();
            let mut source = std::error::Error::source(status);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text.push_str(": ");
                    text.push_str(&cause_text);
                }
                source = cause.source();
            }
            one_line(&text)
        }
    }
}

/// `Code: what went wrong`; a timeout is just `no answer within N ms`.
pub fn coded(status: &tonic::Status, waited: Duration) -> String {
    match status.code() {
        Code::DeadlineExceeded | Code::Cancelled => describe(status, waited),
        code => format!("{code:?}: {}", describe(status, waited)),
    }
}

/// The error of a listing command (`status`, `route`, ...) some of whose targets did not
/// answer: the rows say which (ERROR column); this says how many and what to try.
pub fn partial(exit: Exit, what: String, timeout: Duration) -> Result<Exit, CtlError> {
    match exit {
        Exit::Ok => Ok(Exit::Ok),
        _ => Err(CtlError {
            exit,
            what,
            hint: Some(format!(
                "are those processes running and reachable? (locally: `scripts/dev-cluster.sh \
                 status`); a set electing a leader or a slow cluster may need a larger \
                 --timeout-ms (now {})",
                timeout.as_millis()
            )),
        }),
    }
}

/// Server messages may span lines; an error line must not.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_no_answers_get_their_own_codes() {
        assert_eq!(exit_for(Code::InvalidArgument), Exit::Refused);
        assert_eq!(exit_for(Code::FailedPrecondition), Exit::Refused);
        assert_eq!(exit_for(Code::Unavailable), Exit::NoAnswer);
        assert_eq!(exit_for(Code::DeadlineExceeded), Exit::NoAnswer);
        assert_eq!(Exit::Ok.max(Exit::Refused), Exit::Refused);
        assert_eq!(Exit::NoAnswer.max(Exit::Refused), Exit::NoAnswer);
    }

    #[test]
    fn a_grpc_error_names_the_target_the_code_and_a_hint() {
        let status = tonic::Status::unavailable("member 1 at 127.0.0.1:7101\ndid not answer");
        let e = CtlError::grpc(
            "set 0: transfer leadership",
            "1@127.0.0.1:7101",
            &status,
            Duration::from_millis(300),
        );
        let text = e.to_string();
        assert!(
            text.starts_with(
                "error: set 0: transfer leadership (1@127.0.0.1:7101): Unavailable: member 1"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("hint:") && text.contains("--timeout-ms (now 300)"), "{text}");
        assert_eq!(e.exit, Exit::NoAnswer);
    }
}
