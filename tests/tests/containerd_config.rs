//! containerd accepts the configuration gpuhook ships and writes.
//!
//! Real containerd 1.6 is the judge: `containerd config dump` shows how it parsed (and, with
//! imports, merged) the files, and a private daemon started on the config must load its CRI
//! plugin — the CRI plugin refuses, for instance, a runtime table that lost `runc` while runc is
//! still the default runtime, which `config dump` alone would not reveal.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuhook_containerd::{configure, ConfigureOptions, ConfigureOutcome, EXIT_CHANGED};
use gpuhook_e2e::containerd::{example_config, localize, Containerd};
use gpuhook_e2e::{e2e_ready, run_ok};

const CRI: &str = "io.containerd.grpc.v1.cri";

/// The status column of the CRI plugin in `ctr plugins ls` ("ok" or "error").
fn cri_status(daemon: &Containerd) -> String {
    let out = daemon.ctr(&["plugins", "ls"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.first() == Some(&"io.containerd.grpc.v1") && cols.get(1) == Some(&"cri"))
        .and_then(|cols| cols.last().map(|s| s.to_string()))
        .unwrap_or_else(|| panic!("no cri plugin in ctr plugins ls:\n{text}"))
}

/// A node's directories in a temp dir.
struct Node {
    tmp: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        Node {
            tmp: tempfile::tempdir().expect("tempdir"),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    fn binary(&self) -> PathBuf {
        self.path("bin/gpuhook-runtime")
    }
    /// Points a config's root, state and socket into this node.
    fn localize(&self, text: &str) -> String {
        localize(text, self.tmp.path())
    }
    /// A private containerd on `config` (socket and log in this node).
    fn start(&self, config: &Path) -> Containerd {
        Containerd::start(self.tmp.path(), config, &[])
    }
}

/// `containerd config dump`, parsed.
fn dump(config: &Path) -> toml::Table {
    let text = run_ok(
        Command::new("containerd")
            .arg("--config")
            .arg(config)
            .args(["config", "dump"]),
    );
    text.parse()
        .unwrap_or_else(|e| panic!("dump is not TOML: {e}\n{text}"))
}

fn get<'a>(t: &'a toml::Table, path: &[&str]) -> &'a toml::Value {
    let (last, parents) = path.split_last().unwrap();
    let mut cur = t;
    for key in parents {
        cur = cur
            .get(*key)
            .and_then(toml::Value::as_table)
            .unwrap_or_else(|| panic!("no table {key} on the way to {path:?}"));
    }
    cur.get(*last)
        .unwrap_or_else(|| panic!("no {path:?} in the dump"))
}

fn runtime<'a>(dump: &'a toml::Table, name: &str) -> &'a toml::Value {
    get(dump, &["plugins", CRI, "containerd", "runtimes", name])
}

