//! The scan algorithm on the CPU: dynamic programming over a materialised edge tensor with a
//! ring of the last `K` DP rows and a checkpointed backward.
//!
//! # What it is
//!
//! [`ScanEngine`] runs the generic edge-form recurrences of SPEC §3–§5 over an edge tensor
//! `edges[b, s, d-1, j, i]` of shape `(B, T, K, C, C)` (destination label first). Edge input is
//! read in its own dtype and widened to `f64` element by element; structured input is first
//! materialised into an `f64` edge tensor with [`semicrf_core::materialize`], and its
//! gradients are the edge marginals pulled back with [`semicrf_core::pull_back`]. All DP state
//! is `f64` in log space.
//!
//! It is the baseline the streaming backend is measured against: its work is `O(T·K·C²)` per
//! sequence, and for structured input it holds the whole `B·T·K·C²` edge tensor in memory.
//! **Prefer the streaming engine for structured potentials with a static `(C, C)` transition**:
//! it never materialises edges and does `O(T·C·(C+K))` work. Use scan when the input already
//! is an edge tensor, or as a memory-lean alternative to the exact engine (whose DP tables grow
//! with `T`) when the edge tensor itself fits.
//!
//! # Recurrences (edge form, virtual start)
//!
//! ```text
//! α_0(i) = one                                         for every i (the virtual start)
//! α_t(j) = ⊕_{d=1..min(K,t)} ⊕_i α_{t-d}(i) ⊗ edges[t-d, d-1, j, i]      t = 1..=L
//! result = ⊕_j α_L(j)                                 (log Z for Log, the Viterbi score for Max)
//!
//! β_L(j) = one
//! β_s(i) = ⊕_{d=1..min(K,L-s)} ⊕_j edges[s, d-1, j, i] ⊗ β_{s+d}(j)         s = L-1..1
//! μ[s, d-1, j, i] = exp(α_s(i) + edges[s, d-1, j, i] + β_{s+d}(j) - log Z)   (edge marginals)
//! ```
//!
//! `α_t` only reads `α_{t-1} … α_{t-K}`, so the forward keeps a ring of the last `K` rows
//! (`K·C` numbers, plus the one row being computed) instead of the `(T+1)·C` table. The
//! forward is generic over [`Semiring`] (Log and Max are wired to [`SemiringKind`]); for each
//! `(t, j)` it gathers the `min(K, t)·C` terms `α_{t-d}(i) + edges[t-d, d-1, j, i]` into a
//! contiguous buffer and reduces them.
//!
//! # Numerics
//!
//! Every log-sum-exp is max-shifted and guarded against an all-`-inf` set (which gives
//! `-inf`, never NaN); nothing is clamped. The DP state stays in `f64` log space without
//! normalisation (`f64` log values do not overflow at any practical `T`). Exponentials of the
//! (non-positive) shifted terms use a branch-free polynomial `exp` (within a few ulp of
//! `f64::exp`, exactly 0 below `-708`) so the loops vectorise, and sums are taken in a fixed
//! four-lane order, so every result is deterministic. The marginals of one start position `s`
//! come out of the same pass as `β_s`: with `m_i = max_{d,j}(edges + β_{s+d}(j))`,
//! `β_s(i) = m_i + ln Σ exp(x - m_i)` and `μ = exp(x - m_i) · exp(α_s(i) + m_i - log Z)`,
//! where both factors are at most 1 (up to rounding).
//!
//! **Viterbi** keeps, per `(t, j)`, the best `(d, i)` packed into one `u32`
//! (`(d-1)·C + i`): `T·C` small integers. Ties break as SPEC §5 says: among equal scores the
//! smaller duration, then the smaller previous label; the final label is the smallest best
//! index. An infeasible sequence decodes to `score = -inf` and no segments.
//!
//! **Backward.** The forward saves the ring every `Δ` positions (checkpoint `m` holds
//! `α_{mΔ-K+1..=mΔ}`). The backward walks the intervals `[mΔ, min((m+1)Δ, L))` from last to
//! first: it restores the interval's checkpoint, recomputes `α` inside the interval
//! (bitwise the same values as the forward), and runs `β` backwards through it with a ring of
//! its own (`K·C`), emitting the edge marginals of one start position at a time. The
//! boundary marginals are `Σ_{d,j,i} μ[s, d-1, j, i]` (not scaled by the upstream gradient);
//! edge input gets `grad.edges = g_b·μ`, structured input `pull_back(g_b·μ)`, where the
//! marginals overwrite the materialised edges in place (each start position is overwritten
//! only after everything that reads it has run). The default `Δ` is
//! `max(K, ceil(sqrt(T·K)))` for the padded length `T`; any `Δ ≥ 1` gives bitwise the same
//! results.
//!
//! # Cost
//!
//! Time `O(T·K·C²)` per sequence for every operation; the backward costs about three
//! forwards (the forward with checkpoints, the recomputation of `α`, and the `β`/marginal
//! passes over each start position's contiguous `K·C²` slab). Working memory beyond inputs and outputs: see
//! [`ScanEngine`]'s `memory_required`, in short `B·T·K·C²·8` bytes for materialised structured
//! input plus, per sequence in flight, `O(K·C)` for forward rings, `+T·C·4` for Viterbi
//! backpointers, and `O((T/Δ)·K·C + Δ·C + K·C²)` for the backward.
//!
//! Sequences are processed in parallel with rayon (see [`Parallelism`]); every sequence is
//! computed independently and in a fixed order, so results are bitwise identical between
//! [`Parallelism::Sequential`] and [`Parallelism::Rayon`], and between a batch and its
//! sequences run one at a time.

use std::borrow::Cow;
use std::sync::Mutex;

use ndarray::{Array2, Array5, ArrayView5, Axis};
use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, Error, Form, Gradients, Op, Problem, Query,
    Result, Scalar, Segment, SemiringKind, check_feasible, check_upstream, edge_tensor_bytes,
    materialize, pull_back,
};
use semicrf_semiring::{LogSemiring, MaxSemiring, Semiring};

use crate::kernels::exp_fast;
use crate::{Parallelism, map_indexed};

const NEG_INF: f64 = f64::NEG_INFINITY;
const F64_BYTES: u64 = 8;
/// Bookkeeping per sequence of a backward pass (output chunk handles), counted generously.
const PER_SEQUENCE_OVERHEAD: u64 = 128;
/// Rayon's own allocations per call (job bookkeeping), counted generously; the one-time
/// initialisation of its global thread pool is not counted.
const RAYON_SLACK: u64 = 4096;

