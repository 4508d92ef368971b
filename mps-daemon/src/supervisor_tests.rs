use super::*;

#[test]
fn backoff_doubles_and_is_capped() {
    let max = Duration::from_secs(2);
    assert_eq!(backoff(1, max), Duration::from_millis(100));
    assert_eq!(backoff(2, max), Duration::from_millis(200));
    assert_eq!(backoff(4, max), Duration::from_millis(800));
    assert_eq!(backoff(10, max), max);
    assert_eq!(backoff(u32::MAX, max), max);
}
