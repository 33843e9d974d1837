//! The CUDA entry points of a library built without the `cuda` feature: the same checks of
//! their arguments, then [`Error::CudaUnavailable`] saying how to get CUDA.

use std::ffi::c_void;

use super::api::{check_device_args, DeviceBatch, DeviceInfo, DeviceOutput, DeviceReal};
use crate::error::{Error, Result};
use crate::learn::config::check_shapes;
use crate::learn::{PgBatch, PgConfig, PgOutput};

fn unavailable() -> Error {
    Error::CudaUnavailable(
        "this build of Nenyax has no CUDA path: it was built without the `cuda` feature \
         (rebuild with `--features cuda`); the CPU learners work as they are"
            .into(),
    )
}

/// The kernels as PTX: unavailable without the `cuda` feature.
pub fn compile_ptx(_arch: &str) -> Result<String> {
    Err(unavailable())
}

/// The GPU: unavailable without the `cuda` feature.
pub fn device() -> Result<DeviceInfo> {
    Err(unavailable())
}

/// The fused loss on device memory: checks its arguments, then reports that this build has no
/// CUDA.
///
/// # Safety
/// Nothing is dereferenced; `unsafe` only to match the CUDA build's signature.
pub unsafe fn pg_loss_device<F: DeviceReal>(
    batch: &DeviceBatch,
    cfg: &PgConfig,
    out: &DeviceOutput,
    _stream: *mut c_void,
) -> Result<()> {
    check_device_args(batch, out, cfg)?;
    Err(unavailable())
}

/// The fused loss on the GPU from host memory: checks the batch, then reports that this build
/// has no CUDA.
pub fn pg_loss_host<F: DeviceReal>(batch: &PgBatch<'_, F>, cfg: &PgConfig) -> Result<PgOutput<F>> {
    let n = batch.mask.len();
    let want_ent = cfg.entropy_coef != 0.0;
    check_shapes(batch, cfg, n, want_ent.then_some(n))?;
    Err(unavailable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_says_the_build_has_no_cuda() {
        let feature = |e: Error| match e {
            Error::CudaUnavailable(why) => assert!(why.contains("`cuda` feature"), "{why}"),
            other => panic!("{other}"),
        };
        feature(compile_ptx("compute_90").unwrap_err());
        feature(device().unwrap_err());
    }
}
