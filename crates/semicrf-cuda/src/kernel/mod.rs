//! The contract between the host and the kernels: the kernel sources (compiled as named
//! headers, each `.cu` file `#include`s what it needs), the kernels by typed id, their
//! argument blocks ([`args`]), and the constants both sides use, defined here once and given
//! to the compiler as defines ([`Module::defines`]).

pub(crate) mod args;

pub(crate) use args::{
    CheckArgs, DevPtr, EdgeArgs, KBestArgs, MeetArgs, SampleArgs, SpreadArgs, StreamArgs,
};

/// The kernel sources by file name, as the `#include`s name them.
pub(crate) const SOURCES: [(&str, &str); 14] = [
    ("semiring.cuh", include_str!("../../kernels/semiring.cuh")),
    ("window.cuh", include_str!("../../kernels/window.cuh")),
    ("streaming.cu", include_str!("../../kernels/streaming.cu")),
    ("spread.cu", include_str!("../../kernels/spread.cu")),
    ("pipe.cu", include_str!("../../kernels/pipe.cu")),
    ("edge.cu", include_str!("../../kernels/edge.cu")),
    (
        "meet_common.cuh",
        include_str!("../../kernels/meet_common.cuh"),
    ),
    (
        "meet_sweep.cuh",
        include_str!("../../kernels/meet_sweep.cuh"),
    ),
    (
        "meet_phases.cuh",
        include_str!("../../kernels/meet_phases.cuh"),
    ),
    ("meet.cu", include_str!("../../kernels/meet.cu")),
    ("io.cu", include_str!("../../kernels/io.cu")),
    ("kbest.cu", include_str!("../../kernels/kbest.cu")),
    ("sample.cu", include_str!("../../kernels/sample.cu")),
    ("module.cu", include_str!("../../kernels/module.cu")),
];

/// The largest magnitude of a finite parameter the meet kernels take (nats; they check
/// scores and boundaries against the same bound): `MT_RANGE`.
pub(crate) const RANGE: f64 = 50.0;

/// Steps a block of the meet kernels' sweeps (`MT_P`): [`STEPS_WIDE`] in the kernels of a
/// label width where their shared memory still holds the ring (each block of steps has the
/// same barriers and fixed costs, so longer blocks cost less a step: on an H100, 3.6 against
/// 4.3 ms at S4), else [`STEPS`], which the general kernels are compiled for alone.
pub(crate) const STEPS: usize = 8;

/// See [`STEPS`].
pub(crate) const STEPS_WIDE: usize = 16;

/// The label widths the meet kernels are also compiled for (`MT_CT`: phase 2 unrolled with
/// a label's column of the transition in registers).
pub(crate) const WIDTHS: [usize; 3] = [8, 16, 32];

/// The most threads a block of the meet kernels of `p` steps a block has (their
/// `__launch_bounds__`, `MT_LB`): 512 for [`STEPS`], whose phases 1 and 3 then split large
/// K·C best (S8: 1.65 against 2.5 s with 256); 256 for [`STEPS_WIDE`], whose unrolled phase
/// 2 needs the registers (S4: 3.6 against 4.3 ms with 512).
pub(crate) fn max_threads(p: usize) -> usize {
    if p > STEPS { 256 } else { 512 }
}

/// The window items of a position of the log-domain kernels (`kernels/streaming.cu`) are
/// split into at most `C + TASKS` tasks (`LD_TASKS`), so that a long window is shared by every
/// team of the block; their partial reductions are kept in shared memory.
pub(crate) const TASKS: usize = 128;

/// The fewest durations of one label a task of the log-domain kernels takes (`LD_SPAN`): fewer
/// would make more partials to merge than they save.
pub(crate) const SPAN: usize = 64;

/// Which semiring a forward kernel runs (the kernels' template parameter `SR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SemiringId {
    Log,
    Max,
    Entropy,
}

/// What a call computes (for its memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    Forward(SemiringId),
    Viterbi,
    Backward,
}

/// The constants the kernels share with the host, as defines, for `p` steps a block.
pub(crate) fn shared_defines(p: usize) -> Vec<String> {
    vec![
        format!("-DMT_RANGE={RANGE:?}"),
        format!("-DMT_P={p}"),
        format!("-DMT_LB={}", max_threads(p)),
        format!("-DLD_TASKS={TASKS}"),
        format!("-DLD_SPAN={SPAN}"),
    ]
}

/// A compiled program: the general module (every [`Kernel`]) or the meet kernels of one
/// label width and steps a block ([`MeetKernel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Module {
    General,
    Meet { width: usize, steps: usize },
}

