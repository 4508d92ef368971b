use std::path::Path;

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new("/etc/gpuhook/config.toml"))
}

fn err(text: &str) -> String {
    parse(text).expect_err(text).to_string()
}

#[test]
fn empty_file_is_defaults() {
    let c = parse("").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.driver_root, Path::new("/"));
    assert_eq!(c.dev_root(), Path::new("/"));
    assert!(c.accept_envvar_when_unprivileged);
    assert!(!c.accept_device_list_as_volume_mounts);
    assert_eq!(c.supported_capabilities, Capability::ALL.to_vec());
    assert_eq!(c.ldconfig, "@/sbin/ldconfig.real");
    assert_eq!(
        c.inventory_cache,
        Path::new("/var/run/gpuhook/inventory.json")
    );
    assert_eq!(
        c.cdi_spec_dirs,
        vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")]
    );
    assert_eq!(c.runtime.runtimes, vec!["runc", "crun"]);
    assert_eq!(c.runtime.mode, RuntimeMode::Cdi);
    assert!(c.runtime.generate_missing);
    assert!(c.runtime.early_setup);
    assert_eq!(c.log_settings(), crate::logging::LogSettings::default());
}

#[test]
fn every_key() {
    let c = parse(
        r#"
driver-root = "/run/nvidia/driver"
dev-root = "/"
accept-envvar-when-unprivileged = false
accept-device-list-as-volume-mounts = true
supported-capabilities = ["utility", "compute"]
ldconfig = "@/sbin/ldconfig"
inventory-cache = "/run/gpuhook/inv.json"
cdi-spec-dirs = ["/var/run/cdi"]
log-file = "/var/log/gpuhook.log"
log-level = "debug"
log-format = "json"

[runtime]
runtimes = ["crun"]
mode = "jit-cdi"
generate-missing = false
early-setup = false
"#,
    )
    .unwrap();
    assert_eq!(c.driver_root, Path::new("/run/nvidia/driver"));
    assert_eq!(c.dev_root(), Path::new("/"));
    let policy = c.request_policy();
    assert!(!policy.accept_envvar_when_unprivileged && policy.accept_device_list_as_volume_mounts);
    assert_eq!(policy.supported_capabilities.len(), 2);
    assert_eq!(c.log_level, LogLevel::Debug);
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(
        c.log_file.as_deref(),
        Some(Path::new("/var/log/gpuhook.log"))
    );
    assert_eq!(c.runtime.mode, RuntimeMode::JitCdi);
    assert_eq!(c.runtime.runtimes, vec!["crun"]);
    assert!(!c.runtime.generate_missing);
    assert!(!c.runtime.early_setup);
}

#[test]
fn unknown_key_names_key_and_line() {
    let e = err("log-level = \"info\"\naccept-envvar-when-unpriviledged = false\n");
    assert!(
        e.starts_with(
            "/etc/gpuhook/config.toml:2:1: key `accept-envvar-when-unpriviledged`: unknown field"
        ),
        "{e}"
    );
    let e = err("[runtime]\nmode = \"cdi\"\nbinary = \"x\"\n");
    assert!(
        e.starts_with("/etc/gpuhook/config.toml:3:1: key `runtime.binary`: unknown field `binary`"),
        "{e}"
    );
}

#[test]
fn wrong_types_name_key_and_line() {
    let e = err("\n\naccept-envvar-when-unprivileged = \"yes\"\n");
    assert!(
        e.contains(":3:") && e.contains("key `accept-envvar-when-unprivileged`"),
        "{e}"
    );
    assert!(
        e.contains("expected a boolean") || e.contains("invalid type"),
        "{e}"
    );
    let e = err("supported-capabilities = [\"compute\", \"gaming\"]\n");
    assert!(
        e.contains("key `supported-capabilities`") && e.contains("gaming"),
        "{e}"
    );
    let e = err("[runtime]\nmode = \"magic\"\n");
    assert!(
        e.contains(":2:") && e.contains("key `runtime.mode`") && e.contains("magic"),
        "{e}"
    );
    let e = err("log-level = \"loud\"\n");
    assert!(e.contains("key `log-level`") && e.contains("loud"), "{e}");
    let e = err("driver-root = \n");
    assert!(e.starts_with("/etc/gpuhook/config.toml:1:"), "{e}");
}

