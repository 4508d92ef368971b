//! The GFD labels that describe the host rather than the config: `gpu.mode` and `gpu.machine`,
//! read from sysfs under the driver root as NVIDIA's GPU feature discovery reads them
//! (k8s-device-plugin v0.20.0 `internal/lm/nvml.go:newGPUModeLabeler`/`getModeForClasses`, and
//! `internal/lm/machine-type.go:newMachineTypeLabeler`, whose file defaults to
//! `/sys/class/dmi/id/product_name` in `cmd/gpu-feature-discovery/main.go`).

use gpuhook_node::topology::{read_machine_type, read_pci_class};
use gpuhook_node::Inventory;

/// PCI class of a VGA controller (a GPU driving displays): `graphics`.
const PCI_VGA_CONTROLLER_CLASS: u32 = 0x0003_0000;
/// PCI class of a 3D controller (a compute GPU without display engine): `compute`.
const PCI_3D_CONTROLLER_CLASS: u32 = 0x0003_0200;

/// `nvidia.com/gpu.mode`: `graphics` or `compute` when every GPU has that PCI class, `unknown`
/// when a class cannot be read, the GPUs differ, or there is no GPU (as `getModeForClasses`).
pub fn gpu_mode(inv: &Inventory) -> &'static str {
    let classes: Option<Vec<u32>> = inv
        .gpus
        .iter()
        .map(|g| read_pci_class(&inv.driver_root, &g.pci_bus_id))
        .collect();
    match classes.as_deref() {
        Some([first, rest @ ..]) if rest.iter().all(|c| c == first) => match *first {
            PCI_VGA_CONTROLLER_CLASS => "graphics",
            PCI_3D_CONTROLLER_CLASS => "compute",
            _ => "unknown",
        },
        _ => "unknown",
    }
}

/// The DMI product name behind `nvidia.com/gpu.machine` (the caller sanitises it as every GFD
/// value), `unknown` when it cannot be read.
pub fn machine(inv: &Inventory) -> String {
    read_machine_type(&inv.driver_root).unwrap_or_else(|| "unknown".to_string())
}
