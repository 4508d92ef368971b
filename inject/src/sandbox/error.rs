//! Why a sandboxed run failed: set-up before fork, the wait, a timeout, or the program's own
//! failure with its output.

use std::time::Duration;

/// A failed sandboxed run (the caller's error names the binary and the rootfs).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    /// A step before the fork (`fstat root`, `pipe`, `open /dev/null`, `fork`).
    #[error("{step}: {error}")]
    Setup {
        step: &'static str,
        error: std::io::Error,
    },
    #[error("rootfs path contains NUL")]
    NulInRootPath,
    #[error("waitpid: {error}")]
    Wait { error: std::io::Error },
    #[error("timed out after {timeout:?}; killed (a huge or hostile library directory?)")]
    TimedOut { timeout: Duration },
    /// The program exited non-zero or was killed; its output, trimmed.
    #[error("{how}; stderr: {stderr}; stdout: {stdout}")]
    Failed {
        how: String,
        stderr: String,
        stdout: String,
    },
}

impl SandboxError {
    pub(crate) fn setup(step: &'static str, error: std::io::Error) -> Self {
        SandboxError::Setup { step, error }
    }
}
