//! Every setting this crate takes from the environment, read once (on first use, for the
//! life of the process) into one [`Tuning`]. `docs/configuration.md` at the repository's root
//! lists each variable with its meaning, its default and when to touch it; a test there
//! (`tests/configuration.rs`) fails when the code reads a `SEMICRF_*` name the page does not
//! list.

use std::sync::OnceLock;

/// The settings of the environment (see `docs/configuration.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// `SEMICRF_REQUIRE_GPU=1`: an unusable GPU is a panic in
    /// [`crate::CudaEngine::usable_or_skip`], not a skip.
    pub(crate) require_gpu: bool,
    /// `SEMICRF_CUDA_FAST=0`: the general meet kernels for every label count, not those
    /// compiled for a label width.
    pub(crate) wide_kernels: bool,
    /// `SEMICRF_CUDA_NVRTC_FLAGS`: extra options for NVRTC, whitespace-separated.
    pub(crate) nvrtc_flags: Vec<String>,
    /// `SEMICRF_CUDA_POOL=release`: the device's memory pool keeps the driver's default
    /// (freed memory goes back at every synchronisation) instead of keeping it.
    pub(crate) keep_freed_memory: bool,
    /// Copies of this many bytes and more run through page-locked memory
    /// (`SEMICRF_CUDA_DIRECT_BELOW`; `usize::MAX` where `SEMICRF_CUDA_PINNED=0`).
    pub(crate) direct_below: usize,
    /// A backward pass's results of at most this many bytes are staged in one go behind the
    /// kernels (`SEMICRF_CUDA_ONE_COPY_UPTO`, at most the page-locked buffer; 0 where
    /// `SEMICRF_CUDA_PINNED=0`).
    pub(crate) one_copy_upto: usize,
    /// Items per lane the log-domain kernels' plan aims at (`SEMICRF_CUDA_LANE_ITEMS`).
    pub(crate) lane_items: usize,
    /// Window terms per thread and block of steps the meet kernels' plan aims at
    /// (`SEMICRF_CUDA_MEET_ITEMS`).
    pub(crate) meet_items: usize,
    /// Ring slots a block of the spread forward kernels aims at, 0 for never spreading a
    /// sequence over several blocks (`SEMICRF_CUDA_SPREAD_SLOTS`).
    pub(crate) spread_slots: usize,
    /// The near depth of the pipelined forward kernels (`kernels/pipe.cu`), 0 for the spread
    /// kernels instead (`SEMICRF_CUDA_PIPE_NEAR`).
    pub(crate) pipe_near: usize,
}

/// Copies smaller than this (bytes) go straight from and to pageable memory.
pub(crate) const DIRECT_BELOW: usize = 2 << 20;

/// The page-locked buffer's size (bytes).
pub(crate) const STAGE_BYTES: usize = 32 << 20;

/// Results of at most this many bytes in all are copied back in one go.
pub(crate) const ONE_COPY_UPTO: usize = 4 << 20;

/// The default number of items per lane. Measured on an H100 (forward, S2-S7): 2 items per
/// lane beat 4, 8, 16 and 32 (fewer butterfly levels do not pay for the longer per-lane work).
pub(crate) const LANE_ITEMS: usize = 2;

/// The default number of window terms per thread of the meet kernels (on an H100, 8 and 16
/// beat 32 and 64 at S4-S6).
pub(crate) const MEET_ITEMS: usize = 8;

/// The fewest window items a position (`K·C`) at which the log semiring's calls run spread
/// over several blocks rather than in the meet kernels (Viterbi spreads whatever `K·C`). On
/// an H100 (2026-11-27), forward and forward+backward: at `(1, 20000, 8192, 50)` (409,600)
/// spread 244 and 570 ms against the meet kernels' 881 and 2,825 ms; at
/// `(1, 100000, 1000, 24)` (24,000) spread 870 and 2,060 ms against 626 and 1,581 ms.
pub(crate) const SPREAD_OVER_MEET: usize = 65_536;

/// The default ring slots a block of the spread forward kernels (`kernels/spread.cu`) holds:
/// a sequence whose longest duration is at least twice this runs on `⌈K / slots⌉` blocks (as
/// the device can hold them all at once). On an H100 at `(1, 20000, 8192, 50)` (2026-11-27,
/// one call), forward / Viterbi / forward+backward in ms: 64 slots (128 blocks) 224 / 163 /
/// 506; 128 slots 245 / 165 / 553; 256 slots 306 / 198 / 710; 512 slots 512 / 280 / 1,182.
pub(crate) const SPREAD_SLOTS: usize = 64;