#[test]
fn invalid_values_name_key_and_line() {
    let e = err("log-level = \"info\"\ndriver-root = \"run/nvidia\"\n");
    assert_eq!(
        e,
        "/etc/gpuhook/config.toml:2: key `driver-root`: run/nvidia is not an absolute path"
    );
    let e = err("ldconfig = \"ldconfig\"\n");
    assert!(
        e.starts_with("/etc/gpuhook/config.toml:1: key `ldconfig`:"),
        "{e}"
    );
    let e = err("supported-capabilities = []\n");
    assert!(e.contains("key `supported-capabilities`: is empty"), "{e}");
    let e = err("[runtime]\nruntimes = []\n");
    assert!(
        e.starts_with("/etc/gpuhook/config.toml:2: key `runtime.runtimes`"),
        "{e}"
    );
    let e = err("cdi-spec-dirs = [\"/etc/cdi\", \"cdi\"]\n");
    assert!(
        e.contains("key `cdi-spec-dirs`: cdi is not an absolute path"),
        "{e}"
    );
}

#[test]
fn load_default_missing_is_defaults_explicit_missing_is_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let e = Config::load(Some(&missing)).unwrap_err().to_string();
    assert!(
        e.contains("does not exist") && e.contains("nope.toml"),
        "{e}"
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "log-level = \"warn\"\n").unwrap();
    assert_eq!(Config::load(Some(&file)).unwrap().log_level, LogLevel::Warn);
    std::fs::write(&file, "bogus = 1\n").unwrap();
    let e = Config::load(Some(&file)).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}:1:1: key `bogus`", file.display())),
        "{e}"
    );
    // A directory is not a readable file.
    assert!(Config::load(Some(dir.path()))
        .unwrap_err()
        .to_string()
        .starts_with("config file: cannot read"));
}

#[test]
fn ldconfig_resolution() {
    let c = Config::default();
    assert_eq!(
        c.ldconfig_path(|_| true),
        PathBuf::from("/sbin/ldconfig.real")
    );
    assert_eq!(c.ldconfig_path(|_| false), PathBuf::from("/sbin/ldconfig"));
    let c = parse("driver-root = \"/drv\"\nldconfig = \"/sbin/ldconfig\"\n").unwrap();
    assert_eq!(
        c.ldconfig_path(|_| false),
        PathBuf::from("/drv/sbin/ldconfig")
    );
    let c = parse("ldconfig = \"@/usr/sbin/ldconfig\"\n").unwrap();
    assert_eq!(
        c.ldconfig_path(|_| false),
        PathBuf::from("/usr/sbin/ldconfig")
    );
}

#[test]
fn example_file_parses_and_documents_every_key() {
    let text = include_str!("../../config.toml.example");
    // The example is all comments: uncomment the `key = value` lines and parse that.
    let uncommented: String = text
        .lines()
        .map(|l| {
            l.strip_prefix("# ")
                .filter(|r| r.contains(" = ") || r.starts_with('['))
                .unwrap_or("")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let c = parse(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
    assert_eq!(
        c,
        Config {
            dev_root: Some(PathBuf::from("/")),
            log_file: Some(PathBuf::from("/var/log/gpuhook.log")),
            ..Config::default()
        }
    );
    for key in [
        "driver-root",
        "dev-root",
        "accept-envvar-when-unprivileged",
        "accept-device-list-as-volume-mounts",
        "supported-capabilities",
        "ldconfig",
        "inventory-cache",
        "cdi-spec-dirs",
        "log-file",
        "log-level",
        "log-format",
        "[runtime]",
        "runtimes",
        "mode",
        "generate-missing",
        "early-setup",
        "claim-index-dir",
    ] {
        assert!(uncommented.contains(key), "{key} not documented");
    }
}

#[test]
fn early_setup_must_be_a_boolean() {
    let e = err("[runtime]\nearly-setup = \"yes\"\n");
    assert!(e.contains("/etc/gpuhook/config.toml"), "{e}");
    assert!(
        e.contains(":2:") && e.contains("runtime.early-setup") && e.contains("expected a boolean"),
        "{e}"
    );
}

/// Issue #14.11: a config file over the limit is refused with one error naming it, unread.
#[test]
fn huge_config_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(600 << 20)
        .unwrap();
    let err = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(
        err.contains("larger than the limit of 1048576 bytes"),
        "{err}"
    );
    assert!(err.contains("config.toml"), "{err}");
}

#[test]
fn pod_annotation_allow_list_reaches_the_policy_and_is_checked() {
    let c = parse("allow-cdi-devices-from-pod-annotations = [\"nvidia.com/gpu-mps=*\"]\n").unwrap();
    assert_eq!(c.request_policy().pod_cdi_allow, ["nvidia.com/gpu-mps=*"]);
    assert!(Config::default().request_policy().pod_cdi_allow.is_empty());
    let e = err("allow-cdi-devices-from-pod-annotations = [\"gpu=0\"]\n");
    assert!(
        e.contains(":1: key `allow-cdi-devices-from-pod-annotations`: \"gpu=0\" is not"),
        "{e}"
    );
}
