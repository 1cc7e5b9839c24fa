//! Figures of the bench binaries.

/// The sample at fraction `p` (0.5: the median) of `sorted` (ascending): rank round((n − 1) · p).
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
