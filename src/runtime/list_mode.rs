//! Which list calls a relist makes on the runtime's connection: CRI v0.37's streaming lists
//! (`StreamPodSandboxes`, `StreamContainers`: an answer in several messages, so that no list
//! outgrows gRPC's 16 MiB message limit on a node of thousands of containers or large labels) where
//! the runtime serves them, else the unary `ListPodSandbox` and `ListContainers` (a runtime that
//! answers the stream with Unimplemented: containerd before 2.4, CRI-O 1.34). Chosen at the first
//! list on a connection and kept; chosen anew after the connection is lost (the runtime restarted,
//! maybe as another version).

use std::sync::atomic::{AtomicU8, Ordering};

/// How the relist lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMode {
    Streaming,
    Unary,
}

impl ListMode {
    /// Its name in `plegd_runtime_list_mode{mode}` and the log.
    pub fn name(self) -> &'static str {
        match self {
            ListMode::Streaming => "streaming",
            ListMode::Unary => "unary",
        }
    }
}

/// What one list call said about the way to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOutcome {
    /// A stream answered to its end.
    Streamed,
    /// The runtime does not serve the streams.
    StreamUnimplemented,
    /// The connection is lost (Unavailable): whatever answers next may be another runtime.
    ConnectionLost,
    /// Anything else: it says nothing about the way to list.
    Other,
}

/// The choice for the current connection, shared by every relist through one runtime client.
#[derive(Debug, Default)]
pub struct ListModeChoice(AtomicU8);

const UNDECIDED: u8 = 0;
const STREAMING: u8 = 1;
const UNARY: u8 = 2;

impl ListModeChoice {
    /// The way chosen on this connection; None before its first list.
    pub fn get(&self) -> Option<ListMode> {
        match self.0.load(Ordering::Relaxed) {
            STREAMING => Some(ListMode::Streaming),
            UNARY => Some(ListMode::Unary),
            _ => None,
        }
    }

    /// Take what a list call said. Returns the choice when it changed (to be said and counted):
    /// `Some(Some(mode))` when a way is chosen, `Some(None)` when a lost connection undoes it.
    pub fn settle(&self, outcome: ListOutcome) -> Option<Option<ListMode>> {
        let new = match outcome {
            ListOutcome::Streamed => STREAMING,
            ListOutcome::StreamUnimplemented => UNARY,
            ListOutcome::ConnectionLost => UNDECIDED,
            ListOutcome::Other => return None,
        };
        let old = self.0.swap(new, Ordering::Relaxed);
        (old != new).then(|| self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_list_chooses_and_a_lost_connection_undoes_the_choice() {
        let choice = ListModeChoice::default();
        assert_eq!(choice.get(), None);
        assert_eq!(choice.settle(ListOutcome::Other), None);
        assert_eq!(choice.settle(ListOutcome::Streamed), Some(Some(ListMode::Streaming)));
        // Said once: every later stream changes nothing.
        assert_eq!(choice.settle(ListOutcome::Streamed), None);
        assert_eq!(choice.get(), Some(ListMode::Streaming));
        assert_eq!(choice.settle(ListOutcome::ConnectionLost), Some(None));
        assert_eq!(choice.settle(ListOutcome::ConnectionLost), None);
        assert_eq!(
            choice.settle(ListOutcome::StreamUnimplemented),
            Some(Some(ListMode::Unary))
        );
        assert_eq!(choice.get(), Some(ListMode::Unary));
        assert_eq!(choice.settle(ListOutcome::Other), None);
        assert_eq!(choice.get(), Some(ListMode::Unary));
    }
}
