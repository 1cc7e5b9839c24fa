//! Everything a peer outside plegd reaches: the HTTP listeners and their bounds, `/metrics` over
//! TLS and who may read it, the health endpoints, and the service manager's watchdog.
//!
//! - [`http`]: the two HTTP listeners (`/metrics`; `/healthz`, `/readyz`) and [`http::Health`].
//! - [`listen`]: what every listener shares: a bound on open connections, the descriptor limit.
//! - [`tls`]: the serving certificate of `/metrics`, reloaded when its files change.
//! - [`metrics_auth`]: who may read `/metrics` (TokenReview and SubjectAccessReview).
//! - [`watchdog`]: systemd's READY=1 and watchdog pings while plegd is healthy.
//!
//! Only the daemon's wiring (and the flags that configure it, in `cli`) reaches this room; it
//! imports only the shared machinery and the metrics registry.

pub mod http;
pub mod listen;
pub mod metrics_auth;
pub mod tls;
pub mod watchdog;
