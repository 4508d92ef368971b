use super::*;

const ENV: RequestSource = RequestSource::EnvVar;

fn id(s: &str) -> DeviceId {
    parse_id(s, ENV).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn list(s: &str) -> ListOutcome {
    parse_visible_devices(s, ENV).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn ids(s: &str) -> Vec<DeviceId> {
    match list(s) {
        ListOutcome::Selection(DeviceSelection::Ids(v)) => v,
        other => panic!("{s:?}: {other:?}"),
    }
}

#[test]
fn keywords() {
    assert_eq!(list(""), ListOutcome::Empty);
    assert_eq!(list(" , ,"), ListOutcome::Empty);
    assert_eq!(list("void"), ListOutcome::Void);
    assert_eq!(list("0,void,1"), ListOutcome::Void);
    assert_eq!(list("VOID"), ListOutcome::Void);
    assert_eq!(list("none"), ListOutcome::Selection(DeviceSelection::None));
    assert_eq!(list("all"), ListOutcome::Selection(DeviceSelection::All));
    assert_eq!(list("0,all"), ListOutcome::Selection(DeviceSelection::All));
    assert_eq!(list(" All "), ListOutcome::Selection(DeviceSelection::All));
    // `none` selects nothing but does not cancel the other ids.
    assert_eq!(ids("none,1"), vec![DeviceId::Index(1)]);
    // `void` wins even over entries that would not parse.
    assert_eq!(list("\u{1},void"), ListOutcome::Void);
}

#[test]
fn every_id_form() {
    assert_eq!(id("0"), DeviceId::Index(0));
    assert_eq!(id("007"), DeviceId::Index(7));
    assert_eq!(id("GPU-0a1b-22"), DeviceId::GpuUuid("GPU-0a1b-22".into()));
    assert_eq!(id("gpu-0A1B-22"), DeviceId::GpuUuid("gpu-0A1B-22".into()));
    assert_eq!(id("MIG-9a1b-00"), DeviceId::MigUuid("MIG-9a1b-00".into()));
    assert_eq!(id("mig-9a1b-00"), DeviceId::MigUuid("mig-9a1b-00".into()));
    assert_eq!(
        id("MIG-GPU-1a1b-22/7/0"),
        DeviceId::MigLegacy {
            gpu_uuid: "GPU-1a1b-22".into(),
            gi: 7,
            ci: 0
        }
    );
    assert_eq!(id("1:0"), DeviceId::MigIndex { gpu: 1, mig: 0 });
    assert_eq!(id("12:34"), DeviceId::MigIndex { gpu: 12, mig: 34 });
    for pci in [
        "0000:18:00.0",
        "00000000:18:00.0",
        "18:00.0",
        "00000000:18:00.0",
    ] {
        assert_eq!(
            id(pci),
            DeviceId::PciBusId("00000000:18:00.0".into()),
            "{pci}"
        );
    }
    assert_eq!(
        id("0000:3B:00.0"),
        DeviceId::PciBusId("00000000:3b:00.0".into())
    );
    assert_eq!(id("1:2:3.4"), DeviceId::PciBusId("00000001:02:03.4".into()));
    let q = id("nvidia.com/gpu=0");
    assert_eq!(
        q,
        DeviceId::Cdi(QualifiedName::parse("nvidia.com/gpu=0").unwrap())
    );
    assert_eq!(id("gpu0"), DeviceId::Name("gpu0".into()));
    assert_eq!(id("mig1:0"), DeviceId::Name("mig1:0".into()));
}

#[test]
fn list_is_trimmed_with_empties_dropped_and_order_kept() {
    assert_eq!(
        ids(" 1 ,, GPU-x ,0000:18:00.0,\t2:1 ,"),
        vec![
            DeviceId::Index(1),
            DeviceId::GpuUuid("GPU-x".into()),
            DeviceId::PciBusId("00000000:18:00.0".into()),
            DeviceId::MigIndex { gpu: 2, mig: 1 },
        ]
    );
}

#[test]
fn display_round_trips() {
    for s in [
        "3",
        "GPU-ab",
        "MIG-cd",
        "MIG-GPU-ab/1/2",
        "4:5",
        "00000000:18:00.0",
        "nvidia.com/gpu=1",
        "gpu3",
    ] {
        assert_eq!(id(s).to_string(), s);
    }
}

#[test]
fn cdi_names_for_the_runtime_wrapper() {
    let kind = "nvidia.com/gpu";
    assert_eq!(
        id("0").to_cdi_name(kind).as_deref(),
        Some("nvidia.com/gpu=0")
    );
    assert_eq!(
        id("1:0").to_cdi_name(kind).as_deref(),
        Some("nvidia.com/gpu=1:0")
    );
    assert_eq!(
        id("GPU-ab").to_cdi_name(kind).as_deref(),
        Some("nvidia.com/gpu=GPU-ab")
    );
    assert_eq!(
        id("example.com/x=y").to_cdi_name(kind).as_deref(),
        Some("example.com/x=y")
    );
    assert_eq!(id("MIG-GPU-ab/1/0").to_cdi_name(kind), None);
    assert_eq!(
        DeviceSelection::All.to_cdi_names(kind, ENV).unwrap(),
        vec!["nvidia.com/gpu=all"]
    );
    assert!(DeviceSelection::None
        .to_cdi_names(kind, ENV)
        .unwrap()
        .is_empty());
    assert_eq!(ids("0,GPU-ab").len(), 2);
    let sel = DeviceSelection::Ids(ids("0,GPU-ab"));
    assert_eq!(
        sel.to_cdi_names(kind, ENV).unwrap(),
        vec!["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-ab"]
    );
    let e = DeviceSelection::Ids(ids("MIG-GPU-ab/1/0"))
        .to_cdi_names(kind, ENV)
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no CDI name; use MIG-<uuid> or N:M"), "{e}");
}

fn err(s: &str) -> String {
    parse_id(s, ENV).expect_err(s).to_string()
}

#[test]
fn hostile_and_malformed_ids() {
    assert!(
        err("0\u{0}1").contains("control character '\\0'"),
        "{}",
        err("0\u{0}1")
    );
    assert!(err("GPU-\u{1b}[31m").contains("control character"));
    assert!(err("../../etc/passwd").contains("'..' path component"));
    assert!(err("MIG-GPU-x/../0").contains("'..' path component"));
    assert!(err("cdi/./x").contains("path component"));
    assert!(err("0 1").contains("' '"));
    assert!(err("gpu$0").contains("'$'"));
    assert!(err("é").contains("'é'"));
    assert!(err("99999999999").contains("index is too large"));
    assert!(err("MIG-GPU-x/1").contains("MIG-GPU-<gpu-uuid>/<gi>/<ci>"));
    assert!(err("MIG-GPU-x/a/0").contains("decimal gi and ci"));
    assert!(err("MIG-GPU-/1/0").contains("decimal gi and ci"));
    assert!(err("GPU-").contains("expected GPU-<uuid>"));
    assert!(err("MIG-").contains("expected MIG-<uuid>"));
    assert!(err("a/b").contains("'/' is only valid"));
    assert!(err("nvidia.com/gpu=").contains("invalid CDI device name"));
    assert!(err("nvidia.com=0").contains("missing '/'"));
    assert!(err("-x").contains("must start with a letter or digit"));
    // The error names the source.
    assert!(
        err("a/b").contains("in NVIDIA_VISIBLE_DEVICES"),
        "{}",
        err("a/b")
    );
    // Long hostile values are shortened in messages.
    let long = format!("{}\u{7}", "x".repeat(5000));
    assert!(err(&long).len() < 300);
}

#[test]
fn pci_normalisation() {
    assert_eq!(
        normalize_pci_bus_id("0000:18:00.0").as_deref(),
        Some("00000000:18:00.0")
    );
    assert_eq!(
        normalize_pci_bus_id("18:1f.7").as_deref(),
        Some("00000000:18:1f.7")
    );
    for bad in [
        "18:20.0",
        "18:00.8",
        "123:00.0",
        "x:00.0",
        "000000000:18:00.0",
        "18.0",
        "18:00",
        "1:2:3:4.0",
    ] {
        assert_eq!(normalize_pci_bus_id(bad), None, "{bad}");
    }
}

#[test]
fn list_limits() {
    let many = vec!["0"; MAX_ID_ENTRIES + 1].join(",");
    let e = parse_visible_devices(&many, ENV).unwrap_err();
    assert!(matches!(e, RequestError::LimitExceeded { .. }));
    assert!(e.to_string().contains("4096 entries"), "{e}");
    let ok = vec!["0"; MAX_ID_ENTRIES].join(",");
    assert!(parse_visible_devices(&ok, ENV).is_ok());
    let big = "7".repeat(MAX_ID_LIST_BYTES + 1);
    let e = parse_visible_devices(&big, ENV).unwrap_err();
    assert!(e.to_string().contains("64 KiB"), "{e}");
}
