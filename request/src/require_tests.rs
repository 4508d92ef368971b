use std::cmp::Ordering;

use gpuhook_node::DeviceRef;

use super::*;
use crate::test_support::inventory;

fn parse(expr: &str) -> Constraint {
    parse_expression("NVIDIA_REQUIRE_TEST", expr).unwrap_or_else(|e| panic!("{expr:?}: {e}"))
}

fn syntax(expr: &str) -> String {
    parse_expression("NVIDIA_REQUIRE_X", expr)
        .expect_err(expr)
        .to_string()
}

fn reqs(expr: &str) -> Requirements {
    Requirements::parse(&[("NVIDIA_REQUIRE_TEST", expr)], None, false).unwrap()
}

/// Checks `expr` for the given devices of the test inventory (driver 570.158.01, CUDA 12.8;
/// GPU 0 T4 7.5 tesla, GPU 1 A100 8.0 nvidia (MIG), GPU 2 H100 9.0 nvidia).
fn holds(expr: &str, devices: &[DeviceRef]) -> bool {
    reqs(expr).check(&inventory(), devices).is_ok()
}

const GPU0: DeviceRef = DeviceRef::Gpu { index: 0 };
const GPU2: DeviceRef = DeviceRef::Gpu { index: 2 };
const MIG10: DeviceRef = DeviceRef::Mig {
    parent_index: 1,
    index: 0,
};

#[test]
fn dotted_comparison() {
    let v = |s| parse_version(s).unwrap();
    assert_eq!(compare_versions(&v("12.10"), &v("12.9")), Ordering::Greater);
    assert_eq!(compare_versions(&v("535"), &v("535.1")), Ordering::Less);
    assert_eq!(compare_versions(&v("12.0"), &v("12")), Ordering::Equal);
    assert_eq!(
        compare_versions(&v("570.158.01"), &v("570.158.1")),
        Ordering::Equal
    );
    assert_eq!(compare_versions(&v("9"), &v("10")), Ordering::Less);
    for bad in [
        "",
        ".",
        "1.",
        ".1",
        "1..2",
        "1.a",
        "-1",
        "99999999999999999999999",
    ] {
        assert_eq!(parse_version(bad), None, "{bad}");
    }
}

#[test]
fn parses_terms_and_factors() {
    let c = parse("cuda>=12.0 brand=tesla,driver>=535 brand=Tesla,driver<536");
    assert_eq!(c.terms.len(), 3);
    assert_eq!(c.terms[1].factors.len(), 2);
    let f = &c.terms[2].factors[0];
    assert_eq!(
        (f.property, f.op, &f.value),
        (Property::Brand, Op::Eq, &Value::Brand("tesla".into()))
    );
    let f = &c.terms[2].factors[1];
    assert_eq!(
        (f.property, f.op, &f.value),
        (Property::Driver, Op::Lt, &Value::Version(vec![536]))
    );
    for (text, op) in [
        ("=", Op::Eq),
        ("!=", Op::Ne),
        ("<", Op::Lt),
        ("<=", Op::Le),
        (">", Op::Gt),
        (">=", Op::Ge),
    ] {
        assert_eq!(parse(&format!("arch{text}8.0")).terms[0].factors[0].op, op);
    }
    // Names are case-insensitive; runs of whitespace separate terms.
    assert_eq!(parse("CUDA>=12.0 \t  Driver>=1").terms.len(), 2);
    assert!(parse("").terms.is_empty());
}

#[test]
fn syntax_errors_name_variable_and_token() {
    for (expr, token, why) in [
        ("cuda>=12.0,", "cuda>=12.0,", "stray ','"),
        ("cuda>=12.0,,arch=8.0", "cuda>=12.0,,arch=8.0", "stray ','"),
        ("cuda", "cuda", "expected an operator"),
        ("cuda==12", "cuda==12", "invalid version \"=12\""),
        ("cuda>=", "cuda>=", "missing value"),
        ("gpu>=1", "gpu>=1", "unknown name \"gpu\""),
        (">=12", ">=12", "expected a name"),
        ("cuda>=12.x", "cuda>=12.x", "dotted number"),
        (
            "brand>=tesla",
            "brand>=tesla",
            "brand only supports = and !=",
        ),
        ("brand=te$la", "brand=te$la", "invalid brand"),
        ("cuda~12", "cuda~12", "expected an operator"),
    ] {
        let e = syntax(expr);
        assert!(
            e.starts_with(&format!("syntax error in NVIDIA_REQUIRE_X at {token:?}")),
            "{expr}: {e}"
        );
        assert!(e.contains(why), "{expr}: {e}");
    }
}

