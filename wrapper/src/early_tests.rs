//! When the wrapper takes over the setup hook, and how it rewrites the spec (no root needed: the
//! refusals happen before anything is started, and the rewrite is checked on its own).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{binds, EarlySetupTakeover};
use crate::NodeState;
use gpuhook::config::Config;

struct Fixture {
    tmp: tempfile::TempDir,
    config: Config,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("gpuhook"), "").unwrap();
        let config = Config {
            driver_root: tmp.path().to_path_buf(),
            ..Config::default()
        };
        Fixture { tmp, config }
    }

    fn gpuhook(&self) -> PathBuf {
        self.tmp.path().join("gpuhook")
    }

    fn setup_hook(&self, extra: &[&str]) -> Value {
        let mut args = vec![
            "gpuhook",
            "hook",
            "setup",
            "--link",
            "libcuda.so.1::/usr/lib/libcuda.so",
        ];
        args.extend(["--folder", "/usr/lib", "--disable-device-node-modification"]);
        args.extend(extra);
        json!({"path": self.gpuhook(), "args": args, "env": ["PATH=/usr/bin:/bin"]})
    }

    fn spec(&self, hooks: Value) -> Value {
        json!({
            "root": {"path": "rootfs"},
            "process": {"user": {"uid": 1000, "gid": 1000}},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/dev/nvidia-caps-x", "type": "bind", "source": "/dev/null",
                 "options": ["bind"]},
                {"destination": "/usr/lib/libcuda.so.1.2", "source": "/host/libcuda.so.1.2",
                 "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]},
                {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rw"]}
            ],
            "hooks": hooks,
            "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]}
        })
    }

    fn plan_error(&self, spec: &Value) -> String {
        let node = NodeState::new(&self.config).with_gpuhook_path(self.gpuhook());
        let t = EarlySetupTakeover::new(&self.config, &node);
        match t.plan(Path::new("/bundle"), spec) {
            Ok(_) => "taken over".into(),
            Err(e) => e.to_string(),
        }
    }
}

#[test]
fn binds_in_spec_order_without_those_under_pseudo_filesystems() {
    let f = Fixture::new();
    let got = binds(&f.spec(json!({}))).unwrap();
    let dsts: Vec<(&Path, bool)> = got
        .iter()
        .map(|b| (b.destination.as_path(), b.read_only))
        .collect();
    assert_eq!(
        dsts,
        [
            (Path::new("/usr/lib/libcuda.so.1.2"), true),
            (Path::new("/data"), false)
        ]
    );
    let mut bad = f.spec(json!({}));
    bad["mounts"][3]["source"] = "relative/lib".into();
    assert!(binds(&bad)
        .unwrap_err()
        .to_string()
        .contains("absolute source"));
}

#[test]
fn takes_over_only_our_one_setup_hook_in_a_plain_mount_namespace() {
    let f = Fixture::new();
    let ours = f.setup_hook(&[]);
    let plan = |hooks: Value| f.plan_error(&f.spec(hooks));
    assert_eq!(
        plan(json!({"createContainer": [ours.clone()]})),
        "taken over"
    );
    // Another hook before the container could change the root first.
    let other = json!({"path": "/usr/bin/other-hook", "args": ["other-hook"]});
    assert!(plan(json!({"createContainer": [ours.clone(), other.clone()]})).contains("2 hooks"));
    assert!(
        plan(json!({"prestart": [other.clone()], "createContainer": [ours.clone()]}))
            .contains("2 hooks")
    );
    // Later phases do not matter.
    assert_eq!(
        plan(json!({"createContainer": [ours.clone()], "poststop": [other.clone()]})),
        "taken over"
    );
    // Ours in the wrong phase, someone else's binary, arguments our parser refuses.
    assert!(plan(json!({"prestart": [ours.clone()]})).contains("not just one createContainer"));
    let mut theirs = ours.clone();
    theirs["path"] = "/opt/other/gpuhook".into();
    assert!(plan(json!({"createContainer": [theirs]})).contains("not our"));
    let odd = f.setup_hook(&["--unknown-flag"]);
    assert!(plan(json!({"createContainer": [odd]})).contains("not our"));
    let own_spec = f.setup_hook(&["--container-spec", "/x/config.json"]);
    assert!(plan(json!({"createContainer": [own_spec]})).contains("--container-spec"));
    assert!(plan(json!({})).contains("0 hooks"));

    // Namespaces: a new mount namespace, and no user namespace at all.
    let mut spec = f.spec(json!({"createContainer": [ours.clone()]}));
    spec["linux"]["namespaces"] = json!([{"type": "mount", "path": "/proc/1/ns/mnt"}]);
    assert!(f.plan_error(&spec).contains("no new mount namespace"));
    spec["linux"]["namespaces"] = json!([{"type": "mount"}, {"type": "user"}]);
    assert!(f.plan_error(&spec).contains("user namespace"));
    spec["linux"]["namespaces"] = json!([{"type": "mount"}, {"type": "user", "path": "/x"}]);
    assert!(f.plan_error(&spec).contains("user namespace"));
}

