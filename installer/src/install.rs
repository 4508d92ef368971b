//! `install` and `uninstall`: read the binaries, enter the host root, copy, then let the
//! installed `gpuhook` generate the spec, link the Docker hook and configure containerd; record
//! exactly what was written in the state file (see `state` and `snapshot`).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use crate::engines;
use crate::restart::{restart, Runtime};
use crate::snapshot::{ensure_dir, Snapshot};
use crate::state::{State, STATE_FILE};
use crate::{link, InstallArgs, RefreshArgs, UninstallArgs};

/// The binaries installed on the host (the installer itself stays in the image).
pub const BINARIES: [&str; 3] = ["gpuhook", "gpuhook-runtime", "gpu-mps-daemon"];

/// The file `gpuhook cdi generate --output DIR` writes in DIR (`gpuhook_cdi::default_file_name`
/// of the default kind and format).
pub const SPEC_FILE: &str = "nvidia.com-gpu.json";

/// The environment the installed binaries run with: nothing from the image's.
const PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub fn install(args: &InstallArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.no_containerd || args.runtime == Runtime::Containerd,
        "--no-containerd conflicts with --runtime {}: containerd is left alone anyway; drop \
         one of them",
        args.runtime.name()
    );
    let binaries = read_binaries(args.source_dir.as_deref())?;
    enter_host_root(&args.common.host_root)?;
    let install_dir = &args.common.install_dir;
    let state_file = install_dir.join(STATE_FILE);
    let previous = State::load(&state_file)?;
    let fresh = previous.is_none();
    let mut state = previous.unwrap_or_default();
    // Each step records what it wrote even when it fails, so the rollback (or a later
    // uninstall) undoes exactly that.
    let result = install_steps(args, &binaries, &mut state);
    state.created_dirs.retain(|d| d.exists());
    match result {
        Ok(changed) => {
            if changed {
                state.add_configured(args.runtime, &engine_config(args));
            }
            state.save(&state_file)?;
            tracing::info!(dir = %install_dir.display(), "gpuhook installed");
            println!("gpuhook installed in {}", install_dir.display());
            if changed {
                restart(&args.restart, args.runtime, PATH_ENV).with_context(|| {
                    format!(
                        "gpuhook is installed, but {} was not restarted",
                        args.runtime.name()
                    )
                })?;
            }
            Ok(())
        }
        Err(e) if fresh => {
            tracing::warn!("install failed, rolling back");
            state
                .undo(&state_file)
                .context("rolling back the failed install failed too")?;
            Err(e)
        }
        Err(e) => {
            state.save(&state_file)?;
            Err(e)
        }
    }
}

/// The main config of the engine `args` configure.
fn engine_config(args: &InstallArgs) -> PathBuf {
    match args.runtime {
        Runtime::Containerd => args.containerd_config.clone(),
        Runtime::Docker => args.docker_config.clone(),
        Runtime::Crio => args.crio_config.clone(),
    }
}

/// Installs; true when the engine's config changed (so the engine must reload).
fn install_steps(
    args: &InstallArgs,
    binaries: &[(&str, Vec<u8>)],
    state: &mut State,
) -> anyhow::Result<bool> {
    let dir = &args.common.install_dir;
    ensure_dir(dir, |d| state.add_dir(d))?;
    for (name, bytes) in binaries {
        let dest = dir.join(name);
        if fs::symlink_metadata(&dest).is_err() {
            state.add_file(&dest);
        }
        // A new file renamed over the old one: a running gpuhook keeps its (old) inode.
        gpuhook_fs::AtomicWriter::new(0o755)
            .keep_owner()
            .write(&dest, bytes)
            .with_context(|| format!("cannot install {}", dest.display()))?;
        tracing::info!(path = %dest.display(), "installed");
    }
    let gpuhook = dir.join("gpuhook");
    generate(args, &gpuhook, state)?;
    if !args.docker.no_docker_hook {
        docker_hook(args, &gpuhook, state)?;
    }
    if let Some(engine) = engines::engine_of(args.runtime) {
        return engines::configure(engine, &engines::options(args, engine), state);
    }
    if args.no_containerd {
        return Ok(false);
    }
    configure_containerd(args, state)
}

