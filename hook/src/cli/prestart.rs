//! `gpuhook prestart`.

use std::path::PathBuf;

use clap::Args;

use crate::config::Config;

/// Arguments of `gpuhook prestart`.
#[derive(Debug, Clone, Args)]
pub struct PrestartArgs {
    /// Read the OCI state from FILE instead of stdin (for debugging)
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
}

pub(super) fn run(args: &PrestartArgs, config: &Config) -> anyhow::Result<()> {
    // WIRE: read state, is_gpu_container fast path, load inventory cache, request::parse + resolve,
    // build edits with gpuhook-cdi, apply with gpuhook-inject, log one Decision.
    tracing::debug!(?args, driver_root = %config.driver_root.display(), "prestart");
    anyhow::bail!("`gpuhook prestart` is not wired yet")
}
