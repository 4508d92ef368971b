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

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use cdi_support::{build_node, gpuhook_ok};
use gpuhook_e2e::containerd::{example_config, Containerd};
use gpuhook_sim::profile::NodeProfile;

const NVIDIA_MAJOR: u32 = 195;
/// path -> (major, minor)
type Nodes = BTreeMap<String, (u32, u32)>;

/// A simulated node, its CDI spec and gpuhook config, and a containerd using them.
struct Rig {
    profile: NodeProfile,
    root: PathBuf,
    spec_file: PathBuf,
    wrapper: PathBuf,
    gpuhook_log: PathBuf,
    // Dropped first (fields drop in order): containerd dies before the temp dir goes.
    daemon: Containerd,
    tmp: tempfile::TempDir,
}

impl Rig {
    fn new(profile: &str) -> Rig {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("gpuhook-rt-{profile}-"))
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path();
        let root = dir.join("driver");
        let p = build_node(profile, &root);
        let spec_dir = dir.join("cdi");
        let spec_file = spec_dir.join("nvidia.com-gpu.json");
        let cache = dir.join("inventory.json");
        gpuhook_ok(&[
            "cdi",
            "generate",
            "--driver-root",
            root.to_str().unwrap(),
            "--output",
            spec_file.to_str().unwrap(),
            "--inventory-cache",
            cache.to_str().unwrap(),
        ]);
        let runc = gpuhook_e2e::which("runc").expect("runc");
        let gpuhook_log = dir.join("gpuhook.log");
        let config = dir.join("gpuhook.toml");
        std::fs::write(
            &config,
            format!(
                "driver-root = {root:?}\ninventory-cache = {cache:?}\ncdi-spec-dirs = [{spec_dir:?}]\n\
                 log-file = {gpuhook_log:?}\nlog-level = \"debug\"\n\n[runtime]\nruntimes = [{runc:?}]\n"
            ),
        )
        .unwrap();
        let wrapper = gpuhook_e2e::built("gpuhook-runtime");
        let cd_config = dir.join("containerd.toml");
        std::fs::write(&cd_config, example_config(dir, &wrapper)).unwrap();
        let daemon = Containerd::start(
            dir,
            &cd_config,
            &[("GPUHOOK_CONFIG", OsString::from(&config))],
        );
        Rig {
            profile: p,
            root,
            spec_file,
            wrapper,
            gpuhook_log,
            daemon,
            tmp,
        }
    }

    /// `ctr run --rm` through the wrapper on a fresh busybox rootfs (runc leaves the mount points
    /// of file bind mounts in a rootfs dir, so rootfs dirs are never shared); `args` are extra
    /// ctr flags. Returns ctr's output and the rootfs.
    fn run(&self, args: &[String], script: &str) -> (Output, PathBuf) {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = format!("gpuhook-rt-{}-{n}", std::process::id());
        let rootfs = gpuhook_e2e::busybox_rootfs(&self.tmp.path().join(format!("rootfs{n}")), true);
        let mut argv: Vec<OsString> = vec!["run".into(), "--rm".into(), "--runc-binary".into()];
        argv.push(self.wrapper.clone().into());
        argv.extend(args.iter().map(OsString::from));
        argv.extend(["--rootfs".into(), rootfs.clone().into(), id.into()]);
        argv.extend(["/bin/sh".into(), "-c".into(), script.into()]);
        (self.daemon.ctr(&argv), rootfs)
    }

    fn run_ok(&self, args: &[String], script: &str) -> (String, PathBuf) {
        let (out, rootfs) = self.run(args, script);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && stdout.contains("DONE"),
            "ctr run {args:?} failed ({})\nstdout:\n{stdout}\nstderr:\n{}\ngpuhook log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.gpuhook_log).unwrap_or_default()
        );
        (stdout, rootfs)
    }

    /// ctr's stderr of a run that must fail, and whether the container printed STARTED.
    fn run_err(&self, args: &[String]) -> String {
        let (out, _) = self.run(args, "echo STARTED");
        assert!(!out.status.success(), "ctr run {args:?} must fail");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("STARTED"),
            "ctr run {args:?}: the container must not start"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn gpu_node(&self, g: usize) -> (String, (u32, u32)) {
        let minor = self.profile.gpus[g].minor;
        (format!("/dev/nvidia{minor}"), (NVIDIA_MAJOR, minor))
    }

    fn mig_nodes(&self, g: usize, m: usize) -> Nodes {
        let mig = &self.profile.gpus[g].mig_devices[m];
        let caps = self.profile.majors.nvidia_caps;
        let mut out: Nodes = [self.gpu_node(g)].into_iter().collect();
        for cap in [mig.gi_cap_minor, mig.ci_cap_minor] {
            out.insert(format!("/dev/nvidia-caps/nvidia-cap{cap}"), (caps, cap));
        }
        out
    }

    fn every_device_node(&self) -> Nodes {
        let mut out = Nodes::new();
        for (g, gpu) in self.profile.gpus.iter().enumerate() {
            out.extend([self.gpu_node(g)]);
            for m in 0..gpu.mig_devices.len() {
                out.extend(self.mig_nodes(g, m));
            }
        }
        out
    }

    fn control_nodes(&self) -> Nodes {
        let p = &self.profile;
        let mut out: Nodes = [("/dev/nvidiactl".to_string(), (NVIDIA_MAJOR, 255))]
            .into_iter()
            .collect();
        if p.features.nvidia_uvm {
            out.insert("/dev/nvidia-uvm".into(), (p.majors.nvidia_uvm, 0));
            out.insert("/dev/nvidia-uvm-tools".into(), (p.majors.nvidia_uvm, 1));
        }
        out
    }

    fn libs(&self) -> Vec<String> {
        ["libcuda.so", "libnvidia-ml.so"]
            .iter()
            .map(|l| {
                format!(
                    "{}/{l}.{}",
                    self.profile.lib_dir, self.profile.driver_version
                )
            })
            .collect()
    }

    /// Prints `NODE path maj:min`, `OPEN path <error>`, `ABSENT path`, `LIB path ok|missing`.
    fn probe_script(&self) -> String {
        let nodes: BTreeSet<String> = self
            .every_device_node()
            .into_keys()
            .chain(self.control_nodes().into_keys())
            .collect();
        let mut s = String::new();
        for n in nodes {
            s.push_str(&format!(
                "if [ -e {n} ]; then echo \"NODE {n} $(stat -c '%t:%T %F' {n})\"; \
                 echo \"OPEN {n} $(cat {n} 2>&1 </dev/null | head -n1)\"; else echo \"ABSENT {n}\"; fi\n"
            ));
        }
        for l in self.libs() {
            s.push_str(&format!(
                "if [ -f {l} ]; then echo \"LIB {l} ok\"; else echo \"LIB {l} missing\"; fi\n"
            ));
        }
        s.push_str("echo \"NVDEV $(ls /dev | grep -c nvidia)\"\necho DONE\n");
        s
    }

    /// Checks that exactly `want` (plus the control nodes) are in the container, allowed.
    fn check(&self, ctx: &str, want: &Nodes, stdout: &str) {
        let mut want = want.clone();
        want.extend(self.control_nodes());
        for (path, (major, minor)) in &want {
            let stat = lookup(stdout, "NODE", path)
                .unwrap_or_else(|| panic!("{ctx}: {path} missing in the container\n{stdout}"));
            assert_eq!(
                stat,
                format!("{major:x}:{minor:x} character special file"),
                "{ctx}: {path}"
            );
            let open = lookup(stdout, "OPEN", path).unwrap_or_default();
            assert!(
                open.contains("No such device or address"),
                "{ctx}: opening {path} must fail with ENXIO (allowed by the device cgroup), got {open:?}"
            );
        }
        for path in self
            .every_device_node()
            .keys()
            .filter(|p| !want.contains_key(*p))
        {
            assert!(
                lookup(stdout, "ABSENT", path).is_some(),
                "{ctx}: {path} was not requested but is in the container\n{stdout}"
            );
        }
        for lib in self.libs() {
            assert_eq!(
                lookup(stdout, "LIB", &lib).as_deref(),
                Some("ok"),
                "{ctx}: driver library {lib} not mounted\n{stdout}"
            );
        }
    }

    /// The createContainer `setup` hook wrote the container's ld.so.cache (with
    /// `--rootfs` the container's files land in the rootfs dir on the host).
    fn ldcache_lists_libcuda(rootfs: &Path) -> bool {
        let cache = rootfs.join("etc/ld.so.cache");
        if !cache.exists() {
            return false;
        }
        let out = gpuhook_e2e::run_ok(Command::new("ldconfig").arg("-p").arg("-C").arg(&cache));
        out.lines()
            .any(|l| l.trim_start().starts_with("libcuda.so.1 "))
    }

    fn check_request(&self, ctx: &str, args: &[String], want: &Nodes) {
        let (stdout, rootfs) = self.run_ok(args, &self.probe_script());
        eprintln!("{}: {ctx}:\n{stdout}", self.profile.name);
        self.check(&format!("{} {ctx}", self.profile.name), want, &stdout);
        assert!(
            Rig::ldcache_lists_libcuda(&rootfs),
            "{} {ctx}: the container's ld.so.cache lacks libcuda.so.1: the setup hook did not run",
            self.profile.name
        );
    }
}

