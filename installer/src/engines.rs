//! `install --runtime docker|crio`: gpuhook-runtime registered with Docker (`daemon.json`
//! runtime) or CRI-O (a drop-in runtime handler) through the library `gpuhook runtime configure
//! --runtime docker|crio` is ([`gpuhook_containerd::engine`]), in this process, inside the host
//! root. As for containerd, the files it plans are snapshotted by exact path before and after
//! (so `uninstall` restores a changed `daemon.json` byte for byte, or removes a drop-in it
//! created), and the backups it reports are recorded as created files.

use std::path::PathBuf;

use gpuhook_containerd::engine::{self, Engine, EngineOptions, CRIO_DROP_IN};

use crate::restart::Runtime;
use crate::snapshot::{ensure_dir, Snapshot};
use crate::state::State;
use crate::InstallArgs;

/// The library's options for `args` (whose runtime is Docker or CRI-O).
pub fn options(args: &InstallArgs, engine: Engine) -> EngineOptions {
    let mut o = EngineOptions::defaults(engine);
    o.runtime_name = args.runtime_name.clone();
    o.binary = args.common.install_dir.join("gpuhook-runtime");
    match engine {
        Engine::Docker => {
            o.config = args.docker_config.clone();
            // Docker has no drop-ins: the library refuses one by name.
            o.drop_in = args.drop_in.clone();
        }
        Engine::Crio => {
            o.config = args.crio_config.clone();
            o.drop_in = Some(match &args.drop_in {
                // `--drop-in` without a path (containerd's default): CRI-O's default drop-in.
                Some(d) if d.as_os_str() != gpuhook_containerd::DEFAULT_DROP_IN => d.clone(),
                _ => PathBuf::from(CRIO_DROP_IN),
            });
        }
    }
    o
}

/// The library's engine for `runtime` (`None`: containerd, configured elsewhere).
pub fn engine_of(runtime: Runtime) -> Option<Engine> {
    match runtime {
        Runtime::Containerd => None,
        Runtime::Docker => Some(Engine::Docker),
        Runtime::Crio => Some(Engine::Crio),
    }
}

/// Configures `engine` with `opts`, recording in `state` exactly the files written (even when
/// it fails part-way). True when something changed (so the engine must reload).
pub fn configure(engine: Engine, opts: &EngineOptions, state: &mut State) -> anyhow::Result<bool> {
    let (planned, _) = match engine {
        Engine::Docker => engine::docker::plan(opts)?,
        Engine::Crio => engine::crio::plan(opts)?,
    };
    let planned: Vec<PathBuf> = planned.into_iter().map(|c| c.path).collect();
    for parent in planned.iter().filter_map(|p| p.parent()) {
        ensure_dir(parent, |d| state.add_dir(d))?;
    }
    let before = Snapshot::files(planned.iter().map(PathBuf::as_path))?;
    let result = engine::configure_engine(engine, opts, false);
    state.record(
        &before,
        &Snapshot::files(planned.iter().map(PathBuf::as_path))?,
    );
    let outcome = result?;
    for backup in outcome.files.iter().filter_map(|f| f.backup.as_ref()) {
        state.add_file(backup);
    }
    for note in &outcome.notes {
        tracing::info!(engine = engine.name(), "{note}");
    }
    if outcome.files.is_empty() {
        return Ok(false);
    }
    tracing::info!(engine = engine.name(), config = %opts.config.display(), "configured");
    Ok(true)
}

/// After an uninstall that restored `daemon.json` without a `runtimes` key, a SIGHUP leaves
/// dockerd's runtimes as they were (moby `reloadPlatform` replaces them only when the key is
/// set): the message to print then, `None` when the reload removes `gpuhook`.
pub fn docker_reload_keeps_runtime(daemon_json: &std::path::Path) -> Option<String> {
    let has_runtimes = std::fs::read(daemon_json)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.get("runtimes").is_some());
    (!has_runtimes).then(|| {
        format!(
            "{} has no \"runtimes\" key any more, and dockerd reloads its runtimes on SIGHUP only \
             from that key: it lists the gpuhook runtime until restarted (`systemctl restart \
             docker`); containers cannot use it, its binary is gone",
            daemon_json.display()
        )
    })
}

#[cfg(test)]
#[path = "engines_tests.rs"]
mod tests;
