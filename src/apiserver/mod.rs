//! Everything that speaks to kube-apiserver: the clients, the informer over the node's pods and the
//! pod as plegd keeps it, Kubernetes Events, and the client-side rate limits of what plegd sends.
//!
//! - [`client`]: the clients of `plegd run`, each request bounded, counted and its warnings logged.
//! - [`informer`]: the node's pods (watch and reflector), forwarded to the syncLoop as changes.
//! - [`node`]: the node's kubelet's version, read once at start.
//! - [`pod`]: the pod as plegd keeps it ([`pod::ApiPod`]): plain data, read by status generation.
//! - [`recorder`]: Kubernetes Events, published in order by one stage.
//! - [`rate_limit`]: QPS and token bucket (client-go's flowcontrol) for status writes and Events.
//!
//! Nothing here imports the runtime side (runtime, triggers, kubecontainer, pleg) or what uses
//! this room (status, sync_loop, serve, observe, cli).

pub mod client;
pub mod informer;
pub mod node;
pub mod pod;
pub mod rate_limit;
pub mod recorder;
