//! A counting global allocator: live heap bytes and their peak, for peak-memory measurements.
//!
//! Install it in a binary, bench or test with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: semicrf_bench::alloc::CountingAlloc = semicrf_bench::alloc::CountingAlloc;
//! ```
//!
//! and wrap the call to measure in [`measure`]. Counting costs two relaxed atomic operations per
//! allocation and per free; the allocation itself is the system allocator's.
//!
//! The counters are process-wide: allocations of every thread (rayon workers included) count.
//! [`measure`] serialises measurements with a lock, but a thread that allocates concurrently
//! outside any measurement is counted too, so measuring code should keep other threads quiet
//! (the memory tests take a lock of their own around every test).
//!
//! A `realloc` is counted as its net size change; a system allocator that moves the block
//! briefly holds both (not counted). Bytes are the sizes asked for, not the allocator's
//! rounded-up block sizes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The counting allocator: forwards to [`System`] and keeps the live and peak byte counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static MEASURING: Mutex<()> = Mutex::new(());

#[inline]
fn grow(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[inline]
fn shrink(n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
}

// SAFETY: every method forwards its arguments unchanged to `System`, which implements
// `GlobalAlloc` correctly; the bookkeeping only touches atomics and never allocates, so the
// contract (returned pointers, layouts, no unwinding) is exactly `System`'s.
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
    /// The highest live heap during the call, minus the live heap before it: the call's peak
    /// allocation, including whatever it returned.
    pub peak: u64,
    /// Live heap after the call minus live heap before it (what the returned value and any
    /// leak or cache still hold; negative if the call freed memory that was live before).
    pub retained: i64,
    /// Number of allocations (and reallocations) during the call.
    pub allocations: u64,
}

/// Runs `f`, returning its result and the heap it used, measured by [`CountingAlloc`] (zeros if
/// it is not installed).
///
/// Measurements are serialised with a process-wide lock. Warm up thread pools before measuring
/// (their first use allocates thread stacks' bookkeeping): see [`warm_up_threads`].
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Measured) {
    let _guard = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let base = LIVE.load(Ordering::SeqCst);
    let allocs = ALLOCATIONS.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let r = f();
    let peak = PEAK.load(Ordering::SeqCst);
    let after = LIVE.load(Ordering::SeqCst);
    let m = Measured {
        peak: peak.saturating_sub(base) as u64,
        retained: after as i64 - base as i64,
        allocations: ALLOCATIONS.load(Ordering::SeqCst) - allocs,
    };
    (r, m)
}

/// Starts rayon's global pool and lets each worker run once, so that the pool's own
/// allocations happen before any measurement.
pub fn warm_up_threads() {
    use rayon::prelude::*;
    let n = rayon::current_num_threads().max(1) * 4;
    let v: Vec<usize> = (0..n).into_par_iter().map(|i| i * 2).collect();
    std::hint::black_box(v);
}