impl Module {
    /// The source file NVRTC compiles (the others are its headers).
    pub(crate) fn main(self) -> &'static str {
        match self {
            Module::General => "module.cu",
            Module::Meet { .. } => "meet.cu",
        }
    }

    /// The shared constants as defines (`-DNAME=value`).
    pub(crate) fn defines(self) -> Vec<String> {
        let p = match self {
            Module::General => STEPS,
            Module::Meet { steps, .. } => steps,
        };
        let mut d = shared_defines(p);
        if let Module::Meet { width, .. } = self {
            d.push(format!("-DMT_CT={width}"));
        }
        d
    }

    /// The program's name in NVRTC's messages.
    pub(crate) fn program_name(self) -> String {
        match self {
            Module::General => "semicrf_streaming.cu".into(),
            Module::Meet { width, steps } => format!("semicrf_meet_c{width}_p{steps}.cu"),
        }
    }
}

/// The headers NVRTC is given, by name: every source file and the argument blocks' layout
/// assertions.
pub(crate) fn headers() -> Vec<(String, String)> {
    SOURCES
        .iter()
        .map(|&(n, s)| (n.to_string(), s.to_string()))
        .chain(
            args::layouts()
                .iter()
                .map(|l| (l.header_name(), l.header())),
        )
        .collect()
}

/// The text of source file `name`.
pub(crate) fn source(name: &str) -> &'static str {
    match SOURCES.iter().find(|(n, _)| *n == name) {
        Some((_, s)) => s,
        None => unreachable!("no kernel source {name}"),
    }
}

macro_rules! kernels {
    ($($(#[$m:meta])* $v:ident = $n:literal,)*) => {
        /// A kernel of the general module.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum Kernel {
            $($(#[$m])* $v,)*
        }

        impl Kernel {
            /// Every kernel of the general module.
            pub(crate) const ALL: &[Kernel] = &[$(Kernel::$v,)*];

            /// Its `extern "C"` name.
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Kernel::$v => $n,)*
                }
            }
        }
    };
}

kernels! {
    /// `kernels/streaming.cu`: forward, static transition, log semiring.
    FwdStaticLog = "fwd_static_log",
    /// Max semiring (Viterbi).
    FwdStaticMax = "fwd_static_max",
    /// Entropy semiring.
    FwdStaticEnt = "fwd_static_ent",
    /// Forward, `(K, C, C)` transition.
    FwdDdLog = "fwd_dd_log",
    FwdDdMax = "fwd_dd_max",
    FwdDdEnt = "fwd_dd_ent",
    /// `kernels/spread.cu`: forward, static transition, one sequence over several blocks
    /// (log and max semirings).
    FwdSpreadLog = "fwd_spread_log",
    FwdSpreadMax = "fwd_spread_max",
    /// `kernels/pipe.cu`: forward, static transition, one sequence pipelined over several
    /// blocks (log and max semirings).
    FwdPipeLog = "fwd_pipe_log",
    FwdPipeMax = "fwd_pipe_max",
    /// Backward, static transition, one sequence over several blocks.
    BwdSpreadLog = "bwd_spread_log",
    /// Backward, static transition.
    BwdStaticLog = "bwd_static_log",
    /// Backward, `(K, C, C)` transition.
    BwdDdLog = "bwd_dd_log",
    /// `kernels/edge.cu`: the edge form's forward.
    EdgeFwdLog = "edge_fwd_log",
    EdgeFwdMax = "edge_fwd_max",
    EdgeFwdEnt = "edge_fwd_ent",
    /// The edge form's β.
    EdgeBwdLog = "edge_bwd_log",
    /// Edge marginals.
    EdgeMarg = "edge_marg",
    /// Boundary marginals of the edge form.
    EdgeBm = "edge_bm",
    /// `kernels/meet.cu`, general width ([`MeetKernel`] names them).
    MeetFwdLog = "meet_fwd_log",
    MeetFwdLogR = "meet_fwd_log_r",
    MeetSaveLog = "meet_save_log",
    MeetSaveLogR = "meet_save_log_r",
    MeetZLog = "meet_z_log",
    MeetBwdLog = "meet_bwd_log",
    MeetBwdLogR = "meet_bwd_log_r",
    /// `kernels/io.cu`: checks of potentials on the device.
    CheckInput = "check_input",
    /// The batch's weighted gradients of the shared parameters.
    SharedSum = "shared_sum",
    /// The sequences the meet kernels gave up, listed on the device.
    RerunList = "rerun_list",
    /// log Z out of a forward pass's `(log Z, h)` pairs.
    TakeEven = "take_even",
    /// `f64` results into a caller's `f32` buffer.
    NarrowF32 = "narrow_f32",
    /// A call's results into the caller's arrays, in one launch.
    CopyOut = "copy_out",
    /// `kernels/kbest.cu`: the k best segmentations.
    KBestFwd = "kbest_fwd",
    /// The shared parameters' checks when they are on the device.
    SharedCheck = "shared_check",
    /// `kernels/sample.cu`: backward sampling from saved forward values.
    SampleDraw = "sample_draw",
}

