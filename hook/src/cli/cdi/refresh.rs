//! `gpuhook cdi refresh [--watch]`: keep the CDI spec (and the inventory cache) fresh.
//!
//! A spec describes one moment of the node: a driver upgrade (new library versions) or a MIG
//! re-partition (other GPU/compute instances, other cap nodes) makes it stale, and containers then
//! fail to start or get the wrong devices. NVIDIA's toolkit refreshes its spec only on driver
//! install events (`nvidia-cdi-refresh.path` watches `/lib/modules/%v/modules.dep{,.bin}` and
//! starts the oneshot `nvidia-cdi-refresh.service`, which runs `nvidia-ctk cdi generate`); nothing
//! of it notices a MIG re-partition. `refresh` generates once (at boot), and with `--watch` polls
//! a cheap fingerprint of what the spec depends on ([`gpuhook_node::fingerprint`]: a few small
//! `/proc` files and the `ld.so.cache` identity, no NVML) and runs the same code path as `cdi
//! generate` only when it changed. `generate` itself leaves an unchanged spec and cache alone, so a
//! changed fingerprint with an unchanged spec (e.g. a rebuilt `ld.so.cache`) writes nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use gpuhook_node::fingerprint::Fingerprint;

use super::{generate, GenerateArgs};
use crate::cli::{one_line, CdiCliError, CliError};
use crate::config::Config;

/// After a failed generation with an unchanged node, try again this often (a driver that is still
/// loading, NVML not ready yet): not every poll, which would load NVML every second.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// Arguments of `gpuhook cdi refresh`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    gpuhook cdi refresh                             # generate once (boot), unchanged = no write\n  \
    gpuhook cdi refresh --watch --interval 2        # and again after a driver change or MIG re-partition\n  \
    gpuhook cdi refresh --watch --driver-root /run/nvidia/driver --output /var/run/cdi")]
pub struct RefreshArgs {
    /// Keep running: poll the node state every --interval seconds and regenerate when it changed
    #[arg(long)]
    pub watch: bool,
    /// Seconds between two polls of the node state with --watch
    #[arg(long, value_name = "SECS", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub interval: u64,
    /// The flags of `gpuhook cdi generate`
    #[command(flatten)]
    pub generate: GenerateArgs,
}

/// The watch loop's memory: the node state of the last successful generation.
#[derive(Debug, Default)]
struct Watch {
    generated_for: Option<Fingerprint>,
    failed: Option<(Fingerprint, Instant, String)>,
}

impl Watch {
    /// Whether the node state `now` needs a generation.
    fn due(&self, now: &Fingerprint) -> bool {
        if self.generated_for.as_ref() == Some(now) {
            return false;
        }
        match &self.failed {
            Some((fp, at, _)) => fp != now || at.elapsed() >= RETRY_AFTER_FAILURE,
            None => true,
        }
    }

    /// Runs `generate` for the node state `now` and remembers the outcome.
    fn generate(&mut self, now: Fingerprint, run: &mut impl FnMut() -> Result<(), CliError>) {
        if let Some(before) = &self.generated_for {
            let changed = before.changed_paths(&now);
            tracing::info!(changed = %gpuhook_node::bounded::preview_list(&changed, 4), "node state changed; regenerating the CDI spec");
        }
        match run() {
            Ok(()) => {
                self.generated_for = Some(now);
                self.failed = None;
            }
            Err(e) => {
                let msg = one_line(&e);
                // One log line per distinct error, not one per retry.
                if self.failed.as_ref().is_none_or(|(_, _, m)| m != &msg) {
                    tracing::error!(error = %msg, "cdi refresh: generation failed; the old spec stays, retrying when the node changes");
                }
                self.failed = Some((now, Instant::now(), msg));
            }
        }
    }
}

pub(super) fn run(args: &RefreshArgs, config: &Config) -> Result<(), CliError> {
    let driver_root: PathBuf = args
        .generate
        .driver_root
        .clone()
        .unwrap_or_else(|| config.driver_root.clone());
    if !args.watch {
        return generate::run(&args.generate, config);
    }
    let interval = Duration::from_secs(args.interval);
    let mut watch = Watch::default();
    let mut run = || generate::run(&args.generate, config);
    loop {
        let now = Fingerprint::take(&driver_root).map_err(|error| CdiCliError::NodeState {
            driver_root: driver_root.clone(),
            error,
        });
        match now {
            Ok(now) if watch.due(&now) => watch.generate(now, &mut run),
            Ok(_) => {}
            // A driver root that cannot be read now (module unloading) may be readable later.
            Err(e) => tracing::warn!(error = %one_line(&e), "cdi refresh: node state unreadable"),
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(dir: &std::path::Path, version: &str) -> Fingerprint {
        let p = dir.join("proc/driver/nvidia/version");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            &p,
            format!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  x\n"),
        )
        .unwrap();
        Fingerprint::take(dir).unwrap()
    }

    #[test]
    fn generates_only_when_the_node_state_changed() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watch::default();
        let mut calls = 0;
        let a = fp(dir.path(), "580.1.2");
        assert!(w.due(&a));
        w.generate(a.clone(), &mut || {
            calls += 1;
            Ok(())
        });
        assert_eq!(calls, 1);
        assert!(!w.due(&a), "an unchanged node must not regenerate");
        let b = fp(dir.path(), "590.1.2");
        assert!(w.due(&b));
    }

    #[test]
    fn a_failure_is_retried_on_change_not_on_every_poll() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watch::default();
        let a = fp(dir.path(), "580.1.2");
        w.generate(a.clone(), &mut || {
            Err(std::io::Error::other("NVML is unusable").into())
        });
        assert!(!w.due(&a), "same node, fresh failure: wait");
        let b = fp(dir.path(), "590.1.2");
        assert!(w.due(&b), "the node changed: try again");
        let failed = w.failed.as_mut().unwrap();
        failed.1 = failed
            .1
            .checked_sub(RETRY_AFTER_FAILURE)
            .expect("uptime over 30 s");
        assert!(w.due(&a), "after the retry delay: try again");
    }
}
