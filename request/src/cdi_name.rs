//! Fully qualified CDI device names (`vendor/class=name`) for the request parser.
//!
//! The rules live in one place, `gpuhook_cdi::names` (the same checks the spec generator and the
//! spec validator use), so a name the hook accepts is exactly a name a spec can publish. The
//! request code parses with [`QualifiedName::parse_reason`] because its own errors already name the
//! input and the expected form.

pub use gpuhook_cdi::names::{
    validate_class, validate_device_name, validate_vendor, QualifiedName,
};

/// The kind NVIDIA GPUs are published under.
pub const NVIDIA_GPU_KIND: &str = "nvidia.com/gpu";

/// The kind `gpu-mps-daemon` publishes its MPS shares under (`nvidia.com-gpu-mps.json`). The
/// prestart hook resolves these names through the CDI spec directories: a runtime without CDI
/// support would otherwise drop them.
pub const NVIDIA_GPU_MPS_KIND: &str = "nvidia.com/gpu-mps";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_gpu_kind_matches_the_cdi_defaults() {
        assert_eq!(
            NVIDIA_GPU_KIND,
            format!(
                "{}/{}",
                gpuhook_cdi::DEFAULT_VENDOR,
                gpuhook_cdi::DEFAULT_CLASS
            )
        );
        let q = QualifiedName::parse_reason("nvidia.com/gpu=0").unwrap();
        assert!(q.is_kind(NVIDIA_GPU_KIND));
        assert!(!QualifiedName::parse_reason("example.com/net=x")
            .unwrap()
            .is_kind(NVIDIA_GPU_KIND));
    }
}
