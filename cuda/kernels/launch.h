// Programmatic dependent launch (PDL, compute capability 9.0+): whether the
// kernel launches this thread makes may overlap the previous kernel in their
// stream. Host-only; the CUDA backend sets it per window from MINFER_PDL.
//
// Why: a decode step is a chain of hundreds of small kernels (a 30B MoE
// step: 893), each of which waits for the previous one to finish, flush its
// writes and let the next grid launch. With PDL the next grid launches as
// soon as every CTA of the previous one has started, and its CTAs wait on
// the device (launch.cuh pdl_enter) instead of on the launch path, so the
// launch latency hides behind the previous kernel's tail. Inside a stream
// capture the launches become programmatic edges of the CUDA graph.
//
// The contract that makes it safe (launch.cuh): every kernel of
// cuda/kernels calls pdl_enter() before it touches global memory, and so
// waits for the complete, flushed result of the grid before it. A kernel
// that did not would race; one launched without PDL is unaffected (the
// wait is then a no-op).
#ifndef MINFER_CUDA_KERNELS_LAUNCH_H_
#define MINFER_CUDA_KERNELS_LAUNCH_H_

namespace minfer::cuda {

namespace internal {
inline thread_local bool programmatic_launch = false;
}  // namespace internal

// On for this thread's later launches (off by default: tests that call the
// launchers directly run them the plain way). Set it only on a device of
// compute capability 9.0+; below, the launch attribute is refused.
inline void SetProgrammaticLaunch(bool on) { internal::programmatic_launch = on; }
inline bool ProgrammaticLaunch() { return internal::programmatic_launch; }

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_LAUNCH_H_
