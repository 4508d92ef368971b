//! The wrapper: `create` edits the bundle's `config.json`, then every command execs the runtime.
//!
//! Order of work for `create`/`run`, chosen so a failure never leaves a half-edited bundle:
//! read `config.json`, ask the caller's [`DeviceRequest`] what the container wants, resolve every
//! CDI name (spec dirs, then the optional [`GenerateMissing`] for what they lack) *before*
//! changing anything, drop legacy GPU prestart hooks, apply, write atomically, exec. A container
//! that asks for nothing is not rewritten at all.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpuhook_cdi::registry::LoadedSpec;
use gpuhook_cdi::{apply_devices, apply_edits, ContainerEdits, Registry, RegistryDevice, Spec};
use gpuhook_node::bounded::{preview_list, read_bounded, MAX_OCI_CONFIG_BYTES};
use serde_json::Value;

use crate::argv::{self, Intercept};
use crate::exec::{find_runtime, ExecPlan};
use crate::takeover::{run_beside, EarlyWork, HookTakeover, Outcome};
use crate::{legacy, reinject, runclog};
use gpuhook_runtime::atomic;

/// Error type of the caller's callbacks.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Most device names an error message lists (the rest are counted): a container chooses them.
pub const MAX_NAMES_SHOWN: usize = 16;

/// Exit status of the wrapper when it fails (runc's own failure status).
pub const EXIT_FAILURE: i32 = 1;

/// What a container asks to have injected.
#[derive(Debug, Clone, PartialEq)]
pub enum Injection {
    /// Fully qualified CDI device names (`nvidia.com/gpu=0`), applied from the spec dirs.
    Cdi(Vec<String>),
    /// Edits computed by the caller (e.g. a prestart hook in legacy mode, or JIT edits).
    Edits(Box<ContainerEdits>),
    /// CDI names, then edits the caller adds (device nodes no spec has, e.g. MIG capabilities).
    CdiWithEdits(Vec<String>, Box<ContainerEdits>),
}

impl Injection {
    /// The CDI names to resolve, if any.
    pub fn cdi_names(&self) -> Option<&[String]> {
        match self {
            Injection::Cdi(n) | Injection::CdiWithEdits(n, _) => Some(n),
            Injection::Edits(_) => None,
        }
    }
}

/// Turns a container's OCI spec into what to inject; `Ok(None)`: not a GPU container.
/// `bundle` is the container's bundle directory (where `spec` was read from); `container` is the
/// id runc was given (for the decision log; `None` if argv had none).
pub trait DeviceRequest {
    fn injection(
        &self,
        bundle: &Path,
        container: Option<&str>,
        spec: &Value,
    ) -> Result<Option<Injection>, BoxError>;
}

/// A closure returning CDI names is a request (an empty list: nothing to inject).
impl<F> DeviceRequest for F
where
    F: Fn(&Value) -> Result<Vec<String>, BoxError>,
{
    fn injection(
        &self,
        _: &Path,
        _: Option<&str>,
        spec: &Value,
    ) -> Result<Option<Injection>, BoxError> {
        let names = self(spec)?;
        Ok((!names.is_empty()).then_some(Injection::Cdi(names)))
    }
}

/// Makes specs in memory for requested devices that no spec file defines (`generate-missing`).
/// It gets the unresolved qualified names and returns specs defining some or all of them; what
/// it leaves undefined is reported as unresolvable.
pub trait GenerateMissing {
    fn generate(&self, missing: &[String]) -> Result<Vec<Spec>, BoxError>;

    /// For the error about names nothing defines: what does exist (e.g. the node's devices).
    fn explain(&self, _unresolved: &[String]) -> Option<String> {
        None
    }
}

impl<F> GenerateMissing for F
where
    F: Fn(&[String]) -> Result<Vec<Spec>, BoxError>,
{
    fn generate(&self, missing: &[String]) -> Result<Vec<Spec>, BoxError> {
        self(missing)
    }
}

/// Settings of the wrapper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Runtimes to exec, first found wins: bare names are looked up on PATH, others are paths.
    pub runtimes: Vec<PathBuf>,
    /// CDI spec directories, lowest priority first.
    pub spec_dirs: Vec<PathBuf>,
    /// PATH for the lookup; None: this process's PATH.
    pub path_env: Option<OsString>,
    /// This executable, never exec'd; None: `/proc/self/exe`.
    pub self_exe: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            runtimes: vec!["runc".into(), "crun".into()],
            spec_dirs: gpuhook_cdi::DEFAULT_SPEC_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
            path_env: None,
            self_exe: None,
        }
    }
}

