// The kernels of the general module, compiled in one NVRTC program (src/device/nvrtc.rs): the
// log-domain streaming kernels, the edge form, the general meet kernels (no MT_CT) and the
// kernels around a call's inputs and outputs, and backward sampling. The meet kernels of a
// label width are compiled from meet.cu alone, with MT_CT defined.
#include "streaming.cu"
#include "edge.cu"
#include "meet.cu"
#include "io.cu"
#include "sample.cu"
