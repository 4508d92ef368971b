//! Shared pieces of the prestart end-to-end tests: a simulated node with its inventory cache and
//! hook config, busybox bundles run by real runc (ids unique, `runc delete -f` on drop), and a
//! "sleeper" (a process in its own mount namespace and device cgroup) for invoking
//! `gpuhook prestart` directly with a crafted state when that is more precise than runc.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use gpuhook_node::{DiscoverOptions, Inventory};
use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{materialise, MaterialiseOptions};
use serde_json::{json, Value};

/// A materialised node plus the hook config that points at it.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub inventory: Inventory,
    pub cache: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    pub profile: NodeProfile,
}

/// Builds `profile` in a temp dir, writes its inventory cache (through `gpuhook cdi generate
/// --inventory-cache` when that flag exists, else discovery in-process) and a hook config.
pub fn node(profile: &str, extra_config: &str) -> Node {
    let profile = NodeProfile::builtin(profile).expect("builtin profile");
    let dir = tempfile::Builder::new()
        .prefix("gpuhook-prestart-")
        .tempdir()
        .unwrap();
    let root = dir.path().join("node");
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(&profile, &root, &opts)
        .unwrap_or_else(|e| panic!("materialise {}: {e}", profile.name));
    let cache = dir.path().join("inv.json");
    write_cache(&root, dir.path(), &cache);
    let inventory = Inventory::load_json(&cache).expect("inventory cache");
    let log = dir.path().join("hook.log");
    let config = dir.path().join("config.toml");
    write_config(&config, &root, &cache, &log, extra_config);
    Node {
        dir,
        root,
        inventory,
        cache,
        config,
        log,
        profile,
    }
}

fn write_cache(root: &Path, out: &Path, cache: &Path) {
    let gpuhook = gpuhook_e2e::built("gpuhook");
    let help = Command::new(&gpuhook)
        .args(["cdi", "generate", "--help"])
        .output()
        .expect("gpuhook cdi generate --help");
    if String::from_utf8_lossy(&help.stdout).contains("--inventory-cache") {
        gpuhook_e2e::run_ok(
            Command::new(&gpuhook)
                .args(["cdi", "generate", "--driver-root"])
                .arg(root)
                .arg("--output")
                .arg(out.join("spec.json"))
                .arg("--inventory-cache")
                .arg(cache),
        );
    } else {
        let d = gpuhook_node::discover(&DiscoverOptions::for_root(root)).expect("discover");
        d.inventory.save_json(cache).expect("save inventory");
    }
}

/// Writes a hook config for a node (JSON log lines, debug level).
pub fn write_config(path: &Path, root: &Path, cache: &Path, log: &Path, extra: &str) {
    let text = format!(
        "driver-root = {root:?}\ninventory-cache = {cache:?}\nlog-file = {log:?}\nlog-format = \"json\"\n\
         log-level = \"debug\"\n{extra}\n"
    );
    std::fs::write(path, text).unwrap();
}

impl Node {
    /// The hook's log, one JSON value per line.
    pub fn log_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Decision lines (`target == gpuhook::decision`) for one container.
    pub fn decisions(&self, container: &str) -> Vec<Value> {
        self.log_lines()
            .into_iter()
            .filter(|l| l["target"] == "gpuhook::decision" && l["fields"]["container"] == container)
            .collect()
    }

