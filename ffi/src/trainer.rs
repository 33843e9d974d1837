//! Host trainers: a host model whose weights a weight learner (grpo, dapo, rft, dpo, ...)
//! trains. The library traces what the host's policy sampled into a `nenyax_trace_batch_t`;
//! the host reports per-token log-probabilities of it and applies `dLoss/dlogp`.

use serde_json::{json, Value};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

use nenyax_core::train::{TraceBatch, Trainer, Weights};
use nenyax_core::{Error, Policy};

use crate::callbacks::{failure_message, nenyax_reply_t, CText, UserData};
use crate::error::{invalid, FfiResult};

/// Version of `nenyax_trace_batch_t`.
pub const NENYAX_TRACE_BATCH_VERSION: u32 = 1;
/// Version of `nenyax_trainer_vtable_t`.
pub const NENYAX_TRAINER_VTABLE_VERSION: u32 = 1;

/// Traced sequences handed to a trainer's callbacks, valid only during the call: `rows` x
/// `width` positions, row-major, padded with 0 tokens (mask 0) past each row's length.
#[repr(C)]
pub struct nenyax_trace_batch_t {
    /// NENYAX_TRACE_BATCH_VERSION.
    pub version: u32,
    /// Rows (sequences).
    pub rows: usize,
    /// Positions per row (the longest row).
    pub width: usize,
    /// Token ids, rows x width; 0 in padding.
    pub tokens: *const i64,
    /// rows x width: 1 where the policy sampled the token (the loss counts it), else 0.
    pub mask: *const u8,
    /// rows x width: the sampler's log-probability of each sampled token; NaN where unknown,
    /// not sampled, or padding.
    pub sampled_logp: *const f64,
    /// rows x width: where each position's conditioning context begins in its row (0 for
    /// joined chat turns; an action call's own segment start, since its choices are
    /// independent draws).
    pub context_start: *const i64,
    /// Each row's length before padding (`rows` values).
    pub lengths: *const i64,
    /// Where each row came from, as JSON: [{"trajectory", "group", "member", "reward",
    /// "segments": [{"call", "context_start", "completion_start", "completion_len",
    /// "observation" (action calls only: the Observation the call saw)}]}]; NUL-terminated.
    pub rows_json: *const c_char,
    /// Length of `rows_json` in bytes, without the NUL.
    pub rows_json_len: usize,
}

/// A host model trained by a weight learner. Its callbacks are called on the thread that called
/// nenyax_train, never concurrently; each returns 0, or non-zero with a message in `error`
/// (the round then fails with NENYAX_STATUS_TRAINING in its report).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nenyax_trainer_vtable_t {
    /// NENYAX_TRAINER_VTABLE_VERSION.
    pub version: u32,
    /// Write `log p(token | tokens[context_start .. t])` for every masked position to `logp_out`
    /// (rows x width; other positions are not read); with `reference`, under the frozen
    /// reference weights (for KL terms and DPO; fail with a message if there are none).
    pub logprobs: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            batch: *const nenyax_trace_batch_t,
            reference: bool,
            logp_out: *mut f64,
            error: *mut nenyax_reply_t,
        ) -> i32,
    >,
    /// Backpropagate `grad_logp` (dLoss/dlogp, rows x width, 0 off the mask) and take one
    /// optimiser step that lowers the loss.
    pub apply: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            batch: *const nenyax_trace_batch_t,
            grad_logp: *const f64,
            error: *mut nenyax_reply_t,
        ) -> i32,
    >,
    /// Optional (NULL: updates are never reverted): save the weights and optimiser state in
    /// one slot, replacing the last snapshot.
    pub snapshot:
        Option<unsafe extern "C" fn(user_data: *mut c_void, error: *mut nenyax_reply_t) -> i32>,
    /// Optional, set with `snapshot`: go back to the last snapshot.
    pub restore:
        Option<unsafe extern "C" fn(user_data: *mut c_void, error: *mut nenyax_reply_t) -> i32>,
}

/// Copy and check a trainer vtable.
pub(crate) unsafe fn trainer_vtable(
    vt: *const nenyax_trainer_vtable_t,
) -> FfiResult<nenyax_trainer_vtable_t> {
    let vt = *vt
        .as_ref()
        .ok_or_else(|| invalid("trainer vtable is NULL".into()))?;
    if vt.version != NENYAX_TRAINER_VTABLE_VERSION {
        return Err(invalid(format!(
            "nenyax_trainer_vtable_t version {} is not supported; this library speaks version \
             {NENYAX_TRAINER_VTABLE_VERSION} (NENYAX_TRAINER_VTABLE_VERSION)",
            vt.version
        )));
    }
    if vt.logprobs.is_none() || vt.apply.is_none() {
        return Err(invalid(
            "trainer vtable->logprobs and ->apply must both be set".into(),
        ));
    }
    if vt.snapshot.is_some() != vt.restore.is_some() {
        return Err(invalid(
            "set both trainer vtable->snapshot and ->restore, or neither (no gating)".into(),
        ));
    }
    Ok(vt)
}

/// A [`TraceBatch`] laid out for C: pointers into the batch's padded arrays, and the rows'
/// JSON they come with. Borrows the batch, so it cannot outlive it.
pub(crate) struct CBatch<'b> {
    pub(crate) raw: nenyax_trace_batch_t,
    _json: CText,
    _batch: std::marker::PhantomData<&'b TraceBatch<'b>>,
}

