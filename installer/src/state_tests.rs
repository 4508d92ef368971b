use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::snapshot::{ensure_dir, Snapshot};

fn write(p: &Path, s: &str) {
    fs::write(p, s).unwrap();
}

fn snap(paths: &[PathBuf]) -> Snapshot {
    Snapshot::files(paths.iter().map(PathBuf::as_path)).unwrap()
}

#[test]
fn record_then_undo_restores_the_files_and_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("etc");
    fs::create_dir(&dir).unwrap();
    write(&dir.join("config.toml"), "version = 2\n");
    let new = tmp.path().join("new");
    let ours = [
        dir.join("config.toml"),
        dir.join("config.toml.bak.1"),
        new.join("spec.json"),
    ];
    let before = snap(&ours);
    let mut state = State::default();
    ensure_dir(&new, |d| state.add_dir(d)).unwrap();
    write(&new.join("spec.json"), "{}");
    write(&dir.join("config.toml"), "version = 2\n[runtime]\n");
    write(&dir.join("config.toml.bak.1"), "version = 2\n");
    state.record(&before, &snap(&ours));
    assert_eq!(state.created_dirs, std::slice::from_ref(&new));
    assert_eq!(state.created_files.len(), 2, "{state:?}");
    assert_eq!(state.changed_files.len(), 1);

    // A second install that changes the file again keeps the original content.
    let before2 = snap(&ours);
    write(&dir.join("config.toml"), "version = 2\n[runtime2]\n");
    state.record(&before2, &snap(&ours));
    assert_eq!(state.changed_files[0].before, b"version = 2\n");

    let state_file = tmp.path().join("state.json");
    state.save(&state_file).unwrap();
    let loaded = State::load(&state_file).unwrap().unwrap();
    assert_eq!(loaded, state);
    loaded.undo(&state_file).unwrap();
    assert_eq!(snap(&ours), before);
    assert!(!new.exists() && !state_file.exists());
}

/// Issue 22: the spec directory is shared (gpu-mps-daemon, a DRA driver). Files another tool
/// writes or rewrites there while gpuhook installs are not gpuhook's: uninstall neither removes
/// them, nor writes an old copy back, nor refuses because they changed again since.
#[test]
fn another_writers_files_in_a_shared_dir_are_not_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let cdi = tmp.path().join("cdi");
    fs::create_dir(&cdi).unwrap();
    write(&cdi.join("mps.json"), "v1");
    let ours = [cdi.join("nvidia.com-gpu.json")];
    let before = snap(&ours);
    // The install step, with another tool writing beside it meanwhile.
    write(&cdi.join("nvidia.com-gpu.json"), "gpuhook's spec");
    write(&cdi.join("dra-claim.json"), "another tool's");
    write(&cdi.join("mps.json"), "v2");
    let mut state = State::default();
    state.record(&before, &snap(&ours));
    assert_eq!(state.created_files, ours);
    assert!(state.changed_files.is_empty(), "{state:?}");
    // The other tool goes on after the install.
    write(&cdi.join("mps.json"), "v3");
    state.undo(&tmp.path().join("state.json")).unwrap();
    assert!(!cdi.join("nvidia.com-gpu.json").exists());
    assert_eq!(fs::read_to_string(cdi.join("mps.json")).unwrap(), "v3");
    assert_eq!(
        fs::read_to_string(cdi.join("dra-claim.json")).unwrap(),
        "another tool's"
    );
}

/// `ensure_dir` records only the directories it made: one another writer made first is not
/// removed by uninstall.
#[test]
fn ensure_dir_records_only_what_it_made() {
    let tmp = tempfile::tempdir().unwrap();
    let deep = tmp.path().join("a/b/c");
    fs::create_dir(tmp.path().join("a")).unwrap();
    let mut state = State::default();
    ensure_dir(&deep, |d| state.add_dir(d)).unwrap();
    assert_eq!(state.created_dirs, [tmp.path().join("a/b"), deep.clone()]);
    ensure_dir(&deep, |d| state.add_dir(d)).unwrap();
    assert_eq!(state.created_dirs.len(), 2);
    write(&tmp.path().join("a/file"), "x");
    let err = ensure_dir(&tmp.path().join("a/file"), |d| state.add_dir(d)).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn undo_refuses_a_file_edited_after_install_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = [tmp.path().join("config.toml"), tmp.path().join("created")];
    write(&ours[0], "a");
    let before = snap(&ours);
    write(&ours[0], "b");
    write(&ours[1], "c");
    let mut state = State::default();
    state.record(&before, &snap(&ours));
    write(&ours[0], "edited by the admin");
    let err = state.undo(&tmp.path().join("state.json")).unwrap_err();
    assert!(
        err.to_string()
            .contains("was changed after gpuhook was installed"),
        "{err}"
    );
    assert!(ours[1].exists(), "nothing may be removed");
    assert_eq!(fs::read_to_string(&ours[0]).unwrap(), "edited by the admin");
}

/// Issue 22: an uninstall that fails part-way (here: a created file it cannot remove) is
/// finished by running it again, although the changed file is already restored.
#[test]
fn an_interrupted_uninstall_can_be_resumed() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.toml");
    let created = tmp.path().join("drop-in.toml");
    let ours = [config.clone(), created.clone()];
    write(&config, "before");
    let before = snap(&ours);
    write(&config, "after");
    write(&created, "ours");
    let mut state = State::default();
    state.record(&before, &snap(&ours));
    let state_file = tmp.path().join("state.json");
    state.save(&state_file).unwrap();
    // Make the removal fail: a non-empty directory where the created file was.
    fs::remove_file(&created).unwrap();
    fs::create_dir(&created).unwrap();
    write(&created.join("x"), "");
    let err = format!("{:#}", state.undo(&state_file).unwrap_err());
    assert!(err.contains("cannot remove"), "{err}");
    assert_eq!(fs::read_to_string(&config).unwrap(), "before");
    assert!(state_file.exists(), "the record stays for the rerun");

    fs::remove_dir_all(&created).unwrap();
    let again = State::load(&state_file).unwrap().unwrap();
    again.undo(&state_file).unwrap();
    assert_eq!(fs::read_to_string(&config).unwrap(), "before");
    assert!(!state_file.exists());
    // And a third time changes nothing either (the record is gone: the CLI says so).
    again.undo(&state_file).unwrap();
}

#[test]
fn content_is_text_when_it_can_be_and_round_trips_either_way() {
    let c = Changed {
        path: PathBuf::from("/etc/x"),
        before: vec![0xff, 0],
        after: b"version = 2\n".to_vec(),
    };
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.contains(r#""after":"version = 2\n""#), "{json}");
    assert!(json.contains(r#""before":[255,0]"#), "{json}");
    assert_eq!(serde_json::from_str::<Changed>(&json).unwrap(), c);
}

/// A state file written before links were recorded still loads.
#[test]
fn an_older_state_file_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("state.json");
    write(
        &path,
        r#"{"created_dirs":[],"created_files":["/x"],"changed_files":[]}"#,
    );
    let state = State::load(&path).unwrap().unwrap();
    assert!(state.links.is_empty() && !state.containerd_configured);
}
