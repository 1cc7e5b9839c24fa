//! Termination messages, as kuberuntime's `getPodContainerStatuses` reads them for an exited
//! container (`getTerminationMessage`, `readLastStringFromContainerLogs`): the file the container
//! wrote at its `terminationMessagePath` (the host side of the mount at that path), and, under
//! `FallbackToLogsOnError`, when that gave nothing and the container failed, the tail of its log.
//! The text is appended to the runtime's own message (`"<runtime message>: <text>"`).
//!
//! [`plan`] and [`last_log_string`] are pure. [`HostFiles`] does the reads, and trusts nothing
//! the runtime says: a path is read only when it names a regular file in the pod's own directory
//! below the kubelet's pods directory (the message file, `<pods>/<uid>/…`) or the pod logs
//! directory (the log, `<logs>/<namespace>_<name>_<uid>/…`), opened once, with no symlink on the
//! way and without waiting (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `O_NONBLOCK`,
//! then fstat), and never more than the kubelet's limits — the last 4 KiB of the file, the last 80
//! lines of the log and of those the last 2 KiB. Any other path is reported as bad data and read
//! as absent. A node directory that is not there at all (not mounted into plegd's container) is
//! no bad data: nothing below it is read, and plegd says so once at start.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_cri::v1 as cri;

use crate::kubecontainer::{RawText, TerminationMessageSource};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The annotations the kubelet puts on each container it creates (`labels.go`).
pub const ANNOTATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const ANNOTATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// `MaxContainerTerminationMessageLength`: the file's last this many bytes.
pub const MAX_FILE_BYTES: u64 = 4 * 1024;
/// `MaxContainerTerminationMessageLogLength`: the log's last this many bytes.
pub const MAX_LOG_BYTES: usize = 2 * 1024;
/// `MaxContainerTerminationMessageLogLines`: of the log's last this many lines.
pub const MAX_LOG_LINES: usize = 80;
/// A log read goes back at most this far from the end of the file (80 lines of containerd's
/// longest, 16 KiB, and some).
const MAX_LOG_SCAN: u64 = 2 << 20;

/// Where an exited container's termination message is to be read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The host path of the mount at the container's termination message path, if it has one.
    pub file: Option<String>,
    /// The container's log, when the policy falls back to it and the container failed.
    pub logs: Option<String>,
}

/// What `getTerminationMessage` is asked to do for a container status (pure): None for a
/// container that has not exited. The path and policy come from the kubelet's annotations.
pub fn plan(status: &cri::ContainerStatus) -> Option<Plan> {
    if status.state != cri::ContainerState::ContainerExited as i32 {
        return None;
    }
    plan_for(&source(status)?, status.exit_code, &status.reason)
}

/// Where a container's termination message will be read from, whatever its state (pure): the host
/// side of the mount at the path its annotation names, and its log under `FallbackToLogsOnError`.
/// None when it has neither.
pub fn source(status: &cri::ContainerStatus) -> Option<TerminationMessageSource> {
    let falls_back =
        status.annotations.get(ANNOTATION_MESSAGE_POLICY).map(String::as_str) == Some("FallbackToLogsOnError");
    let file = status
        .annotations
        .get(ANNOTATION_MESSAGE_PATH)
        .filter(|p| !p.is_empty())
        .and_then(|path| {
            let wanted = clean(path);
            status
                .mounts
                .iter()
                .find(|m| m.container_path == wanted)
                .map(|m| m.host_path.clone())
        });
    let logs_on_error = (falls_back && !status.log_path.is_empty()).then(|| status.log_path.clone());
    (file.is_some() || logs_on_error.is_some()).then_some(TerminationMessageSource { file, logs_on_error })
}

/// What is read for an exit of `exit_code` and `reason` of a container whose message comes from
/// `source` (pure): the log only for a failed exit that is not `ContainerCannotRun`.
pub fn plan_for(source: &TerminationMessageSource, exit_code: i32, reason: &str) -> Option<Plan> {
    let failed = exit_code != 0 && reason != "ContainerCannotRun";
    let file = source.file.clone();
    let logs = source.logs_on_error.clone().filter(|_| failed);
    (file.is_some() || logs.is_some()).then_some(Plan { file, logs })
}

/// Go's `filepath.Clean("/" + path)`: absolute, no `.`, `..` or repeated separators.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// `readLastStringFromContainerLogs` over the tail of a log file in the CRI format
/// (`<time> <stream> <tags> <content>`, tag `P` a partial line, `F` a full one): the content of
/// its last [`MAX_LOG_LINES`] lines, stdout and stderr as they come, partial lines run together,
/// and of that the last [`MAX_LOG_BYTES`] (which may start inside a character: kept as bytes, as
/// the kubelet's ring buffer keeps them). `tail` must start at a line boundary. As `ReadLogs`
/// reads them: a line that does not parse is skipped, and a tail whose first line does not
/// parse gives nothing (`getParseFunc` knows no format for it); a last line without its newline
/// is read as it is.
pub fn last_log_string(tail: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = tail.split_inclusive(|b| *b == b'\n').collect();
    let complete = lines.iter().filter(|l| l.ends_with(b"\n")).count();
    // `findTailLineStartIndex` starts after all but the last 80 newlines, and the reader stops
    // after 80 lines: a last line without a newline counts only if there are fewer.
    if complete > MAX_LOG_LINES {
        lines.drain(..complete - MAX_LOG_LINES);
    }
    lines.truncate(MAX_LOG_LINES);
    if lines.first().is_some_and(|first| cri_log_content(first).is_none()) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for line in lines {
        out.extend_from_slice(cri_log_content(line).unwrap_or_default());
    }
    let keep = out.len().saturating_sub(MAX_LOG_BYTES);
    out.split_off(keep)
}

