//! The learners' fused loss on the GPU: the CUDA C of `pg.cu`, compiled at first use with NVRTC
//! and launched through the CUDA driver API, both loaded at run time (cudarc's dynamic loading),
//! so the library builds and runs where there is no CUDA at all. Without a usable GPU every
//! entry point returns [`Error::CudaUnavailable`] saying what is missing; the CPU path in
//! [`crate::learn`] always works.
//!
//! Two ways in: device pointers and the caller's stream ([`pg_loss_device`], for a trainer whose
//! tensors live on the GPU; nothing is synchronised), and host slices ([`pg_loss_host`], which
//! copies in, runs and copies back).
//!
//! Without the `cuda` Cargo feature the same entry points exist and return
//! [`Error::CudaUnavailable`] saying the library was built without it.

#[cfg(doc)]
use crate::error::Error;

mod api;
#[cfg_attr(not(feature = "cuda"), path = "no_cuda.rs")]
mod cuda;

pub use api::{
    stats_from_device, DeviceBatch, DeviceInfo, DeviceOutput, DeviceReal, BAD_ADVANTAGES,
    BAD_ENTROPY, BAD_LOGP, BAD_OLD_LOGP, BAD_REF_LOGP, SOURCE, STATS_LEN,
};
pub use cuda::{compile_ptx, device, pg_loss_device, pg_loss_host};
