//! NVIDIA's `/etc/nvidia-container-runtime/config.toml`, read as gpuhook's config.
//!
//! An admin switching from NVIDIA's toolkit names that file (`GPUHOOK_CONFIG`, `--config`) and
//! keeps it. A file is NVIDIA's when it has one of NVIDIA's top-level keys ([`NVIDIA_TOP_LEVEL`]).
//! Its keys are translated into gpuhook's (key names and defaults from the toolkit's
//! `internal/config/config.go` `Config`/`GetDefault`, `cli.go` `ContainerCLIConfig`,
//! `runtime.go` `RuntimeConfig`/`cdiModeConfig`); gpuhook's own keys may sit beside them. A key
//! gpuhook has no use for is a warning ([`super::Config::warnings`], logged once logging is up), never
//! an error: NVIDIA's tools ignore unknown keys too.

use toml::{Table, Value};

/// Top-level keys only NVIDIA's file has.
pub const NVIDIA_TOP_LEVEL: &[&str] = &[
    "accept-nvidia-visible-devices-envvar-when-unprivileged",
    "accept-nvidia-visible-devices-as-volume-mounts",
    "supported-driver-capabilities",
    "disable-require",
    "swarm-resource",
    "nvidia-container-cli",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
    "features",
];

/// gpuhook's own top-level keys (kept as they are in NVIDIA's file).
const GPUHOOK_KEYS: &[&str] = &[
    "driver-root",
    "dev-root",
    "accept-envvar-when-unprivileged",
    "accept-device-list-as-volume-mounts",
    "allow-cdi-devices-from-pod-annotations",
    "supported-capabilities",
    "ldconfig",
    "inventory-cache",
    "cdi-spec-dirs",
    "log-file",
    "log-level",
    "log-format",
    "runtime",
];

/// Cheap test on the text: `false` means it is not NVIDIA's file.
pub fn may_be_nvidia(text: &str) -> bool {
    NVIDIA_TOP_LEVEL.iter().any(|k| text.contains(k))
}

/// Whether `doc` is NVIDIA's config file.
pub fn is_nvidia(doc: &Table) -> bool {
    NVIDIA_TOP_LEVEL.iter().any(|k| doc.contains_key(*k))
}

/// A translation failure: (NVIDIA key, message).
pub type Invalid = (String, String);

/// Translates NVIDIA's `doc` into gpuhook's keys; returns the table and the warnings.
pub fn translate(mut doc: Table) -> Result<(Table, Vec<String>), Invalid> {
    let mut t = Translation::default();
    for key in GPUHOOK_KEYS {
        if let Some(v) = doc.remove(*key) {
            t.out.insert((*key).into(), v);
        }
    }
    t.rename(
        &mut doc,
        "accept-nvidia-visible-devices-envvar-when-unprivileged",
        "accept-envvar-when-unprivileged",
    )?;
    t.rename(
        &mut doc,
        "accept-nvidia-visible-devices-as-volume-mounts",
        "accept-device-list-as-volume-mounts",
    )?;
    // NVIDIA's default; `true` (skip every NVIDIA_REQUIRE_*) is not offered node-wide.
    if doc.get("disable-require") == Some(&Value::Boolean(false)) {
        doc.remove("disable-require");
    }
    if let Some(v) = doc.remove("supported-driver-capabilities") {
        let caps = t.string("supported-driver-capabilities", &v)?;
        let list: Vec<&str> = caps
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        // `all` (any case) is every capability: gpuhook's default.
        if !list.iter().any(|c| c.eq_ignore_ascii_case("all")) {
            let list = list.into_iter().map(|c| Value::String(c.into())).collect();
            t.out
                .insert("supported-capabilities".into(), Value::Array(list));
        }
    }
    if let Some(cli) = doc.remove("nvidia-container-cli") {
        t.cli(cli)?;
    }
    if let Some(rt) = doc.remove("nvidia-container-runtime") {
        t.runtime(rt)?;
    }
    for (key, _) in doc {
        t.ignored(&key);
    }
    Ok((t.out, t.warnings))
}

#[cfg(test)]
#[path = "nvidia_tests.rs"]
mod tests;

#[derive(Default)]
struct Translation {
    out: Table,
    warnings: Vec<String>,
}

impl Translation {
    fn ignored(&mut self, key: &str) {
        self.warnings.push(format!(
            "NVIDIA config key `{key}` has no meaning for gpuhook; ignored"
        ));
    }

    /// A boolean key under gpuhook's name.
    fn rename(&mut self, doc: &mut Table, from: &str, to: &str) -> Result<(), Invalid> {
        if let Some(v) = doc.remove(from) {
            if !v.is_bool() {
                return Err((from.into(), format!("expected true or false, found {v}")));
            }
            self.out.entry(to).or_insert(v);
        }
        Ok(())
    }

