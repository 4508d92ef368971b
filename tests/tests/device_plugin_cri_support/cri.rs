//! A private containerd 1.6 with its CRI plugin, driven over the CRI v1 API as the kubelet does.
//!
//! The config follows what works on these machines (shared/reference/testing-notes.md, "containerd's
//! CRI plugin"): `restrict_oom_score_adj` (no CAP_SYS_RESOURCE in the bounding set), the cgroupfs
//! driver (cgroup v1, no systemd), a local sandbox image (no registry), pods in the host network
//! namespace (no CNI). The `gpuhook` runtime handler is added by our own `gpuhook runtime
//! configure`, the way an admin adds it, with `gpuhook-runtime` as its `BinaryName`.
//!
//! Cleanup: every pod is stopped and removed through CRI on the normal path; on drop (a failed
//! assertion included) every task and container in containerd's `k8s.io` namespace is killed and
//! removed with `ctr` before containerd is killed, so no shim, container or mount outlives a test.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpuhook_e2e::containerd::Containerd;
use gpuhook_e2e::{built, run_ok};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{self as cri, ContainerState, NamespaceMode};
use tonic::transport::Channel;

/// The image every sandbox and container runs (a static busybox, built and imported locally).
pub const IMAGE: &str = "gpuhook.test/busybox:1";
/// The CRI runtime handler (RuntimeClass `handler`) that `gpuhook runtime configure` adds.
pub const HANDLER: &str = "gpuhook";
/// containerd's namespace for CRI objects.
const NS: &str = "k8s.io";
/// How long a container may take to run its script.
pub const RUN_WAIT: Duration = Duration::from_secs(60);

/// containerd with its CRI plugin and a CRI client.
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub daemon: Containerd,
    pub dir: PathBuf,
}

/// containerd config (version 2) before `gpuhook runtime configure` adds the gpuhook runtime.
fn base_config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{d}/cni/bin"
  conf_dir = "{d}/cni/conf"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
"#
    )
}

/// The OCI architecture name of this machine.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Builds a docker-archive tar of a static busybox root filesystem tagged [`IMAGE`]; its default
/// process sleeps, so it also serves as the pod sandbox ("pause") image.
fn build_image(dir: &Path) -> PathBuf {
    let img = dir.join("image");
    let rootfs = gpuhook_e2e::busybox_rootfs(&img.join("rootfs"), false);
    let layer = img.join("layer.tar");
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
    );
    let sum = run_ok(Command::new("sha256sum").arg(&layer));
    let digest = sum.split_whitespace().next().expect("sha256sum output");
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep"], "Cmd": ["100000"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{digest}")]},
    });
    std::fs::write(img.join("config.json"), config.to_string()).expect("image config");
    let manifest = serde_json::json!([
        {"Config": "config.json", "RepoTags": [IMAGE], "Layers": ["layer.tar"]}
    ]);
    std::fs::write(img.join("manifest.json"), manifest.to_string()).expect("manifest");
    let tar = dir.join("image.tar");
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&img)
            .arg("-cf")
            .arg(&tar)
            .args(["manifest.json", "config.json", "layer.tar"]),
    );
    tar
}

/// Sets `pod_annotations` of the [`HANDLER`] runtime in containerd config `path`.
fn set_pod_annotations(path: &Path, patterns: &[&str]) {
    let text = std::fs::read_to_string(path).expect("containerd config");
    let mut doc: toml::Table = text.parse().expect("containerd config is TOML");
    let rt = [
        "plugins",
        "io.containerd.grpc.v1.cri",
        "containerd",
        "runtimes",
        HANDLER,
    ]
    .iter()
    .try_fold(&mut doc, |t, k| t.get_mut(*k)?.as_table_mut())
    .expect("the gpuhook runtime's table");
    let list = patterns.iter().map(|p| toml::Value::from(*p)).collect();
    rt.insert("pod_annotations".into(), toml::Value::Array(list));
    std::fs::write(path, toml::to_string(&doc).expect("TOML")).expect("containerd config");
}

