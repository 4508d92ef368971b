//! The client and its verbs. Every request goes to the one server the client was built for,
//! sends the service account's token read afresh, and reads a bounded answer: a 3xx is an error
//! naming its `Location` (never followed), an error status an error carrying the API server's
//! `Status`.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::KubeError;
use crate::files::read_bounded;
use crate::params::{check_path, encode_query, ListParams, PatchType, Verb};

/// Largest answer read by default (a Node object is well under 1 MiB; lists can be larger).
pub const DEFAULT_MAX_RESPONSE: u64 = 16 << 20;
/// Largest error answer read for its `Status`.
const MAX_ERROR_BODY: u64 = 64 << 10;
/// Longest `message` kept from an error answer that is not a `Status`.
const MAX_MESSAGE: usize = 512;

/// A client of one API server (see [`Client::in_cluster`], [`Client::loopback`]).
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<PathBuf>,
    agent: ureq::Agent,
    max_response: u64,
}

impl Client {
    pub(crate) fn new(base: String, token: Option<PathBuf>, agent: ureq::Agent) -> Self {
        Client {
            base,
            token,
            agent,
            max_response: DEFAULT_MAX_RESPONSE,
        }
    }

    /// Authenticates with the bearer token in `path`, re-read on every request.
    #[must_use]
    pub fn with_token(mut self, path: PathBuf) -> Self {
        self.token = Some(path);
        self
    }

    /// Refuses answers larger than `bytes` ([`KubeError::TooLarge`]).
    #[must_use]
    pub fn with_max_response(mut self, bytes: u64) -> Self {
        self.max_response = bytes;
        self
    }

    /// The server's base URL (`https://host:port`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path` as JSON (an object, or a list with its `items`).
    pub fn get(&self, path: &str) -> Result<Value, KubeError> {
        self.json(Verb::Get, path, &[], None)
    }

    /// `GET path` deserialized into `T` (unknown fields are ignored by serde's default).
    pub fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, KubeError> {
        let body = self.request(Verb::Get, path, &[], None)?;
        parse(Verb::Get, path, &body)
    }

    /// `GET path?labelSelector=…&fieldSelector=…` of a collection (e.g. `/api/v1/pods`).
    pub fn list(&self, path: &str, params: &ListParams) -> Result<Value, KubeError> {
        let pairs = params.pairs();
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.json(Verb::Get, path, &pairs, None)
    }

    /// `POST` of `object` to the collection `path`; [`KubeError::is_conflict`] when it exists.
    pub fn create(&self, path: &str, object: &Value) -> Result<Value, KubeError> {
        self.json(Verb::Post, path, &[], Some(("application/json", object)))
    }

    /// `PUT` of `object` to `path`; [`KubeError::is_conflict`] when its `resourceVersion` is
    /// stale.
    pub fn replace(&self, path: &str, object: &Value) -> Result<Value, KubeError> {
        self.json(Verb::Put, path, &[], Some(("application/json", object)))
    }

    /// `PATCH path` with `patch` read as `kind` says.
    pub fn patch(&self, path: &str, kind: PatchType, patch: &Value) -> Result<Value, KubeError> {
        self.json(Verb::Patch, path, &[], Some((kind.content_type(), patch)))
    }

    /// `DELETE path`; the answer is the deleted object or a `Status`.
    pub fn delete(&self, path: &str) -> Result<Value, KubeError> {
        self.json(Verb::Delete, path, &[], None)
    }

    fn json(
        &self,
        verb: Verb,
        path: &str,
        query: &[(&str, &str)],
        body: Option<(&str, &Value)>,
    ) -> Result<Value, KubeError> {
        let encoded = match body {
            Some((ct, v)) => Some((ct, to_vec(verb, path, v)?)),
            None => None,
        };
        let answer = self.request(
            verb,
            path,
            query,
            encoded.as_ref().map(|(ct, b)| (*ct, b.as_slice())),
        )?;
        if answer.is_empty() {
            return Ok(Value::Null);
        }
        parse(verb, path, &answer)
    }

    /// One request: `body` is `(content type, bytes)`. Returns the answer's body (bounded) for a
    /// 1xx/2xx status; a 3xx or an error status is an error.
    pub fn request(
        &self,
        verb: Verb,
        path: &str,
        query: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) -> Result<Vec<u8>, KubeError> {
        check_path(path)?;
        let mut uri = format!("{}{path}", self.base);
        if !query.is_empty() {
            uri.push('?');
            uri.push_str(&encode_query(query));
        }
        let mut req = ureq::http::Request::builder()
            .method(verb.as_str())
            .uri(&uri)
            .header("Accept", "application/json");
        if let Some(token) = &self.token {
            let token = String::from_utf8_lossy(&read_bounded(token)?)
                .trim()
                .to_string();
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let bad_path = |_| KubeError::Path {
            path: path.to_string(),
        };
        let sent = match body {
            Some((ct, bytes)) => {
                let req = req
                    .header("Content-Type", ct)
                    .body(bytes)
                    .map_err(bad_path)?;
                self.agent.run(req)
            }
            None => self.agent.run(req.body(()).map_err(bad_path)?),
        };
        let transport = |source| KubeError::Transport {
            method: verb.as_str().to_string(),
            path: path.to_string(),
            source,
        };
        let answer = sent.map_err(transport)?;
        self.answer(verb, path, answer)
    }

    fn answer(
        &self,
        verb: Verb,
        path: &str,
        mut answer: ureq::http::Response<ureq::Body>,
    ) -> Result<Vec<u8>, KubeError> {
        let code = answer.status().as_u16();
        let method = verb.as_str().to_string();
        if (300..400).contains(&code) {
            let location = answer
                .headers()
                .get("location")
                .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(KubeError::Redirect {
                method,
                path: path.to_string(),
                code,
                location,
            });
        }
        if code >= 400 {
            let body = answer
                .body_mut()
                .with_config()
                .limit(MAX_ERROR_BODY)
                .read_to_vec()
                .unwrap_or_default();
            let (reason, message) = status_of(&body);
            return Err(KubeError::Status {
                method,
                path: path.to_string(),
                code,
                reason,
                message,
            });
        }
        let limit = self.max_response;
        answer
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|source| match source {
                ureq::Error::BodyExceedsLimit(_) => KubeError::TooLarge {
                    method: method.clone(),
                    path: path.to_string(),
                    limit,
                },
                source => KubeError::Transport {
                    method: method.clone(),
                    path: path.to_string(),
                    source,
                },
            })
    }
}

/// `(Status.reason, Status.message)` of an error answer; a body that is not a `Status` gives its
/// first bytes as the message (printable ASCII only: it goes into logs).
fn status_of(body: &[u8]) -> (String, String) {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(message) = v["message"].as_str() {
            let reason = v["reason"].as_str().unwrap_or_default().to_string();
            return (reason, message.to_string());
        }
    }
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(MAX_MESSAGE)
        .collect();
    (String::new(), text)
}

fn to_vec(verb: Verb, path: &str, v: &Value) -> Result<Vec<u8>, KubeError> {
    serde_json::to_vec(v).map_err(|source| KubeError::Json {
        method: verb.as_str().to_string(),
        path: path.to_string(),
        source,
    })
}

fn parse<T: DeserializeOwned>(verb: Verb, path: &str, body: &[u8]) -> Result<T, KubeError> {
    serde_json::from_slice(body).map_err(|source| KubeError::Json {
        method: verb.as_str().to_string(),
        path: path.to_string(),
        source,
    })
}
