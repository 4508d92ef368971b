//! `gpuhook hook ...`: createContainer hooks that generated CDI specs reference. The runtime runs
//! them with the container state on stdin and an explicit minimal environment.
//!
//! A CDI spec can only mount files and declare nodes; what else a GPU container needs (SONAME
//! links, an `ld.so.cache` that knows the mounted libraries, a `params` file that stops NVML from
//! creating nodes) is done by these hooks, in the container's mount namespace before
//! `pivot_root` (runc runs createContainer hooks there). The rootfs comes from the bundle's
//! `config.json` (`root.path`); all work inside it goes through gpuhook-inject, which resolves
//! every path in the root (the image controls that tree). The argument syntax is exactly what
//! `gpuhook_cdi::edits` emits into generated specs, so old specs keep working: change both or
//! neither. `disable-device-node-modification` reads the host's params under the configured
//! driver root.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use gpuhook_cdi::edits::{SetupHookArgs, SetupLink, SetupLinkError, SetupMpsShare};
use gpuhook_inject::hooks::PARAMS_PATH;
use gpuhook_inject::{BundleConfig, OciState};
use gpuhook_node::join_under;

use super::CliError;
use crate::config::Config;

/// `gpuhook hook ...`.
#[derive(Debug, Clone, Subcommand)]
#[command(after_help = "Examples:\n  \
    # what a generated CDI spec runs (the OCI state on stdin), here on a bundle by hand\n  \
    gpuhook hook setup --container-spec /run/bundle/config.json \
    --link libcuda.so.1::/usr/lib64/libcuda.so --folder /usr/lib64\n  \
    gpuhook hook disable-device-node-modification --container-spec /run/bundle/config.json")]
pub enum HookCommand {
    #[command(
        long_about = "Prepare the container root in one step (the createContainer hook of our CDI \
        specs): create the --link symlinks, mount the params override when \
        --disable-device-node-modification is given, then update the ld.so.cache for the --folder \
        directories with the host's ldconfig.\n\n\
        One process instead of the three one-step hooks below: the runtime starts and waits for \
        every hook on every container start.",
        after_help = "Examples:\n  \
        gpuhook hook setup --container-spec /run/bundle/config.json \
        --link libcuda.so.1::/usr/lib64/libcuda.so --folder /usr/lib64\n  \
        gpuhook hook setup --container-spec /run/bundle/config.json \
        --disable-device-node-modification --folder /usr/lib64 --ldconfig-path /sbin/ldconfig"
    )]
    Setup(SetupArgs),
    /// Create symlinks inside the container root
    #[command(
        long_about = "Create symlinks inside the container root (createContainer hook).\n\n\
        Each --link TARGET::LINK creates LINK -> TARGET. LINK is an absolute path in the container and \
        is resolved inside the container root; TARGET is stored as given. Existing identical links are \
        left alone; a link that would escape the root is refused.",
        after_help = "Examples:\n  \
        gpuhook hook create-symlinks --container-spec /run/bundle/config.json \
        --link libcuda.so.1::/usr/lib64/libcuda.so\n  \
        # as a CDI createContainer hook: the OCI state on stdin names the bundle\n  \
        gpuhook hook create-symlinks --link libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so < state.json"
    )]
    CreateSymlinks(CreateSymlinksArgs),
    /// Run the host's ldconfig, sandboxed, on the container's library folders
    #[command(
        long_about = "Update the container's ld.so.cache (createContainer hook).\n\n\
        Writes /etc/ld.so.conf.d/00-gpuhook.conf listing the --folder directories and runs the \
        host's ldconfig (never one from the image) in a sandbox pivoted into the container root.",
        after_help = "Examples:\n  \
        gpuhook hook update-ldcache --container-spec /run/bundle/config.json --folder /usr/lib64\n  \
        gpuhook hook update-ldcache --container-spec /run/bundle/config.json --folder /usr/lib64 \
        --ldconfig-path /sbin/ldconfig"
    )]
    UpdateLdcache(UpdateLdcacheArgs),
    /// Stop NVML inside the container from creating device nodes
    #[command(
        long_about = "Mount a read-only copy of /proc/driver/nvidia/params with \
        `ModifyDeviceFiles: 0` over the container's, so NVML in the container does not create \
        device nodes (createContainer hook).",
        after_help = "Examples:\n  \
        gpuhook hook disable-device-node-modification --container-spec /run/bundle/config.json\n  \
        gpuhook hook disable-device-node-modification < state.json"
    )]
    DisableDeviceNodeModification(DisableDeviceNodeModificationArgs),
    /// Install the OCI hook file that runs `gpuhook prestart` (podman's and CRI-O's hooks dir)
    #[command(
        long_about = "Write the OCI hook file (oci-hooks(5), version 1.0.0) that makes podman and \
        CRI-O run `gpuhook prestart` for every container, as NVIDIA's oci-nvidia-hook.json runs \
        nvidia-container-runtime-hook: stage prestart, when always (the hook leaves containers \
        that ask for no GPU untouched), env PATH only. An existing file is replaced only when it \
        is ours; exit status 3 when it was already in place.",
        after_help = "Examples:\n  \
        gpuhook hook install-oci-hook --hooks-dir /usr/share/containers/oci/hooks.d\n  \
        gpuhook hook install-oci-hook --hooks-dir /etc/containers/oci/hooks.d \
        --gpuhook-path /usr/bin/gpuhook --gpuhook-config /etc/gpuhook/config.toml --dry-run"
    )]
    InstallOciHook(super::oci_hook::InstallOciHookArgs),
}

