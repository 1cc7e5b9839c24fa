//! The apiserver clients of `plegd run`: built from `--kubeconfig` (or as kube-rs infers them),
//! each request bounded by a deadline, counted by verb and code, its warnings logged once and its
//! `Retry-After` noted for the status writers. Every stage that speaks to the apiserver gets its
//! client from here; none builds one.

use std::path::PathBuf;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tracing::{debug, warn};

use crate::metrics::Metrics;
use crate::util::backoff::RetryAfter;

/// Why the apiserver clients cannot be built. Each names its cause in its own text.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read --kubeconfig {path}: {error}")]
    Kubeconfig {
        path: PathBuf,
        error: kube::config::KubeconfigError,
    },
    #[error("no apiserver configuration found (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    InferConfig(kube::config::InferConfigError),
    #[error("cannot build the apiserver client: {0}")]
    Build(kube::Error),
    #[error("the kubeconfig's tls-server-name {0:?} is not a valid server name: {1}")]
    ServerName(String, String),
}

/// A tower layer on the apiserver client that counts requests by verb and response code
/// (`plegd_apiserver_requests_total`; code `error` when no response came), and logs each distinct
/// `Warning` header the apiserver answers with once (an unknown field in a status plegd writes, a
/// deprecated API): one line per warning, not one per write; and takes note of each `Retry-After`
/// the apiserver sends with a 429 or a 5xx, for the status writers to honour ([`RetryAfter`]).
#[derive(Clone)]
struct CountRequestsLayer {
    metrics: Arc<Metrics>,
    warnings: Arc<ApiserverWarnings>,
    retry_after: Arc<RetryAfter>,
}

#[derive(Clone)]
struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
    warnings: Arc<ApiserverWarnings>,
    retry_after: Arc<RetryAfter>,
}

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            metrics: self.metrics.clone(),
            warnings: self.warnings.clone(),
            retry_after: self.retry_after.clone(),
        }
    }
}

/// The apiserver's warnings already logged. Bounded: past [`ApiserverWarnings::MAX`] distinct
/// warnings, new ones are counted but no longer logged, so a server that puts a changing value in
/// its warnings cannot grow plegd's memory or flood its log.
#[derive(Default)]
struct ApiserverWarnings {
    seen: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl ApiserverWarnings {
    const MAX: usize = 64;
    /// Longest warning text kept and logged, in bytes.
    const MAX_LEN: usize = 512;

    /// Log `headers`' warnings that were not logged before.
    fn observe(&self, headers: &http::HeaderMap, verb: &str, metrics: &Metrics) {
        for value in headers.get_all(http::header::WARNING) {
            let text = String::from_utf8_lossy(value.as_bytes());
            let mut end = text.len().min(Self::MAX_LEN);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let text = &text[..end];
            metrics.count_apiserver_warning();
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() < Self::MAX && seen.insert(text.to_owned()) {
                warn!(verb, warning = ?text, "apiserver warning (logged once)");
            }
        }
    }
}

impl<S, B, R> tower::Service<http::Request<B>> for CountRequests<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let verb = if watch {
            "WATCH".to_owned()
        } else {
            request.method().as_str().to_owned()
        };
        let metrics = self.metrics.clone();
        let warnings = self.warnings.clone();
        let retry_after = self.retry_after.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(r) => {
                    warnings.observe(r.headers(), &verb, &metrics);
                    let status = r.status().as_u16();
                    let asked = r.headers().get(http::header::RETRY_AFTER).map(|v| v.as_bytes());
                    if let Some(wait) = RetryAfter::requested(status, asked) {
                        debug!(verb, code = status, wait = ?wait, "apiserver asked plegd to wait (Retry-After)");
                        metrics.count_apiserver_retry_after();
                        retry_after.push(wait);
                    }
                    status.to_string()
                }
                Err(_) => "error".to_owned(),
            };
            metrics.count_apiserver_request(&verb, &code);
            result
        })
    }
}