/// `parseCRILog` (k8s.io/cri-client's logs): the content of one line of a CRI log (its newline
/// included for a full line, dropped for a partial one), or None when the line is not one: a
/// timestamp that is not RFC 3339 as Go's `time.RFC3339Nano` reads it, a stream other than stdout
/// and stderr, or no space after the tags.
fn cri_log_content(line: &[u8]) -> Option<&[u8]> {
    let mut fields = line.splitn(4, |b| *b == b' ');
    let (Some(time), Some(stream), Some(tags), Some(content)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return None;
    };
    if !rfc3339(time) || (stream != b"stdout" && stream != b"stderr") {
        return None;
    }
    if tags.split(|b| *b == b':').next() == Some(b"P") {
        return Some(content.strip_suffix(b"\n").unwrap_or(content));
    }
    Some(content)
}

/// Whether `time` is a timestamp Go's `time.Parse(time.RFC3339Nano, …)` takes: `T` between date
/// and time, `Z` or a `±hh:mm` offset, every field in range.
fn rfc3339(time: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(time) else {
        return false;
    };
    let bytes = text.as_bytes();
    let offset = bytes.last() == Some(&b'Z')
        || (bytes.len() > 6 && matches!(bytes[bytes.len() - 6], b'+' | b'-') && bytes[bytes.len() - 3] == b':');
    bytes.get(10) == Some(&b'T') && offset && text.parse::<k8s_openapi::jiff::Timestamp>().is_ok()
}

/// A path the runtime gave that plegd will not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} {path:?} is not a regular file in pod {pod}'s own directory below {root}, reached without a symlink; not read"
)]
pub struct Refused {
    pub what: &'static str,
    pub path: String,
    pub root: String,
    pub pod: String,
}

/// The node directories termination messages are read from (`--kubelet-root-dir`,
/// `--pod-logs-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFiles {
    /// Message files are read below `<kubelet root>/pods`.
    pub pods_dir: PathBuf,
    /// Logs are read below this.
    pub logs_dir: PathBuf,
}

impl Default for HostFiles {
    fn default() -> Self {
        Self::new(Path::new("/var/lib/kubelet"), Path::new("/var/log/pods"))
    }
}

/// Which directory below a node directory is a pod's own.
#[derive(Debug, Clone, Copy)]
enum PodDir {
    /// `<kubelet root>/pods/<uid>` (the kubelet's `getPodDir`).
    Uid,
    /// `<pod logs>/<namespace>_<name>_<uid>` (the kubelet's `BuildPodLogsDirectory`).
    NamespaceNameUid,
}

impl PodDir {
    fn is_of(self, name: &std::ffi::OsStr, uid: &str) -> bool {
        let Some(name) = name.to_str() else { return false };
        match self {
            PodDir::Uid => name == uid,
            PodDir::NamespaceNameUid => name
                .rsplit_once('_')
                .is_some_and(|(namespace_name, last)| last == uid && namespace_name.contains('_')),
        }
    }
}

/// What opening a file below a node directory came to.
#[derive(Debug)]
enum Opened {
    File(File),
    /// Not there: the kubelet's "no file".
    Absent,
    /// The node directory itself is not there: not given to plegd (not mounted into its
    /// container). Nothing is said per file; [`HostFiles::missing_roots`] says it at start.
    RootMissing,
    Refused(Refused),
    Failed(io::Error),
}

/// How a path beneath a directory is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolver {
    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (Linux 5.6); the walk where it is
    /// not to be had ([`openat2_missing`]).
    Openat2,
    /// One component at a time, each directory opened `O_NOFOLLOW`.
    Walk,
}

/// Whether `openat2` answering `errno` means the call is not to be had here, and the walk must
/// stand in: ENOSYS from a kernel without it (or a seccomp filter that says so), and EPERM from the
/// seccomp filters that refuse system calls they do not know that way (systemd before 250, older
/// container runtimes' default profiles). A read-only open never answers EPERM otherwise.
fn openat2_missing(errno: Errno) -> bool {
    matches!(errno, Errno::NOSYS | Errno::PERM)
}

/// Open `rel` (relative, normal components only) beneath `dir` once, following no symlink and
/// without waiting: read-only and non-blocking, so that the open of a FIFO does not wait for a
/// writer, and with no controlling terminal. What it opened is for the caller to check (fstat):
/// checking a path and then opening it again lets it be swapped in between.
fn open_beneath(dir: impl AsFd, rel: &Path, resolver: Resolver) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match resolver {
        Resolver::Openat2 => {
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
            let mut tries = 0;
            loop {
                match rustix::fs::openat2(&dir, rel, flags, Mode::empty(), resolve) {
                    Err(errno) if openat2_missing(errno) => return open_beneath(dir, rel, Resolver::Walk),
                    // A rename or mount raced the lookup (RESOLVE_BENEATH cannot then vouch for it).
                    Err(Errno::AGAIN) if tries < 3 => tries += 1,
                    other => return other,
                }
            }
        }
        Resolver::Walk => {
            let names: Vec<&std::ffi::OsStr> = rel.iter().collect();
            let Some((last, parents)) = names.split_last() else {
                return Err(Errno::NOENT);
            };
            let mut at: Option<OwnedFd> = None;
            for name in parents {
                let parent = at.as_ref().map_or(dir.as_fd(), AsFd::as_fd);
                // A symlink is opened as itself (O_PATH | O_NOFOLLOW) and is no directory: ENOTDIR.
                let next = rustix::fs::openat(
                    parent,
                    *name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                at = Some(next);
            }
            rustix::fs::openat(
                at.as_ref().map_or(dir.as_fd(), AsFd::as_fd),
                *last,
                flags,
                Mode::empty(),
            )
        }
    }
}