/// `TARGET::LINK`: the setup hook's link ([`SetupLink`]), one parser for every reader.
pub type LinkSpec = SetupLink;

/// Why a `--link` value is not `TARGET::LINK` (one parser for every reader: [`SetupLink::parse`]).
pub type LinkSpecError = SetupLinkError;

/// Parses `TARGET::LINK` ([`SetupLink::parse`]).
pub fn parse_link(s: &str) -> Result<LinkSpec, LinkSpecError> {
    SetupLink::parse(s)
}

/// Arguments of `gpuhook hook create-symlinks`.
#[derive(Debug, Clone, Args)]
pub struct CreateSymlinksArgs {
    /// Symlink to create, LINK -> TARGET; repeatable
    #[arg(long = "link", value_name = "TARGET::LINK", value_parser = parse_link)]
    pub links: Vec<LinkSpec>,
    /// The container's config.json [default: from the state on stdin]
    #[arg(long, value_name = "FILE")]
    pub container_spec: Option<PathBuf>,
}

/// Arguments of `gpuhook hook update-ldcache`.
#[derive(Debug, Clone, Args)]
pub struct UpdateLdcacheArgs {
    /// Library folder (container path) to add to the cache; repeatable
    #[arg(long = "folder", value_name = "DIR")]
    pub folders: Vec<PathBuf>,
    /// Host ldconfig to run [default: ldconfig from the config]
    #[arg(long = "ldconfig-path", alias = "ldconfig", value_name = "PATH")]
    pub ldconfig: Option<PathBuf>,
    /// The container's config.json [default: from the state on stdin]
    #[arg(long, value_name = "FILE")]
    pub container_spec: Option<PathBuf>,
}

/// Arguments of `gpuhook hook disable-device-node-modification`.
#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// Create LINK -> TARGET inside the container root (repeatable)
    #[arg(long = "link", value_name = "TARGET::LINK", value_parser = parse_link)]
    pub links: Vec<LinkSpec>,
    /// Mount a copy of the driver's params with `ModifyDeviceFiles: 0` over the container's
    #[arg(long)]
    pub disable_device_node_modification: bool,
    /// A library folder for the container's ld.so.cache (repeatable; none: no ldconfig)
    #[arg(long = "folder", value_name = "DIR")]
    pub folders: Vec<PathBuf>,
    /// The host's ldconfig [default: the config's ldconfig-path]
    #[arg(long = "ldconfig-path", value_name = "PATH")]
    pub ldconfig: Option<PathBuf>,
    /// CUDA forward compatibility: put the image's /usr/local/cuda/compat first in the linker
    /// path when its libcuda is for a newer driver major than VERSION (the host driver's)
    #[arg(long, value_name = "VERSION")]
    pub cuda_compat_host_driver_version: Option<String>,
    /// Write an application profile that shows EGL/Vulkan only the container's GPUs
    #[arg(long)]
    pub application_profile: bool,
    /// Read the container's config.json from FILE instead of the bundle in the OCI state on stdin
    #[arg(long, value_name = "FILE")]
    pub container_spec: Option<PathBuf>,
    /// An MPS share (CDI name and host pipe directory) the container's user must be able to use;
    /// checked before anything is changed (repeatable)
    #[arg(long = "mps-share", value_name = "NAME::PIPE_DIR", value_parser = SetupMpsShare::parse)]
    pub mps_shares: Vec<SetupMpsShare>,
}

