//! The CUDA implementation: NVRTC compiles `pg.cu`, the driver API launches it, both loaded at
//! run time through cudarc (built with the `cuda` feature).

use std::ffi::{c_void, CString};
use std::sync::OnceLock;

use cudarc::driver::{result as cu, sys};

use super::api::{
    check_device_args, stats_from_device, DeviceBatch, DeviceInfo, DeviceOutput, DeviceReal,
    SOURCE, STATS_LEN,
};
use crate::error::{Error, Result};
use crate::learn::config::check_shapes;
use crate::learn::{Aggregation, KlEstimator, PgBatch, PgConfig, PgOutput, Surrogate};

/// Threads per block; `NX_BLOCK` in pg.cu sizes the shared arrays for it.
const BLOCK: u32 = 256;
/// Values per row in the row-sums scratch (`NX_ROW_STATS`).
const ROW_STATS: usize = 7;

/// The knobs as the kernels take them; must match `struct PgParams` in pg.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct PgParams {
    clip_low: f64,
    clip_high: f64,
    dual_c: f64,
    divisor: f64,
    kl_coef: f64,
    ent_coef: f64,
    surrogate: i32,
    agg: i32,
    trl_rows: i32,
    kl_kind: i32,
    kl_clamp: i32,
    adv_per_token: i32,
    has_ent: i32,
    pad: i32,
}

impl PgParams {
    fn new(cfg: &PgConfig, adv_per_token: bool) -> PgParams {
        let (surrogate, clip_low, clip_high, dual_c) = match cfg.surrogate {
            Surrogate::PpoClip {
                clip_low,
                clip_high,
                dual_clip,
            } => (0, clip_low, clip_high, dual_clip.unwrap_or(0.0)),
            Surrogate::Gspo {
                clip_low,
                clip_high,
            } => (1, clip_low, clip_high, 0.0),
            Surrogate::Reinforce => (2, 0.0, 0.0, 0.0),
        };
        let (agg, trl_rows, divisor) = match cfg.aggregation {
            Aggregation::TokenMean => (0, false, 0.0),
            Aggregation::SeqMeanTokenSum => (1, false, 0.0),
            Aggregation::SeqMeanTokenMean { trl_rows } => (2, trl_rows, 0.0),
            Aggregation::SeqMeanTokenSumNorm { divisor } => (3, false, divisor.unwrap_or(0.0)),
        };
        let (kl_kind, kl_coef, kl_clamp) = match cfg.kl {
            None => (0, 0.0, false),
            Some(k) => (
                match k.estimator {
                    KlEstimator::K1 => 1,
                    KlEstimator::K2 => 2,
                    KlEstimator::K3 => 3,
                },
                k.coef,
                k.clamp,
            ),
        };
        PgParams {
            clip_low,
            clip_high,
            dual_c,
            divisor,
            kl_coef,
            ent_coef: cfg.entropy_coef,
            surrogate,
            agg,
            trl_rows: i32::from(trl_rows),
            kl_kind,
            kl_clamp: i32::from(kl_clamp),
            adv_per_token: i32::from(adv_per_token),
            has_ent: i32::from(cfg.entropy_coef != 0.0),
            pad: 0,
        }
    }
}

struct Cuda {
    ctx: sys::CUcontext,
    info: DeviceInfo,
    row_lens: sys::CUfunction,
    totals: sys::CUfunction,
    loss_f32: sys::CUfunction,
    loss_f64: sys::CUfunction,
    finalize: sys::CUfunction,
}

// The handles are plain driver handles, valid from any thread once the context is current.
unsafe impl Send for Cuda {}
unsafe impl Sync for Cuda {}

static CUDA: OnceLock<std::result::Result<Cuda, String>> = OnceLock::new();

/// Whether a shared library can be opened, without keeping it: cudarc panics where one is
/// missing, so absence is found here first.
fn loadable(names: &[&str]) -> Option<String> {
    names.iter().find_map(|name| {
        let c = CString::new(*name).ok()?;
        // SAFETY: dlopen/dlclose with a valid C string; the handle is closed at once.
        unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if h.is_null() {
                None
            } else {
                libc::dlclose(h);
                Some((*name).to_string())
            }
        }
    })
}

const NVRTC_NAMES: &[&str] = &["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"];

/// Runs a cudarc call that may panic (a missing symbol) and turns both failure kinds into text.
fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|p| format!("{what}: {}", crate::error::panic_message(&*p)))?
        .map_err(|e| format!("{what}: {e}"))
}