/// The reason of a syntax error is typed (a caller can match it) and reads as before.
#[test]
fn syntax_error_reasons_are_typed() {
    for (expr, want, text) in [
        (
            "cuda>=12.0,",
            SyntaxError::EmptyCondition,
            "empty condition (stray ',')",
        ),
        (
            "cuda~12",
            SyntaxError::NoOperator {
                name: "cuda".into(),
            },
            "expected an operator (=, !=, <, <=, >, >=) after \"cuda\"",
        ),
        (
            "cuda>=",
            SyntaxError::NoValue {
                name: "cuda".into(),
                op: ">=",
            },
            "missing value after cuda>=",
        ),
        (
            "gpu>=1",
            SyntaxError::UnknownName { name: "gpu".into() },
            "unknown name \"gpu\": expected cuda, driver, arch or brand",
        ),
        (
            "brand=te$la",
            SyntaxError::InvalidBrand {
                value: "te$la".into(),
            },
            "invalid brand \"te$la\": expected letters, digits, '-' or '_'",
        ),
        (
            "cuda>=12.x",
            SyntaxError::InvalidVersion {
                value: "12.x".into(),
            },
            "invalid version \"12.x\": expected a dotted number such as 12.4",
        ),
    ] {
        match parse_expression("NVIDIA_REQUIRE_X", expr) {
            Err(RequestError::RequirementSyntax { reason, .. }) => {
                assert_eq!(reason.to_string(), text, "{expr}");
                assert_eq!(reason, want, "{expr}");
            }
            other => panic!("{expr}: {other:?}"),
        }
    }
}

#[test]
fn every_op_evaluates() {
    // CUDA 12.8 on the test node.
    assert!(holds("cuda=12.8", &[]));
    assert!(!holds("cuda=12.9", &[]));
    assert!(holds("cuda!=12.9", &[]));
    assert!(!holds("cuda!=12.8", &[]));
    assert!(holds("cuda<12.10", &[]));
    assert!(!holds("cuda<12.8", &[]));
    assert!(holds("cuda<=12.8", &[]));
    assert!(!holds("cuda<=12.7", &[]));
    assert!(holds("cuda>12.7", &[]));
    assert!(!holds("cuda>12.8", &[]));
    assert!(holds("cuda>=12", &[]));
    assert!(!holds("cuda>=13.0", &[]));
    // Driver 570.158.01.
    assert!(holds("driver>=570.158", &[]));
    assert!(holds("driver<570.158.2", &[]));
    assert!(!holds("driver>=575", &[]));
}

#[test]
fn or_of_and() {
    // GPU 0 is a tesla T4 (7.5).
    assert!(holds("brand=geforce arch>=7.0,brand=tesla", &[GPU0]));
    assert!(!holds("brand=geforce arch>=8.0,brand=tesla", &[GPU0]));
    assert!(holds("cuda>=13.0 driver>=570", &[GPU0]));
    assert!(!holds("cuda>=13.0,driver>=570", &[GPU0]));
    assert!(holds("brand!=geforce", &[GPU0]));
    assert!(holds("brand=TESLA", &[GPU0]));
}

#[test]
fn per_gpu_evaluation_and_mig_parent() {
    assert!(holds("arch>=9.0", &[GPU2]));
    assert!(
        !holds("arch>=9.0", &[GPU2, GPU0]),
        "every selected GPU must satisfy it"
    );
    // A MIG device is checked as its parent (A100, 8.0, brand nvidia).
    assert!(holds("arch=8.0,brand=nvidia", &[MIG10]));
    assert!(!holds("arch>=9.0", &[MIG10]));
    let e = reqs("arch>=9.0")
        .check(&inventory(), &[GPU2, GPU0])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unsatisfied condition: arch>=9.0 (NVIDIA_REQUIRE_TEST=\"arch>=9.0\""),
        "{e}"
    );
    assert!(e.contains("on GPU 0 (arch 7.5, brand tesla)"), "{e}");
    assert!(!e.contains("update your driver"), "{e}");
}