/// The CLI's flags as the one typed argument set the generator wrote them from.
impl From<&SetupArgs> for SetupHookArgs {
    fn from(a: &SetupArgs) -> Self {
        SetupHookArgs {
            links: a.links.clone(),
            ldconfig: a.ldconfig.clone(),
            folders: a.folders.clone(),
            disable_device_node_modification: a.disable_device_node_modification,
            cuda_compat_host_driver_version: a.cuda_compat_host_driver_version.clone(),
            application_profile: a.application_profile,
            container_spec: a.container_spec.clone(),
            mps_shares: a.mps_shares.clone(),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct DisableDeviceNodeModificationArgs {
    /// The container's config.json [default: from the state on stdin]
    #[arg(long, value_name = "FILE")]
    pub container_spec: Option<PathBuf>,
}

/// The container's bundle config: from `--container-spec FILE`, else from the bundle named by
/// the OCI state on stdin (what a runtime gives a createContainer hook).
fn bundle_config(container_spec: Option<&Path>) -> Result<BundleConfig, CliError> {
    let (bundle, _, bytes) = read_bundle(container_spec)?;
    Ok(BundleConfig::parse(&bundle, &bytes)?)
}

/// The bundle directory, the path and the bytes of the container's `config.json` (written by the
/// runtime, not by the container).
fn read_bundle(container_spec: Option<&Path>) -> Result<(PathBuf, PathBuf, Vec<u8>), CliError> {
    let (bundle, file) = match container_spec {
        Some(file) => {
            let bundle = file
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            (bundle.to_path_buf(), file.to_path_buf())
        }
        None => {
            let state = OciState::from_reader(std::io::stdin().lock())?;
            let file = state.bundle.join("config.json");
            (state.bundle, file)
        }
    };
    let bytes = std::fs::read(&file).map_err(|error| CliError::ReadContainerSpec {
        path: file.clone(),
        error,
    })?;
    Ok((bundle, file, bytes))
}

/// The start check of the MPS shares (`gpuhook_request::check_mps_access`, the one the runtime
/// wrapper and the prestart hook run) for the user of `config.json`, mapped to the host. Only
/// host paths from the spec's flags are read, none inside the container's root.
fn check_mps_shares(shares: &[SetupMpsShare], file: &Path, bytes: &[u8]) -> Result<(), CliError> {
    if shares.is_empty() {
        return Ok(());
    }
    let oci: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|error| CliError::ParseContainerSpec {
            path: file.to_path_buf(),
            error,
        })?;
    let user = gpuhook_request::ProcessUser::of(&oci);
    let shares: Vec<gpuhook_request::MpsShare> =
        shares.iter().map(gpuhook_request::MpsShare::from).collect();
    gpuhook_request::check_mps_access(&shares, &user)?;
    Ok(())
}

pub(super) fn run(command: &HookCommand, config: &Config) -> Result<(), CliError> {
    match command {
        HookCommand::InstallOciHook(args) => super::oci_hook::run(args),
        HookCommand::Setup(args) => {
            let args = SetupHookArgs::from(args);
            let (dir, file, bytes) = read_bundle(args.container_spec.as_deref())?;
            // Before the first change: a client that cannot use its share runs without limits.
            check_mps_shares(&args.mps_shares, &file, &bytes)?;
            let bundle = BundleConfig::parse(&dir, &bytes)?;
            let ldconfig = ldconfig_path(config, args.ldconfig.as_deref());
            // Bad folders or a bad ldconfig fail before the first link is made.
            if !args.folders.is_empty() {
                gpuhook_inject::check_ldcache_inputs(&bundle.rootfs, &args.folders, &ldconfig)?;
            }
            // The order of `gpuhook prestart`: links and params, ldcache last so that ldconfig
            // sees the links.
            let symlinks = create_links(&bundle, &args.links)?.len();
            let params_mounted =
                args.disable_device_node_modification && override_params(&bundle, config)?;
            // Before ldconfig: the compat folder's conf must be in place when the cache is built.
            let compat = match &args.cuda_compat_host_driver_version {
                Some(v) => gpuhook_inject::cuda_compat::enable_cuda_compat(&bundle.rootfs, v)?,
                None => None,
            };
            let profile =
                args.application_profile && super::app_profile::write_profile(&bundle.rootfs)?;
            // ldconfig lists a SONAME's folders in the order it reads them, command-line folders
            // first: the compat folder goes before the driver's so its libcuda.so.1 wins.
            let folders: Vec<PathBuf> = compat.iter().chain(&args.folders).cloned().collect();
            if !args.folders.is_empty() {
                update_ldcache(&bundle, config, &folders, Some(&ldconfig))?;
            }
            tracing::debug!(
                rootfs = %bundle.rootfs.display(),
                symlinks,
                params_mounted,
                ldcache_folders = args.folders.len(),
                cuda_compat = ?compat,
                application_profile = profile,
                "hook setup"
            );
            Ok(())
        }
        HookCommand::CreateSymlinks(args) => {
            let bundle = bundle_config(args.container_spec.as_deref())?;
            let outcomes = create_links(&bundle, &args.links)?;
            tracing::debug!(rootfs = %bundle.rootfs.display(), ?outcomes, "hook create-symlinks");
            Ok(())
        }
        HookCommand::UpdateLdcache(args) => {
            let bundle = bundle_config(args.container_spec.as_deref())?;
            update_ldcache(&bundle, config, &args.folders, args.ldconfig.as_deref())
        }
        HookCommand::DisableDeviceNodeModification(args) => {
            let bundle = bundle_config(args.container_spec.as_deref())?;
            let mounted = override_params(&bundle, config)?;
            tracing::debug!(rootfs = %bundle.rootfs.display(), mounted, "hook disable-device-node-modification");
            Ok(())
        }
    }
}

fn create_links(
    bundle: &BundleConfig,
    links: &[LinkSpec],
) -> Result<Vec<gpuhook_inject::SymlinkOutcome>, CliError> {
    let links: Vec<(PathBuf, PathBuf)> = links
        .iter()
        .map(|l| (l.target.clone(), l.link.clone()))
        .collect();
    Ok(gpuhook_inject::create_symlinks(&bundle.rootfs, &links)?)
}

/// Mounts the params override; false when the container's procfs has no driver params.
fn override_params(bundle: &BundleConfig, config: &Config) -> Result<bool, CliError> {
    let host_params = join_under(&config.driver_root, Path::new(PARAMS_PATH));
    Ok(gpuhook_inject::disable_device_node_modification(
        &bundle.rootfs,
        &host_params,
    )?)
}

/// The host's ldconfig (`ldconfig`, else the config's) for `folders`, as the container's user.
fn update_ldcache(
    bundle: &BundleConfig,
    config: &Config,
    folders: &[PathBuf],
    ldconfig: Option<&Path>,
) -> Result<(), CliError> {
    let ldconfig = ldconfig_path(config, ldconfig);
    gpuhook_inject::update_ldcache(&bundle.rootfs, folders, &ldconfig, bundle.uid, bundle.gid)?;
    Ok(())
}

/// `--ldconfig-path` when given, else the config's.
fn ldconfig_path(config: &Config, given: Option<&Path>) -> PathBuf {
    match given {
        Some(p) => p.to_path_buf(),
        None => config.ldconfig_path(Path::exists),
    }
}
