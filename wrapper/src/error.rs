//! Why the wrapper could not start a container: one error per step of [`crate::wrapper`], each
//! naming the file or names involved (bounded: a container chooses them) and the fix.

use std::path::PathBuf;

use gpuhook_node::bounded::{preview_list, BoundedReadError};
use thiserror::Error;

use crate::argv::ArgvError;
use crate::run::{BoxError, MAX_NAMES_SHOWN};

/// Why the wrapper could not start the container.
#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Argv(#[from] ArgvError),
    /// Unreadable, or larger than [`MAX_OCI_CONFIG_BYTES`].
    #[error("{0} (is --bundle the container's bundle directory?)")]
    ReadSpec(BoundedReadError),
    #[error("cannot parse {} as an OCI runtime spec: {source}", path.display())]
    ParseSpec {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot work out the GPU request of the container in {}: {source}", path.display())]
    Request { path: PathBuf, source: BoxError },
    #[error(
        "cannot generate CDI specs for {}: {source}",
        preview_list(names, MAX_NAMES_SHOWN)
    )]
    Generate {
        names: Vec<String>,
        source: BoxError,
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
    #[error("cannot apply CDI edits to {}: {source}", path.display())]
    Apply {
        path: PathBuf,
        #[source]
        source: gpuhook_cdi::CdiError,
    },
    #[error("cannot write {}: {source}", path.display())]
    WriteSpec {
        path: PathBuf,
        #[source]
        source: std::io::Error,
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
    #[error("cannot execute {}: {source}", path.display())]
    Exec {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