/// The default near depth of the pipelined forward (`kernels/pipe.cu`): the durations a step
/// sums on the critical path, the rest summed ahead by the helper blocks.
pub(crate) const PIPE_NEAR: usize = 32;

impl Tuning {
    /// The settings `var` gives (a function from a variable's name to its value).
    pub(crate) fn from(var: impl Fn(&str) -> Option<String>) -> Tuning {
        let is = |name: &str, value: &str| var(name).as_deref() == Some(value);
        let number = |name: &str| var(name).and_then(|v| v.parse::<usize>().ok());
        let count =
            |name: &str, default: usize| number(name).filter(|&n| n >= 1).unwrap_or(default);
        let pinned = !is("SEMICRF_CUDA_PINNED", "0");
        Tuning {
            require_gpu: is("SEMICRF_REQUIRE_GPU", "1"),
            wide_kernels: !is("SEMICRF_CUDA_FAST", "0"),
            nvrtc_flags: var("SEMICRF_CUDA_NVRTC_FLAGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect(),
            keep_freed_memory: !is("SEMICRF_CUDA_POOL", "release"),
            direct_below: if pinned {
                number("SEMICRF_CUDA_DIRECT_BELOW").unwrap_or(DIRECT_BELOW)
            } else {
                usize::MAX
            },
            one_copy_upto: if pinned {
                number("SEMICRF_CUDA_ONE_COPY_UPTO")
                    .unwrap_or(ONE_COPY_UPTO)
                    .min(STAGE_BYTES)
            } else {
                0
            },
            lane_items: count("SEMICRF_CUDA_LANE_ITEMS", LANE_ITEMS),
            meet_items: count("SEMICRF_CUDA_MEET_ITEMS", MEET_ITEMS),
            spread_slots: number("SEMICRF_CUDA_SPREAD_SLOTS").unwrap_or(SPREAD_SLOTS),
            pipe_near: number("SEMICRF_CUDA_PIPE_NEAR").unwrap_or(PIPE_NEAR),
        }
    }
}

/// The process's settings, read from the environment on first use.
pub(crate) fn tuning() -> &'static Tuning {
    static TUNING: OnceLock<Tuning> = OnceLock::new();
    TUNING.get_or_init(|| Tuning::from(|name| std::env::var(name).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Tuning {
        Tuning::from(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_defaults_and_each_setting() {
        let d = with(&[]);
        assert_eq!(
            d,
            Tuning {
                require_gpu: false,
                wide_kernels: true,
                nvrtc_flags: Vec::new(),
                keep_freed_memory: true,
                direct_below: DIRECT_BELOW,
                one_copy_upto: ONE_COPY_UPTO,
                lane_items: LANE_ITEMS,
                meet_items: MEET_ITEMS,
                spread_slots: SPREAD_SLOTS,
                pipe_near: PIPE_NEAR,
            }
        );
        let t = with(&[
            ("SEMICRF_REQUIRE_GPU", "1"),
            ("SEMICRF_CUDA_FAST", "0"),
            ("SEMICRF_CUDA_NVRTC_FLAGS", " -lineinfo  -G "),
            ("SEMICRF_CUDA_POOL", "release"),
            ("SEMICRF_CUDA_DIRECT_BELOW", "1000"),
            ("SEMICRF_CUDA_ONE_COPY_UPTO", "999999999999"),
            ("SEMICRF_CUDA_LANE_ITEMS", "4"),
            ("SEMICRF_CUDA_MEET_ITEMS", "0"),
            ("SEMICRF_CUDA_SPREAD_SLOTS", "0"),
            ("SEMICRF_CUDA_PIPE_NEAR", "0"),
        ]);
        assert!(t.require_gpu && !t.wide_kernels && !t.keep_freed_memory);
        assert_eq!(t.nvrtc_flags, ["-lineinfo", "-G"]);
        assert_eq!((t.direct_below, t.one_copy_upto), (1000, STAGE_BYTES));
        // 0 items is no setting.
        assert_eq!((t.lane_items, t.meet_items), (4, MEET_ITEMS));
        // 0 slots: never spread.
        assert_eq!((t.spread_slots, t.pipe_near), (0, 0));
        let off = with(&[
            ("SEMICRF_CUDA_PINNED", "0"),
            ("SEMICRF_CUDA_DIRECT_BELOW", "1000"),
        ]);
        assert_eq!((off.direct_below, off.one_copy_upto), (usize::MAX, 0));
    }
}