pub use crate::error::RuntimeError;

/// Registers in-memory specs in `registry` (after the spec dirs, so a file always wins).
fn add_generated(registry: &mut Registry, specs: Vec<Spec>) {
    let base = registry.specs.len();
    for (i, spec) in specs.into_iter().enumerate() {
        let loaded = Arc::new(LoadedSpec {
            path: PathBuf::from(format!("<generated in memory #{}>", base + i)),
            priority: usize::MAX,
            spec,
        });
        registry.specs.push(loaded.clone());
        for (index, (name, _)) in loaded.spec.qualified_devices().enumerate() {
            registry.devices.entry(name).or_insert(RegistryDevice {
                spec: loaded.clone(),
                index,
            });
        }
    }
}

fn resolve(
    names: &[String],
    config: &RuntimeConfig,
    generate: Option<&dyn GenerateMissing>,
) -> Result<Registry, RuntimeError> {
    let mut registry = Registry::load(&config.spec_dirs);
    for e in &registry.errors {
        tracing::warn!(file = %e.path.display(), error = %e.message, "skipping CDI spec");
    }
    let missing = |r: &Registry| -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        names
            .iter()
            .filter(|n| r.get(n).is_none() && seen.insert(n.as_str()))
            .cloned()
            .collect()
    };
    let mut unknown = missing(&registry);
    if let (false, Some(generate)) = (unknown.is_empty(), generate) {
        let specs = generate
            .generate(&unknown)
            .map_err(|source| RuntimeError::Generate {
                names: unknown.clone(),
                source,
            })?;
        add_generated(&mut registry, specs);
        unknown = missing(&registry);
    }
    if !unknown.is_empty() {
        let hint = generate.and_then(|g| g.explain(&unknown));
        return Err(RuntimeError::Unresolvable {
            names: unknown,
            dirs: config.spec_dirs.clone(),
            hint,
        });
    }
    Ok(registry)
}

/// Edits `<bundle>/config.json` for the request; returns whether the file was rewritten.
/// `container` is runc's container id (for the logs).
pub fn edit_bundle(
    bundle: &Path,
    container: Option<&str>,
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    generate: Option<&dyn GenerateMissing>,
) -> Result<bool, RuntimeError> {
    let ext = Extensions {
        generate,
        takeover: None,
    };
    edit_bundle_with(bundle, container, config, request, &ext).map(|e| e.rewritten)
}

/// The optional parts of the wrapper a caller plugs in.
#[derive(Clone, Copy, Default)]
pub struct Extensions<'a> {
    /// Specs made in memory for names no spec file defines.
    pub generate: Option<&'a dyn GenerateMissing>,
    /// Hooks of the edited spec the wrapper does itself, for `create` (see [`crate::takeover`]).
    pub takeover: Option<&'a dyn HookTakeover>,
}

impl std::fmt::Debug for Extensions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("generate", &self.generate.is_some())
            .field("takeover", &self.takeover.is_some())
            .finish()
    }
}

/// What [`edit_bundle_with`] did.
#[derive(Debug, Default)]
pub struct Edited {
    /// `config.json` was rewritten.
    pub rewritten: bool,
    /// Work taken over from the spec's hooks, running; the runtime must run beside it.
    pub work: Option<Box<dyn EarlyWork>>,
}