/// The scan engine on the CPU: materialised edges, a `K·C` ring of DP state, checkpointed
/// backward.
///
/// Runs the edge-form recurrences (virtual start: `α_0(i) = 0` for every source `i`) over an
/// edge tensor `(B, T, K, C, C)`, read in its own dtype; structured input is materialised
/// to `f64` edges first ([`semicrf_core::materialize`]) and its gradients pulled back
/// ([`semicrf_core::pull_back`]). Time `O(T·K·C²)` per sequence. The forward keeps only the
/// last `K` rows of `α`; Viterbi adds `T·C` `u32` backpointers (ties: smaller duration, then
/// smaller previous label; smallest final label); the backward saves the ring every `Δ`
/// positions ([`ScanEngine::checkpoint_interval`], default `max(K, ceil(sqrt(T·K)))`),
/// recomputes `α` one interval at a time and runs `β` with a ring of its own, so beyond the
/// edges it needs `O((T/Δ)·K·C + Δ·C + K·C²)` per sequence in flight
/// ([`Engine::memory_required`] gives the exact formula). For structured potentials with a
/// static transition, prefer the streaming engine: `O(T·C·(C+K))` work and no edge tensor.
///
/// Results are bitwise identical for every `Δ`, between [`Parallelism::Sequential`] and
/// [`Parallelism::Rayon`], and between a batch and its sequences run one at a time.
///
/// ```
/// use ndarray::{Array2, Array3};
/// use semicrf_core::{Engine, Potentials, Problem, SemiringKind};
/// use semicrf_cpu::ScanEngine;
///
/// let scores = Array3::<f64>::from_elem((2, 6, 3), 0.25);
/// let transition = Array2::<f64>::zeros((3, 3));
/// let lengths = [6, 4];
/// let p: Problem<f64> = Potentials::builder(scores.view(), &lengths, 3)
///     .transition(transition.view())
///     .build()?
///     .into();
/// let engine = ScanEngine::new().checkpoint_interval(Some(4));
/// let log_z = engine.forward(&p, SemiringKind::Log)?;
/// let best = engine.viterbi(&p)?;
/// assert!(best[0].score <= log_z[0]);
/// # Ok::<(), semicrf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ScanEngine {
    /// Threading.
    pub parallelism: Parallelism,
    /// The checkpoint interval `Δ` of the backward pass; `None` (the default) picks
    /// `max(K, ceil(sqrt(T·K)))` for the padded length `T`. `Some(0)` is taken as 1.
    pub checkpoint_interval: Option<usize>,
}

impl ScanEngine {
    /// An engine with default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the threading.
    pub fn parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }

    /// Sets the checkpoint interval `Δ` of the backward pass (`None`: automatic).
    pub fn checkpoint_interval(mut self, delta: Option<usize>) -> Self {
        self.checkpoint_interval = delta;
        self
    }

    /// The checkpoint interval `Δ` used for padded length `len` and maximum duration `k`:
    /// the configured one, or `max(k, ceil(sqrt(len·k)))`; always at least 1.
    pub fn effective_checkpoint_interval(&self, len: usize, k: usize) -> usize {
        match self.checkpoint_interval {
            Some(d) => d.max(1),
            None => {
                let x = (len as f64) * (k as f64);
                let mut d = x.sqrt().ceil() as usize;
                // Make it exact in integers: the smallest d with d·d >= len·k.
                while d > 1 && (d - 1).saturating_mul(d - 1) >= len.saturating_mul(k) {
                    d -= 1;
                }
                while d.saturating_mul(d) < len.saturating_mul(k) {
                    d += 1;
                }
                d.max(k).max(1)
            }
        }
    }

    /// How many sequences may hold working buffers at once (an upper bound).
    fn in_flight(&self, batch: u64) -> u64 {
        match self.parallelism {
            Parallelism::Sequential => batch.min(1),
            _ => batch,
        }
    }

    fn unsupported(what: String) -> Error {
        Error::Unsupported {
            backend: "cpu/scan".into(),
            what,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Per-sequence kernels.
// ---------------------------------------------------------------------------------------------

/// `K`, `C` and the derived strides of one start position's edge slab `(K, C, C)`.
#[derive(Clone, Copy, Debug)]
struct Dims {
    k: usize,
    c: usize,
    cc: usize,
    kcc: usize,
}

impl Dims {
    fn new(k: usize, c: usize) -> Self {
        Dims {
            k,
            c,
            cc: c * c,
            kcc: k * c * c,
        }
    }
}

/// One sequence's edges `(T, K, C, C)` as a row-major slice: borrowed when the input is
/// already laid out that way, copied otherwise.
fn sequence_block<'a, E: Scalar>(edges: &ArrayView5<'a, E>, b: usize) -> Cow<'a, [E]> {
    let view = (*edges).index_axis_move(Axis(0), b);
    match view.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(view.iter().copied().collect()),
    }
}

/// The semiring reductions of this engine over a slice of `f64` terms: `S::sum` with
/// vectorisable loops. The reduction order is fixed, so results are deterministic.
trait ScanSemiring: Semiring {
    /// `⊕` over `xs`, which it may overwrite; `zero` for an empty or all-`zero` slice.
    fn reduce(xs: &mut [f64]) -> f64;
}

/// The maximum of `xs` (`-inf` for an empty slice), four lanes at a time.
#[inline]
fn max_of(xs: &[f64]) -> f64 {
    let mut m = [NEG_INF; 4];
    let mut chunks = xs.chunks_exact(4);
    for ch in &mut chunks {
        for l in 0..4 {
            m[l] = if ch[l] > m[l] { ch[l] } else { m[l] };
        }
    }
    for &x in chunks.remainder() {
        m[0] = if x > m[0] { x } else { m[0] };
    }
    let a = if m[1] > m[0] { m[1] } else { m[0] };
    let b = if m[3] > m[2] { m[3] } else { m[2] };
    if b > a { b } else { a }
}