impl HostFiles {
    pub fn new(kubelet_root_dir: &Path, pod_logs_dir: &Path) -> Self {
        Self {
            pods_dir: kubelet_root_dir.join("pods"),
            logs_dir: pod_logs_dir.to_owned(),
        }
    }

    /// The node directories that are not there (blocking: it looks). plegd says so once, at
    /// start; below a missing one nothing is read, and no path is refused for it.
    pub fn missing_roots(&self) -> Vec<PathBuf> {
        [&self.pods_dir, &self.logs_dir]
            .into_iter()
            .filter(|dir| !dir.is_dir())
            .cloned()
            .collect()
    }

    /// The termination message `plan` asks for of a container of pod `pod_uid` (blocking file
    /// reads), as bytes: the file's last 4 KiB may start inside a character. A refused path is
    /// returned beside it, and read as absent.
    pub fn read(&self, plan: &Plan, pod_uid: &str) -> (RawText, Vec<Refused>) {
        let mut refused = Vec::new();
        let mut fallback = plan.logs.is_some();
        let mut message = RawText::default();
        if let Some(path) = &plan.file {
            match self.open("termination message file", path, &self.pods_dir, PodDir::Uid, pod_uid) {
                Opened::File(file) => match read_at_most(file, MAX_FILE_BYTES) {
                    Ok(data) => {
                        fallback &= data.is_empty();
                        message = RawText::from(data);
                    }
                    Err(e) => {
                        message = format!("Error on reading termination log {path}: {e}").into();
                        fallback = false;
                    }
                },
                Opened::Absent | Opened::RootMissing => {}
                Opened::Refused(r) => refused.push(r),
                Opened::Failed(e) => {
                    message = format!("Error on reading termination log {path}: {e}").into();
                    fallback = false;
                }
            }
        }
        if fallback && let Some(path) = &plan.logs {
            message = RawText::from(match self.open("container log", path, &self.logs_dir, PodDir::NamespaceNameUid, pod_uid) {
                Opened::File(file) => match read_log_tail(file) {
                    Ok(tail) => last_log_string(&tail),
                    Err(e) => format!(
                        "Error on reading termination message from logs: failed to read log file {path:?}: {e}"
                    )
                    .into_bytes(),
                },
                Opened::Absent => format!(
                    "Error on reading termination message from logs: failed to try resolving symlinks in path {path:?}: no such file or directory"
                )
                .into_bytes(),
                Opened::RootMissing => Vec::new(),
                Opened::Refused(r) => {
                    refused.push(r);
                    Vec::new()
                }
                Opened::Failed(e) => format!(
                    "Error on reading termination message from logs: failed to open log file {path:?}: {e}"
                )
                .into_bytes(),
            });
        }
        (message, refused)
    }

    /// Open `path` if it names a regular file in pod `uid`'s own directory below `root`, reached
    /// without a symlink. `root` itself is the operator's (`--kubelet-root-dir`,
    /// `--pod-logs-dir`) and may be reached through symlinks; the runtime's path must begin with
    /// it as given.
    fn open(&self, what: &'static str, path: &str, root: &Path, pod_dir: PodDir, uid: &str) -> Opened {
        let refuse = || {
            Opened::Refused(Refused {
                what,
                path: path.to_owned(),
                root: root.display().to_string(),
                pod: uid.to_owned(),
            })
        };
        let given = Path::new(path);
        let Ok(rel) = given.strip_prefix(root) else {
            return refuse();
        };
        if !given.is_absolute() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return refuse();
        }
        // The pod's own directory, and something in it.
        let mut names = rel.iter();
        match (names.next(), names.next()) {
            (Some(first), Some(_)) if pod_dir.is_of(first, uid) => {}
            _ => return refuse(),
        }
        let root_dir = match rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR) => {
                tracing::debug!(directory = %root.display(), path, "node directory not there; not read");
                return Opened::RootMissing;
            }
            Err(e) => return Opened::Failed(e.into()),
        };
        match open_beneath(&root_dir, rel, Resolver::Openat2) {
            Ok(fd) => {
                let file = File::from(fd);
                match file.metadata() {
                    Ok(m) if m.is_file() => Opened::File(file),
                    Ok(_) => refuse(),
                    Err(e) => Opened::Failed(e),
                }
            }
            Err(Errno::NOENT) => Opened::Absent,
            // A symlink (ELOOP; ENOTDIR from the walk), an escape (EXDEV), a component that is no
            // directory, a socket (ENXIO).
            Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR | Errno::NXIO) => refuse(),
            Err(e) => Opened::Failed(e.into()),
        }
    }
}

