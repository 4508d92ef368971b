use std::fs;
use std::path::{Path, PathBuf};

use super::*;

/// A daemon.json with other keys, tabs and a key order no serializer would choose.
const DAEMON_JSON: &str = "{\n\t\"log-driver\": \"json-file\",\n\t\"runtimes\": {\n\t\t\"kata\": \
                           {\"path\": \"/usr/bin/kata-runtime\"}\n\t},\n\t\"data-root\": \
                           \"/srv/docker\"\n}\n";

fn docker_opts(dir: &Path) -> EngineOptions {
    EngineOptions {
        config: dir.join("etc/docker/daemon.json"),
        binary: dir.join("install/gpuhook-runtime"),
        ..EngineOptions::defaults(Engine::Docker)
    }
}

fn crio_opts(dir: &Path) -> EngineOptions {
    EngineOptions {
        config: dir.join("etc/crio/crio.conf"),
        drop_in: Some(dir.join("etc/crio/crio.conf.d/99-gpuhook.toml")),
        binary: dir.join("install/gpuhook-runtime"),
        ..EngineOptions::defaults(Engine::Crio)
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// daemon.json gets Docker's `runtimes.gpuhook = {"args": [], "path": <gpuhook-runtime>}` (as
/// nvidia-ctk writes its `nvidia` runtime) with every other key kept; the install records the
/// file and its backup; a second install changes nothing (no reload); uninstall restores the
/// file byte for byte and removes the backup.
#[test]
fn docker_daemon_json_is_restored_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = docker_opts(tmp.path());
    fs::create_dir_all(opts.config.parent().unwrap()).unwrap();
    fs::write(&opts.config, DAEMON_JSON).unwrap();
    let mut state = State::default();
    assert!(configure(Engine::Docker, &opts, &mut state).unwrap());

    let written: serde_json::Value =
        serde_json::from_slice(&fs::read(&opts.config).unwrap()).unwrap();
    assert_eq!(
        written["runtimes"]["gpuhook"],
        serde_json::json!({"args": [], "path": opts.binary}),
    );
    assert_eq!(written["runtimes"]["kata"]["path"], "/usr/bin/kata-runtime");
    assert_eq!(written["data-root"], "/srv/docker");
    assert_eq!(state.changed_files.len(), 1, "{state:?}");
    assert_eq!(state.changed_files[0].before, DAEMON_JSON.as_bytes());
    let etc_docker = files_under(opts.config.parent().unwrap());
    assert_eq!(
        etc_docker.len(),
        2,
        "daemon.json and its backup: {etc_docker:?}"
    );
    assert_eq!(state.created_files.len(), 1, "the backup: {state:?}");
    assert_eq!(
        fs::read(&state.created_files[0]).unwrap(),
        DAEMON_JSON.as_bytes()
    );

    let recorded = state.clone();
    assert!(
        !configure(Engine::Docker, &opts, &mut state).unwrap(),
        "a re-install on a configured daemon.json must report no change (no reload)"
    );
    assert_eq!(state, recorded);

    state.undo(&tmp.path().join("state.json")).unwrap();
    assert_eq!(fs::read(&opts.config).unwrap(), DAEMON_JSON.as_bytes());
    assert_eq!(
        files_under(opts.config.parent().unwrap()),
        std::slice::from_ref(&opts.config)
    );
    assert_eq!(docker_reload_keeps_runtime(&opts.config), None);
}

/// No daemon.json before: the install creates it (and /etc/docker), uninstall removes both, and
/// says that a SIGHUP then leaves dockerd's runtime list as it was.
#[test]
fn docker_daemon_json_created_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = docker_opts(tmp.path());
    let mut state = State::default();
    assert!(configure(Engine::Docker, &opts, &mut state).unwrap());
    assert!(opts.config.is_file());
    assert_eq!(state.created_files, std::slice::from_ref(&opts.config));
    state.undo(&tmp.path().join("state.json")).unwrap();
    assert!(!tmp.path().join("etc/docker").exists());
    let warning = docker_reload_keeps_runtime(&opts.config).unwrap();
    assert!(warning.contains("systemctl restart docker"), "{warning}");
}

