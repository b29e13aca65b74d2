// T2tLiteSoftmaxDropoutGrad: the gradient of softmax(logits) * mask with respect to the
// logits, given the gradient of the dropped weights (fused_ops.softmax_dropout_matmul's
// backward pass). Over the last axis (the keys):
//   d_weights = d_dropped * mask,
//   d_logits = (d_weights - sum(d_weights * weights)) * weights
// (TensorFlow's _SoftmaxGrad). As TensorFlow ops that is five passes over the attention
// weights; here one row of the three inputs is read once and d_logits written once. A row's
// sum runs in kLanes fixed lanes (kernel_util.h), so the result does not depend on the
// thread count.
// Built and loaded as layer_norm_grad.cc is (t2t_lite/layers/native_kernels.py).
#include <algorithm>
#include <cstdint>

#include "kernel_util.h"

namespace t2t_lite {

REGISTER_OP("T2tLiteSoftmaxDropoutGrad")
    .Input("d_dropped: T")
    .Input("weights: T")
    .Input("mask: T")
    .Output("d_logits: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

// Rows per unit of work handed to the thread pool.
constexpr int64_t kBlockRows = 64;

template <typename T>
class SoftmaxDropoutGradOp : public OpKernel {
 public:
  explicit SoftmaxDropoutGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dd_t = ctx->input(0);
    const Tensor& w_t = ctx->input(1);
    const Tensor& m_t = ctx->input(2);
    OP_REQUIRES(ctx, dd_t.dims() >= 1 && dd_t.shape() == w_t.shape() &&
                         dd_t.shape() == m_t.shape(),
                absl::InvalidArgumentError("T2tLiteSoftmaxDropoutGrad: d_dropped, weights "
                                           "and mask must have one shape of rank >= 1"));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dd_t.shape(), &out_t));
    const int64_t depth = dd_t.dim_size(dd_t.dims() - 1);
    const int64_t rows = depth ? dd_t.NumElements() / depth : 0;
    const T* dd = dd_t.flat<T>().data();
    const T* w = w_t.flat<T>().data();
    const T* m = m_t.flat<T>().data();
    T* out = out_t->flat<T>().data();
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    auto rows_of_blocks = [&](int64_t first_block, int64_t end_block) {
      const int64_t end_row = std::min(rows, end_block * kBlockRows);
      for (int64_t r = first_block * kBlockRows; r < end_row; ++r) {
        const T* dd_r = dd + r * depth;
        const T* w_r = w + r * depth;
        const T* m_r = m + r * depth;
        T* out_r = out + r * depth;
        T lanes[kLanes] = {};
        int64_t j = 0;
        for (; j + kLanes <= depth; j += kLanes) {
          for (int l = 0; l < kLanes; ++l) {
            const T dw = dd_r[j + l] * m_r[j + l];
            out_r[j + l] = dw;
            lanes[l] += dw * w_r[j + l];
          }
        }
        for (int64_t k = j; k < depth; ++k) {
          const T dw = dd_r[k] * m_r[k];
          out_r[k] = dw;
          lanes[k - j] += dw * w_r[k];
        }
        const T sum = SumLanes(lanes);
        for (int64_t k = 0; k < depth; ++k) out_r[k] = (out_r[k] - sum) * w_r[k];
      }
    };
    ParallelForBlocks(ctx, blocks, kBlockRows * depth * 8, rows_of_blocks);
  }
};

T2T_LITE_REGISTER_FLOAT_KERNELS("T2tLiteSoftmaxDropoutGrad", SoftmaxDropoutGradOp);

}  // namespace t2t_lite
