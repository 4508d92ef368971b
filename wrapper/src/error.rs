//! Why the wrapper could not start a container: one error per step of [`crate::run`], each
//! naming the file or names involved (bounded: a container chooses them) and the fix; and the
//! typed errors of its parts ([`InjectionError`] of the request, [`NodeError`] of the node).

use std::path::PathBuf;
use std::sync::Arc;

use gpuhook::prestart::PrestartError;

use gpuhook_node::bounded::{preview_list, BoundedReadError};
use gpuhook_request::limits::MAX_NAMES_SHOWN;
use gpuhook_request::RequestError;
use thiserror::Error;

use crate::argv::ArgvError;

/// Exit status of the wrapper when it fails (runc's own failure status).
pub const EXIT_FAILURE: i32 = 1;

/// Why the node could not supply what a request needs (its inventory, the hooks' gpuhook
/// binary, a spec generated in memory).
#[derive(Debug, Error)]
pub enum NodeError {
    /// The inventory could not be loaded: the error of the first attempt, shared with the later
    /// calls of the same invocation (loading is not retried).
    #[error(transparent)]
    Inventory(Arc<PrestartError>),
    #[error("cannot find gpuhook-runtime's own path: {0}")]
    SelfPath(std::io::Error),
    #[error(
        "{} does not exist: the generated CDI hooks run it; install gpuhook beside gpuhook-runtime",
        path.display()
    )]
    NoGpuhook { path: PathBuf },
    #[error("{what} is not UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("CDI kind {kind:?} has no '/'")]
    Kind { kind: String },
    #[error(
        "no CDI spec of kind {kind} in {} (run `gpuhook cdi generate`, or set generate-missing = \
         true in [runtime])",
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoSpec { kind: String, dirs: Vec<PathBuf> },
    #[error(transparent)]
    Cdi(#[from] gpuhook_cdi::CdiError),
}

/// Why the wrapper could not work out what to inject into a container.
#[derive(Debug, Error)]
pub enum InjectionError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Edits(#[from] gpuhook_cdi::CdiError),
    /// The MIG config/monitor or IMEX channel nodes the request asks for do not exist here.
    #[error(transparent)]
    Extras(#[from] gpuhook::prestart::extras::ExtrasError),
}

/// Why the wrapper could not start the container.
///
/// A cause is part of its variant's message, in a field named `error` and deliberately not a
/// `#[source]`: the wrapper prints `to_string()` to runc's log and stderr, and an `anyhow` chain
/// (`{:#}`) of the same error must not print the cause a second time.
#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Argv(#[from] ArgvError),
    /// Unreadable, or larger than [`MAX_OCI_CONFIG_BYTES`].
    #[error("{0} (is --bundle the container's bundle directory?)")]
    ReadSpec(BoundedReadError),
    #[error("cannot parse {} as an OCI runtime spec: {error}", path.display())]
    ParseSpec {
        path: PathBuf,
        error: serde_json::Error,
    },
    #[error("cannot work out the GPU request of the container in {}: {error}", path.display())]
    Request {
        path: PathBuf,
        error: Box<InjectionError>,
    },
    #[error(
        "cannot generate CDI specs for {}: {error}",
        preview_list(names, MAX_NAMES_SHOWN)
    )]
    Generate {
        names: Vec<String>,
        error: Box<NodeError>,
    },
    /// The exact wording runtimes use, followed by where we looked and the fix.
    #[error(
        "unresolvable CDI devices {} (no spec in {} defines them; run `gpuhook cdi generate`, \
         or check the container's request){}",
        preview_list(names, MAX_NAMES_SHOWN),
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        hint.as_ref().map_or(String::new(), |h| format!("; {h}"))
    )]
    Unresolvable {
        names: Vec<String>,
        dirs: Vec<PathBuf>,
        /// What does exist, when the caller can tell ([`GenerateMissing::explain`]).
        hint: Option<String>,
    },
    /// The container's CUDA clients could not use an MPS share it asks for.
    #[error(transparent)]
    Mps(#[from] gpuhook_request::MpsAccessError),
    #[error("cannot apply CDI edits to {}: {error}", path.display())]
    Apply {
        path: PathBuf,
        error: gpuhook_cdi::CdiError,
    },
    #[error("cannot write {}: {error}", path.display())]
    WriteSpec {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "no OCI runtime found: looked for {} on PATH{} (install runc, or list the runtime's \
         absolute path in the gpuhook config's [runtime] runtimes)",
        candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", "),
        if skipped_self.is_empty() { String::new() } else {
            format!("; skipped {} because it is gpuhook-runtime itself",
                skipped_self.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", "))
        }
    )]
    NoRuntime {
        candidates: Vec<PathBuf>,
        skipped_self: Vec<PathBuf>,
    },
    #[error("cannot execute {}: {error}", path.display())]
    Exec {
        path: PathBuf,
        error: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An I/O cause is in the message and not a `source()`: any printer shows it once.
    #[test]
    fn an_io_cause_is_printed_once() {
        let enoent = || std::io::Error::from_raw_os_error(libc::ENOENT);
        let os = enoent().to_string();
        let errors = [
            RuntimeError::WriteSpec {
                path: "/b/config.json".into(),
                error: enoent(),
            },
            RuntimeError::Exec {
                path: "/usr/bin/runc".into(),
                error: enoent(),
            },
            RuntimeError::Generate {
                names: vec!["nvidia.com/gpu=0".into()],
                error: Box::new(NodeError::SelfPath(enoent())),
            },
        ];
        for e in errors {
            let chain: Vec<String> =
                std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .map(ToString::to_string)
                    .collect();
            assert_eq!(chain.join(": ").matches(&os).count(), 1, "{chain:?}");
        }
    }
}