/// The kernels as PTX for `arch` (e.g. "compute_90"). Needs only NVRTC, not a GPU, so it also
/// checks on a CPU machine that the CUDA C compiles.
pub fn compile_ptx(arch: &str) -> Result<String> {
    if loadable(NVRTC_NAMES).is_none() {
        return Err(Error::CudaUnavailable(format!(
            "NVRTC (libnvrtc.so.12 or .13) could not be loaded; install the CUDA toolkit or the \
             nvidia-cuda-nvrtc Python package and put its lib folder on LD_LIBRARY_PATH (tried {})",
            NVRTC_NAMES.join(", ")
        )));
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++14".into()],
        name: Some("nenyax_pg.cu".into()),
        ..Default::default()
    };
    guarded("NVRTC", || {
        cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts)
            .map(|p| p.to_src())
            .map_err(|e| match e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    format!("the kernels did not compile:\n{}", log.to_string_lossy())
                }
                other => format!("{other:?}"),
            })
    })
    .map_err(Error::Cuda)
}

fn driver_err(what: &str) -> impl Fn(cu::DriverError) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

fn init() -> std::result::Result<Cuda, String> {
    if loadable(&["libcuda.so.1", "libcuda.so"]).is_none() {
        return Err(
            "no NVIDIA driver library (libcuda.so.1) could be loaded on this machine".into(),
        );
    }
    let ordinal: i32 = match std::env::var("NENYAX_CUDA_DEVICE") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("NENYAX_CUDA_DEVICE is {v:?}; give a device number such as 0"))?,
        Err(_) => 0,
    };
    let (ctx, dev, info) = guarded("the CUDA driver", || {
        cu::init().map_err(driver_err("cuInit"))?;
        let count = cu::device::get_count().map_err(driver_err("cuDeviceGetCount"))?;
        if count <= ordinal {
            return Err(format!(
                "the driver sees {count} device(s); device {ordinal} is not there"
            ));
        }
        let dev = cu::device::get(ordinal).map_err(driver_err("cuDeviceGet"))?;
        let name = cu::device::get_name(dev).map_err(driver_err("cuDeviceGetName"))?;
        // SAFETY: `dev` came from cuDeviceGet.
        let attr = |a| unsafe { cu::device::get_attribute(dev, a) };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        // The primary context is the one the CUDA runtime (libtorch, CuPy) uses, so the
        // caller's device pointers are valid in it.
        // SAFETY: `dev` came from cuDeviceGet.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }
            .map_err(driver_err("cuDevicePrimaryCtxRetain"))?;
        Ok((
            ctx,
            dev,
            DeviceInfo {
                ordinal,
                name,
                compute_capability: (major, minor),
            },
        ))
    })?;
    let _ = dev;
    let (major, minor) = info.compute_capability;
    let ptx = compile_ptx(&format!("compute_{major}{minor}")).map_err(|e| e.to_string())?;
    guarded("loading the kernels", || {
        // SAFETY: ctx was retained above; the PTX string is NUL-terminated and outlives the call.
        unsafe {
            cu::ctx::set_current(ctx).map_err(driver_err("cuCtxSetCurrent"))?;
            let image = CString::new(ptx).map_err(|e| e.to_string())?;
            let module = cu::module::load_data(image.as_ptr().cast())
                .map_err(driver_err("cuModuleLoadData"))?;
            let f = |name: &str| -> std::result::Result<sys::CUfunction, String> {
                let c = CString::new(name).expect("no NUL in kernel names");
                cu::module::get_function(module, c).map_err(driver_err("cuModuleGetFunction"))
            };
            Ok(Cuda {
                ctx,
                info: info.clone(),
                row_lens: f("nx_row_lens")?,
                totals: f("nx_totals")?,
                loss_f32: f(<f32 as DeviceReal>::KERNEL)?,
                loss_f64: f(<f64 as DeviceReal>::KERNEL)?,
                finalize: f("nx_pg_finalize")?,
            })
        }
    })
}

fn cuda() -> Result<&'static Cuda> {
    match CUDA.get_or_init(init) {
        Ok(c) => {
            // SAFETY: a retained primary context may be made current on any thread.
            unsafe { cu::ctx::set_current(c.ctx) }
                .map_err(|e| Error::Cuda(format!("cuCtxSetCurrent: {e:?}")))?;
            Ok(c)
        }
        Err(why) => Err(Error::CudaUnavailable(why.clone())),
    }
}

/// The GPU the kernels run on, or why there is none. The first call loads the driver and
/// compiles the kernels; later calls are free.
pub fn device() -> Result<DeviceInfo> {
    cuda().map(|c| c.info.clone())
}

