//! Unit tests of `configure` on whole files (the drop-in cases are in `drop_in_tests.rs`, bad
//! input in `error_tests.rs`, the `--set-as-default` refusal in `default_tests.rs`). The helpers are shared with both.

use std::fs;

use toml_edit::{DocumentMut, Item};

use super::*;

/// `containerd config default` of Debian 12's containerd 1.6.20.
const DEBIAN_DEFAULT: &str = include_str!("testdata/containerd-1.6-default.toml");

pub(super) struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    pub(super) fn new() -> Dir {
        Dir {
            tmp: tempfile::tempdir().unwrap(),
        }
    }
    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    pub(super) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        p
    }
    pub(super) fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

pub(super) fn opts(config: &Path) -> ConfigureOptions {
    ConfigureOptions {
        config: config.into(),
        ..Default::default()
    }
}

pub(super) fn item<'a>(doc: &'a DocumentMut, path: &[&str]) -> Option<&'a Item> {
    let mut it = doc.as_item();
    for key in path {
        it = it.as_table_like()?.get(key)?;
    }
    Some(it)
}

pub(super) fn runtime<'a>(doc: &'a DocumentMut, cri: &str, name: &str) -> &'a Item {
    item(doc, &["plugins", cri, "containerd", "runtimes", name])
        .unwrap_or_else(|| panic!("no runtime {name} under {cri}:\n{doc}"))
}

pub(super) fn read_doc(p: &Path) -> DocumentMut {
    fs::read_to_string(p).unwrap().parse().unwrap()
}

/// Checks the gpuhook runtime's settings.
pub(super) fn assert_gpuhook(rt: &Item, binary: &str, systemd: Option<bool>) {
    assert_gpuhook_hiding(rt, binary, systemd, true);
}

/// `hides`: the expected `privileged_without_host_devices`.
pub(super) fn assert_gpuhook_hiding(rt: &Item, binary: &str, systemd: Option<bool>, hides: bool) {
    assert_eq!(rt["runtime_type"].as_str(), Some(RUNC_V2));
    assert_eq!(rt["privileged_without_host_devices"].as_bool(), Some(hides));
    let list = |key: &str| -> Vec<String> {
        rt.get(key)
            .and_then(Item::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    // Issue #14.5: CDI requests come from container annotations (a device plugin's), never
    // from the pod author's annotations unless the admin opts in.
    assert!(list("container_annotations").contains(&CDI_ANNOTATIONS.to_string()));
    assert!(!list("pod_annotations").contains(&CDI_ANNOTATIONS.to_string()));
    assert_eq!(rt["options"]["BinaryName"].as_str(), Some(binary));
    assert_eq!(
        rt["options"].get("SystemdCgroup").and_then(Item::as_bool),
        systemd
    );
}

#[test]
fn debian_default_v2_gets_a_runc_copy_and_second_run_is_unchanged() {
    let d = Dir::new();
    let text = DEBIAN_DEFAULT.replace("SystemdCgroup = false", "SystemdCgroup = true");
    let cfg = d.write("config.toml", &text);
    let out = configure(&opts(&cfg), false).unwrap();
    assert_eq!(out.exit_code(), EXIT_CHANGED);
    let ConfigureOutcome::Changed { version, files, .. } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(*version, ConfigVersion::V2);
    assert_eq!(files.len(), 1);
    // Only additions: every original line is still there, in order.
    assert!(!files[0].diff().lines().skip(2).any(|l| l.starts_with('-')));
    let doc = read_doc(&cfg);
    let rt = runtime(&doc, "io.containerd.grpc.v1.cri", "gpuhook");
    assert_gpuhook(rt, DEFAULT_BINARY, Some(true));
    // Copied from runc: its other settings come along.
    assert_eq!(rt["options"]["ShimCgroup"].as_str(), Some(""));
    // Placed right after the runc runtime, not at the end of the file.
    let after = fs::read_to_string(&cfg).unwrap();
    let pos = |s: &str| after.find(s).unwrap();
    assert!(pos("runtimes.gpuhook]") > pos("runtimes.runc.options]"));
    assert!(pos("runtimes.gpuhook.options]") < pos("untrusted_workload_runtime]"));
    // The backup holds the old content.
    let backup = files[0].backup.clone().unwrap();
    assert_eq!(fs::read_to_string(&backup).unwrap(), text);

    let second = configure(&opts(&cfg), false).unwrap();
    assert_eq!(
        second,
        ConfigureOutcome::Unchanged {
            version: ConfigVersion::V2
        }
    );
    assert_eq!(second.exit_code(), EXIT_UNCHANGED);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), after);
    assert_eq!(d.entries().len(), 2, "a second backup: {:?}", d.entries());
}

