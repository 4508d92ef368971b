//! `gpuhook-installer`: puts gpuhook on a node from a container, the way NVIDIA's toolkit
//! container does (host root mounted at `/host`), and takes it off again.
//!
//! The image is `FROM scratch` (no shell), so this is a binary, and a thin one: it copies the
//! binaries shipped beside it into a host directory (temp + rename), then `chroot`s into the host
//! root and runs the *installed* `gpuhook cdi generate`, then registers the runtime with
//! containerd (the library of `gpuhook runtime configure`, in this process, which reports every
//! file it writes). Running inside the host root is what makes every path in the spec and in
//! containerd's config a host path, and makes `/var/run -> /run` style symlinks resolve on the
//! host rather than in the image. What it creates or changes is recorded, by exact path, in a
//! state file in the install directory, which `uninstall` replays backwards. It also links
//! `nvidia-container-runtime-hook` to the installed `gpuhook` on dockerd's `PATH`, so
//! `docker run --gpus` uses gpuhook (see `link`).

mod engines;
mod install;
mod link;
mod restart;
mod snapshot;
mod state;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Install directory on the host (NVIDIA's toolkit container uses /usr/local/nvidia/toolkit).
pub const DEFAULT_INSTALL_DIR: &str = "/usr/local/nvidia-gpuhook/bin";

#[derive(Debug, Parser)]
#[command(
    name = "gpuhook-installer",
    version,
    about = "Install gpuhook on a node from a container, and uninstall it",
    after_help = "Examples:\n  \
        # the image's entrypoint is this binary; --pid host for --restart-mode signal\n  \
        podman run --rm --privileged --pid host -v /:/host gpuhook-installer install\n  \
        podman run --rm --privileged --pid host -v /:/host gpuhook-installer uninstall"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Copy the binaries to the host, write the CDI spec, link the Docker hook, register the
    /// runtime with containerd (or Docker, or CRI-O: --runtime)
    #[command(after_help = "Examples:\n  \
        gpuhook-installer install --host-root /host --restart-mode signal\n  \
        gpuhook-installer install --host-root / --drop-in --restart-mode systemd\n  \
        gpuhook-installer install --host-root /host --no-containerd --restart-mode none\n  \
        gpuhook-installer install --host-root /host --runtime docker --restart-mode signal\n  \
        RUNTIME=crio gpuhook-installer install --host-root /host --restart-mode systemd\n  \
        gpuhook-installer install --host-root /host --docker-hook-dir /usr/local/bin --force")]
    Install(Box<InstallArgs>),
    /// Undo `install`: restore changed files, remove created files and directories
    #[command(after_help = "Examples:\n  \
        gpuhook-installer uninstall --host-root /host\n  \
        gpuhook-installer uninstall --host-root / --restart-mode systemd")]
    Uninstall(UninstallArgs),
    /// Keep the host's CDI spec fresh: chroot into the host root and become the installed
    /// `gpuhook cdi refresh --watch` (regenerates after a driver change or a MIG re-partition)
    #[command(after_help = "Examples:\n  \
        # the DaemonSet's cdi-refresh container\n  \
        gpuhook-installer refresh --host-root /host --driver-root / --interval 2")]
    Refresh(RefreshArgs),
}

/// Flags both subcommands take. Every path except --host-root and --source-dir is a host path.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Where the host's root filesystem is mounted in this container ("/" when run on the host)
    #[arg(long, value_name = "DIR", default_value = "/host")]
    pub host_root: PathBuf,
    /// Host directory for the binaries (and the installer's state file)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_INSTALL_DIR)]
    pub install_dir: PathBuf,
}

/// Where the CDI spec and the inventory cache come from and go (host paths), shared by `install`
/// and `refresh` so both write the same spec and cache.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    /// Host path of the driver installation (`gpuhook cdi generate --driver-root`)
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub driver_root: PathBuf,
    /// Host directory the CDI spec is written to
    #[arg(long, value_name = "DIR", default_value = "/var/run/cdi")]
    pub cdi_spec_dir: PathBuf,
    /// Host path of the inventory cache that `gpuhook prestart` and the runtime read
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/gpuhook/inventory.json"
    )]
    pub inventory_cache: PathBuf,
}

