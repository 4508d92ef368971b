use super::*;

/// A fake `/proc/<pid>` with a start time and a uid.
fn fake_proc(root: &Path, pid: u32, start: u64, uid: u32) {
    let d = root.join(pid.to_string());
    std::fs::create_dir_all(&d).unwrap();
    let fields: Vec<String> = (3..=21).map(|i| i.to_string()).collect();
    std::fs::write(
        d.join("stat"),
        format!("{pid} (cuda app) {} {start} 0 0\n", fields.join(" ")),
    )
    .unwrap();
    std::fs::write(
        d.join("status"),
        format!("Name:\tapp\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .unwrap();
}

fn line(msg: &str) -> String {
    format!("[2026-11-28 10:00:00.000 Control  4321] {msg}\n")
}

#[test]
fn new_client_lines_of_nvidias_control_log() {
    // NVIDIA MPS docs, "Control Log".
    assert_eq!(
        parse_new_client(&line(
            "NEW CLIENT 19276 from user 500: Server already exists"
        )),
        Some((19276, 500))
    );
    assert_eq!(
        parse_new_client(&line(
            "NEW CLIENT 7 from user 1000: Server is not ready, push client to pending list"
        )),
        Some((7, 1000))
    );
    assert_eq!(
        parse_new_client(&line("Starting new server 13929 for user 500")),
        None
    );
    assert_eq!(parse_new_client(&line("NEW CLIENT x from user 5")), None);
}

#[test]
fn a_client_of_another_user_not_attached_is_waiting() {
    let t = tempfile::tempdir().unwrap();
    let (proc_root, log) = (t.path().join("proc"), t.path().join("control.log"));
    fake_proc(&proc_root, 100, 5, 1000);
    fake_proc(&proc_root, 200, 6, 2000);
    fake_proc(&proc_root, 300, 7, 1000);
    std::fs::write(
        &log,
        [
            line("NEW CLIENT 100 from user 1000: Server already exists"),
            line("NEW CLIENT 200 from user 2000: Server is not ready, push client to pending list"),
            line("NEW CLIENT 300 from user 1000: Server already exists"),
        ]
        .concat(),
    )
    .unwrap();
    let mut c = ClientLog::new(log.clone());
    c.poll(&proc_root);
    let attached: BTreeSet<u32> = [100, 300].into();
    let uids: BTreeSet<u32> = [1000].into();
    assert_eq!(
        c.waiting(&proc_root, &attached, &uids),
        vec![Waiting {
            pid: 200,
            uid: 2000
        }]
    );
    // Its process ends (or the pid is reused: another start time): no longer waiting.
    fake_proc(&proc_root, 200, 99, 2000);
    assert!(c.waiting(&proc_root, &attached, &uids).is_empty());
    // Appended lines are read from where the last pass stopped; a half line waits.
    let mut more = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    use std::io::Write;
    fake_proc(&proc_root, 400, 8, 3000);
    let l = line("NEW CLIENT 400 from user 3000: Server is not ready");
    more.write_all(&l.as_bytes()[..20]).unwrap();
    c.poll(&proc_root);
    assert!(c.waiting(&proc_root, &attached, &uids).is_empty());
    more.write_all(&l.as_bytes()[20..]).unwrap();
    c.poll(&proc_root);
    assert_eq!(
        c.waiting(&proc_root, &attached, &uids),
        vec![Waiting {
            pid: 400,
            uid: 3000
        }]
    );
    assert_eq!(process_uid(&proc_root, 400), Some(3000));
}
