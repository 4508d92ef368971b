//! NVIDIA k8s-device-plugin config compatibility lives in `gpuhook-sharing` (`kdp`), shared with
//! the device plugin so that both read one ConfigMap the same way; re-exported for this crate.

pub use gpuhook_sharing::kdp::*;
