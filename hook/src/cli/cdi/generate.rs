//! `gpuhook cdi generate`: discovery -> spec -> atomic write, plus the inventory cache.
//!
//! Every failure leaves the previous spec untouched and ends in one line naming the file and the
//! fix: the library errors already say both, so they are passed through with little context.
//! A spec made without NVML would silently lack MIG devices and stay on disk for a long time, so
//! an unusable NVML is an error unless the operator opts into the `/proc` fallback.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuhook_cdi::{default_file_name, Format, GenerateOptions, Spec, WriteOutcome};
use gpuhook_node::{discover, DiscoverOptions, DiscoverySource, Inventory};

use super::{canonical_dir, empty, print_stdout, takeover, GenerateArgs};
use crate::cli::{CdiCliError, CliError};
use crate::config::Config;

/// Where generated specs go by default (the runtimes' higher-priority, generated-specs directory).
pub const DEFAULT_OUTPUT_DIR: &str = "/var/run/cdi";

/// Where the spec goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Output {
    Stdout(Format),
    /// A file the operator named.
    File(PathBuf, Format),
    /// The default file name in a directory (the default one or `--output DIR`).
    InDir(PathBuf, Format),
}

impl Output {
    fn resolve(
        output: Option<&Path>,
        format: Option<Format>,
        kind: &str,
    ) -> Result<Self, CdiCliError> {
        let in_dir = |dir: &Path| {
            let f = format.unwrap_or(Format::Json);
            Output::InDir(dir.join(default_file_name(kind, f)), f)
        };
        let Some(p) = output else {
            return Ok(in_dir(Path::new(DEFAULT_OUTPUT_DIR)));
        };
        if p == Path::new("-") {
            return Ok(Output::Stdout(format.unwrap_or(Format::Json)));
        }
        if p.is_dir() || p.as_os_str().as_bytes().ends_with(b"/") {
            return Ok(in_dir(p));
        }
        // `.yml` is YAML too (nvidia-ctk generate.go `formatFromFilename`), though runtimes load
        // only `*.yaml` (warned below).
        let by_extension = Format::from_path(p)
            .or_else(|| (p.extension() == Some("yml".as_ref())).then_some(Format::Yaml));
        match (format, by_extension) {
            (Some(f), Some(e)) if f != e => {
                return Err(CdiCliError::FormatMismatch {
                    format: f.as_str(),
                    path: p.to_path_buf(),
                })
            }
            _ if p.extension() == Some("yml".as_ref()) || by_extension.is_none() => tracing::warn!(
                output = %p.display(),
                "runtimes load only *.json and *.yaml files from their spec directories; this file \
                 will not be picked up there"
            ),
            _ => {}
        }
        Ok(Output::File(
            p.to_path_buf(),
            format.or(by_extension).unwrap_or(Format::Json),
        ))
    }
}

/// The gpuhook binary the spec's hooks run: `--gpuhook-path`, else this executable (canonical).
fn gpuhook_path(given: Option<&PathBuf>) -> Result<PathBuf, CdiCliError> {
    match given {
        Some(p) if p.is_absolute() => {
            if !p.is_file() {
                tracing::warn!(path = %p.display(), "--gpuhook-path does not exist on this host; the spec's hooks will fail until it does");
            }
            Ok(p.clone())
        }
        Some(p) => Err(CdiCliError::RelativeGpuhookPath { path: p.clone() }),
        // The kernel's `/proc/self/exe` is already canonical (every link resolved).
        None => std::env::current_exe().map_err(|error| CdiCliError::CurrentExe { error }),
    }
}

fn cache_path<'a>(args: &'a GenerateArgs, config: &'a Config) -> Option<&'a Path> {
    let path = args.inventory_cache.as_deref();
    (!args.no_inventory_cache).then(|| path.unwrap_or(&config.inventory_cache))
}

