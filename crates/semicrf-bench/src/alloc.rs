//! A counting global allocator: live heap bytes and their peak, for peak-memory measurements.
//!
//! Install it in a binary, bench or test with
//!
//! ```
//! #[global_allocator]
//! static ALLOC: semicrf_bench::alloc::CountingAlloc = semicrf_bench::alloc::CountingAlloc;
//!
//! fn main() {
//!     let (v, m) = semicrf_bench::alloc::measure(|| vec![0u8; 4096]);
//!     assert!(m.peak >= 4096 && m.retained >= 4096);
//!     drop(v);
//! }
//! ```
//!
//! and wrap the call to measure in [`measure`]. Counting costs two relaxed atomic operations per
//! allocation and per free; the allocation itself is the system allocator's.
//!
//! [`live_bytes`] counts every thread. [`measure`] counts only the threads that run the
//! measured call: the calling thread and the workers of rayon's global pool (where the CPU
//! engines run their parallel parts), each marked with a thread-local flag for the duration.
//! Allocations of other threads (a test harness spawning its next test, a panic being
//! printed) are not counted, and neither would be those of threads an engine spawned itself.
//! Measurements are serialised with a lock.
//!
//! A `realloc` is counted as its net size change; a system allocator that moves the block
//! briefly holds both (not counted). Bytes are the sizes asked for, not the allocator's
//! rounded-up block sizes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// The counting allocator: forwards to [`System`] and keeps the live and peak byte counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static MEASURING: Mutex<()> = Mutex::new(());
/// Live bytes of the tracked threads (allocated minus freed by them; a block allocated by one
/// thread and freed by another moves each one's count).
static TRACKED_LIVE: AtomicI64 = AtomicI64::new(0);
static TRACKED_PEAK: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static TRACKED: Cell<bool> = const { Cell::new(false) };
}

#[inline]
fn tracked() -> bool {
    // `try_with`: false while the thread's locals are being torn down.
    TRACKED.try_with(Cell::get).unwrap_or(false)
}

#[inline]
fn grow(n: usize) {
    LIVE.fetch_add(n, Ordering::Relaxed);
    if tracked() {
        let now = TRACKED_LIVE.fetch_add(n as i64, Ordering::Relaxed) + n as i64;
        TRACKED_PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

#[inline]
fn shrink(n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
    if tracked() {
        TRACKED_LIVE.fetch_sub(n as i64, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards its arguments unchanged to `System`, which implements
// `GlobalAlloc` correctly; the bookkeeping only touches atomics and a const-initialised
// thread-local `Cell<bool>` (no allocation, no destructor, no panic), so the contract
// (returned pointers, layouts, no unwinding) is exactly `System`'s.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grow(layout.size());
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator (hence by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was returned by this allocator (hence by `System`) with `layout`, and
        // the caller upholds the rest of `GlobalAlloc::realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let old = layout.size();
            if new_size >= old {
                grow(new_size - old);
            } else {
                shrink(old - new_size);
            }
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }
}

/// Bytes live on the heap now (as counted since the process started).
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// Whether [`CountingAlloc`] is the global allocator of this process (an allocation moves the
/// counters).
pub fn installed() -> bool {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let v = std::hint::black_box(vec![0u8; 64]);
    drop(v);
    ALLOCATIONS.load(Ordering::SeqCst) != before
}

/// What [`measure`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// The highest live heap of the tracked threads during the call, minus their live heap
    /// before it: the call's peak allocation, including whatever it returned.
    pub peak: u64,
    /// Tracked live heap after the call minus before it (what the returned value and any leak
    /// or cache still hold; negative if the call freed memory that was live before).
    pub retained: i64,
    /// Number of allocations (and reallocations) during the call, on every thread.
    pub allocations: u64,
}

/// Runs `f`, returning its result and the heap it used, measured by [`CountingAlloc`] (zeros if
/// it is not installed) on the calling thread and rayon's global pool workers.
///
/// Measurements are serialised with a process-wide lock. Warm up thread pools before measuring
/// (their first use allocates their bookkeeping): see [`warm_up_threads`].
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Measured) {
    let _guard = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    set_tracking(true);
    let base = TRACKED_LIVE.load(Ordering::SeqCst);
    let allocs = ALLOCATIONS.load(Ordering::SeqCst);
    TRACKED_PEAK.store(base, Ordering::SeqCst);
    let r = f();
    let peak = TRACKED_PEAK.load(Ordering::SeqCst);
    let after = TRACKED_LIVE.load(Ordering::SeqCst);
    let allocations = ALLOCATIONS.load(Ordering::SeqCst) - allocs;
    set_tracking(false);
    let m = Measured {
        peak: (peak - base).max(0) as u64,
        retained: after - base,
        allocations,
    };
    (r, m)
}

/// Marks (or unmarks) the calling thread and every worker of rayon's global pool as tracked.
fn set_tracking(on: bool) {
    TRACKED.with(|t| t.set(on));
    rayon::broadcast(|_| TRACKED.with(|t| t.set(on)));
}

/// Starts rayon's global pool and lets each worker run once, so that the pool's own
/// allocations happen before any measurement.
pub fn warm_up_threads() {
    use rayon::prelude::*;
    let n = rayon::current_num_threads().max(1) * 4;
    let v: Vec<usize> = (0..n).into_par_iter().map(|i| i * 2).collect();
    std::hint::black_box(v);
}
