//! gpuhook-runtime under a real containerd 1.6 (runc shim), for simulated nodes.
//!
//! Each test starts a private containerd on the shipped example config (paths moved to a temp
//! dir) with `GPUHOOK_CONFIG` in *containerd's* environment (the shim passes it to the runtime
//! binary; `ctr run --env` would only reach the container). The gpuhook config points the wrapper
//! at a CDI spec `gpuhook cdi generate` wrote for the node into a private spec dir. Containers are
//! run with `ctr run --rm --runc-binary <gpuhook-runtime> --rootfs <busybox>` and look at
//! themselves: the requested device nodes exist with the profile's major:minor and open with
//! ENXIO (the device cgroup allows them; no driver is behind them), the others are absent, a
//! host node bind-mounted in without being requested opens with EPERM (the cgroup denies it),
//! the driver libraries are mounted, and the spec's `setup` hook's work was done (by the wrapper,
//! beside runc: `early-setup`). A container that
//! asks for nothing is untouched, and an unknown device fails the start with the CDI wording.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

#[path = "runtime_containerd/rig.rs"]
mod rig;

use gpuhook_sim::profile::NodeProfile;
use rig::{annotation, bind, env, lookup, nvidia_entries_in_dev, Nodes, Rig};

#[test]
fn dgx_h100_through_containerd() {
    if !gpuhook_e2e::e2e_ready(
        "runtime_containerd",
        &["containerd", "ctr", "runc", "ldconfig"],
    ) {
        return;
    }
    let rig = Rig::new("dgx-h100");
    let p = rig.profile.clone();
    assert!(p.gpus.len() >= 8 && p.gpus.iter().all(|g| !g.mig_mode));
    // Positions are NVML indexes here (minors are not: device 2 is /dev/nvidia0).
    assert!(p
        .gpus
        .iter()
        .enumerate()
        .all(|(g, gpu)| gpu.index as usize == g));
    every_request_form_gets_its_nodes(&rig, &p);
    an_unrequested_node_is_denied(&rig);
    non_gpu_and_bad_requests(&rig);
    decisions_name_the_container(&rig);
}

/// By index, by UUID, by CDI annotation, by PCI bus id, annotation over env, `all`, `none`.
fn every_request_form_gets_its_nodes(rig: &Rig, p: &NodeProfile) {
    let one = |g: usize| -> Nodes { [rig.gpu_node(g)].into_iter().collect() };
    let idx = |g: usize| p.gpus[g].index.to_string();
    rig.check_request("NVIDIA_VISIBLE_DEVICES=2", &env(&idx(2)), &one(2));
    rig.check_request(
        &format!("NVIDIA_VISIBLE_DEVICES={}", p.gpus[5].uuid),
        &env(&p.gpus[5].uuid),
        &one(5),
    );
    rig.check_request(
        "annotation nvidia.com/gpu=3",
        &annotation("nvidia.com/gpu=3"),
        &one(3),
    );
    // A PCI bus id: no device of that name in the spec file; generated in memory (an alias).
    let pci = p.gpus[4].pci_bus_id.clone();
    rig.check_request(
        &format!("NVIDIA_VISIBLE_DEVICES={pci}"),
        &env(&pci),
        &one(4),
    );
    // The annotation wins over the env var (as in NVIDIA's toolkit).
    let mut both = annotation("nvidia.com/gpu=1");
    both.extend(env("all"));
    rig.check_request("annotation 1 + env all", &both, &one(1));
    // Everything.
    let all: Nodes = (0..p.gpus.len()).map(|g| rig.gpu_node(g)).collect();
    rig.check_request("NVIDIA_VISIBLE_DEVICES=all", &env("all"), &all);
    // `none`: driver and control nodes, no GPU.
    rig.check_request("NVIDIA_VISIBLE_DEVICES=none", &env("none"), &Nodes::new());
}