/// `Σ xs`, four lanes at a time (a fixed order).
#[inline]
fn sum_of(xs: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let mut chunks = xs.chunks_exact(4);
    for ch in &mut chunks {
        for l in 0..4 {
            acc[l] += ch[l];
        }
    }
    for &x in chunks.remainder() {
        acc[0] += x;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

impl ScanSemiring for LogSemiring {
    /// Max-shifted log-sum-exp; `-inf` when the max is `-inf` (no `-inf - -inf`). The
    /// exponentials are taken in place, in one independent-per-element loop.
    #[inline]
    fn reduce(xs: &mut [f64]) -> f64 {
        let m = max_of(xs);
        if m == NEG_INF {
            return m;
        }
        for x in xs.iter_mut() {
            *x = exp_fast(*x - m);
        }
        m + sum_of(xs).ln()
    }
}

impl ScanSemiring for MaxSemiring {
    #[inline]
    fn reduce(xs: &mut [f64]) -> f64 {
        max_of(xs)
    }
}

/// Scratch of one forward step: the `K·C` terms of one destination label and, per duration,
/// the offsets of the source row and of the edge slab.
struct StepScratch {
    terms: Vec<f64>,
    offsets: Vec<(usize, usize)>,
}

impl StepScratch {
    fn new(dm: Dims) -> Self {
        StepScratch {
            terms: vec![0.0; dm.k * dm.c],
            offsets: vec![(0, 0); dm.k],
        }
    }

    /// For `d = 1..=n`: (offset of row `α_{t-d}` in `rows`, offset of `edges[t-d, d-1, 0, 0]`).
    #[inline]
    fn fill_offsets(&mut self, t: usize, n: usize, dm: Dims, row_of: impl Fn(usize) -> usize) {
        for (d, o) in (1..=n).zip(self.offsets.iter_mut()) {
            let s = t - d;
            *o = (row_of(s) * dm.c, s * dm.kcc + (d - 1) * dm.cc);
        }
    }
}

/// `α_t` (all `C` labels) into `out`, from the rows of `α_{t-1} … α_{t-n}` (`n = min(K, t)`)
/// found in `rows` at row `row_of(position)`.
#[inline]
fn alpha_step<S: ScanSemiring, E: Scalar>(
    t: usize,
    dm: Dims,
    e: &[E],
    rows: &[f64],
    row_of: impl Fn(usize) -> usize,
    scratch: &mut StepScratch,
    out: &mut [f64],
) {
    let c = dm.c;
    let n = dm.k.min(t);
    scratch.fill_offsets(t, n, dm, row_of);
    let StepScratch { terms, offsets } = scratch;
    for (j, o) in out.iter_mut().enumerate() {
        for (&(ro, eo), dst) in offsets[..n].iter().zip(terms.chunks_exact_mut(c)) {
            let a = &rows[ro..ro + c];
            let w = &e[eo + j * c..eo + j * c + c];
            for ((x, &a), &w) in dst.iter_mut().zip(a).zip(w) {
                *x = a + w.as_f64();
            }
        }
        *o = S::reduce(&mut terms[..n * c]);
    }
}

/// The Max-semiring `α_t` with backpointers `(d-1)·C + i` of the best `(d, i)`: the first
/// strict maximum in the order (d ascending, i ascending), so ties go to the smaller duration,
/// then the smaller previous label.
#[inline]
fn viterbi_step<E: Scalar>(
    t: usize,
    dm: Dims,
    e: &[E],
    ring: &[f64],
    scratch: &mut StepScratch,
    out: &mut [f64],
    bp: &mut [u32],
) {
    let c = dm.c;
    let n = dm.k.min(t);
    scratch.fill_offsets(t, n, dm, |p| p % dm.k);
    for j in 0..c {
        let mut best = NEG_INF;
        let mut arg = 0u32;
        for (d, &(ro, eo)) in scratch.offsets[..n].iter().enumerate() {
            let a = &ring[ro..ro + c];
            let w = &e[eo + j * c..eo + j * c + c];
            for (i, (&a, &w)) in a.iter().zip(w).enumerate() {
                let x = a + w.as_f64();
                if x > best {
                    best = x;
                    arg = (d * c + i) as u32;
                }
            }
        }
        out[j] = best;
        bp[j] = arg;
    }
}

/// Fills a ring with `α_0 = one` in slot 0 and `zero` elsewhere.
fn init_ring<S: Semiring>(ring: &mut [f64], c: usize) {
    ring.fill(S::zero());
    ring[..c].fill(S::one());
}

/// `⊕_j α_L(j)` of one sequence with a `K·C` ring.
fn forward_sequence<S: ScanSemiring, E: Scalar>(e: &[E], len: usize, dm: Dims) -> f64 {
    let (k, c) = (dm.k, dm.c);
    let mut ring = vec![0.0; k * c];
    let mut tmp = vec![0.0; c];
    let mut scratch = StepScratch::new(dm);
    init_ring::<S>(&mut ring, c);
    for t in 1..=len {
        alpha_step::<S, E>(t, dm, e, &ring, |p| p % k, &mut scratch, &mut tmp);
        ring[(t % k) * c..][..c].copy_from_slice(&tmp);
    }
    tmp.copy_from_slice(&ring[(len % k) * c..][..c]);
    S::reduce(&mut tmp)
}

/// Viterbi decoding of one sequence.
fn viterbi_sequence<E: Scalar>(e: &[E], len: usize, dm: Dims) -> Decoded {
    let (k, c) = (dm.k, dm.c);
    let mut ring = vec![0.0; k * c];
    let mut tmp = vec![0.0; c];
    // bp[(t-1)·C + j] for t = 1..=len.
    let mut bp = vec![0u32; len * c];
    let mut scratch = StepScratch::new(dm);
    init_ring::<MaxSemiring>(&mut ring, c);
    for t in 1..=len {
        viterbi_step(
            t,
            dm,
            e,
            &ring,
            &mut scratch,
            &mut tmp,
            &mut bp[(t - 1) * c..t * c],
        );
        ring[(t % k) * c..][..c].copy_from_slice(&tmp);
    }
    let last = &ring[(len % k) * c..][..c];
    let mut score = NEG_INF;
    let mut j = 0;
    for (jj, &x) in last.iter().enumerate() {
        if x > score {
            score = x;
            j = jj;
        }
    }
    if score == NEG_INF {
        return Decoded {
            score,
            segments: Vec::new(),
        };
    }
    // Two walks back: count the segments, then fill them in order (no reallocation).
    let step = |t: usize, j: usize| {
        let packed = bp[(t - 1) * c + j] as usize;
        (packed / c + 1, packed % c)
    };
    let (mut n, mut t, mut jj) = (0, len, j);
    while t > 0 {
        let (d, i) = step(t, jj);
        n += 1;
        t -= d;
        jj = i;
    }
    let mut segments = vec![Segment::new(0, 0, 0); n];
    let mut t = len;
    for slot in segments.iter_mut().rev() {
        let (d, i) = step(t, j);
        *slot = Segment::new(t - d, d, j);
        t -= d;
        j = i;
    }
    Decoded { score, segments }
}

/// Where the edge marginals of one sequence go.
trait MarginalSink {
    /// The element type of the edges read.
    type E: Scalar;
    /// The sequence's edges `(T, K, C, C)`, row-major.
    fn edges(&self) -> &[Self::E];
    /// Stores `g · mu` (one start position's `(K, C, C)` marginals) for position `s`.
    fn emit(&mut self, s: usize, mu: &[f64], g: f64);
    /// Called once after the last `emit` (positions `len..T` were never emitted).
    fn finish(&mut self, len: usize);
}

/// Reads the input edges and writes the marginals to a separate output block.
struct Separate<'a, E> {
    input: &'a [E],
    out: &'a mut [f64],
    kcc: usize,
}

impl<E: Scalar> MarginalSink for Separate<'_, E> {
    type E = E;
    fn edges(&self) -> &[E] {
        self.input
    }
    fn emit(&mut self, s: usize, mu: &[f64], g: f64) {
        for (o, &m) in self.out[s * self.kcc..][..self.kcc].iter_mut().zip(mu) {
            *o = g * m;
        }
    }
    fn finish(&mut self, _len: usize) {}
}

/// Overwrites materialised `f64` edges with the marginals, one start position at a time.
struct InPlace<'a> {
    buf: &'a mut [f64],
    kcc: usize,
}

impl MarginalSink for InPlace<'_> {
    type E = f64;
    fn edges(&self) -> &[f64] {
        self.buf
    }
    fn emit(&mut self, s: usize, mu: &[f64], g: f64) {
        for (o, &m) in self.buf[s * self.kcc..][..self.kcc].iter_mut().zip(mu) {
            *o = g * m;
        }
    }
    fn finish(&mut self, len: usize) {
        self.buf[len * self.kcc..].fill(0.0);
    }
}

