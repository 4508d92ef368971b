//! The client against a fake API server: verbs, content types, selectors, typed errors carrying
//! the API server's `Status`, the token re-read per request, bounded answers — and the rules of
//! #22: no redirect is followed (no second request, whatever the `Location`), plain HTTP only to
//! a loopback address.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod fake;

use std::net::TcpListener;
use std::time::Duration;

use fake::{json, status, Fake};
use gpuhook_kube::{Client, KubeError, ListParams, PatchType};
use serde_json::json;

#[test]
fn get_and_list_send_the_path_and_the_selectors() {
    let srv = Fake::start(|r| match r.target.as_str() {
        "/api/v1/nodes/node-1" => json(200, &json!({"metadata": {"name": "node-1"}})),
        _ => json(200, &json!({"kind": "PodList", "items": []})),
    });
    let api = Client::loopback(&srv.url).unwrap();
    assert_eq!(
        api.get("/api/v1/nodes/node-1").unwrap()["metadata"]["name"],
        "node-1"
    );
    let params = ListParams {
        label_selector: Some("app=gpu,tier in (a,b)".into()),
        field_selector: Some("spec.nodeName=node-1".into()),
        limit: Some(50),
        continue_token: None,
    };
    let list = api.list("/api/v1/pods", &params).unwrap();
    assert_eq!(list["kind"], "PodList");
    let seen = srv.requests();
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].header("accept"), Some("application/json"));
    assert_eq!(
        seen[1].target,
        "/api/v1/pods?labelSelector=app%3Dgpu%2Ctier%20in%20%28a%2Cb%29&fieldSelector=spec.nodeName%3Dnode-1&limit=50"
    );
    assert_eq!(seen[0].header("authorization"), None, "no token configured");
}

#[test]
fn writes_send_their_content_types_and_bodies() {
    let srv = Fake::start(|r| json(200, &json!({"echo": r.method})));
    let api = Client::loopback(&srv.url).unwrap();
    let obj = json!({"metadata": {"name": "cm"}});
    let path = "/api/v1/namespaces/ns/configmaps";
    assert_eq!(api.create(path, &obj).unwrap()["echo"], "POST");
    assert_eq!(
        api.replace(&format!("{path}/cm"), &obj).unwrap()["echo"],
        "PUT"
    );
    for kind in [PatchType::Merge, PatchType::StrategicMerge, PatchType::Json] {
        assert_eq!(
            api.patch(&format!("{path}/cm"), kind, &obj).unwrap()["echo"],
            "PATCH"
        );
    }
    assert_eq!(api.delete(&format!("{path}/cm")).unwrap()["echo"], "DELETE");
    let seen = srv.requests();
    let cts: Vec<_> = seen.iter().map(|s| s.header("content-type")).collect();
    assert_eq!(
        cts,
        [
            Some("application/json"),
            Some("application/json"),
            Some("application/merge-patch+json"),
            Some("application/strategic-merge-patch+json"),
            Some("application/json-patch+json"),
            None,
        ]
    );
    let body: serde_json::Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(body, obj);
    assert!(seen[5].body.is_empty(), "DELETE sends no body");
}

#[test]
fn error_answers_carry_code_message_and_path() {
    let srv = Fake::start(|r| match r.method.as_str() {
        "GET" => status(404, "NotFound", "nodes \"node-9\" not found"),
        "POST" => status(409, "AlreadyExists", "configmaps \"cm\" already exists"),
        _ => (500, vec![], b"upstream \x1b[31mboom\n".to_vec()),
    });
    let api = Client::loopback(&srv.url).unwrap();
    let e = api.get("/api/v1/nodes/node-9").unwrap_err();
    assert!(e.is_not_found() && !e.is_conflict(), "{e:?}");
    assert_eq!(
        e.to_string(),
        "GET /api/v1/nodes/node-9: HTTP 404 NotFound: nodes \"node-9\" not found"
    );
    let e = api
        .create("/api/v1/namespaces/ns/configmaps", &json!({}))
        .unwrap_err();
    assert!(e.is_conflict() && !e.is_not_found(), "{e:?}");
    assert!(e.to_string().contains("already exists"), "{e}");
    let e = api
        .delete("/api/v1/namespaces/ns/configmaps/cm")
        .unwrap_err();
    assert_eq!(e.code(), Some(500));
    let KubeError::Status { message, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        message, "upstream ?[31mboom?",
        "control bytes never reach a log"
    );
}

