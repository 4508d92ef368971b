//! The wrapper from argv to exec: parse runc's command line, edit the bundle for `create`/`run`
//! ([`crate::run::edit_bundle_with`]), find the runtime, then exec it, or run it beside the work
//! taken over from a hook ([`crate::takeover`]); a failure is reported where the user sees it.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::argv::{self, Intercept};
use crate::error::{RuntimeError, EXIT_FAILURE};
use crate::exec::{find_runtime, ExecPlan};
use crate::run::{edit_bundle_with, DeviceRequest, Extensions, RuntimeConfig};
use crate::runclog;
use crate::takeover::{run_beside, EarlyWork, Outcome};

/// What [`prepare_with`] leaves to do.
#[derive(Debug)]
pub struct Prepared {
    /// The runtime and its argv.
    pub plan: ExecPlan,
    /// Work taken over from hooks: run the runtime beside it ([`run_beside`]), never exec.
    pub work: Option<Box<dyn EarlyWork>>,
    /// The parsed argv (for the container id and global options).
    pub args: argv::RuncArgs,
}

/// Everything but the exec: edits the bundle for `create`/`run` and picks the runtime.
pub fn prepare_with(
    argv: &[OsString],
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    ext: &Extensions<'_>,
) -> Result<Prepared, RuntimeError> {
    let args = argv::parse(argv)?;
    let mut work = None;
    if let Intercept::Bundle { bundle, command } = args.intercept() {
        // Only `create` may run beside taken-over work (see the `takeover` module).
        let ext = Extensions {
            takeover: ext.takeover.filter(|_| command == "create"),
            ..*ext
        };
        work = edit_bundle_with(&bundle, args.container_id.as_deref(), config, request, &ext)?.work;
    }
    let path_env = config.path_env.clone().or_else(|| std::env::var_os("PATH"));
    let self_exe = config
        .self_exe
        .clone()
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let program =
        find_runtime(&config.runtimes, path_env.as_deref(), &self_exe).map_err(|lookup| {
            RuntimeError::NoRuntime {
                candidates: config.runtimes.clone(),
                skipped_self: lookup.skipped_self,
            }
        })?;
    Ok(Prepared {
        plan: ExecPlan::new(program, argv),
        work,
        args,
    })
}

/// Reports a failure where the user will see it: stderr and, when runc's argv names one, the
/// `--log` file in its `--log-format` (containerd shows that file's last error).
pub fn report_error(argv: &[OsString], error: &dyn std::fmt::Display) {
    let msg = format!("gpuhook-runtime: {error}");
    eprintln!("{msg}");
    tracing::error!(error = %error, "gpuhook-runtime failed");
    let args = argv::parse(argv).unwrap_or_else(|_| lenient_log_args(argv));
    if let Some(log) = &args.log {
        if let Err(e) = runclog::append_error(log, args.log_is_json(), &msg) {
            eprintln!("gpuhook-runtime: cannot write {}: {e}", log.display());
        }
    }
}

/// `--log`/`--log-format` found even when the command could not be parsed.
fn lenient_log_args(argv: &[OsString]) -> argv::RuncArgs {
    let mut args = argv::RuncArgs::default();
    let mut it = argv.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(a) = it.next() {
        let a = a.trim_start_matches('-');
        let (name, inline) = a.split_once('=').map_or((a, None), |(n, v)| (n, Some(v)));
        let mut value = || {
            inline
                .map(str::to_string)
                .or_else(|| it.next().map(|s| s.into_owned()))
        };
        match name {
            "log" => args.log = value().map(PathBuf::from),
            "log-format" => args.log_format = value(),
            _ => {}
        }
    }
    args
}

/// The whole wrapper for a binary: execs the runtime, or runs it beside taken-over work; on
/// failure reports and exits with [`EXIT_FAILURE`].
pub fn main_with(
    argv: &[OsString],
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    ext: &Extensions<'_>,
) -> ! {
    let err = match prepare_with(argv, config, request, ext) {
        Ok(Prepared {
            plan, work: None, ..
        }) => RuntimeError::Exec {
            error: plan.exec(),
            path: plan.program,
        },
        Ok(Prepared {
            plan,
            work: Some(work),
            args,
        }) => match run_beside(&plan, &args, work) {
            Ok(Outcome {
                exit_code,
                error: None,
            }) => std::process::exit(exit_code),
            Ok(Outcome {
                exit_code,
                error: Some(error),
            }) => {
                report_error(argv, &error);
                std::process::exit(exit_code)
            }
            Err(error) => RuntimeError::Exec {
                error,
                path: plan.program,
            },
        },
        Err(e) => e,
    };
    report_error(argv, &err);
    std::process::exit(EXIT_FAILURE)
}

/// [`prepare_with`] without extensions (tests of the core).
#[cfg(test)]
pub(crate) fn prepare(
    argv: &[OsString],
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    generate: Option<&dyn crate::resolve::GenerateMissing>,
) -> Result<ExecPlan, RuntimeError> {
    let ext = Extensions {
        generate,
        takeover: None,
    };
    prepare_with(argv, config, request, &ext).map(|p| p.plan)
}