/// The apiserver clients of `plegd run`, each with deadlines so that no request waits forever on a
/// dead or black-holed connection (an apiserver powered off, a load balancer path gone): plegd
/// sees that and makes a new connection, as client-go's HTTP/2 health checks let the kubelet do.
///
/// All three share one connection pool: where the apiserver speaks HTTP/2 (kube-apiserver does,
/// over TLS), that is one connection per plegd, every request and the informer's watch multiplexed
/// on it, as the kubelet holds one — one TLS handshake per node after an apiserver restart, not
/// one per concurrent request. A connection that answers no HTTP/2 PING within the request timeout
/// is given up (the kubelet: 30 s without a frame, then 15 s for the PING).
#[derive(Clone)]
pub struct ApiClients {
    /// For requests that answer at once (status PATCHes, DELETEs, Events): the answer's head, and
    /// then each wait for the next bytes of its body, are bounded by the request timeout.
    pub requests: kube::Client,
    /// For the informer's LIST and WATCH: the apiserver is asked to end each watch after
    /// [`watch_timeout`] (so a healthy watch is renewed that often), and a watch silent for
    /// longer than the longest such timeout and a margin is given up.
    pub watches: kube::Client,
    /// For the reviews that guard `/metrics`: like `requests`, but a `Retry-After` answered to a
    /// review (which clients of `/metrics` cause) does not hold back the status writes.
    pub reviews: kube::Client,
}

/// How long the apiserver is asked to keep one watch open, for a request timeout of `request` and
/// a `draw` in [0, 1): as client-go's reflectors ask (the kubelet's among them), between 5 and 10
/// minutes at the default request timeout — ten to twenty times it, never more than that —, drawn
/// once per plegd so that a fleet's watches are not renewed in step. A renewal resumes from the
/// last version seen; on a busy cluster the apiserver's watch cache may no longer hold it, and the
/// informer lists again: renewing seldom keeps those lists rare. A dead connection is not waited
/// for that long: it answers no PING ([`ApiClients`]). Whole seconds, at least one.
pub fn watch_timeout(request: std::time::Duration, draw: f64) -> std::time::Duration {
    let low = (request * 10).clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(300));
    let timeout = low.mul_f64(1.0 + draw.clamp(0.0, 0.999));
    std::time::Duration::from_secs(timeout.as_secs().max(1))
}

/// A draw in [0, 1) for [`watch_timeout`], different in each process.
pub fn watch_timeout_draw() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Longer than a watch may be silent: the watch's own timeout and this margin.
const WATCH_SILENCE_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The apiserver clients: from `--kubeconfig`, else as kube-rs infers it (KUBECONFIG, the default
/// kubeconfig, or the in-cluster service account), with `request_timeout` as the deadline of each
/// request ([`ApiClients`]). Every request is counted in `metrics`, and every `Retry-After` the
/// apiserver asks for is noted in `retry_after`.
pub async fn kube_clients(
    kubeconfig: Option<&PathBuf>,
    request_timeout: std::time::Duration,
    metrics: Arc<Metrics>,
    retry_after: Arc<RetryAfter>,
) -> Result<ApiClients, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|error| ClientError::Kubeconfig {
                path: path.clone(),
                error,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|error| ClientError::Kubeconfig {
                    path: path.clone(),
                    error,
                })?
        }
        None => kube::Config::infer().await.map_err(ClientError::InferConfig)?,
    };
    let layer = CountRequestsLayer {
        metrics,
        warnings: Arc::default(),
        retry_after,
    };
    let apart = CountRequestsLayer {
        retry_after: Arc::default(),
        ..layer.clone()
    };
    let watch_silence = watch_timeout(request_timeout, 1.0) + WATCH_SILENCE_MARGIN;
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        // A proxy, or a credential plugin whose client certificate expires: kube's own stack,
        // which handles both (HTTP/1.1 only).
        return kube_stack(config, request_timeout, watch_silence, &layer, &apart);
    }
    // kube's retry of 429s, 503s and 504s is not in this stack: every answer the apiserver gives
    // is counted and seen here, a `Retry-After` holds back every status write rather than one
    // request, and each caller retries with its own backoff (the status writers, the informer).
    let http = http_client(&config, request_timeout)?;
    let build = |deadlines: Deadlines, count: &CountRequestsLayer| {
        use kube::client::ConfigExt;
        let service = tower::ServiceBuilder::new()
            .layer(count.clone())
            .layer(deadlines)
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer().map_err(ClientError::Build)?)
            .layer(config.extra_headers_layer().map_err(ClientError::Build)?)
            .map_err(BoxError::from)
            .service(http.clone());
        Ok::<_, ClientError>(kube::Client::new(service, config.default_namespace.clone()))
    };
    let requests = Deadlines {
        answer: request_timeout,
        silence: request_timeout,
    };
    let watches = Deadlines {
        answer: watch_silence,
        silence: watch_silence,
    };
    Ok(ApiClients {
        requests: build(requests, &layer)?,
        watches: build(watches, &layer)?,
        reviews: build(requests, &apart)?,
    })
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connection pool of plegd's apiserver clients: HTTP/2 offered over TLS (ALPN `h2`, then
/// `http/1.1`), PINGs on a connection that has been silent for `request_timeout`, and the
/// connection given up when one is not answered in `request_timeout` either.
fn http_client(
    config: &kube::Config,
    request_timeout: std::time::Duration,
) -> Result<
    hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        kube::client::Body,
    >,
    ClientError,
