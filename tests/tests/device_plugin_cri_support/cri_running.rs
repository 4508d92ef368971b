//! Pods that keep running (the exporter's and the MPS daemon's CRI tests): start one through
//! containerd's CRI as the kubelet does and read its container's host PID.

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_cri::v1::ContainerState;

use super::cri::{Cri, HANDLER, RUN_WAIT};

impl Cri {
    /// Runs pod `sandbox` (handler [`HANDLER`]) and creates and starts its container `config`,
    /// without waiting for it; returns (sandbox id, container id). The caller removes the pod.
    pub async fn start_pod(
        &mut self,
        sandbox: cri::PodSandboxConfig,
        config: cri::ContainerConfig,
    ) -> (String, String) {
        let pod = self
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sandbox.clone()),
                runtime_handler: HANDLER.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", self.daemon.log_text()))
            .into_inner()
            .pod_sandbox_id;
        let id = self
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(config),
                sandbox_config: Some(sandbox),
            })
            .await
            .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", self.daemon.log_text()))
            .into_inner()
            .container_id;
        self.runtime
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", self.daemon.log_text()));
        (pod, id)
    }

    /// The host PID of running container `id`, from the verbose ContainerStatus (containerd's
    /// CRI puts its task's `pid` in `info["info"]`); waits until it runs.
    pub async fn running_pid(&mut self, id: &str) -> u32 {
        let deadline = Instant::now() + RUN_WAIT;
        loop {
            let resp = self
                .runtime
                .container_status(cri::ContainerStatusRequest {
                    container_id: id.into(),
                    verbose: true,
                })
                .await
                .expect("ContainerStatus")
                .into_inner();
            let state = resp.status.as_ref().map(|s| s.state);
            if state == Some(i32::from(ContainerState::ContainerRunning)) {
                let info: serde_json::Value =
                    serde_json::from_str(resp.info.get("info").expect("verbose info"))
                        .expect("verbose info is JSON");
                let pid = info["pid"].as_u64().expect("pid in the verbose info");
                return u32::try_from(pid).expect("a pid fits u32");
            }
            assert!(Instant::now() < deadline, "not running: {resp:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
