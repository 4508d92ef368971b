//! Issue #13.6: NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES (privileged only, as
//! libnvidia-container's `select_mig_config_devices`), NVIDIA_IMEX_CHANNELS and the feature gates
//! (NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_NVSWITCH, NVIDIA_GDRCOPY) are honoured or refused in every
//! mode of the wrapper — never silently dropped (they used to vanish in cdi and jit-cdi modes).

use gpuhook_node::MigControlCaps;

use super::*;

/// The fixture's node with MIG control caps 1/2 and IMEX channels (major 234).
fn fixture(mode: RuntimeMode) -> Fixture {
    let f = Fixture::new(mode, true);
    let mut inv = inventory(f.tmp.path());
    inv.mig_caps = Some(MigControlCaps {
        config_minor: 1,
        monitor_minor: 2,
    });
    inv.majors.nvidia_caps_imex_channels = Some(234);
    inv.save_json(&f.config.inventory_cache).unwrap();
    f.write_spec();
    f
}

fn privileged(env: &[&str]) -> Value {
    let mut s = spec_with(env, json!({}));
    s["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
    s
}

/// The extra device nodes of an injection: (path, major, minor).
fn extra_nodes(i: &Injection) -> Vec<(String, i64, i64)> {
    let nodes = match i {
        Injection::CdiWithEdits(_, e) | Injection::Edits(e) => &e.device_nodes,
        Injection::Cdi(_) => return Vec::new(),
    };
    nodes
        .iter()
        .filter(|n| n.path.starts_with("/dev/nvidia-caps"))
        .map(|n| (n.path.clone(), n.major.unwrap(), n.minor.unwrap()))
        .collect()
}

#[test]
fn mig_config_monitor_and_imex_reach_the_container_in_cdi_and_jit_cdi_modes() {
    for mode in [RuntimeMode::Cdi, RuntimeMode::JitCdi] {
        let f = fixture(mode);
        let spec = privileged(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_MIG_MONITOR_DEVICES=all",
            "NVIDIA_IMEX_CHANNELS=3,0",
        ]);
        let got = ask(&f, &spec).unwrap().unwrap();
        if mode == RuntimeMode::Cdi {
            assert!(
                matches!(&got, Injection::CdiWithEdits(n, _) if n == &["nvidia.com/gpu=0"]),
                "{got:?}"
            );
        }
        assert_eq!(
            extra_nodes(&got),
            [
                ("/dev/nvidia-caps/nvidia-cap1".to_string(), 511, 1),
                ("/dev/nvidia-caps/nvidia-cap2".to_string(), 511, 2),
                (
                    "/dev/nvidia-caps-imex-channels/channel3".to_string(),
                    234,
                    3
                ),
                (
                    "/dev/nvidia-caps-imex-channels/channel0".to_string(),
                    234,
                    0
                ),
            ],
            "{mode:?}"
        );
        // `none`: the common edits plus the extras.
        let spec = privileged(&["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_IMEX_CHANNELS=1"]);
        let got = ask(&f, &spec).unwrap().unwrap();
        assert_eq!(
            extra_nodes(&got),
            [(
                "/dev/nvidia-caps-imex-channels/channel1".to_string(),
                234,
                1
            )],
            "{mode:?}"
        );
    }
}

#[test]
fn mig_config_is_refused_for_unprivileged_containers_in_every_mode() {
    for mode in [RuntimeMode::Cdi, RuntimeMode::JitCdi, RuntimeMode::Legacy] {
        let f = fixture(mode);
        let spec = spec_with(
            &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
            json!({}),
        );
        let err = ask(&f, &spec).unwrap_err();
        assert!(
            err.contains("NVIDIA_MIG_CONFIG_DEVICES requires a privileged container"),
            "{mode:?}: {err}"
        );
    }
}

#[test]
fn feature_gates_are_refused_in_every_mode() {
    for mode in [RuntimeMode::Cdi, RuntimeMode::JitCdi, RuntimeMode::Legacy] {
        let f = fixture(mode);
        for var in [
            "NVIDIA_GDS",
            "NVIDIA_MOFED",
            "NVIDIA_NVSWITCH",
            "NVIDIA_GDRCOPY",
        ] {
            let gate = format!("{var}=enabled");
            let spec = spec_with(&["NVIDIA_VISIBLE_DEVICES=0", &gate], json!({}));
            let err = ask(&f, &spec).unwrap_err();
            assert!(
                err.starts_with(&format!("{gate} is not supported by gpuhook")),
                "{mode:?}: {err}"
            );
            // Any other value enables nothing (NVIDIA checks for exactly "enabled").
            let off = format!("{var}=disabled");
            let spec = spec_with(&["NVIDIA_VISIBLE_DEVICES=0", &off], json!({}));
            assert!(ask(&f, &spec).unwrap().is_some(), "{mode:?} {off}");
        }
    }
}

#[test]
fn a_node_without_imex_channels_names_the_variable() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    f.write_spec();
    let spec = spec_with(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=0"],
        json!({}),
    );
    let err = ask(&f, &spec).unwrap_err();
    assert!(
        err.contains("NVIDIA_IMEX_CHANNELS asks for IMEX channels, but this node's driver has no"),
        "{err}"
    );
}

/// Issue #13.3: a name that resolves to nothing is explained with the node's devices, whether or
/// not missing specs are generated (with `generate-missing = false` nothing is generated).
#[test]
fn unresolvable_names_are_explained_with_the_nodes_devices() {
    for generate_missing in [true, false] {
        let f = Fixture::new(RuntimeMode::Cdi, generate_missing);
        let node = f.node();
        let missing = ["nvidia.com/gpu=7".to_string()];
        let specs = node.generate(&missing).unwrap();
        assert_eq!(specs.len(), usize::from(generate_missing));
        assert!(specs
            .iter()
            .all(|s| s.devices.iter().all(|d| d.name != "7")));
        let hint = node.explain(&missing).expect("a hint");
        assert!(
            hint.contains(&format!("0 ({GPU0})")) && hint.contains(&format!("1:0 ({MIG10})")),
            "{hint}"
        );
        // The MIG-enabled GPU as a whole resolves: generated only when allowed.
        let whole = ["nvidia.com/gpu=1".to_string()];
        let specs = node.generate(&whole).unwrap();
        assert_eq!(specs.len(), usize::from(generate_missing));
        assert!(specs
            .iter()
            .all(|s| s.devices.iter().any(|d| d.name == "1")));
        assert!(node.explain(&whole).is_none());
    }
}
