//! `gpuhook hook install-oci-hook`: the OCI hook file of podman's and CRI-O's hooks directory
//! (see [`gpuhook_containerd::oci_hook`]), for GPU containers on engines without CDI.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use gpuhook_containerd::oci_hook::{install, DEFAULT_HOOKS_DIR, DEFAULT_HOOK_FILE};
use gpuhook_containerd::EXIT_UNCHANGED;

use super::CliError;

/// Arguments of `gpuhook hook install-oci-hook`.
#[derive(Debug, Clone, Args)]
pub struct InstallOciHookArgs {
    /// The hooks directory (podman's and CRI-O's `hooks_dir`)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_HOOKS_DIR)]
    pub hooks_dir: PathBuf,
    /// The hook file's name in it (NVIDIA's is oci-nvidia-hook.json: never replaced)
    #[arg(long, value_name = "NAME", default_value = DEFAULT_HOOK_FILE)]
    pub hook_filename: String,
    /// Absolute path of gpuhook, as the hook runs it [default: this gpuhook]
    #[arg(long, value_name = "PATH")]
    pub gpuhook_path: Option<PathBuf>,
    /// gpuhook's config file, passed as `prestart --config FILE` (the hook gets no other
    /// environment than PATH)
    #[arg(long, value_name = "FILE")]
    pub gpuhook_config: Option<PathBuf>,
    /// Print the file instead of writing it
    #[arg(long)]
    pub dry_run: bool,
}

pub(super) fn run(args: &InstallOciHookArgs) -> Result<(), CliError> {
    let binary = match &args.gpuhook_path {
        Some(p) => p.clone(),
        None => std::env::current_exe()?,
    };
    let done = install(
        &args.hooks_dir,
        &args.hook_filename,
        &binary,
        args.gpuhook_config.as_deref(),
        args.dry_run,
    )?;
    let mut s = String::new();
    for n in &done.notes {
        s.push_str(&format!("- {n}\n"));
    }
    match &done.change {
        None => s.push_str(&format!(
            "{} is already in place; nothing changed\n",
            done.path.display()
        )),
        Some(c) if args.dry_run => s.push_str(&c.diff()),
        Some(_) => s.push_str(&format!(
            "wrote {}: podman and CRI-O read it for each new container\n",
            done.path.display()
        )),
    }
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|error| CliError::Stdout { error })?;
    if done.change.is_none() {
        std::process::exit(EXIT_UNCHANGED);
    }
    Ok(())
}