/// Saves the inventory for the prestart hook; a failure is a warning (the spec is what matters).
/// An identical cache is left alone: rewriting it (with its fsync) would cost more than the rest
/// of a refresh.
fn save_cache(inv: &Inventory, path: &Path) {
    let result = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display())),
        None => Ok(()),
    }
    .and_then(|()| inv.save_json_if_changed(path).map_err(|e| e.to_string()));
    match result {
        Ok(true) => tracing::debug!(path = %path.display(), "inventory cache saved"),
        Ok(false) => tracing::debug!(path = %path.display(), "inventory cache unchanged"),
        Err(e) => tracing::warn!(
            path = %path.display(),
            "inventory cache not saved ({e}); `gpuhook prestart` will rediscover the node on every \
             container start (pass --inventory-cache PATH to put it elsewhere)"
        ),
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

pub(super) fn run(args: &GenerateArgs, config: &Config) -> Result<(), CliError> {
    let start = Instant::now();
    let (driver_root, dev_root) = roots(args, config)?;
    let flags = args.nvidia.resolve()?;
    let class = args.class.clone().unwrap_or_else(|| {
        flags
            .mode
            .map_or(gpuhook_cdi::DEFAULT_CLASS, |m| m.default_class())
            .to_string()
    });
    let kind = format!("{}/{class}", args.vendor);
    let output = Output::resolve(args.output.as_deref(), args.format.map(Into::into), &kind)?;
    let gpuhook_path = gpuhook_path(args.gpuhook_path.as_ref().or(flags.gpuhook_path.as_ref()))?;

    let discovery = discover(&DiscoverOptions {
        driver_root,
        dev_root,
        nvml_lib: args.nvml_lib.clone(),
    })?;
    let needs_gpus = matches!(flags.mode, None | Some(gpuhook_cdi::Mode::Management));
    check_nvml(&discovery, needs_gpus && !args.allow_procfs_fallback)?;
    let inv = discovery.inventory;
    let discovered = start.elapsed();

    let opts = options(args, &flags, class, gpuhook_path);
    let spec_inv = if flags.no_ipc {
        let mut i = inv.clone();
        i.files.ipc.clear();
        std::borrow::Cow::Owned(i)
    } else {
        std::borrow::Cow::Borrowed(&inv)
    };
    let spec = match flags.mode {
        None => gpuhook_cdi::generate(&spec_inv, &opts),
        Some(mode) => gpuhook_cdi::generate_mode(&spec_inv, mode, &opts),
    };
    let spec = match spec {
        Err(gpuhook_cdi::CdiError::NothingToDescribe { reason }) if !args.fail_on_empty => {
            let save = || {
                if let Some(path) = cache_path(args, config) {
                    save_cache(&inv, path);
                }
            };
            return Ok(nothing_to_describe(
                &reason,
                &output,
                &kind,
                &config.cdi_spec_dirs,
                save,
            )?);
        }
        other => other?,
    };
    let generated = start.elapsed();

    let (shown, outcome) = write(&spec, &output, args.force, &config.cdi_spec_dirs)?;
    let written = start.elapsed();
    if let Some(path) = cache_path(args, config) {
        save_cache(&inv, path);
    }
    tracing::debug!(
        discover_us = micros(discovered),
        generate_us = micros(generated - discovered),
        write_us = micros(written - generated),
        cache_us = micros(start.elapsed() - written),
        "cdi generate timings"
    );
    let verb = match outcome {
        WriteOutcome::Written => "wrote",
        WriteOutcome::Unchanged => "unchanged",
    };
    // One write (stderr is unbuffered: `eprintln!` would write each piece of the line).
    let line = format!(
        "{verb} {shown}: {} devices (cdiVersion {})\n",
        spec.devices.len(),
        spec.cdi_version
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    Ok(())
}

/// The driver root and the dev root (when one is set), canonical.
fn roots(args: &GenerateArgs, config: &Config) -> Result<(PathBuf, Option<PathBuf>), CliError> {
    let driver_root = args.driver_root.as_deref().unwrap_or(&config.driver_root);
    let dev_root = args.dev_root.as_deref().or(config.dev_root.as_deref());
    Ok((
        canonical_dir("driver root", driver_root)?,
        dev_root.map(|d| canonical_dir("dev root", d)).transpose()?,
    ))
}

/// No device on the node: gpuhook's old spec at `output` goes, the inventory cache follows
/// (`save_cache`), one warning says why ([`empty`]). To stdout it stays an error.
fn nothing_to_describe(
    reason: &str,
    output: &Output,
    kind: &str,
    spec_dirs: &[PathBuf],
    save_cache: impl FnOnce(),
) -> Result<(), CdiCliError> {
    let (path, named) = match output {
        Output::Stdout(_) => {
            return Err(CdiCliError::NothingToPrint {
                reason: reason.to_string(),
            })
        }
        Output::File(p, _) => (p, true),
        Output::InDir(p, _) => (p, false),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let whole_dir = !named && takeover::is_spec_dir(dir, spec_dirs);
    let stale = empty::remove_stale(path, kind, whole_dir);
    save_cache();
    eprintln!("{}", empty::warning(reason, &stale));
    Ok(())
}

/// The generator's options from the command line.
fn options(
    args: &GenerateArgs,
    flags: &super::nvidia_flags::Resolved,
    class: String,
    gpuhook_path: PathBuf,
) -> GenerateOptions {
    let mut opts = GenerateOptions::new(gpuhook_path);
    opts.vendor = args.vendor.clone();
    opts.class = class;
    opts.name_strategies = args
        .device_name_strategy
        .iter()
        .map(|&s| s.into())
        .collect();
    opts.edits.ldconfig_path = args.ldconfig_path.clone();
    opts.edits.disabled_hooks = flags.disabled_hooks.clone();
    opts.all_device = flags.all_device;
    opts.device_ids = flags.device_ids.clone();
    opts
}

/// Logs discovery's warnings; with `required`, an unusable NVML is an error (its warnings become
/// the error line instead of being logged twice).
fn check_nvml(discovery: &gpuhook_node::Discovery, required: bool) -> Result<(), CdiCliError> {
    let nvml_failed = discovery.inventory.source != DiscoverySource::Nvml && required;
    let (nvml, other): (Vec<&String>, Vec<&String>) = discovery
        .warnings
        .iter()
        .partition(|w| nvml_failed && w.contains("NVML"));
    for w in other {
        tracing::warn!("{w}");
    }
    if nvml_failed {
        let nvml: Vec<&str> = nvml.into_iter().map(String::as_str).collect();
        return Err(CdiCliError::NvmlRequired {
            nvml: if nvml.is_empty() {
                "NVML is unusable".to_string()
            } else {
                nvml.join("; ")
            },
        });
    }
    Ok(())
}

/// Writes the spec; returns how to name the output and what happened. Other spec files that
/// define the same devices decide where it goes ([`takeover`]).
fn write(
    spec: &Spec,
    output: &Output,
    force: bool,
    spec_dirs: &[PathBuf],
) -> Result<(String, WriteOutcome), CliError> {
    match output {
        Output::Stdout(format) => {
            let bytes = spec.to_bytes(*format)?;
            print_stdout(&String::from_utf8_lossy(&bytes))?;
            Ok(("<stdout>".into(), WriteOutcome::Written))
        }
        Output::File(path, format) | Output::InDir(path, format) => {
            let dir = path.parent().unwrap_or(Path::new("."));
            let t = if takeover::is_spec_dir(dir, spec_dirs) {
                for note in takeover::other_dirs(spec, path, spec_dirs) {
                    eprintln!("gpuhook: note: {note}");
                }
                let named = matches!(output, Output::File(..));
                takeover::target(spec, path, *format, force, named)?
            } else {
                takeover::Target::plain(path, *format)
            };
            let outcome = if t.replace_foreign {
                tracing::warn!(path = %t.path.display(), "--force: replacing a spec file gpuhook did not write");
                gpuhook_cdi::write_spec_replacing(spec, &t.path, t.format)
            } else {
                gpuhook_cdi::write_spec(spec, &t.path, t.format)
            }?;
            if let Some(old) = &t.retire {
                retire(old, &spec.kind);
            }
            Ok((t.path.display().to_string(), outcome))
        }
    }
}

/// Removes our earlier spec file `old` (now replaced by a file of another name), if it is ours.
fn retire(old: &Path, kind: &str) {
    let ours = gpuhook_cdi::read_spec_file(old)
        .ok()
        .and_then(|b| Spec::from_slice(&b, Format::from_path(old)).ok())
        .is_some_and(|s| gpuhook_cdi::is_ours(&s, kind).is_ok());
    if !ours {
        return;
    }
    match std::fs::remove_file(old) {
        Ok(()) => eprintln!(
            "gpuhook: removed {} (its devices now live in the file above)",
            old.display()
        ),
        Err(e) => {
            tracing::warn!(path = %old.display(), error = %e, "cannot remove the old spec; runtimes will drop its devices until it is removed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: &str = "nvidia.com/gpu";

    #[test]
    fn output_defaults_to_the_generated_specs_dir() {
        assert_eq!(
            Output::resolve(None, None, KIND).unwrap(),
            Output::InDir("/var/run/cdi/nvidia.com-gpu.json".into(), Format::Json)
        );
        assert_eq!(
            Output::resolve(None, Some(Format::Yaml), KIND).unwrap(),
            Output::InDir("/var/run/cdi/nvidia.com-gpu.yaml".into(), Format::Yaml)
        );
        assert_eq!(
            Output::resolve(Some(Path::new("-")), None, KIND).unwrap(),
            Output::Stdout(Format::Json)
        );
    }

    #[test]
    fn output_dir_gets_the_default_name_and_files_their_extension() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Output::resolve(Some(dir.path()), None, "example.com/gpu").unwrap(),
            Output::InDir(dir.path().join("example.com-gpu.json"), Format::Json)
        );
        assert_eq!(
            Output::resolve(Some(Path::new("/nonexistent/new/")), None, KIND).unwrap(),
            Output::InDir("/nonexistent/new/nvidia.com-gpu.json".into(), Format::Json)
        );
        assert_eq!(
            Output::resolve(Some(Path::new("/x/s.yaml")), None, KIND).unwrap(),
            Output::File("/x/s.yaml".into(), Format::Yaml)
        );
        // nvidia-ctk v1.20.0 generate.go `formatFromFilename`: `.yml` is YAML.
        assert_eq!(
            Output::resolve(Some(Path::new("/x/s.yml")), None, KIND).unwrap(),
            Output::File("/x/s.yml".into(), Format::Yaml)
        );
        assert_eq!(
            Output::resolve(Some(Path::new("/x/s.yaml")), Some(Format::Yaml), KIND).unwrap(),
            Output::File("/x/s.yaml".into(), Format::Yaml)
        );
        let err = Output::resolve(Some(Path::new("/x/s.json")), Some(Format::Yaml), KIND)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("does not match") && err.contains("s.json"),
            "{err}"
        );
    }
}
