use super::*;

#[test]
fn nvidia_default_counters_parse_with_profiling_fields_refused() {
    let c = Counters::parse(DEFAULT_COUNTERS, "default").expect("NVIDIA's default parses");
    let names: Vec<&str> = c.values.iter().map(|v| v.name.as_str()).collect();
    // The DEV fields the facts list as enabled by default (dcgm-exporter-facts.md §2), in order.
    assert_eq!(
        names,
        [
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_MEM_CLOCK",
            "DCGM_FI_DEV_MEMORY_TEMP",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_ENC_UTIL",
            "DCGM_FI_DEV_DEC_UTIL",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_RESERVED",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        ]
    );
    let energy = &c.values[5];
    assert_eq!(energy.kind, MetricType::Counter);
    assert_eq!(energy.help, "Total energy consumption since boot (in mJ).");
    // `DCGM_FI_DEV_DEC_UTIL ,` has a blank before the comma: trimmed.
    assert_eq!(c.values[10].help, "Decoder utilization (in %).");
    assert_eq!(c.labels.len(), 1);
    assert_eq!(c.labels[0].name, "DCGM_FI_DRIVER_VERSION");
    let refused: Vec<(&str, Refusal)> = c
        .refused
        .iter()
        .map(|r| (r.name.as_str(), r.refusal))
        .collect();
    assert_eq!(
        refused,
        [
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Refusal::VgpuOnly),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Refusal::Profiling),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Refusal::Profiling),
            ("DCGM_FI_PROF_DRAM_ACTIVE", Refusal::Profiling),
            ("DCGM_FI_PROF_PCIE_TX_BYTES", Refusal::Profiling),
            ("DCGM_FI_PROF_PCIE_RX_BYTES", Refusal::Profiling),
        ]
    );
    let msg = c.refused_message().expect("some are refused");
    assert!(
        msg.contains("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (line "),
        "{msg}"
    );
    assert!(msg.contains("needs DCGM profiling"), "{msg}");
}

fn line_error(text: &str) -> (usize, String) {
    match Counters::parse(text, "c.csv") {
        Err(e @ CountersError::Line { line, .. }) => (line, e.to_string()),
        other => panic!("expected a line error, got {other:?}"),
    }
}

#[test]
fn bad_lines_are_errors_that_name_the_line() {
    let (line, msg) =
        line_error("# c\nDCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DEV_NOPE, gauge, x\n");
    assert_eq!(line, 3);
    assert!(
        msg.contains("c.csv line 3") && msg.contains("unknown field `DCGM_FI_DEV_NOPE`"),
        "{msg}"
    );

    let (line, msg) =
        line_error("DCGM_FI_DEV_GPU_UTIL, gauge, u\n\nDCGM_FI_DEV_GPU_UTIL, gauge, again\n");
    assert_eq!(line, 3);
    assert!(
        msg.contains("duplicate field DCGM_FI_DEV_GPU_UTIL (first on line 1)"),
        "{msg}"
    );

    let (line, msg) = line_error("DCGM_FI_DEV_GPU_UTIL, gauge\n");
    assert_eq!(line, 1);
    assert!(
        msg.contains("2 comma-separated fields, expected 3"),
        "{msg}"
    );

    let (_, msg) = line_error("DCGM_FI_DEV_GPU_UTIL, gauge, a, b\n");
    assert!(msg.contains("4 comma-separated fields"), "{msg}");

    let (_, msg) = line_error("DCGM_FI_DEV_GPU_UTIL, gaueg, u\n");
    assert!(msg.contains("unknown type `gaueg`"), "{msg}");

    let (_, msg) = line_error("DCGM_FI_DEV_GPU_UTIL, label, u\n");
    assert!(msg.contains("numeric field"), "{msg}");

    let (_, msg) = line_error("DCGM_FI_DRIVER_VERSION, gauge, v\n");
    assert!(msg.contains("must be `label`"), "{msg}");
}

#[test]
fn a_file_of_comments_or_only_refused_fields_serves_nothing_and_is_refused() {
    assert!(matches!(
        Counters::parse("# nothing\n", "c.csv"),
        Err(CountersError::Empty { .. })
    ));
    assert!(matches!(
        Counters::parse("DCGM_FI_PROF_SM_ACTIVE, gauge, x\n", "c.csv"),
        Err(CountersError::Empty { .. })
    ));
}

#[test]
fn default_path_falls_back_to_the_built_in_copy_but_other_paths_must_exist() {
    if !Path::new(DEFAULT_COUNTERS_PATH).exists() {
        let c = Counters::load(Path::new(DEFAULT_COUNTERS_PATH)).expect("built in");
        assert_eq!(c.origin, "built-in default-counters.csv");
    }
    let err = Counters::load(Path::new("/nonexistent/counters.csv")).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/counters.csv"),
        "{err}"
    );
}

#[test]
fn profiling_and_exporter_names_are_recognised_by_shape() {
    assert_eq!(
        fields::lookup("DCGM_FI_PROF_NVLINK_TX_BYTES"),
        Some(Kind::Refused(Refusal::Profiling))
    );
    assert_eq!(
        fields::lookup("DCGM_EXP_XID_ERRORS_COUNT"),
        Some(Kind::Refused(Refusal::NeedsDcgm))
    );
    assert_eq!(fields::lookup("DCGM_FI_PROF_"), None);
    assert_eq!(fields::lookup("DCGM_FI_PROF_lower"), None);
}
