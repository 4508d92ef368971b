use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

use serde_json::json;

use super::*;
use crate::entry::{main_with, prepare, report_error};
use crate::error::EXIT_FAILURE;
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
    fs::write(
        &runc,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {rec}.argv\nenv > {rec}.env\nexit 0\n",
            rec = record.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&runc, fs::Permissions::from_mode(0o755)).unwrap();
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
fn request_errors_and_bad_specs_leave_config_untouched() {
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
    assert_eq!(fs::read(&p).unwrap(), before);

    fs::write(&p, b"{not json").unwrap();
    let err = prepare(&create_argv(&f), &f.config, &env_request, None).unwrap_err();
    assert!(matches!(err, RuntimeError::ParseSpec { .. }), "{err}");
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

#[test]
fn report_error_writes_runc_log_in_both_formats() {
    let f = fixture();
    let log = f.root.join("log.json");
    let argv = os(&[
        "x",
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "id",
    ]);
    report_error(&argv, &"unresolvable CDI devices nvidia.com/gpu=7");
    let line: Value = serde_json::from_str(fs::read_to_string(&log).unwrap().trim()).unwrap();
    assert_eq!(line["level"], "error");
    assert_eq!(
        line["msg"],
        "gpuhook-runtime: unresolvable CDI devices nvidia.com/gpu=7"
    );
    // Even when the command line itself was the problem.
    let text = f.root.join("log.txt");
    let argv = os(&[
        "x",
        "--weird",
        "v",
        "--log",
        text.to_str().unwrap(),
        "create",
    ]);
    report_error(&argv, &"boom");
    let t = fs::read_to_string(&text).unwrap();
    assert!(
        t.contains("level=error msg=\"gpuhook-runtime: boom\""),
        "{t}"
    );
}

const CHILD_ENV: &str = "GPUHOOK_RUNTIME_TEST_CHILD";

/// Runs in a child test process (see [`exec_replaces_the_process`]): runs the wrapper, which
/// execs the fake runtime or exits with an error.
#[test]
fn exec_child() {
    let Some(spec) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let spec: Value = serde_json::from_str(spec.to_str().unwrap()).unwrap();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let config = RuntimeConfig {
        runtimes: vec!["runc".into()],
        spec_dirs: strs(&spec["dirs"]).into_iter().map(PathBuf::from).collect(),
        path_env: Some(spec["path"].as_str().unwrap().into()),
        self_exe: None,
    };
    let argv: Vec<OsString> = strs(&spec["argv"])
        .into_iter()
        .map(OsString::from)
        .collect();
    main_with(&argv, &config, &env_request, &Extensions::default());
}

fn spawn_child(f: &Fixture, argv: &[OsString]) -> std::process::Output {
    let spec = json!({
        "dirs": f.config.spec_dirs,
        "path": f.config.path_env.as_ref().unwrap().to_str().unwrap(),
        "argv": argv.iter().map(|a| a.to_str().unwrap()).collect::<Vec<_>>(),
    });
    Command::new(std::env::current_exe().unwrap())
        .args([
            "run::tests::exec_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec.to_string())
        .env("LD_LIBRARY_PATH", "/nonexistent-gpuhook-test")
        .output()
        .unwrap()
}

#[test]
fn exec_replaces_the_process_with_the_original_argv() {
    let f = fixture();
    let argv = create_argv(&f);
    let out = spawn_child(&f, &argv);
    assert!(out.status.success(), "{out:?}");
    let recorded = fs::read_to_string(f.root.join("record.argv")).unwrap();
    let want: Vec<&str> = argv[1..].iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(recorded.lines().collect::<Vec<_>>(), want);
    let env = fs::read_to_string(f.root.join("record.env")).unwrap();
    assert!(
        !env.contains("LD_LIBRARY_PATH"),
        "LD_LIBRARY_PATH passed on"
    );
    assert_eq!(read_spec(&f)["linux"]["devices"][0]["path"], "/dev/nvidia0");

    // Passthrough: `delete` execs with the same argv and no bundle needed.
    let argv = os(&[
        "gpuhook-runtime",
        "--root",
        "/r",
        "delete",
        "--force",
        "ctr1",
    ]);
    let out = spawn_child(&f, &argv);
    assert!(out.status.success(), "{out:?}");
    let recorded = fs::read_to_string(f.root.join("record.argv")).unwrap();
    assert_eq!(recorded, "--root\n/r\ndelete\n--force\nctr1\n");
}

#[test]
fn failure_exits_1_and_reaches_the_log_without_running_the_runtime() {
    let f = fixture();
    set_env(&f, "7");
    let log = f.root.join("log.json");
    let b = f.bundle.to_str().unwrap();
    let argv = os(&[
        "gpuhook-runtime",
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        b,
        "c",
    ]);
    let out = spawn_child(&f, &argv);
    assert_eq!(out.status.code(), Some(EXIT_FAILURE), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unresolvable CDI devices nvidia.com/gpu=7"),
        "{stderr}"
    );
    let log = fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("unresolvable CDI devices nvidia.com/gpu=7"),
        "{log}"
    );
    assert!(!f.root.join("record.argv").exists(), "runtime ran");
}

struct EditsRequest(ContainerEdits);

impl DeviceRequest for EditsRequest {
    fn injection(
        &self,
        _: &Path,
        _: Option<&str>,
        _: &Value,
    ) -> Result<Option<Injection>, InjectionError> {
        Ok(Some(Injection::Edits(Box::new(self.0.clone()))))
    }
}

#[test]
fn legacy_mode_edits_replace_an_old_hook_with_exactly_one_new_one() {
    let f = fixture();
    let mut spec = oci_spec();
    spec["hooks"]["prestart"] = json!([
        {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "prestart"]},
        {"path": "/usr/bin/keep-me"}
    ]);
    fs::write(
        f.bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    let edits: ContainerEdits = serde_json::from_value(json!({"hooks": [{
        "hookName": "prestart",
        "path": "/usr/local/bin/gpuhook",
        "args": ["gpuhook", "prestart"],
        "env": ["PATH=/usr/bin:/bin"]
    }]}))
    .unwrap();
    prepare(&create_argv(&f), &f.config, &EditsRequest(edits), None).unwrap();
    let hooks = read_spec(&f)["hooks"]["prestart"].clone();
    assert_eq!(
        hooks,
        json!([
            {"path": "/usr/bin/keep-me"},
            {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "prestart"], "env": ["PATH=/usr/bin:/bin"]}
        ])
    );
}

#[test]
fn an_empty_cdi_request_is_no_request() {
    let f = fixture();
    let p = f.bundle.join("config.json");
    let before = fs::read(&p).unwrap();
    struct Empty;
    impl DeviceRequest for Empty {
        fn injection(
            &self,
            _: &Path,
            _: Option<&str>,
            _: &Value,
        ) -> Result<Option<Injection>, InjectionError> {
            Ok(Some(Injection::Cdi(vec![])))
        }
    }
    prepare(&create_argv(&f), &f.config, &Empty, None).unwrap();
    // Not rewritten: the legacy hook is still there.
    assert_eq!(fs::read(&p).unwrap(), before);
}

#[test]
fn applying_the_same_devices_again_changes_nothing() {
    // containerd 1.7 with enable_cdi may already have applied the pod's devices.
    let f = fixture();
    set_env(&f, "0,1");
    prepare(&create_argv(&f), &f.config, &env_request, None).unwrap();
    let once = read_spec(&f);
    assert_eq!(
        once["hooks"]["createContainer"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        once["linux"]["resources"]["devices"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    prepare(&create_argv(&f), &f.config, &env_request, None).unwrap();
    assert_eq!(read_spec(&f), once);
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
