//! How the node's GPUs are connected: NUMA node per GPU and a link between every pair.
//!
//! The device plugin's GetPreferredAllocation prefers GPU sets with the best interconnect, as
//! NVIDIA's go-gpuallocator best-effort policy does. This is read on demand from NVML (common
//! PCIe ancestor, NVLinks) and sysfs (`/sys/bus/pci/devices/<bus>/numa_node` under the driver
//! root), not cached with the [`crate::Inventory`]: it only matters when a multi-GPU request
//! comes, and link state can change (an NVLink going down) without the inventory changing.

use std::collections::BTreeMap;
use std::path::Path;

use crate::bounded::read_bounded_string;
use crate::error::NodeError;
use crate::nvml::Nvml;

/// `nvmlGpuTopologyLevel_t` `NVML_TOPOLOGY_SYSTEM`: the path crosses NUMA nodes.
pub const TOPOLOGY_SYSTEM: u32 = 50;
/// `NVML_TOPOLOGY_NODE`: same NUMA node, through its host bridges.
pub const TOPOLOGY_NODE: u32 = 40;
/// `NVML_TOPOLOGY_MULTIPLE`: a PCIe switch path (20; 10 is one switch, 0 the same board).
pub const TOPOLOGY_MULTIPLE: u32 = 20;

/// The connection between two GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Link {
    /// NVLinks from one GPU straight to the other.
    pub nvlinks: u32,
    /// NVLinks both GPUs have into a shared NVSwitch fabric (the smaller of the two counts).
    pub nvswitch_links: u32,
    /// Closest common PCIe ancestor (`nvmlGpuTopologyLevel_t`: 0 … 50).
    pub pcie: u32,
}

/// A coarse link class, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LinkLevel {
    /// Direct NVLinks or an NVSwitch fabric, with this many links.
    NvLink(u32),
    /// Behind a common PCIe switch.
    SameSwitch,
    /// Same NUMA node.
    SameNuma,
    /// Across NUMA nodes (through the CPU interconnect).
    CrossNuma,
}

impl Link {
    /// The class of this link.
    pub fn level(&self) -> LinkLevel {
        let links = self.nvlinks.max(self.nvswitch_links);
        if links > 0 {
            LinkLevel::NvLink(links)
        } else if self.pcie <= TOPOLOGY_MULTIPLE {
            LinkLevel::SameSwitch
        } else if self.pcie < TOPOLOGY_SYSTEM {
            LinkLevel::SameNuma
        } else {
            LinkLevel::CrossNuma
        }
    }

    /// go-gpuallocator's pair score (`besteffort_policy.go:calculateGPUPairScore`): 60 for the
    /// same board down to 10 across CPUs in steps of 10 per topology level, plus 100 per
    /// NVLink. Unlike go-gpuallocator (whose `links.GetNVLink` only counts links that end at the
    /// peer GPU, "TODO: Handle NVSwitch semantics"), links into a shared NVSwitch count too.
    pub fn score(&self) -> u32 {
        let pcie = 60u32.saturating_sub(self.pcie.min(TOPOLOGY_SYSTEM) / 10 * 10);
        pcie + 100 * self.nvlinks.max(self.nvswitch_links)
    }
}

/// One GPU's place in the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlace {
    pub index: u32,
    /// PCI bus id, NVML form, lower case.
    pub bus_id: String,
    /// NUMA node from sysfs; `None` when the kernel reports -1 or the file is absent.
    pub numa_node: Option<u32>,
}

/// NUMA nodes and pairwise links of the node's GPUs, keyed by GPU UUID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    gpus: BTreeMap<String, GpuPlace>,
    links: BTreeMap<(String, String), Link>,
}

impl Topology {
    /// An empty topology (tests and callers without NVML build one with [`Topology::add_gpu`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a GPU.
    pub fn add_gpu(&mut self, uuid: &str, place: GpuPlace) {
        self.gpus.insert(uuid.to_string(), place);
    }

    /// Sets the (symmetric) link between two GPUs.
    pub fn set_link(&mut self, a: &str, b: &str, link: Link) {
        self.links.insert(key(a, b), link);
    }

    /// The GPU with this UUID.
    pub fn gpu(&self, uuid: &str) -> Option<&GpuPlace> {
        self.gpus.get(uuid)
    }

    /// NUMA node of a GPU, when known.
    pub fn numa_node(&self, uuid: &str) -> Option<u32> {
        self.gpus.get(uuid).and_then(|g| g.numa_node)
    }

    /// The link between two GPUs (`None` for the same GPU or an unknown one).
    pub fn link(&self, a: &str, b: &str) -> Option<Link> {
        self.links.get(&key(a, b)).copied()
    }

    /// Pair score for the allocator: 0 for unknown pairs.
    pub fn score(&self, a: &str, b: &str) -> u32 {
        self.link(a, b).map_or(0, |l| l.score())
    }