/// A host node bind-mounted in without being requested is denied by the device cgroup.
fn an_unrequested_node_is_denied(rig: &Rig) {
    let mut args = env("0");
    let (path1, _) = rig.gpu_node(1);
    args.extend(bind(&rig.root.join(path1.trim_start_matches('/')), &path1));
    let (stdout, _) = rig.run_ok(&args, &rig.probe_script());
    let open1 = lookup(&stdout, "OPEN", &path1).unwrap_or_default();
    assert!(
        open1.contains("Operation not permitted"),
        "{path1} was bind-mounted but not injected: the device cgroup must deny it (EPERM), got {open1:?}\n{stdout}"
    );
    let (path0, _) = rig.gpu_node(0);
    let open0 = lookup(&stdout, "OPEN", &path0).unwrap_or_default();
    assert!(
        open0.contains("No such device or address"),
        "{open0:?}\n{stdout}"
    );
}

/// Not a GPU container: untouched (no node, no library, no ld.so.cache entry; `void` alike).
/// An unknown device or an unsatisfiable requirement fails the start with our message.
fn non_gpu_and_bad_requests(rig: &Rig) {
    let (stdout, rootfs) = rig.run_ok(&[], &rig.probe_script());
    assert!(nvidia_entries_in_dev(&stdout) == Some(0), "{stdout}");
    for lib in rig.libs() {
        assert_eq!(
            lookup(&stdout, "LIB", &lib).as_deref(),
            Some("missing"),
            "{stdout}"
        );
    }
    assert!(!Rig::ldcache_lists_libcuda(&rootfs));
    let (stdout, _) = rig.run_ok(&env("void"), &rig.probe_script());
    assert!(nvidia_entries_in_dev(&stdout) == Some(0), "{stdout}");

    // An unknown device fails the start with the CDI wording, shown by ctr.
    let stderr = rig.run_err(&env("99"));
    assert!(
        stderr.contains("unresolvable CDI devices nvidia.com/gpu=99"),
        "ctr's error must carry the wrapper's message: {stderr}"
    );
    // An unsatisfiable requirement fails the start too, naming the constraint.
    let mut args = env("0");
    args.extend(["--env".into(), "NVIDIA_REQUIRE_CUDA=cuda>=99.0".into()]);
    let stderr = rig.run_err(&args);
    assert!(stderr.contains("cuda>=99.0"), "{stderr}");
}

/// Every decision line names the container by the id ctr gave it (not by its hostname), and the
/// setup hook's work was done by the wrapper beside runc (`early-setup`, the default).
fn decisions_name_the_container(rig: &Rig) {
    let log = std::fs::read_to_string(&rig.gpuhook_log).unwrap();
    let decisions: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("command=\"runtime create\""))
        .collect();
    assert!(!decisions.is_empty(), "{log}");
    let ours = format!("container=\"gpuhook-rt-{}-", std::process::id());
    assert!(decisions.iter().all(|l| l.contains(&ours)), "{log}");
    assert!(log.contains("hook setup done by the wrapper"), "{log}");
}

#[test]
fn a100_mig_through_containerd_with_and_without_spec_file() {
    if !gpuhook_e2e::e2e_ready(
        "runtime_containerd",
        &["containerd", "ctr", "runc", "ldconfig"],
    ) {
        return;
    }
    let rig = Rig::new("a100-mig-mixed");
    let p = rig.profile.clone();
    assert!(p.gpus[0].mig_mode && p.gpus[1].mig_mode);
    let last = p.gpus[1].mig_devices.len() - 1;
    rig.check_request(
        "NVIDIA_VISIBLE_DEVICES=0:1",
        &env("0:1"),
        &rig.mig_nodes(0, 1),
    );
    let mig_uuid = p.gpus[1].mig_devices[last].uuid.clone();
    rig.check_request(
        &format!("annotation nvidia.com/gpu={mig_uuid}"),
        &annotation(&format!("nvidia.com/gpu={mig_uuid}")),
        &rig.mig_nodes(1, last),
    );
    // Two MIG devices of two GPUs.
    let mut want = rig.mig_nodes(0, 0);
    want.extend(rig.mig_nodes(1, 0));
    rig.check_request("NVIDIA_VISIBLE_DEVICES=0:0,1:0", &env("0:0,1:0"), &want);
    // Issue #13.3: a MIG-enabled GPU as a whole, by index or UUID (NVIDIA's device plugin with
    // MIG strategy `none` hands out such UUIDs), is its /dev/nvidia<minor> without MIG caps, as
    // libnvidia-container's `select_gpu_device` (src/cli/common.c) selects it. The spec file
    // keeps NVIDIA's device set (no whole-GPU device for it): generated in memory.
    let whole0: Nodes = [rig.gpu_node(0)].into_iter().collect();
    rig.check_request("MIG-enabled GPU 0 by index", &env("0"), &whole0);
    let uuid1 = p.gpus[1].uuid.clone();
    let whole1: Nodes = [rig.gpu_node(1)].into_iter().collect();
    rig.check_request("MIG-enabled GPU 1 by UUID", &env(&uuid1), &whole1);
    // An id that resolves to nothing: the error lists what exists.
    let stderr = rig.run_err(&env("7"));
    assert!(
        stderr.contains("unresolvable CDI devices nvidia.com/gpu=7")
            && stderr.contains(&format!("1 ({uuid1}, MIG enabled)")),
        "{stderr}"
    );

    // No spec file (first boot, before `gpuhook cdi generate` ran): the wrapper generates the
    // spec in memory from the inventory, so the same request still works.
    let saved = rig.tmp.path().join("saved-spec.json");
    std::fs::rename(&rig.spec_file, &saved).unwrap();
    rig.check_request("0:1 without a spec file", &env("0:1"), &rig.mig_nodes(0, 1));
    // GPU 1 is MIG-enabled: its PCI bus id is that GPU, spec file or not.
    let pci = p.gpus[1].pci_bus_id.clone();
    rig.check_request("MIG-enabled GPU 1 by PCI bus id", &env(&pci), &whole1);
    std::fs::rename(&saved, &rig.spec_file).unwrap();
}