/// `gpuhook cdi generate` into the spec directory; records the spec file and the inventory
/// cache (only those: the directory is shared with other writers).
fn generate(args: &InstallArgs, gpuhook: &Path, state: &mut State) -> anyhow::Result<()> {
    ensure_dir(&args.spec.cdi_spec_dir, |d| state.add_dir(d))?;
    if let Some(parent) = args.spec.inventory_cache.parent() {
        ensure_dir(parent, |d| state.add_dir(d))?;
    }
    let written = [
        args.spec.cdi_spec_dir.join(SPEC_FILE),
        args.spec.inventory_cache.clone(),
    ];
    let before = Snapshot::files(written.iter().map(PathBuf::as_path))?;
    let mut generate: Vec<OsString> = vec!["cdi".into(), "generate".into()];
    generate.extend(args.spec.gpuhook_flags(gpuhook));
    let result = run_gpuhook(gpuhook, &generate);
    state.record(
        &before,
        &Snapshot::files(written.iter().map(PathBuf::as_path))?,
    );
    result
}

/// The `nvidia-container-runtime-hook` link for `docker run --gpus` (see `link`).
fn docker_hook(args: &InstallArgs, gpuhook: &Path, state: &mut State) -> anyhow::Result<()> {
    let dir = &args.docker.docker_hook_dir;
    ensure_dir(dir, |d| state.add_dir(d))?;
    let path_dirs: Vec<PathBuf> = link::DOCKERD_PATH.iter().map(PathBuf::from).collect();
    match link::install(dir, gpuhook, args.docker.force, &path_dirs)? {
        link::Outcome::Made(made) => state.add_link(made),
        link::Outcome::AlreadyThere => {}
        link::Outcome::Skipped(why) => {
            tracing::warn!("{why}");
            println!("warning: {why}");
        }
    }
    Ok(())
}

/// Registers gpuhook-runtime with containerd (the library `gpuhook runtime configure` is, in
/// this process, which is inside the host root): the files it plans are recorded by exact path,
/// and the backup it reports. True when something changed.
fn configure_containerd(args: &InstallArgs, state: &mut State) -> anyhow::Result<bool> {
    let opts = gpuhook_containerd::ConfigureOptions {
        config: args.containerd_config.clone(),
        drop_in: args.drop_in.clone(),
        runtime_name: args.runtime_name.clone(),
        binary: args.common.install_dir.join("gpuhook-runtime"),
        ..Default::default()
    };
    let planned: Vec<PathBuf> = gpuhook_containerd::plan(&opts)?
        .changes
        .into_iter()
        .map(|c| c.path)
        .collect();
    for parent in planned.iter().filter_map(|p| p.parent()) {
        ensure_dir(parent, |d| state.add_dir(d))?;
    }
    let before = Snapshot::files(planned.iter().map(PathBuf::as_path))?;
    let result = gpuhook_containerd::configure(&opts, false);
    state.record(
        &before,
        &Snapshot::files(planned.iter().map(PathBuf::as_path))?,
    );
    match result? {
        gpuhook_containerd::ConfigureOutcome::Changed { files, .. } => {
            for backup in files.iter().filter_map(|f| f.backup.as_ref()) {
                state.add_file(backup);
            }
            tracing::info!(config = %args.containerd_config.display(), "containerd configured");
            Ok(true)
        }
        gpuhook_containerd::ConfigureOutcome::Unchanged { .. } => Ok(false),
    }
}