#[test]
fn comments_and_unrelated_settings_survive() {
    let d = Dir::new();
    let text = r#"# Node config, managed by hand.
version = 2
root = "/var/lib/containerd" # keep

[plugins."io.containerd.grpc.v1.cri"]
  # the pause image
  sandbox_image = "registry.k8s.io/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    # must match the kubelet
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true   # systemd driver

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d" # mirrors
"#;
    let cfg = d.write("config.toml", text);
    configure(&opts(&cfg), false).unwrap();
    let after = fs::read_to_string(&cfg).unwrap();
    for line in text.lines() {
        assert!(after.contains(line), "lost {line:?} in:\n{after}");
    }
    assert_gpuhook(
        runtime(&read_doc(&cfg), "io.containerd.grpc.v1.cri", "gpuhook"),
        DEFAULT_BINARY,
        Some(true),
    );
    // The runc runtime's comments are not copied into ours.
    assert_eq!(after.matches("# must match the kubelet").count(), 1);
}

#[test]
fn version_1_and_3_tables() {
    let d = Dir::new();
    let v1 = d.write(
        "v1.toml",
        "[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n",
    );
    let out = configure(&opts(&v1), false).unwrap();
    assert!(matches!(
        out,
        ConfigureOutcome::Changed {
            version: ConfigVersion::V1,
            ..
        }
    ));
    assert_gpuhook(
        runtime(&read_doc(&v1), "cri", "gpuhook"),
        DEFAULT_BINARY,
        None,
    );

    let v3 = d.write(
        "v3.toml",
        "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n",
    );
    let mut o = opts(&v3);
    o.enable_cdi = true;
    o.set_as_default = true;
    o.privileged_host_devices = true;
    o.binary = "/opt/gpuhook/bin/gpuhook-runtime".into();
    o.runtime_name = "nvidia".into();
    configure(&o, false).unwrap();
    let doc = read_doc(&v3);
    assert_gpuhook_hiding(
        runtime(&doc, "io.containerd.cri.v1.runtime", "nvidia"),
        "/opt/gpuhook/bin/gpuhook-runtime",
        Some(true),
        false,
    );
    let cri = &doc["plugins"]["io.containerd.cri.v1.runtime"];
    assert_eq!(cri["enable_cdi"].as_bool(), Some(true));
    assert_eq!(
        cri["containerd"]["default_runtime_name"].as_str(),
        Some("nvidia")
    );
    assert!(item(&doc, &["plugins", "io.containerd.grpc.v1.cri"]).is_none());
    assert_eq!(configure(&o, false).unwrap().exit_code(), EXIT_UNCHANGED);
}

#[test]
fn existing_runtime_is_updated_in_place_keeping_extra_settings() {
    let d = Dir::new();
    let text = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpuhook]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = ["example.com/keep"]
  base_runtime_spec = "/etc/containerd/base.json"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpuhook.options]
  BinaryName = "/usr/bin/old-gpuhook-runtime"
  SystemdCgroup = false
"#;
    let cfg = d.write("config.toml", text);
    let out = configure(&opts(&cfg), false).unwrap();
    let ConfigureOutcome::Changed { notes, .. } = &out else {
        panic!()
    };
    assert!(
        notes.iter().any(|n| n.contains("updated runtime gpuhook")
            && n.contains("options.BinaryName")
            && n.contains("options.SystemdCgroup")),
        "{notes:?}"
    );
    let doc = read_doc(&cfg);
    let rt = runtime(&doc, "io.containerd.grpc.v1.cri", "gpuhook");
    assert_gpuhook(rt, DEFAULT_BINARY, Some(true));
    assert_eq!(
        rt["base_runtime_spec"].as_str(),
        Some("/etc/containerd/base.json")
    );
    let ann = rt["pod_annotations"].as_array().unwrap();
    assert_eq!(
        ann.get(0).and_then(|v| v.as_str()),
        Some("example.com/keep")
    );
}

