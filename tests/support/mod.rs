//! Test support shared by the end-to-end tests: the fake CRI server and the real containerd fixture.
#![allow(dead_code)]

pub mod apiserver;
pub mod containerd;
pub mod daemon;
pub mod fake_cri;
pub mod process;