/// Forward with checkpoints, then the interval-by-interval backward of one sequence. Writes
/// `g · μ` through `sink` and the unscaled boundary marginals into `boundary[..len]`; returns
/// log Z (and emits nothing when it is `-inf`).
fn backward_sequence<M: MarginalSink>(
    sink: &mut M,
    len: usize,
    dm: Dims,
    delta: usize,
    g: f64,
    boundary: &mut [f64],
) -> f64 {
    let (k, c, kcc) = (dm.k, dm.c, dm.kcc);
    let n_cp = len.div_ceil(delta);

    // Forward, saving the ring at t = 0, Δ, 2Δ, … < len.
    let mut ring = vec![0.0; k * c];
    let mut tmp = vec![0.0; c];
    let mut scratch = StepScratch::new(dm);
    let mut checkpoints = vec![NEG_INF; n_cp * k * c];
    init_ring::<LogSemiring>(&mut ring, c);
    checkpoints[..k * c].copy_from_slice(&ring);
    {
        let e = sink.edges();
        for t in 1..=len {
            alpha_step::<LogSemiring, M::E>(t, dm, e, &ring, |p| p % k, &mut scratch, &mut tmp);
            ring[(t % k) * c..][..c].copy_from_slice(&tmp);
            if t % delta == 0 && t < len {
                checkpoints[(t / delta) * k * c..][..k * c].copy_from_slice(&ring);
            }
        }
    }
    tmp.copy_from_slice(&ring[(len % k) * c..][..c]);
    let log_z = LogSemiring::reduce(&mut tmp);
    if log_z == NEG_INF {
        return log_z;
    }
    drop(ring);

    // Backward.
    let mut beta = vec![NEG_INF; k * c];
    beta[(len % k) * c..][..c].fill(0.0);
    let mut interval = vec![NEG_INF; (delta + k) * c];
    let mut mu = vec![0.0; kcc];
    let mut mx = vec![0.0; c];
    let mut shift = vec![0.0; c];
    let mut acc = vec![0.0; c];
    let mut factor = vec![0.0; c];
    let mut new_beta = vec![0.0; c];
    for m in (0..n_cp).rev() {
        let base = m * delta;
        let end = (base + delta).min(len);
        // Row of position p in `interval`: p + K - 1 - base (p >= base + 1 - K).
        let row = |p: usize| p + k - 1 - base;
        let cp = &checkpoints[m * k * c..][..k * c];
        for p in base.saturating_sub(k - 1)..=base {
            interval[row(p) * c..][..c].copy_from_slice(&cp[(p % k) * c..][..c]);
        }
        {
            let e = sink.edges();
            for t in base + 1..end {
                let (src, rest) = interval.split_at_mut(row(t) * c);
                alpha_step::<LogSemiring, M::E>(t, dm, e, src, row, &mut scratch, &mut rest[..c]);
            }
        }
        for s in (base..end).rev() {
            let alpha_s = &interval[row(s) * c..][..c];
            let nd = k.min(len - s);
            {
                let slab = &sink.edges()[s * kcc..][..kcc];
                // Pass 1: per source label i, the max over (d, j) of edges + β_{s+d}(j).
                mx.fill(NEG_INF);
                for d in 1..=nd {
                    let b_row = &beta[((s + d) % k) * c..][..c];
                    for j in 0..c {
                        let bj = b_row[j];
                        if bj == NEG_INF {
                            continue;
                        }
                        let w = &slab[(d - 1) * dm.cc + j * c..][..c];
                        for i in 0..c {
                            let x = w[i].as_f64() + bj;
                            if x > mx[i] {
                                mx[i] = x;
                            }
                        }
                    }
                }
                // The shift keeps exp(x - shift) finite and exact zero where every term is
                // -inf (no `-inf - -inf`).
                for i in 0..c {
                    shift[i] = if mx[i] == NEG_INF { 0.0 } else { mx[i] };
                }
                // Pass 2: exp(x - max) into `mu`, summed into `acc`.
                mu.fill(0.0);
                acc.fill(0.0);
                for d in 1..=nd {
                    let b_row = &beta[((s + d) % k) * c..][..c];
                    for j in 0..c {
                        let bj = b_row[j];
                        if bj == NEG_INF {
                            continue;
                        }
                        let w = &slab[(d - 1) * dm.cc + j * c..][..c];
                        let out = &mut mu[(d - 1) * dm.cc + j * c..][..c];
                        for i in 0..c {
                            let v = exp_fast(w[i].as_f64() + bj - shift[i]);
                            out[i] = v;
                            acc[i] += v;
                        }
                    }
                }
            }
            // β_s(i) = max_i + ln Σ, and μ = exp(x - max_i) · exp(α_s(i) + max_i - log Z).
            for i in 0..c {
                if mx[i] == NEG_INF {
                    new_beta[i] = NEG_INF;
                    factor[i] = 0.0;
                } else {
                    new_beta[i] = mx[i] + acc[i].ln();
                    factor[i] = exp_fast(alpha_s[i] + mx[i] - log_z);
                }
            }
            let mut total = 0.0;
            for block in mu[..nd * dm.cc].chunks_exact_mut(c) {
                for i in 0..c {
                    block[i] *= factor[i];
                }
                for &v in block.iter() {
                    total += v;
                }
            }
            boundary[s] = total;
            // Slot s % K held β_{s+K}, read above for d = K; it is free now.
            beta[(s % k) * c..][..c].copy_from_slice(&new_beta);
            sink.emit(s, &mu, g);
        }
    }
    sink.finish(len);
    log_z
}

// ---------------------------------------------------------------------------------------------
// Batch drivers.
// ---------------------------------------------------------------------------------------------

impl ScanEngine {
    fn forward_edges<S: ScanSemiring, E: Scalar>(
        &self,
        edges: &ArrayView5<'_, E>,
        lengths: &[usize],
    ) -> Vec<f64> {
        let (bn, _, k, c, _) = edges.dim();
        let dm = Dims::new(k, c);
        map_indexed(self.parallelism, bn, |b| {
            let block = sequence_block(edges, b);
            forward_sequence::<S, E>(&block, lengths[b], dm)
        })
    }

    fn viterbi_edges<E: Scalar>(
        &self,
        edges: &ArrayView5<'_, E>,
        lengths: &[usize],
    ) -> Vec<Decoded> {
        let (bn, _, k, c, _) = edges.dim();
        let dm = Dims::new(k, c);
        map_indexed(self.parallelism, bn, |b| {
            let block = sequence_block(edges, b);
            viterbi_sequence::<E>(&block, lengths[b], dm)
        })
    }

    fn forward_any<S: ScanSemiring, F: Scalar>(&self, problem: &Problem<'_, F>) -> Vec<f64> {
        match problem {
            Problem::Edges(p) => self.forward_edges::<S, F>(p.edges(), p.lengths()),
            Problem::Structured(p) => {
                let e = materialize(p);
                self.forward_edges::<S, f64>(&e.view(), p.lengths())
            }
        }
    }
}

/// Splits a fresh zeroed buffer into per-sequence chunks behind (uncontended) locks, so the
/// batch can be filled through [`map_indexed`].
fn chunked(buf: &mut [f64], chunk: usize) -> Vec<Mutex<&mut [f64]>> {
    buf.chunks_mut(chunk).map(Mutex::new).collect()
}

