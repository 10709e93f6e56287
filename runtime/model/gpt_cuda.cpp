#include "runtime/model/gpt_cuda.hpp"

#include <fmt/format.h>

#include <cmath>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/core/error.hpp"
#include "runtime/model/gpt.hpp"

namespace saturn {

using cuda::bf16;
using cuda::WeightLayout;

// The activations one block saves for its backward pass (as GptModel::LayerActs, with the
// attention's [B, H, T] log-sum-exp in place of its [B, H, T, T] probabilities).
struct CudaGptModel::LayerActs {
  Buffer<bf16> ln1;
  Buffer<float> ln1_mean, ln1_rstd;
  Buffer<bf16> qkv;   // [N, 3C] (llama: after rotary)
  Buffer<float> lse;  // [B, H, T]
  Buffer<bf16> atty;  // [N, C]
  Buffer<bf16> res2;  // [N, C]
  Buffer<bf16> ln2;
  Buffer<float> ln2_mean, ln2_rstd;
  Buffer<bf16> fc, up, act;  // [N, F]
};

struct CudaGptModel::Activations {
  std::vector<Buffer<bf16>> resid;  // L + 1 streams [N, C]
  std::vector<LayerActs> layers;
  Buffer<std::int32_t> tokens, targets;
  Buffer<bf16> lnf;
  Buffer<float> lnf_mean, lnf_rstd;
  Buffer<bf16> logits;  // [N, V]; the logits' gradient after head_backward
  Buffer<float> losses;
  // backward scratch
  Buffer<bf16> dres, dln, datty, dqkv, dqkv_pre, dfc, dup, dact;
  Buffer<float> delta;  // [B, H, T]
};

CudaGptModel::CudaGptModel(const ModelConfig& config, cuda::Context& ctx)
    : config_(config), layout_((config.validate(), config)), ctx_(&ctx) {
  if (config_.head_dim() > cuda::kAttentionMaxHeadDim)
    throw InputError(fmt::format(
        "the CUDA backend supports head dimensions up to {}, got {} "
        "(d_model {} / n_head {})",
        cuda::kAttentionMaxHeadDim, config_.head_dim(), config_.d_model, config_.n_head));
  std::size_t off = 0;
  for (const auto& t : layout_.tensors()) {
    dev_offset_.push_back(off);
    off = (off + t.numel + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
  }
  padded_total_ = off;
  MemoryPool& pool = ctx.pool();
  master_ = Buffer<float>(pool, padded_total_, "parameters");
  weights_ = Buffer<bf16>(pool, padded_total_, "parameters");
  grads_ = Buffer<float>(pool, padded_total_, "gradients");
  zero(master_.data(), master_.bytes());
  zero(weights_.data(), weights_.bytes());
  zero(grads_.data(), grads_.bytes());
}

CudaGptModel::~CudaGptModel() {
  // Buffers go back to the allocator's cache: the stream must be done with them.
  cudaStreamSynchronize(ctx_->stream());
}

void CudaGptModel::zero(void* ptr, std::size_t bytes) {
  if (ptr != nullptr && bytes > 0)
    SATURN_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, ctx_->stream()));
}

const bf16* CudaGptModel::p(const ParamTensor& t) const {
  return weights_.data() + dev_offset_[static_cast<std::size_t>(&t - layout_.tensors().data())];
}

float* CudaGptModel::g(const ParamTensor& t) {
  return grads_.data() + dev_offset_[static_cast<std::size_t>(&t - layout_.tensors().data())];
}

void CudaGptModel::upload_master(const std::vector<float>& padded) {
  SATURN_CUDA_CHECK(cudaMemcpyAsync(master_.data(), padded.data(), padded.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, ctx_->stream()));
  cuda::convert(*ctx_, weights_.data(), master_.data(), padded_total_);
  ctx_->synchronize("upload of the parameters");
}

void CudaGptModel::init_weights(std::uint64_t seed) {
  std::vector<float> padded(padded_total_, 0.0f);
  generate_canonical_weights(
      config_, seed, [&](std::size_t k, const ParamTensor& t, const float* values) {
        std::copy(values, values + t.numel,
                  padded.begin() + static_cast<std::ptrdiff_t>(dev_offset_[k]));
      });
  upload_master(padded);
}

