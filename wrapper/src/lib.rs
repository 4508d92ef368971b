//! `gpuhook-runtime`, the runc wrapper containerd's shim runs instead of runc: the whole wrapper,
//! with a thin `main` in `src/bin/gpuhook-runtime.rs`.
//!
//! Read it top to bottom: [`main`] loads gpuhook's config; [`entry`] parses runc's argv
//! ([`argv`]), edits the bundle for `create`/`run` ([`run`]: the container's request read once by
//! `request.rs`, CDI names resolved by `resolve.rs` with specs made in memory by `node.rs`, our
//! setup hook's work started early by `early.rs` and [`takeover`]), then execs the runtime
//! ([`exec`]) or runs it beside that work; failures go to runc's `--log` file ([`runclog`]).
//!
//! containerd's runc shim runs this binary instead of runc for every runc command of a container
//! (`create`, `start`, `state`, `kill`, `delete`, ...). runc's **stdout belongs to the container
//! or to the shim** (`runc state` prints JSON the shim parses), so nothing here ever writes to
//! stdout; diagnostics go to the config's `log-file`, else to runc's `--log` file (see [`logs`]).
//!
//! The config is `$GPUHOOK_CONFIG`, else `/etc/gpuhook/config.toml` (missing = defaults). Note
//! for admins: `ctr run --env` and a pod's env reach the *container*, not the wrapper; the
//! wrapper sees the shim's environment, which is containerd's. So either use the default path or
//! set `GPUHOOK_CONFIG` in containerd's own environment (systemd `Environment=`).
//!
//! A broken config refuses `create`/`run` (the error names the file and line, and reaches the
//! user through containerd), but every other command still passes through to the default
//! runtimes: a typo in the config must not make existing containers impossible to stop/delete.
//!
//! What is injected (`request.rs`): in `cdi` mode (the default) the request becomes CDI names,
//! resolved from the spec dirs; names no spec file defines are generated in memory from the
//! node's inventory (`node.rs`) when `generate-missing = true` (the default), so a container
//! started before `gpuhook cdi generate` ran at boot (or naming a device by an alias the spec
//! file does not list, e.g. a PCI bus id) still works, while a spec file always wins.
//! A CRI container of a pod whose DRA claims gpuhook-dra-plugin indexed also gets those claims'
//! CDI names ([`claim_index`]: containerd 1.6 drops the kubelet's CRI `CDI_devices`).
//!
//! For `create`, the work of our own `gpuhook hook setup` hook (links, ld.so.cache) is done by
//! the wrapper beside `runc create` instead of inside it, when it can be done the same way
//! (`early.rs`, `[runtime] early-setup = true`, the default).

pub mod argv;
pub mod claim_index;
mod early;
pub mod entry;
pub mod error;
pub mod exec;
pub mod legacy;
mod logs;
mod node;
pub mod reinject;
mod request;
pub mod resolve;
pub mod run;
pub mod runclog;
pub mod takeover;

use std::ffi::OsString;
use std::path::PathBuf;

use gpuhook::config::{Config, CONFIG_ENV};

pub use argv::{parse as parse_argv, ArgvError, Intercept, RuncArgs};
pub use early::EarlySetupTakeover;
pub use entry::{main_with, prepare_with, report_error, Prepared};
pub use error::{InjectionError, NodeError, RuntimeError, EXIT_FAILURE};
pub use exec::{find_runtime, ExecPlan};
pub use legacy::remove_legacy_hooks;
pub use node::NodeState;
pub use request::WrapperRequest;
pub use run::{edit_bundle_with, Edited, Extensions, Injection, RuntimeConfig};

/// The wrapper's settings from gpuhook's config.
pub fn runtime_config(config: &Config) -> run::RuntimeConfig {
    run::RuntimeConfig {
        runtimes: config.runtime.runtimes.iter().map(PathBuf::from).collect(),
        spec_dirs: config.cdi_spec_dirs.clone(),
        path_env: None,
        self_exe: None,
    }
}

/// Whether runc's argv is a command that creates a container (the only one that needs the config).
fn creates(argv: &[OsString]) -> bool {
    // An argv the parser refuses is treated as `create`: the wrapper core fails it anyway.
    argv::parse(argv).map_or(true, |a| matches!(a.intercept(), Intercept::Bundle { .. }))
}

/// The whole `gpuhook-runtime` binary.
pub fn main() -> ! {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let path = std::env::var_os(CONFIG_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let config = match Config::load(path.as_deref()) {
        Ok(c) => c,
        Err(e) if creates(&argv) => {
            entry::report_error(&argv, &e);
            std::process::exit(error::EXIT_FAILURE)
        }
        Err(e) => {
            // stderr of non-create commands is read by the shim only when the runtime fails.
            eprintln!(
                "gpuhook-runtime: warning: {e}; passing the command through to the default runtime"
            );
            Config::default()
        }
    };
    // Pass-through commands (start, state, kill, delete, ...) only exec the runtime: no logging
    // set-up on their path (it is most of their start-up cost); their failures still reach
    // stderr and runc's --log file through `report_error`.
    if creates(&argv) {
        logs::init(&config, &argv);
        config.log_warnings();
    }
    let node = NodeState::new(&config);
    let request = WrapperRequest::new(&config, &node);
    let takeover = EarlySetupTakeover::new(&config, &node);
    let ext = run::Extensions {
        // Always plugged in: it generates only with `generate-missing = true`, and explains
        // an unresolvable name either way.
        generate: Some(&node as &dyn resolve::GenerateMissing),
        takeover: Some(&takeover),
    };
    entry::main_with(&argv, &runtime_config(&config), &request, &ext)
}

#[cfg(test)]
mod tests;