fn lookup(stdout: &str, kind: &str, path: &str) -> Option<String> {
    let prefix = format!("{kind} {path}");
    stdout.lines().find_map(|l| {
        l.strip_prefix(&prefix)
            .filter(|rest| rest.is_empty() || rest.starts_with(' '))
            .map(|rest| rest.trim_start().to_string())
    })
}

/// How many `/dev` entries named `*nvidia*` the probe saw.
fn nvidia_entries_in_dev(stdout: &str) -> Option<u32> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("NVDEV "))
        .and_then(|n| n.trim().parse().ok())
}

fn env(v: &str) -> Vec<String> {
    vec!["--env".into(), format!("NVIDIA_VISIBLE_DEVICES={v}")]
}

fn annotation(v: &str) -> Vec<String> {
    vec!["--annotation".into(), format!("cdi.k8s.io/test={v}")]
}

fn bind(host: &Path, dst: &str) -> Vec<String> {
    vec![
        "--mount".into(),
        format!(
            "type=bind,src={},dst={dst},options=rbind:rw",
            host.display()
        ),
    ]
}

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
    let one = |g: usize| -> Nodes { [rig.gpu_node(g)].into_iter().collect() };

    // By index, by UUID, by CDI annotation.
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

    // A host node bind-mounted in without being requested is denied by the device cgroup.
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

    // Not a GPU container: untouched.
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

    // Every decision line names the container by the id ctr gave it (not by its hostname).
    let log = std::fs::read_to_string(&rig.gpuhook_log).unwrap();
    let decisions: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("command=\"runtime create\""))
        .collect();
    assert!(!decisions.is_empty(), "{log}");
    let ours = format!("container=\"gpuhook-rt-{}-", std::process::id());
    assert!(decisions.iter().all(|l| l.contains(&ours)), "{log}");
    // The setup hook's work was done by the wrapper beside runc (`early-setup`, the default).
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
