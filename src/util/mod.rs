//! The machinery every stage shares, and that knows nothing of pods: retry backoff, injected time,
//! the supervised task tree and the keyed work queue.
//!
//! - [`backoff`]: the one retry backoff (exponential, jittered, honouring `Retry-After`).
//! - [`clock`]: injected time, so that tests move the clock by hand.
//! - [`supervise`]: every long-running stage, named, cancelled together; one that ends fails plegd.
//! - [`workqueue`]: per-key work where only the newest counts, one lease per key (client-go's
//!   `workqueue`).
//!
//! Nothing here imports another room of plegd.

pub mod backoff;
pub mod clock;
pub mod supervise;
pub mod workqueue;
