//! Materialiser: turns a [`NodeProfile`] into a driver root on disk.
//!
//! The driver root looks like `/` of a GPU node to everything that reads it: real character
//! device nodes, the NVIDIA `/proc` files (regular files at `<root>/proc/...`), ELF driver
//! libraries with an `ld.so.cache` built by the host's `ldconfig`, the mock NVML (reading the
//! same profile), binaries, firmware, sockets and vendor config files. Building twice into the
//! same directory converges (files are replaced atomically, correct device nodes are kept). A
//! marker file protects real directories: we only write into an empty directory or one that
//! we built before.

pub mod desktop;
pub mod devices;
pub mod files;
mod fsutil;
pub mod libraries;
pub mod mig_live;
pub mod procfs;

use std::path::{Path, PathBuf};

pub use devices::{device_nodes, DeviceNode};
pub use libraries::{libraries, InstalledLibrary};

use crate::load::ProfileError;
use crate::profile::NodeProfile;
use fsutil::{io, mkdirs, under, write_atomic};

/// File at the top of every driver root we build.
pub const MARKER_FILE: &str = ".gpuhook-sim";

/// Where the materialiser finds the built pieces it installs.
#[derive(Debug, Clone, Default)]
pub struct MaterialiseOptions {
    /// The mock NVML cdylib; default `<bin_dir>/libgpuhook_mock_nvml.so`.
    pub mock_nvml: Option<PathBuf>,
    /// Directory of built workspace binaries (`sim-nvidia-smi`, `sim-nvidia-cuda-mps-control`);
    /// default: the directory of the current executable (its parent when that is `deps/`).
    pub bin_dir: Option<PathBuf>,
    /// The `ldconfig` to run; default: the host's (`/sbin/ldconfig.real` first).
    pub ldconfig: Option<PathBuf>,
}

/// What was built.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The driver root (absolute).
    pub root: PathBuf,
    pub profile: String,
    pub device_nodes: usize,
    /// Library files (paths inside the root).
    pub libraries: Vec<String>,
    /// Binaries, firmware, sockets and config files (paths inside the root).
    pub files: Vec<String>,
    /// `<root>/etc/ld.so.cache`.
    pub ld_cache: PathBuf,
    /// Things left out, with the reason (e.g. a simulator binary that was not built).
    pub notes: Vec<String>,
}

/// Why a node could not be materialised.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("materialising device nodes needs CAP_MKNOD: run as root")]
    NeedsCapMknod,
    #[error("refusing to build a simulated node in {root}: it is not empty and has no {MARKER_FILE} marker (use an empty or new directory)")]
    NotASimRoot { root: PathBuf },
    /// The I/O error is part of the message, not a `source`: printed once.
    #[error("cannot {op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("mock NVML library {path} is missing: build it with `cargo build -p gpuhook-mock-nvml` (or pass --mock-nvml PATH)")]
    MockNvmlMissing { path: PathBuf },
    #[error("{path} is missing: build it with `cargo build -p {package}` (or pass --bin-dir DIR)")]
    BinaryMissing {
        path: PathBuf,
        package: &'static str,
    },
    #[error("no ldconfig found (looked for /sbin/ldconfig.real, /sbin/ldconfig, /usr/sbin/ldconfig): install libc-bin")]
    LdconfigNotFound,
    #[error("`{command}` failed: {detail}")]
    Ldconfig { command: String, detail: String },
}

/// Default directory of built binaries: the current executable's, or its parent for `deps/`.
pub fn default_bin_dir() -> Result<PathBuf, SimError> {
    let exe = std::env::current_exe().map_err(io(
        "find the current executable",
        Path::new("/proc/self/exe"),
    ))?;
    let dir = exe.parent().unwrap_or(Path::new("/")).to_path_buf();
    Ok(match (dir.file_name(), dir.parent()) {
        (Some(n), Some(parent)) if n == "deps" => parent.to_path_buf(),
        _ => dir,
    })
}

/// Creates `root` if needed and checks that it is ours (empty, or carries the marker). Returns
/// the canonical root and the paths the previous build recorded in the marker.
fn claim_root(root: &Path, p: &NodeProfile) -> Result<(PathBuf, Vec<String>), SimError> {
    mkdirs(root)?;
    let root = root.canonicalize().map_err(io("resolve", root))?;
    let marker = root.join(MARKER_FILE);
    if root == Path::new("/") {
        return Err(SimError::NotASimRoot { root });
    }
    let empty = std::fs::read_dir(&root)
        .map_err(io("read directory", &root))?
        .next()
        .is_none();
    if !empty && !marker.is_file() {
        return Err(SimError::NotASimRoot { root });
    }
    if empty {
        write_marker(&root, p, &[])?;
        return Ok((root, Vec::new()));
    }
    let old = std::fs::read_to_string(&marker).map_err(io("read", &marker))?;
    let paths = old
        .lines()
        .filter(|l| l.starts_with('/'))
        .map(String::from)
        .collect();
    Ok((root, paths))
}

