//! The Docker and CRI-O checks on temp roots: not installed (no finding), the hook link to
//! gpuhook or to another binary, daemon.json with and without the runtime, broken files, a CRI-O
//! without our handler.

use std::fs;
use std::path::Path;

use super::super::tests::options;
use super::super::{Options, Status};
use super::check;

fn findings(opts: &Options) -> Vec<(String, Status, String)> {
    let mut out = Vec::new();
    check(opts, &mut out);
    out.into_iter()
        .map(|f| (f.check.to_string(), f.status, f.message))
        .collect()
}

fn exe(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    gpuhook_fs::testing::write_executable(path, "#!/bin/sh\n").unwrap();
}

#[test]
fn engines_that_are_not_installed_get_no_finding() {
    let d = tempfile::tempdir().unwrap();
    assert!(findings(&options(d.path())).is_empty());
}

#[test]
fn docker_hook_link_and_daemon_json() {
    let d = tempfile::tempdir().unwrap();
    let mut o = options(d.path());
    let bin = d.path().join("bin");
    exe(&bin.join("dockerd"));
    // Installed, no hook, no daemon.json.
    let f = findings(&o);
    assert_eq!(f[0].0, "docker-gpus");
    assert_eq!(f[0].1, Status::Warn);
    assert!(f[0].2.contains("could not select device driver"), "{f:?}");
    assert_eq!(f[1].1, Status::Ok, "no runtime needed for --gpus: {f:?}");
    // The hook links to gpuhook: ok. To something else: named.
    exe(&d.path().join("opt/gpuhook"));
    std::os::unix::fs::symlink(
        d.path().join("opt/gpuhook"),
        bin.join("nvidia-container-runtime-hook"),
    )
    .unwrap();
    assert_eq!(findings(&o)[0].1, Status::Ok);
    fs::remove_file(bin.join("nvidia-container-runtime-hook")).unwrap();
    exe(&bin.join("nvidia-container-runtime-hook"));
    let f = findings(&o);
    assert_eq!(f[0].1, Status::Warn);
    assert!(f[0].2.contains("is not gpuhook"), "{f:?}");
    // daemon.json with our runtime and an existing binary: ok; the binary missing: fail.
    exe(&d.path().join("gpuhook-runtime"));
    o.runtime_binary = d.path().join("gpuhook-runtime");
    let json = format!(
        "{{\"runtimes\": {{\"gpuhook\": {{\"path\": \"{}\"}}}}}}",
        o.runtime_binary.display()
    );
    fs::create_dir_all(o.docker_config.parent().unwrap()).unwrap();
    fs::write(&o.docker_config, &json).unwrap();
    assert_eq!(findings(&o)[1].1, Status::Ok, "{:?}", findings(&o));
    fs::remove_file(&o.runtime_binary).unwrap();
    assert_eq!(findings(&o)[1].1, Status::Fail);
    // Another path: a warning; not JSON: a failure naming the file.
    fs::write(
        &o.docker_config,
        "{\"runtimes\": {\"gpuhook\": {\"path\": \"/x\"}}}",
    )
    .unwrap();
    assert_eq!(findings(&o)[1].1, Status::Warn);
    fs::write(&o.docker_config, "{").unwrap();
    let f = findings(&o);
    assert_eq!(f[1].1, Status::Fail);
    assert!(f[1].2.contains("daemon.json"), "{f:?}");
}

#[test]
fn crio_without_our_handler_fails_and_with_it_is_ok() {
    let d = tempfile::tempdir().unwrap();
    let mut o = options(d.path());
    fs::create_dir_all(o.crio_drop_in.parent().unwrap()).unwrap();
    fs::write(
        &o.crio_config,
        "[crio.runtime]\ndefault_runtime = \"runc\"\n",
    )
    .unwrap();
    let f = findings(&o);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].0.as_str(), f[0].1), ("crio", Status::Fail));
    assert!(
        f[0].2.contains("no CRI-O runtime handler `gpuhook`"),
        "{f:?}"
    );
    exe(&d.path().join("gpuhook-runtime"));
    o.runtime_binary = d.path().join("gpuhook-runtime");
    let opts = gpuhook_containerd::engine::EngineOptions {
        config: o.crio_config.clone(),
        drop_in: Some(o.crio_drop_in.clone()),
        binary: o.runtime_binary.clone(),
        ..gpuhook_containerd::engine::EngineOptions::defaults(
            gpuhook_containerd::engine::Engine::Crio,
        )
    };
    gpuhook_containerd::engine::configure_engine(
        gpuhook_containerd::engine::Engine::Crio,
        &opts,
        false,
    )
    .unwrap();
    let f = findings(&o);
    assert_eq!(f[0].1, Status::Ok, "{f:?}");
}