void CudaGptModel::set_params(const float* host) {
  std::vector<float> padded(padded_total_, 0.0f);
  const auto& ts = layout_.tensors();
  for (std::size_t k = 0; k < ts.size(); ++k)
    std::copy(host + ts[k].offset, host + ts[k].offset + ts[k].numel,
              padded.begin() + static_cast<std::ptrdiff_t>(dev_offset_[k]));
  upload_master(padded);
}

namespace {
void download_unpadded(cuda::Context& ctx, const float* dev, std::size_t padded_total,
                       const ParameterLayout& layout, const std::vector<std::size_t>& dev_offset,
                       float* host) {
  std::vector<float> padded(padded_total);
  SATURN_CUDA_CHECK(cudaMemcpyAsync(padded.data(), dev, padded_total * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize("download of the parameters");
  const auto& ts = layout.tensors();
  for (std::size_t k = 0; k < ts.size(); ++k)
    std::copy(padded.begin() + static_cast<std::ptrdiff_t>(dev_offset[k]),
              padded.begin() + static_cast<std::ptrdiff_t>(dev_offset[k] + ts[k].numel),
              host + ts[k].offset);
}
}  // namespace

void CudaGptModel::get_params(float* host) {
  download_unpadded(*ctx_, master_.data(), padded_total_, layout_, dev_offset_, host);
}

void CudaGptModel::get_grads(float* host) {
  download_unpadded(*ctx_, grads_.data(), padded_total_, layout_, dev_offset_, host);
}

void CudaGptModel::zero_grads() {
  zero(grads_.data(), grads_.bytes());
}

template <typename Alloc>
void CudaGptModel::build_activations(Activations& a, const ModelConfig& c, int B, int T,
                                     Alloc&& alloc) {
  const std::size_t N = static_cast<std::size_t>(B) * T, C = c.d_model,
                    F = static_cast<std::size_t>(c.ffn_dim()), V = c.vocab_size,
                    BHT = static_cast<std::size_t>(B) * c.n_head * T;
  const bool gpt2 = c.arch == Arch::kGpt2;
  const char* tag = "activations";
  a.resid.resize(static_cast<std::size_t>(c.n_layer) + 1);
  for (auto& r : a.resid) alloc(r, N * C, tag);
  a.layers.resize(static_cast<std::size_t>(c.n_layer));
  for (auto& L : a.layers) {
    alloc(L.ln1, N * C, tag);
    if (gpt2) alloc(L.ln1_mean, N, tag);
    alloc(L.ln1_rstd, N, tag);
    alloc(L.qkv, N * 3 * C, tag);
    alloc(L.lse, BHT, tag);
    alloc(L.atty, N * C, tag);
    alloc(L.res2, N * C, tag);
    alloc(L.ln2, N * C, tag);
    if (gpt2) alloc(L.ln2_mean, N, tag);
    alloc(L.ln2_rstd, N, tag);
    alloc(L.fc, N * F, tag);
    if (!gpt2) alloc(L.up, N * F, tag);
    alloc(L.act, N * F, tag);
  }
  alloc(a.tokens, N, tag);
  alloc(a.targets, N, tag);
  alloc(a.lnf, N * C, tag);
  if (gpt2) alloc(a.lnf_mean, N, tag);
  alloc(a.lnf_rstd, N, tag);
  alloc(a.logits, N * V, tag);
  alloc(a.losses, N, tag);
  const char* stag = "backward scratch";
  alloc(a.dres, N * C, stag);
  alloc(a.dln, N * C, stag);
  alloc(a.datty, N * C, stag);
  alloc(a.dqkv, N * 3 * C, stag);
  if (!gpt2) alloc(a.dqkv_pre, N * 3 * C, stag);
  alloc(a.dfc, N * F, stag);
  if (!gpt2) alloc(a.dup, N * F, stag);
  alloc(a.dact, N * F, stag);
  alloc(a.delta, BHT, stag);
}

void CudaGptModel::reserve(int B, int T) {
  if (acts_ && B == B_ && T == T_) return;
  if (T > config_.max_seq_len)
    throw InputError(
        fmt::format("sequence length {} exceeds the model's seq_len {}", T, config_.max_seq_len));
  if (B < 1 || T < 1) throw InputError(fmt::format("micro-batch {}x{} is empty", B, T));
  ctx_->synchronize("reserve");  // old activations may still be in use
  acts_.reset();
  auto a = std::make_unique<Activations>();
  MemoryPool& d = ctx_->pool();
  build_activations(*a, config_, B, T, [&d](auto& buf, std::size_t n, const char* tag) {
    using Elem = std::remove_reference_t<decltype(*buf.data())>;
    buf = Buffer<Elem>(d, n, tag);
  });
  acts_ = std::move(a);
  B_ = B;
  T_ = T;
}

std::size_t CudaGptModel::activation_bytes(const ModelConfig& config, int B, int T) {
  Activations a;
  std::size_t total = 0;
  build_activations(a, config, B, T, [&total](auto& buf, std::size_t n, const char*) {
    total += n * sizeof(*buf.data());
  });
  return total;
}

float CudaGptModel::forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T) {
  reserve(B, T);
  embed_forward(tokens);
  for (int l = 0; l < config_.n_layer; ++l) block_forward(l);
  return head_forward(targets);
}

void CudaGptModel::forward_logits(const std::int32_t* tokens, int B, int T) {
  reserve(B, T);
  embed_forward(tokens);
  for (int l = 0; l < config_.n_layer; ++l) block_forward(l);
  head_forward(nullptr);
}

void CudaGptModel::get_logits(float* host) {
  if (!acts_) throw Error("get_logits before any forward");
  const std::size_t n = static_cast<std::size_t>(B_) * T_ * config_.vocab_size;
  std::vector<bf16> tmp(n);
  SATURN_CUDA_CHECK(cudaMemcpyAsync(tmp.data(), acts_->logits.data(), n * sizeof(bf16),
                                    cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize("download of the logits");
  for (std::size_t i = 0; i < n; ++i) host[i] = __bfloat162float(tmp[i]);
}

void CudaGptModel::backward(float dloss) {
  if (!have_targets_) throw Error("backward needs a forward with targets first");
  head_backward(dloss);
  for (int l = config_.n_layer - 1; l >= 0; --l) block_backward(l);
  embed_backward();
}

void CudaGptModel::embed_forward(const std::int32_t* tokens) {
  auto& a = *acts_;
  const std::size_t N = static_cast<std::size_t>(B_) * T_;
  for (std::size_t i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
      throw InputError(fmt::format("token id {} at position {} is outside the vocabulary [0, {})",
                                   tokens[i], i, config_.vocab_size));
  }
  SATURN_CUDA_CHECK(cudaMemcpyAsync(a.tokens.data(), tokens, N * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, ctx_->stream()));
  const auto& t = layout_.tensors();
  const bf16* wpe = config_.arch == Arch::kGpt2 ? p(t[1]) : nullptr;
  cuda::embedding_forward(*ctx_, a.resid[0].data(), a.tokens.data(), p(t[0]), wpe, B_, T_,
                          config_.d_model);
}

void CudaGptModel::block_forward(int l) {
  auto& a = *acts_;
  auto& L = a.layers[static_cast<std::size_t>(l)];
  cuda::Context& c = *ctx_;
  const BlockTensors w = layout_.block(l);
  const int N = B_ * T_, C = config_.d_model, F = config_.ffn_dim(), H = config_.n_head,
            hd = config_.head_dim();
  const std::size_t NC = static_cast<std::size_t>(N) * C, NF = static_cast<std::size_t>(N) * F;
  const float eps = config_.norm_eps;
  const bf16* x = a.resid[static_cast<std::size_t>(l)].data();
  bf16* out = a.resid[static_cast<std::size_t>(l) + 1].data();
  bf16* q = L.qkv.data();
  if (config_.arch == Arch::kGpt2) {
    cuda::layernorm_forward(c, L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), x, p(*w.ln1w),
                            p(*w.ln1b), N, C, eps);
    cuda::linear_forward(c, q, L.ln1.data(), p(*w.qkvw), p(*w.qkvb), N, C, 3 * C,
                         WeightLayout::kInOut);
    cuda::attention_forward(c, L.atty.data(), L.lse.data(), q, q + C, q + 2 * C, 3 * C, B_, T_, H,
                            hd);
    cuda::linear_forward(c, L.res2.data(), L.atty.data(), p(*w.projw), p(*w.projb), N, C, C,
                         WeightLayout::kInOut);
    cuda::residual_forward(c, L.res2.data(), L.res2.data(), x, NC);
    cuda::layernorm_forward(c, L.ln2.data(), L.ln2_mean.data(), L.ln2_rstd.data(), L.res2.data(),
                            p(*w.ln2w), p(*w.ln2b), N, C, eps);
    cuda::linear_forward(c, L.fc.data(), L.ln2.data(), p(*w.fcw), p(*w.fcb), N, C, F,
                         WeightLayout::kInOut);
    cuda::gelu_forward(c, L.act.data(), L.fc.data(), NF);
    cuda::linear_forward(c, out, L.act.data(), p(*w.fcprojw), p(*w.fcprojb), N, F, C,
                         WeightLayout::kInOut);
  } else {
    cuda::rmsnorm_forward(c, L.ln1.data(), L.ln1_rstd.data(), x, p(*w.ln1w), N, C, eps);
    cuda::linear_forward(c, q, L.ln1.data(), p(*w.qkvw), nullptr, N, C, 3 * C,
                         WeightLayout::kOutIn);
    cuda::rotary_forward(c, q, q, B_, T_, H, hd, 3 * C, config_.rope_theta);
    cuda::rotary_forward(c, q + C, q + C, B_, T_, H, hd, 3 * C, config_.rope_theta);
    cuda::attention_forward(c, L.atty.data(), L.lse.data(), q, q + C, q + 2 * C, 3 * C, B_, T_, H,
                            hd);
    cuda::linear_forward(c, L.res2.data(), L.atty.data(), p(*w.projw), nullptr, N, C, C,
                         WeightLayout::kOutIn);
    cuda::residual_forward(c, L.res2.data(), L.res2.data(), x, NC);
    cuda::rmsnorm_forward(c, L.ln2.data(), L.ln2_rstd.data(), L.res2.data(), p(*w.ln2w), N, C, eps);
    cuda::linear_forward(c, L.fc.data(), L.ln2.data(), p(*w.gatew), nullptr, N, C, F,
                         WeightLayout::kOutIn);
    cuda::linear_forward(c, L.up.data(), L.ln2.data(), p(*w.upw), nullptr, N, C, F,
                         WeightLayout::kOutIn);
    cuda::swiglu_forward(c, L.act.data(), L.fc.data(), L.up.data(), NF);
    cuda::linear_forward(c, out, L.act.data(), p(*w.downw), nullptr, N, F, C, WeightLayout::kOutIn);
  }
  cuda::residual_forward(c, out, out, L.res2.data(), NC);
}

float CudaGptModel::head_forward(const std::int32_t* targets) {
  auto& a = *acts_;
  cuda::Context& c = *ctx_;
  const int N = B_ * T_, C = config_.d_model, V = config_.vocab_size;
  const auto& t = layout_.tensors();
  const bf16* x = a.resid[static_cast<std::size_t>(config_.n_layer)].data();
  const bf16* head_w;
  if (config_.arch == Arch::kGpt2) {
    cuda::layernorm_forward(c, a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x,
                            p(t[t.size() - 2]), p(t[t.size() - 1]), N, C, config_.norm_eps);
    head_w = p(t[0]);  // tied to the token embedding
  } else {
    cuda::rmsnorm_forward(c, a.lnf.data(), a.lnf_rstd.data(), x, p(t[t.size() - 2]), N, C,
                          config_.norm_eps);
    head_w = p(t[t.size() - 1]);
  }
  cuda::linear_forward(c, a.logits.data(), a.lnf.data(), head_w, nullptr, N, C, V,
                       WeightLayout::kOutIn);
  have_targets_ = targets != nullptr;
  if (targets == nullptr) return 0.0f;
  std::size_t counted = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= V)
      throw InputError(
          fmt::format("target token {} is outside the vocabulary [0, {})", targets[i], V));
    if (targets[i] >= 0) ++counted;
  }
  SATURN_CUDA_CHECK(cudaMemcpyAsync(a.targets.data(), targets,
                                    static_cast<std::size_t>(N) * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, c.stream()));
  cuda::crossentropy_forward(c, a.losses.data(), a.logits.data(), a.targets.data(), N, V);
  std::vector<float> losses(static_cast<std::size_t>(N));
  SATURN_CUDA_CHECK(cudaMemcpyAsync(losses.data(), a.losses.data(), losses.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, c.stream()));
  c.synchronize("forward (loss)");
  double sum = 0;
  for (float v : losses) sum += v;
  return counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
}

