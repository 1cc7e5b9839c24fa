//! Who may read `/metrics`: Kubernetes authentication and authorization, as the kubelet guards its
//! own endpoints (`--authentication-token-webhook`, `--authorization-mode=Webhook`) and as
//! controller-runtime's metrics server does. `/metrics` names every pod, container and exit
//! reason on the node: in a pod network every tenant reaches the listener, so the reader must show
//! a bearer token the apiserver accepts (TokenReview) for a user allowed to `get` the non-resource
//! URL `/metrics` (SubjectAccessReview) — Prometheus' service account with the usual
//! `nonResourceURLs: ["/metrics"]` rule.
//!
//! Answers are cached by token (allowed for 2 min, refused for 30 s, as the kubelet's webhook
//! caches do), at most [`MAX_CACHED`] allowed tokens and as many refused ones, each kind in a cache
//! of its own: a flood of tokens the apiserver refuses churns only the refused cache and never
//! pushes out an allowed reader's verdict. Reviews of tokens not cached are limited, so that
//! clients sending random tokens cannot make plegd flood the apiserver (nor crowd its status
//! writes, which share plegd's identity and so its priority-and-fairness flow there): at most
//! [`REVIEWS_PER_CLIENT_PER_SECOND`] for one client address and [`REVIEWS_PER_SECOND`] in all,
//! each with a burst of a few; past it the answer is 429. A client address that showed an allowed
//! token within [`GOOD_CLIENT_MEMORY`] has its reviews taken from its own budget alone, not from
//! the budget of all that a flood spends, so that a flood of others cannot lock Prometheus out. A
//! reader plegd does not know yet (plegd restarted, or Prometheus moved) has, once in
//! [`GOOD_CLIENT_MEMORY`], a first review from a lane of its own while the budget of all is spent
//! ([`FIRST_REVIEWS_PER_SECOND`]): a flood's addresses each spend it once and then leave it to
//! the next newcomer, so Prometheus gets in during a flood that began before it was known; and
//! an allowed answer is never used past its [`ALLOWED_TTL`], so that a revoked token reads no longer
//! than that, flood or not. A review that fails (apiserver unreachable, timeout) is not
//! cached and answers 503: nobody is let in on a guess. The reviews go through a client of their
//! own: a `Retry-After` answered to a review does not hold back the status writes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// How long an allowed token is trusted without asking again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(120);
/// How long a refused token is refused without asking again.
pub const REFUSED_TTL: Duration = Duration::from_secs(30);
/// Tokens whose answer is kept.
pub const MAX_CACHED: usize = 256;
/// Reviews of tokens not cached, per second, in all (a burst of twice that).
pub const REVIEWS_PER_SECOND: f64 = 5.0;
/// Reviews of tokens not cached, per second, for one client address (a burst of 3).
pub const REVIEWS_PER_CLIENT_PER_SECOND: f64 = 1.0;
/// Client addresses whose review budget is kept.
pub const MAX_CLIENTS: usize = 1024;
/// How long a client address that showed an allowed token is a known reader, whose reviews do
/// not draw on the budget of all.
pub const GOOD_CLIENT_MEMORY: Duration = Duration::from_secs(600);
/// Known readers' addresses kept (the most recent).
pub const MAX_GOOD_CLIENTS: usize = 64;
/// First reviews of addresses not seen within [`GOOD_CLIENT_MEMORY`], per second, taken while the
/// budget of all is spent (a burst of [`FIRST_BURST`]): each address has one such review in that
/// time, so a flood from a fixed set of addresses spends the lane once and leaves it to newcomers.
pub const FIRST_REVIEWS_PER_SECOND: f64 = 1.0;
/// The burst of [`FIRST_REVIEWS_PER_SECOND`].
pub const FIRST_BURST: f64 = 5.0;
/// Longest bearer token looked at; a longer one is refused without a review.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Why `/metrics` is not served to a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No `Authorization: Bearer` header, or one too long to be a token (401).
    #[error("a bearer token is required")]
    NoToken,
    /// The apiserver did not authenticate the token (401).
    #[error("the token is not valid")]
    Unauthenticated,
    /// The token's user may not `get /metrics` (403).
    #[error("user {user:?} may not get /metrics")]
    Forbidden { user: String },
    /// Too many tokens to review just now (429); try again later.
    #[error("too many token reviews; try again later")]
    Throttled,
    /// The apiserver could not be asked (503); try again later. Retryable.
    #[error("cannot review the token now: {0}")]
    Unavailable(String),
}

