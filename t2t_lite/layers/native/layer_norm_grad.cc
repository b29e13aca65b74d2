// t2t_lite's native kernels: ops that fuse a chain of memory-bound TensorFlow ops into one
// pass over the data. Built on first use by t2t_lite/layers/native_kernels.py (the C++
// compiler with TensorFlow's compile flags and -march=native) and loaded with
// tf.load_op_library; without a compiler the same maths runs as TensorFlow ops.
//
// T2tLiteLayerNormGrad: the closed-form backward pass of t2t's layer norm
// (fused_ops.layer_norm). With n = norm_x and g = dy * scale over the last axis (size D):
//   dx = rstd * (g - mean(g) - n * mean(g * n)),  d_scale = sum(dy * n),  d_bias = sum(dy)
// where d_scale and d_bias sum over every row. As TensorFlow ops that is eleven passes
// over [N, D] tensors; here dy and n are read once and dx written once. The rows are
// summed in fixed blocks of kBlockRows whose partial sums are added in block order, and a
// row's sums in kLanes fixed lanes (kernel_util.h), so the results do not depend on the
// thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernel_util.h"

namespace t2t_lite {

REGISTER_OP("T2tLiteLayerNormGrad")
    .Input("dy: T")
    .Input("norm_x: T")
    .Input("rstd: T")
    .Input("scale: T")
    .Output("dx: T")
    .Output("d_scale: T")
    .Output("d_bias: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(3));
      c->set_output(2, c->input(3));
      return absl::OkStatus();
    });

constexpr int64_t kBlockRows = 32;

template <typename T>
class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy_t = ctx->input(0);
    const Tensor& n_t = ctx->input(1);
    const Tensor& rstd_t = ctx->input(2);
    const Tensor& scale_t = ctx->input(3);
    OP_REQUIRES(ctx, dy_t.dims() >= 1 && dy_t.shape() == n_t.shape(),
                absl::InvalidArgumentError("T2tLiteLayerNormGrad: dy and norm_x must have "
                                           "one shape of rank >= 1"));
    const int64_t depth = dy_t.dim_size(dy_t.dims() - 1);
    const int64_t rows = depth ? dy_t.NumElements() / depth : 0;
    OP_REQUIRES(ctx, scale_t.NumElements() == depth && rstd_t.NumElements() == rows,
                absl::InvalidArgumentError("T2tLiteLayerNormGrad: scale must be [D] and "
                                           "rstd [..., 1] for dy [..., D]"));
    Tensor* dx_t = nullptr;
    Tensor* d_scale_t = nullptr;
    Tensor* d_bias_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dy_t.shape(), &dx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, scale_t.shape(), &d_scale_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, scale_t.shape(), &d_bias_t));
    const T* dy = dy_t.flat<T>().data();
    const T* norm_x = n_t.flat<T>().data();
    const T* rstd = rstd_t.flat<T>().data();
    const T* scale = scale_t.flat<T>().data();
    T* dx = dx_t->flat<T>().data();

    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    // Per block: the partial d_scale (D values), then the partial d_bias (D values).
    std::vector<T> partial(static_cast<size_t>(blocks) * 2 * depth, T(0));
    const T inv_depth = T(1) / T(depth);
    auto rows_of_blocks = [&](int64_t first_block, int64_t end_block) {
      std::vector<T> g(depth);
      for (int64_t b = first_block; b < end_block; ++b) {
        T* part_scale = partial.data() + b * 2 * depth;
        T* part_bias = part_scale + depth;
        const int64_t end_row = std::min(rows, (b + 1) * kBlockRows);
        for (int64_t r = b * kBlockRows; r < end_row; ++r) {
          const T* dy_r = dy + r * depth;
          const T* n_r = norm_x + r * depth;
          T lane_g[kLanes] = {};
          T lane_gn[kLanes] = {};
          int64_t j = 0;
          for (; j + kLanes <= depth; j += kLanes) {
            for (int l = 0; l < kLanes; ++l) {
              const T gj = dy_r[j + l] * scale[j + l];
              g[j + l] = gj;
              lane_g[l] += gj;
              lane_gn[l] += gj * n_r[j + l];
            }
          }
          for (int64_t k = j; k < depth; ++k) {
            const T gk = dy_r[k] * scale[k];
            g[k] = gk;
            lane_g[k - j] += gk;
            lane_gn[k - j] += gk * n_r[k];
          }
          for (int64_t k = 0; k < depth; ++k) {
            part_scale[k] += dy_r[k] * n_r[k];
            part_bias[k] += dy_r[k];
          }
          const T mean_g = SumLanes(lane_g) * inv_depth;
          const T mean_gn = SumLanes(lane_gn) * inv_depth;
          const T s = rstd[r];
          T* dx_r = dx + r * depth;
          for (int64_t k = 0; k < depth; ++k) dx_r[k] = s * (g[k] - mean_g - n_r[k] * mean_gn);
        }
      }
    };
    ParallelForBlocks(ctx, blocks, kBlockRows * depth * 12, rows_of_blocks);
    T* d_scale = d_scale_t->flat<T>().data();
    T* d_bias = d_bias_t->flat<T>().data();
    std::fill(d_scale, d_scale + depth, T(0));
    std::fill(d_bias, d_bias + depth, T(0));
    for (int64_t b = 0; b < blocks; ++b) {
      const T* part_scale = partial.data() + b * 2 * depth;
      for (int64_t k = 0; k < depth; ++k) {
        d_scale[k] += part_scale[k];
        d_bias[k] += part_scale[depth + k];
      }
    }
  }
};

T2T_LITE_REGISTER_FLOAT_KERNELS("T2tLiteLayerNormGrad", LayerNormGradOp);

}  // namespace t2t_lite