/// Issue #14.5: under the CRI plugin, a `cdi.k8s.io/*` *pod* annotation (pod_annotations copies
/// it into both the pod sandbox's and the container's spec: containerd 1.6/1.7
/// `pkg/cri/server/container_create_linux.go` `containerSpec` and `sandbox_run_linux.go`
/// `sandboxContainerSpec`) is not a device grant: ignored with a log line. A container annotation
/// (a device plugin's, through kubelet; not in the sandbox's spec) is honoured. `ctr` sets the
/// CRI annotations by hand here, and the pod sandbox's bundle is written where containerd keeps
/// it (a sibling of the container's bundle).
#[test]
fn pod_annotations_are_not_a_grant_through_containerd() {
    if !gpuhook_e2e::e2e_ready(
        "runtime_containerd",
        &["containerd", "ctr", "runc", "ldconfig"],
    ) {
        return;
    }
    let rig = Rig::new("dgx-h100");
    let sandbox_id = format!("feedc0de{}", std::process::id());
    let sandbox = rig
        .tmp
        .path()
        .join("state/io.containerd.runtime.v2.task/default")
        .join(&sandbox_id);
    std::fs::create_dir_all(&sandbox).unwrap();
    let pod = ("cdi.k8s.io/pod", "nvidia.com/gpu=all");
    std::fs::write(
        sandbox.join("config.json"),
        format!(
            r#"{{"annotations": {{"{}": "{}", "io.kubernetes.cri.container-type": "sandbox"}}}}"#,
            pod.0, pod.1
        ),
    )
    .unwrap();
    let cri = |extra: &[(&str, &str)]| -> Vec<String> {
        let mut args = Vec::new();
        for (k, v) in [
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-id", sandbox_id.as_str()),
        ]
        .iter()
        .chain(extra)
        {
            args.extend(["--annotation".to_string(), format!("{k}={v}")]);
        }
        args
    };
    // The pod annotation alone: no GPU at all.
    let (stdout, _) = rig.run_ok(&cri(&[pod]), &rig.probe_script());
    let result = std::panic::catch_unwind(|| {
        assert!(nvidia_entries_in_dev(&stdout) == Some(0), "{stdout}");
        let log = std::fs::read_to_string(&rig.gpuhook_log).unwrap();
        assert!(
            log.contains("a pod annotation is not a device grant")
                && log.contains("nvidia.com/gpu=all"),
            "{log}"
        );
        // With the device plugin's container annotation: exactly its GPU.
        let one: Nodes = [rig.gpu_node(3)].into_iter().collect();
        rig.check_request(
            "pod annotation all + container annotation 3",
            &cri(&[pod, ("cdi.k8s.io/dp", "nvidia.com/gpu=3")]),
            &one,
        );
    });
    std::fs::remove_dir_all(&sandbox).unwrap();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