    /// `hooks.prestart` entry running gpuhook with this node's config.
    pub fn hook(&self) -> Value {
        json!({
            "path": gpuhook_e2e::built("gpuhook"),
            "args": ["gpuhook", "prestart", "--config", self.config],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
        })
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A container id unique across test processes and runs.
pub fn unique_id(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "gpuhook-{tag}-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A runc bundle: busybox rootfs + `runc spec` config, editable as JSON before [`Bundle::run`].
pub struct Bundle {
    pub dir: tempfile::TempDir,
    pub rootfs: PathBuf,
    pub config: Value,
}

impl Bundle {
    /// A busybox bundle running `sh -c script` (Debian-like rootfs when `debian`).
    pub fn new(script: &str, debian: bool) -> Bundle {
        let dir = tempfile::Builder::new()
            .prefix("gpuhook-bundle-")
            .tempdir()
            .unwrap();
        let rootfs = gpuhook_e2e::busybox_rootfs(&dir.path().join("rootfs"), debian);
        gpuhook_e2e::run_ok(Command::new("runc").arg("spec").current_dir(dir.path()));
        let text = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
        let mut config: Value = serde_json::from_str(&text).unwrap();
        config["process"]["terminal"] = json!(false);
        config["process"]["args"] = json!(["sh", "-c", script]);
        config["root"] = json!({"path": "rootfs", "readonly": false});
        Bundle {
            dir,
            rootfs,
            config,
        }
    }

    pub fn env(&mut self, entry: &str) -> &mut Self {
        self.config["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!(entry));
        self
    }

    /// Runs the container's process as `uid:gid` (a non-root container).
    pub fn user(&mut self, uid: u32, gid: u32) -> &mut Self {
        self.config["process"]["user"] = json!({"uid": uid, "gid": gid});
        self
    }

    pub fn hook(&mut self, hook: Value) -> &mut Self {
        self.config["hooks"] = json!({ "prestart": [hook] });
        self
    }

    /// Adds a read-only bind mount of a host path (e.g. a host device node not injected).
    pub fn bind(&mut self, host: &Path, dest: &str) -> &mut Self {
        self.config["mounts"].as_array_mut().unwrap().push(json!({
            "destination": dest, "type": "bind", "source": host, "options": ["rbind", "ro"]
        }));
        self
    }

    pub fn write(&self) {
        std::fs::write(
            self.dir.path().join("config.json"),
            serde_json::to_vec_pretty(&self.config).unwrap(),
        )
        .unwrap();
    }

    /// `runc run` with a unique id; the container is deleted afterwards.
    pub fn run(&self, tag: &str) -> (String, Output) {
        self.write();
        let id = unique_id(tag);
        let _guard = Container(id.clone());
        let out = Command::new("runc")
            .arg("run")
            .arg("--bundle")
            .arg(self.dir.path())
            .arg(&id)
            .stdin(Stdio::null())
            .output()
            .expect("spawn runc");
        (id, out)
    }
}

/// `runc delete -f ID` on drop.
pub struct Container(pub String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["delete", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Host mount table of this process' namespace.
pub fn host_mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Every path under `dir` with its type, size and mtime (to prove a host directory untouched).
pub fn snapshot(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let md = std::fs::symlink_metadata(&d).unwrap();
        out.push(format!(
            "{} {:o} {} {} {}",
            d.display(),
            md.mode(),
            md.size(),
            md.mtime(),
            md.mtime_nsec()
        ));
        if md.is_dir() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// A process in its own (private) mount namespace and its own v1 device cgroup, standing in for
/// a container's init when `gpuhook prestart` is invoked directly.
pub struct Sleeper {
    pub child: Child,
    pub cgroup: PathBuf,
}

impl Sleeper {
    pub fn start(tag: &str) -> Sleeper {
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sleep", "300"])
            .spawn()
            .expect("unshare");
        let cgroup = PathBuf::from("/sys/fs/cgroup/devices").join(unique_id(tag));
        std::fs::create_dir(&cgroup).expect("create device cgroup");
        std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string()).unwrap();
        // Wait until unshare has exec'd sleep in the new namespace.
        let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        for _ in 0..200 {
            let ns = std::fs::read_link(format!("/proc/{}/ns/mnt", child.id()));
            let exe = std::fs::read_link(format!("/proc/{}/exe", child.id()));
            if ns.is_ok_and(|n| n != own) && exe.is_ok_and(|e| e.ends_with("sleep")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Sleeper { child, cgroup }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn mountinfo(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/mountinfo", self.pid())).unwrap()
    }

    /// Mount points (field 5) of the sleeper's namespace.
    pub fn mount_points(&self) -> Vec<String> {
        self.mountinfo()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .collect()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// Runs `gpuhook prestart --config CONFIG` with a crafted state for `pid` and `bundle`.
pub fn invoke_prestart(config: &Path, id: &str, pid: u32, bundle: &Path) -> Output {
    use std::io::Write;
    let state = json!({
        "ociVersion": "1.0.2", "id": id, "status": "creating", "pid": pid, "bundle": bundle
    });
    let mut child = Command::new(gpuhook_e2e::built("gpuhook"))
        .args(["prestart", "--config"])
        .arg(config)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpuhook");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(state.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}