#[test]
fn the_plan_is_the_hooks_arguments_with_the_container_user() {
    let f = Fixture::new();
    let node = NodeState::new(&f.config).with_gpuhook_path(f.gpuhook());
    let t = EarlySetupTakeover::new(&f.config, &node);
    let spec = f.spec(json!({"createContainer": [f.setup_hook(&["--ldconfig-path", "/sbin/x"])]}));
    let (plan, args) = t.plan(Path::new("/bundle"), &spec).unwrap();
    assert_eq!(plan.rootfs, Path::new("/bundle/rootfs"));
    assert_eq!(
        plan.links,
        [(
            PathBuf::from("libcuda.so.1"),
            PathBuf::from("/usr/lib/libcuda.so")
        )]
    );
    assert_eq!(plan.folders, [PathBuf::from("/usr/lib")]);
    assert_eq!(plan.ldconfig, Path::new("/sbin/x"));
    assert_eq!((plan.ldcache.uid, plan.ldcache.gid), (1000, 1000));
    assert_eq!(plan.binds.len(), 2);
    assert!(args.disable_device_node_modification);
}

#[test]
fn the_hook_goes_or_keeps_only_the_params_override() {
    let f = Fixture::new();
    let node = NodeState::new(&f.config).with_gpuhook_path(f.gpuhook());
    let params = f.tmp.path().join("params");
    let t = EarlySetupTakeover::new(&f.config, &node).with_host_params(params.clone());
    let other = json!({"path": "/usr/bin/other-hook"});
    let hooks = json!({"createContainer": [f.setup_hook(&[])], "poststop": [other]});
    let (_, args) = t
        .plan(Path::new("/bundle"), &f.spec(hooks.clone()))
        .unwrap();

    // No NVIDIA params on the host: the hook would do nothing; only the other phase stays.
    let mut spec = f.spec(hooks.clone());
    t.rewrite_hooks(&mut spec, &args);
    assert_eq!(
        spec["hooks"],
        json!({"poststop": [{"path": "/usr/bin/other-hook"}]})
    );
    let mut alone = f.spec(json!({"createContainer": [f.setup_hook(&[])]}));
    t.rewrite_hooks(&mut alone, &args);
    assert!(alone.get("hooks").is_none(), "{alone}");

    // With them: a params-only `hook setup`, same binary and environment.
    std::fs::write(&params, "ModifyDeviceFiles: 1\n").unwrap();
    let mut spec = f.spec(hooks);
    t.rewrite_hooks(&mut spec, &args);
    let hook = &spec["hooks"]["createContainer"][0];
    assert_eq!(
        hook["args"],
        json!([
            "gpuhook",
            "hook",
            "setup",
            "--disable-device-node-modification"
        ])
    );
    assert_eq!(hook["path"], json!(f.gpuhook()));
    assert_eq!(hook["env"], json!(["PATH=/usr/bin:/bin"]));
}

#[test]
fn early_setup_off_leaves_the_spec_alone() {
    let mut f = Fixture::new();
    f.config.runtime.early_setup = false;
    let node = NodeState::new(&f.config).with_gpuhook_path(f.gpuhook());
    let t = EarlySetupTakeover::new(&f.config, &node);
    let mut spec = f.spec(json!({"createContainer": [f.setup_hook(&[])]}));
    let before = spec.clone();
    use crate::takeover::HookTakeover;
    assert!(t
        .take_over(Path::new("/bundle"), Some("c1"), &mut spec)
        .is_none());
    assert_eq!(spec, before);
}

