// tpcomm's fake CUDA driver: a shared library with the CUDA driver's entry points (SONAME
// libcuda.so.1) that tests select with TPCOMM_CUDA_LIB, so that CI runs every CUDA path of
// tpcomm without a GPU. It is strict where a lenient double would let bugs pass:
//
// - Device memory lives at addresses the host cannot touch: a PROT_NONE arena. The bytes are in
//   a memfd mapped a second time elsewhere (the alias), which only the fake uses, for copies and
//   kernels. A host read of a device pointer crashes, as on a GPU; a missing copy shows.
// - Streams are FIFO worker threads that wait FAKE_CUDA_DELAY_US microseconds before each
//   operation, so code that forgets to order host reads after a stream shows wrong data.
//   Streams do not synchronise implicitly with the legacy stream (stricter than the driver).
// - Whatever the driver rejects is rejected: calls before cuInit, no current context, released
//   contexts, freed or foreign pointers, copies out of an allocation's bounds, an IPC handle
//   opened by a second context of one process (a second open by the same context is a reference
//   on the same mapping, as cuda.h says), unknown devices, VMM memory mapped without access.
// - Legacy IPC handles and VMM POSIX fds work across processes (memfds: a peer opens the
//   exporter's fd through /proc), so multi-process tests share device memory for real.
// - Kernels: cuModuleLoadData accepts a fatbin, cubin or PTX image; cuLaunchKernel runs the host
//   twin registered under the kernel's name (fake_kernels.h), in the stream's order.
//
// Environment (read by the fake only): FAKE_CUDA_DEVICES (number of devices, default 2),
// FAKE_CUDA_DELAY_US (per-operation stream delay, default 0), FAKE_CUDA_REUSE_ADDRESSES=1
// (freed device addresses are handed out again, as the real allocator does; default: never,
// so that a stale pointer is always caught).
//
// What it cannot prove: real DMA, PCIe ordering, kernel performance, NCCL (whose runtime calls
// undocumented driver tables). Those run in tools/gpu_check.sh on a GPU.
#pragma once

#include <cuda.h>

extern "C" {
/// Present only in the fake: lets tests (and tpcomm's driver table) tell it from a real driver.
int tpcomm_fake_cuda_version(void);
/// Sets the per-operation stream delay at run time (microseconds).
void tpcomm_fake_cuda_set_delay_us(int us);
/// While `on`, no stream starts an operation (queued work waits; a test can then check what has
/// not run yet without counting on time).
void tpcomm_fake_cuda_hold(int on);
/// Sets FAKE_CUDA_REUSE_ADDRESSES at run time.
void tpcomm_fake_cuda_set_reuse(int on);
/// How many times cuInit ran (tests of lazy, once-only initialisation).
int tpcomm_fake_cuda_init_calls(void);
}
