//! Errors of the prestart hook. Each one ends up as the single line runc prints when a container
//! fails to start, so it names the input at fault and, where there is one, the fix.

use std::path::PathBuf;

use gpuhook_cdi::edits::SetupArgsError;

use super::extras::ExtrasError;
use crate::request::RequestError;

/// Why `gpuhook prestart` refused or failed. Whatever the variant, nothing was mounted or created
/// in the container when it comes from validation ([`PrestartError::is_before_injection`]).
///
/// A cause is part of its variant's message (a field named `error`, deliberately not a
/// `#[source]`): runc prints the hook's stderr line, the CLI prints the chain on one line (`CliError`, `cli::one_line`),
/// and either way the cause appears once.
#[derive(Debug, thiserror::Error)]
pub enum PrestartError {
    /// The OCI state on stdin is missing, too large or malformed.
    #[error("invalid OCI state on stdin: {reason} (run `gpuhook prestart` as an OCI prestart or createRuntime hook)")]
    State { reason: String },
    /// `<bundle>/config.json` could not be read or parsed.
    #[error("invalid bundle config {}: {reason}", path.display())]
    BundleConfig { path: PathBuf, reason: String },
    /// The container's request is malformed, unknown or unsatisfiable.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The container's CUDA clients could not use an MPS share it asks for (checked before
    /// anything is injected: such a client would run without the share's limits, or stall).
    #[error("refusing to start container {container}: {error}")]
    Mps {
        container: String,
        error: gpuhook_request::MpsAccessError,
    },
    /// No usable inventory: neither the cache nor discovery worked.
    #[error("cannot find the node's GPUs: {reason} (check driver-root in the config, or run `gpuhook cdi generate` to write the inventory cache {})", cache.display())]
    Inventory { cache: PathBuf, reason: String },
    /// Building the edits from the inventory failed.
    #[error("cannot build the container edits: {0}")]
    Edits(gpuhook_cdi::CdiError),
    /// The plan is not safe or not possible to apply; found before anything was injected.
    #[error("refusing to inject into container {container}: {reason}")]
    Invalid { container: String, reason: String },
    /// The edits cannot be planned (found before anything was injected).
    #[error("refusing to inject into container {container}: {error}")]
    Plan { container: String, error: PlanError },
    /// A host file the plan needs does not match the inventory (stale cache, driver reloaded).
    #[error("host {what} {}: {reason} (the inventory cache looks stale: run `gpuhook cdi generate` again)", path.display())]
    Host {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// Checking the container root before injecting found a problem (nothing was changed).
    #[error("refusing to inject into container {container}: {error}")]
    Preflight {
        container: String,
        error: gpuhook_inject::InjectError,
    },
    /// An operation inside the container root or its cgroup failed.
    #[error("injecting into container {container} failed while {step}: {error}")]
    Inject {
        container: String,
        step: &'static str,
        error: gpuhook_inject::InjectError,
    },
}

/// By hand rather than `#[from]`, which would make the cause a `source` too (printed twice).
impl From<gpuhook_cdi::CdiError> for PrestartError {
    fn from(error: gpuhook_cdi::CdiError) -> Self {
        PrestartError::Edits(error)
    }
}

impl PrestartError {
    /// Shorthand for [`PrestartError::Invalid`].
    pub(crate) fn invalid(container: &str, reason: impl Into<String>) -> Self {
        PrestartError::Invalid {
            container: container.to_string(),
            reason: reason.into(),
        }
    }

    /// True for errors raised before the first change to the container (validation, request,
    /// inventory); false for failures while injecting.
    pub fn is_before_injection(&self) -> bool {
        !matches!(self, PrestartError::Inject { .. })
    }
}

/// Why edits cannot become a plan: found before anything is done, so nothing is injected.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("device node {path}: only character devices")]
    NotCharDevice { path: String },
    #[error("device node {path}: {what} {value:?} is missing or out of range")]
    DeviceNumber {
        path: String,
        what: &'static str,
        value: Option<i64>,
    },
    #[error("mount {path}: only bind mounts")]
    NotBindMount { path: String },
    #[error("mount {path}: unsupported option {option:?}")]
    MountOption { path: String, option: String },
    #[error("mount {path}: options {options:?} lack nosuid,nodev")]
    MountUnsafe { path: String, options: Vec<String> },
    #[error(transparent)]
    Path(#[from] gpuhook_inject::InjectError),
    #[error("unsupported hook {args:?}")]
    UnsupportedHook { args: Vec<String> },
    #[error("unsupported hook {name:?}")]
    UnsupportedHookName { name: String },
    #[error("{hook}: {error}")]
    HookArgs { hook: String, error: SetupArgsError },
    #[error("{hook}: unexpected {flag:?}")]
    UnexpectedFlag { hook: String, flag: &'static str },
    #[error("GPU {index} is not in the inventory")]
    NoGpu { index: u32 },
    #[error("MIG device {parent}:{index} is not in the inventory")]
    NoMig { parent: u32, index: u32 },
    #[error(transparent)]
    Extras(#[from] ExtrasError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhook_inject::InjectError;

    fn ldconfig_failed() -> InjectError {
        InjectError::Ldconfig {
            binary: "/sbin/ldconfig".into(),
            rootfs: "/r".into(),
            reason: "exited with 7".into(),
        }
    }

    /// Each wrapped cause appears once in the `source()` chain, as `{:#}` prints it.
    #[test]
    fn a_cause_is_printed_once() {
        let errors = [
            PrestartError::Inject {
                container: "c1".into(),
                step: "updating the ld cache",
                error: ldconfig_failed(),
            },
            PrestartError::Preflight {
                container: "c1".into(),
                error: ldconfig_failed(),
            },
            PrestartError::Plan {
                container: "c1".into(),
                error: PlanError::Path(ldconfig_failed()),
            },
        ];
        for e in errors {
            let chain: Vec<String> =
                std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .map(ToString::to_string)
                    .collect();
            assert_eq!(
                chain.join(": ").matches("exited with 7").count(),
                1,
                "{chain:?}"
            );
        }
    }
}