impl Denied {
    fn status(&self) -> StatusCode {
        match self {
            Denied::NoToken | Denied::Unauthenticated => StatusCode::UNAUTHORIZED,
            Denied::Forbidden { .. } => StatusCode::FORBIDDEN,
            Denied::Throttled => StatusCode::TOO_MANY_REQUESTS,
            Denied::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The label of `plegd_metrics_auth_total`.
    fn result(&self) -> &'static str {
        match self {
            Denied::NoToken | Denied::Unauthenticated => "unauthenticated",
            Denied::Forbidden { .. } => "forbidden",
            Denied::Throttled => "throttled",
            Denied::Unavailable(_) => "error",
        }
    }
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let mut response = (self.status(), format!("{self}\n")).into_response();
        if self.status() == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// What the apiserver answered for one token, until when.
struct Verdict {
    answer: Result<(), Denied>,
    until: Instant,
}

/// Reviews allowed now: a token bucket of `rate` a second holding at most `burst`.
struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn full(burst: f64, now: Instant) -> Self {
        Self { tokens: burst, at: now }
    }

    /// Refilled to `now`; whether it is full again (an idle client's, forgettable).
    fn refill(&mut self, now: Instant, rate: f64, burst: f64) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * rate;
        self.tokens = (self.tokens + refill).min(burst);
        self.at = now;
        self.tokens >= burst
    }
}

/// The review budgets: one for all, one per client address, one for first reviews; the addresses
/// of known readers, with when each last showed an allowed token; and the addresses seen, with
/// when each was first seen (within [`GOOD_CLIENT_MEMORY`], at most [`MAX_CLIENTS`]).
struct Budgets {
    all: Budget,
    clients: HashMap<IpAddr, Budget>,
    good: HashMap<IpAddr, Instant>,
    first: Budget,
    seen: HashMap<IpAddr, Instant>,
}

impl Budgets {
    /// Whether `ip` has had no review within [`GOOD_CLIENT_MEMORY`] (and there is room to
    /// record one: past [`MAX_CLIENTS`] addresses, none is new).
    fn is_new(&mut self, ip: IpAddr, now: Instant) -> bool {
        if self.seen.get(&ip).is_some_and(|at| *at + GOOD_CLIENT_MEMORY > now) {
            return false;
        }
        if self.seen.len() >= MAX_CLIENTS && !self.seen.contains_key(&ip) {
            self.seen.retain(|_, at| *at + GOOD_CLIENT_MEMORY > now);
        }
        self.seen.len() < MAX_CLIENTS || self.seen.contains_key(&ip)
    }

    /// `ip` had a review now (its first within [`GOOD_CLIENT_MEMORY`] is spent, if it was).
    fn reviewed(&mut self, ip: IpAddr, now: Instant) {
        if self.is_new(ip, now) {
            self.seen.insert(ip, now);
        }
    }
}

/// The verdicts kept: allowed and refused tokens apart, each within [`MAX_CACHED`].
#[derive(Default)]
struct Caches {
    allowed: HashMap<String, Verdict>,
    refused: HashMap<String, Verdict>,
}

impl Caches {
    fn get(&self, token: &str) -> Option<&Verdict> {
        self.allowed.get(token).or_else(|| self.refused.get(token))
    }
}

const BURST: f64 = 2.0 * REVIEWS_PER_SECOND;

/// Which budget a review is taken from.
enum Lane {
    /// A known reader's: its own alone.
    Own,
    /// The budget of all.
    All,
    /// The lane of first reviews (the budget of all is spent).
    First,
}
const CLIENT_BURST: f64 = 3.0;

/// The guard of `/metrics`.
pub struct MetricsAuth {
    client: kube::Client,
    /// The audience a token must be issued for; None: the apiserver's own.
    audience: Option<String>,
    timeout: Duration,
    cache: Mutex<Caches>,
    budgets: Mutex<Budgets>,
    metrics: Arc<Metrics>,
}

/// The token of an `Authorization: Bearer <token>` header (pure).
pub fn bearer_token(header: Option<&HeaderValue>) -> Option<&str> {
    let value = header?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_BYTES).then_some(token)
}