impl<F: Scalar> Engine<F> for ScanEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Scan
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    /// Every input form (structured input through materialisation) and every operation.
    /// Refuses only shapes whose edge tensor has more elements than `usize` can count, or
    /// with `K·C > 2³²` (Viterbi backpointers are `u32`).
    fn check(&self, query: &Query) -> Result<()> {
        let sh = query.shape;
        let elems = (sh.batch as u128)
            * (sh.len as u128)
            * (sh.max_duration as u128)
            * (sh.labels as u128)
            * (sh.labels as u128);
        if elems > usize::MAX as u128 {
            return Err(Self::unsupported(format!(
                "an edge tensor of {elems} elements for {}",
                sh
            )));
        }
        if (sh.max_duration as u128) * (sh.labels as u128) > u32::MAX as u128 {
            return Err(Self::unsupported(format!(
                "K·C above 2^32 for {} (backpointers are u32)",
                sh
            )));
        }
        Ok(())
    }

    /// Working bytes beyond the inputs and the returned outputs, with `Δ` the checkpoint
    /// interval ([`ScanEngine::effective_checkpoint_interval`] of `T`, `K`),
    /// `n = ceil(T/Δ)` and `W` the sequences in flight (`B`, or 1 when sequential):
    ///
    /// - structured input: `+ B·T·K·C²·8` (the materialised edges);
    /// - `Forward`: `+ W·((2·K·C + C)·8 + 16·K)` (ring, one row, terms, per-duration offsets);
    /// - `Viterbi`: `+ W·((2·K·C + C)·8 + 16·K + T·C·4)` (the same plus `u32` backpointers);
    /// - `Backward`: `+ W·((n·K·C + (Δ+K)·C + 3·K·C + 6·C + K·C²)·8 + 16·K + 128)`
    ///   (checkpoints, interval rows, α ring, β ring, terms, per-label scratch, one position's
    ///   marginals, offsets, chunk handles); structured input also
    ///   `+ (2·B·T·C + (T+2)·C)·8` for [`pull_back`]'s scratch;
    /// - with [`Parallelism::Rayon`]: `+ 4096` for rayon's per-call bookkeeping (the one-time
    ///   start of its global thread pool is not counted).
    ///
    /// Not counted: for edge input whose per-sequence block `(T, K, C, C)` is not contiguous in
    /// row-major order (a transposed or strided view), each sequence in flight is first copied
    /// to a contiguous block of `T·K·C²·dtype_bytes`.
    fn memory_required(&self, query: &Query) -> u64 {
        let sh = query.shape;
        let (b, t, k, c) = (
            sh.batch as u64,
            sh.len as u64,
            sh.max_duration as u64,
            sh.labels as u64,
        );
        let w = self.in_flight(b);
        let kc = k.saturating_mul(c);
        let mut total = 0u64;
        let structured = matches!(query.form, Form::Structured { .. });
        if structured {
            total = total.saturating_add(edge_tensor_bytes(sh));
        }
        let offsets = k.saturating_mul(16);
        let ring_bytes = kc
            .saturating_mul(2)
            .saturating_add(c)
            .saturating_mul(F64_BYTES)
            .saturating_add(offsets);
        let per_sequence = match query.op {
            Op::Forward(_) => ring_bytes,
            Op::Viterbi => ring_bytes.saturating_add(t.saturating_mul(c).saturating_mul(4)),
            Op::Backward => {
                let delta = self.effective_checkpoint_interval(sh.len, sh.max_duration) as u64;
                let n_cp = t.div_ceil(delta.max(1));
                let values = n_cp
                    .saturating_mul(kc)
                    .saturating_add(delta.saturating_add(k).saturating_mul(c))
                    .saturating_add(kc.saturating_mul(3))
                    .saturating_add(c.saturating_mul(6))
                    .saturating_add(kc.saturating_mul(c));
                if structured {
                    // pull_back: two (B, T, C) boundary buffers (dropped when those inputs are
                    // absent) and a (T+1, C) difference array plus one row.
                    let pull = b
                        .saturating_mul(t)
                        .saturating_mul(c)
                        .saturating_mul(2)
                        .saturating_add(t.saturating_add(2).saturating_mul(c))
                        .saturating_mul(F64_BYTES);
                    total = total.saturating_add(pull);
                }
                values
                    .saturating_mul(F64_BYTES)
                    .saturating_add(offsets)
                    .saturating_add(PER_SEQUENCE_OVERHEAD)
            }
        };
        if self.parallelism != Parallelism::Sequential {
            total = total.saturating_add(RAYON_SLACK);
        }
        total.saturating_add(w.saturating_mul(per_sequence))
    }

    fn forward(&self, problem: &Problem<'_, F>, semiring: SemiringKind) -> Result<Vec<f64>> {
        Engine::<F>::check(self, &Query::of(problem, Op::Forward(semiring)))?;
        Ok(match semiring {
            SemiringKind::Log => self.forward_any::<LogSemiring, F>(problem),
            SemiringKind::Max => self.forward_any::<MaxSemiring, F>(problem),
        })
    }

    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        Engine::<F>::check(self, &Query::of(problem, Op::Backward))?;
        let sh = problem.shape();
        check_upstream(upstream, sh.batch)?;
        let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let dm = Dims::new(k, c);
        let delta = self.effective_checkpoint_interval(t, k);
        let lengths = problem.lengths();
        let mut boundary = vec![0.0; bn * t];
        let block = t * dm.kcc;
        let (log_z, grad) = match problem {
            Problem::Edges(p) => {
                let mut out = vec![0.0; bn * block];
                let log_z = {
                    let outs = chunked(&mut out, block);
                    let bms = chunked(&mut boundary, t);
                    map_indexed(self.parallelism, bn, |b| {
                        let input = sequence_block(p.edges(), b);
                        let mut out = outs[b].lock().unwrap_or_else(|e| e.into_inner());
                        let mut bm = bms[b].lock().unwrap_or_else(|e| e.into_inner());
                        let mut sink = Separate {
                            input: &input,
                            out: &mut out,
                            kcc: dm.kcc,
                        };
                        backward_sequence(&mut sink, lengths[b], dm, delta, upstream[b], &mut bm)
                    })
                };
                check_feasible(&log_z)?;
                let edges = Array5::from_shape_vec((bn, t, k, c, c), out)
                    .expect("the buffer has B·T·K·C² elements");
                let grad = Gradients {
                    edges: Some(edges),
                    ..Gradients::default()
                };
                (log_z, grad)
            }
            Problem::Structured(p) => {
                let mut e = materialize(p);
                let log_z = {
                    let buf = e
                        .as_slice_mut()
                        .expect("a freshly materialised tensor is contiguous");
                    let blocks = chunked(buf, block);
                    let bms = chunked(&mut boundary, t);
                    map_indexed(self.parallelism, bn, |b| {
                        let mut buf = blocks[b].lock().unwrap_or_else(|e| e.into_inner());
                        let mut bm = bms[b].lock().unwrap_or_else(|e| e.into_inner());
                        let mut sink = InPlace {
                            buf: &mut buf,
                            kcc: dm.kcc,
                        };
                        backward_sequence(&mut sink, lengths[b], dm, delta, upstream[b], &mut bm)
                    })
                };
                check_feasible(&log_z)?;
                (log_z, pull_back(p, e.view()))
            }
        };
        let boundary_marginals =
            Array2::from_shape_vec((bn, t), boundary).expect("the buffer has B·T elements");
        Ok(Backward {
            log_z,
            grad,
            boundary_marginals,
        })
    }

    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        Engine::<F>::check(self, &Query::of(problem, Op::Viterbi))?;
        Ok(match problem {
            Problem::Edges(p) => self.viterbi_edges::<F>(p.edges(), p.lengths()),
            Problem::Structured(p) => {
                let e = materialize(p);
                self.viterbi_edges::<f64>(&e.view(), p.lengths())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array, ArrayD, Ix5, IxDyn, Slice};
    use rand::Rng;
    use semicrf_core::reference::{self, Reference};
    use semicrf_core::testing::{GenSpec, random_problem, random_spec, rng, spec7_cases};
    use semicrf_core::{EdgePotentials, OwnedPotentials, Potentials, gold_score, gold_score_edges};

    const TOL64: f64 = 1e-10;
    const TOL32: f64 = 1e-5;

    fn sequential() -> ScanEngine {
        ScanEngine::new().parallelism(Parallelism::Sequential)
    }

    /// `|got - want| <= tol · max(1, |want|)`, with equal infinities equal.
    fn close(got: f64, want: f64, tol: f64) -> bool {
        got == want || (got - want).abs() <= tol * want.abs().max(1.0)
    }

    fn assert_all_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(close(g, w, tol), "{what}[{n}]: got {g}, want {w}");
        }
    }

    fn flat<D: ndarray::Dimension>(a: &Array<f64, D>) -> Vec<f64> {
        a.iter().copied().collect()
    }

    /// Seeded random problems spanning SPEC §7, plus its named cases.
    fn cases() -> Vec<(String, OwnedPotentials<f64>)> {
        let mut v: Vec<(String, OwnedPotentials<f64>)> = (0..150)
            .map(|seed| {
                let spec = random_spec(seed);
                (format!("random seed {seed}"), random_problem(seed, &spec))
            })
            .collect();
        for (n, (name, spec)) in spec7_cases().into_iter().enumerate() {
            v.push((name.to_string(), random_problem(1000 + n as u64, &spec)));
        }
        v
    }

    /// A random edge tensor with some `-inf` entries (every source of the virtual start is
    /// live, unlike materialised edges) and ragged lengths.
    fn random_edges(
        seed: u64,
        b: usize,
        t: usize,
        k: usize,
        c: usize,
    ) -> (ArrayD<f64>, Vec<usize>) {
        let mut r = rng(seed);
        let e = Array::from_shape_fn(IxDyn(&[b, t, k, c, c]), |_| {
            if r.random_bool(0.2) {
                f64::NEG_INFINITY
            } else {
                r.random_range(-2.0..=2.0)
            }
        });
        let lengths = (0..b)
            .map(|i| if i == 0 { t } else { r.random_range(1..=t) })
            .collect();
        (e, lengths)
    }

    fn all_engines() -> Vec<ScanEngine> {
        vec![
            sequential(),
            ScanEngine::new(),
            sequential().checkpoint_interval(Some(1)),
            sequential().checkpoint_interval(Some(2)),
            sequential().checkpoint_interval(Some(7)),
        ]
    }

    fn check_forward<F: Scalar>(name: &str, p: &Problem<'_, F>, tol: f64) {
        for kind in [SemiringKind::Log, SemiringKind::Max] {
            let want = Engine::<F>::forward(&Reference, p, kind).unwrap();
            let got = Engine::<F>::forward(&sequential(), p, kind).unwrap();
            assert_all_close(&format!("{name} {kind:?}"), &got, &want, tol);
        }
    }

    #[test]
    fn the_log_and_max_reductions_guard_all_neg_inf_and_match_the_semiring_sums() {
        let ninf = f64::NEG_INFINITY;
        assert_eq!(LogSemiring::reduce(&mut []), ninf);
        assert_eq!(LogSemiring::reduce(&mut [ninf; 7]), ninf);
        assert_eq!(MaxSemiring::reduce(&mut [ninf; 5]), ninf);
        let xs = [3.0, ninf, -1e4, 2.5, 1e3, 0.0, -7.0, ninf, 999.0];
        for n in 0..=xs.len() {
            let want = LogSemiring::sum(&xs[..n]);
            assert!(close(LogSemiring::reduce(&mut { xs }[..n]), want, 1e-15));
            let want = MaxSemiring::sum(&xs[..n]);
            assert_eq!(MaxSemiring::reduce(&mut { xs }[..n]), want);
        }
    }

    #[test]
    fn forward_log_and_max_match_the_reference_on_structured_and_edge_input() {
        for (name, owned) in cases() {
            let p = owned.view().unwrap();
            check_forward(&name, &Problem::Structured(p.clone()), TOL64);
            let e = materialize(&p);
            let ep = EdgePotentials::new(e.view(), p.lengths()).unwrap();
            check_forward(&format!("{name} as edges"), &Problem::Edges(ep), TOL64);
        }
        for seed in 0..40 {
            let (b, t, k, c) = (
                1 + seed as usize % 3,
                1 + seed as usize % 7,
                1 + seed as usize % 4,
                1 + seed as usize % 4,
            );
            let (e, lengths) = random_edges(seed, b, t, k, c);
            let ep = EdgePotentials::new(e.view(), &lengths).unwrap();
            check_forward(&format!("random edges {seed}"), &Problem::Edges(ep), TOL64);
        }
    }

    #[test]
    fn forward_log_matches_brute_force_enumeration() {
        for seed in 0..40 {
            let owned = random_problem(seed, &random_spec(seed));
            let p = owned.view().unwrap();
            let got = Engine::<f64>::forward(&sequential(), &p.clone().into(), SemiringKind::Log)
                .unwrap();
            for (b, &z) in got.iter().enumerate() {
                let bf = reference::brute_force(&p, b).unwrap();
                assert!(
                    close(z, bf.log_z, TOL64),
                    "seed {seed} b {b}: {z} vs {}",
                    bf.log_z
                );
            }
        }
    }

    #[test]
    fn f32_inputs_match_the_f64_oracle_on_the_cast_values() {
        for (name, owned) in cases() {
            let owned32 = owned.cast::<f32>();
            let p32 = owned32.view().unwrap();
            check_forward(&name, &Problem::Structured(p32.clone()), TOL32);
            // Edge input read in f32.
            let e32 = materialize(&p32).mapv(|x| x as f32);
            let ep = EdgePotentials::new(e32.view(), p32.lengths()).unwrap();
            let ep: Problem<'_, f32> = ep.into();
            check_forward(&format!("{name} f32 edges"), &ep, TOL32);
            match (
                Engine::<f32>::backward(&Reference, &ep, &vec![1.0; owned.lengths.len()]),
                Engine::<f32>::backward(&sequential(), &ep, &vec![1.0; owned.lengths.len()]),
            ) {
                (Ok(want), Ok(got)) => {
                    assert_all_close(&name, &got.log_z, &want.log_z, TOL32);
                    let (g, w) = (got.grad.edges.unwrap(), want.grad.edges.unwrap());
                    assert_all_close(&format!("{name} f32 grad"), &flat(&g), &flat(&w), TOL32);
                }
                (Err(want), Err(got)) => assert_eq!(got, want, "{name}"),
                (want, got) => panic!("{name}: {want:?} vs {got:?}"),
            }
        }
    }

    fn upstream_for(n: usize, seed: u64) -> Vec<f64> {
        let mut r = rng(seed);
        (0..n).map(|_| r.random_range(-2.0..=2.0)).collect()
    }

    fn compare_gradients(name: &str, got: &Gradients, want: &Gradients) {
        let pairs = got
            .fields()
            .into_iter()
            .zip(want.fields())
            .map(|((field, g), (_, w))| {
                let flat =
                    |a: ndarray::ArrayViewD<'_, f64>| a.iter().copied().collect::<Vec<f64>>();
                (field, g.map(flat), w.map(flat))
            });
        for (field, g, w) in pairs {
            match (g, w) {
                (Some(g), Some(w)) => assert_all_close(&format!("{name} {field}"), &g, &w, TOL64),
                (None, None) => {}
                (g, w) => panic!(
                    "{name} {field}: presence differs ({} vs {})",
                    g.is_some(),
                    w.is_some()
                ),
            }
        }
    }

    fn check_backward(name: &str, p: &Problem<'_, f64>, engine: &ScanEngine, seed: u64) {
        let up = upstream_for(p.shape().batch, seed);
        match (
            Engine::<f64>::backward(&Reference, p, &up),
            Engine::<f64>::backward(engine, p, &up),
        ) {
            (Ok(want), Ok(got)) => {
                assert_all_close(&format!("{name} log Z"), &got.log_z, &want.log_z, TOL64);
                compare_gradients(name, &got.grad, &want.grad);
                assert_all_close(
                    &format!("{name} boundary"),
                    &flat(&got.boundary_marginals),
                    &flat(&want.boundary_marginals),
                    TOL64,
                );
            }
            (Err(want), Err(got)) => assert_eq!(got, want, "{name}"),
            (want, got) => panic!("{name}: reference {want:?}, scan {got:?}"),
        }
    }

    #[test]
    fn gradients_and_boundary_marginals_match_the_reference() {
        for (n, (name, owned)) in cases().into_iter().enumerate() {
            let p = owned.view().unwrap();
            let engine = &all_engines()[n % 5];
            check_backward(&name, &Problem::Structured(p.clone()), engine, n as u64);
            let e = materialize(&p);
            let ep = EdgePotentials::new(e.view(), p.lengths()).unwrap();
            check_backward(
                &format!("{name} as edges"),
                &Problem::Edges(ep),
                engine,
                n as u64,
            );
        }
        for seed in 0..40 {
            let u = seed as usize;
            let (e, lengths) = random_edges(seed, 1 + u % 3, 1 + u % 8, 1 + u % 4, 1 + u % 3);
            let ep = EdgePotentials::new(e.view(), &lengths).unwrap();
            let engine = &all_engines()[u % 5];
            check_backward(
                &format!("random edges {seed}"),
                &Problem::Edges(ep),
                engine,
                seed,
            );
        }
    }

    #[test]
    fn results_do_not_depend_on_the_checkpoint_interval() {
        let spec = GenSpec {
            ragged: true,
            boundaries: true,
            start: true,
            end: true,
            ..GenSpec::new(3, 23, 4, 3)
        };
        let owned = random_problem(11, &spec);
        let p: Problem<'_, f64> = owned.view().unwrap().into();
        let auto = sequential();
        assert_eq!(auto.effective_checkpoint_interval(23, 4), 10);
        let base = Engine::<f64>::backward(&auto, &p, &[1.0, -0.5, 2.0]).unwrap();
        for delta in [1, 2, 4, 7, 22, 23, 24, 100] {
            let e = sequential().checkpoint_interval(Some(delta));
            let got = Engine::<f64>::backward(&e, &p, &[1.0, -0.5, 2.0]).unwrap();
            assert_eq!(got, base, "Δ = {delta}");
        }
    }

    fn check_viterbi<F: Scalar>(name: &str, p: &Problem<'_, F>, tol: f64) {
        let want = Engine::<F>::viterbi(&Reference, p).unwrap();
        let got = Engine::<F>::viterbi(&sequential(), p).unwrap();
        let scores = Engine::<F>::forward(&sequential(), p, SemiringKind::Max).unwrap();
        for (b, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                close(g.score, w.score, tol),
                "{name} b {b}: {} vs {}",
                g.score,
                w.score
            );
            assert_eq!(g.score, scores[b], "{name}: viterbi and max forward agree");
            if F::BYTES == 8 {
                assert_eq!(g.segments, w.segments, "{name} b {b}: tie rules");
            }
            if g.score == f64::NEG_INFINITY {
                assert!(g.segments.is_empty());
                continue;
            }
            let gold = match p {
                Problem::Structured(p) => gold_score(p, b, &g.segments).unwrap(),
                Problem::Edges(p) => gold_score_edges::<MaxSemiring, F>(p, b, &g.segments).unwrap(),
            };
            assert!(
                close(gold, g.score, TOL64),
                "{name} b {b}: gold {gold} vs {}",
                g.score
            );
        }
    }

    #[test]
    fn viterbi_matches_the_reference_and_its_gold_score_equals_its_score() {
        for (name, owned) in cases() {
            let p = owned.view().unwrap();
            check_viterbi(&name, &Problem::Structured(p.clone()), TOL64);
            let e = materialize(&p);
            let ep = EdgePotentials::new(e.view(), p.lengths()).unwrap();
            check_viterbi(&format!("{name} as edges"), &Problem::Edges(ep), TOL64);
            let owned32 = owned.cast::<f32>();
            let p32 = owned32.view().unwrap();
            check_viterbi(&format!("{name} f32"), &Problem::Structured(p32), TOL32);
        }
        for seed in 0..40 {
            let u = seed as usize;
            let (e, lengths) = random_edges(seed, 1 + u % 3, 1 + u % 8, 1 + u % 4, 1 + u % 3);
            let ep = EdgePotentials::new(e.view(), &lengths).unwrap();
            check_viterbi(&format!("random edges {seed}"), &Problem::Edges(ep), TOL64);
        }
    }

    #[test]
    fn ties_break_to_the_smaller_duration_then_the_smaller_previous_label() {
        // All scores equal: every segmentation ties; the rule picks duration 1 and, for the
        // final label and every previous label, index 0.
        let e = Array5::<f64>::zeros((1, 5, 3, 2, 2));
        let lengths = [5];
        let p: Problem<'_, f64> = EdgePotentials::new(e.view(), &lengths).unwrap().into();
        let d = Engine::<f64>::viterbi(&sequential(), &p).unwrap();
        let want: Vec<Segment> = (0..5).map(|s| Segment::new(s, 1, 0)).collect();
        assert_eq!(d[0].segments, want);
        // Make label 1 strictly better at the end only through a duration-2 segment that ties
        // with two duration-1 segments: the shorter one wins.
        let mut e = Array5::<f64>::from_elem((1, 2, 2, 2, 2), f64::NEG_INFINITY);
        e[[0, 0, 0, 1, 0]] = 1.0; // (0, 1, label 1)
        e[[0, 1, 0, 1, 1]] = 1.0; // (1, 1, label 1) after label 1
        e[[0, 0, 1, 1, 1]] = 2.0; // (0, 2, label 1)
        let lengths = [2];
        let p: Problem<'_, f64> = EdgePotentials::new(e.view(), &lengths).unwrap().into();
        let d = Engine::<f64>::viterbi(&sequential(), &p).unwrap();
        assert_eq!(d[0].score, 2.0);
        assert_eq!(
            d[0].segments,
            [Segment::new(0, 1, 1), Segment::new(1, 1, 1)]
        );
    }

    #[test]
    fn infeasible_sequences_decode_to_neg_inf_and_backward_names_them() {
        let mut e = Array5::<f64>::zeros((3, 4, 2, 2, 2));
        e.index_axis_mut(Axis(0), 1).fill(f64::NEG_INFINITY);
        let lengths = [4, 3, 2];
        let p: Problem<'_, f64> = EdgePotentials::new(e.view(), &lengths).unwrap().into();
        let engine = ScanEngine::new();
        let z = Engine::<f64>::forward(&engine, &p, SemiringKind::Log).unwrap();
        assert_eq!(z[1], f64::NEG_INFINITY);
        assert!(z[0].is_finite() && z[2].is_finite());
        let d = Engine::<f64>::viterbi(&engine, &p).unwrap();
        assert_eq!(d[1].score, f64::NEG_INFINITY);
        assert!(d[1].segments.is_empty());
        assert_eq!(
            Engine::<f64>::backward(&engine, &p, &[1.0; 3]).unwrap_err(),
            Error::Infeasible { sequence: 1 }
        );
    }

    #[test]
    fn malformed_upstream_gradients_are_typed_errors() {
        let e = Array5::<f64>::zeros((2, 3, 2, 2, 2));
        let lengths = [3, 2];
        let p: Problem<'_, f64> = EdgePotentials::new(e.view(), &lengths).unwrap().into();
        let engine = ScanEngine::new();
        assert!(matches!(
            Engine::<f64>::backward(&engine, &p, &[1.0]),
            Err(Error::Upstream { .. })
        ));
        assert!(matches!(
            Engine::<f64>::backward(&engine, &p, &[1.0, f64::NAN]),
            Err(Error::Upstream { .. })
        ));
    }

    fn single_sequence(owned: &OwnedPotentials<f64>, b: usize) -> OwnedPotentials<f64> {
        let one = |a: &ArrayD<f64>| a.slice_axis(Axis(0), Slice::from(b..b + 1)).to_owned();
        OwnedPotentials {
            scores: one(&owned.scores),
            begin_boundary: owned.begin_boundary.as_ref().map(one),
            end_boundary: owned.end_boundary.as_ref().map(one),
            lengths: vec![owned.lengths[b]],
            ..owned.clone()
        }
    }

    #[test]
    fn sequential_and_rayon_agree_bitwise_and_a_batch_equals_its_sequences_one_at_a_time() {
        let spec = GenSpec {
            ragged: true,
            boundaries: true,
            start: true,
            end: true,
            forbid_transitions: 0.2,
            ..GenSpec::new(6, 30, 5, 4)
        };
        let owned = random_problem(3, &spec);
        let p: Problem<'_, f64> = owned.view().unwrap().into();
        let up = upstream_for(6, 5);
        let seq = sequential();
        let par = ScanEngine::new().parallelism(Parallelism::Rayon);
        for kind in [SemiringKind::Log, SemiringKind::Max] {
            assert_eq!(
                Engine::<f64>::forward(&seq, &p, kind).unwrap(),
                Engine::<f64>::forward(&par, &p, kind).unwrap()
            );
        }
        assert_eq!(
            Engine::<f64>::viterbi(&seq, &p).unwrap(),
            Engine::<f64>::viterbi(&par, &p).unwrap()
        );
        let batched = Engine::<f64>::backward(&par, &p, &up).unwrap();
        assert_eq!(Engine::<f64>::backward(&seq, &p, &up).unwrap(), batched);
        let z = Engine::<f64>::forward(&par, &p, SemiringKind::Log).unwrap();
        let best = Engine::<f64>::viterbi(&par, &p).unwrap();

        let e = materialize(&owned.view().unwrap());
        let ep: Problem<'_, f64> = EdgePotentials::new(e.view(), &owned.lengths)
            .unwrap()
            .into();
        let batched_edges = Engine::<f64>::backward(&par, &ep, &up).unwrap();
        let all_grads = batched_edges.grad.edges.as_ref().unwrap();
        for b in 0..6 {
            let single = single_sequence(&owned, b);
            let sp: Problem<'_, f64> = single.view().unwrap().into();
            assert_eq!(
                Engine::<f64>::forward(&seq, &sp, SemiringKind::Log).unwrap(),
                [z[b]]
            );
            assert_eq!(Engine::<f64>::viterbi(&seq, &sp).unwrap()[0], best[b]);
            let one = Engine::<f64>::backward(&seq, &sp, &up[b..=b]).unwrap();
            assert_eq!(one.log_z, [batched.log_z[b]]);
            assert_eq!(
                one.boundary_marginals.row(0),
                batched.boundary_marginals.row(b)
            );
            assert_eq!(
                one.grad.scores.unwrap().index_axis(Axis(0), 0),
                batched.grad.scores.as_ref().unwrap().index_axis(Axis(0), b)
            );
            let eb = e.slice_axis(Axis(0), Slice::from(b..b + 1));
            let lb = [owned.lengths[b]];
            let epb: Problem<'_, f64> = EdgePotentials::new(eb, &lb).unwrap().into();
            let one = Engine::<f64>::backward(&seq, &epb, &up[b..=b]).unwrap();
            assert_eq!(
                one.grad.edges.unwrap().index_axis(Axis(0), 0),
                all_grads.index_axis(Axis(0), b)
            );
        }
    }

    #[test]
    fn strided_edge_views_give_the_same_results_as_contiguous_ones() {
        let (e, lengths) = random_edges(21, 2, 9, 3, 3);
        let e: Array5<f64> = e.into_dimensionality::<Ix5>().unwrap();
        // Store the tensor with its label axes swapped, then view it back in the logical
        // layout: same values, non-contiguous memory.
        let stored = e
            .view()
            .permuted_axes([0, 1, 2, 4, 3])
            .as_standard_layout()
            .into_owned();
        let strided = stored.view().permuted_axes([0, 1, 2, 4, 3]);
        assert!(strided.as_slice().is_none());
        let a: Problem<'_, f64> = EdgePotentials::new(e.view(), &lengths).unwrap().into();
        let b: Problem<'_, f64> = EdgePotentials::new(strided, &lengths).unwrap().into();
        let engine = ScanEngine::new();
        assert_eq!(
            Engine::<f64>::forward(&engine, &a, SemiringKind::Log).unwrap(),
            Engine::<f64>::forward(&engine, &b, SemiringKind::Log).unwrap()
        );
        assert_eq!(
            Engine::<f64>::viterbi(&engine, &a).unwrap(),
            Engine::<f64>::viterbi(&engine, &b).unwrap()
        );
        assert_eq!(
            Engine::<f64>::backward(&engine, &a, &[1.0, 1.0]).unwrap(),
            Engine::<f64>::backward(&engine, &b, &[1.0, 1.0]).unwrap()
        );
    }

    #[test]
    fn long_sequences_stay_finite_and_marginals_are_probabilities() {
        let spec = GenSpec {
            scale: 5.0,
            ..GenSpec::new(1, 20_000, 6, 3)
        };
        let owned = random_problem(9, &spec).cast::<f32>();
        let p: Problem<'_, f32> = owned.view().unwrap().into();
        let engine = ScanEngine::new();
        let out = Engine::<f32>::backward(&engine, &p, &[1.0]).unwrap();
        assert!(out.log_z[0].is_finite());
        // Every position is covered by exactly one segment.
        let pos = out.grad.scores.unwrap();
        for t in 0..20_000 {
            let s: f64 = pos.index_axis(Axis(0), 0).row(t).sum();
            assert!((s - 1.0).abs() < 1e-9, "position {t}: {s}");
        }
        // A segment starts at 0 for sure; the boundary marginals are probabilities.
        let bm = out.boundary_marginals.row(0);
        assert!((bm[0] - 1.0).abs() < 1e-9);
        assert!(bm.iter().all(|&x| (-1e-12..=1.0 + 1e-9).contains(&x)));
        let d = Engine::<f32>::viterbi(&engine, &p).unwrap();
        assert!(d[0].score.is_finite() && d[0].score <= out.log_z[0]);
    }

    #[test]
    fn every_form_and_operation_is_supported_and_memory_counts_the_materialised_edges() {
        let shape = semicrf_core::Shape::new(4, 1000, 20, 8);
        let engine = ScanEngine::new();
        let ops = [
            Op::Forward(SemiringKind::Log),
            Op::Forward(SemiringKind::Max),
            Op::Viterbi,
            Op::Backward,
        ];
        let forms = [
            Form::Edges,
            Form::Structured {
                duration_dependent_transition: false,
            },
            Form::Structured {
                duration_dependent_transition: true,
            },
        ];
        for form in forms {
            for op in ops {
                let q = Query {
                    shape,
                    form,
                    op,
                    dtype_bytes: 4,
                };
                Engine::<f32>::check(&engine, &q).unwrap();
                let m = Engine::<f32>::memory_required(&engine, &q);
                let edges = edge_tensor_bytes(shape);
                if matches!(form, Form::Edges) {
                    assert!(m < edges / 10, "{form:?} {op:?}: {m}");
                } else {
                    assert!(m > edges, "{form:?} {op:?}: {m}");
                }
                let fwd = Query {
                    op: Op::Forward(SemiringKind::Log),
                    ..q
                };
                assert!(m >= Engine::<f32>::memory_required(&engine, &fwd));
            }
        }
        // Δ = sqrt(1000·20) ≈ 141.4 → 142: ceil(1000/142) = 8 checkpoints of K·C.
        assert_eq!(engine.effective_checkpoint_interval(1000, 20), 142);
        assert_eq!(engine.effective_checkpoint_interval(3, 20), 20);
        let q = Query {
            shape,
            form: Form::Edges,
            op: Op::Backward,
            dtype_bytes: 8,
        };
        let per = (8 * 160 + 162 * 8 + 3 * 160 + 6 * 8 + 20 * 64) * 8 + 16 * 20 + 128;
        assert_eq!(Engine::<f64>::memory_required(&engine, &q), 4 * per + 4096);
        assert_eq!(
            Engine::<f64>::memory_required(&sequential(), &q),
            per,
            "one sequence in flight when sequential"
        );
    }

    #[test]
    fn non_contiguous_structured_inputs_work_through_materialisation() {
        // A transposed scores view exercises materialisation of non-contiguous structured input.
        let owned = random_problem(5, &GenSpec::new(2, 6, 3, 3));
        let scores_t = owned
            .scores
            .view()
            .permuted_axes(IxDyn(&[0, 2, 1]))
            .as_standard_layout()
            .into_owned();
        let scores = scores_t.view().permuted_axes(IxDyn(&[0, 2, 1]));
        assert!(scores.as_slice().is_none());
        let p = Potentials::builder(scores, &owned.lengths, 3)
            .transition(owned.transition.as_ref().unwrap().view())
            .duration(owned.duration.as_ref().unwrap().view())
            .build()
            .unwrap();
        check_forward("transposed scores", &Problem::Structured(p.clone()), TOL64);
        check_backward(
            "transposed scores",
            &Problem::Structured(p),
            &sequential(),
            1,
        );
    }
}