/// What one container saw: its log (stdout and stderr) and exit code, and the annotations of
/// the OCI spec containerd made for it (CRI `ContainerStatus` verbose: `info.runtimeSpec`).
#[derive(Debug)]
pub struct Ran {
    pub log: String,
    pub exit_code: i32,
    pub spec_annotations: serde_json::Map<String, serde_json::Value>,
}

impl Cri {
    /// Starts containerd in `dir` with `gpuhook_config` in its environment (the shim passes it
    /// to gpuhook-runtime), adds the gpuhook handler with `gpuhook runtime configure`, and
    /// imports the test image.
    pub async fn start(dir: &Path, gpuhook_config: &Path) -> Cri {
        Cri::start_with(dir, gpuhook_config, &[]).await
    }

    /// [`Cri::start`] with the gpuhook handler's `pod_annotations` set to `pod_annotations` (an
    /// admin passing pod annotations through to the OCI spec), when not empty.
    pub async fn start_with(dir: &Path, gpuhook_config: &Path, pod_annotations: &[&str]) -> Cri {
        let config = dir.join("containerd.toml");
        std::fs::write(&config, base_config(dir)).expect("containerd config");
        let wrapper = built("gpuhook-runtime");
        let out = Command::new(built("gpuhook"))
            .args(["runtime", "configure", "--containerd-config"])
            .arg(&config)
            .arg("--binary")
            .arg(&wrapper)
            .env_remove("GPUHOOK_CONFIG")
            .output()
            .expect("run gpuhook runtime configure");
        assert_eq!(
            out.status.code(),
            Some(0),
            "gpuhook runtime configure must change the config:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if !pod_annotations.is_empty() {
            set_pod_annotations(&config, pod_annotations);
        }
        let tar = build_image(dir);
        let daemon = Containerd::start(
            dir,
            &config,
            &[("GPUHOOK_CONFIG", OsString::from(gpuhook_config))],
        );
        let imported = daemon.ctr(&[
            OsString::from("-n"),
            NS.into(),
            "images".into(),
            "import".into(),
            tar.into(),
        ]);
        assert!(
            imported.status.success(),
            "ctr images import: {}",
            String::from_utf8_lossy(&imported.stderr)
        );
        let channel = gpuhook_device_plugin::kubelet::connect(&daemon.socket)
            .await
            .expect("connect to containerd's CRI socket");
        let cri = Cri {
            runtime: RuntimeServiceClient::new(channel.clone()),
            daemon,
            dir: dir.to_path_buf(),
        };
        cri.wait_image(ImageServiceClient::new(channel)).await;
        cri
    }

