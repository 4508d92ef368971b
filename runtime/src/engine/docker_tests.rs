//! `runtime configure --runtime docker`. Expectations are NVIDIA's: the `daemon.json` their install
//! guide shows after `nvidia-ctk runtime configure --runtime=docker` (a `runtimes.nvidia` entry
//! `{"args": [], "path": ...}`, four-space indentation), `default-runtime` with
//! `--set-as-default`, `features.cdi = true` with `--cdi.enabled`, and their tests'
//! (`cmd/nvidia-ctk/runtime/configure/configure_test.go`: existing `log-driver`, `log-opts`,
//! `storage-driver` kept; `pkg/config/engine/docker/docker_test.go`: an existing runtime of that
//! name gets the new path, other runtimes are kept).

use std::fs;
use std::path::{Path, PathBuf};

use crate::configure::{ConfigureError, EXIT_CHANGED, EXIT_UNCHANGED};
use crate::engine::{configure_engine, Engine, EngineOptions};

fn opts(config: &Path) -> EngineOptions {
    EngineOptions {
        config: config.into(),
        runtime_name: "nvidia".into(),
        binary: "/usr/bin/nvidia-container-runtime".into(),
        ..EngineOptions::defaults(Engine::Docker)
    }
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("daemon.json");
    fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_new_daemon_json_is_nvidias_documented_one() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("etc/docker/daemon.json");
    let out = configure_engine(Engine::Docker, &opts(&cfg), false).unwrap();
    assert_eq!(out.exit_code(), EXIT_CHANGED);
    assert_eq!(
        fs::read_to_string(&cfg).unwrap(),
        "{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"args\": [],\n            \
         \"path\": \"/usr/bin/nvidia-container-runtime\"\n        }\n    }\n}\n"
    );
    // A second run changes nothing and says so with exit status 3.
    let again = configure_engine(Engine::Docker, &opts(&cfg), false).unwrap();
    assert_eq!(again.exit_code(), EXIT_UNCHANGED);
    assert!(again.files.is_empty());
}

#[test]
fn every_key_keeps_its_value_and_place_and_the_files_indentation() {
    let d = tempfile::tempdir().unwrap();
    let text = "{\n  \"storage-driver\": \"overlay2\",\n  \"log-opts\": {\"max-size\": \"100m\", \
                \"max-file\": \"3\"},\n  \"runtimes\": {\n    \"runsc\": {\"path\": \"/usr/bin/runsc\", \
                \"runtimeArgs\": [\"--platform=kvm\"]}\n  },\n  \"log-driver\": \"json-file\",\n  \
                \"features\": {\"buildkit\": true}\n}\n";
    let cfg = write(d.path(), text);
    let mut o = opts(&cfg);
    o.set_as_default = true;
    o.enable_cdi = true;
    configure_engine(Engine::Docker, &o, false).unwrap();
    let after = fs::read_to_string(&cfg).unwrap();
    let want = r#"{
  "storage-driver": "overlay2",
  "log-opts": {
    "max-size": "100m",
    "max-file": "3"
  },
  "runtimes": {
    "runsc": {
      "path": "/usr/bin/runsc",
      "runtimeArgs": [
        "--platform=kvm"
      ]
    },
    "nvidia": {
      "args": [],
      "path": "/usr/bin/nvidia-container-runtime"
    }
  },
  "log-driver": "json-file",
  "features": {
    "buildkit": true,
    "cdi": true
  },
  "default-runtime": "nvidia"
}
"#;
    assert_eq!(after, want);
    // The old file was saved beside it.
    let backups: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("daemon.json.bak."))
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(
        fs::read_to_string(d.path().join(&backups[0])).unwrap(),
        text
    );
}

#[test]
fn an_existing_runtime_gets_the_new_path_and_an_up_to_date_one_is_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(
        d.path(),
        "{\"default-runtime\": \"runc\", \"runtimes\": {\"nvidia\": {\"path\": \"runtime1\", \"args\": []}}}",
    );
    configure_engine(Engine::Docker, &opts(&cfg), false).unwrap();
    let v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&cfg).unwrap()).unwrap();
    assert_eq!(
        v["runtimes"]["nvidia"]["path"],
        "/usr/bin/nvidia-container-runtime"
    );
    // Not --set-as-default: the admin's default runtime stays (NVIDIA's "ALREADY_SET" case).
    assert_eq!(v["default-runtime"], "runc");
    // Same path, other details of the admin's: nothing to do, the compact file is not reformatted.
    let text = "{\"runtimes\":{\"nvidia\":{\"path\":\"/usr/bin/nvidia-container-runtime\",\"runtimeArgs\":[\"--debug\"]}}}";
    fs::write(&cfg, text).unwrap();
    let out = configure_engine(Engine::Docker, &opts(&cfg), false).unwrap();
    assert_eq!(out.exit_code(), EXIT_UNCHANGED);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), text);
}

#[test]
fn dry_run_prints_the_diff_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let text = "{\n    \"log-driver\": \"json-file\"\n}\n";
    let cfg = write(d.path(), text);
    let out = configure_engine(Engine::Docker, &opts(&cfg), true).unwrap();
    assert_eq!(out.exit_code(), EXIT_CHANGED);
    let s = out.summary();
    assert!(s.contains("+    \"runtimes\": {"), "{s}");
    assert!(s.contains("-    \"log-driver\": \"json-file\"\n"), "{s}");
    assert!(s.contains("+    \"log-driver\": \"json-file\",\n"), "{s}");
    assert!(s.contains("Dry run: nothing was written."), "{s}");
    assert_eq!(fs::read_to_string(&cfg).unwrap(), text);
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn bad_daemon_json_is_named_and_left_untouched() {
    let d = tempfile::tempdir().unwrap();
    for (text, want) in [
        ("{\"log-driver\": \"json-file\",", "cannot parse"),
        ("[1, 2]", "(the top level)` must be a JSON object"),
        ("{\"runtimes\": []}", "`runtimes` must be a JSON object"),
        ("{\"features\": true}", "`features` must be a JSON object"),
        (
            "{\"runtimes\": {}, \"runtimes\": {}}",
            "duplicate key \"runtimes\"",
        ),
    ] {
        let cfg = write(d.path(), text);
        let mut o = opts(&cfg);
        o.enable_cdi = true;
        let err = configure_engine(Engine::Docker, &o, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(err.contains(cfg.to_str().unwrap()), "{err}");
        assert!(err.contains("nothing was written"), "{err}");
        assert_eq!(fs::read_to_string(&cfg).unwrap(), text);
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no backup");
    }
}

#[test]
fn docker_has_no_drop_in_and_paths_must_be_absolute() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("daemon.json");
    let mut o = opts(&cfg);
    o.drop_in = Some(d.path().join("x.json"));
    let err = configure_engine(Engine::Docker, &o, false).unwrap_err();
    assert!(matches!(err, ConfigureError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("drop-in"), "{err}");
    let mut o = opts(&cfg);
    o.binary = "gpuhook-runtime".into();
    let err = configure_engine(Engine::Docker, &o, false).unwrap_err();
    assert!(err.to_string().contains("absolute"), "{err}");
    let mut o = opts(&cfg);
    o.runtime_name = "a b".into();
    assert!(configure_engine(Engine::Docker, &o, false).is_err());
    assert!(!cfg.exists());
}
