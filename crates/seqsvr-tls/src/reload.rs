//! The one rotation mechanism: something built from files (a server configuration, a member's
//! client configuration for its peers, the process's client identity) and rebuilt when their
//! contents change.
//!
//! [`Reloading`] looks at the files at most once per [`RELOAD_CHECK`], when asked for the value
//! ([`Reloading::current`]) or its generation ([`Reloading::generation`]); it reads them
//! outside its lock, and only one caller looks at a time. Files whose contents changed and that
//! build replace the value and move the generation on, and the users build new connections
//! with it (open ones keep theirs). Files that do not build (a key renamed in before its
//! certificate) are logged once per change and the old value kept; files that cannot be read
//! (mid-rename) count as unchanged and are looked at again next time.
//!
//! Between two looks, [`Reloading::generation`] costs two atomic loads and a clock reading
//! (every call of the SDK asks it): no lock and no allocation.

use crate::pem::TlsError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

/// How often the files are looked at for a change.
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// What is rebuilt, and from which files.
pub trait Source: Send + Sync {
    type Built: Clone + Send + Sync;
    /// The files it is built from, in a fixed order (`None`: not from files, never reloaded).
    fn files(&self) -> Option<Vec<PathBuf>>;
    /// The value from the files' contents (in the order of [`Source::files`]).
    fn build(&self, contents: &[Vec<u8>]) -> Result<Self::Built, TlsError>;
    /// The certificate file named in the "changed" line.
    fn cert(&self) -> String;
}

/// The log lines of one kind of [`Source`].
#[derive(Clone, Copy)]
pub struct Messages {
    /// Files that cannot be read (warned each time, with the error); `None`: said nothing.
    pub unreadable: Option<&'static str>,
    /// Changed files that built (info, with the certificate's path).
    pub changed: &'static str,
    /// Changed files that do not build (warned once per change, with the error).
    pub broken: &'static str,
}

/// Reads every file of `source`, in order.
pub fn read_all<S: Source>(source: &S) -> Result<Option<Vec<Vec<u8>>>, TlsError> {
    let Some(files) = source.files() else { return Ok(None) };
    files.iter().map(|f| crate::pem::read(f)).collect::<Result<Vec<_>, _>>().map(Some)
}

struct State<S: Source> {
    source: S,
    built: S::Built,
    /// The contents `built` was made from.
    contents: Vec<Vec<u8>>,
    /// Contents that failed to build (logged once), so a bad set is not retried every second.
    failed: Option<Vec<Vec<u8>>>,
    checked: Instant,
    generation: u64,
}

/// A value built from files and rebuilt when they change (see the module doc). Empty until
/// [`Reloading::set`] (a process without a client identity).
pub struct Reloading<S: Source> {
    state: RwLock<Option<State<S>>>,
    /// A copy of the state's generation (written under its write lock), read without a lock.
    generation: AtomicU64,
    /// When the files are due to be looked at again (ns since [`clock_origin`]; `u64::MAX`:
    /// never, no files).
    next_check_ns: AtomicU64,
    messages: Messages,
}

/// The instant `next_check_ns` counts from (the first time anyone asked).
fn clock_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn nanos_since_origin(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(clock_origin()).as_nanos()).unwrap_or(u64::MAX - 1)
}

impl<S: Source> Reloading<S> {
    /// Nothing loaded yet; generation 0. `messages`: what its log lines say.
    pub const fn empty(messages: Messages) -> Reloading<S> {
        Reloading {
            state: RwLock::new(None),
            generation: AtomicU64::new(0),
            next_check_ns: AtomicU64::new(u64::MAX),
            messages,
        }
    }

    /// Reads and builds now: files that do not load are an error (a server with unusable TLS
    /// files does not start).
    pub fn load(source: S, messages: Messages) -> Result<Reloading<S>, TlsError> {
        let contents = read_all(&source)?.unwrap_or_default();
        let built = source.build(&contents)?;
        let reloading = Reloading::empty(messages);
        reloading.set(Some((source, built, contents)));
        Ok(reloading)
    }

    /// Replaces (or, with `None`, clears) the value, built from `contents`; the generation
    /// moves on.
    pub fn set(&self, value: Option<(S, S::Built, Vec<Vec<u8>>)>) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        *state = value.map(|(source, built, contents)| State {
            source,
            built,
            contents,
            failed: None,
            checked: Instant::now(),
            generation,
        });
        self.publish(state.as_ref(), generation);
    }

    /// Publishes the generation and when the files are due next (call with the write lock held).
    fn publish(&self, state: Option<&State<S>>, generation: u64) {
        let next = match state {
            Some(s) if s.source.files().is_some() => nanos_since_origin(s.checked + RELOAD_CHECK),
            _ => u64::MAX,
        };
        // The generation first: a reader that sees the new check time (and so skips the files)
        // then sees this generation too, never the one before it.
        self.generation.store(generation, Ordering::Release);
        self.next_check_ns.store(next, Ordering::Release);
    }

    /// The value as loaded, without looking at the files.
    pub fn get(&self) -> Option<S::Built> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|s| s.built.clone())
    }

    /// The value for a new connection and its generation, after picking up changed files.
    pub fn current(&self) -> Option<(u64, S::Built)> {
        self.generation();
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.as_ref().map(|s| (s.generation, s.built.clone()))
    }

    /// The generation (moved on by every change), after picking up changed files (looked at
    /// once per [`RELOAD_CHECK`] at most): a user whose connections were built under an older
    /// generation builds new ones.
    pub fn generation(&self) -> u64 {
        if nanos_since_origin(Instant::now()) < self.next_check_ns.load(Ordering::Acquire) {
            return self.generation.load(Ordering::Acquire);
        }
        self.look()
    }

    /// [`Reloading::generation`] once the files are due to be looked at.
    fn look(&self) -> u64 {
        let messages = &self.messages;
        let (files, at) = {
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            let Some(s) = state.as_mut() else {
                return self.generation.load(Ordering::Acquire);
            };
            if s.checked.elapsed() < RELOAD_CHECK {
                return s.generation; // another caller is looking
            }
            let Some(files) = s.source.files() else { return s.generation };
            s.checked = Instant::now();
            let at = s.generation;
            self.publish(state.as_ref(), at);
            (files, at)
        };
        let now = match files.iter().map(|f| crate::pem::read(f)).collect::<Result<Vec<_>, _>>() {
            Ok(now) => now,
            Err(e) => {
                if let Some(unreadable) = messages.unreadable {
                    tracing::warn!(error = %e, "{unreadable}");
                }
                return at;
            }
        };
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let Some(s) = state.as_mut() else { return self.generation.load(Ordering::Acquire) };
        if s.generation != at || now == s.contents || s.failed.as_ref() == Some(&now) {
            return s.generation; // unchanged, already known not to load, or replaced meanwhile
        }
        match s.source.build(&now) {
            Ok(built) => {
                tracing::info!(cert = %s.source.cert(), "{}", messages.changed);
                s.built = built;
                s.contents = now;
                s.failed = None;
                s.generation += 1;
                let generation = s.generation;
                self.publish(state.as_ref(), generation);
                generation
            }
            Err(e) => {
                tracing::warn!(error = %e, "{}", messages.broken);
                s.failed = Some(now);
                s.generation
            }
        }
    }
}
