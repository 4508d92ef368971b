//! `configure --drop-in`: the version-2 copy of the CRI section, the version-3 tables of our
//! own, and the refusals (a version-1 main file, a drop-in that is not ours).

use std::fs;
use std::path::Path;

use super::super::tests::{
    assert_gpuhook, assert_gpuhook_hiding, item, opts, read_doc, runtime, Dir,
};
use super::super::*;

#[test]
fn drop_in_v2_carries_the_whole_cri_section() {
    let d = Dir::new();
    let text = r#"version = 2
# main comment
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
[plugins."io.containerd.internal.v1.opt"]
  path = "/opt/containerd"
"#;
    let cfg = d.write("config.toml", text);
    let drop_in = d.path("conf.d/99-gpuhook.toml");
    let mut o = opts(&cfg);
    o.drop_in = Some(drop_in.clone());
    o.set_as_default = true;
    o.privileged_host_devices = true;
    let out = configure(&o, false).unwrap();
    let ConfigureOutcome::Changed { files, .. } = &out else {
        panic!()
    };
    assert_eq!(files[0].path, drop_in, "drop-in must be written first");
    let main_text = assert_main_only_imports(&cfg, &drop_in, text);
    let drop_text = assert_v2_drop_in(&drop_in);

    assert_eq!(configure(&o, false).unwrap().exit_code(), EXIT_UNCHANGED);
    assert_eq!(fs::read_to_string(&drop_in).unwrap(), drop_text);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), main_text);

    // Editing the main file's CRI section and re-running refreshes the copy.
    fs::write(&cfg, main_text.replace("pause:3.9", "pause:3.10")).unwrap();
    assert_eq!(configure(&o, false).unwrap().exit_code(), EXIT_CHANGED);
    let drop = read_doc(&drop_in);
    assert_eq!(
        drop["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"].as_str(),
        Some("registry.k8s.io/pause:3.10")
    );
}

/// The main file keeps every line of `text`, gains only the import of `drop_in`, and holds no
/// gpuhook runtime. Returns its text.
fn assert_main_only_imports(cfg: &Path, drop_in: &Path, text: &str) -> String {
    let main = read_doc(cfg);
    let imports: Vec<&str> = main["imports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(imports, [drop_in.to_str().unwrap()]);
    // The main file's runtimes are untouched; only the import was added.
    assert!(item(
        &main,
        &[
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
            "gpuhook"
        ]
    )
    .is_none());
    let main_text = fs::read_to_string(cfg).unwrap();
    for line in text.lines() {
        assert!(main_text.contains(line), "lost {line:?}");
    }
    main_text
}

/// A version-2 drop-in: ours, a copy of the main CRI section (default runtime set) with the
/// gpuhook runtime, and no other plugin. Returns its text.
fn assert_v2_drop_in(drop_in: &Path) -> String {
    let drop_text = fs::read_to_string(drop_in).unwrap();
    assert!(drop_text.starts_with(DROP_IN_MARKER));
    let drop = read_doc(drop_in);
    assert_eq!(drop["version"].as_integer(), Some(2));
    let cri = &drop["plugins"]["io.containerd.grpc.v1.cri"];
    assert_eq!(
        cri["sandbox_image"].as_str(),
        Some("registry.k8s.io/pause:3.9")
    );
    assert_eq!(
        cri["containerd"]["default_runtime_name"].as_str(),
        Some("gpuhook")
    );
    assert_gpuhook_hiding(
        runtime(&drop, "io.containerd.grpc.v1.cri", "gpuhook"),
        DEFAULT_BINARY,
        Some(true),
        false,
    );
    assert!(runtime(&drop, "io.containerd.grpc.v1.cri", "runc").is_table_like());
    // Other plugins stay in the main file only.
    assert!(item(&drop, &["plugins", "io.containerd.internal.v1.opt"]).is_none());
    drop_text
}

#[test]
fn drop_in_v3_holds_only_our_tables_and_globs_count_as_imported() {
    let d = Dir::new();
    let text = "version = 3\nimports = ['conf.d/*.toml']\n\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'overlayfs'\n";
    let cfg = d.write("config.toml", text);
    let drop_in = d.path("conf.d/99-gpuhook.toml");
    let mut o = opts(&cfg);
    o.drop_in = Some(drop_in.clone());
    let out = configure(&o, false).unwrap();
    let ConfigureOutcome::Changed { files, .. } = &out else {
        panic!()
    };
    // The relative glob already covers the drop-in: the main file is not touched.
    assert_eq!(files.len(), 1);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), text);
    let drop = read_doc(&drop_in);
    assert_eq!(drop["version"].as_integer(), Some(3));
    let cri = drop["plugins"]["io.containerd.cri.v1.runtime"]
        .as_table()
        .unwrap();
    assert_gpuhook(
        &cri["containerd"]["runtimes"]["gpuhook"],
        DEFAULT_BINARY,
        None,
    );
    assert!(item(&drop, &["plugins", "io.containerd.cri.v1.images"]).is_none());
    assert_eq!(configure(&o, false).unwrap().exit_code(), EXIT_UNCHANGED);
}

#[test]
fn drop_in_refusals() {
    let d = Dir::new();
    let v1 = d.write("v1.toml", "[plugins.cri]\n");
    let mut o = opts(&v1);
    o.drop_in = Some(d.path("conf.d/99-gpuhook.toml"));
    let err = configure(&o, false).unwrap_err();
    assert!(matches!(err, ConfigureError::DropInNeedsV2 { .. }), "{err}");

    let cfg = d.write("config.toml", "version = 2\n");
    let foreign = d.write("conf.d/99-gpuhook.toml", "# someone else's\nversion = 2\n");
    let mut o = opts(&cfg);
    o.drop_in = Some(foreign.clone());
    let err = configure(&o, false).unwrap_err();
    assert!(matches!(err, ConfigureError::NotOurs { .. }), "{err}");
    assert_eq!(fs::read_to_string(&cfg).unwrap(), "version = 2\n");
    assert_eq!(
        fs::read_to_string(&foreign).unwrap(),
        "# someone else's\nversion = 2\n"
    );
}
