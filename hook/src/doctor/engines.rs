//! Docker and CRI-O, when installed: can `docker run --gpus` reach gpuhook, and do their configs
//! run gpuhook-runtime?
//!
//! Docker: `--gpus` needs `nvidia-container-runtime-hook` on dockerd's PATH (moby
//! `daemon/nvidia_linux.go`; the doctor searches its own PATH, which is dockerd's on most
//! nodes), and gpuhook serves it only when that is a link to gpuhook; `--runtime gpuhook` needs
//! the runtime in `daemon.json`. CRI-O: a runtime handler in `crio.conf` or its drop-ins. The
//! judge of a config is `runtime configure`'s own planner: nothing to change means configured.
//! An engine whose daemon is not on the PATH and whose config is absent is not installed, and
//! gets no finding.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use gpuhook_containerd::engine::{Engine, EngineOptions};

use super::{Finding, Options};

/// The name dockerd runs for `--gpus`.
const HOOK: &str = gpuhook_containerd::docker::NVIDIA_HOOK_NAME;

/// `name` in the directories of `path`.
fn find(path: Option<&OsString>, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub(super) fn check(opts: &Options, out: &mut Vec<Finding>) {
    let path = opts.engine_path.as_ref();
    if find(path, "dockerd").is_some() || opts.docker_config.exists() {
        out.push(docker_hook(path));
        out.push(engine_config(opts, Engine::Docker));
    }
    if find(path, "crio").is_some() || opts.crio_config.exists() || opts.crio_drop_in.exists() {
        out.push(engine_config(opts, Engine::Crio));
    }
}

/// `nvidia-container-runtime-hook` on the PATH, and whether it is gpuhook.
fn docker_hook(path: Option<&OsString>) -> Finding {
    const CHECK: &str = "docker-gpus";
    let fix = format!(
        "ln -s \"$(command -v gpuhook)\" /usr/local/bin/{HOOK} && systemctl restart docker \
         (dockerd looks it up once, at start)"
    );
    let Some(found) = find(path, HOOK) else {
        return Finding::warn(
            CHECK,
            format!(
                "no {HOOK} on PATH: `docker run --gpus` fails with `could not select device \
                 driver \"\" with capabilities: [[gpu]]`"
            ),
            fix,
        );
    };
    let target = std::fs::canonicalize(&found).unwrap_or_else(|_| found.clone());
    if target.file_name().is_some_and(|n| n == "gpuhook") {
        Finding::ok(
            CHECK,
            format!(
                "{} -> {}: `docker run --gpus` runs `gpuhook prestart`",
                found.display(),
                target.display()
            ),
        )
    } else {
        Finding::warn(
            CHECK,
            format!(
                "{} is not gpuhook ({}): `docker run --gpus` runs it, not gpuhook (NVIDIA's \
                 toolkit?)",
                found.display(),
                target.display()
            ),
            format!("remove it or put a link to gpuhook earlier on dockerd's PATH: {fix}"),
        )
    }
}

/// The engine's config, judged by `runtime configure`'s planner.
fn engine_config(opts: &Options, engine: Engine) -> Finding {
    let check = match engine {
        Engine::Docker => "docker",
        Engine::Crio => "crio",
    };
    let mut o = EngineOptions::defaults(engine);
    o.runtime_name = opts.runtime_name.clone();
    o.binary = opts.runtime_binary.clone();
    match engine {
        Engine::Docker => o.config = opts.docker_config.clone(),
        Engine::Crio => {
            o.config = opts.crio_config.clone();
            o.drop_in = Some(opts.crio_drop_in.clone());
        }
    }
    let name = &opts.runtime_name;
    let fix = format!(
        "gpuhook runtime configure --runtime {} --runtime-name {name} --binary {}, then \
         restart {}",
        engine.name(),
        opts.runtime_binary.display(),
        engine.name()
    );
    let plan = match engine {
        Engine::Docker => gpuhook_containerd::docker::plan(&o),
        Engine::Crio => gpuhook_containerd::crio::plan(&o),
    };
    let changes = match plan {
        Err(e) => return Finding::fail(check, e.to_string(), "fix the file, then re-run"),
        Ok((changes, _)) => changes,
    };
    if changes.is_empty() {
        return binary_finding(check, name, &opts.runtime_binary);
    }
    let has_runtime = changes
        .iter()
        .filter_map(|c| c.before.as_deref())
        .any(|t| mentions_runtime(t, name));
    match (engine, has_runtime) {
        (_, true) => Finding::warn(
            check,
            format!(
                "the runtime `{name}` differs from what `gpuhook runtime configure` writes \
                 (another binary?)"
            ),
            fix,
        ),
        (Engine::Docker, false) => Finding::ok(
            check,
            format!(
                "{} has no runtime `{name}`: only `docker run --runtime {name}` needs it \
                 (`--gpus` does not)",
                opts.docker_config.display()
            ),
        ),
        (Engine::Crio, false) => Finding::fail(
            check,
            format!("no CRI-O runtime handler `{name}`: pods with that RuntimeClass fail to start"),
            fix,
        ),
    }
}

/// Whether a config text defines the runtime `name` (Docker's JSON key or CRI-O's table).
fn mentions_runtime(text: &str, name: &str) -> bool {
    text.contains(&format!("\"{name}\"")) || text.contains(&format!("runtimes.{name}]"))
}

fn binary_finding(check: &'static str, name: &str, binary: &Path) -> Finding {
    if binary.is_file() {
        Finding::ok(check, format!("runtime `{name}` runs {}", binary.display()))
    } else {
        Finding::fail(
            check,
            format!(
                "runtime `{name}` runs {}, which does not exist",
                binary.display()
            ),
            "install gpuhook-runtime there, or re-run `gpuhook runtime configure` with --binary",
        )
    }
}

#[cfg(test)]
#[path = "engines_tests.rs"]
mod tests;
