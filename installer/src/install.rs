//! `install` and `uninstall`: read the binaries, enter the host root, copy, then let the
//! installed `gpuhook` do the work; record everything in the state file (see `state`).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use crate::restart::restart;
use crate::state::{missing_dirs, Snapshot, State, STATE_FILE};
use crate::{InstallArgs, RefreshArgs, UninstallArgs};

/// The binaries installed on the host (the installer itself stays in the image).
pub const BINARIES: [&str; 3] = ["gpuhook", "gpuhook-runtime", "gpu-mps-daemon"];

/// `runtime configure` exit status for "already configured".
const UNCHANGED: i32 = gpuhook_containerd::EXIT_UNCHANGED;

/// The environment the installed binaries run with: nothing from the image's.
const PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub fn install(args: &InstallArgs) -> anyhow::Result<()> {
    let binaries = read_binaries(args.source_dir.as_deref())?;
    enter_host_root(&args.common.host_root)?;
    let install_dir = &args.common.install_dir;
    let state_file = install_dir.join(STATE_FILE);
    let previous = State::load(&state_file)?;
    let fresh = previous.is_none();
    let mut state = previous.unwrap_or_default();
    let watched = watched_dirs(args);
    for dir in std::iter::once(install_dir).chain(&watched) {
        for d in missing_dirs(dir) {
            state.add_dir(&d);
        }
    }
    let before = Snapshot::take(&watched)?;
    let result = install_steps(args, &binaries, &mut state);
    // Record what happened even when a step failed, so the rollback (or a later uninstall)
    // undoes exactly that.
    state.created_dirs.retain(|d| d.exists());
    state.record(&before, &Snapshot::take(&watched)?);
    match result {
        Ok(changed) => {
            state.containerd_configured |= changed;
            state.save(&state_file)?;
            tracing::info!(dir = %install_dir.display(), "gpuhook installed");
            println!("gpuhook installed in {}", install_dir.display());
            if changed {
                restart(&args.restart, PATH_ENV)
                    .context("gpuhook is installed, but containerd was not restarted")?;
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

/// Installs; true when containerd's config changed (so containerd must restart).
fn install_steps(
    args: &InstallArgs,
    binaries: &[(&str, Vec<u8>)],
    state: &mut State,
) -> anyhow::Result<bool> {
    let dir = &args.common.install_dir;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
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
    fs::create_dir_all(&args.spec.cdi_spec_dir)
        .with_context(|| format!("cannot create {}", args.spec.cdi_spec_dir.display()))?;
    let gpuhook = dir.join("gpuhook");
    let mut generate: Vec<OsString> = vec!["cdi".into(), "generate".into()];
    generate.extend(args.spec.gpuhook_flags(&gpuhook));
    run_gpuhook(&gpuhook, &generate, &[0])?;
    if args.no_containerd {
        return Ok(false);
    }
    let mut configure: Vec<OsString> = vec!["runtime".into(), "configure".into()];
    configure.extend([
        "--containerd-config".into(),
        args.containerd_config.clone().into(),
    ]);
    configure.extend(["--runtime-name".into(), args.runtime_name.clone().into()]);
    configure.extend(["--binary".into(), dir.join("gpuhook-runtime").into()]);
    if let Some(drop_in) = &args.drop_in {
        let mut flag = OsString::from("--drop-in=");
        flag.push(drop_in);
        configure.push(flag);
    }
    Ok(run_gpuhook(&gpuhook, &configure, &[0, UNCHANGED])? != UNCHANGED)
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
    if state.containerd_configured {
        restart(&uninstall.restart, PATH_ENV)
            .context("gpuhook is uninstalled, but containerd was not restarted")?;
    }
    Ok(())
}

/// The host directories `gpuhook` writes to, whose files are snapshotted.
fn watched_dirs(args: &InstallArgs) -> Vec<PathBuf> {
    let mut dirs = vec![args.spec.cdi_spec_dir.clone()];
    dirs.extend(args.spec.inventory_cache.parent().map(Path::to_path_buf));
    if !args.no_containerd {
        dirs.extend(args.containerd_config.parent().map(Path::to_path_buf));
        dirs.extend(
            args.drop_in
                .as_ref()
                .and_then(|p| p.parent())
                .map(Path::to_path_buf),
        );
    }
    dirs.sort();
    dirs.dedup();
    dirs
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

/// Runs the installed gpuhook with a minimal environment; `ok` lists the accepted exit codes,
/// and the one it exited with is returned.
fn run_gpuhook(gpuhook: &Path, args: &[OsString], ok: &[i32]) -> anyhow::Result<i32> {
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
    match status.code() {
        Some(code) if ok.contains(&code) => Ok(code),
        _ => bail!("`{} {}` failed ({status})", gpuhook.display(), join(args)),
    }
}

fn join(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
