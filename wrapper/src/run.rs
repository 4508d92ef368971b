//! The bundle edit: `create`/`run` rewrite the bundle's `config.json` for the container's request.
//!
//! Order of work, chosen so a failure never leaves a half-edited bundle: read `config.json` once
//! (a `serde_json::Value`, so fields we do not know are written back as they were), ask the
//! [`DeviceRequest`] (the container's request read by [`crate::WrapperRequest`]) what to inject,
//! resolve every CDI name (spec dirs, then [`GenerateMissing`] for what they lack,
//! [`crate::resolve`]) *before* changing anything, drop legacy GPU prestart hooks, apply, let the
//! [`HookTakeover`] start the work of our setup hook, write atomically. A container that asks for
//! nothing is not rewritten at all.
//!
//! The three traits are this crate's seams between the core and gpuhook's node and request
//! (`request.rs`, `node.rs`, `early.rs` implement them); the core's tests plug in small fakes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuhook_cdi::{apply_devices, apply_edits, ContainerEdits, Registry};
use gpuhook_fs::AtomicWriter;
use gpuhook_node::bounded::{preview_list, read_bounded, MAX_OCI_CONFIG_BYTES};
use gpuhook_request::limits::MAX_NAMES_SHOWN;
use serde_json::Value;

use crate::error::{InjectionError, RuntimeError};
use crate::resolve::{resolve, GenerateMissing};
use crate::takeover::{EarlyWork, HookTakeover};
use crate::{legacy, reinject};

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
    ) -> Result<Option<Injection>, InjectionError>;
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

/// Edits `<bundle>/config.json` for the request (`container`: runc's container id, for the
/// logs); `ext.takeover` is asked once the edits are made.
pub fn edit_bundle_with(
    bundle: &Path,
    container: Option<&str>,
    config: &RuntimeConfig,
    request: &dyn DeviceRequest,
    ext: &Extensions<'_>,
) -> Result<Edited, RuntimeError> {
    let start = Instant::now();
    let path = bundle.join("config.json");
    let mut spec = read_spec(&path)?;
    let injection = request
        .injection(bundle, container, &spec)
        .map_err(|error| RuntimeError::Request {
            path: path.clone(),
            error: Box::new(error),
        })?;
    let injection = injection.filter(|i| !matches!(i, Injection::Cdi(n) if n.is_empty()));
    let Some(injection) = injection else {
        tracing::debug!(bundle = %bundle.display(), "no GPU request, spec untouched");
        return Ok(Edited::default());
    };
    // Resolve before touching anything: an unresolvable name leaves the spec as it was.
    let requested = start.elapsed();
    let registry = match injection.cdi_names() {
        Some(names) => resolve(names, &config.spec_dirs, ext.generate)?,
        None => Registry::default(),
    };
    if let Some(names) = injection.cdi_names() {
        // An MPS share its clients cannot use would run them without limits, or stall them.
        let shares = gpuhook_request::mps_shares(&registry, names);
        if !shares.is_empty() {
            let user = gpuhook_request::ProcessUser::of(&spec);
            gpuhook_request::check_mps_access(&shares, &user)?;
        }
    }
    let resolved = start.elapsed();
    apply(&mut spec, &registry, &injection).map_err(|error| RuntimeError::Apply {
        path: path.clone(),
        error,
    })?;
    let work = ext
        .takeover
        .and_then(|t| t.take_over(bundle, container, &mut spec));
    let edited = start.elapsed();
    write_spec(&path, &spec)?;
    if let Some(names) = injection.cdi_names() {
        let devices = preview_list(names, MAX_NAMES_SHOWN);
        tracing::info!(bundle = %bundle.display(), devices = %devices, "injected CDI devices");
    }
    tracing::debug!(
        request_us = micros(requested),
        resolve_us = micros(resolved.saturating_sub(requested)),
        apply_us = micros(edited.saturating_sub(resolved)),
        write_us = micros(start.elapsed().saturating_sub(edited)),
        "edit_bundle timings"
    );
    Ok(Edited {
        rewritten: true,
        work,
    })
}

/// Reads `config.json` (bounded: a container chooses its size).
fn read_spec(path: &Path) -> Result<Value, RuntimeError> {
    let bytes = read_bounded(path, MAX_OCI_CONFIG_BYTES).map_err(RuntimeError::ReadSpec)?;
    serde_json::from_slice(&bytes).map_err(|error| RuntimeError::ParseSpec {
        path: path.to_path_buf(),
        error,
    })
}

/// Drops legacy GPU hooks, applies the injection, and drops what an earlier edit already added.
fn apply(
    spec: &mut Value,
    registry: &Registry,
    injection: &Injection,
) -> Result<(), gpuhook_cdi::CdiError> {
    let removed = legacy::remove_legacy_hooks(spec);
    if !removed.is_empty() {
        tracing::info!(hooks = ?removed, "removed legacy GPU prestart hooks");
    }
    let before_edits = spec.clone();
    match injection {
        Injection::Cdi(names) => apply_devices(spec, registry, names)?,
        Injection::CdiWithEdits(names, edits) => {
            apply_devices(spec, registry, names)?;
            apply_edits(spec, edits)?;
        }
        Injection::Edits(edits) => apply_edits(spec, edits)?,
    }
    let duplicates = reinject::drop_reinjected(&before_edits, spec);
    if duplicates > 0 {
        tracing::info!(
            duplicates,
            "devices were already applied; skipped their hooks and cgroup rules"
        );
    }
    Ok(())
}

/// Writes `spec` back: atomic, not durable (see `gpuhook_fs::AtomicWriter::durable`).
fn write_spec(path: &Path, spec: &Value) -> Result<(), RuntimeError> {
    let write_err = |error| RuntimeError::WriteSpec {
        path: path.to_path_buf(),
        error,
    };
    let out = serde_json::to_vec(spec).map_err(|e| write_err(e.into()))?;
    AtomicWriter::new(0o644)
        .keep_mode()
        .keep_owner()
        .durable(false)
        .write(path, &out)
        .map(drop)
        .map_err(|e| write_err(e.into_io()))
}

/// Microseconds for a log field (saturating: a start-up never takes 584,000 years).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// [`edit_bundle_with`] without extensions but the generator (tests of the core).
#[cfg(test)]
pub(crate) fn edit_bundle(
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

/// A closure returning CDI names is a request (an empty list: nothing to inject); tests only.
#[cfg(test)]
impl<F> DeviceRequest for F
where
    F: Fn(&Value) -> Result<Vec<String>, InjectionError>,
{
    fn injection(
        &self,
        _: &Path,
        _: Option<&str>,
        spec: &Value,
    ) -> Result<Option<Injection>, InjectionError> {
        let names = self(spec)?;
        Ok((!names.is_empty()).then_some(Injection::Cdi(names)))
    }
}

/// A closure returning specs is a generator; tests only.
#[cfg(test)]
impl<F> GenerateMissing for F
where
    F: Fn(&[String]) -> Result<Vec<gpuhook_cdi::Spec>, crate::error::NodeError>,
{
    fn generate(
        &self,
        missing: &[String],
    ) -> Result<Vec<gpuhook_cdi::Spec>, crate::error::NodeError> {
        self(missing)
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