/// Issue #17.6: whether the setup hook was taken over, and why not, is a decision line at the
/// default level (it used to be a debug line nobody saw).
#[test]
fn a_hook_left_to_runc_is_a_decision_line_with_the_reason() {
    use crate::takeover::HookTakeover;

    use gpuhook::logging::{self, LogFormat, LogSettings};
    let f = Fixture::new();
    let log = f.tmp.path().join("log.json");
    let gpuhook = f.gpuhook();
    let settings = LogSettings {
        file: Some(log.clone()),
        format: LogFormat::Json,
        ..LogSettings::default()
    };
    let mut spec = f.spec(json!({}));
    let take = |config: &Config, spec: &mut Value| {
        let node = NodeState::new(config).with_gpuhook_path(gpuhook.clone());
        let t = EarlySetupTakeover::new(config, &node);
        let sub = logging::subscriber(&settings).unwrap();
        tracing::subscriber::with_default(sub, || {
            t.take_over(Path::new("/bundle"), Some("c1"), spec)
                .is_none()
        })
    };
    assert!(take(&f.config, &mut spec));
    let mut off = f.config.clone();
    off.runtime.early_setup = false;
    assert!(take(&off, &mut spec));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (line, why) in lines.iter().zip(["0 hooks", "early-setup = false"]) {
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(line["target"], "gpuhook::decision");
        assert_eq!(line["fields"]["early_setup"], "stays-a-hook");
        assert_eq!(line["fields"]["container"], "c1");
        let reason = line["fields"]["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{reason}");
    }
}

/// The wrapper takes the hook over only when it does what `gpuhook hook setup` would: the CLI
/// (clap) and the wrapper ([`SetupHookArgs::from_args`]) read the generator's encoding alike.
#[test]
fn the_cli_and_the_wrapper_read_the_generators_setup_args_alike() {
    use clap::Parser;
    use gpuhook::cli::{Cli, Command, HookCommand};
    use gpuhook_cdi::edits::{SetupHookArgs, SetupLink, SetupMpsShare};

    let generated = SetupHookArgs {
        links: vec![SetupLink::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap()],
        ldconfig: Some("/sbin/ldconfig.real".into()),
        folders: vec!["/usr/lib64".into(), "/usr/lib/x86_64-linux-gnu".into()],
        disable_device_node_modification: true,
        cuda_compat_host_driver_version: Some("550.54.15".into()),
        application_profile: true,
        container_spec: None,
        mps_shares: vec![
            SetupMpsShare::parse("nvidia.com/gpu-mps=0::/run/gpuhook/mps/GPU-1/pipe").unwrap(),
        ],
    };
    let mut argv = vec!["gpuhook".to_string(), "hook".into(), "setup".into()];
    argv.extend(generated.to_args());
    let cli = Cli::try_parse_from(&argv).unwrap();
    let Command::Hook(HookCommand::Setup(args)) = cli.command else {
        panic!("not hook setup: {argv:?}");
    };
    assert_eq!(SetupHookArgs::from(&args), generated);
    assert_eq!(SetupHookArgs::from_args(&argv[3..]).unwrap(), generated);
}

/// The hook of an MPS share (`--mps-share`, gpu-mps-daemon's spec) is taken over only when the
/// share's start check passes for the container's user; otherwise the hook stays and refuses
/// the start itself.
#[test]
fn an_mps_share_hook_is_taken_over_only_when_its_check_passes() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let gpu = f.tmp.path().join("mps/GPU-1");
    let pipe = gpu.join("pipe");
    std::fs::create_dir_all(&pipe).unwrap();
    for d in [f.tmp.path(), &f.tmp.path().join("mps"), &gpu] {
        mode(d, 0o755).unwrap();
    }
    mode(&pipe, 0o777).unwrap();
    drop(std::os::unix::net::UnixListener::bind(pipe.join("control")).unwrap());
    mode(&pipe.join("control"), 0o777).unwrap();
    let share = format!("nvidia.com/gpu-mps=0::{}", pipe.display());
    let hook = f.setup_hook(&["--mps-share", &share]);
    let spec = f.spec(json!({"createContainer": [hook]}));
    // No ready file: the daemon is not ready, the hook stays (and refuses the start).
    let err = f.plan_error(&spec);
    assert!(
        err.contains("an MPS share of the hook") && err.contains("not ready"),
        "{err}"
    );
    let ready = json!({"uuid": "GPU-1", "pipeDirectory": pipe});
    std::fs::write(gpu.join("ready"), ready.to_string()).unwrap();
    assert_eq!(f.plan_error(&spec), "taken over");
    // `clientUser` another uid than the container's (1000): the hook stays.
    let ready = json!({"uuid": "GPU-1", "pipeDirectory": pipe, "clientUser": 2000});
    std::fs::write(gpu.join("ready"), ready.to_string()).unwrap();
    assert!(f.plan_error(&spec).contains("admits only uid 2000"));
}