pub fn uninstall(uninstall: &UninstallArgs) -> anyhow::Result<()> {
    let args = &uninstall.common;
    enter_host_root(&args.host_root)?;
    let state_file = args.install_dir.join(STATE_FILE);
    let Some(state) = State::load(&state_file)? else {
        bail!(
            "no gpuhook installation recorded in {} (no {}): nothing to uninstall; pass the \
             --install-dir used at install time",
            args.install_dir.display(),
            STATE_FILE
        );
    };
    state.undo(&state_file)?;
    println!("gpuhook uninstalled from {}", args.install_dir.display());
    for c in state.configured() {
        restart(&uninstall.restart, c.runtime, PATH_ENV).with_context(|| {
            format!(
                "gpuhook is uninstalled, but {} was not restarted",
                c.runtime.name()
            )
        })?;
        let signalled = uninstall.restart.restart_mode == crate::restart::RestartMode::Signal;
        if let (Runtime::Docker, true) = (c.runtime, signalled) {
            if let Some(warning) = engines::docker_reload_keeps_runtime(&c.config) {
                tracing::warn!("{warning}");
                println!("warning: {warning}");
            }
        }
    }
    Ok(())
}

/// Reads the binaries to install (before the chroot: afterwards the image is out of reach).
fn read_binaries(source_dir: Option<&Path>) -> anyhow::Result<Vec<(&'static str, Vec<u8>)>> {
    let dir = match source_dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot find this executable's directory: pass --source-dir")?
            .parent()
            .map(Path::to_path_buf)
            .context("this executable has no directory: pass --source-dir")?,
    };
    BINARIES
        .iter()
        .map(|name| {
            let path = dir.join(name);
            fs::read(&path)
                .map(|bytes| (*name, bytes))
                .with_context(|| format!("cannot read {} (is --source-dir right?)", path.display()))
        })
        .collect()
}

/// `refresh`: enters the host root and replaces this process with the installed gpuhook's watch
/// loop, so the spec names host paths and SIGTERM from kubelet reaches gpuhook itself.
pub fn refresh(args: &RefreshArgs) -> anyhow::Result<()> {
    enter_host_root(&args.common.host_root)?;
    let gpuhook = args.common.install_dir.join("gpuhook");
    let mut cmd = Command::new(&gpuhook);
    cmd.args(["cdi", "refresh", "--watch", "--interval"])
        .arg(args.interval.to_string());
    // The flags `install` generates with, so both write the same spec and cache.
    cmd.args(args.spec.gpuhook_flags(&gpuhook));
    cmd.env_clear().env("PATH", PATH_ENV);
    if let Some(filter) = std::env::var_os("RUST_LOG") {
        cmd.env("RUST_LOG", filter);
    }
    tracing::info!(command = ?cmd, "running");
    let err = std::os::unix::process::CommandExt::exec(&mut cmd);
    Err(err).with_context(|| {
        format!(
            "cannot run {} (run `gpuhook-installer install` first)",
            gpuhook.display()
        )
    })
}

/// chroot into the host root, so that every path from here on is a host path.
fn enter_host_root(host_root: &Path) -> anyhow::Result<()> {
    let meta = fs::metadata(host_root).with_context(|| {
        format!(
            "host root {} is missing: mount the host's / there (-v /:/host)",
            host_root.display()
        )
    })?;
    anyhow::ensure!(
        meta.is_dir(),
        "host root {} is not a directory",
        host_root.display()
    );
    nix::unistd::chroot(host_root).with_context(|| {
        format!(
            "cannot chroot into {} (needs CAP_SYS_CHROOT)",
            host_root.display()
        )
    })?;
    nix::unistd::chdir("/").context("cannot chdir to / in the host root")?;
    Ok(())
}

/// Runs the installed gpuhook with a minimal environment; it must succeed.
fn run_gpuhook(gpuhook: &Path, args: &[OsString]) -> anyhow::Result<()> {
    let mut cmd = Command::new(gpuhook);
    cmd.args(args).env_clear().env("PATH", PATH_ENV);
    if let Some(filter) = std::env::var_os("RUST_LOG") {
        cmd.env("RUST_LOG", filter);
    }
    tracing::info!(command = ?cmd, "running");
    let status = cmd.status().with_context(|| {
        format!(
            "cannot run {} (does the host have glibc?)",
            gpuhook.display()
        )
    })?;
    if !status.success() {
        bail!("`{} {}` failed ({status})", gpuhook.display(), join(args));
    }
    Ok(())
}

fn join(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
