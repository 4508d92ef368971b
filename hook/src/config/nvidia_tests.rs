//! Issue #13.7. The file below is NVIDIA's default `/etc/nvidia-container-runtime/config.toml`
//! (what `nvidia-ctk config default` writes); key names and defaults are those of the toolkit's
//! `internal/config/config.go` (`Config`, `GetDefault`: accept-…-envvar-when-unprivileged
//! = true, runtimes ["docker-runc", "runc"], mode "auto", modes.cdi default-kind
//! "nvidia.com/gpu", annotation-prefixes ["cdi.k8s.io/"], spec-dirs /etc/cdi and /var/run/cdi,
//! ldconfig "@/sbin/ldconfig"), `cli.go` (`ContainerCLIConfig`: root, path, environment, debug,
//! ldcache, load-kmods, no-pivot, no-cgroups, user, ldconfig) and `runtime.go` (`RuntimeConfig`:
//! debug, log-level, runtimes, mode, modes).

use std::path::{Path, PathBuf};

use super::super::{Config, RuntimeMode};
use crate::logging::LogLevel;

const NVIDIA_DEFAULT: &str = r#"
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"#;

const PATH: &str = "/etc/nvidia-container-runtime/config.toml";

fn load(text: &str) -> Config {
    Config::from_toml(text, Path::new(PATH)).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn nvidias_default_file_gives_gpuhooks_defaults_with_warnings_not_errors() {
    let c = load(NVIDIA_DEFAULT);
    let d = Config::default();
    assert!(c.accept_envvar_when_unprivileged);
    assert!(!c.accept_device_list_as_volume_mounts);
    assert_eq!(
        c.supported_capabilities.len(),
        d.supported_capabilities.len()
    );
    assert_eq!(c.driver_root, Path::new("/"));
    assert_eq!(
        c.ldconfig, d.ldconfig,
        "@/sbin/ldconfig means ldconfig.real where it exists"
    );
    assert_eq!(c.cdi_spec_dirs, d.cdi_spec_dirs);
    assert_eq!(c.log_level, LogLevel::Info);
    assert_eq!(c.runtime.mode, RuntimeMode::Cdi);
    assert_eq!(c.runtime.runtimes, ["docker-runc", "runc", "crun"]);
    // Keys without a meaning here are warnings, each named.
    for key in [
        "nvidia-container-cli.environment",
        "nvidia-container-cli.load-kmods",
        "nvidia-container-runtime.modes.csv",
        "nvidia-container-runtime-hook",
        "nvidia-ctk",
    ] {
        assert!(
            c.warnings.iter().any(|w| w.contains(&format!("`{key}`"))),
            "{key}: {:?}",
            c.warnings
        );
    }
    assert!(!c.warnings.iter().any(|w| w.contains("disable-require")));
}

#[test]
fn a_secure_cluster_file_maps_every_setting() {
    let text = r#"
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
supported-driver-capabilities = "utility,compute"
[nvidia-container-cli]
root = "/run/nvidia/driver"
ldconfig = "@/usr/sbin/ldconfig"
[nvidia-container-runtime]
debug = "/var/log/nvidia-container-runtime.log"
log-level = "warning"
mode = "legacy"
runtimes = ["crun"]
[nvidia-container-runtime.modes.cdi]
spec-dirs = ["/var/run/cdi"]
"#;
    let c = load(text);
    assert!(!c.accept_envvar_when_unprivileged);
    assert!(c.accept_device_list_as_volume_mounts);
    let p = c.request_policy();
    assert!(!p.accept_envvar_when_unprivileged);
    assert!(p.accept_device_list_as_volume_mounts);
    assert_eq!(p.supported_capabilities.len(), 2);
    assert_eq!(c.driver_root, Path::new("/run/nvidia/driver"));
    assert_eq!(c.ldconfig, "@/usr/sbin/ldconfig");
    assert_eq!(
        c.log_file,
        Some(PathBuf::from("/var/log/nvidia-container-runtime.log"))
    );
    assert_eq!(c.log_level, LogLevel::Warn);
    assert_eq!(c.runtime.mode, RuntimeMode::Legacy);
    assert_eq!(c.runtime.runtimes, ["crun"]);
    assert_eq!(c.cdi_spec_dirs, [PathBuf::from("/var/run/cdi")]);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = load("supported-driver-capabilities = \"all\"\n");
    assert_eq!(
        c.supported_capabilities,
        Config::default().supported_capabilities
    );
    // jit-cdi too; gpuhook's own keys may sit beside NVIDIA's.
    let c =
        load("[nvidia-container-runtime]\nmode = \"jit-cdi\"\n[runtime]\nearly-setup = false\n");
    assert_eq!(c.runtime.mode, RuntimeMode::JitCdi);
    assert!(!c.runtime.early_setup);
}

#[test]
fn unknown_keys_warn_bad_values_fail_with_file_line_and_key() {
    let c = load("swarm-resource = \"X\"\nbogus = 1\n[nvidia-container-runtime]\nnew-key = true\n");
    assert!(
        c.warnings.iter().any(|w| w.contains("`bogus`")),
        "{:?}",
        c.warnings
    );
    assert!(c
        .warnings
        .iter()
        .any(|w| w.contains("`nvidia-container-runtime.new-key`")));
    assert!(c.warnings.iter().any(|w| w.contains("`swarm-resource`")));
    // A default-kind other than NVIDIA's default is not followed: warned.
    let c = load("[nvidia-container-runtime.modes.cdi]\ndefault-kind = \"acme.io/gpu\"\n");
    assert!(
        c.warnings.iter().any(|w| w.contains("default-kind")),
        "{:?}",
        c.warnings
    );

    let err = |text: &str| {
        Config::from_toml(text, Path::new(PATH))
            .unwrap_err()
            .to_string()
    };
    let e = err("[nvidia-container-runtime]\nmode = \"csv\"\n");
    assert!(
        e.starts_with(&format!(
            "{PATH}:2: key `nvidia-container-runtime.mode`: mode \"csv\""
        )),
        "{e}"
    );
    let e = err("accept-nvidia-visible-devices-envvar-when-unprivileged = \"no\"\n");
    assert!(
        e.starts_with(&format!(
            "{PATH}:1: key `accept-nvidia-visible-devices-envvar-when-unprivileged`: expected true or false"
        )),
        "{e}"
    );
    let e = err("[nvidia-container-cli]\nroot = \"relative\"\n");
    assert!(e.contains("driver-root"), "{e}");
}

#[test]
fn gpuhooks_own_file_stays_strict() {
    // Not NVIDIA's file: a typo is still an error (and the word "features" alone does not
    // make it NVIDIA's).
    let e = Config::from_toml(
        "# features\nbogus = 1\n",
        Path::new("/etc/gpuhook/config.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("key `bogus`"), "{e}");
}
