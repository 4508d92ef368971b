//! The kubelet's part between the device plugin and the CRI runtime: Allocate responses turned
//! into a CRI `ContainerConfig` exactly as the kubelet does it. Each behaviour, with its source in
//! kubernetes/kubernetes (read with the search tools; cited as `path:function`):
//!
//! - The device manager keeps one `ContainerAllocateResponse` per resource per container and,
//!   when the container starts, merges them into the container's run options: envs, device
//!   specs, mounts and annotations, where the first entry with a given key (env name, container
//!   path, annotation key) wins and a later one is dropped with a log line
//!   (`pkg/kubelet/cm/devicemanager/pod_devices.go:deviceRunContainerOptions`). CDI device names
//!   are collected from `CDIDevices` of every response, de-duplicated by name (same function,
//!   `getCDIDeviceInfo`; kubelet ≥ 1.28 with the DevicePluginCDIDevices gate, GA in 1.31).
//! - `manager.go:GetDeviceRunContainerOptions` returns those options (after PreStartContainer
//!   when the plugin asks for it); `kubelet_pods.go:GenerateRunContainerOptions` appends the
//!   device envs after the pod spec's own envs.
//! - `pkg/kubelet/kuberuntime/kuberuntime_container.go:generateContainerConfig` builds the CRI
//!   request: `Devices: makeDevices(opts)` (HostPath, ContainerPath, Permissions copied as is),
//!   `CDIDevices: makeCDIDevices(opts)` (only the name), `Mounts: makeMounts(opts, container)`
//!   (HostPath, ContainerPath, Readonly; device plugin mounts have `SELinuxRelabel: false` and no
//!   propagation), `Annotations: newContainerAnnotations(...)` (the device annotations are added
//!   to the kubelet's own `io.kubernetes.*` ones), `Envs` from `opts.Envs` in order.
//! - The RuntimeClass handler is sent in `RunPodSandbox.runtime_handler`
//!   (`kuberuntime_sandbox.go:createPodSandbox`); containerd 1.6 runs every container of the pod
//!   with the sandbox's runtime.
//! - containerd 1.6's CRI plugin ignores `CDIDevices` (CDI support arrived in 1.7 with
//!   `enable_cdi`); it passes annotations matching the runtime's `container_annotations` to the
//!   OCI spec, which is how `cdi.k8s.io/*` reaches gpuhook-runtime there.

use std::collections::{BTreeMap, HashMap, HashSet};

use gpuhook_device_plugin::api::ContainerAllocateResponse;
use k8s_cri::v1 as cri;

/// The merged run options of one container (`pod_devices.go:deviceRunContainerOptions`).
#[derive(Debug, Default)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub devices: Vec<cri::Device>,
    pub mounts: Vec<cri::Mount>,
    pub annotations: Vec<(String, String)>,
    pub cdi_devices: Vec<String>,
}

/// Merges the responses of the container's resources; the first value of a key wins.
pub fn run_options(responses: &[ContainerAllocateResponse]) -> RunOptions {
    let mut o = RunOptions::default();
    let (mut envs, mut devs, mut mounts, mut anns, mut cdi) = (
        HashSet::new(),
        HashSet::new(),
        HashSet::new(),
        HashSet::new(),
        HashSet::new(),
    );
    for r in responses {
        // Go map iteration order is random; sort so a test run is reproducible.
        for (k, v) in r.envs.iter().collect::<BTreeMap<_, _>>() {
            if envs.insert(k.clone()) {
                o.envs.push((k.clone(), v.clone()));
            }
        }
        for d in &r.devices {
            if devs.insert(d.container_path.clone()) {
                o.devices.push(cri::Device {
                    container_path: d.container_path.clone(),
                    host_path: d.host_path.clone(),
                    permissions: d.permissions.clone(),
                });
            }
        }
        for m in &r.mounts {
            if mounts.insert(m.container_path.clone()) {
                o.mounts.push(cri::Mount {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.clone(),
                    readonly: m.read_only,
                    selinux_relabel: false,
                    ..Default::default()
                });
            }
        }
        for (k, v) in r.annotations.iter().collect::<BTreeMap<_, _>>() {
            if anns.insert(k.clone()) {
                o.annotations.push((k.clone(), v.clone()));
            }
        }
        for c in &r.cdi_devices {
            if cdi.insert(c.name.clone()) {
                o.cdi_devices.push(c.name.clone());
            }
        }
    }
    o
}

/// The CRI `ContainerConfig` the kubelet sends for a container named `name` running `script`
/// with these run options (`kuberuntime_container.go:generateContainerConfig`).
pub fn container_config(name: &str, script: &str, opts: RunOptions) -> cri::ContainerConfig {
    let mut annotations: HashMap<String, String> = HashMap::from([
        ("io.kubernetes.container.restartCount".into(), "0".into()),
        (
            "io.kubernetes.container.terminationMessagePath".into(),
            "/dev/termination-log".into(),
        ),
    ]);
    for (k, v) in opts.annotations {
        annotations.entry(k).or_insert(v);
    }
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: super::cri::IMAGE.into(),
            user_specified_image: super::cri::IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        envs: opts
            .envs
            .into_iter()
            .map(|(key, value)| cri::KeyValue { key, value })
            .collect(),
        mounts: opts.mounts,
        devices: opts.devices,
        labels: HashMap::from([("io.kubernetes.container.name".into(), name.into())]),
        annotations,
        cdi_devices: opts
            .cdi_devices
            .into_iter()
            .map(|name| cri::CdiDevice { name })
            .collect(),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources::default()),
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node.into(),
                    pid: cri::NamespaceMode::Container.into(),
                    ipc: cri::NamespaceMode::Pod.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}
