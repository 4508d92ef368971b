use super::*;

#[test]
fn canonical_names_drop_equal_compute() {
    let p = MigProfile::parse("1c.1g.5gb+me").unwrap();
    assert_eq!(p.to_string(), "1g.5gb+me");
    assert_eq!(p.gi_name(), "1g.5gb+me");
    let p = MigProfile::parse("1c.2g.10gb").unwrap();
    assert_eq!((p.compute, p.gpu, p.memory_gb), (1, 2, 10));
    assert_eq!(p.to_string(), "1c.2g.10gb");
    assert_eq!(p.gi_name(), "2g.10gb");
    let p = MigProfile::parse("1g.24gb-me").unwrap();
    assert!(p.negative);
    assert_eq!(p.to_string(), "1g.24gb-me");
    assert_eq!(
        MigProfile::parse("1g.24gb+me.all").unwrap().attributes,
        ["me.all"]
    );
}

#[test]
fn refusals_say_why() {
    let e = MigProfile::parse("1g.5gb+me-me").unwrap_err();
    assert!(e.to_string().contains("cannot be mixed"), "{e}");
    let e = MigProfile::parse("1g.5gb+me,me").unwrap_err();
    assert!(e.to_string().contains("repeated"), "{e}");
}
