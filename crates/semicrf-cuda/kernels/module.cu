// The kernels of the general module, compiled in one NVRTC program (src/device/nvrtc.rs): the
// log-domain streaming kernels (one block a sequence, and one sequence spread or pipelined over
// several), the edge form, the general meet kernels (no MT_CT), the kernels around a call's
// inputs and outputs, the k-best kernel and backward sampling. The meet kernels of a label width are
// compiled from meet.cu alone, with MT_CT defined.
#include "streaming.cu"
#include "spread.cu"
#include "pipe.cu"
#include "edge.cu"
#include "meet.cu"
#include "io.cu"
#include "kbest.cu"
#include "sample.cu"
