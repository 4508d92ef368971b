//! The node services a pod's GPU depends on: a device plugin registered with kubelet, and (when
//! MPS sharing is used) gpu-mps-daemon's readiness.
//!
//! Both are judged from the files they leave, never by connecting: the plugin's sockets in
//! kubelet's device plugin directory (gpuhook's plugin names them as NVIDIA's k8s-device-plugin
//! does, `nvidia-<resource>.sock`: `nvidia-gpu.sock`, `nvidia-gpu.shared.sock`,
//! `nvidia-mig-1g.10gb.sock`, so either plugin serves the same resource names), and the MPS
//! daemon's `status.json` and per-GPU `ready` files under its root.

use std::os::unix::fs::FileTypeExt;

use serde_json::Value;

use super::{list_dir, Finding, Options, MAX_FILE_BYTES};

const PLUGIN: &str = "device-plugin";
const MPS: &str = "mps-daemon";
/// kubelet's registration socket.
const KUBELET_SOCKET: &str = "kubelet.sock";

pub(super) fn check(opts: &Options, out: &mut Vec<Finding>) {
    out.push(device_plugin(opts));
    out.extend(mps(opts));
}

fn device_plugin(opts: &Options) -> Finding {
    let dir = &opts.device_plugin_dir;
    let (names, _) =
        match list_dir(dir) {
            Ok(l) => l,
            Err(_) => return Finding::warn(
                PLUGIN,
                format!("{} does not exist: no kubelet on this node", dir.display()),
                "nothing to do without Kubernetes; on a Kubernetes node check that kubelet runs",
            ),
        };
    let is_socket =
        |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok_and(|m| m.file_type().is_socket());
    // `nvidia-<name after nvidia.com/>.sock`, gpuhook's and NVIDIA's plugin alike.
    let resources: Vec<String> = names
        .iter()
        .filter(|n| is_socket(n))
        .filter_map(|n| n.strip_prefix("nvidia-")?.strip_suffix(".sock"))
        .map(|r| format!("nvidia.com/{r}"))
        .collect();
    if !resources.is_empty() {
        return Finding::ok(
            PLUGIN,
            format!(
                "a GPU device plugin serves {} in {} (`gpuhook-device-plugin status` lists the \
                 devices and the pods using them)",
                gpuhook_node::bounded::preview_list(&resources, 8),
                dir.display()
            ),
        );
    }
    let kubelet = if is_socket(KUBELET_SOCKET) {
        "kubelet is running"
    } else {
        "kubelet's registration socket is missing too"
    };
    Finding::fail(
        PLUGIN,
        format!(
            "no GPU device plugin socket in {} ({kubelet}): pods requesting nvidia.com/gpu stay \
             Pending",
            dir.display()
        ),
        "deploy gpuhook's device plugin (`kubectl apply -k \
         deploy/kubernetes/examples/device-plugin`) or NVIDIA's k8s-device-plugin, and check its \
         pod's log",
    )
}

fn mps(opts: &Options) -> Vec<Finding> {
    let root = &opts.mps_root;
    if !root.is_dir() {
        return vec![Finding::ok(
            MPS,
            format!(
                "{} does not exist: MPS sharing is not used on this node",
                root.display()
            ),
        )];
    }
    let status = root.join("status.json");
    let doc: Value = match gpuhook_node::bounded::read_bounded(&status, MAX_FILE_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", status.display())))
    {
        Ok(v) => v,
        Err(e) => {
            return vec![Finding::fail(
                MPS,
                format!("gpu-mps-daemon status unreadable: {e}"),
                "check `systemctl status gpu-mps-daemon` (or its DaemonSet pod) and its log",
            )]
        }
    };
    let gpus = doc
        .get("gpus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if gpus.is_empty() {
        return vec![Finding::warn(
            MPS,
            format!("{} lists no MPS-shared GPU", status.display()),
            "check sharing.mps.resources in the daemon's config (devices, replicas)",
        )];
    }
    gpus.iter().take(64).map(|g| mps_gpu(opts, g)).collect()
}

fn mps_gpu(opts: &Options, g: &Value) -> Finding {
    let field = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or("?");
    let (uuid, state) = (field("uuid"), field("state"));
    let uuid_ok = uuid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let ready_file = uuid_ok && opts.mps_root.join(uuid).join("ready").is_file();
    if state == "ready" && ready_file {
        return Finding::ok(MPS, format!("{uuid}: ready"));
    }
    let error = g
        .get("lastError")
        .and_then(Value::as_str)
        .unwrap_or("no error recorded");
    Finding::fail(
        MPS,
        format!(
            "{uuid}: {state}{} ({})",
            if ready_file { "" } else { ", no ready file" },
            gpuhook_node::bounded::preview(error)
        ),
        "see `gpu-mps-daemon status` and the daemon's log; GET /readyz answers 503 until every GPU \
         is ready",
    )
}