/// The gpuhook runtime as containerd parsed it; `hides`: its privileged_without_host_devices.
fn assert_gpuhook(dump: &toml::Table, binary: &Path, systemd: bool, hides: bool) {
    let rt = runtime(dump, "gpuhook");
    assert_eq!(rt["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    assert_eq!(rt["privileged_without_host_devices"].as_bool(), Some(hides));
    // containerd's own dump shows it knows the key (containerd 1.6 has container_annotations).
    let ann = rt["container_annotations"]
        .as_array()
        .expect("container_annotations");
    assert!(
        ann.iter().any(|v| v.as_str() == Some("cdi.k8s.io/*")),
        "{ann:?}"
    );
    // Issue #14.5: pod annotations are the pod author's, not a device grant.
    let pod = rt.get("pod_annotations").and_then(|a| a.as_array());
    assert!(
        !pod.into_iter()
            .flatten()
            .any(|v| v.as_str() == Some("cdi.k8s.io/*")),
        "{pod:?}"
    );
    assert_eq!(rt["options"]["BinaryName"].as_str(), binary.to_str());
    assert_eq!(rt["options"]["SystemdCgroup"].as_bool(), Some(systemd));
}

#[test]
fn example_config_is_accepted_by_containerd() {
    if !e2e_ready("containerd_config", &["containerd", "ctr"]) {
        return;
    }
    let node = Node::new();
    let text = example_config(node.tmp.path(), &node.binary());
    assert!(!text.contains("/usr/local/bin/gpuhook-runtime"), "{text}");
    let config = node.path("config.toml");
    std::fs::write(&config, text).unwrap();

    let d = dump(&config);
    assert_gpuhook(&d, &node.binary(), true, true);
    assert_eq!(
        runtime(&d, "runc")["options"]["SystemdCgroup"].as_bool(),
        Some(true)
    );
    assert_eq!(
        get(&d, &["plugins", CRI, "containerd", "default_runtime_name"]).as_str(),
        Some("runc")
    );

    let daemon = node.start(&config);
    assert_eq!(
        cri_status(&daemon),
        "ok",
        "CRI plugin refused the config:\n{}",
        daemon.log_text()
    );
}

/// Debian's `containerd config default`, on this node's paths, with the systemd cgroup driver.
fn debian_default(node: &Node) -> String {
    let text = run_ok(Command::new("containerd").args(["config", "default"]));
    assert!(text.contains("SystemdCgroup = false"));
    node.localize(&text)
        .replace("SystemdCgroup = false", "SystemdCgroup = true")
        .replace("registry.k8s.io/pause:3.6", "example.com/pause:9")
}

#[test]
fn configure_on_debian_default_config_is_accepted_and_idempotent() {
    if !e2e_ready("containerd_config", &["containerd", "ctr"]) {
        return;
    }
    let node = Node::new();
    let config = node.path("config.toml");
    std::fs::write(&config, debian_default(&node)).unwrap();
    let opts = ConfigureOptions {
        config: config.clone(),
        binary: node.binary(),
        ..Default::default()
    };
    let first = configure(&opts, false).expect("configure");
    assert_eq!(first.exit_code(), EXIT_CHANGED, "{first:?}");

    let d = dump(&config);
    assert_gpuhook(&d, &node.binary(), true, true);
    assert_eq!(
        get(&d, &["plugins", CRI, "sandbox_image"]).as_str(),
        Some("example.com/pause:9")
    );
    {
        let daemon = node.start(&config);
        assert_eq!(cri_status(&daemon), "ok", "{}", daemon.log_text());
    }

    let written = std::fs::read(&config).unwrap();
    let second = configure(&opts, false).expect("configure again");
    assert!(
        matches!(second, ConfigureOutcome::Unchanged { .. }),
        "{second:?}"
    );
    assert_eq!(std::fs::read(&config).unwrap(), written);
}

#[test]
fn configure_drop_in_keeps_the_cri_settings_of_the_main_file() {
    if !e2e_ready("containerd_config", &["containerd", "ctr"]) {
        return;
    }
    let node = Node::new();
    let config = node.path("config.toml");
    let main_text = debian_default(&node);
    std::fs::write(&config, &main_text).unwrap();
    let drop_in = node.path("conf.d/99-gpuhook.toml");
    let opts = ConfigureOptions {
        config: config.clone(),
        drop_in: Some(drop_in.clone()),
        binary: node.binary(),
        // A default runtime must not hide host devices from privileged pods (issue #17.7).
        set_as_default: true,
        privileged_host_devices: true,
        ..Default::default()
    };
    assert_eq!(configure(&opts, false).unwrap().exit_code(), EXIT_CHANGED);
    assert!(drop_in.exists());

    // containerd 1.6 replaces the whole CRI section with the drop-in's: the settings of the
    // main file must still be in effect because the drop-in carries them.
    let d = dump(&config);
    assert_gpuhook(&d, &node.binary(), true, false);
    assert_eq!(
        get(&d, &["plugins", CRI, "containerd", "default_runtime_name"]).as_str(),
        Some("gpuhook")
    );
    assert_eq!(
        get(&d, &["plugins", CRI, "sandbox_image"]).as_str(),
        Some("example.com/pause:9")
    );
    assert_eq!(
        runtime(&d, "runc")["options"]["SystemdCgroup"].as_bool(),
        Some(true)
    );
    let imports = get(&d, &["imports"]).as_array().unwrap();
    assert!(
        imports.iter().any(|v| v.as_str() == drop_in.to_str()),
        "{imports:?}"
    );
    {
        let daemon = node.start(&config);
        assert_eq!(cri_status(&daemon), "ok", "{}", daemon.log_text());
    }
    let (main_after, drop_after) = (
        std::fs::read(&config).unwrap(),
        std::fs::read(&drop_in).unwrap(),
    );
    assert!(matches!(
        configure(&opts, false).unwrap(),
        ConfigureOutcome::Unchanged { .. }
    ));
    assert_eq!(std::fs::read(&config).unwrap(), main_after);
    assert_eq!(std::fs::read(&drop_in).unwrap(), drop_after);
}

#[test]
fn configure_on_a_config_without_cri_section_keeps_runc_usable() {
    if !e2e_ready("containerd_config", &["containerd", "ctr"]) {
        return;
    }
    let node = Node::new();
    let config = node.path("config.toml");
    let text = node.localize(
        "version = 2\nroot = \"/var/lib/containerd\"\nstate = \"/run/containerd\"\n\n[grpc]\n  address = \"/run/containerd/containerd.sock\"\n",
    );
    std::fs::write(&config, text).unwrap();
    let opts = ConfigureOptions {
        config: config.clone(),
        binary: node.binary(),
        ..Default::default()
    };
    assert_eq!(configure(&opts, false).unwrap().exit_code(), EXIT_CHANGED);
    let d = dump(&config);
    let rt = runtime(&d, "gpuhook");
    assert_eq!(rt["options"]["BinaryName"].as_str(), node.binary().to_str());
    assert_eq!(
        runtime(&d, "runc")["runtime_type"].as_str(),
        Some("io.containerd.runc.v2")
    );
    let daemon = node.start(&config);
    // Without the runc entry configure adds, the CRI plugin fails: "no corresponding runtime
    // configured in `containerd.runtimes` for `containerd` `default_runtime_name = "runc"`".
    assert_eq!(cri_status(&daemon), "ok", "{}", daemon.log_text());
}
