//! The conflict these rules avoid is the CDI library's (container-device-interface
//! pkg/cdi/cache.go `refresh`, vendored by nvidia-container-toolkit v1.20.0): two files of one
//! directory defining one device → the device is dropped.

use super::*;
use gpuhook_cdi::{ContainerEdits, Device, DeviceNode, Hook};

fn spec(names: &[&str], hook_path: &str) -> Spec {
    Spec {
        cdi_version: "0.5.0".into(),
        kind: "nvidia.com/gpu".into(),
        annotations: Default::default(),
        devices: names
            .iter()
            .map(|n| Device {
                name: n.to_string(),
                annotations: Default::default(),
                container_edits: ContainerEdits {
                    device_nodes: vec![DeviceNode {
                        path: "/dev/nvidia0".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            })
            .collect(),
        container_edits: ContainerEdits {
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: hook_path.into(),
                args: vec!["x".into()],
                env: vec!["PATH=/bin".into()],
                timeout: None,
            }],
            ..Default::default()
        },
    }
}

fn put(path: &Path, s: &Spec) {
    std::fs::write(path, s.to_bytes(Format::from_path(path).unwrap()).unwrap()).unwrap();
}

#[test]
fn nvidia_spec_in_the_same_dir_needs_force_and_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let nv = dir.path().join("nvidia.yaml");
    put(&nv, &spec(&["0", "all"], "/usr/bin/nvidia-cdi-hook"));
    let ours = spec(&["0", "1", "all"], "/usr/bin/gpuhook");
    let out = dir.path().join("nvidia.com-gpu.json");
    let err = target(&ours, &out, Format::Json, false, false)
        .unwrap_err()
        .to_string();
    for want in ["nvidia.yaml", "--force", "nvidia.com/gpu=0", "drop"] {
        assert!(err.contains(want), "{want}: {err}");
    }
    let t = target(&ours, &out, Format::Json, true, false).unwrap();
    assert_eq!(
        t,
        Target {
            path: nv.clone(),
            format: Format::Yaml,
            replace_foreign: true,
            retire: None,
        }
    );
    // Once taken over, a plain run rewrites that file and retires the default-named one.
    put(&nv, &ours);
    put(&out, &ours);
    let t = target(&ours, &out, Format::Json, false, false).unwrap();
    assert_eq!((t.path, t.replace_foreign), (nv.clone(), false));
    assert_eq!(t.retire, Some(out.clone()));
    // A file the operator named is never redirected: a rival is an error naming both ways out.
    let err = target(&ours, &out, Format::Json, true, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("--output {}", nv.display())), "{err}");
}

#[test]
fn unrelated_files_and_other_dirs() {
    let etc = tempfile::tempdir().unwrap();
    let run = tempfile::tempdir().unwrap();
    let mut other_kind = spec(&["0"], "/x/other-hook");
    other_kind.kind = "example.com/gpu".into();
    put(&run.path().join("example.json"), &other_kind);
    let ours = spec(&["0"], "/usr/bin/gpuhook");
    let out = run.path().join("nvidia.com-gpu.json");
    let t = target(&ours, &out, Format::Json, false, false).unwrap();
    assert_eq!(t.path, out, "another kind is no conflict");
    put(
        &etc.path().join("nvidia.yaml"),
        &spec(&["0"], "/usr/bin/nvidia-cdi-hook"),
    );
    let dirs = [etc.path().to_path_buf(), run.path().to_path_buf()];
    let notes = other_dirs(&ours, &out, &dirs);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&format!("runtimes use {}", out.display())),
        "{}",
        notes[0]
    );
    let notes = other_dirs(
        &ours,
        &etc.path().join("x.json"),
        &[run.path().to_path_buf(), etc.path().to_path_buf()],
    );
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn a_spec_dir_is_recognised_through_links_and_before_it_exists() {
    // `/var/run -> /run` on most hosts: `--output /run/cdi` is the spec dir `/var/run/cdi`.
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    std::fs::create_dir_all(run.join("cdi")).unwrap();
    std::fs::create_dir(root.path().join("var")).unwrap();
    std::os::unix::fs::symlink(&run, root.path().join("var/run")).unwrap();
    let dirs = [root.path().join("etc/cdi"), root.path().join("var/run/cdi")];
    assert!(is_spec_dir(&run.join("cdi"), &dirs));
    assert!(is_spec_dir(&root.path().join("var/run/../run/cdi"), &dirs));
    assert!(!is_spec_dir(&run, &dirs));
    // Not created yet: only its own name matches.
    assert!(is_spec_dir(&root.path().join("etc/cdi"), &dirs));
    assert!(!is_spec_dir(&root.path().join("etc/other"), &dirs));
}