/// A pass of the meet kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum MeetPass {
    /// Both sweeps to the middle (`meet_fwd_log`).
    Forward,
    /// The same, saving the rows (`meet_save_log`).
    Save,
    /// The meet (`meet_z_log`).
    Z,
    /// The meet and both sweeps on to the other end with the marginals (`meet_bwd_log`).
    Backward,
}

/// A meet kernel: its pass, label width (0: the general kernels) and where the ring is (in
/// shared memory or global); [`MeetKernel::name`] is its `extern "C"` name. `meet_z_log`
/// has one variant a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MeetKernel {
    pub(crate) pass: MeetPass,
    pub(crate) width: usize,
    pub(crate) ring: bool,
}

impl MeetKernel {
    /// The `extern "C"` name: one variant per label width (`_cN`) and placement of the ring
    /// (`_r`: shared memory), so that the kernels address shared memory directly.
    pub(crate) fn name(self) -> String {
        let base = match self.pass {
            MeetPass::Forward => "meet_fwd_log",
            MeetPass::Save => "meet_save_log",
            MeetPass::Z => return "meet_z_log".into(),
            MeetPass::Backward => "meet_bwd_log",
        };
        let width = match self.width {
            0 => String::new(),
            ct => format!("_c{ct}"),
        };
        let ring = if self.ring { "_r" } else { "" };
        format!("{base}{width}{ring}")
    }

    /// The general module's kernel of width 0.
    pub(crate) fn general(self) -> Kernel {
        match (self.pass, self.ring) {
            (MeetPass::Forward, false) => Kernel::MeetFwdLog,
            (MeetPass::Forward, true) => Kernel::MeetFwdLogR,
            (MeetPass::Save, false) => Kernel::MeetSaveLog,
            (MeetPass::Save, true) => Kernel::MeetSaveLogR,
            (MeetPass::Z, _) => Kernel::MeetZLog,
            (MeetPass::Backward, false) => Kernel::MeetBwdLog,
            (MeetPass::Backward, true) => Kernel::MeetBwdLogR,
        }
    }

    /// Every kernel of the module of label width `width` (> 0).
    pub(crate) fn of_width(width: usize) -> Vec<MeetKernel> {
        let passes = [MeetPass::Forward, MeetPass::Save, MeetPass::Backward];
        passes
            .into_iter()
            .flat_map(|pass| [false, true].map(|ring| MeetKernel { pass, width, ring }))
            .chain([MeetKernel {
                pass: MeetPass::Z,
                width,
                ring: false,
            }])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel file of `kernels/` is a source here (and no other), and each `#include`
    /// names a source or a generated layout header.
    #[test]
    fn every_kernel_file_is_a_source_and_every_include_resolves() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut named: Vec<String> = SOURCES.iter().map(|(n, _)| n.to_string()).collect();
        named.sort();
        assert_eq!(files, named);
        let known: Vec<String> = headers().into_iter().map(|(n, _)| n).collect();
        for (n, s) in SOURCES {
            for inc in s.lines().filter_map(|l| l.strip_prefix("#include \"")) {
                let inc = inc.trim_end_matches('"');
                assert!(known.iter().any(|k| k == inc), "{n} includes {inc}");
            }
        }
    }

    /// The general meet kernels and the general module's list agree, and every name is a
    /// kernel the sources define.
    #[test]
    fn every_kernel_id_names_a_kernel_of_the_sources() {
        let all: String = SOURCES.iter().map(|(_, s)| *s).collect();
        for k in Kernel::ALL {
            let n = k.name();
            let defined = all.contains(&format!("void {n}("))
                || all.contains(&format!("void __launch_bounds__(1024) {n}("))
                || n.starts_with("meet_");
            assert!(defined, "{n}");
        }
        for width in [0].into_iter().chain(WIDTHS) {
            for ring in [false, true] {
                for pass in [
                    MeetPass::Forward,
                    MeetPass::Save,
                    MeetPass::Z,
                    MeetPass::Backward,
                ] {
                    let m = MeetKernel { pass, width, ring };
                    if width == 0 {
                        assert_eq!(m.general().name(), m.name());
                    } else if pass != MeetPass::Z {
                        assert!(MeetKernel::of_width(width).contains(&m), "{m:?}");
                    }
                }
            }
        }
    }
}