/// [`edit_bundle`] with every extension; `ext.takeover` is asked once the edits are made.
pub fn edit_bundle_with(
    bundle: &Path,
    container: Option<&str>,
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    ext: &Extensions<'_>,
) -> Result<Edited, RuntimeError> {
    let generate = ext.generate;
    let start = std::time::Instant::now();
    let path = bundle.join("config.json");
    let bytes = read_bounded(&path, MAX_OCI_CONFIG_BYTES).map_err(RuntimeError::ReadSpec)?;
    let mut spec: Value =
        serde_json::from_slice(&bytes).map_err(|source| RuntimeError::ParseSpec {
            path: path.clone(),
            source,
        })?;
    let injection = request
        .injection(bundle, container, &spec)
        .map_err(|source| RuntimeError::Request {
            path: path.clone(),
            source,
        })?;
    let injection = injection.filter(|i| !matches!(i, Injection::Cdi(n) if n.is_empty()));
    let Some(injection) = injection else {
        tracing::debug!(bundle = %bundle.display(), "no GPU request, spec untouched");
        return Ok(Edited::default());
    };
    // Resolve before touching anything: an unresolvable name leaves the spec as it was.
    let requested = start.elapsed();
    let registry = match injection.cdi_names() {
        Some(names) => Some(resolve(names, config, generate)?),
        None => None,
    };
    let resolved = start.elapsed();
    let removed = legacy::remove_legacy_hooks(&mut spec);
    if !removed.is_empty() {
        tracing::info!(hooks = ?removed, "removed legacy GPU prestart hooks");
    }
    let before_edits = spec.clone();
    let empty = Registry::default();
    let reg = registry.as_ref().unwrap_or(&empty);
    let applied = match &injection {
        Injection::Cdi(names) => apply_devices(&mut spec, reg, names),
        Injection::CdiWithEdits(names, edits) => {
            apply_devices(&mut spec, reg, names).and_then(|()| apply_edits(&mut spec, edits))
        }
        Injection::Edits(edits) => apply_edits(&mut spec, edits),
    };
    applied.map_err(|source| RuntimeError::Apply {
        path: path.clone(),
        source,
    })?;
    let duplicates = reinject::drop_reinjected(&before_edits, &mut spec);
    if duplicates > 0 {
        tracing::info!(
            duplicates,
            "devices were already applied; skipped their hooks and cgroup rules"
        );
    }
    let work = ext
        .takeover
        .and_then(|t| t.take_over(bundle, container, &mut spec));
    let edited = start.elapsed();
    let out = serde_json::to_vec(&spec).map_err(|e| RuntimeError::WriteSpec {
        path: path.clone(),
        source: e.into(),
    })?;
    // Atomic, not durable: see `atomic::write_atomic_with`.
    atomic::write_atomic_with(&path, &out, 0o644, false).map_err(|source| {
        RuntimeError::WriteSpec {
            path: path.clone(),
            source,
        }
    })?;
    if let Some(names) = injection.cdi_names() {
        let devices = preview_list(names, MAX_NAMES_SHOWN);
        tracing::info!(bundle = %bundle.display(), devices = %devices, "injected CDI devices");
    }
    tracing::debug!(
        request_us = requested.as_micros() as u64,
        resolve_us = (resolved - requested).as_micros() as u64,
        apply_us = (edited - resolved).as_micros() as u64,
        write_us = (start.elapsed() - edited).as_micros() as u64,
        "edit_bundle timings"
    );
    Ok(Edited {
        rewritten: true,
        work,
    })
}

/// Everything but the exec: edits the bundle for `create`/`run` and picks the runtime.
pub fn prepare(
    argv: &[OsString],
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    generate: Option<&dyn GenerateMissing>,
) -> Result<ExecPlan, RuntimeError> {
    let ext = Extensions {
        generate,
        takeover: None,
    };
    prepare_with(argv, config, request, &ext).map(|p| p.plan)
}

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

/// [`prepare`] with every extension.
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

/// [`prepare`] then exec; returns only on failure.
pub fn run(
    argv: &[OsString],
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    generate: Option<&dyn GenerateMissing>,
) -> RuntimeError {
    match prepare(argv, config, request, generate) {
        Ok(plan) => RuntimeError::Exec {
            source: plan.exec(),
            path: plan.program,
        },
        Err(e) => e,
    }
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

/// The whole wrapper for a binary: run, and on failure report and exit with [`EXIT_FAILURE`].
pub fn main(
    argv: &[OsString],
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    generate: Option<&dyn GenerateMissing>,
) -> ! {
    let ext = Extensions {
        generate,
        takeover: None,
    };
    main_with(argv, config, request, &ext)
}

/// [`main`] with every extension: execs the runtime, or runs it beside taken-over work.
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
            source: plan.exec(),
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
            Err(source) => RuntimeError::Exec {
                source,
                path: plan.program,
            },
        },
        Err(e) => e,
    };
    report_error(argv, &err);
    std::process::exit(EXIT_FAILURE)
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
