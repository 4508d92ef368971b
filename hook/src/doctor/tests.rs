//! Unit tests of the doctor's pieces that need no simulated node (the end-to-end checks are in
//! tests/tests/doctor.rs).

use std::path::PathBuf;

use super::*;

pub(super) fn options(dir: &std::path::Path) -> Options {
    Options {
        driver_root: dir.join("node"),
        nvml_lib: None,
        spec_dirs: vec![dir.join("etc/cdi"), dir.join("run/cdi")],
        cdi_kind: "nvidia.com/gpu".into(),
        inventory_cache: dir.join("inventory.json"),
        containerd_config: dir.join("containerd.toml"),
        containerd_drop_in: dir.join("conf.d/99-gpuhook.toml"),
        runtime_name: "gpuhook".into(),
        runtime_binary: PathBuf::from("/usr/local/bin/gpuhook-runtime"),
        docker_config: dir.join("docker/daemon.json"),
        crio_config: dir.join("crio/crio.conf"),
        crio_drop_in: dir.join("crio/crio.conf.d/99-gpuhook.toml"),
        engine_path: Some(dir.join("bin").into_os_string()),
        device_plugin_dir: dir.join("plugins"),
        mps_root: dir.join("mps"),
        container: None,
        policy: RequestPolicy::default(),
    }
}

#[test]
fn the_report_is_as_bad_as_its_worst_finding_and_prints_each_fix() {
    let mut r = Report {
        findings: vec![Finding::ok("a", "fine")],
    };
    assert_eq!(r.worst(), Status::Ok);
    r.findings.push(Finding::warn("b", "meh", "do x"));
    assert_eq!(r.worst(), Status::Warn);
    r.findings.push(Finding::fail("c", "broken", "do y"));
    assert_eq!(r.worst(), Status::Fail);
    let text = r.to_text();
    assert!(
        text.contains("[fail] c: broken\n       fix: do y\n"),
        "{text}"
    );
    assert!(text.ends_with("1 ok, 1 warn, 1 fail\n"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["findings"][2]["status"], "fail");
    assert!(json["findings"][0].get("fix").is_none());
}

#[test]
fn a_missing_driver_root_fails_without_aborting_the_other_checks() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(&options(dir.path()));
    let driver: Vec<&Finding> = r.of("driver-root").collect();
    assert_eq!(driver.len(), 1);
    assert_eq!(driver[0].status, Status::Fail);
    assert!(driver[0].fix.as_deref().unwrap().contains("--driver-root"));
    // The later checks still ran and say what they found.
    for check in ["cdi-spec", "containerd", "device-plugin", "mps-daemon"] {
        assert!(r.of(check).next().is_some(), "{check}: {r:#?}");
    }
    let ctd: Vec<&Finding> = r.of("containerd").collect();
    assert_eq!(ctd[0].status, Status::Fail);
    assert!(ctd[0].message.contains("does not exist"), "{:?}", ctd[0]);
}

#[test]
fn a_version_3_config_with_the_runtime_but_other_settings_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path());
    std::fs::write(
        &opts.containerd_config,
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpuhook]\n\
         runtime_type = 'io.containerd.runc.v2'\n\
         [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpuhook.options]\n\
         BinaryName = '/opt/gpuhook-runtime'\n",
    )
    .unwrap();
    let mut out = Vec::new();
    containerd::check(&opts, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].status, Status::Warn, "{:?}", out[0]);
    assert!(
        out[0].message.contains("/opt/gpuhook-runtime"),
        "{:?}",
        out[0]
    );
}

#[test]
fn container_ids_that_leave_the_state_root_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for id in ["../etc", "a/b", "", ".."] {
        let mut opts = options(dir.path());
        opts.container = Some(ContainerTarget {
            id: id.into(),
            runc_root: dir.path().to_path_buf(),
        });
        let r = run(&opts);
        let f: Vec<&Finding> = r.of("container").collect();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message.contains("not a container id"),
            "{id}: {:?}",
            f[0]
        );
    }
}

#[test]
fn unreadable_container_state_names_the_file_and_the_problem_once() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("c1");
    std::fs::create_dir_all(&state_dir).unwrap();
    let state = state_dir.join("state.json");
    let shown = state.display().to_string();
    for (content, problem) in [
        ("{not json", "not JSON"),
        (r#"{"config":{"labels":["a=b"]}}"#, "no `bundle=` label"),
    ] {
        std::fs::write(&state, content).unwrap();
        let r = run(&options_for(dir.path(), "c1"));
        let f: Vec<&Finding> = r.of("container").collect();
        assert_eq!(f.len(), 1, "{content}");
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].message.matches(&shown).count(), 1, "{:?}", f[0]);
        assert_eq!(f[0].message.matches(problem).count(), 1, "{:?}", f[0]);
    }
    std::fs::remove_file(&state).unwrap();
    let r = run(&options_for(dir.path(), "c1"));
    let f: Vec<&Finding> = r.of("container").collect();
    assert!(f[0].message.starts_with("cannot read"), "{:?}", f[0]);
    assert_eq!(f[0].message.matches(&shown).count(), 1, "{:?}", f[0]);
}

fn options_for(dir: &std::path::Path, id: &str) -> Options {
    let mut opts = options(dir);
    opts.container = Some(ContainerTarget {
        id: id.into(),
        runc_root: dir.to_path_buf(),
    });
    opts
}

/// gpuhook's plugin names its sockets as NVIDIA's does (`nvidia-<resource>.sock`): the doctor
/// names the resources served, whichever plugin serves them, and without any it says how to
/// deploy gpuhook's plugin.
#[test]
fn device_plugin_sockets_name_the_resources_served() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path());
    std::fs::create_dir_all(&opts.device_plugin_dir).unwrap();
    let missing = plugin_finding(&opts);
    assert_eq!(missing.status, Status::Fail);
    assert!(missing.fix.unwrap().contains("examples/device-plugin"));
    let _a = std::os::unix::net::UnixListener::bind(
        opts.device_plugin_dir.join("nvidia-gpu.shared.sock"),
    )
    .unwrap();
    let _b = std::os::unix::net::UnixListener::bind(
        opts.device_plugin_dir.join("nvidia-mig-1g.10gb.sock"),
    )
    .unwrap();
    std::fs::write(
        opts.device_plugin_dir.join("nvidia-fake.sock"),
        "not a socket",
    )
    .unwrap();
    let served = plugin_finding(&opts);
    assert_eq!(served.status, Status::Ok, "{served:?}");
    assert!(
        served.message.contains("nvidia.com/gpu.shared"),
        "{}",
        served.message
    );
    assert!(
        served.message.contains("nvidia.com/mig-1g.10gb"),
        "{}",
        served.message
    );
    assert!(
        !served.message.contains("nvidia.com/fake"),
        "{}",
        served.message
    );
}

/// The device plugin finding of a full run.
fn plugin_finding(opts: &Options) -> Finding {
    run(opts).of("device-plugin").next().unwrap().clone()
}