/// The marker: the profile name and every path the build made (so a rebuild with another
/// profile can remove what no longer belongs).
fn write_marker(root: &Path, p: &NodeProfile, paths: &[String]) -> Result<(), SimError> {
    let mut text = format!("gpuhook-sim driver root\nprofile = {}\n", p.name);
    for path in paths {
        text.push_str(path);
        text.push('\n');
    }
    write_atomic(&root.join(MARKER_FILE), text.as_bytes(), 0o644)
}

/// Every path (file, link, node, socket) a build of `p` makes, besides `report`'s lists.
fn made_paths(p: &NodeProfile, report: &Report) -> Vec<String> {
    let lib_dir = p.lib_dir.trim_end_matches('/');
    let mut paths: Vec<String> = device_nodes(p).into_iter().map(|n| n.path).collect();
    paths.extend(procfs::proc_files(p).into_iter().map(|(path, _)| path));
    paths.extend(report.libraries.iter().cloned());
    for l in libraries(p) {
        let dir = l.dir.trim_end_matches('/');
        paths.push(format!("{dir}/{}", l.soname));
        paths.extend(l.dev_link.map(|d| format!("{dir}/{d}")));
    }
    paths.extend(libraries::gbm_link(p).map(|(_, link)| link));
    paths.extend(desktop::glxserver_link(p));
    paths.push(format!("{lib_dir}/{}", crate::profile::PROFILE_FILE_NAME));
    paths.extend(report.files.iter().cloned());
    paths.sort();
    paths.dedup();
    paths
}

/// Removes what an earlier build (of another profile) made and this one did not.
fn remove_stale(root: &Path, old: &[String], new: &[String]) -> Result<(), SimError> {
    for path in old.iter().filter(|p| !new.contains(p)) {
        let full = under(root, path);
        match std::fs::symlink_metadata(&full) {
            Ok(m) if !m.is_dir() => {
                std::fs::remove_file(&full).map_err(io("remove stale", &full))?
            }
            _ => continue,
        }
        // Drop directories that only held stale files (e.g. `/proc/driver/nvidia/gpus/<bus>`).
        let mut dir = full.parent();
        while let Some(d) = dir.filter(|d| *d != root) {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    Ok(())
}

/// Builds the simulated node `profile` under `root`.
pub fn materialise(
    profile: &NodeProfile,
    root: &Path,
    opts: &MaterialiseOptions,
) -> Result<Report, SimError> {
    profile.validate().map_err(|issue| {
        SimError::Profile(ProfileError::Invalid {
            origin: profile.name.clone(),
            field: issue.field,
            problem: issue.problem,
        })
    })?;
    if !devices::can_mknod() {
        return Err(SimError::NeedsCapMknod);
    }
    let bin_dir = match &opts.bin_dir {
        Some(d) => d.clone(),
        None => default_bin_dir()?,
    };
    let mock_nvml = opts
        .mock_nvml
        .clone()
        .unwrap_or_else(|| bin_dir.join("libgpuhook_mock_nvml.so"));
    // Check the inputs before writing anything.
    if !mock_nvml.is_file() {
        return Err(SimError::MockNvmlMissing { path: mock_nvml });
    }
    let smi = bin_dir.join(files::SIM_NVIDIA_SMI);
    if !smi.is_file() {
        return Err(SimError::BinaryMissing {
            path: smi,
            package: "gpuhook-sim",
        });
    }
    let (root, old_paths) = claim_root(root, profile)?;
    let mut report = Report {
        root: root.clone(),
        profile: profile.name.clone(),
        ..Report::default()
    };

    report.device_nodes = devices::create(&root, profile)?;
    for (path, contents) in procfs::proc_files(profile) {
        write_atomic(&under(&root, &path), contents.as_bytes(), 0o444)?;
    }
    report.libraries = libraries::install(&root, profile, &mock_nvml)?;
    let (bins, notes) = files::binaries(&root, profile, &bin_dir)?;
    report.files.extend(bins);
    report.notes.extend(notes);
    report.files.extend(files::firmware(&root, profile)?);
    report.files.extend(files::sockets(&root, profile)?);
    report.files.extend(files::config_files(&root, profile)?);
    report.files.extend(desktop::install(&root, profile)?);
    libraries::write_ld_so_conf(&root, profile)?;
    let made = made_paths(profile, &report);
    remove_stale(&root, &old_paths, &made)?;
    write_marker(&root, profile, &made)?;
    report.ld_cache = libraries::run_ldconfig(&root, opts.ldconfig.as_deref())?;
    Ok(report)
}
