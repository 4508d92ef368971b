//! Helpers of the partitionable-MIG tests: a simulated node, the plugin on it, its MIG
//! instances read through NVML, claims and what the slices publish.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gpuhook_dra::driver::ClaimRef;
use gpuhook_dra::run::Running;
use gpuhook_dra::testkit::claim;
use gpuhook_node::DiscoverOptions;
use serde_json::Value;

use super::apiserver::ApiServer;
use super::plugin::{plugin_node, NODE};

/// Builds `profile` under `dir/node` (`sim.rs`); `None` skips.
pub fn sim_node(dir: &Path, profile: &str) -> Option<PathBuf> {
    super::sim::sim_node(dir, profile, "partition test")
}

pub fn start(dir: &Path, api: &ApiServer, root: &Path) -> Running {
    let d = DiscoverOptions::for_root(root);
    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    plugin_node(dir, api, Path::new("/bin/false"), None, inv, Some(d))
}

/// GPU 0's GPU instances as (profile id, placement start), read through the MIG manager's NVML
/// (the profile id fixes the placement's size).
pub fn instances(root: &Path) -> Vec<(u32, u32)> {
    instances_of(root, 0)
}

pub fn instances_of(root: &Path, gpu: u32) -> Vec<(u32, u32)> {
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap();
    let g = p.with(|b| b.gpu(gpu)).unwrap();
    let mut v: Vec<_> = g
        .instances
        .iter()
        .map(|i| (i.profile_id, i.placement.start))
        .collect();
    v.sort();
    v
}

pub fn mig_claim(api: &ApiServer, uid: &str, device: &str) -> ClaimRef {
    api.add_claim(claim("ns", uid, uid, NODE, &[("mig", device)], vec![]));
    ClaimRef {
        namespace: "ns".into(),
        name: uid.into(),
        uid: uid.into(),
    }
}

/// The counter sets (GPU order) and device names of the published slices.
pub fn published(api: &ApiServer) -> (Vec<Value>, BTreeSet<String>) {
    let slices = api.slices();
    let sets = slices
        .iter()
        .filter_map(|s| s["spec"]["sharedCounters"].as_array())
        .flatten()
        .cloned()
        .collect();
    let names = slices
        .iter()
        .filter_map(|s| s["spec"]["devices"].as_array())
        .flatten()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    (sets, names)
}