/// Scratch memory ordered on one stream, freed on it when dropped.
struct Scratch {
    ptr: sys::CUdeviceptr,
    stream: sys::CUstream,
}

impl Scratch {
    fn new(bytes: usize, stream: sys::CUstream) -> Result<Scratch> {
        // SAFETY: a stream-ordered allocation on the caller's stream, used only on it.
        let ptr = unsafe { cu::malloc_async(stream, bytes.max(1)) }
            .map_err(|e| Error::Cuda(format!("cuMemAllocAsync of {bytes} bytes: {e:?}")))?;
        Ok(Scratch { ptr, stream })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: freed on the stream it was allocated on, after the kernels queued before.
        unsafe {
            let _ = cu::free_async(self.ptr, self.stream);
        }
    }
}

fn launch(
    f: sys::CUfunction,
    grid: u32,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: `args` point at live values of the types the kernel declares, for this call.
    unsafe { cu::launch_kernel(f, (grid, 1, 1), (BLOCK, 1, 1), 0, stream, args) }
        .map_err(|e| Error::Cuda(format!("cuLaunchKernel: {e:?}")))
}

/// The fused loss on device memory, queued on the caller's `stream` (a `CUstream`, NULL for the
/// legacy default stream); nothing is synchronised. NaNs on valid tokens and a mask with no
/// valid token cannot be reported without a sync, so they are flagged in `stats[9]`
/// ([`BAD_LOGP`](super::BAD_LOGP) and the others; `stats[7]`, the token count, is 0 for an empty mask) for the
/// caller to check when it reads the loss.
///
/// # Safety
/// Every pointer must be device memory of the stated size in the device's primary context,
/// and stay valid until the stream reaches this work.
pub unsafe fn pg_loss_device<F: DeviceReal>(
    batch: &DeviceBatch,
    cfg: &PgConfig,
    out: &DeviceOutput,
    stream: *mut c_void,
) -> Result<()> {
    check_device_args(batch, out, cfg)?;
    let c = cuda()?;
    let stream = stream as sys::CUstream;
    let rows = batch.rows;
    let (mut rows_ll, mut width_ll) = (rows as i64, batch.width as i64);
    let lens = Scratch::new(rows * 4, stream)?;
    let totals = Scratch::new(16, stream)?;
    let row_stats = Scratch::new(rows * ROW_STATS * 8, stream)?;
    let mut params = PgParams::new(cfg, batch.advantages_per_token);
    let grid = u32::try_from(rows).map_err(|_| Error::Config("`rows` is too large".into()))?;
    let p = |v: &mut u64| v as *mut u64 as *mut c_void;
    let (mut mask, mut lens_p, mut totals_p, mut rs) =
        (batch.mask, lens.ptr, totals.ptr, row_stats.ptr);
    launch(
        c.row_lens,
        grid,
        stream,
        &mut [
            p(&mut mask),
            &mut width_ll as *mut i64 as *mut c_void,
            p(&mut lens_p),
        ],
    )?;
    launch(
        c.totals,
        1,
        stream,
        &mut [
            p(&mut lens_p),
            &mut rows_ll as *mut i64 as *mut c_void,
            p(&mut totals_p),
        ],
    )?;
    let (mut logp, mut old, mut rf, mut ent, mut adv) = (
        batch.logp,
        batch.old_logp,
        if cfg.kl.is_some() { batch.ref_logp } else { 0 },
        if cfg.entropy_coef != 0.0 {
            batch.entropy
        } else {
            0
        },
        batch.advantages,
    );
    let (mut grad, mut grad_ent, mut stats) = (out.grad_logp, out.grad_entropy, out.stats);
    let kernel = if F::KERNEL == <f32 as DeviceReal>::KERNEL {
        c.loss_f32
    } else {
        c.loss_f64
    };
    launch(
        kernel,
        grid,
        stream,
        &mut [
            p(&mut logp),
            p(&mut old),
            p(&mut rf),
            p(&mut ent),
            p(&mut mask),
            p(&mut adv),
            &mut rows_ll as *mut i64 as *mut c_void,
            &mut width_ll as *mut i64 as *mut c_void,
            p(&mut lens_p),
            p(&mut totals_p),
            &mut params as *mut PgParams as *mut c_void,
            p(&mut grad),
            p(&mut grad_ent),
            p(&mut rs),
        ],
    )?;
    launch(
        c.finalize,
        1,
        stream,
        &mut [
            p(&mut rs),
            &mut rows_ll as *mut i64 as *mut c_void,
            p(&mut totals_p),
            &mut params as *mut PgParams as *mut c_void,
            p(&mut stats),
        ],
    )
}