    /// Reads the topology of every GPU from NVML and `<root>/sys/bus/pci/devices/*/numa_node`.
    pub fn read(nvml: &Nvml, root: &Path) -> Result<Topology, NodeError> {
        let mut topo = Topology::new();
        let count = nvml.device_count()?;
        let devices = (0..count)
            .map(|i| nvml.device_by_index(i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut uuids = Vec::new();
        let mut nvlinks = Vec::new();
        for (index, dev) in (0..count).zip(&devices) {
            let uuid = dev.uuid()?;
            let bus_id = dev.pci_bus_id()?;
            let numa_node = read_numa_node(root, &bus_id);
            topo.add_gpu(
                &uuid,
                GpuPlace {
                    index,
                    bus_id,
                    numa_node,
                },
            );
            nvlinks.push(dev.nvlinks()?);
            uuids.push(uuid);
        }
        for i in 0..devices.len() {
            for j in (i + 1)..devices.len() {
                let mut pcie = devices[i].common_ancestor(&devices[j])?;
                let (a, b) = (&uuids[i], &uuids[j]);
                if let (Some(x), Some(y)) = (topo.numa_node(a), topo.numa_node(b)) {
                    if x != y {
                        pcie = pcie.max(TOPOLOGY_SYSTEM);
                    }
                }
                let link = Link {
                    nvlinks: direct_links(&nvlinks[i], &topo.gpus[b].bus_id),
                    nvswitch_links: switch_links(&nvlinks[i]).min(switch_links(&nvlinks[j])),
                    pcie,
                };
                topo.set_link(a, b, link);
            }
        }
        Ok(topo)
    }
}

fn key(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

fn direct_links(links: &[crate::nvml::NvLink], peer_bus: &str) -> u32 {
    let n = links.iter().filter(|l| l.remote_bus_id == peer_bus).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn switch_links(links: &[crate::nvml::NvLink]) -> u32 {
    let n = links.iter().filter(|l| l.remote_is_switch).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `<root>/sys/bus/pci/devices/<dddd:bb:dd.f>/<attribute>`, trimmed; `None` when unreadable.
fn read_pci_attribute(root: &Path, nvml_bus_id: &str, attribute: &str) -> Option<String> {
    // The kernel names PCI devices with a 4-digit domain; NVML prints 8 digits.
    let (domain, rest) = nvml_bus_id.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let kernel = format!("{domain:04x}:{}", rest.to_ascii_lowercase());
    let path = root
        .join("sys/bus/pci/devices")
        .join(kernel)
        .join(attribute);
    let text = read_bounded_string(&path, 64).ok()?;
    Some(text.trim().to_string())
}

/// `<root>/sys/bus/pci/devices/<dddd:bb:dd.f>/numa_node`; -1, absent or garbage → `None`.
pub fn read_numa_node(root: &Path, nvml_bus_id: &str) -> Option<u32> {
    read_pci_attribute(root, nvml_bus_id, "numa_node")?
        .parse::<u32>()
        .ok()
}

/// The PCI class of a GPU (`…/class`, e.g. `0x030200`: a 3D controller, `0x030000`: VGA).
pub fn read_pci_class(root: &Path, nvml_bus_id: &str) -> Option<u32> {
    let text = read_pci_attribute(root, nvml_bus_id, "class")?;
    u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}

/// The machine's DMI product name (`<root>/sys/class/dmi/id/product_name`), trimmed.
pub fn read_machine_type(root: &Path) -> Option<String> {
    let path = root.join("sys/class/dmi/id/product_name");
    let text = read_bounded_string(&path, 256).ok()?;
    Some(text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_levels_and_scores_follow_go_gpuallocator() {
        let pcie = |level| Link {
            nvlinks: 0,
            nvswitch_links: 0,
            pcie: level,
        };
        // calculateGPUPairScore: SameBoard 60, SingleSwitch 50, MultiSwitch 40, HostBridge 30,
        // SameCPU 20, CrossCPU 10; each NVLink adds 100.
        let scores: Vec<u32> = [0, 10, 20, 30, 40, 50].map(|l| pcie(l).score()).to_vec();
        assert_eq!(scores, [60, 50, 40, 30, 20, 10]);
        let two = Link {
            nvlinks: 2,
            nvswitch_links: 0,
            pcie: 40,
        };
        assert_eq!(two.score(), 220);
        assert_eq!(two.level(), LinkLevel::NvLink(2));
        assert_eq!(pcie(10).level(), LinkLevel::SameSwitch);
        assert_eq!(pcie(40).level(), LinkLevel::SameNuma);
        assert_eq!(pcie(50).level(), LinkLevel::CrossNuma);
        assert!(LinkLevel::NvLink(1) < LinkLevel::SameSwitch);
    }

    #[test]
    fn numa_node_from_sysfs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dev = dir.path().join("sys/bus/pci/devices/0000:9a:00.0");
        std::fs::create_dir_all(&dev).expect("mkdir");
        std::fs::write(dev.join("numa_node"), "1\n").expect("write");
        assert_eq!(read_numa_node(dir.path(), "00000000:9A:00.0"), Some(1));
        let dev = dir.path().join("sys/bus/pci/devices/0000:9a:00.0");
        std::fs::write(dev.join("class"), "0x030200\n").unwrap();
        assert_eq!(
            read_pci_class(dir.path(), "00000000:9A:00.0"),
            Some(0x0003_0200)
        );
        assert_eq!(read_pci_class(dir.path(), "00000000:9B:00.0"), None);
        assert_eq!(read_machine_type(dir.path()), None);
        std::fs::write(dev.join("numa_node"), "-1\n").expect("write");
        assert_eq!(read_numa_node(dir.path(), "00000000:9a:00.0"), None);
        assert_eq!(read_numa_node(dir.path(), "00000000:18:00.0"), None);
    }

    #[test]
    fn links_are_symmetric() {
        let mut t = Topology::new();
        let link = Link {
            nvlinks: 0,
            nvswitch_links: 18,
            pcie: 50,
        };
        t.set_link("GPU-b", "GPU-a", link);
        assert_eq!(t.link("GPU-a", "GPU-b"), Some(link));
        assert_eq!(t.score("GPU-a", "GPU-b"), 1810);
        assert_eq!(t.score("GPU-a", "GPU-c"), 0);
    }
}