/// Issue #14.5: a config an older `configure` wrote (cdi.k8s.io/* in pod_annotations) loses it;
/// `--pod-cdi-annotations` keeps it; a second run changes nothing.
#[test]
fn pod_cdi_annotations_are_removed_unless_asked_for() {
    let d = Dir::new();
    let text = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpuhook]
  runtime_type = "io.containerd.runc.v2"
  privileged_without_host_devices = true
  pod_annotations = ["cdi.k8s.io/*"]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpuhook.options]
  BinaryName = "/usr/bin/gpuhook-runtime"
"#;
    let cfg = d.write("config.toml", text);
    let out = configure(&opts(&cfg), false).unwrap();
    let ConfigureOutcome::Changed { notes, .. } = &out else {
        panic!("{out:?}")
    };
    assert!(
        notes.iter().any(|n| n.contains("pod_annotations")),
        "{notes:?}"
    );
    let doc = read_doc(&cfg);
    let rt = runtime(&doc, "io.containerd.grpc.v1.cri", "gpuhook");
    assert!(rt.get("pod_annotations").is_none(), "{doc}");
    assert_eq!(
        rt["container_annotations"]
            .as_array()
            .unwrap()
            .get(0)
            .and_then(|v| v.as_str()),
        Some(CDI_ANNOTATIONS)
    );
    assert!(matches!(
        configure(&opts(&cfg), false).unwrap(),
        ConfigureOutcome::Unchanged { .. }
    ));
    let with_pod = ConfigureOptions {
        pod_cdi_annotations: true,
        ..opts(&cfg)
    };
    configure(&with_pod, false).unwrap();
    let doc = read_doc(&cfg);
    let rt = runtime(&doc, "io.containerd.grpc.v1.cri", "gpuhook");
    assert_eq!(
        rt["pod_annotations"]
            .as_array()
            .unwrap()
            .get(0)
            .and_then(|v| v.as_str()),
        Some(CDI_ANNOTATIONS)
    );
}

#[test]
fn missing_file_gets_a_minimal_v2_config_with_runc() {
    let d = Dir::new();
    let cfg = d.path("etc/containerd/config.toml");
    // Dry run: reports the change, writes nothing.
    let out = configure(&opts(&cfg), true).unwrap();
    assert_eq!(out.exit_code(), EXIT_CHANGED);
    assert!(out.summary().contains("Dry run"));
    assert!(out.summary().contains("+BinaryName = "));
    assert!(!cfg.exists());
    configure(&opts(&cfg), false).unwrap();
    let doc = read_doc(&cfg);
    assert_eq!(doc["version"].as_integer(), Some(2));
    // Naming any runtime replaces containerd's built-in list: runc must be named too.
    let runc = runtime(&doc, "io.containerd.grpc.v1.cri", "runc");
    assert_eq!(runc["runtime_type"].as_str(), Some(RUNC_V2));
    assert_gpuhook(
        runtime(&doc, "io.containerd.grpc.v1.cri", "gpuhook"),
        DEFAULT_BINARY,
        None,
    );
    assert_eq!(
        configure(&opts(&cfg), false).unwrap().exit_code(),
        EXIT_UNCHANGED
    );
}

#[test]
fn globs() {
    assert!(glob_match(
        "/etc/containerd/conf.d/*.toml",
        "/etc/containerd/conf.d/99-gpuhook.toml"
    ));
    assert!(glob_match(
        "/etc/containerd/conf.d/99-gpuhook.toml",
        "/etc/containerd/conf.d/99-gpuhook.toml"
    ));
    assert!(glob_match(
        "/etc/*/conf.d/9?-gpuhook.toml",
        "/etc/containerd/conf.d/99-gpuhook.toml"
    ));
    assert!(!glob_match(
        "/etc/containerd/*.toml",
        "/etc/containerd/conf.d/99-gpuhook.toml"
    ));
    assert!(!glob_match(
        "/etc/containerd/conf.d/*.conf",
        "/etc/containerd/conf.d/99-gpuhook.toml"
    ));
}