/// How long the termination-message reads of one pod's status may take, together. A file on a
/// volume that does not answer (hung NFS, a FUSE server that stopped) blocks its reader in the
/// kernel for as long as the volume hangs; the relist that reads it must not.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// Reads of node files at most in flight. A read that hangs keeps its reader (a thread) until
/// the volume answers: this bounds the threads a hung volume can hold.
pub const MAX_READERS: NonZeroUsize = NonZeroUsize::new(4).unwrap();
/// Containers whose read hung, remembered so that it is not tried at every inspection of their
/// pod; the oldest is forgotten past this.
const MAX_HUNG: usize = 1024;

/// What became of the read of one container's termination message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Read: the message (empty for none) and the paths refused on the way.
    Read { message: RawText, refused: Vec<Refused> },
    /// Not done by the deadline: the message is left out, and not read again for this container.
    TimedOut,
    /// Not tried: this container's read hung before.
    HungBefore,
    /// Not tried: every reader is held by a read that hangs.
    NoReader,
}

/// Container ids whose read hung, oldest first (pure bookkeeping).
#[derive(Debug, Default)]
struct HungReads {
    ids: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl HungReads {
    fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if !self.ids.insert(id.to_owned()) {
            return;
        }
        self.order.push_back(id.to_owned());
        while self.order.len() > MAX_HUNG {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
    }
}

/// Reads termination messages off the async threads, each under a deadline, at most
/// [`MAX_READERS`] at once; a read that times out is left behind (it ends when its volume
/// answers) and its container remembered.
///
/// The readers are plain threads, not tokio's blocking pool: a runtime shutting down waits for
/// every blocking task, so one read stuck on a hung volume would keep plegd from exiting.
#[derive(Debug)]
pub struct TerminationReader {
    files: Arc<HostFiles>,
    deadline: Duration,
    readers: Arc<tokio::sync::Semaphore>,
    max_readers: NonZeroUsize,
    /// Reads past their deadline whose thread has not returned yet.
    stuck: Arc<AtomicUsize>,
    hung: Mutex<HungReads>,
}

/// Why work given to a reader thread brought nothing back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Late {
    TimedOut,
    NoReader,
}

impl TerminationReader {
    pub fn new(files: HostFiles) -> Self {
        Self::with_limits(files, READ_DEADLINE, MAX_READERS)
    }

    pub fn with_limits(files: HostFiles, deadline: Duration, max_readers: NonZeroUsize) -> Self {
        Self {
            files: Arc::new(files),
            deadline,
            readers: Arc::new(tokio::sync::Semaphore::new(max_readers.get())),
            max_readers,
            stuck: Arc::default(),
            hung: Mutex::default(),
        }
    }

    pub fn files(&self) -> &HostFiles {
        &self.files
    }

    /// How long one pod's reads may take.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// [`HostFiles::missing_roots`], under the deadline (a node directory on a volume that hangs
    /// would otherwise hang plegd's start); None when it did not answer.
    pub async fn missing_roots(&self) -> Option<Vec<PathBuf>> {
        let deadline = tokio::time::Instant::now() + self.deadline;
        self.off_thread(deadline, HostFiles::missing_roots).await.ok()
    }

    /// The termination messages `plans` ask for, of containers (by id) of pod `pod_uid`, read
    /// concurrently under one deadline; in the order of `plans`.
    pub async fn read_pod(&self, pod_uid: &str, plans: Vec<(String, Plan)>) -> Vec<Reading> {
        let deadline = tokio::time::Instant::now() + self.deadline;
        let reads = plans.into_iter().map(|(id, plan)| {
            let uid = pod_uid.to_owned();
            async move {
                if self.hung().contains(&id) {
                    return Reading::HungBefore;
                }
                match self.off_thread(deadline, move |files| files.read(&plan, &uid)).await {
                    Ok((message, refused)) => Reading::Read { message, refused },
                    Err(Late::TimedOut) => {
                        self.hung().insert(&id);
                        Reading::TimedOut
                    }
                    Err(Late::NoReader) => Reading::NoReader,
                }
            }
        });
        futures_util::future::join_all(reads).await
    }

    fn hung(&self) -> std::sync::MutexGuard<'_, HungReads> {
        self.hung.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `work` on a reader thread of its own and wait for it until `deadline`. A reader is
    /// waited for within the same deadline, unless every one is stuck past its own.
    async fn off_thread<T: Send + 'static>(
        &self,
        deadline: tokio::time::Instant,
        work: impl FnOnce(&HostFiles) -> T + Send + 'static,
    ) -> Result<T, Late> {
        if self.stuck.load(Ordering::Acquire) >= self.max_readers.get() {
            return Err(Late::NoReader);
        }
        let permit = match tokio::time::timeout_at(deadline, self.readers.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => return Err(Late::NoReader),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Set by whichever is first: the thread returning, or the wait giving up on it.
        let left_behind = Arc::new(AtomicBool::new(false));
        let (files, stuck, done) = (self.files.clone(), self.stuck.clone(), left_behind.clone());
        let spawned = std::thread::Builder::new()
            .name("plegd-node-files".into())
            .spawn(move || {
                let _permit = permit;
                let _ = tx.send(work(&files));
                if done.swap(true, Ordering::AcqRel) {
                    stuck.fetch_sub(1, Ordering::AcqRel);
                }
            });
        if spawned.is_err() {
            return Err(Late::NoReader);
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(value)) => Ok(value),
            // The thread panicked: nothing to wait for.
            Ok(Err(_)) => Err(Late::NoReader),
            Err(_) => {
                if !left_behind.swap(true, Ordering::AcqRel) {
                    self.stuck.fetch_add(1, Ordering::AcqRel);
                }
                Err(Late::TimedOut)
            }
        }
    }
}

