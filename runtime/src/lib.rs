//! gpuhook's containerd integration: the runc wrapper core and `gpuhook runtime configure`.
//!
//! containerd 1.6 has no CDI support, so GPU containers are prepared by a wrapper that the runc
//! shim executes instead of runc (`options.BinaryName`). The wrapper must be invisible: it parses
//! no more of runc's command line than it needs to find `create`/`run` and the bundle, edits the
//! bundle's `config.json` only when the container asks for GPUs, and then `exec`s the real
//! runtime with the original arguments. Everything else (`start`, `state`, `kill`, `delete`, ...)
//! goes straight through. [`wrapper`] is that core; the thin `gpuhook-runtime` binary (crate
//! `gpuhook`) supplies the request parser that turns a container's spec into CDI device names.
//!
//! [`configure`] registers the wrapper as a containerd runtime by editing containerd's TOML
//! config in place (comments and unrelated settings kept), for each config version.

pub mod argv;
pub mod configure;
pub mod exec;
pub mod legacy;
pub mod reinject;
pub mod runclog;
pub mod takeover;
pub mod wrapper;
pub mod wrapper_error;

pub use argv::{parse as parse_argv, ArgvError, Intercept, RuncArgs};
pub use configure::{
    configure, plan, ConfigVersion, ConfigureError, ConfigureOptions, ConfigureOutcome, FileChange,
    DEFAULT_BINARY, DEFAULT_CONFIG, DEFAULT_DROP_IN, DEFAULT_RUNTIME_NAME, EXIT_CHANGED,
    EXIT_ERROR, EXIT_UNCHANGED,
};
pub use exec::{find_runtime, ExecPlan};
pub use legacy::remove_legacy_hooks;
pub use takeover::{EarlyWork, HookTakeover};
pub use wrapper::{
    main, main_with, prepare, prepare_with, report_error, run, BoxError, DeviceRequest, Edited,
    Extensions, GenerateMissing, Injection, Prepared, RuntimeConfig, RuntimeError, EXIT_FAILURE,
    MAX_NAMES_SHOWN,
};