void CudaGptModel::head_backward(float dloss) {
  auto& a = *acts_;
  cuda::Context& c = *ctx_;
  const int N = B_ * T_, C = config_.d_model, V = config_.vocab_size;
  const auto& t = layout_.tensors();
  // The logits become their gradient in place (fused softmax + cross-entropy backward).
  cuda::crossentropy_backward(c, a.logits.data(), nullptr, a.targets.data(), dloss, N, V);
  const bf16* dlogits = a.logits.data();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  zero(a.dln.data(), NC * sizeof(bf16));
  zero(a.dres.data(), NC * sizeof(bf16));
  const bf16* x = a.resid[static_cast<std::size_t>(config_.n_layer)].data();
  if (config_.arch == Arch::kGpt2) {
    cuda::linear_backward(c, a.dln.data(), g(t[0]), nullptr, dlogits, a.lnf.data(), p(t[0]), N, C,
                          V, WeightLayout::kOutIn);
    const auto& lnw = t[t.size() - 2];
    const auto& lnb = t[t.size() - 1];
    cuda::layernorm_backward(c, a.dres.data(), g(lnw), g(lnb), a.dln.data(), x, p(lnw),
                             a.lnf_mean.data(), a.lnf_rstd.data(), N, C);
  } else {
    const auto& head = t[t.size() - 1];
    const auto& nw = t[t.size() - 2];
    cuda::linear_backward(c, a.dln.data(), g(head), nullptr, dlogits, a.lnf.data(), p(head), N, C,
                          V, WeightLayout::kOutIn);
    cuda::rmsnorm_backward(c, a.dres.data(), g(nw), a.dln.data(), x, p(nw), a.lnf_rstd.data(), N,
                           C);
  }
}