/// `tail.ReadAtMost`: the last `max` bytes of the file.
fn read_at_most(mut file: File, max: u64) -> io::Result<Vec<u8>> {
    let size = file.metadata()?.len();
    let start = size.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut data = Vec::with_capacity((size - start) as usize);
    file.take(max).read_to_end(&mut data)?;
    Ok(data)
}

/// The end of a log file, from a line boundary: enough for its last [`MAX_LOG_LINES`] lines (at
/// most [`MAX_LOG_SCAN`] bytes).
fn read_log_tail(file: File) -> io::Result<Vec<u8>> {
    let mut data = read_at_most(file, MAX_LOG_SCAN)?;
    if data.len() as u64 == MAX_LOG_SCAN {
        // Started in the middle of a line: drop it.
        let first = data.iter().position(|b| *b == b'\n').map_or(data.len(), |i| i + 1);
        data.drain(..first);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn exited(code: i32, annotations: &[(&str, &str)], mounts: &[(&str, &str)]) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: "c1".into(),
            state: cri::ContainerState::ContainerExited as i32,
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            log_path: "/var/log/pods/ns_p_u/app/0.log".into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>(),
            mounts: mounts
                .iter()
                .map(|(c, h)| cri::Mount {
                    container_path: (*c).into(),
                    host_path: (*h).into(),
                    ..cri::Mount::default()
                })
                .collect(),
            ..cri::ContainerStatus::default()
        }
    }

    const PATH: (&str, &str) = (ANNOTATION_MESSAGE_PATH, "/dev/termination-log");
    const FALLBACK: (&str, &str) = (ANNOTATION_MESSAGE_POLICY, "FallbackToLogsOnError");
    const MOUNT: (&str, &str) = (
        "/dev/termination-log",
        "/var/lib/kubelet/pods/u/containers/app/1a2b3c4d",
    );

    /// The decision of `getPodContainerStatuses`/`getTerminationMessage` (upstream has no unit
    /// table for it; these are the cases its code distinguishes).
    #[test]
    fn the_plan_follows_getterminationmessage() {
        let host = Some(MOUNT.1.to_owned());
        let logs = Some("/var/log/pods/ns_p_u/app/0.log".to_owned());
        #[rustfmt::skip]
        let cases: Vec<(&str, cri::ContainerStatus, Option<Plan>)> = vec![
            ("File policy, mounted", exited(3, &[PATH], &[MOUNT]), Some(Plan { file: host.clone(), logs: None })),
            ("no path annotation", exited(3, &[], &[MOUNT]), None),
            ("no mount at the path", exited(3, &[PATH], &[("/other", "/h")]), None),
            ("the path is cleaned", exited(3, &[(ANNOTATION_MESSAGE_PATH, "dev//./termination-log")], &[MOUNT]), Some(Plan { file: host.clone(), logs: None })),
            ("fallback, failed", exited(3, &[PATH, FALLBACK], &[MOUNT]), Some(Plan { file: host.clone(), logs: logs.clone() })),
            ("fallback, succeeded", exited(0, &[PATH, FALLBACK], &[MOUNT]), Some(Plan { file: host.clone(), logs: None })),
            ("fallback without a file", exited(1, &[FALLBACK], &[]), Some(Plan { file: None, logs: logs.clone() })),
        ];
        for (name, status, want) in cases {
            assert_eq!(plan(&status), want, "{name}");
        }
        let mut cannot_run = exited(128, &[FALLBACK], &[]);
        cannot_run.reason = "ContainerCannotRun".into();
        assert_eq!(plan(&cannot_run), None, "a container that never ran has no logs");
        let mut running = exited(0, &[PATH], &[MOUNT]);
        running.state = cri::ContainerState::ContainerRunning as i32;
        assert_eq!(plan(&running), None, "only exited containers");
        // Read from a running container, the places decide the plan once it exits: the same plan
        // a read of it exited gives.
        for (exit_code, reason) in [(3, "Error"), (0, "Completed"), (128, "ContainerCannotRun")] {
            let mut status = exited(exit_code, &[PATH, FALLBACK], &[MOUNT]);
            status.reason = reason.into();
            let mut running = status.clone();
            running.state = cri::ContainerState::ContainerRunning as i32;
            let kept = source(&running).expect("a file and a log");
            assert_eq!(plan_for(&kept, exit_code, reason), plan(&status), "{reason}");
        }
        assert_eq!(source(&exited(3, &[], &[MOUNT])), None, "neither a file nor a log");
    }

    fn log_line(stream: &str, tag: &str, content: &str) -> String {
        format!("2026-11-25T10:00:00.000000000Z {stream} {tag} {content}\n")
    }

    /// The CRI log format as `ReadLogs` parses it (logs_test.go's cases for parseCRILog: full
    /// and partial lines, both streams, multiple tags, an empty content), then the tail limits.
    #[test]
    fn the_log_tail_as_readlogs_gives_it() {
        let log = [
            log_line("stdout", "F", "first"),
            log_line("stderr", "P", "part one, "),
            log_line("stderr", "F", "part two"),
            log_line("stdout", "F:x", "tagged"),
            "garbage line\n".to_owned(),
            "2026-11-25T10:00:00Z stdin F not a stream\n".to_owned(),
            log_line("stdout", "F", ""),
        ]
        .concat();
        assert_eq!(log_text(log.as_bytes()), "first\npart one, part two\ntagged\n\n");
        // An empty full line keeps the space after its tag (containerd writes it so); without it
        // the line is not one ("log tag is not found").
        assert_eq!(log_text(b"2026-11-25T10:00:00Z stdout F \n"), "\n");
        let x = log_line("stdout", "F", "x");
        assert_eq!(
            log_text(format!("{x}2026-11-25T10:00:00Z stdout F\n{x}").as_bytes()),
            "x\nx\n"
        );
        // Timestamps as Go's RFC3339Nano reads them: an offset, or none of these.
        for (time, ok) in [
            ("2022-10-29T16:10:22.592603036-05:00", true),
            ("2026-11-25T10:00:00Z", true),
            ("2026-11-25 10:00:00Z", false),
            ("2026-11-25t10:00:00z", false),
            ("2026-13-25T10:00:00Z", false),
            ("2026-11-25T10:00:00", false),
            ("yesterday", false),
        ] {
            let line = format!("{x}{time} stdout F y\n");
            let want = if ok { "x\ny\n" } else { "x\n" };
            assert_eq!(log_text(line.as_bytes()), want, "{time}");
        }
        // A tail whose first line is no CRI line gives nothing: the kubelet finds no format for it.
        assert_eq!(log_text(format!("garbage\n{x}").as_bytes()), "");

        // The last 80 lines of 100.
        let many: String = (0..100)
            .map(|i| log_line("stdout", "F", &format!("line {i}")))
            .collect();
        let got = log_text(many.as_bytes());
        assert!(got.starts_with("line 20\n") && got.ends_with("line 99\n"), "{got}");
        // A last line without a newline counts only while there are fewer than 80 complete ones.
        let cut = format!("{}2026-11-25T10:00:00Z stdout F tail", many);
        assert!(log_text(cut.as_bytes()).ends_with("line 99\n"));
        let few = format!("{}2026-11-25T10:00:00Z stdout F tail", log_line("stdout", "F", "a"));
        assert_eq!(log_text(few.as_bytes()), "a\ntail", "an incomplete last line, as it is");

        // Of those, the last 2 KiB; bytes that are not UTF-8 are replaced, never a panic.
        let long: String = (0..30)
            .map(|i| log_line("stdout", "F", &format!("{i:03}{}", "x".repeat(100))))
            .collect();
        let got = log_text(long.as_bytes());
        assert_eq!(got.len(), MAX_LOG_BYTES);
        assert!(got.ends_with(&format!("029{}\n", "x".repeat(100))));
        let mut raw = b"2026-11-25T10:00:00Z stdout F bad \xff\xfe ok\n".to_vec();
        raw.extend_from_slice("2026-11-25T10:00:00Z stdout F é\n".as_bytes());
        assert_eq!(log_text(&raw), "bad \u{fffd}\u{fffd} ok\né\n");
        // The last 2 KiB kept as bytes: a cut inside a character is the kubelet's cut, its half a
        // character one U+FFFD when written.
        let line = log_line("stdout", "F", &format!("é{}", "y".repeat(MAX_LOG_BYTES - 2)));
        let tail = last_log_string(line.as_bytes());
        assert_eq!(tail.len(), MAX_LOG_BYTES);
        assert_eq!(tail[..2], [0xa9, b'y'], "the second byte of é, then the rest");
        assert!(log_text(line.as_bytes()).starts_with("\u{fffd}yyy"));
    }

    fn log_text(tail: &[u8]) -> String {
        crate::kubecontainer::go_json_string(&last_log_string(tail))
    }

    fn host(dir: &Path) -> HostFiles {
        std::fs::create_dir_all(dir.join("kubelet/pods")).unwrap();
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        HostFiles::new(&dir.join("kubelet"), &dir.join("logs"))
    }

    fn write(path: &Path, data: &[u8]) -> String {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
        path.display().to_string()
    }

    /// `TestReadAtMost` (pkg/util/tail) and the reading rules: the file's last 4 KiB; an empty or
    /// missing file falls back to the logs; a file beats the logs; paths outside the node
    /// directories, symlinks out of them, directories and devices are refused and not read.
    #[test]
    fn host_files_are_read_within_their_roots_and_limits() {
        let dir = tempfile::tempdir().unwrap();
        let files = host(dir.path());
        let pods = dir.path().join("kubelet/pods/u/containers/app");
        let log = write(
            &dir.path().join("logs/ns_p_u/app/0.log"),
            log_line("stderr", "F", "panic: boom").as_bytes(),
        );

        // TestReadAtMost's file: 4 × (1024 'a' + '\n') + 512 'a'.
        let content = format!("{}{}", format!("{}\n", "a".repeat(1024)).repeat(4), "a".repeat(512));
        let big = write(&pods.join("big"), content.as_bytes());
        for (max, want) in [
            (1, "a".to_owned()),
            (1024, format!("{}\n{}", "a".repeat(511), "a".repeat(512))),
            (4613, content.clone()),
            (0, String::new()),
        ] {
            let got = read_at_most(File::open(&big).unwrap(), max).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), want, "max {max}");
        }
        let (message, refused) = files.read(
            &Plan {
                file: Some(big.clone()),
                logs: None,
            },
            "u",
        );
        assert_eq!(message.len(), 4096);
        assert_eq!(message, content[content.len() - 4096..]);
        assert!(refused.is_empty());

        let written = write(&pods.join("msg"), b"boom\n");
        let empty = write(&pods.join("empty"), b"");
        let missing = pods.join("missing").display().to_string();
        let read = |file: &str, logs: bool| {
            files.read(
                &Plan {
                    file: Some(file.to_owned()),
                    logs: logs.then(|| log.clone()),
                },
                "u",
            )
        };
        assert_eq!(read(&written, true).0, "boom\n", "the file beats the logs");
        assert_eq!(read(&empty, true).0, "panic: boom\n");
        assert_eq!(read(&missing, true).0, "panic: boom\n");
        assert_eq!(read(&empty, false).0, "");

        // A FIFO below the root is refused without blocking (opening one would wait for a writer).
        let fifo = pods.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let (message, refused) = read(fifo.to_str().unwrap(), false);
        assert_eq!((message.to_string().as_str(), refused.len()), ("", 1));

        // Refused: outside the root, a symlink out of it, a directory, `..`, a relative path.
        let outside = write(&dir.path().join("secret"), b"do not publish");
        std::os::unix::fs::symlink(&outside, pods.join("link")).unwrap();
        let link = pods.join("link").display().to_string();
        let dotdot = format!("{}/../../../../secret", pods.display());
        for path in [
            outside.as_str(),
            link.as_str(),
            pods.to_str().unwrap(),
            dotdot.as_str(),
            "relative/msg",
        ] {
            let (message, refused) = read(path, false);
            assert_eq!(message, "", "{path}");
            assert_eq!(refused.len(), 1, "{path}");
        }
        // A refused message file still falls back to the logs; a refused log is not read.
        assert_eq!(read(&outside, true).0, "panic: boom\n");
        let (message, refused) = files.read(
            &Plan {
                file: None,
                logs: Some(outside.clone()),
            },
            "u",
        );
        assert_eq!((message.to_string().as_str(), refused.len()), ("", 1));
        // A log that is not there says so, as the kubelet does.
        let (message, _) = files.read(
            &Plan {
                file: None,
                logs: Some(dir.path().join("logs/ns_p_u/app/none.log").display().to_string()),
            },
            "u",
        );
        assert!(
            message
                .to_string()
                .starts_with("Error on reading termination message from logs: "),
            "{message}"
        );
    }

    /// The message file is opened once, beneath the pod's own directory, following no symlink and
    /// without waiting (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, where the kernel
    /// has no openat2, a walk with O_NOFOLLOW): a symlink anywhere on the way (out of the pod's
    /// directory or within it), `..`, a FIFO, a directory and another pod's file are refused;
    /// a regular file is read. Both ways of opening give the same answers.
    #[test]
    fn message_files_are_opened_once_beneath_the_pods_own_directory() {
        let dir = tempfile::tempdir().unwrap();
        let files = host(dir.path());
        let pod = dir.path().join("kubelet/pods/u");
        let app = pod.join("containers/app");
        let normal = write(&app.join("msg"), b"boom\n");
        let outside = write(&dir.path().join("secret"), b"do not publish");
        let other_pod = write(&dir.path().join("kubelet/pods/v/containers/app/msg"), b"v's message");
        std::os::unix::fs::symlink(&outside, app.join("out")).unwrap();
        std::os::unix::fs::symlink(&normal, app.join("in")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("kubelet/pods/v/containers"), pod.join("linked")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(app.join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        let path = |p: &Path| p.display().to_string();
        let read = |file: &str| {
            files.read(
                &Plan {
                    file: Some(file.to_owned()),
                    logs: None,
                },
                "u",
            )
        };

        assert_eq!(read(&normal), ("boom\n".into(), vec![]));
        for refused in [
            path(&app.join("out")),
            path(&app.join("in")),
            path(&pod.join("linked/app/msg")),
            format!("{}/../../v/containers/app/msg", app.display()),
            path(&app.join("fifo")),
            path(&app),
            other_pod.clone(),
            path(&dir.path().join("kubelet/pods/msg")),
            "/etc/hostname".to_owned(),
        ] {
            let (message, refused_paths) = read(&refused);
            assert_eq!(message, "", "{refused}");
            assert_eq!(refused_paths.len(), 1, "{refused}");
        }

        // The same answers from the walk that stands in for openat2 where the kernel has none, or
        // a seccomp filter refuses it with ENOSYS or EPERM; nothing else sends a read to the walk.
        for errno in [rustix::io::Errno::NOSYS, rustix::io::Errno::PERM] {
            assert!(openat2_missing(errno), "{errno:?}");
        }
        for errno in [
            rustix::io::Errno::ACCESS,
            rustix::io::Errno::LOOP,
            rustix::io::Errno::XDEV,
            rustix::io::Errno::AGAIN,
        ] {
            assert!(!openat2_missing(errno), "{errno:?}");
        }
        let root = rustix::fs::open(
            &files.pods_dir,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        for (rel, want) in [
            ("u/containers/app/msg", Ok(true)),
            ("u/containers/app/out", Err(())),
            ("u/containers/app/in", Err(())),
            ("u/linked/app/msg", Err(())),
            ("u/containers/app/fifo", Ok(false)),
            ("u/containers/app", Ok(false)),
            ("u/containers/app/missing", Ok(false)),
        ] {
            for resolver in [Resolver::Openat2, Resolver::Walk] {
                let got = open_beneath(&root, Path::new(rel), resolver);
                match (&got, want) {
                    (Ok(fd), Ok(true)) => assert!(rustix::fs::fstat(fd).is_ok()),
                    (Ok(fd), Ok(false)) => {
                        let kind = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(fd).unwrap().st_mode);
                        assert_ne!(kind, rustix::fs::FileType::RegularFile, "{rel} {resolver:?}");
                    }
                    (Err(rustix::io::Errno::NOENT), Ok(false)) => {}
                    (Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR), Err(())) => {}
                    _ => panic!("{rel} {resolver:?}: {got:?}"),
                }
            }
        }
    }

    /// A node directory that is not there at all (the DaemonSet mounts neither in `conditions`
    /// mode) was not given to plegd: nothing below it is read, and that is no bad runtime data;
    /// plegd says which directories are missing once, at start.
    #[test]
    fn a_node_directory_that_is_not_there_is_not_bad_data() {
        let dir = tempfile::tempdir().unwrap();
        let files = HostFiles::new(&dir.path().join("kubelet"), &dir.path().join("logs"));
        let (message, refused) = files.read(
            &Plan {
                file: Some(
                    dir.path()
                        .join("kubelet/pods/u/containers/app/1a2b")
                        .display()
                        .to_string(),
                ),
                logs: Some(dir.path().join("logs/ns_p_u/app/0.log").display().to_string()),
            },
            "u",
        );
        assert_eq!((message.to_string().as_str(), refused), ("", vec![]));
        assert_eq!(
            files.missing_roots(),
            [dir.path().join("kubelet/pods"), dir.path().join("logs")]
        );
        // A path outside them is still refused: what the runtime said is wrong, mounted or not.
        let (_, refused) = files.read(
            &Plan {
                file: Some("/etc/hostname".to_owned()),
                logs: None,
            },
            "u",
        );
        assert_eq!(refused.len(), 1);
        assert!(host(dir.path()).missing_roots().is_empty());
    }

    /// Work that blocks until told to go on, as a read on a volume that does not answer.
    fn hanging(release: std::sync::mpsc::Receiver<()>) -> impl FnOnce(&HostFiles) -> u8 + Send + 'static {
        move |_| {
            let _ = release.recv();
            7
        }
    }

    /// Reads that hang time out at the deadline and hold their reader until they return; with
    /// every reader held so, a read is not even tried; once one returns, reads work again.
    #[tokio::test]
    async fn reads_that_hang_time_out_and_hold_at_most_every_reader() {
        let reader = TerminationReader::with_limits(HostFiles::default(), READ_DEADLINE, NonZeroUsize::new(2).unwrap());
        let soon = || tokio::time::Instant::now() + Duration::from_millis(20);
        let deadline = || tokio::time::Instant::now() + Duration::from_secs(60);
        let (release_a, a) = std::sync::mpsc::channel();
        let (_release_b, b) = std::sync::mpsc::channel::<()>();
        assert_eq!(reader.off_thread(soon(), hanging(a)).await, Err(Late::TimedOut));
        assert_eq!(reader.off_thread(soon(), hanging(b)).await, Err(Late::TimedOut));
        assert_eq!(reader.stuck.load(Ordering::Acquire), 2);
        assert_eq!(
            reader.off_thread(deadline(), |_| 1).await,
            Err(Late::NoReader),
            "every reader stuck: not tried, not waited for"
        );
        release_a.send(()).unwrap();
        for _ in 0..10_000 {
            if reader.stuck.load(Ordering::Acquire) < 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(reader.stuck.load(Ordering::Acquire), 1);
        assert_eq!(reader.off_thread(deadline(), |_| 1).await, Ok(1));
    }

    /// A container whose read timed out is not read again; the memory of such containers is
    /// bounded, oldest forgotten first.
    #[tokio::test]
    async fn a_read_that_hung_is_not_tried_again() {
        let reader = TerminationReader::new(HostFiles::default());
        reader.hung().insert("c1");
        let plan = Plan {
            file: Some("/var/lib/kubelet/pods/u/containers/app/1a2b".into()),
            logs: None,
        };
        let readings = reader
            .read_pod("u", vec![("c1".into(), plan.clone()), ("c2".into(), plan)])
            .await;
        assert_eq!(readings[0], Reading::HungBefore);
        assert!(matches!(readings[1], Reading::Read { .. }), "{readings:?}");

        let mut hung = HungReads::default();
        for i in 0..=MAX_HUNG {
            hung.insert(&format!("c{i}"));
        }
        hung.insert("c5");
        assert!(!hung.contains("c0") && hung.contains("c1") && hung.contains(&format!("c{MAX_HUNG}")));
        assert_eq!((hung.ids.len(), hung.order.len()), (MAX_HUNG, MAX_HUNG));
    }
}