impl MetricsAuth {
    /// A guard that asks the apiserver of `client`, each review within `timeout`.
    pub fn new(client: kube::Client, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            audience: None,
            timeout,
            cache: Mutex::default(),
            budgets: Mutex::new(Budgets {
                all: Budget::full(BURST, Instant::now()),
                clients: HashMap::new(),
                good: HashMap::new(),
                first: Budget::full(FIRST_BURST, Instant::now()),
                seen: HashMap::new(),
            }),
            metrics,
        }
    }

    /// Tokens must be issued for `audience` (`--metrics-token-audience`); None: for the
    /// apiserver's own audiences, as any token it accepts.
    pub fn with_audience(mut self, audience: Option<String>) -> Self {
        self.audience = audience;
        self
    }

    /// Whether the request from `client` with this `Authorization` header may read `/metrics`.
    pub async fn check(&self, authorization: Option<&HeaderValue>, client: Option<IpAddr>) -> Result<(), Denied> {
        let answer = self.answer(authorization, client).await;
        let result = match &answer {
            Ok(()) => "allowed",
            Err(denied) => denied.result(),
        };
        self.metrics.count_metrics_auth(result);
        answer
    }

    async fn answer(&self, authorization: Option<&HeaderValue>, client: Option<IpAddr>) -> Result<(), Denied> {
        let token = bearer_token(authorization).ok_or(Denied::NoToken)?;
        let now = Instant::now();
        if let Some(verdict) = self.lock_cache().get(token).filter(|v| v.until > now) {
            return verdict.answer.clone();
        }
        if !self.take_budget(client, now) {
            return Err(Denied::Throttled);
        }
        let answer = tokio::time::timeout(self.timeout, self.review(token))
            .await
            .unwrap_or_else(|_| Err(Denied::Unavailable("no answer in time".into())));
        if !matches!(answer, Err(Denied::Unavailable(_))) {
            let ttl = if answer.is_ok() { ALLOWED_TTL } else { REFUSED_TTL };
            self.remember(token, answer.clone(), now + ttl);
        }
        if let (Ok(()), Some(ip)) = (&answer, client) {
            self.known_reader(ip, now);
        }
        answer
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Caches> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember `ip` as a known reader's address from `now`, within [`MAX_GOOD_CLIENTS`] (the
    /// one seen longest ago makes room).
    fn known_reader(&self, ip: IpAddr, now: Instant) {
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        budgets.good.retain(|_, seen| *seen + GOOD_CLIENT_MEMORY > now);
        if budgets.good.len() >= MAX_GOOD_CLIENTS
            && !budgets.good.contains_key(&ip)
            && let Some(oldest) = budgets.good.iter().min_by_key(|(_, seen)| **seen).map(|(ip, _)| *ip)
        {
            budgets.good.remove(&oldest);
        }
        budgets.good.insert(ip, now);
    }

    /// Take one review from the client's budget and the budget of all, or none when either is
    /// spent; a known reader's address ([`GOOD_CLIENT_MEMORY`]) from its own budget alone; an
    /// address's first review in that time, when the budget of all is spent, from the lane of
    /// first reviews ([`FIRST_REVIEWS_PER_SECOND`]). At most [`MAX_CLIENTS`] client budgets are
    /// kept: idle ones (full again) are forgotten first; a new client past that has no budget until
    /// one is (a known reader always has one).
    fn take_budget(&self, client: Option<IpAddr>, now: Instant) -> bool {
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        budgets.all.refill(now, REVIEWS_PER_SECOND, BURST);
        budgets.first.refill(now, FIRST_REVIEWS_PER_SECOND, FIRST_BURST);
        let known = client.is_some_and(|ip| {
            budgets
                .good
                .get(&ip)
                .is_some_and(|seen| *seen + GOOD_CLIENT_MEMORY > now)
        });
        let first = client.is_some_and(|ip| budgets.is_new(ip, now));
        let lane = if known {
            Lane::Own
        } else if budgets.all.tokens >= 1.0 {
            Lane::All
        } else if first && budgets.first.tokens >= 1.0 {
            Lane::First
        } else {
            return false;
        };
        if let Some(ip) = client {
            if !known && !budgets.clients.contains_key(&ip) && budgets.clients.len() >= MAX_CLIENTS {
                budgets
                    .clients
                    .retain(|_, b| !b.refill(now, REVIEWS_PER_CLIENT_PER_SECOND, CLIENT_BURST));
                if budgets.clients.len() >= MAX_CLIENTS {
                    return false;
                }
            }
            let mine = budgets
                .clients
                .entry(ip)
                .or_insert_with(|| Budget::full(CLIENT_BURST, now));
            mine.refill(now, REVIEWS_PER_CLIENT_PER_SECOND, CLIENT_BURST);
            if mine.tokens < 1.0 {
                return false;
            }
            mine.tokens -= 1.0;
            budgets.reviewed(ip, now);
        }
        match lane {
            Lane::Own => {}
            Lane::All => budgets.all.tokens -= 1.0,
            Lane::First => budgets.first.tokens -= 1.0,
        }
        true
    }

    /// Keep `answer` for `token` until `until`, in the cache of its kind (allowed or refused),
    /// within [`MAX_CACHED`] tokens there: expired answers go first, then the one that expires
    /// soonest. A token's answer of the other kind is forgotten.
    fn remember(&self, token: &str, answer: Result<(), Denied>, until: Instant) {
        let mut caches = self.lock_cache();
        let Caches { allowed, refused } = &mut *caches;
        let (cache, other) = if answer.is_ok() {
            (allowed, refused)
        } else {
            (refused, allowed)
        };
        other.remove(token);
        if cache.len() >= MAX_CACHED && !cache.contains_key(token) {
            let now = Instant::now();
            cache.retain(|_, v| v.until > now);
            if cache.len() >= MAX_CACHED
                && let Some(soonest) = cache.iter().min_by_key(|(_, v)| v.until).map(|(k, _)| k.clone())
            {
                cache.remove(&soonest);
            }
        }
        cache.insert(token.to_owned(), Verdict { answer, until });
    }

    /// TokenReview, then SubjectAccessReview of `get /metrics` for the user it names.
    async fn review(&self, token: &str) -> Result<(), Denied> {
        let unavailable = |what: &str, error: kube::Error| {
            warn!(error = %error, "cannot {what} for a /metrics request");
            Denied::Unavailable(format!("{what}: {error}"))
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: self.audience.clone().map(|a| vec![a]),
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable("review the token", e))?;
        let status = reviewed.status.unwrap_or_default();
        // Asked for an audience, the apiserver names the ones the token is good for of those asked;
        // a token not issued for plegd's is no reader's.
        let for_us = self
            .audience
            .as_ref()
            .is_none_or(|a| status.audiences.as_ref().is_some_and(|got| got.contains(a)));
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true) && for_us) else {
            debug!("a /metrics request with a token the apiserver does not authenticate");
            return Err(Denied::Unauthenticated);
        };
        let username = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|e| unavailable("review the access", e))?;
        if decided.status.is_some_and(|s| s.allowed) {
            Ok(())
        } else {
            debug!(user = %username, "a /metrics request by a user who may not get /metrics");
            Err(Denied::Forbidden { user: username })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::manager::script::Script;
    use serde_json::json;

    fn header(v: &str) -> HeaderValue {
        HeaderValue::from_str(v).unwrap()
    }

    #[test]
    fn only_a_bearer_token_of_sane_length_is_taken() {
        assert_eq!(bearer_token(Some(&header("Bearer abc"))), Some("abc"));
        assert_eq!(bearer_token(Some(&header("bearer  abc "))), Some("abc"));
        assert_eq!(bearer_token(Some(&header("Basic abc"))), None);
        assert_eq!(bearer_token(Some(&header("Bearer "))), None);
        assert_eq!(bearer_token(None), None);
        // Bytes that are not visible ASCII (a token is base64url): no token, never a panic.
        let odd = HeaderValue::from_bytes("Bearer jeton-é\u{1F600}".as_bytes()).unwrap();
        assert_eq!(bearer_token(Some(&odd)), None);
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
        assert_eq!(bearer_token(Some(&header(&long))), None);
    }

    fn token_review(authenticated: bool) -> serde_json::Value {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {},
            "status": {"authenticated": authenticated, "user": {"username": "system:serviceaccount:monitoring:prometheus", "groups": ["system:serviceaccounts"]}}})
    }

    fn access_review(allowed: bool) -> serde_json::Value {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {},
            "status": {"allowed": allowed}})
    }

    /// Each verdict of the apiserver, cached: the same token asks no more reviews.
    #[tokio::test]
    async fn the_apiserver_decides_and_its_answers_are_cached() {
        let script = Script::new(
            &[
                (201, token_review(true)),
                (201, access_review(true)),
                (201, token_review(true)),
                (201, access_review(false)),
                (201, token_review(false)),
                (
                    500,
                    json!({"kind": "Status", "status": "Failure", "code": 500, "message": "boom"}),
                ),
            ],
            token_review(false),
        );
        let metrics = Arc::new(Metrics::new());
        let auth = MetricsAuth::new(script.client(), Duration::from_secs(5), metrics.clone());
        assert_eq!(auth.check(None, None).await, Err(Denied::NoToken));
        assert_eq!(auth.check(Some(&header("Bearer good")), None).await, Ok(()));
        assert_eq!(auth.check(Some(&header("Bearer good")), None).await, Ok(()), "cached");
        assert!(matches!(
            auth.check(Some(&header("Bearer other")), None).await,
            Err(Denied::Forbidden { .. })
        ));
        assert_eq!(
            auth.check(Some(&header("Bearer bogus")), None).await,
            Err(Denied::Unauthenticated)
        );
        assert_eq!(
            auth.check(Some(&header("Bearer bogus")), None).await,
            Err(Denied::Unauthenticated),
            "a refusal is cached too"
        );
        assert!(matches!(
            auth.check(Some(&header("Bearer later")), None).await,
            Err(Denied::Unavailable(_))
        ));
        let sent = script.sent();
        assert_eq!(sent.len(), 6, "{sent:?}");
        assert_eq!(sent[0].1["spec"]["token"], "good");
        assert_eq!(sent[1].1["spec"]["nonResourceAttributes"]["path"], "/metrics");
        assert_eq!(sent[1].1["spec"]["user"], "system:serviceaccount:monitoring:prometheus");
        // A failed review is not cached: asked again (and now refused).
        assert_eq!(
            auth.check(Some(&header("Bearer later")), None).await,
            Err(Denied::Unauthenticated)
        );
        assert_eq!(script.sent().len(), 7);
        let text = metrics.encode();
        assert!(
            text.contains("plegd_metrics_auth_total{result=\"allowed\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("plegd_metrics_auth_total{result=\"unauthenticated\"} 4"),
            "{text}"
        );
    }

    /// Random tokens cannot make plegd flood the apiserver with reviews: one client gets a few,
    /// all of them together a few more; an allowed reader is not locked out meanwhile.
    #[tokio::test(start_paused = true)]
    async fn reviews_of_unknown_tokens_are_rate_limited_and_the_cache_bounded() {
        let script = Script::answering_by_default(token_review(false));
        let auth = MetricsAuth::new(script.client(), Duration::from_secs(5), Arc::new(Metrics::new()));
        let attacker: IpAddr = "10.0.0.66".parse().unwrap();
        let bearer = |t: String| header(&format!("Bearer {t}"));
        let mut throttled = 0;
        for i in 0..100 {
            if auth.check(Some(&bearer(format!("t{i}"))), Some(attacker)).await == Err(Denied::Throttled) {
                throttled += 1;
            }
        }
        assert_eq!(script.sent().len(), CLIENT_BURST as usize, "one client: its burst");
        assert_eq!(throttled, 100 - CLIENT_BURST as usize);
        // Many clients: the budget of all.
        for i in 0..100u8 {
            let _ = auth
                .check(Some(&bearer(format!("u{i}"))), Some(IpAddr::from([10, 1, 0, i])))
                .await;
        }
        let most = (BURST + FIRST_BURST) as usize;
        assert_eq!(
            script.sent().len(),
            most,
            "all clients: the burst of all, then that of first reviews"
        );
        // The same clients again: no first review is left to them.
        for i in 0..100u8 {
            let _ = auth
                .check(Some(&bearer(format!("v{i}"))), Some(IpAddr::from([10, 1, 0, i])))
                .await;
        }
        assert_eq!(script.sent().len(), most);
        // A second later, one more per second in all.
        tokio::time::advance(Duration::from_secs(1)).await;
        let _ = auth
            .check(Some(&bearer("late".into())), Some(IpAddr::from([10, 1, 0, 1])))
            .await;
        assert_eq!(script.sent().len(), most + 1);
        for i in 0..(2 * MAX_CACHED) {
            auth.remember(
                &format!("x{i}"),
                Err(Denied::Unauthenticated),
                Instant::now() + REFUSED_TTL,
            );
        }
        assert_eq!(auth.lock_cache().refused.len(), MAX_CACHED);
    }

    /// With `--metrics-token-audience`, the review asks for that audience, and a token the
    /// apiserver authenticates for other audiences only (a token for the apiserver itself, which a
    /// node seeing it could use there) is refused.
    #[tokio::test]
    async fn a_token_must_be_issued_for_plegds_audience_when_one_is_set() {
        let for_audience = |audiences: serde_json::Value| {
            let mut review = token_review(true);
            review["status"]["audiences"] = audiences;
            review
        };
        let script = Script::new(
            &[
                (201, for_audience(json!(["plegd.example.com"]))),
                (201, access_review(true)),
                (201, for_audience(json!([]))),
                (201, token_review(true)),
            ],
            token_review(false),
        );
        let auth = MetricsAuth::new(script.client(), Duration::from_secs(5), Arc::new(Metrics::new()))
            .with_audience(Some("plegd.example.com".into()));
        assert_eq!(auth.check(Some(&header("Bearer mine")), None).await, Ok(()));
        let (_, asked) = &script.sent()[0];
        assert_eq!(asked["spec"]["audiences"], json!(["plegd.example.com"]), "{asked}");
        assert_eq!(
            auth.check(Some(&header("Bearer apiservers")), None).await,
            Err(Denied::Unauthenticated)
        );
        assert_eq!(
            auth.check(Some(&header("Bearer none-named")), None).await,
            Err(Denied::Unauthenticated)
        );
        // Without an audience set, the review asks for none (the apiserver's own).
        let script = Script::new(
            &[(201, token_review(true)), (201, access_review(true))],
            token_review(false),
        );
        let auth = MetricsAuth::new(script.client(), Duration::from_secs(5), Arc::new(Metrics::new()));
        assert_eq!(auth.check(Some(&header("Bearer any")), None).await, Ok(()));
        assert!(script.sent()[0].1["spec"]["audiences"].is_null());
    }

    /// 200 requests with tokens the apiserver refuses, from as many addresses: past the budget of
    /// all.
    async fn flood(auth: &MetricsAuth) {
        for i in 0..200u8 {
            let _ = auth
                .check(
                    Some(&header(&format!("Bearer f{i}"))),
                    Some(IpAddr::from([10, 3, 0, i])),
                )
                .await;
        }
    }

    /// A flood of refused tokens from many addresses, past the cache's size and the budget of all:
    /// an allowed reader's verdict stays cached, and once it has expired the reader's address,
    /// known, is reviewed from its own budget, not the spent budget of all.
    #[tokio::test(start_paused = true)]
    async fn a_flood_neither_forgets_a_reader_nor_spends_its_reviews() {
        let mut answers = vec![(201, token_review(true)), (201, access_review(true))];
        answers.extend((0..(BURST + FIRST_BURST) as usize).map(|_| (201, token_review(false))));
        answers.extend([(201, token_review(true)), (201, access_review(true))]);
        let script = Script::new(&answers, token_review(false));
        let auth = MetricsAuth::new(script.client(), Duration::from_secs(5), Arc::new(Metrics::new()));
        let prometheus: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(auth.check(Some(&header("Bearer prom")), Some(prometheus)).await, Ok(()));
        // Refused verdicts past the cache's size: the allowed one is still there.
        for i in 0..(2 * MAX_CACHED) {
            auth.remember(
                &format!("x{i}"),
                Err(Denied::Unauthenticated),
                Instant::now() + REFUSED_TTL,
            );
        }
        let sent = script.sent().len();
        assert_eq!(auth.check(Some(&header("Bearer prom")), Some(prometheus)).await, Ok(()));
        assert_eq!(script.sent().len(), sent, "answered from the cache");
        // Past its lifetime, with the budget of all spent by a flood.
        tokio::time::advance(ALLOWED_TTL + Duration::from_secs(1)).await;
        flood(&auth).await;
        assert_eq!(
            auth.check(Some(&header("Bearer new")), Some(IpAddr::from([10, 4, 0, 1])))
                .await,
            Err(Denied::Throttled),
            "the budget of all is spent"
        );
        assert_eq!(auth.check(Some(&header("Bearer prom")), Some(prometheus)).await, Ok(()));
    }

    /// A client of the apiserver that authenticates `prom` alone and lets it get /metrics, and
    /// counts the reviews it answered.
    fn apiserver_knowing_prometheus() -> (kube::Client, Arc<std::sync::atomic::AtomicUsize>) {
        use http_body_util::BodyExt;
        let reviews = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = reviews.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let answer = match body["kind"].as_str() {
                    Some("TokenReview") => token_review(body["spec"]["token"] == "prom"),
                    _ => access_review(true),
                };
                let response = http::Response::builder()
                    .status(201)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (kube::Client::new(service, "default"), reviews)
    }

    /// A plegd that starts during a flood knows no reader: a flood from 30 addresses, each
    /// sending a new token every 100 ms, spends the budget of all for good; Prometheus, new, gets
    /// in all the same — by its first review, once the flood's addresses have spent theirs (within
    /// about 30 / 6 s, at most 30 s) — and from then on every scrape. The flood's addresses are
    /// not let in, and the apiserver sees no more than the budgets. (Before the lane of first
    /// reviews, Prometheus got 429 for as long as the flood lasted.)
    #[tokio::test(start_paused = true)]
    async fn a_reader_new_to_a_plegd_gets_in_during_a_flood() {
        let (client, reviews) = apiserver_knowing_prometheus();
        let auth = MetricsAuth::new(client, Duration::from_secs(5), Arc::new(Metrics::new()));
        let prometheus: IpAddr = "10.0.0.9".parse().unwrap();
        let mut scrapes = Vec::new();
        let start = Instant::now();
        let mut token = 0u32;
        for tick in 0..1200u32 {
            for a in 0..30u8 {
                token += 1;
                let answer = auth
                    .check(
                        Some(&header(&format!("Bearer flood{token}"))),
                        Some(IpAddr::from([10, 5, 0, a])),
                    )
                    .await;
                assert_ne!(answer, Ok(()), "a flood's token let in");
            }
            // Prometheus scrapes every 10 s from the 10th second on.
            if tick >= 100 && tick % 100 == 0 {
                scrapes.push(auth.check(Some(&header("Bearer prom")), Some(prometheus)).await);
            }
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert!(scrapes.len() >= 10, "{scrapes:?}");
        let first = scrapes.iter().position(|s| *s == Ok(()));
        assert!(first.is_some_and(|i| i <= 2), "let in within 30 s: {scrapes:?}");
        assert!(
            scrapes[first.unwrap()..].iter().all(|s| *s == Ok(())),
            "every scrape let in from then on: {scrapes:?}"
        );
        // What the apiserver saw: two reviews (TokenReview and SubjectAccessReview) per allowed
        // token, one per refused one, within the budgets' bounds.
        let seconds = start.elapsed().as_secs_f64();
        let bound = BURST + FIRST_BURST + seconds * (REVIEWS_PER_SECOND + FIRST_REVIEWS_PER_SECOND) + 10.0;
        let sent = reviews.load(std::sync::atomic::Ordering::Relaxed) as f64;
        assert!(sent <= bound, "{sent} reviews in {seconds} s, more than {bound}");
    }

    /// An allowed answer is not used past its lifetime, even while a flood spends the budget of
    /// all: the reader's address, known, is reviewed again, and a token revoked meanwhile is
    /// refused (it read for [`ALLOWED_TTL`] at most).
    #[tokio::test(start_paused = true)]
    async fn a_revoked_reader_is_refused_after_its_answers_lifetime_flood_or_not() {
        let script = Script::new(
            &[(201, token_review(true)), (201, access_review(true))],
            token_review(false),
        );
        let auth = MetricsAuth::new(script.client(), Duration::from_secs(5), Arc::new(Metrics::new()));
        let prometheus: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(auth.check(Some(&header("Bearer prom")), Some(prometheus)).await, Ok(()));
        tokio::time::advance(ALLOWED_TTL + Duration::from_secs(1)).await;
        flood(&auth).await;
        assert_eq!(
            auth.check(Some(&header("Bearer prom")), Some(prometheus)).await,
            Err(Denied::Unauthenticated)
        );
    }
}