/// CRI-O: the drop-in `[crio.runtime.runtimes.gpuhook]` (crio.conf(5)) with our binary as
/// `runtime_path`, `runtime_type = "oci"` and runc's `monitor_path` copied, in a directory the
/// install creates; crio.conf itself untouched; uninstall removes the drop-in and the directory.
#[test]
fn crio_drop_in_is_created_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = crio_opts(tmp.path());
    let crio_conf = "[crio.runtime]\ndefault_runtime = \"runc\"\n\n\
                     [crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\n\
                     monitor_path = \"/usr/libexec/crio/conmon\"\n";
    fs::create_dir_all(opts.config.parent().unwrap()).unwrap();
    fs::write(&opts.config, crio_conf).unwrap();
    let mut state = State::default();
    assert!(configure(Engine::Crio, &opts, &mut state).unwrap());

    let drop_in = opts.drop_in.clone().unwrap();
    let doc: toml_edit::DocumentMut = fs::read_to_string(&drop_in).unwrap().parse().unwrap();
    let table = &doc["crio"]["runtime"]["runtimes"]["gpuhook"];
    assert_eq!(table["runtime_path"].as_str(), opts.binary.to_str());
    assert_eq!(table["runtime_type"].as_str(), Some("oci"));
    assert_eq!(
        table["monitor_path"].as_str(),
        Some("/usr/libexec/crio/conmon")
    );
    assert_eq!(fs::read_to_string(&opts.config).unwrap(), crio_conf);
    assert_eq!(state.created_files, std::slice::from_ref(&drop_in));
    assert_eq!(
        state.created_dirs,
        [drop_in.parent().unwrap().to_path_buf()]
    );
    assert!(!configure(Engine::Crio, &opts, &mut state).unwrap());

    state.undo(&tmp.path().join("state.json")).unwrap();
    assert!(!drop_in.parent().unwrap().exists());
    assert_eq!(
        files_under(&tmp.path().join("etc")),
        std::slice::from_ref(&opts.config)
    );
}

/// A daemon.json edited after the install (an admin's new key): uninstall refuses, naming the
/// file and what to do, and changes nothing at all (not the file, not the backup, not the
/// CRI-O drop-in of the same install).
#[test]
fn a_daemon_json_edited_since_is_refused_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let docker = docker_opts(tmp.path());
    fs::create_dir_all(docker.config.parent().unwrap()).unwrap();
    fs::write(&docker.config, DAEMON_JSON).unwrap();
    let mut state = State::default();
    configure(Engine::Docker, &docker, &mut state).unwrap();
    configure(Engine::Crio, &crio_opts(tmp.path()), &mut state).unwrap();
    let edited =
        fs::read_to_string(&docker.config)
            .unwrap()
            .replacen('{', "{\n\t\"debug\": true,", 1);
    fs::write(&docker.config, &edited).unwrap();
    let before = files_under(tmp.path())
        .into_iter()
        .map(|p| (fs::read(&p).unwrap(), p))
        .collect::<Vec<_>>();

    let err = format!(
        "{:#}",
        state.undo(&tmp.path().join("state.json")).unwrap_err()
    );
    assert!(
        err.contains(docker.config.to_str().unwrap()) && err.contains("changed after"),
        "{err}"
    );
    let after = files_under(tmp.path())
        .into_iter()
        .map(|p| (fs::read(&p).unwrap(), p))
        .collect::<Vec<_>>();
    assert_eq!(after, before);
}

/// The installer's own flags map onto the library's options: the installed gpuhook-runtime,
/// CRI-O's drop-in by default (also for a bare `--drop-in`), daemon.json without one.
#[test]
fn install_flags_map_onto_the_engine_options() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: InstallArgs,
    }
    let parse = |extra: &[&str]| {
        let mut argv = vec!["x", "--install-dir", "/opt/gh"];
        argv.extend(extra);
        Cli::try_parse_from(argv).unwrap().args
    };
    let crio = options(&parse(&["--runtime", "crio"]), Engine::Crio);
    assert_eq!(crio.drop_in.as_deref(), Some(Path::new(CRIO_DROP_IN)));
    assert_eq!(crio.binary, Path::new("/opt/gh/gpuhook-runtime"));
    let bare = options(&parse(&["--runtime", "crio", "--drop-in"]), Engine::Crio);
    assert_eq!(bare.drop_in.as_deref(), Some(Path::new(CRIO_DROP_IN)));
    let docker = options(&parse(&["--runtime", "docker"]), Engine::Docker);
    assert_eq!(docker.config, Path::new("/etc/docker/daemon.json"));
    assert_eq!(docker.drop_in, None);
    assert_eq!(docker.runtime_name, "gpuhook");
}
