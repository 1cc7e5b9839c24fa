//! plegd: a per-node pod lifecycle event generator. It relists the container runtime over CRI like
//! the kubelet's PLEG, keeps a per-pod status cache, and emits pod lifecycle events.
//!
//! The modules follow the data from the runtime outwards:
//! [`runtime`] (CRI client, conversion, the runtime's event streams) → [`triggers`] (runtime events
//! that ask for targeted relists) → [`kubecontainer`] (the runtime's view of pods: `Runtime…` types)
//! → [`pleg`] (records, diff, relist, event channel, the fan-out of events, the handle readers get)
//! → [`cache`] (per-pod runtime status: one writer, many readers) → [`observe`] (the events API)
//! and [`watch`] (printing events, in [`mod@print`]'s lines). Towards the apiserver: [`informer`] (the
//! node's pods, each kept as a [`pod::ApiPod`]) → [`sync_loop`] (*when* a pod is synced) →
//! [`status`] (*what* is written: [`status::decide`] over generation; *how*: patches and the status
//! manager on a [`workqueue`]), over the apiserver clients of [`kube_client`]. [`daemon`] starts it all for `plegd run` under [`supervise`]; [`cli`]
//! turns flags into each stage's settings, complete and checked.
//!
//! Names say which side a type is on: `Runtime…` is what the container runtime reports
//! ([`kubecontainer`]), `Api…` is plegd's trimmed copy of an API object ([`pod`]), and the bare
//! Kubernetes names (`Pod`, `PodStatus`, `ContainerStatus`) are k8s-openapi's API types.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod daemon;
pub mod http;
pub mod informer;
pub mod kube_client;
pub mod kubecontainer;
pub mod listen;
pub mod metrics;
pub mod metrics_auth;
pub mod observe;
pub mod pleg;
pub mod pod;
pub mod print;
pub mod rate_limit;
pub mod recorder;
pub mod runtime;
pub mod status;
pub mod supervise;
pub mod sync_loop;
pub mod tls;
pub mod triggers;
pub mod watch;
pub mod watchdog;
pub mod workqueue;
