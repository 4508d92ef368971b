//! Who uses what: every device ID this node advertises (full GPUs, MIG devices, `<uuid>::<n>`
//! replicas), its physical GPU and health, and the pods/containers the kubelet assigned it to
//! (pod-resources API). Shown by `status` as JSON and by the metrics endpoint with
//! dcgm-exporter's label names (`gpu`, `UUID`, `modelName`, `Hostname`, `pod`, `namespace`,
//! `container`), so dashboards built for DCGM metrics can join on them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpuhook_node::Inventory;
use gpuhook_sharing::Advertisement;
use serde::Serialize;

use crate::podresources::{Assignment, PodResourcesError};
use crate::served::HealthState;

/// A container holding a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// One advertised device ID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceUse {
    pub resource: String,
    /// The advertised ID (`GPU-…`, `MIG-…`, `<uuid>::<n>`).
    pub id: String,
    /// The physical GPU's UUID and NVML index (the parent, for a MIG device).
    pub uuid: String,
    pub gpu: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    pub model_name: String,
    /// Health as served in ListAndWatch (`None`: not known, the plugin isn't serving it).
    pub healthy: Option<bool>,
    /// Containers the kubelet assigned it to (an init container's devices are reused by the
    /// app containers, so one ID may show more than once).
    pub users: Vec<User>,
}

/// The node's devices and their users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub hostname: String,
    pub config: String,
    pub devices: Vec<DeviceUse>,
    /// Assignments of our resources to IDs not advertised now (a config change since).
    pub unadvertised: Vec<Assignment>,
    /// Why the users are unknown, when the pod-resources API could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_resources_error: Option<String>,
}

/// Joins the advertisement, the node's GPUs, health and the kubelet's assignments.
pub fn usage(
    hostname: &str,
    ad: &Advertisement,
    inv: Option<&Inventory>,
    health: &HealthState,
    assigned: Result<&[Assignment], &PodResourcesError>,
) -> Usage {
    let models: BTreeMap<&str, &str> = inv
        .map(|i| {
            i.gpus
                .iter()
                .map(|g| (g.uuid.as_str(), g.name.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let (rows, pod_resources_error) = match assigned {
        Ok(a) => (a, None),
        Err(e) => (&[][..], Some(crate::error::chain(e))),
    };
    let mut by_id: BTreeMap<(&str, &str), Vec<&Assignment>> = BTreeMap::new();
    for a in rows {
        by_id
            .entry((a.resource.as_str(), a.device_id.as_str()))
            .or_default()
            .push(a);
    }
    let mut devices = Vec::new();
    for r in &ad.resources {
        for d in &r.devices {
            let mig = d.backing.mig.as_ref().map(|m| m.uuid.clone());
            let users = by_id
                .remove(&(r.name.as_str(), d.id.as_str()))
                .unwrap_or_default();
            devices.push(DeviceUse {
                resource: r.name.clone(),
                id: d.id.clone(),
                uuid: d.backing.gpu_uuid.clone(),
                gpu: d.backing.gpu_index,
                healthy: Some(!health.is_unhealthy(&d.backing.gpu_uuid, mig.as_deref())),
                mig_uuid: mig,
                replica: d.replica,
                model_name: models
                    .get(d.backing.gpu_uuid.as_str())
                    .map_or_else(String::new, |m| (*m).to_string()),
                users: users
                    .into_iter()
                    .map(|a| User {
                        pod: a.pod.clone(),
                        namespace: a.namespace.clone(),
                        container: a.container.clone(),
                    })
                    .collect(),
            });
        }
    }
    let ours = |res: &str| ad.resources.iter().any(|r| r.name == res);
    let unadvertised = by_id
        .into_iter()
        .filter(|((res, _), _)| ours(res))
        .flat_map(|(_, v)| v.into_iter().cloned())
        .collect();
    Usage {
        hostname: hostname.to_string(),
        config: ad.config_name.clone(),
        devices,
        unadvertised,
        pod_resources_error,
    }
}

/// A Prometheus label value, escaped (text format 0.0.4: `\\`, `\"`, `\n`).
fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The metrics in Prometheus text format 0.0.4.
pub fn prometheus(u: &Usage) -> String {
    let mut out = String::new();
    out.push_str("# HELP gpuhook_device_plugin_device_allocated Whether the kubelet assigned this advertised device to a container (one series per container).\n");
    out.push_str("# TYPE gpuhook_device_plugin_device_allocated gauge\n");
    let mut health = String::new();
    health.push_str("# HELP gpuhook_device_plugin_device_healthy Whether the advertised device is Healthy in ListAndWatch.\n");
    health.push_str("# TYPE gpuhook_device_plugin_device_healthy gauge\n");
    for d in &u.devices {
        let gpu = d.gpu.to_string();
        let base = [
            ("resource", d.resource.as_str()),
            ("device", d.id.as_str()),
            ("gpu", gpu.as_str()),
            ("UUID", d.uuid.as_str()),
            ("modelName", d.model_name.as_str()),
            ("Hostname", u.hostname.as_str()),
        ];
        if let Some(h) = d.healthy {
            let _ = writeln!(
                health,
                "gpuhook_device_plugin_device_healthy{} {}",
                labels(&base),
                u8::from(h)
            );
        }
        let free = User {
            pod: String::new(),
            namespace: String::new(),
            container: String::new(),
        };
        let users = if d.users.is_empty() {
            std::slice::from_ref(&free)
        } else {
            &d.users[..]
        };
        for usr in users {
            let mut l = base.to_vec();
            l.extend([
                ("pod", usr.pod.as_str()),
                ("namespace", usr.namespace.as_str()),
                ("container", usr.container.as_str()),
            ]);
            let _ = writeln!(
                out,
                "gpuhook_device_plugin_device_allocated{} {}",
                labels(&l),
                u8::from(!d.users.is_empty())
            );
        }
    }
    out.push_str(&health);
    out.push_str("# HELP gpuhook_device_plugin_pod_resources_up Whether the kubelet's pod-resources API answered.\n");
    out.push_str("# TYPE gpuhook_device_plugin_pod_resources_up gauge\n");
    let up = u8::from(u.pod_resources_error.is_none());
    let _ = writeln!(
        out,
        "gpuhook_device_plugin_pod_resources_up{} {up}",
        labels(&[("Hostname", u.hostname.as_str())])
    );
    out
}
