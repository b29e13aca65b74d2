// T2tLiteExpSums: exp(logits) and its sums over the last axis, the first pass of the chunked
// softmax cross-entropy over the vocabulary (fused_ops._exp_and_sums). As TensorFlow ops that
// is an Exp and a Sum, two passes over a [positions, V] chunk; here each row is exponentiated
// and summed while it is in the cache, with Eigen's exp compiled for this CPU's vectors (the
// TensorFlow wheel's own kernels are built for older ones). The output takes over the logits'
// buffer when nothing else reads them. A row is summed by Eigen's fixed packet order, so the
// result does not depend on the thread count.
// Built and loaded as layer_norm_grad.cc is (t2t_lite/layers/native_kernels.py).
#include <algorithm>
#include <cstdint>

#include "kernel_util.h"
#include "Eigen/Core"

namespace t2t_lite {

REGISTER_OP("T2tLiteExpSums")
    .Input("logits: T")
    .Output("exp: T")
    .Output("sums: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      ::tensorflow::shape_inference::ShapeHandle sums;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), -1, c->MakeDim(1), &sums));
      c->set_output(1, sums);
      return absl::OkStatus();
    });

// Rows per unit of work handed to the thread pool.
constexpr int64_t kBlockRows = 8;

template <typename T>
class ExpSumsOp : public OpKernel {
 public:
  explicit ExpSumsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits_t = ctx->input(0);
    OP_REQUIRES(ctx, logits_t.dims() >= 1,
                absl::InvalidArgumentError("T2tLiteExpSums: logits must have rank >= 1"));
    Tensor* exp_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, logits_t.shape(),
                                                              &exp_t));
    ::tensorflow::TensorShape sums_shape = logits_t.shape();
    sums_shape.set_dim(sums_shape.dims() - 1, 1);
    Tensor* sums_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, sums_shape, &sums_t));
    const int64_t depth = logits_t.dim_size(logits_t.dims() - 1);
    const int64_t rows = depth ? logits_t.NumElements() / depth : 0;
    const T* logits = logits_t.flat<T>().data();
    T* exp = exp_t->flat<T>().data();
    T* sums = sums_t->flat<T>().data();
    using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    auto rows_of_blocks = [&](int64_t first_block, int64_t end_block) {
      const int64_t end_row = std::min(rows, end_block * kBlockRows);
      for (int64_t r = first_block * kBlockRows; r < end_row; ++r) {
        Eigen::Map<Row> out(exp + r * depth, depth);
        // In place when the output took over the input's buffer: an elementwise map.
        out = Eigen::Map<const Row>(logits + r * depth, depth).exp();
        sums[r] = out.sum();
      }
    };
    ParallelForBlocks(ctx, blocks, kBlockRows * depth * 20, rows_of_blocks);
  }
};

T2T_LITE_REGISTER_FLOAT_KERNELS("T2tLiteExpSums", ExpSumsOp);

}  // namespace t2t_lite