    /// Waits until the CRI image store lists [`IMAGE`] (it syncs from containerd's events).
    async fn wait_image(&self, mut images: ImageServiceClient<Channel>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let st = images
                .image_status(cri::ImageStatusRequest {
                    image: Some(cri::ImageSpec {
                        image: IMAGE.into(),
                        ..Default::default()
                    }),
                    verbose: false,
                })
                .await
                .expect("ImageStatus");
            if st.into_inner().image.is_some() {
                return;
            }
            assert!(Instant::now() < deadline, "CRI never listed {IMAGE}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A pod sandbox config as the kubelet makes it for a hostNetwork pod (no CNI here).
    pub fn sandbox_config(&self, name: &str) -> cri::PodSandboxConfig {
        let ns = cri::NamespaceOption {
            network: NamespaceMode::Node.into(),
            pid: NamespaceMode::Container.into(),
            ipc: NamespaceMode::Pod.into(),
            ..Default::default()
        };
        let logs = self.dir.join("pods").join(name);
        std::fs::create_dir_all(&logs).expect("pod log dir");
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: logs.display().to_string(),
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs one pod (RuntimeClass handler [`HANDLER`]) with one container made from `config`,
    /// waits for it to exit, reads its log, then removes container and pod.
    pub async fn run(&mut self, pod: &str, config: cri::ContainerConfig) -> Ran {
        let sandbox = self.sandbox_config(pod);
        self.run_in(sandbox, config).await
    }

    /// [`Cri::run`] in a pod made from `sandbox` (e.g. [`Cri::sandbox_config`] with annotations).
    pub async fn run_in(
        &mut self,
        sandbox: cri::PodSandboxConfig,
        mut config: cri::ContainerConfig,
    ) -> Ran {
        let id = self
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sandbox.clone()),
                runtime_handler: HANDLER.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", self.daemon.log_text()))
            .into_inner()
            .pod_sandbox_id;
        config.log_path = "ctr_0.log".into();
        let log = Path::new(&sandbox.log_directory).join(&config.log_path);
        let created = self
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: id.clone(),
                config: Some(config),
                sandbox_config: Some(sandbox),
            })
            .await;
        let ran = match created {
            Ok(c) => {
                let cid = c.into_inner().container_id;
                let spec_annotations = self.spec_annotations(&cid).await;
                Ok((self.start_and_wait(&cid).await, spec_annotations))
            }
            Err(e) => Err(e),
        };
        self.remove_pod(&id).await;
        match ran {
            Ok((exit_code, spec_annotations)) => Ran {
                log: std::fs::read_to_string(&log).unwrap_or_default(),
                exit_code,
                spec_annotations,
            },
            Err(e) => panic!("CreateContainer: {e}\n{}", self.daemon.log_text()),
        }
    }

    /// The annotations of container `id`'s OCI spec (containerd's verbose status info).
    async fn spec_annotations(&mut self, id: &str) -> serde_json::Map<String, serde_json::Value> {
        let st = self
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: true,
            })
            .await
            .expect("ContainerStatus")
            .into_inner();
        let info: serde_json::Value = st
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        let a = info["runtimeSpec"]["annotations"].as_object();
        a.cloned().unwrap_or_default()
    }

    /// StartContainer, then ContainerStatus until EXITED; returns the exit code.
    async fn start_and_wait(&mut self, id: &str) -> i32 {
        self.runtime
            .start_container(cri::StartContainerRequest {
                container_id: id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", self.daemon.log_text()));
        let deadline = Instant::now() + RUN_WAIT;
        loop {
            let st = self
                .runtime
                .container_status(cri::ContainerStatusRequest {
                    container_id: id.into(),
                    verbose: false,
                })
                .await
                .expect("ContainerStatus")
                .into_inner()
                .status
                .expect("a status");
            if st.state == i32::from(ContainerState::ContainerExited) {
                return st.exit_code;
            }
            assert!(Instant::now() < deadline, "container still running: {st:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// StopPodSandbox + RemovePodSandbox (which removes its containers), as the kubelet does;
    /// errors are ignored (clean-up): a test that cares checks what is left.
    pub async fn remove_pod(&mut self, id: &str) {
        let _ = self
            .runtime
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await;
        let _ = self
            .runtime
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await;
    }

    fn ctr_ns(&self, args: &[&str]) -> String {
        let mut argv = vec!["-n", NS];
        argv.extend_from_slice(args);
        String::from_utf8_lossy(&self.daemon.ctr(&argv).stdout).into_owned()
    }
}

impl Drop for Cri {
    fn drop(&mut self) {
        for task in self.ctr_ns(&["tasks", "ls", "-q"]).lines() {
            let _ = self.ctr_ns(&["tasks", "kill", "-s", "SIGKILL", task]);
            let _ = self.ctr_ns(&["tasks", "rm", "-f", task]);
        }
        for c in self.ctr_ns(&["containers", "ls", "-q"]).lines() {
            let _ = self.ctr_ns(&["containers", "rm", c]);
        }
        // `daemon` drops next: containerd is killed and the mounts under `dir` are detached.
    }
}
