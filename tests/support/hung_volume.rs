//! A volume that does not answer, as a hung NFS or FUSE mount under a pod's directory looks to
//! whoever reads it: a FUSE file system mounted with no server reading its requests. Every lookup
//! below it blocks (the kernel waits for the server's INIT answer) until the device is closed,
//! when each waiting call fails with ENOTCONN. Needs root (CAP_SYS_ADMIN) and /dev/fuse.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, UnmountFlags};

/// A hung mount at a directory; dropping it releases whatever waits on it and unmounts it.
pub struct HungVolume {
    device: Option<File>,
    at: PathBuf,
}

impl HungVolume {
    /// Mount one at `at` (an existing directory). Err where FUSE cannot be mounted (not root, no
    /// /dev/fuse), for the caller to skip loudly.
    pub fn mount(at: &Path) -> std::io::Result<Self> {
        let device = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
        let options = CString::new(format!("fd={},rootmode=40000,user_id=0,group_id=0", device.as_raw_fd()))?;
        rustix::mount::mount(
            "plegd-hung",
            at,
            "fuse",
            MountFlags::NOSUID | MountFlags::NODEV,
            options.as_c_str(),
        )?;
        Ok(Self {
            device: Some(device),
            at: at.to_owned(),
        })
    }
}

impl Drop for HungVolume {
    fn drop(&mut self) {
        // Closing the device aborts the connection: blocked calls return ENOTCONN.
        drop(self.device.take());
        let _ = rustix::mount::unmount(&self.at, UnmountFlags::DETACH);
    }
}
