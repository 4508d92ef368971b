use super::*;
use crate::nodes::device_nodes;
use crate::spec::DeviceNode;
use crate::test_support::{caps, inventory};
use gpuhook_node::Capability::*;

fn opts() -> EditOptions {
    EditOptions::new("/usr/local/bin/gpuhook")
}

fn paths(nodes: &[DeviceNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.path.as_str()).collect()
}

#[test]
fn gpu_node_has_numbers_and_host_path() {
    let inv = inventory();
    let nodes = device_nodes(&inv, &[DeviceRef::Gpu { index: 0 }]).unwrap();
    assert_eq!(
        nodes,
        vec![DeviceNode {
            path: "/dev/nvidia0".into(),
            host_path: Some("/run/nvidia/driver/dev/nvidia0".into()),
            device_type: Some("c".into()),
            major: Some(195),
            minor: Some(0),
            permissions: Some("rw".into()),
            ..Default::default()
        }]
    );
    let mut host = inventory();
    host.dev_root = "/".into();
    let nodes = device_nodes(&host, &[DeviceRef::Gpu { index: 0 }]).unwrap();
    assert_eq!(nodes[0].host_path, None, "no hostPath when dev_root is /");
}

#[test]
fn mig_nodes_are_parent_and_caps_deduplicated() {
    let inv = inventory();
    let m0 = DeviceRef::Mig {
        parent_index: 1,
        index: 0,
    };
    let m1 = DeviceRef::Mig {
        parent_index: 1,
        index: 1,
    };
    let nodes = device_nodes(&inv, &[m0]).unwrap();
    assert_eq!(
        paths(&nodes),
        [
            "/dev/nvidia1",
            "/dev/nvidia-caps/nvidia-cap66",
            "/dev/nvidia-caps/nvidia-cap67"
        ]
    );
    assert_eq!((nodes[1].major, nodes[1].minor), (Some(511), Some(66)));
    let both = device_nodes(&inv, &[m0, m1]).unwrap();
    assert_eq!(both.len(), 5, "parent node listed once: {:?}", paths(&both));
}

