//! The rig of `runtime_containerd.rs`: a simulated node, its CDI spec and gpuhook config, a
//! containerd whose runtime is gpuhook-runtime, and the probe containers run through `ctr`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use gpuhook_e2e::containerd::{example_config, Containerd};
use gpuhook_sim::profile::NodeProfile;

use super::cdi_support::{build_node, gpuhook_ok};

pub const NVIDIA_MAJOR: u32 = 195;
/// path -> (major, minor)
pub type Nodes = BTreeMap<String, (u32, u32)>;

/// A simulated node, its CDI spec and gpuhook config, and a containerd using them.
pub struct Rig {
    pub profile: NodeProfile,
    pub root: PathBuf,
    pub spec_file: PathBuf,
    pub wrapper: PathBuf,
    pub gpuhook_log: PathBuf,
    // Dropped first (fields drop in order): containerd dies before the temp dir goes.
    daemon: Containerd,
    pub tmp: tempfile::TempDir,
}

impl Rig {
    pub fn new(profile: &str) -> Rig {
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
    pub fn run(&self, args: &[String], script: &str) -> (Output, PathBuf) {
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

    pub fn run_ok(&self, args: &[String], script: &str) -> (String, PathBuf) {
        // `ctr run --rm` can lose the tail of a container's stdout on a loaded machine (its copy
        // of the output FIFO races the task's exit; CI once got everything but the last lines).
        // So the script's output also goes to a file in the rootfs, a host directory, read here.
        let wrapped = format!("(\n{script}\n) > /gpuhook-probe.out 2>&1\ncat /gpuhook-probe.out\n");
        let (out, rootfs) = self.run(args, &wrapped);
        let stdout = std::fs::read_to_string(rootfs.join("gpuhook-probe.out"))
            .unwrap_or_else(|_| String::from_utf8_lossy(&out.stdout).into_owned());
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
    pub fn run_err(&self, args: &[String]) -> String {
        let (out, _) = self.run(args, "echo STARTED");
        assert!(!out.status.success(), "ctr run {args:?} must fail");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("STARTED"),
            "ctr run {args:?}: the container must not start"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn gpu_node(&self, g: usize) -> (String, (u32, u32)) {
        let minor = self.profile.gpus[g].minor;
        (format!("/dev/nvidia{minor}"), (NVIDIA_MAJOR, minor))
    }

    pub fn mig_nodes(&self, g: usize, m: usize) -> Nodes {
        let mig = &self.profile.gpus[g].mig_devices[m];
        let caps = self.profile.majors.nvidia_caps;
        let mut out: Nodes = [self.gpu_node(g)].into_iter().collect();
        for cap in [mig.gi_cap_minor, mig.ci_cap_minor] {
            out.insert(format!("/dev/nvidia-caps/nvidia-cap{cap}"), (caps, cap));
        }
        out
    }

    pub fn every_device_node(&self) -> Nodes {
        let mut out = Nodes::new();
        for (g, gpu) in self.profile.gpus.iter().enumerate() {
            out.extend([self.gpu_node(g)]);
            for m in 0..gpu.mig_devices.len() {
                out.extend(self.mig_nodes(g, m));
            }
        }
        out
    }

    pub fn control_nodes(&self) -> Nodes {
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

    pub fn libs(&self) -> Vec<String> {
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
    pub fn probe_script(&self) -> String {
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
    pub fn check(&self, ctx: &str, want: &Nodes, stdout: &str) {
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
    pub fn ldcache_lists_libcuda(rootfs: &Path) -> bool {
        let cache = rootfs.join("etc/ld.so.cache");
        if !cache.exists() {
            return false;
        }
        let out = gpuhook_e2e::run_ok(Command::new("ldconfig").arg("-p").arg("-C").arg(&cache));
        out.lines()
            .any(|l| l.trim_start().starts_with("libcuda.so.1 "))
    }

    pub fn check_request(&self, ctx: &str, args: &[String], want: &Nodes) {
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

pub fn lookup(stdout: &str, kind: &str, path: &str) -> Option<String> {
    let prefix = format!("{kind} {path}");
    stdout.lines().find_map(|l| {
        l.strip_prefix(&prefix)
            .filter(|rest| rest.is_empty() || rest.starts_with(' '))
            .map(|rest| rest.trim_start().to_string())
    })
}

/// How many `/dev` entries named `*nvidia*` the probe saw.
pub fn nvidia_entries_in_dev(stdout: &str) -> Option<u32> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("NVDEV "))
        .and_then(|n| n.trim().parse().ok())
}

pub fn env(v: &str) -> Vec<String> {
    vec!["--env".into(), format!("NVIDIA_VISIBLE_DEVICES={v}")]
}

pub fn annotation(v: &str) -> Vec<String> {
    vec!["--annotation".into(), format!("cdi.k8s.io/test={v}")]
}

pub fn bind(host: &Path, dst: &str) -> Vec<String> {
    vec![
        "--mount".into(),
        format!(
            "type=bind,src={},dst={dst},options=rbind:rw",
            host.display()
        ),
    ]
}