impl<'b> CBatch<'b> {
    pub(crate) fn new(batch: &'b TraceBatch<'_>) -> CBatch<'b> {
        // Written straight to text (no JSON tree): this runs before every trainer call.
        use std::fmt::Write as _;
        let mut json = String::with_capacity(batch.len() * 96);
        json.push('[');
        for (r, (row, info)) in batch.rows.iter().zip(&batch.info).enumerate() {
            if r > 0 {
                json.push(',');
            }
            let _ = write!(
                json,
                "{{\"trajectory\":{},\"group\":{},\"member\":{},\"reward\":{},\"segments\":[",
                info.trajectory,
                info.group,
                info.member,
                Value::from(info.reward)
            );
            for (k, seg) in row.segments.iter().enumerate() {
                let _ = write!(
                    json,
                    "{}{{\"call\":{},\"context_start\":{},\"completion_start\":{},\"completion_len\":{}",
                    if k > 0 { "," } else { "" },
                    seg.call,
                    seg.context_start,
                    seg.completion_start,
                    seg.completion_len
                );
                // The observation only where it is the whole prompt: an action call that
                // recorded no prompt tokens of its own.
                let call = batch.call(r, seg);
                if call.is_action() && seg.completion_start == seg.context_start {
                    if let Some(o) = call.request.get("observation") {
                        let _ = write!(json, ",\"observation\":{o}");
                    }
                }
                json.push('}');
            }
            json.push_str("]}");
        }
        json.push(']');
        let text = CText::new(json);
        let p = &batch.padded;
        let raw = nenyax_trace_batch_t {
            version: NENYAX_TRACE_BATCH_VERSION,
            rows: p.rows,
            width: p.width,
            tokens: p.tokens.as_ptr(),
            mask: p.mask.as_ptr(),
            sampled_logp: p.sampled_logp.as_ptr(),
            context_start: p.context_start.as_ptr(),
            lengths: p.lengths.as_ptr(),
            rows_json: text.ptr(),
            rows_json_len: text.len(),
        };
        CBatch {
            raw,
            _json: text,
            _batch: std::marker::PhantomData,
        }
    }
}

/// Turn a trainer callback's return code into a result.
fn trained(what: &str, rc: i32, error: nenyax_reply_t) -> nenyax_core::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    Err(Error::Training(format!(
        "the host trainer's {what} callback failed with status {rc}: {}",
        failure_message(error.take())
    )))
}

/// A [`Trainer`] over a host's vtable: the host owns the weights and samples with its own
/// policy (a `nenyax_policy_t`, typically an act_episode or chat_episode callback).
pub(crate) struct HostTrainer {
    vt: nenyax_trainer_vtable_t,
    data: Arc<UserData>,
    policy: Policy,
}

impl HostTrainer {
    pub(crate) fn new(vt: nenyax_trainer_vtable_t, data: Arc<UserData>, policy: Policy) -> Self {
        HostTrainer { vt, data, policy }
    }
}

impl Trainer for HostTrainer {
    fn name(&self) -> String {
        "host".into()
    }

    fn policy(&mut self) -> nenyax_core::Result<Policy> {
        Ok(self.policy.clone())
    }

    fn logprobs(&mut self, batch: &TraceBatch<'_>, w: Weights) -> nenyax_core::Result<Vec<f64>> {
        let Some(f) = self.vt.logprobs else {
            return Err(Error::Training(
                "the host trainer has no logprobs callback".into(),
            ));
        };
        let c = CBatch::new(batch);
        // NaN until written: a position the host skips fails the finiteness check.
        let mut out = vec![f64::NAN; batch.len() * batch.width()];
        let mut error = nenyax_reply_t::empty();
        // SAFETY: the host's function with its own user data; the batch and `out` (rows x
        // width) outlive the call.
        let rc = unsafe {
            f(
                self.data.ptr,
                &c.raw,
                w == Weights::Reference,
                out.as_mut_ptr(),
                &mut error,
            )
        };
        let what = match w {
            Weights::Current => "logprobs",
            Weights::Reference => "logprobs (reference = true)",
        };
        trained(what, rc, error)?;
        Ok(out)
    }

    fn apply(&mut self, batch: &TraceBatch<'_>, grad_logp: &[f64]) -> nenyax_core::Result<()> {
        let Some(f) = self.vt.apply else {
            return Err(Error::Training(
                "the host trainer has no apply callback".into(),
            ));
        };
        if grad_logp.len() != batch.len() * batch.width() {
            return Err(Error::Training(format!(
                "{} gradients for a batch of {} x {}",
                grad_logp.len(),
                batch.len(),
                batch.width()
            )));
        }
        let c = CBatch::new(batch);
        let mut error = nenyax_reply_t::empty();
        // SAFETY: as in logprobs.
        let rc = unsafe { f(self.data.ptr, &c.raw, grad_logp.as_ptr(), &mut error) };
        trained("apply", rc, error)
    }

    fn snapshot(&mut self) -> nenyax_core::Result<bool> {
        let Some(f) = self.vt.snapshot else {
            return Ok(false);
        };
        let mut error = nenyax_reply_t::empty();
        // SAFETY: the host's function with its own user data.
        let rc = unsafe { f(self.data.ptr, &mut error) };
        trained("snapshot", rc, error).map(|()| true)
    }

    fn restore(&mut self) -> nenyax_core::Result<()> {
        let Some(f) = self.vt.restore else {
            return Err(Error::Training(
                "the host trainer cannot restore (no restore callback)".into(),
            ));
        };
        let mut error = nenyax_reply_t::empty();
        // SAFETY: the host's function with its own user data.
        let rc = unsafe { f(self.data.ptr, &mut error) };
        trained("restore", rc, error)
    }

    fn describe(&self) -> Value {
        json!({"name": "host", "snapshots": self.vt.snapshot.is_some()})
    }
}
