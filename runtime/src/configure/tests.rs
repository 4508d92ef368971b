use super::*;

#[test]
fn scratch() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::copy("/tmp/rtx/default.toml", &cfg).unwrap();
    let opts = ConfigureOptions { config: cfg.clone(), ..Default::default() };
    let out = configure(&opts, true).unwrap();
    print!("{}", out.summary());
    let cfg2 = dir.path().join("c2.toml");
    std::fs::write(&cfg2, "version = 2\n# comment\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  # opts\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n    SystemdCgroup = true # yes\n\n[plugins.other]\n  x = 1\n").unwrap();
    let opts = ConfigureOptions { config: cfg2.clone(), drop_in: Some(dir.path().join("conf.d/99-gpuhook.toml")), set_as_default: true, ..Default::default() };
    let out = configure(&opts, false).unwrap();
    print!("{}", out.summary());
    println!("{}", std::fs::read_to_string(&cfg2).unwrap());
    println!("{}", std::fs::read_to_string(dir.path().join("conf.d/99-gpuhook.toml")).unwrap());
    let out = configure(&opts, false).unwrap();
    print!("{}", out.summary());
    let opts = ConfigureOptions { config: dir.path().join("missing.toml"), ..Default::default() };
    configure(&opts, false).unwrap();
    println!("{}", std::fs::read_to_string(dir.path().join("missing.toml")).unwrap());
}
