use super::*;
use crate::spec::{ContainerEdits, Device, Hook};
use std::os::unix::fs::MetadataExt;

fn spec(env: &str) -> Spec {
    Spec {
        cdi_version: "0.3.0".into(),
        kind: "nvidia.com/gpu".into(),
        devices: vec![Device {
            name: "gpu0".into(),
            container_edits: ContainerEdits {
                env: vec![env.into()],
                ..Default::default()
            },
            ..Default::default()
        }],
        container_edits: ContainerEdits {
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: "/usr/local/bin/gpuhook".into(),
                args: vec!["gpuhook".into(), "hook".into()],
                env: vec!["PATH=/bin".into()],
                timeout: None,
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

#[test]
fn writes_then_unchanged_then_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join("cdi")
        .join(default_file_name("nvidia.com/gpu", Format::Json));
    assert!(path.ends_with("nvidia.com-gpu.json"));
    assert_eq!(
        write_spec(&spec("A=1"), &path, Format::Json).unwrap(),
        WriteOutcome::Written
    );
    let m1 = fs::metadata(&path).unwrap();
    assert_eq!(m1.mode() & 0o7777, 0o644);
    assert_eq!(
        Spec::from_slice(&fs::read(&path).unwrap(), None).unwrap(),
        spec("A=1")
    );
    assert_eq!(
        write_spec(&spec("A=1"), &path, Format::Json).unwrap(),
        WriteOutcome::Unchanged
    );
    let m2 = fs::metadata(&path).unwrap();
    assert_eq!(
        (m1.ino(), m1.mtime(), m1.mtime_nsec()),
        (m2.ino(), m2.mtime(), m2.mtime_nsec())
    );
    assert_eq!(
        write_spec(&spec("A=2"), &path, Format::Json).unwrap(),
        WriteOutcome::Written
    );
    assert_ne!(
        fs::metadata(&path).unwrap().ino(),
        m1.ino(),
        "replaced by rename"
    );
    assert!(leftovers(path.parent().unwrap()).is_empty());
}

#[test]
fn yaml_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvidia.com-gpu.yaml");
    write_spec(&spec("A=1"), &path, Format::Yaml).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("cdiVersion:"), "{text}");
}

#[test]
fn refuses_files_that_are_not_ours() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.json");
    let mut other_kind = spec("A=1");
    other_kind.kind = "vendor.com/fpga".into();
    let mut toolkit = spec("A=1");
    toolkit.container_edits.hooks[0].path = "/usr/bin/nvidia-cdi-hook".into();
    toolkit.container_edits.hooks[0].args[0] = "nvidia-cdi-hook".into();
    let corrupt = b"{ not json".to_vec();
    for existing in [
        other_kind.to_bytes(Format::Json).unwrap(),
        toolkit.to_bytes(Format::Json).unwrap(),
        corrupt,
    ] {
        fs::write(&path, &existing).unwrap();
        let err = write_spec(&spec("A=2"), &path, Format::Json).unwrap_err();
        assert!(matches!(err, CdiError::NotOurs { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("remove it or choose another --output"),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), existing, "left untouched");
    }
    // Ours: same kind, gpuhook hooks (or none).
    let mut no_hooks = spec("A=0");
    no_hooks.container_edits.hooks.clear();
    fs::write(&path, no_hooks.to_bytes(Format::Json).unwrap()).unwrap();
    assert_eq!(
        write_spec(&spec("A=2"), &path, Format::Json).unwrap(),
        WriteOutcome::Written
    );
    // A directory in the way.
    let sub = dir.path().join("d.json");
    fs::create_dir(&sub).unwrap();
    assert!(matches!(
        write_spec(&spec("A=2"), &sub, Format::Json),
        Err(CdiError::NotOurs { .. })
    ));
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn unwritable_dir_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    fs::write(&file, b"x").unwrap();
    let err = write_spec(&spec("A=1"), &file.join("out.json"), Format::Json).unwrap_err();
    assert!(
        matches!(err, CdiError::OutputDirNotWritable { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[test]
fn invalid_spec_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.json");
    let mut s = spec("A=1");
    s.devices[0].name = "0".into(); // needs 0.5.0, spec says 0.3.0
    let err = write_spec(&s, &path, Format::Json).unwrap_err();
    assert!(matches!(err, CdiError::Invalid { .. }), "{err}");
    assert!(!path.exists());
}

#[test]
fn a_symlink_at_the_output_is_refused_and_its_target_untouched() {
    // The rename-failure path (temp file removed) is tested in gpuhook-fs, which writes specs.
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"x").unwrap();
    let link = dir.path().join("nvidia.com-gpu.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for replacing in [false, true] {
        let err = if replacing {
            write_spec_replacing(&spec("A=1"), &link, Format::Json)
        } else {
            write_spec(&spec("A=1"), &link, Format::Json)
        }
        .unwrap_err();
        assert!(
            err.to_string().contains("it is not a regular file"),
            "{err}"
        );
    }
    assert_eq!(fs::read(&victim).unwrap(), b"x");
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(leftovers(dir.path()).is_empty());
}