#[test]
fn unknown_device_and_missing_major_are_errors() {
    let mut inv = inventory();
    let err = device_nodes(&inv, &[DeviceRef::Gpu { index: 7 }]).unwrap_err();
    assert!(matches!(err, CdiError::UnknownDevice { .. }), "{err}");
    let err = device_nodes(
        &inv,
        &[DeviceRef::Mig {
            parent_index: 1,
            index: 5,
        }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("MIG device 1:5"), "{err}");
    inv.majors.nvidia_caps = None;
    let err = device_nodes(
        &inv,
        &[DeviceRef::Mig {
            parent_index: 1,
            index: 0,
        }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("nvidia-caps"), "{err}");
}

#[test]
fn utility_only_gets_utility_files() {
    let inv = inventory();
    let e = edits_for(
        &inv,
        &[DeviceRef::Gpu { index: 0 }],
        &caps(&[Utility]),
        &opts(),
    )
    .unwrap();
    assert_eq!(paths(&e.device_nodes), ["/dev/nvidia0", "/dev/nvidiactl"]);
    let dests: Vec<_> = e.mounts.iter().map(|m| m.container_path.as_str()).collect();
    assert_eq!(
        dests,
        [
            "/lib/firmware/nvidia/570.158.01/gsp_ga10x.bin",
            "/run/nvidia-persistenced/socket",
            "/usr/bin/nvidia-smi",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.158.01",
        ]
    );
    let sock = &e.mounts[1];
    assert_eq!(
        sock.options,
        ["nosuid", "nodev", "noexec", "rbind", "rprivate"]
    );
    assert_eq!(
        e.mounts[2].options,
        ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    );
    assert_eq!(e.env, ["NVIDIA_VISIBLE_DEVICES=void"]);
    // One hook; no compute symlinks for utility alone.
    assert_eq!(e.hooks.len(), 1);
    assert_eq!(
        e.hooks[0].args,
        [
            "gpuhook",
            "hook",
            "setup",
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
            "--disable-device-node-modification"
        ]
    );
}

#[test]
fn compute_gets_uvm_and_symlinks() {
    let inv = inventory();
    let mut o = opts();
    o.ldconfig_path = Some("/sbin/ldconfig.real".into());
    let e = edits_for(&inv, &[], &caps(&[Compute]), &o).unwrap();
    assert_eq!(
        paths(&e.device_nodes),
        ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    );
    assert_eq!(
        (e.device_nodes[2].major, e.device_nodes[2].minor),
        (Some(510), Some(1))
    );
    assert!(e
        .mounts
        .iter()
        .any(|m| m.container_path.ends_with("libcuda.so.570.158.01")));
    assert!(!e
        .mounts
        .iter()
        .any(|m| m.container_path.contains("nvidia-ml")));
    assert_eq!(
        e.hooks[0].args,
        [
            "gpuhook",
            "hook",
            "setup",
            "--link",
            "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
            "--link",
            "libcuda.so.570.158.01::/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "--ldconfig-path",
            "/sbin/ldconfig.real",
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
            "--disable-device-node-modification"
        ]
    );
}

#[test]
fn every_hook_has_explicit_env_and_our_binary() {
    let inv = inventory();
    let all: std::collections::BTreeSet<_> = Capability::ALL.into_iter().collect();
    let e = edits_for(&inv, &[DeviceRef::Gpu { index: 0 }], &all, &opts()).unwrap();
    assert_eq!(
        e.hooks.len(),
        1,
        "one setup hook: one process per container start"
    );
    for h in &e.hooks {
        assert_eq!(h.hook_name, "createContainer");
        assert_eq!(h.path, "/usr/local/bin/gpuhook");
        assert_eq!(h.args[0], "gpuhook");
        assert_eq!(h.env, ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]);
    }
    assert!(paths(&e.device_nodes).contains(&"/dev/nvidia-modeset"));
}

#[test]
fn nothing_selected_is_empty_and_devices_without_caps_get_ctl() {
    let inv = inventory();
    assert!(edits_for(&inv, &[], &caps(&[]), &opts())
        .unwrap()
        .is_empty());
    let e = edits_for(&inv, &[DeviceRef::Gpu { index: 0 }], &caps(&[]), &opts()).unwrap();
    assert_eq!(paths(&e.device_nodes), ["/dev/nvidia0", "/dev/nvidiactl"]);
    assert!(e.mounts.is_empty());
    assert_eq!(e.hooks.len(), 1);
    assert_eq!(
        e.hooks[0].args[2..],
        ["setup", "--disable-device-node-modification"]
    );
}

#[test]
fn bad_options_are_rejected() {
    let inv = inventory();
    let err = edits_for(&inv, &[], &caps(&[Utility]), &EditOptions::new("gpuhook")).unwrap_err();
    assert!(err.to_string().contains("not absolute"), "{err}");
    let mut o = opts();
    o.hook_env.clear();
    assert!(edits_for(&inv, &[], &caps(&[Utility]), &o).is_err());
}

#[test]
fn host_paths_follow_driver_root() {
    let mut inv = inventory();
    inv.driver_root = "/run/nvidia/driver".into();
    let e = common_edits(&inv, &caps(&[Utility]), &opts()).unwrap();
    let smi = e
        .mounts
        .iter()
        .find(|m| m.container_path == "/usr/bin/nvidia-smi")
        .unwrap();
    assert_eq!(smi.host_path, "/run/nvidia/driver/usr/bin/nvidia-smi");
}

/// nvidia-container-toolkit v1.20.0: internal/discover/compat_libs.go (`enable-cuda-compat
/// --host-driver-version=<driver version>`), common-nvml.go (the application-profile hook), and
/// `--disable-hook NAME`/`all` (cmd/nvidia-ctk/cdi/generate/generate.go) leaving that step out.
#[test]
fn nvidia_steps_and_disabled_hooks() {
    let inv = inventory();
    let all = caps(&[Compute, Utility]);
    let mut o = opts();
    o.cuda_compat = true;
    o.application_profile = true;
    let args = |o: &EditOptions| {
        common_edits(&inv, &all, o)
            .unwrap()
            .hooks
            .first()
            .map(|h| h.args.clone())
    };
    let a = args(&o).unwrap();
    let at = a
        .iter()
        .position(|x| x == CUDA_COMPAT_FLAG)
        .expect("compat step");
    assert_eq!(a[at + 1], "570.158.01");
    assert!(a.contains(&APPLICATION_PROFILE_FLAG.to_string()));
    o.disabled_hooks = ["create-symlinks", "enable-cuda-compat"]
        .map(String::from)
        .into();
    let a = args(&o).unwrap();
    assert!(
        !a.iter().any(|x| x == "--link" || x == CUDA_COMPAT_FLAG),
        "{a:?}"
    );
    assert!(a.iter().any(|x| x == "--folder"));
    o.disabled_hooks = ["all".to_string()].into();
    assert_eq!(args(&o), None, "no hook at all");
    assert!(
        !args(&opts())
            .unwrap()
            .contains(&CUDA_COMPAT_FLAG.to_string()),
        "off unless asked"
    );
}

/// gpu-mps-daemon's devices: the share rides on the edits' own setup hook (one process per
/// start), or gets a setup hook of its own when the edits have none.
#[test]
fn an_mps_share_joins_the_setup_hook_or_gets_its_own() {
    let share = SetupMpsShare {
        name: "nvidia.com/gpu-mps=0".into(),
        pipe_dir: "/run/gpuhook/mps/GPU-1/pipe".into(),
    };
    let devs = [DeviceRef::Gpu { index: 0 }];
    let mut e = edits_for(&inventory(), &devs, &caps(&[Utility]), &opts()).unwrap();
    let before = e.hooks[0].args.clone();
    add_mps_share(&mut e, &opts(), share.clone()).unwrap();
    assert_eq!(e.hooks.len(), 1);
    assert_eq!(e.hooks[0].args[..before.len()], before[..]);
    assert_eq!(
        e.hooks[0].args[before.len()..],
        [
            "--mps-share",
            "nvidia.com/gpu-mps=0::/run/gpuhook/mps/GPU-1/pipe"
        ]
    );
    let parsed = SetupHookArgs::from_args(&e.hooks[0].args[3..]).unwrap();
    assert_eq!(parsed.mps_shares, std::slice::from_ref(&share));

    let mut bare = ContainerEdits::default();
    add_mps_share(&mut bare, &opts(), share).unwrap();
    let h = &bare.hooks[0];
    assert_eq!(h.hook_name, "createContainer");
    assert_eq!(h.path, "/usr/local/bin/gpuhook");
    assert_eq!(h.env, opts().hook_env);
    assert_eq!(
        h.args,
        [
            "gpuhook",
            "hook",
            "setup",
            "--mps-share",
            "nvidia.com/gpu-mps=0::/run/gpuhook/mps/GPU-1/pipe"
        ]
    );
}
