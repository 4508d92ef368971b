//! The exporter binary on simulated nodes (mock NVML, built-in profiles): dcgm-exporter's metric
//! names, HELP/TYPE, labels and value formats for what the test scripted into NVML; MIG
//! instances; a wedged and a lost GPU; bad counters files.
//!
//! Expected values follow NVML/DCGM semantics (dcgm-exporter-facts.md §5): power is NVML's mW
//! / 1000 printed with six decimals, memory is MiB, NVLink bandwidth is NVML's data TX + RX.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Exporter, Node, Page};

const H100_0: &str = "GPU-054b5817-d8d5-cb0c-e645-7b685ed85ca6";
const H100_1: &str = "GPU-192dd611-6d8a-5ecf-3ede-0587705f2e20";
const H100_2: &str = "GPU-b5b0b898-dc85-046e-9974-a9c372303cce";
const A100_0: &str = "GPU-c4f82fda-f11d-4492-a176-950eab898aad";

fn sampled(p: &Page, gpus: usize) -> bool {
    p.of("DCGM_FI_DEV_GPU_TEMP").count() == gpus
}

#[test]
fn serves_dcgm_fields_with_dcgm_exporter_names_labels_and_formats() {
    let node = Node::new("dgx-h100");
    node.state(
        &format!("telemetry-{H100_0}"),
        "gpu_util 60\nmem_util 20\ntemp 55\nmemory_temp 48\npower_mw 301250\n\
         energy_mj 123456789\nsm_clock 1980\nmem_clock 2619\npcie_replay 3\nenc_util 5\n\
         dec_util 7\nfb_used_mib 1000\nfb_reserved_mib 512\nfield.143 2\nfield.142 1\n\
         field.138 100\nfield.139 50\n",
    );
    let ex = Exporter::start(&node, &["-c", "200"]);
    let page = ex.wait_for(|p| sampled(p, 8));
    let driver = gpuhook_sim::profile::NodeProfile::builtin("dgx-h100")
        .unwrap()
        .driver_version;
    let labels = format!(
        "gpu=\"0\",UUID=\"{H100_0}\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",\
         modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"test-node\",DCGM_FI_DRIVER_VERSION=\"{driver}\""
    );
    let total_mib = 81559;
    for (name, value) in [
        ("DCGM_FI_DEV_GPU_UTIL", "60".to_string()),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "20".into()),
        ("DCGM_FI_DEV_GPU_TEMP", "55".into()),
        ("DCGM_FI_DEV_MEMORY_TEMP", "48".into()),
        ("DCGM_FI_DEV_POWER_USAGE", "301.250000".into()),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "123456789".into()),
        ("DCGM_FI_DEV_SM_CLOCK", "1980".into()),
        ("DCGM_FI_DEV_MEM_CLOCK", "2619".into()),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "3".into()),
        ("DCGM_FI_DEV_ENC_UTIL", "5".into()),
        ("DCGM_FI_DEV_DEC_UTIL", "7".into()),
        ("DCGM_FI_DEV_FB_USED", "1000".into()),
        ("DCGM_FI_DEV_FB_RESERVED", "512".into()),
        ("DCGM_FI_DEV_FB_FREE", (total_mib - 1000 - 512).to_string()),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "2".into()),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "1".into()),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "0".into()),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "150".into()),
    ] {
        let line = format!("{name}{{{labels}}} {value}\n");
        assert!(page.text.contains(&line), "missing {line}in\n{}", page.text);
        // One series per GPU, never a copy.
        assert_eq!(page.of(name).count(), 8, "{name}");
    }
    let xid = format!("DCGM_FI_DEV_XID_ERRORS{{{labels},err_code=\"0\",err_msg=\"No Error\"}} 0\n");
    assert!(page.text.contains(&xid), "{}", page.text);
    // HELP and TYPE as NVIDIA's default-counters.csv says.
    assert_eq!(page.help["DCGM_FI_DEV_POWER_USAGE"], "Power draw (in W).");
    assert_eq!(page.kind["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"], "counter");
    assert_eq!(page.kind["DCGM_FI_DEV_ROW_REMAP_FAILURE"], "gauge");
    // Refused fields: listed at start and as a metric, never served.
    assert!(page.of("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").next().is_none());
    page.one(
        "gpuhook_exporter_field_refused",
        &[
            ("field", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
            ("reason", "profiling"),
        ],
    );
    assert!(
        ex.log().contains("DCGM_FI_PROF_GR_ENGINE_ACTIVE (line"),
        "{}",
        ex.log()
    );
    assert_eq!(ex.get("/health"), Some((200, "OK".to_string())));
    assert_eq!(ex.get("/nope").map(|r| r.0), Some(404));
}

