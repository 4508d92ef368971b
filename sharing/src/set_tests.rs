//! Config-set selection, as NVIDIA's config-manager chooses (`updateConfigName`).
use super::*;

const TS: &str = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 8}\n";

fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(t.path().join(name), text).unwrap();
    }
    t
}

#[test]
fn the_label_picks_its_config_and_an_unknown_one_is_an_error() {
    let t = dir(&[("l20", TS), ("t4", "flags: {migStrategy: none}\n")]);
    let set = load_config_set(t.path()).unwrap();
    assert_eq!(set.names().collect::<Vec<_>>(), ["l20", "t4"]);
    let (name, c) = set.select(Some("l20")).unwrap();
    assert_eq!(name, "l20");
    assert_eq!(
        c.sharing.time_slicing.as_ref().unwrap().resources[0].replicas,
        8
    );
    let e = set.select(Some("a100")).unwrap_err().to_string();
    assert!(
        e.starts_with("node label nvidia.com/device-plugin.config=a100: no config of that name"),
        "{e}"
    );
    assert!(
        e.contains("available: l20, t4") && e.contains("fix the label"),
        "{e}"
    );
    // Two configs, none named default, no label: NVIDIA's fallbacks (named, single) all fail.
    let e = set.select(None).unwrap_err().to_string();
    assert!(
        e.contains("no nvidia.com/device-plugin.config label"),
        "{e}"
    );
    // An empty label value is no label.
    assert!(set.select(Some("")).is_err());
}

#[test]
fn without_a_label_default_then_named_then_single() {
    let t = dir(&[("default", TS), ("t4", "version: v1\n")]);
    let set = load_config_set(t.path()).unwrap();
    assert_eq!(set.select(None).unwrap().0, "default");
    let set = set.with_default_config(Some("t4".into()));
    assert_eq!(set.select(None).unwrap().0, "t4");
    let missing = set.clone().with_default_config(Some("a100".into()));
    let e = missing.select(None).unwrap_err().to_string();
    assert!(
        e.starts_with("default config a100: no config of that name"),
        "{e}"
    );
    assert_eq!(set.select(Some("default")).unwrap().0, "default");
    let one = dir(&[("only", TS)]);
    let set = load_config_set(one.path()).unwrap();
    assert_eq!(set.select(None).unwrap().0, "only");
    let set = set.with_fallbacks(vec![Fallback::Named]);
    assert!(set.select(None).is_err());
    let set = set.with_fallbacks(vec![Fallback::Named, Fallback::Empty]);
    let (name, c) = set.select(None).unwrap();
    assert_eq!((name, c), ("", &Config::default()));
}

#[test]
fn configmap_volume_internals_and_directories_are_not_configs() {
    let t = dir(&[("a", TS)]);
    std::fs::create_dir(t.path().join("..2025_11_25_data")).unwrap();
    std::fs::create_dir(t.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..2025_11_25_data", t.path().join("..data")).unwrap();
    std::fs::write(t.path().join("..2025_11_25_data/b"), TS).unwrap();
    std::os::unix::fs::symlink("..data/b", t.path().join("b")).unwrap();
    let set = load_config_set(t.path()).unwrap();
    assert_eq!(set.names().collect::<Vec<_>>(), ["a", "b"]);
    let empty = tempfile::tempdir().unwrap();
    let e = load_config_set(empty.path()).unwrap_err().to_string();
    assert!(e.contains("holds no config file"), "{e}");
}

#[test]
fn a_broken_config_fails_only_the_nodes_that_select_it_naming_file_key_and_value() {
    let bad = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 1}\n";
    let t = dir(&[("good", TS), ("bad", bad)]);
    let set = load_config_set(t.path()).unwrap();
    assert!(set.select(Some("good")).is_ok());
    let e = set.select(Some("bad")).unwrap_err().to_string();
    let file = t.path().join("bad").display().to_string();
    assert!(e.contains(&file), "{e}");
    assert!(
        e.contains("sharing.timeSlicing.resources[0].replicas"),
        "{e}"
    );
    assert!(e.contains("got 1"), "{e}");
    assert_eq!(set.errors().len(), 1);
}

#[test]
fn one_file_is_the_config_whatever_the_label() {
    let t = dir(&[("config.yaml", TS)]);
    let set = load_config_set(&t.path().join("config.yaml")).unwrap();
    assert_eq!(set.select(Some("t4")).unwrap().0, "config.yaml");
    assert_eq!(set.select(None).unwrap().0, "config.yaml");
    std::fs::write(t.path().join("v2.yaml"), "version: v2\n").unwrap();
    let e = load_config_set(&t.path().join("v2.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("v2.yaml") && e.contains("version") && e.contains("unknown version: v2"),
        "{e}"
    );
    let e = load_config_set(&t.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn an_unreadable_config_names_its_file_once() {
    let t = dir(&[("good", TS)]);
    std::fs::write(t.path().join("binary"), [0xff, 0xfe, 0x00]).unwrap();
    let set = load_config_set(t.path()).unwrap();
    let e = set.select(Some("binary")).unwrap_err().to_string();
    let file = t.path().join("binary").display().to_string();
    assert_eq!(e.matches(&file).count(), 1, "{e}");
    assert!(e.contains("not UTF-8"), "{e}");
}

/// A missing config names the file and the OS error once, printed alone or as a `source()`
/// chain (`gpu-mps-daemon check --config missing` printed the OS error twice).
#[test]
fn a_missing_config_prints_its_cause_once() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("missing");
    let err = load_config_set(&missing).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    let os = std::io::Error::from_raw_os_error(libc::ENOENT).to_string();
    let chain: Vec<String> =
        std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect();
    let text = chain.join(": ");
    assert_eq!(text.matches(&os).count(), 1, "{text}");
    assert_eq!(text.matches(missing.to_str().unwrap()).count(), 1, "{text}");
}
