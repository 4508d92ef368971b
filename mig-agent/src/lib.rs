//! `gpuhook-mig-manager`: the Kubernetes agent of gpuhook's MIG manager (issue #23, item 3).
//!
//! A DaemonSet pod per MIG node follows its Node's `nvidia.com/mig.config` label with the config
//! of a mounted ConfigMap (mig-parted format, parsed and applied by `gpuhook-mig`) and reports
//! `nvidia.com/mig.config.state` (`pending`, `rebooting`, `success`, `failed`) as NVIDIA's
//! k8s-mig-manager does, pausing and restoring the GPU clients through the same
//! `nvidia.com/gpu.deploy.*` labels, so NVIDIA's operands and gpuhook's agree on one node.
//!
//! - [`labels`]: the labels, states, clients and the pause/restore as data (pure).
//! - [`node`]: the API server ([`node::NodeApi`]; [`node::KubeNode`] over gpuhook-kube).
//! - [`layout`]: preview and apply ([`layout::Layout`]; [`layout::MigParted`] over gpuhook-mig).
//! - [`host`]: the clients' processes, the CDI refresh, the reboot ([`host::NodeHost`]).
//! - [`reconcile`]: one run, every failure restoring; [`agent`]: the loop, queue and backoff.
//! - [`cli`]: the binary's flags.

pub mod agent;
pub mod cli;
pub mod holders;
pub mod host;
pub mod labels;
pub mod layout;
pub mod node;
pub mod reconcile;

#[cfg(test)]
mod test_support;
