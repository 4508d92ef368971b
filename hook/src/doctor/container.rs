//! One container: what request gpuhook sees in its `config.json`, and why it gets (or does not
//! get) GPUs.
//!
//! The bundle is found through runc's state (`<runc-root>/<id>/state.json`, label `bundle=`), the
//! `config.json` is read with the hook's size limit, and the decision is the request library's:
//! the node policy of `/etc/gpuhook/config.toml` ([`RequestPolicy::for_container`], pod
//! annotations included), [`request::parse`], then resolution against the inventory cache.
//!
//! [`RequestPolicy::for_container`]: crate::request::RequestPolicy::for_container

use std::path::{Path, PathBuf};

use gpuhook_node::bounded::{read_bounded, BoundedReadError, MAX_OCI_CONFIG_BYTES};
use gpuhook_node::DeviceRef;
use serde_json::Value;

use super::{ContainerTarget, Finding, Options};
use crate::request::{self, NotGpuReason, ParseOutcome};

const CHECK: &str = "container";

pub(super) fn check(opts: &Options, target: &ContainerTarget, out: &mut Vec<Finding>) {
    match load(target) {
        Ok((bundle, config)) => out.extend(decide(opts, &target.id, &bundle, &config)),
        Err(error) => out.push(Finding::fail(
            CHECK,
            error.to_string(),
            format!(
                "check the id and the runtime's state root (`runc --root {} list`; containerd's \
                 CRI containers: /run/containerd/runc/k8s.io)",
                target.runc_root.display()
            ),
        )),
    }
}

/// Why a container's `config.json` cannot be found or read; each names the file or value.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("{}: not a container id", gpuhook_node::bounded::preview(.0))]
    BadId(String),
    #[error(transparent)]
    Read(#[from] BoundedReadError),
    // The parser's message is part of this line (not a `#[source]`): it is printed once, here.
    #[error("{}: not JSON: {message}", path.display())]
    NotJson { path: PathBuf, message: String },
    #[error("{}: no `bundle=` label", .0.display())]
    NoBundle(PathBuf),
}

/// Reads and parses one JSON file of the runtime's, within the hook's size limit.
fn read_json(path: &Path) -> Result<Value, LoadError> {
    let bytes = read_bounded(path, MAX_OCI_CONFIG_BYTES)?;
    serde_json::from_slice(&bytes).map_err(|e| LoadError::NotJson {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The container's bundle and parsed `config.json`.
fn load(target: &ContainerTarget) -> Result<(PathBuf, Value), LoadError> {
    let id = &target.id;
    let valid = !id.is_empty()
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.+".contains(c));
    if !valid {
        return Err(LoadError::BadId(id.clone()));
    }
    let state_path = target.runc_root.join(id).join("state.json");
    let state = read_json(&state_path)?;
    let bundle = state
        .pointer("/config/labels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|l| l.strip_prefix("bundle="))
        .map(PathBuf::from)
        .ok_or(LoadError::NoBundle(state_path))?;
    let config = read_json(&bundle.join("config.json"))?;
    Ok((bundle, config))
}

fn decide(opts: &Options, id: &str, bundle: &Path, config: &Value) -> Vec<Finding> {
    let policy = opts.policy.for_container(config, bundle);
    let mut out = Vec::new();
    match request::mps_cdi_names(config, &policy) {
        Ok(names) if !names.is_empty() => out.push(Finding::ok(
            CHECK,
            format!(
                "{id}: MPS shares {}",
                gpuhook_node::bounded::preview_list(&names, 4)
            ),
        )),
        Ok(_) => {}
        Err(e) => out.push(Finding::fail(
            CHECK,
            format!("{id}: {e}"),
            "fix the MPS request",
        )),
    }
    let outcome = match request::parse(config, &policy) {
        Ok(o) => o,
        Err(e) => {
            out.push(Finding::fail(
                CHECK,
                format!("{id}: the request is refused: {e}"),
                "fix the container's GPU request (the error names the value); the runtime refuses \
                 to start it the same way",
            ));
            return out;
        }
    };
    out.push(match outcome {
        ParseOutcome::NotGpu(reason) => not_gpu(id, reason),
        ParseOutcome::Gpu(req) => {
            let inv = gpuhook_node::load_fresh(&opts.inventory_cache, &opts.driver_root)
                .ok()
                .flatten();
            match inv.map(|inv| req.resolve(&inv)) {
                None => Finding::warn(
                    CHECK,
                    format!(
                        "{id}: asks for GPUs ({}); no fresh inventory to resolve them",
                        req.source
                    ),
                    "run `gpuhook cdi refresh`, then re-run the doctor",
                ),
                Some(Ok(r)) => Finding::ok(
                    CHECK,
                    format!(
                        "{id}: from {} it gets {}",
                        r.source,
                        r.devices.iter().map(show).collect::<Vec<_>>().join(", ")
                    ),
                ),
                Some(Err(e)) => Finding::fail(
                    CHECK,
                    format!("{id}: {e}"),
                    "request devices this node has (`gpuhook cdi list`), or fix the requirement",
                ),
            }
        }
    });
    out
}

fn show(d: &DeviceRef) -> String {
    match d {
        DeviceRef::Gpu { index } => format!("GPU {index}"),
        DeviceRef::Mig {
            parent_index,
            index,
        } => format!("MIG {parent_index}:{index}"),
    }
}

fn not_gpu(id: &str, reason: NotGpuReason) -> Finding {
    match reason {
        NotGpuReason::NoRequest => Finding::warn(
            CHECK,
            format!(
                "{id}: asks for no GPU (no cdi.k8s.io/* annotation of our kind, no \
                 NVIDIA_VISIBLE_DEVICES)"
            ),
            "request nvidia.com/gpu in the pod's resources.limits (device plugin) with \
             runtimeClassName gpuhook, or set NVIDIA_VISIBLE_DEVICES",
        ),
        NotGpuReason::Void => Finding::warn(
            CHECK,
            format!("{id}: NVIDIA_VISIBLE_DEVICES=void: asks for nothing"),
            "set NVIDIA_VISIBLE_DEVICES to device ids, or request GPUs through the device plugin",
        ),
        NotGpuReason::EnvVarNotAccepted => Finding::fail(
            CHECK,
            format!(
                "{id}: NVIDIA_VISIBLE_DEVICES is ignored: the container is unprivileged and the node \
                 sets accept-envvar-when-unprivileged = false"
            ),
            "request GPUs through the device plugin (CDI annotations), or set \
             accept-envvar-when-unprivileged = true in /etc/gpuhook/config.toml",
        ),
    }
}