impl SpecArgs {
    /// The `gpuhook cdi generate|refresh` flags for these paths and the installed `gpuhook`.
    pub fn gpuhook_flags(&self, gpuhook: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut flags = Vec::new();
        for (flag, value) in [
            ("--driver-root", self.driver_root.as_path()),
            ("--output", self.cdi_spec_dir.as_path()),
            ("--inventory-cache", self.inventory_cache.as_path()),
            ("--gpuhook-path", gpuhook),
        ] {
            flags.extend([flag.into(), value.into()]);
        }
        flags
    }
}

/// Flags of `install`.
#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Directory (in this container) holding the binaries to install [default: this binary's]
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// The engine to register gpuhook-runtime with (as NVIDIA's toolkit container's `RUNTIME`):
    /// containerd's config.toml, Docker's daemon.json, or a CRI-O drop-in
    #[arg(
        long,
        value_enum,
        value_name = "ENGINE",
        default_value = "containerd",
        env = "RUNTIME"
    )]
    pub runtime: restart::Runtime,
    /// containerd's main config on the host
    #[arg(long, value_name = "FILE", default_value = gpuhook_containerd::DEFAULT_CONFIG)]
    pub containerd_config: PathBuf,
    /// Docker's daemon config on the host (`--runtime docker`)
    #[arg(long, value_name = "FILE", default_value = gpuhook_containerd::engine::DOCKER_CONFIG)]
    pub docker_config: PathBuf,
    /// CRI-O's main config on the host (`--runtime crio`; read for its runc settings)
    #[arg(long, value_name = "FILE", default_value = gpuhook_containerd::engine::CRIO_CONFIG)]
    pub crio_config: PathBuf,
    /// Write the runtime to a containerd drop-in (`runtime configure --drop-in`); with
    /// `--runtime crio` always a drop-in [default there: /etc/crio/crio.conf.d/99-gpuhook.toml]
    #[arg(long, value_name = "PATH", num_args = 0..=1,
          default_missing_value = gpuhook_containerd::DEFAULT_DROP_IN)]
    pub drop_in: Option<PathBuf>,
    /// Name of the runtime (the RuntimeClass handler; `docker run --runtime NAME`)
    #[arg(long, value_name = "NAME", default_value = gpuhook_containerd::DEFAULT_RUNTIME_NAME)]
    pub runtime_name: String,
    /// Leave containerd's config alone (binaries, CDI spec and Docker hook only)
    #[arg(long)]
    pub no_containerd: bool,
    #[command(flatten)]
    pub docker: DockerArgs,
    #[command(flatten)]
    pub restart: restart::RestartArgs,
}

/// The `nvidia-container-runtime-hook` link `docker run --gpus` finds on dockerd's PATH.
#[derive(Debug, Clone, Args)]
pub struct DockerArgs {
    /// Host directory on dockerd's PATH for the `nvidia-container-runtime-hook` link to gpuhook
    #[arg(long, value_name = "DIR", default_value = link::DEFAULT_HOOK_DIR)]
    pub docker_hook_dir: PathBuf,
    /// Do not link `nvidia-container-runtime-hook` (docker run --gpus keeps what it has)
    #[arg(long)]
    pub no_docker_hook: bool,
    /// Replace (or shadow on PATH) an existing nvidia-container-runtime-hook, NVIDIA's included;
    /// uninstall puts it back
    #[arg(long)]
    pub force: bool,
}

/// Flags of `uninstall`.
#[derive(Debug, Clone, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub restart: restart::RestartArgs,
}

/// Flags of `refresh`. Every path except --host-root is a host path.
#[derive(Debug, Clone, Args)]
pub struct RefreshArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Seconds between two polls of the node state
    #[arg(long, value_name = "SECS", default_value_t = 2)]
    pub interval: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match &cli.command {
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
        Command::Refresh(args) => install::refresh(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuhook-installer: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