> {
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    use kube::client::ConfigExt;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(request_timeout));
    let tls = config.rustls_client_config().map_err(ClientError::Build)?;
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls_pki_types::ServerName::try_from(name.clone())
            .map_err(|e| ClientError::ServerName(name.clone(), e.to_string()))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let connector = https.enable_all_versions().wrap_connector(tcp);
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(request_timeout)
        .http2_keep_alive_timeout(request_timeout)
        .http2_keep_alive_while_idle(true)
        .build(connector))
}

/// kube's own client stack (HTTP/1.1, a pool per client), its timeouts on each connection's reads.
fn kube_stack(
    config: kube::Config,
    request_timeout: std::time::Duration,
    watch_silence: std::time::Duration,
    layer: &CountRequestsLayer,
    apart: &CountRequestsLayer,
) -> Result<ApiClients, ClientError> {
    let mut config = config;
    config.default_retry = false;
    config.connect_timeout = Some(request_timeout);
    config.write_timeout = Some(request_timeout);
    // Counted from when a request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    let build = |read_timeout, layer: &CountRequestsLayer| {
        let mut config = config.clone();
        config.read_timeout = Some(read_timeout);
        let builder = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?;
        Ok::<_, ClientError>(builder.with_layer(layer).build())
    };
    Ok(ApiClients {
        requests: build(request_timeout, layer)?,
        watches: build(watch_silence, layer)?,
        reviews: build(request_timeout, apart)?,
    })
}

/// How long a request may take: until the head of its answer, and then between two pieces of its
/// body. Past either, the request fails (and, on HTTP/2, its stream is reset; the connection lives
/// on while it answers PINGs).
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    answer: std::time::Duration,
    silence: std::time::Duration,
}

/// A request that ran past one of its [`Deadlines`].
#[derive(Debug, thiserror::Error)]
enum DeadlineError {
    #[error("no answer from the apiserver within {0:?}")]
    Answer(std::time::Duration),
    #[error("the apiserver's answer stalled for {0:?}")]
    Silence(std::time::Duration),
}

impl<S> tower::Layer<S> for Deadlines {
    type Service = WithDeadlines<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WithDeadlines {
            inner,
            deadlines: *self,
        }
    }
}

#[derive(Clone)]
struct WithDeadlines<S> {
    inner: S,
    deadlines: Deadlines,
}

impl<S, B, R> tower::Service<http::Request<B>> for WithDeadlines<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    R: http_body::Body + Unpin,
{
    type Response = http::Response<SilenceBounded<R>>;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let Deadlines { answer, silence } = self.deadlines;
        let response = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(answer, response).await {
                Err(_) => Err(DeadlineError::Answer(answer).into()),
                Ok(Err(error)) => Err(error.into()),
                Ok(Ok(response)) => Ok(response.map(|body| SilenceBounded {
                    body,
                    silence,
                    deadline: Box::pin(tokio::time::sleep(silence)),
                })),
            }
        })
    }
}

