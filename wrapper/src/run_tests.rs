use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::json;

use super::*;
use crate::entry::prepare;
use crate::error::NodeError;
use gpuhook_cdi::Spec;
use gpuhook_request::RequestError;

const SPEC: &str = r#"{
  "cdiVersion": "0.5.0",
  "kind": "nvidia.com/gpu",
  "containerEdits": {
    "env": ["NVIDIA_GPUHOOK=1"],
    "hooks": [{"hookName": "createContainer", "path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "cdi-hook", "update-ldcache"]}]
  },
  "devices": [
    {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]}},
    {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}]}}
  ]
}"#;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    bundle: PathBuf,
    config: RuntimeConfig,
    runc: PathBuf,
}

fn oci_spec() -> Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"], "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
        "hooks": {"prestart": [
            {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}
        ]},
        "linux": {"namespaces": [{"type": "mount"}]}
    })
}

/// A bundle, a spec dir with [`SPEC`], and a fake `runc` that records its argv and environment.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let bundle = root.join("bundle");
    let cdi = root.join("cdi");
    let bin = root.join("bin");
    for d in [&bundle, &cdi, &bin] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&oci_spec()).unwrap(),
    )
    .unwrap();
    fs::set_permissions(
        bundle.join("config.json"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    fs::write(cdi.join("nvidia.com-gpu.json"), SPEC).unwrap();
    let runc = bin.join("runc");
    let record = root.join("record");
    gpuhook_fs::testing::write_executable(
        &runc,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {rec}.argv\nenv > {rec}.env\nexit 0\n",
            rec = record.display()
        ),
    )
    .unwrap();
    let config = RuntimeConfig {
        runtimes: vec!["runc".into()],
        spec_dirs: vec![root.join("no-such-dir"), cdi],
        path_env: Some(bin.into_os_string()),
        self_exe: Some(std::env::current_exe().unwrap()),
    };
    Fixture {
        _tmp: tmp,
        root,
        bundle,
        config,
        runc,
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn create_argv(f: &Fixture) -> Vec<OsString> {
    let b = f.bundle.to_str().unwrap();
    os(&[
        "gpuhook-runtime",
        "--root",
        "/r",
        "create",
        "--bundle",
        b,
        "ctr1",
    ])
}

/// Request: the devices in NVIDIA_VISIBLE_DEVICES as `nvidia.com/gpu=<id>`.
fn env_request(spec: &Value) -> Result<Vec<String>, InjectionError> {
    let env = spec["process"]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(env
        .iter()
        .filter_map(|e| e.as_str()?.strip_prefix("NVIDIA_VISIBLE_DEVICES="))
        .flat_map(|v| v.split(',').map(|id| format!("nvidia.com/gpu={id}")))
        .collect())
}

fn set_env(f: &Fixture, value: &str) {
    let mut spec = oci_spec();
    spec["process"]["env"][1] = json!(format!("NVIDIA_VISIBLE_DEVICES={value}"));
    fs::write(
        f.bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
}

fn read_spec(f: &Fixture) -> Value {
    serde_json::from_slice(&fs::read(f.bundle.join("config.json")).unwrap()).unwrap()
}

#[test]
fn create_injects_devices_removes_legacy_hook_and_keeps_mode() {
    let f = fixture();
    let plan = prepare(&create_argv(&f), &f.config, &env_request, None).unwrap();
    assert_eq!(plan.program, f.runc);
    assert_eq!(plan.argv[1..], create_argv(&f)[1..]);
    let spec = read_spec(&f);
    assert_eq!(spec["linux"]["devices"][0]["path"], "/dev/nvidia0");
    assert_eq!(spec["linux"]["devices"][0]["major"], 195);
    assert_eq!(spec["linux"]["devices"].as_array().unwrap().len(), 1);
    assert!(spec["process"]["env"]
        .as_array()
        .unwrap()
        .contains(&json!("NVIDIA_GPUHOOK=1")));
    assert!(
        spec["hooks"].get("prestart").is_none(),
        "legacy hook left: {spec}"
    );
    assert_eq!(spec["hooks"]["createContainer"][0]["args"][1], "cdi-hook");
    // Unrelated fields survive.
    assert_eq!(spec["linux"]["namespaces"], json!([{"type": "mount"}]));
    let meta = fs::metadata(f.bundle.join("config.json")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(
        fs::read_dir(&f.bundle).unwrap().count(),
        1,
        "temp file left"
    );
}

#[test]
fn run_command_with_an_inline_short_bundle_flag() {
    let f = fixture();
    set_env(&f, "1");
    let b = f.bundle.to_str().unwrap();
    let argv = os(&[
        "x",
        "--log-format=json",
        "run",
        "-d",
        &format!("-b={b}"),
        "c",
    ]);
    prepare(&argv, &f.config, &env_request, None).unwrap();
    assert_eq!(read_spec(&f)["linux"]["devices"][0]["path"], "/dev/nvidia1");
}

#[test]
fn non_gpu_container_is_not_rewritten() {
    let f = fixture();
    let p = f.bundle.join("config.json");
    let before = fs::read(&p).unwrap();
    let ino = fs::metadata(&p).unwrap().ino();
    let none = |_: &Value| -> Result<Vec<String>, InjectionError> { Ok(vec![]) };
    let plan = prepare(&create_argv(&f), &f.config, &none, None).unwrap();
    assert_eq!(plan.program, f.runc);
    assert_eq!(fs::read(&p).unwrap(), before);
    assert_eq!(fs::metadata(&p).unwrap().ino(), ino, "file was replaced");
}

#[test]
fn unresolvable_devices_leave_config_untouched() {
    let f = fixture();
    set_env(&f, "0,7,8");
    let p = f.bundle.join("config.json");
    let before = fs::read(&p).unwrap();
    let err = prepare(&create_argv(&f), &f.config, &env_request, None).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("unresolvable CDI devices nvidia.com/gpu=7, nvidia.com/gpu=8"),
        "{msg}"
    );
    assert!(msg.contains("gpuhook cdi generate"), "{msg}");
    assert_eq!(fs::read(&p).unwrap(), before);
}

#[test]
fn request_and_spec_errors_name_each_cause_once_and_leave_config_untouched() {
    let f = fixture();
    let p = f.bundle.join("config.json");
    let before = fs::read(&p).unwrap();
    let failing = |_: &Value| -> Result<Vec<String>, InjectionError> {
        Err(RequestError::InvalidValue {
            variable: "NVIDIA_VISIBLE_DEVICES".into(),
            reason: "bad".into(),
        }
        .into())
    };
    let err = prepare(&create_argv(&f), &f.config, &failing, None).unwrap_err();
    assert!(matches!(err, RuntimeError::Request { .. }));
    assert!(err
        .to_string()
        .contains("invalid NVIDIA_VISIBLE_DEVICES: bad"));
    // Each cause is printed once (the request's, below the parser's).
    let text = chain(&err);
    assert_eq!(
        text.matches("invalid NVIDIA_VISIBLE_DEVICES").count(),
        1,
        "{text}"
    );
    assert_eq!(fs::read(&p).unwrap(), before);

    fs::write(&p, b"{not json").unwrap();
    let err = prepare(&create_argv(&f), &f.config, &env_request, None).unwrap_err();
    assert!(matches!(err, RuntimeError::ParseSpec { .. }), "{err}");
    let parser = serde_json::from_slice::<Value>(b"{not json").unwrap_err();
    let text = chain(&err);
    assert_eq!(text.matches(&parser.to_string()).count(), 1, "{text}");
    assert_eq!(fs::read(&p).unwrap(), b"{not json");

    // A device node that cannot be described: apply fails, nothing written.
    let edits: ContainerEdits = serde_json::from_value(json!({
        "deviceNodes": [{"path": "/dev/x", "hostPath": f.root.join("nope").to_str().unwrap()}]
    }))
    .unwrap();
    fs::write(&p, &before).unwrap();
    let req = |_: &Value| -> Result<Option<Injection>, InjectionError> {
        Ok(Some(Injection::Edits(Box::new(edits.clone()))))
    };
    struct R<F>(F);
    impl<F: Fn(&Value) -> Result<Option<Injection>, InjectionError>> DeviceRequest for R<F> {
        fn injection(
            &self,
            _: &Path,
            _: Option<&str>,
            spec: &Value,
        ) -> Result<Option<Injection>, InjectionError> {
            (self.0)(spec)
        }
    }
    let err = prepare(&create_argv(&f), &f.config, &R(req), None).unwrap_err();
    assert!(matches!(err, RuntimeError::Apply { .. }), "{err}");
    assert_eq!(fs::read(&p).unwrap(), before);
}

#[test]
fn generate_missing_fills_only_the_gaps() {
    let f = fixture();
    set_env(&f, "0,5");
    let seen = std::cell::RefCell::new(Vec::new());
    let generate = |missing: &[String]| -> Result<Vec<Spec>, NodeError> {
        seen.borrow_mut().extend_from_slice(missing);
        let mut spec: Spec = serde_json::from_str(SPEC).unwrap();
        spec.devices.truncate(1);
        spec.devices[0].name = "5".into();
        spec.devices[0].container_edits.device_nodes[0].path = "/dev/nvidia5".into();
        spec.devices[0].container_edits.device_nodes[0].minor = Some(5);
        Ok(vec![spec])
    };
    prepare(&create_argv(&f), &f.config, &env_request, Some(&generate)).unwrap();
    assert_eq!(*seen.borrow(), ["nvidia.com/gpu=5"]);
    let paths: Vec<Value> = read_spec(&f)["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].clone())
        .collect();
    assert_eq!(paths, [json!("/dev/nvidia0"), json!("/dev/nvidia5")]);

    // A generator that cannot help: still unresolvable, untouched.
    set_env(&f, "9");
    let before = fs::read(f.bundle.join("config.json")).unwrap();
    let nothing = |_: &[String]| -> Result<Vec<Spec>, NodeError> { Ok(vec![]) };
    let err = prepare(&create_argv(&f), &f.config, &env_request, Some(&nothing)).unwrap_err();
    assert!(matches!(err, RuntimeError::Unresolvable { .. }));
    assert_eq!(fs::read(f.bundle.join("config.json")).unwrap(), before);
}

#[test]
fn other_commands_touch_nothing() {
    let f = fixture();
    let panicking = |_: &Value| -> Result<Vec<String>, InjectionError> { panic!("request called") };
    for cmd in ["start", "delete", "state", "kill"] {
        let argv = os(&["x", "--root", "/r", cmd, "--bundle", "/nonexistent", "id"]);
        let plan = prepare(&argv, &f.config, &panicking, None).unwrap();
        assert_eq!(plan.argv[1..], argv[1..]);
    }
}

#[test]
fn no_runtime_but_ourselves_is_an_error() {
    let mut f = fixture();
    f.config.self_exe = Some(f.runc.clone());
    let argv = os(&["x", "start", "id"]);
    let none = |_: &Value| -> Result<Vec<String>, InjectionError> { Ok(vec![]) };
    let err = prepare(&argv, &f.config, &none, None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("no OCI runtime found"), "{msg}");
    assert!(
        msg.contains("because it is gpuhook-runtime itself"),
        "{msg}"
    );
}

/// Issue #14.11: a huge `config.json` (700 MB, sparse) is refused from its size with one clear
/// error, before anything is read into memory; the bundle is left as it was.
#[test]
fn huge_config_json_is_refused_without_reading_it() {
    let f = fixture();
    let path = f.bundle.join("config.json");
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(700 << 20).unwrap();
    let request = |_: &Value| -> Result<Vec<String>, InjectionError> { Ok(vec![]) };
    let err = edit_bundle(&f.bundle, None, &f.config, &request, None).unwrap_err();
    assert!(matches!(err, RuntimeError::ReadSpec(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("larger than the limit of 4194304 bytes"),
        "{msg}"
    );
    assert!(msg.contains("config.json"), "{msg}");
    assert_eq!(fs::metadata(&path).unwrap().len(), 700 << 20);
}

/// Issue #14.11: a container asking for thousands of unknown devices gets an error that lists a
/// bounded number of them (and counts the rest), not a message as large as its request.
#[test]
fn unresolvable_error_lists_a_bounded_number_of_names() {
    let f = fixture();
    let many = |_: &Value| -> Result<Vec<String>, InjectionError> {
        Ok((0..4000).map(|i| format!("nvidia.com/gpu={i}x")).collect())
    };
    let err = edit_bundle(&f.bundle, None, &f.config, &many, None).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("unresolvable CDI devices nvidia.com/gpu=0x, "),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("and {} more", 4000 - MAX_NAMES_SHOWN)),
        "{msg}"
    );
    assert!(msg.len() < 1000, "{} bytes", msg.len());
}

#[path = "entry_tests.rs"]
mod entry;

#[path = "run_injection_tests.rs"]
mod injection;

/// The error and its `source()` chain joined as `{:#}` prints it (anyhow, a caller's log).
fn chain(e: &dyn std::error::Error) -> String {
    std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