void CudaGptModel::block_backward(int l) {
  auto& a = *acts_;
  auto& L = a.layers[static_cast<std::size_t>(l)];
  cuda::Context& c = *ctx_;
  const BlockTensors w = layout_.block(l);
  const int N = B_ * T_, C = config_.d_model, F = config_.ffn_dim(), H = config_.n_head,
            hd = config_.head_dim();
  const std::size_t NC = static_cast<std::size_t>(N) * C, NF = static_cast<std::size_t>(N) * F;
  const bf16* x = a.resid[static_cast<std::size_t>(l)].data();
  bf16* dres = a.dres.data();  // holds d(out); becomes d(res2), then d(x)
  const bf16* q = L.qkv.data();
  bf16* dq = a.dqkv.data();
  zero(a.dact.data(), NF * sizeof(bf16));
  zero(a.dfc.data(), NF * sizeof(bf16));
  zero(a.dln.data(), NC * sizeof(bf16));
  if (config_.arch == Arch::kGpt2) {
    cuda::linear_backward(c, a.dact.data(), g(*w.fcprojw), g(*w.fcprojb), dres, L.act.data(),
                          p(*w.fcprojw), N, F, C, WeightLayout::kInOut);
    cuda::gelu_backward(c, a.dfc.data(), L.fc.data(), a.dact.data(), NF);
    cuda::linear_backward(c, a.dln.data(), g(*w.fcw), g(*w.fcb), a.dfc.data(), L.ln2.data(),
                          p(*w.fcw), N, C, F, WeightLayout::kInOut);
    cuda::layernorm_backward(c, dres, g(*w.ln2w), g(*w.ln2b), a.dln.data(), L.res2.data(),
                             p(*w.ln2w), L.ln2_mean.data(), L.ln2_rstd.data(), N, C);
    zero(a.datty.data(), NC * sizeof(bf16));
    cuda::linear_backward(c, a.datty.data(), g(*w.projw), g(*w.projb), dres, L.atty.data(),
                          p(*w.projw), N, C, C, WeightLayout::kInOut);
    zero(a.dqkv.data(), 3 * NC * sizeof(bf16));
    cuda::attention_backward(c, dq, dq + C, dq + 2 * C, a.delta.data(), a.datty.data(),
                             L.atty.data(), L.lse.data(), q, q + C, q + 2 * C, 3 * C, B_, T_, H,
                             hd);
    zero(a.dln.data(), NC * sizeof(bf16));
    cuda::linear_backward(c, a.dln.data(), g(*w.qkvw), g(*w.qkvb), dq, L.ln1.data(), p(*w.qkvw), N,
                          C, 3 * C, WeightLayout::kInOut);
    // The key bias's gradient is exactly zero (softmax ignores a per-row shift); computed, it
    // is rounding noise that Adam would amplify (see gpt.cpp).
    zero(g(*w.qkvb) + C, static_cast<std::size_t>(C) * sizeof(float));
    cuda::layernorm_backward(c, dres, g(*w.ln1w), g(*w.ln1b), a.dln.data(), x, p(*w.ln1w),
                             L.ln1_mean.data(), L.ln1_rstd.data(), N, C);
  } else {
    cuda::linear_backward(c, a.dact.data(), g(*w.downw), nullptr, dres, L.act.data(), p(*w.downw),
                          N, F, C, WeightLayout::kOutIn);
    zero(a.dup.data(), NF * sizeof(bf16));
    cuda::swiglu_backward(c, a.dfc.data(), a.dup.data(), a.dact.data(), L.fc.data(), L.up.data(),
                          NF);
    cuda::linear_backward(c, a.dln.data(), g(*w.gatew), nullptr, a.dfc.data(), L.ln2.data(),
                          p(*w.gatew), N, C, F, WeightLayout::kOutIn);
    cuda::linear_backward(c, a.dln.data(), g(*w.upw), nullptr, a.dup.data(), L.ln2.data(),
                          p(*w.upw), N, C, F, WeightLayout::kOutIn);
    cuda::rmsnorm_backward(c, dres, g(*w.ln2w), a.dln.data(), L.res2.data(), p(*w.ln2w),
                           L.ln2_rstd.data(), N, C);
    zero(a.datty.data(), NC * sizeof(bf16));
    cuda::linear_backward(c, a.datty.data(), g(*w.projw), nullptr, dres, L.atty.data(), p(*w.projw),
                          N, C, C, WeightLayout::kOutIn);
    zero(a.dqkv.data(), 3 * NC * sizeof(bf16));
    cuda::attention_backward(c, dq, dq + C, dq + 2 * C, a.delta.data(), a.datty.data(),
                             L.atty.data(), L.lse.data(), q, q + C, q + 2 * C, 3 * C, B_, T_, H,
                             hd);
    // Rotary is linear: the pre-rotary gradients need only the incoming ones; v has no rotary,
    // so its third of each row is copied.
    zero(a.dqkv_pre.data(), 3 * NC * sizeof(bf16));
    cuda::rotary_backward(c, a.dqkv_pre.data(), dq, B_, T_, H, hd, 3 * C, config_.rope_theta);
    cuda::rotary_backward(c, a.dqkv_pre.data() + C, dq + C, B_, T_, H, hd, 3 * C,
                          config_.rope_theta);
    const std::size_t pitch = 3 * static_cast<std::size_t>(C) * sizeof(bf16);
    SATURN_CUDA_CHECK(cudaMemcpy2DAsync(a.dqkv_pre.data() + 2 * C, pitch, dq + 2 * C, pitch,
                                        static_cast<std::size_t>(C) * sizeof(bf16),
                                        static_cast<std::size_t>(N), cudaMemcpyDeviceToDevice,
                                        c.stream()));
    zero(a.dln.data(), NC * sizeof(bf16));
    cuda::linear_backward(c, a.dln.data(), g(*w.qkvw), nullptr, a.dqkv_pre.data(), L.ln1.data(),
                          p(*w.qkvw), N, C, 3 * C, WeightLayout::kOutIn);
    cuda::rmsnorm_backward(c, dres, g(*w.ln1w), a.dln.data(), x, p(*w.ln1w), L.ln1_rstd.data(), N,
                           C);
  }
}

void CudaGptModel::embed_backward() {
  auto& a = *acts_;
  const auto& t = layout_.tensors();
  float* dwpe = config_.arch == Arch::kGpt2 ? g(t[1]) : nullptr;
  cuda::embedding_backward(*ctx_, g(t[0]), dwpe, a.dres.data(), a.tokens.data(), B_, T_,
                           config_.d_model);
}

}  // namespace saturn