/// A response body that fails once it has been silent for `silence`.
struct SilenceBounded<R> {
    body: R,
    silence: std::time::Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<R> http_body::Body for SilenceBounded<R>
where
    R: http_body::Body + Unpin,
    R::Error: Into<BoxError>,
{
    type Data = R::Data;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, BoxError>>> {
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.silence;
                this.deadline.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(DeadlineError::Silence(this.silence).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::{Layer, Service, ServiceExt};

    /// A body that yields one frame and then nothing, ever.
    struct OneFrameThenSilence(bool);

    impl http_body::Body for OneFrameThenSilence {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
            if std::mem::replace(&mut self.0, true) {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::from_static(b"{")))))
            }
        }
    }

    const DEADLINES: Deadlines = Deadlines {
        answer: std::time::Duration::from_secs(2),
        silence: std::time::Duration::from_secs(5),
    };

    #[test]
    fn watches_last_five_to_ten_minutes_at_the_default_timeout_and_ten_to_twenty_times_a_short_one() {
        let s = std::time::Duration::from_secs;
        assert_eq!(watch_timeout(s(30), 0.0), s(300));
        assert_eq!(watch_timeout(s(30), 0.5), s(450));
        assert_eq!(watch_timeout(s(30), 1.0), s(599), "the draw is below 1");
        assert_eq!(watch_timeout(s(600), 0.0), s(300), "never longer than client-go's");
        assert_eq!(watch_timeout(s(1), 0.0), s(10));
        assert_eq!(watch_timeout(s(1), 0.99), s(19));
        for _ in 0..100 {
            let d = watch_timeout_draw();
            assert!((0.0..1.0).contains(&d), "{d}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_an_answer_fails_at_its_deadline() {
        let never = tower::service_fn(|_: http::Request<()>| {
            std::future::pending::<Result<http::Response<OneFrameThenSilence>, BoxError>>()
        });
        let started = tokio::time::Instant::now();
        let error = DEADLINES
            .layer(never)
            .oneshot(http::Request::new(()))
            .await
            .err()
            .expect("no answer is an error");
        assert_eq!(started.elapsed(), DEADLINES.answer);
        assert_eq!(error.to_string(), "no answer from the apiserver within 2s");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_stalls_fails_after_its_silence_and_not_before() {
        let stalls = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(OneFrameThenSilence(false)))
        });
        let mut service = DEADLINES.layer(stalls);
        let response = service
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap();
        let mut body = response.into_body();
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        let started = tokio::time::Instant::now();
        let first = body.frame().await.expect("a frame").expect("the first frame");
        assert_eq!(first.into_data().unwrap(), "{");
        let error = body.frame().await.expect("an end").expect_err("silence is an error");
        assert_eq!(
            started.elapsed(),
            DEADLINES.silence,
            "the silence counts from the last frame, not from the answer"
        );
        assert_eq!(error.to_string(), "the apiserver's answer stalled for 5s");
    }

    fn headers(values: &[&[u8]]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append(http::header::WARNING, http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn each_warning_is_kept_once_bounded_and_whole_characters() {
        let warnings = ApiserverWarnings::default();
        let metrics = Metrics::new();
        let unknown = br#"299 - "unknown field \"status.bogus\"""#;
        for _ in 0..3 {
            warnings.observe(&headers(&[unknown]), "PATCH", &metrics);
        }
        assert_eq!(warnings.seen.lock().unwrap().len(), 1, "a repeat is not kept again");
        assert!(
            metrics.encode().contains("plegd_apiserver_warnings_total 3"),
            "every one counted"
        );

        // Bytes that are not UTF-8, and a long non-ASCII text cut at a character boundary.
        let long = "é".repeat(1000);
        warnings.observe(&headers(&[b"299 - \xff\xfe", long.as_bytes()]), "PATCH", &metrics);
        let seen = warnings.seen.lock().unwrap();
        let kept = seen.iter().find(|w| w.starts_with('é')).unwrap();
        assert!(kept.len() <= ApiserverWarnings::MAX_LEN && kept.chars().all(|c| c == 'é'));
        drop(seen);

        // At most MAX distinct warnings are kept; more are counted only.
        for i in 0..2 * ApiserverWarnings::MAX {
            warnings.observe(&headers(&[format!("299 - \"w{i}\"").as_bytes()]), "GET", &metrics);
        }
        assert_eq!(warnings.seen.lock().unwrap().len(), ApiserverWarnings::MAX);
    }
}
