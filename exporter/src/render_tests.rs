use super::*;
use crate::collect::Settings;
use crate::devices::MigInstance;

#[test]
fn labels_come_in_dcgm_exporter_order() {
    let g = GpuInfo {
        index: 1,
        uuid: "GPU-a".into(),
        pci_bus_id: "00000000:41:00.0".into(),
        model: "NVIDIA A100-SXM4-80GB".into(),
        brand: "nvidia".into(),
        mig: true,
        instances: vec![MigInstance {
            profile: "1g.10gb".into(),
            gi: 9,
            uuid: "MIG-x".into(),
            index: 0,
        }],
    };
    assert_eq!(
        identity(&g, 0, Some("node-1")),
        r#"gpu="1",UUID="GPU-a",pci_bus_id="00000000:41:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="node-1""#
    );
    assert_eq!(
        identity(&g, 1, None),
        r#"gpu="1",UUID="GPU-a",pci_bus_id="00000000:41:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9""#
    );
    let counters = Counters::parse(
        "DCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DRIVER_VERSION, label, d\nDCGM_FI_DEV_BRAND, label, b\n",
        "t",
    )
    .unwrap();
    let collector = Collector::new(
        vec![g.clone()],
        Settings {
            interval: std::time::Duration::from_secs(1),
            timeout: std::time::Duration::from_secs(1),
            processes: false,
            proc_root: "/proc".into(),
            xid: false,
        },
        Default::default(),
    );
    let v = View {
        collector: &collector,
        counters: &counters,
        hostname: Some("h"),
        driver_version: "570.1",
        pods: None,
        now: Instant::now(),
    };
    // Label counters after Hostname, sorted by name.
    assert!(entity_labels(&v, &g, 0)
        .ends_with(r#"Hostname="h",DCGM_FI_DEV_BRAND="nvidia",DCGM_FI_DRIVER_VERSION="570.1""#));
}

#[test]
fn numbers_print_like_dcgm_exporter() {
    assert_eq!(number(302.206, true), "302.206000");
    assert_eq!(number(42.0, false), "42");
    assert_eq!(escape("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
}
