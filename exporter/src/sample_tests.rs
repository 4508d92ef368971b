use super::*;

#[test]
fn a_process_container_comes_from_its_cgroup_and_a_host_process_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let write = |pid: u32, text: &str| {
        let d = dir.path().join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cgroup"), text).unwrap();
    };
    let id = "ab".repeat(32);
    write(
        1,
        &format!("0::/kubepods.slice/kubepods-pod1_2.slice/cri-containerd-{id}.scope\n"),
    );
    write(2, "0::/user.slice/user-0.slice/session-3.scope\n");
    // Over the read bound: the container line beyond it is never seen.
    write(3, &format!("{}0::/k8s.io/{id}\n", "9:x:/\n".repeat(4000)));
    assert_eq!(container_of(dir.path(), 1), Some(id));
    assert_eq!(container_of(dir.path(), 2), None);
    assert_eq!(container_of(dir.path(), 3), None);
    assert_eq!(container_of(dir.path(), 4), None);
}
