//! The `plegd` binary. Everything it does is in the library (`plegd::cli::main`); this file only
//! sets the allocator up first.

fn main() -> std::process::ExitCode {
    fix_mmap_threshold();
    plegd::cli::main()
}

/// glibc's malloc raises its mmap threshold each time a large block it mapped is freed; from then
/// on a relist's large, short-lived buffers (CRI answers, the maps built from them) come from the
/// heap, leave holes that long-lived small objects settle into, and keep the heap's pages resident.
/// A fixed threshold at glibc's own starting value (128 KiB) gives such buffers mappings of their
/// own, returned when they are freed. At 1,000 pods this keeps ~3 MiB off plegd's resident set for
/// one page fault per 4 KiB of each large buffer (BENCHMARKS.md, "Idle cost on containerd 2.1").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "mallopt is a C function; see SAFETY below")]
fn fix_mmap_threshold() {
    const MMAP_THRESHOLD: libc::c_int = 128 * 1024;
    // SAFETY: mallopt only sets an allocator parameter; it is called before any other thread
    // exists and takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_mmap_threshold() {}
