//! containerd: does its config run gpuhook-runtime, and under which handler?
//!
//! The judge is `gpuhook runtime configure`'s own planner ([`gpuhook_containerd::configure::plan`]):
//! when it would change nothing (for the main file, or with the drop-in), the node is configured
//! exactly as `configure` would configure it. Otherwise the file is read once more to tell
//! "runtime missing" (a fail: pods with that RuntimeClass get containerd's `no runtime for
//! "gpuhook" is configured`) from "runtime present but different" (a warning).

use std::path::{Path, PathBuf};

use gpuhook_containerd::configure::{plan, ConfigureOptions};

use super::{Finding, Options, MAX_FILE_BYTES};

const CHECK: &str = "containerd";
/// CRI plugin keys of config versions 1, 2 and 3.
const CRI_PLUGINS: [&str; 3] = [
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

pub(super) fn check(opts: &Options, out: &mut Vec<Finding>) {
    let config = &opts.containerd_config;
    let name = &opts.runtime_name;
    let configure = if opts.containerd_drop_in.exists() {
        "gpuhook runtime configure --drop-in"
    } else {
        "gpuhook runtime configure"
    };
    let fix = format!("{configure} --runtime-name {name} && systemctl restart containerd");
    if let Some(f) = too_large(opts) {
        out.push(f);
        return;
    }
    if !config.exists() {
        out.push(Finding::fail(
            CHECK,
            format!(
                "{} does not exist: containerd runs with its defaults, without a `{name}` runtime",
                config.display()
            ),
            fix,
        ));
        return;
    }
    let mut o = ConfigureOptions {
        config: config.clone(),
        runtime_name: name.clone(),
        binary: opts.runtime_binary.clone(),
        ..ConfigureOptions::default()
    };
    let main_only = plan(&o);
    o.drop_in = Some(opts.containerd_drop_in.clone());
    let with_drop_in = opts.containerd_drop_in.exists().then(|| plan(&o));
    let configured = |p: &Result<gpuhook_containerd::configure::Plan, _>| {
        p.as_ref().is_ok_and(|p| p.changes.is_empty())
    };
    if let Err(e) = &main_only {
        out.push(Finding::fail(
            CHECK,
            e.to_string(),
            "fix the file, then re-run the doctor",
        ));
        return;
    }
    let files = [config.clone(), opts.containerd_drop_in.clone()];
    let found = files
        .iter()
        .find_map(|f| find_runtime(f, name).map(|b| (f.clone(), b)));
    if configured(&main_only) || with_drop_in.as_ref().is_some_and(configured) {
        let (file, binary) = found.unwrap_or((config.clone(), None));
        out.push(binary_finding(&file, name, binary));
        return;
    }
    out.push(match found {
        Some((file, binary)) => Finding::warn(
            CHECK,
            format!(
                "{} has a runtime `{name}` (BinaryName {}) that differs from what `gpuhook runtime \
                 configure` writes (annotations, options or binary)",
                file.display(),
                binary.map_or("unset".into(), |b| b.display().to_string())
            ),
            format!("see `{configure} --dry-run`, then {fix}"),
        ),
        None => Finding::fail(
            CHECK,
            format!(
                "{} has no runtime `{name}`: pods with runtimeClassName {name} fail with `no \
                 runtime for \"{name}\" is configured`",
                config.display()
            ),
            fix,
        ),
    });
}

/// A fail when a config file is over the read limit.
fn too_large(opts: &Options) -> Option<Finding> {
    [&opts.containerd_config, &opts.containerd_drop_in]
        .into_iter()
        .find(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > MAX_FILE_BYTES))
        .map(|f| {
            Finding::fail(
                CHECK,
                format!("{} is over {MAX_FILE_BYTES} bytes; not read", f.display()),
                "shrink the file",
            )
        })
}

fn binary_finding(file: &Path, name: &str, binary: Option<PathBuf>) -> Finding {
    match binary {
        Some(b) if !b.is_file() => Finding::fail(
            CHECK,
            format!(
                "runtime `{name}` in {} runs {}, which does not exist",
                file.display(),
                b.display()
            ),
            format!(
                "install gpuhook-runtime and gpuhook at {} (one directory)",
                b.display()
            ),
        ),
        b => Finding::ok(
            CHECK,
            format!(
                "runtime `{name}` (BinaryName {}) in {}; pods select it with a RuntimeClass whose \
                 handler is `{name}` (containerd/runtimeclass.yaml)",
                b.map_or("unset".into(), |b| b.display().to_string()),
                file.display()
            ),
        ),
    }
}

/// `options.BinaryName` of the runtime `name` in `file` (`Some(None)`: the runtime without one).
fn find_runtime(file: &Path, name: &str) -> Option<Option<PathBuf>> {
    let text = gpuhook_node::bounded::read_bounded_string(file, MAX_FILE_BYTES).ok()?;
    let doc: toml::Table = toml::from_str(&text).ok()?;
    let plugins = doc.get("plugins")?.as_table()?;
    CRI_PLUGINS.iter().find_map(|cri| {
        let rt = plugins
            .get(*cri)?
            .get("containerd")?
            .get("runtimes")?
            .get(name)?;
        let binary = rt
            .get("options")
            .and_then(|o| o.get("BinaryName"))
            .and_then(toml::Value::as_str)
            .map(PathBuf::from);
        Some(binary)
    })
}