#[test]
fn mig_instances_are_series_of_their_own_and_gpu_fields_stay_per_gpu() {
    let node = Node::new("a100-mig-mixed");
    node.state(
        "telemetry-MIG-ae18ffb7-f9f1-fb51-5ea5-0879a2b7053a",
        "fb_used_mib 300\n",
    );
    let ex = Exporter::start(&node, &["-c", "200", "-n"]);
    let page = ex.wait_for(|p| sampled(p, 2));
    // GPU 0 = 3g.40gb (GI 2) + 2x 2g.20gb, GPU 1 = 7x 1g.10gb: one FB series per GPU instance.
    assert_eq!(page.of("DCGM_FI_DEV_FB_USED").count(), 10);
    let fb = page.one("DCGM_FI_DEV_FB_USED", &[("GPU_I_ID", "2")]);
    assert_eq!(fb.value, "300");
    let names: Vec<&str> = fb.labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "GPU_I_PROFILE",
            "GPU_I_ID",
            "DCGM_FI_DRIVER_VERSION"
        ]
    );
    assert_eq!(fb.label("UUID"), Some(A100_0));
    assert_eq!(fb.label("GPU_I_PROFILE"), Some("3g.40gb"));
    // Temperature is the GPU's, once; utilization has no NVML answer in MIG mode: absent.
    assert!(page
        .of("DCGM_FI_DEV_GPU_TEMP")
        .all(|s| s.label("GPU_I_ID").is_none()));
    assert_eq!(page.of("DCGM_FI_DEV_GPU_UTIL").count(), 0);
}

#[test]
fn a_wedged_gpu_never_blocks_metrics_and_a_lost_gpu_is_a_metric() {
    let node = Node::new("dgx-h100");
    let mut ex = Exporter::start(
        &node,
        &["-c", "200", "--nvml-timeout", "300", "--scrape-cache", "0"],
    );
    ex.wait_for(|p| sampled(p, 8));
    // Each NVML call of GPU 1 hangs 30 s: a scrape that waited on one would take that long.
    node.state(&format!("telemetry-{H100_1}"), "delay_ms 30000\ntemp 99\n");
    node.state(&format!("lost-{H100_2}"), "");
    let page = ex.wait_for(|p| {
        p.one("gpuhook_exporter_gpu_stale", &[("UUID", H100_1)])
            .value
            == "1"
            && p.one("gpuhook_exporter_gpu_lost", &[("UUID", H100_2)])
                .value
                == "1"
    });
    // The wedged GPU keeps its last good values (not the 99 behind the wedge), marked stale.
    assert_ne!(
        page.one("DCGM_FI_DEV_GPU_TEMP", &[("UUID", H100_1)]).value,
        "99"
    );
    // The lost GPU has no value series; the others are fresh.
    assert!(page
        .of("DCGM_FI_DEV_GPU_TEMP")
        .all(|s| s.label("UUID") != Some(H100_2)));
    assert_eq!(
        page.one("gpuhook_exporter_gpu_stale", &[("UUID", H100_0)])
            .value,
        "0"
    );
    // A scrape answers while GPU 1's NVML calls hang (well under the 30 s of one hung call, with
    // room for a loaded machine: a scrape reads the last samples, it takes milliseconds).
    let t0 = Instant::now();
    assert_eq!(ex.get("/metrics").map(|r| r.0), Some(200));
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "scrape took {:?}",
        t0.elapsed()
    );
    assert!(ex.log().contains("fallen off the bus"), "{}", ex.log());
    // The GPU comes back: served again.
    node.remove_state(&format!("lost-{H100_2}"));
    ex.wait_for(|p| {
        p.of("DCGM_FI_DEV_GPU_TEMP")
            .any(|s| s.label("UUID") == Some(H100_2))
    });
    assert!(
        matches!(ex.child.try_wait(), Ok(None)),
        "the exporter exited"
    );
}

fn start_fails(node: &Node, csv: &str) -> String {
    let path = node.dir.path().join("counters.csv");
    std::fs::write(&path, csv).unwrap();
    let mut ex = Exporter::start(node, &["-f", path.to_str().unwrap()]);
    let status = ex.child.wait().unwrap();
    assert!(!status.success());
    ex.log()
}

#[test]
fn a_bad_counters_file_stops_the_start_naming_its_line() {
    let node = Node::new("l20");
    let log = start_fails(
        &node,
        "# mine\nDCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DEV_GPU_UTILS, gauge, u\n",
    );
    assert!(
        log.contains("counters.csv line 3")
            && log.contains("unknown field `DCGM_FI_DEV_GPU_UTILS`"),
        "{log}"
    );
    let log = start_fails(
        &node,
        "DCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n",
    );
    assert!(
        log.contains("line 2") && log.contains("duplicate field"),
        "{log}"
    );
    let log = start_fails(&node, "DCGM_FI_DEV_GPU_UTIL gauge u\n");
    assert!(
        log.contains("line 1") && log.contains("malformed record"),
        "{log}"
    );
}