/// Device memory for one host slice, freed on drop (synchronous: the host path owns its stream).
struct DeviceVec {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceVec {
    fn zeroed(bytes: usize) -> Result<DeviceVec> {
        // SAFETY: a plain allocation in the current context.
        let ptr = unsafe { cu::malloc_sync(bytes.max(1)) }
            .map_err(|e| Error::Cuda(format!("cuMemAlloc of {bytes} bytes: {e:?}")))?;
        Ok(DeviceVec { ptr, bytes })
    }

    fn from<T>(v: &[T]) -> Result<DeviceVec> {
        let d = DeviceVec::zeroed(std::mem::size_of_val(v))?;
        // SAFETY: `d` holds exactly size_of_val(v) bytes.
        unsafe { cu::memcpy_htod_sync(d.ptr, v) }
            .map_err(|e| Error::Cuda(format!("cuMemcpyHtoD: {e:?}")))?;
        Ok(d)
    }

    fn read<T>(&self, dst: &mut [T]) -> Result<()> {
        debug_assert_eq!(std::mem::size_of_val(dst), self.bytes);
        // SAFETY: `dst` is exactly as large as this buffer.
        unsafe { cu::memcpy_dtoh_sync(dst, self.ptr) }
            .map_err(|e| Error::Cuda(format!("cuMemcpyDtoH: {e:?}")))
    }
}

impl Drop for DeviceVec {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc in this context; nothing uses it after the sync.
        unsafe {
            let _ = cu::free_sync(self.ptr);
        }
    }
}

/// The fused loss on the GPU from host memory: copies in, runs, copies back, and reports bad
/// input with the same errors as the CPU path (NaNs name their argument, not their position).
pub fn pg_loss_host<F: DeviceReal>(batch: &PgBatch<'_, F>, cfg: &PgConfig) -> Result<PgOutput<F>> {
    let n = batch.mask.len();
    let want_ent = cfg.entropy_coef != 0.0;
    let (rows, width) = check_shapes(batch, cfg, n, want_ent.then_some(n))?;
    cuda()?;
    let opt = |v: Option<&[F]>| v.map(DeviceVec::from).transpose();
    let logp = DeviceVec::from(batch.logp)?;
    let old = DeviceVec::from(batch.old_logp)?;
    let rf = opt(batch.ref_logp.filter(|_| cfg.kl.is_some()))?;
    let ent = opt(batch.entropy.filter(|_| want_ent))?;
    let mask = DeviceVec::from(batch.mask)?;
    let adv = DeviceVec::from(batch.advantages)?;
    let grad = DeviceVec::zeroed(n * std::mem::size_of::<F>())?;
    let grad_ent = want_ent
        .then(|| DeviceVec::zeroed(n * std::mem::size_of::<F>()))
        .transpose()?;
    let stats = DeviceVec::zeroed(STATS_LEN * 8)?;
    let dev = DeviceBatch {
        logp: logp.ptr,
        old_logp: old.ptr,
        ref_logp: rf.as_ref().map_or(0, |d| d.ptr),
        entropy: ent.as_ref().map_or(0, |d| d.ptr),
        mask: mask.ptr,
        advantages: adv.ptr,
        advantages_per_token: batch.advantages.len() == n && n != rows,
        rows,
        width,
    };
    let out = DeviceOutput {
        grad_logp: grad.ptr,
        grad_entropy: grad_ent.as_ref().map_or(0, |d| d.ptr),
        stats: stats.ptr,
    };
    // SAFETY: every buffer above is live device memory of the right size until the sync below.
    unsafe {
        pg_loss_device::<F>(&dev, cfg, &out, std::ptr::null_mut())?;
        cu::ctx::synchronize().map_err(|e| Error::Cuda(format!("the kernels failed: {e:?}")))?;
    }
    let mut s = [0.0f64; STATS_LEN];
    stats.read(&mut s)?;
    let stats = stats_from_device(&s, cfg)?;
    let mut grad_logp = vec![F::from_f64(0.0); n];
    grad.read(&mut grad_logp)?;
    let grad_entropy = match grad_ent {
        Some(d) => {
            let mut v = vec![F::from_f64(0.0); n];
            d.read(&mut v)?;
            Some(v)
        }
        None => None,
    };
    Ok(PgOutput {
        stats,
        grad_logp,
        grad_entropy,
    })
}
