// What t2t_lite's native kernels share: the TensorFlow names they use, the row lanes and
// blocks that keep their sums independent of the thread count, and their registration for
// float and double. Included by the kernels' .cc files (t2t_lite/layers/native_kernels.py
// builds them into one library).
#ifndef T2T_LITE_LAYERS_NATIVE_KERNEL_UTIL_H_
#define T2T_LITE_LAYERS_NATIVE_KERNEL_UTIL_H_

#include <cstdint>
#include <functional>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_lite {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::shape_inference::InferenceContext;

// A row's sums run in this many fixed lanes: they vectorize (one running sum would be one
// long dependency chain) and add up in the same order on every call.
constexpr int kLanes = 16;

template <typename T>
inline T SumLanes(const T (&lanes)[kLanes]) {
  T sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// Calls rows_of_blocks(first_block, end_block) over `blocks` blocks of rows on the op's
// intra-op thread pool; `cost_per_block` is the pool's estimate of one block's work.
inline void ParallelForBlocks(OpKernelContext* ctx, int64_t blocks, int64_t cost_per_block,
                              const std::function<void(int64_t, int64_t)>& rows_of_blocks) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
      blocks, cost_per_block, rows_of_blocks);
}

}  // namespace t2t_lite

// Registers the CPU kernel template `Op` of op `name` for float and double.
#define T2T_LITE_REGISTER_FLOAT_KERNELS(name, Op)                                          \
  REGISTER_KERNEL_BUILDER(Name(name).Device(DEVICE_CPU).TypeConstraint<float>("T"),       \
                          Op<float>);                                                      \
  REGISTER_KERNEL_BUILDER(Name(name).Device(DEVICE_CPU).TypeConstraint<double>("T"),      \
                          Op<double>)

#endif  // T2T_LITE_LAYERS_NATIVE_KERNEL_UTIL_H_