#[test]
fn a_redirect_is_an_error_and_is_never_followed() {
    // Where the redirect points: a plain-HTTP server that must see no connection at all.
    let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let location = format!(
        "http://{}/api/v1/nodes/node-1",
        elsewhere.local_addr().unwrap()
    );
    let loc = location.clone();
    let srv = Fake::start(move |_| (302, vec![("Location".into(), loc.clone())], vec![]));
    let api = Client::loopback(&srv.url).unwrap();
    let e = api.get("/api/v1/nodes/node-1").unwrap_err();
    match &e {
        KubeError::Redirect {
            code, location: l, ..
        } => {
            assert_eq!((*code, l.as_str()), (302, location.as_str()));
        }
        other => panic!("a 302 must be an error: {other:?}"),
    }
    assert!(e.to_string().contains(&location), "names the Location: {e}");
    assert_eq!(srv.requests().len(), 1, "one request, to the one server");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        elsewhere.accept().is_err(),
        "the redirect target was contacted"
    );
    // The same for a write: not followed either.
    let e = api.create("/api/v1/namespaces", &json!({})).unwrap_err();
    assert!(matches!(e, KubeError::Redirect { code: 302, .. }), "{e:?}");
    assert_eq!(srv.requests().len(), 2);
}

#[test]
fn plain_http_is_only_for_a_loopback_address() {
    for url in [
        "http://10.0.0.1:6443",
        "http://example.com:80",
        "http://localhost:8080",
        "http://169.254.169.254:80",
        "http://[fe80::1]:80",
        "https://127.0.0.1:6443",
        "ftp://127.0.0.1:21",
        "http://127.0.0.1",
        "http://user@127.0.0.1:80",
        "http://127.0.0.1:80/prefix",
    ] {
        let e = Client::loopback(url).unwrap_err();
        assert!(matches!(e, KubeError::Url { .. }), "{url}: {e:?}");
    }
    for url in [
        "http://127.0.0.1:8080",
        "http://127.1.2.3:1/",
        "http://[::1]:8080",
    ] {
        assert!(Client::loopback(url).is_ok(), "{url}");
    }
}

#[test]
fn the_token_is_reread_for_every_request() {
    let srv = Fake::start(|_| json(200, &json!({})));
    let d = tempfile::tempdir().unwrap();
    let token = d.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let api = Client::loopback(&srv.url)
        .unwrap()
        .with_token(token.clone());
    api.get("/api/v1/nodes/a").unwrap();
    std::fs::write(&token, "rotated\n").unwrap();
    api.get("/api/v1/nodes/a").unwrap();
    let auth: Vec<_> = srv
        .requests()
        .iter()
        .map(|s| s.header("authorization").map(str::to_string))
        .collect();
    assert_eq!(
        auth,
        [Some("Bearer first".into()), Some("Bearer rotated".into())]
    );
    std::fs::write(&token, vec![b'x'; 70 << 10]).unwrap();
    let e = api.get("/api/v1/nodes/a").unwrap_err();
    assert!(matches!(e, KubeError::FileTooLarge { .. }), "{e:?}");
    assert_eq!(
        srv.requests().len(),
        2,
        "nothing sent with an oversized token"
    );
}

#[test]
fn answers_are_bounded_and_paths_checked_before_sending() {
    let srv = Fake::start(|_| json(200, &json!({"data": "x".repeat(4096)})));
    let api = Client::loopback(&srv.url).unwrap().with_max_response(1024);
    let e = api.get("/api/v1/nodes/big").unwrap_err();
    assert!(
        matches!(e, KubeError::TooLarge { limit: 1024, .. }),
        "{e:?}"
    );
    for bad in [
        "api/v1/nodes",
        "/api/v1/nodes/../secrets",
        "/api/v1/nodes?x=1",
        "/a#b",
        "/a\nb",
    ] {
        let e = api.get(bad).unwrap_err();
        assert!(matches!(e, KubeError::Path { .. }), "{bad}: {e:?}");
    }
    assert_eq!(srv.requests().len(), 1);
    for bad in ["", "Node-1", "a/b", "-a", "a..b", &"a".repeat(254)] {
        assert!(gpuhook_kube::check_name("node name", bad).is_err(), "{bad}");
    }
    gpuhook_kube::check_name("node name", "ip-10-0-0-1.ec2.internal").unwrap();
}

#[test]
fn in_cluster_needs_the_service_env_and_a_ca() {
    let sa = tempfile::tempdir().unwrap();
    let e = Client::with_service_account("10.0.0.1", "443", sa.path()).unwrap_err();
    assert!(matches!(e, KubeError::Read { .. }), "{e:?}");
    std::fs::write(sa.path().join("ca.crt"), "not a pem\n").unwrap();
    let e = Client::with_service_account("10.0.0.1", "443", sa.path()).unwrap_err();
    assert!(matches!(e, KubeError::NoCa { .. }), "{e:?}");
    for (host, port) in [
        ("10.0.0.1", "https"),
        ("evil.example/x", "443"),
        ("", "443"),
    ] {
        let e = Client::with_service_account(host, port, sa.path()).unwrap_err();
        assert!(matches!(e, KubeError::Url { .. }), "{host}:{port}: {e:?}");
    }
}
