//! plegd: a per-node pod lifecycle event generator. It relists the container runtime over CRI like
//! the kubelet's PLEG, keeps a per-pod status cache, emits pod lifecycle events and writes pod
//! status back to the apiserver.
//!
//! The rooms follow the data from the runtime to the apiserver, top-down:
//! 1. [`runtime`] — the CRI client, conversion, the runtime's event streams;
//! 2. [`triggers`] — runtime events that ask for targeted relists;
//! 3. [`kubecontainer`] — the runtime's view of pods (`Runtime…` types) and the status cache;
//! 4. [`pleg`] — records, diff, relist, the event channel and its fan-out;
//! 5. [`apiserver`] — the clients, the informer over the node's pods ([`apiserver::pod::ApiPod`]),
//!    Events and client-side rate limits;
//! 6. [`sync_loop`] — *when* a pod is synced;
//! 7. [`status`] — *what* is written ([`status::generate`], [`status::decide`]) and *how* (patches,
//!    the status manager).
//!
//! Beside the flow: [`observe`] (the events and statuses for people: the API, `plegd watch`,
//! `plegd events`, `plegd status`), [`serve`] (what a network peer reaches: HTTP endpoints, TLS,
//! who may read `/metrics`, systemd's watchdog), [`metrics`] (the registry every stage counts
//! in) and [`util`] (backoff, clock, supervision, the work queue). [`daemon`] wires it all for
//! `plegd run`; [`cli`] turns flags into each stage's settings, complete and checked. Which room
//! may import which is written in docs/architecture.md and checked by tests/module_graph.rs.
//!
//! Names say which side a type is on: `Runtime…` is what the container runtime reports
//! ([`kubecontainer`]), `Api…` is plegd's trimmed copy of an API object ([`apiserver::pod`]), and
//! the bare Kubernetes names (`Pod`, `PodStatus`, `ContainerStatus`) are k8s-openapi's API types.
#![forbid(unsafe_code)]

pub mod apiserver;
pub mod cli;
pub mod daemon;
pub mod kubecontainer;
pub mod metrics;
pub mod observe;
pub mod pleg;
pub mod runtime;
pub mod serve;
pub mod status;
pub mod sync_loop;
pub mod triggers;
pub mod util;