    fn string<'v>(&self, key: &str, v: &'v Value) -> Result<&'v str, Invalid> {
        v.as_str()
            .ok_or_else(|| (key.to_string(), format!("expected a string, found {v}")))
    }

    fn table(&self, key: &str, v: Value) -> Result<Table, Invalid> {
        match v {
            Value::Table(t) => Ok(t),
            other => Err((key.to_string(), format!("expected a table, found {other}"))),
        }
    }

    /// `[nvidia-container-cli]`: `root` is the driver root, `ldconfig` the host ldconfig.
    fn cli(&mut self, cli: Value) -> Result<(), Invalid> {
        for (key, v) in self.table("nvidia-container-cli", cli)? {
            let full = format!("nvidia-container-cli.{key}");
            match key.as_str() {
                "root" => {
                    let root = self.string(&full, &v)?;
                    let root = if root.is_empty() { "/" } else { root };
                    self.out.entry("driver-root").or_insert(root.into());
                }
                "ldconfig" => {
                    // NVIDIA's default `@/sbin/ldconfig` is resolved to `ldconfig.real` where
                    // that exists (`NormalizeLDConfigPath`): gpuhook's default does the same.
                    let l = self.string(&full, &v)?;
                    let l = if l == "@/sbin/ldconfig" {
                        super::DEFAULT_LDCONFIG
                    } else {
                        l
                    };
                    self.out.entry("ldconfig").or_insert(l.into());
                }
                _ => self.ignored(&full),
            }
        }
        Ok(())
    }

    /// `[nvidia-container-runtime]`: mode, runtimes, debug (log file), log-level, modes.cdi.
    fn runtime(&mut self, rt: Value) -> Result<(), Invalid> {
        let mut runtime = Table::new();
        for (key, v) in self.table("nvidia-container-runtime", rt)? {
            let full = format!("nvidia-container-runtime.{key}");
            match key.as_str() {
                "mode" => {
                    let mode = match self.string(&full, &v)? {
                        // NVIDIA's `auto` picks legacy or cdi per container; gpuhook's cdi mode
                        // serves both kinds of request.
                        "auto" | "cdi" => "cdi",
                        "legacy" => "legacy",
                        "jit-cdi" => "jit-cdi",
                        other => {
                            return Err((
                                full,
                                format!("mode {other:?} is not supported by gpuhook (auto, cdi, jit-cdi or legacy)"),
                            ))
                        }
                    };
                    runtime.insert("mode".into(), mode.into());
                }
                "runtimes" => {
                    runtime.insert("runtimes".into(), v);
                }
                "debug" => {
                    let file = self.string(&full, &v)?;
                    if !file.is_empty() && file != "/dev/null" {
                        self.out.entry("log-file").or_insert(file.into());
                    }
                }
                "log-level" => {
                    let level = match self.string(&full, &v)? {
                        "warning" => "warn",
                        l => l,
                    };
                    self.out.entry("log-level").or_insert(level.into());
                }
                "modes" => self.modes(v)?,
                _ => self.ignored(&full),
            }
        }
        if !runtime.is_empty() {
            let ours = self
                .out
                .entry("runtime")
                .or_insert(Value::Table(Table::new()));
            if let Value::Table(ours) = ours {
                for (k, v) in runtime {
                    ours.entry(k).or_insert(v);
                }
            }
        }
        Ok(())
    }

    /// `[nvidia-container-runtime.modes.cdi]`: spec-dirs; default-kind and annotation-prefixes
    /// only with NVIDIA's defaults (gpuhook's are fixed).
    fn modes(&mut self, modes: Value) -> Result<(), Invalid> {
        for (mode, v) in self.table("nvidia-container-runtime.modes", modes)? {
            let base = format!("nvidia-container-runtime.modes.{mode}");
            if mode != "cdi" {
                self.ignored(&base);
                continue;
            }
            for (key, v) in self.table(&base, v)? {
                let full = format!("{base}.{key}");
                match (key.as_str(), &v) {
                    ("spec-dirs", _) => {
                        self.out.entry("cdi-spec-dirs").or_insert(v);
                    }
                    ("default-kind", Value::String(k)) if k == "nvidia.com/gpu" => {}
                    ("annotation-prefixes", Value::Array(a))
                        if a.iter().all(|p| p.as_str() == Some("cdi.k8s.io/")) => {}
                    _ => self.warnings.push(format!(
                        "NVIDIA config key `{full}` = {v}: gpuhook supports only NVIDIA's default \
                         here; ignored"
                    )),
                }
            }
        }
        Ok(())
    }
}