#[test]
fn no_gpu_selected_arch_and_brand_pass() {
    assert!(holds("arch>=99.0,brand=quadro", &[]));
    assert!(!holds("arch>=99.0,cuda>=99", &[]));
}

#[test]
fn cuda_failure_tells_to_update_the_driver() {
    let e = reqs("cuda>=13.0")
        .check(&inventory(), &[GPU0])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("requirement error: unsatisfied condition: cuda>=13.0 (NVIDIA_REQUIRE_TEST=\"cuda>=13.0\""),
        "{e}"
    );
    assert!(
        e.ends_with(
            ", please update your driver to a newer version, or use an earlier cuda container"
        ),
        "{e}"
    );
    // Several terms: the whole expression is named.
    let e = reqs("cuda>=13.0 brand=geforce")
        .check(&inventory(), &[GPU0])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unsatisfied condition: cuda>=13.0 brand=geforce ("),
        "{e}"
    );
    // A single term names its first failing factor.
    let e = reqs("brand=tesla,driver>=999")
        .check(&inventory(), &[GPU0])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unsatisfied condition: driver>=999 ("), "{e}");
}

#[test]
fn unknown_facts_pass_and_are_reported() {
    let mut inv = inventory();
    inv.cuda_driver_version = None;
    inv.gpus[0].brand = None;
    let report = reqs("cuda>=13.0,brand=tesla").check(&inv, &[GPU0]).unwrap();
    assert_eq!(
        report.unchecked,
        vec![
            "NVIDIA_REQUIRE_TEST: brand=tesla (brand unknown)",
            "NVIDIA_REQUIRE_TEST: cuda>=13.0 (cuda unknown)"
        ]
    );
    // A known failing fact still fails.
    assert!(reqs("cuda>=13.0,driver>=999").check(&inv, &[GPU0]).is_err());
}

#[test]
fn legacy_image_and_disable() {
    let r = Requirements::parse(&[], Some("12.9.1"), false).unwrap();
    assert_eq!(r.constraints[0].terms[0].factors[0].text, "cuda>=12.9");
    let e = r.check(&inventory(), &[]).unwrap_err().to_string();
    assert!(
        e.contains("unsatisfied condition: cuda>=12.9 (CUDA_VERSION=\"12.9.1\""),
        "{e}"
    );
    assert!(e.contains("please update your driver"), "{e}");
    assert!(Requirements::parse(&[], Some("12.8"), false)
        .unwrap()
        .check(&inventory(), &[])
        .is_ok());
    let e = Requirements::parse(&[], Some("twelve"), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("invalid CUDA_VERSION: \"twelve\" is not a version"),
        "{e}"
    );

    let disabled = Requirements::parse(
        &[("NVIDIA_REQUIRE_CUDA", "cuda>=99 ,,, garbage")],
        Some("99.0"),
        true,
    )
    .unwrap();
    assert!(disabled.disabled && disabled.constraints.is_empty());
    assert!(disabled.check(&inventory(), &[GPU0]).is_ok());
    for t in ["true", "1", "yes", "Y", "on", "TRUE"] {
        assert!(is_truthy(t), "{t}");
    }
    for f in ["false", "0", "no", "", "maybe"] {
        assert!(!is_truthy(f), "{f}");
    }
}

#[test]
fn every_variable_must_hold() {
    let r = Requirements::parse(
        &[
            ("NVIDIA_REQUIRE_A", "cuda>=12.0"),
            ("NVIDIA_REQUIRE_B", "driver>=999"),
        ],
        None,
        false,
    )
    .unwrap();
    let e = r.check(&inventory(), &[]).unwrap_err().to_string();
    assert!(e.contains("NVIDIA_REQUIRE_B=\"driver>=999\""), "{e}");
}
