// The scalars of one AdamW update, as torch.optim.AdamW takes them: one type for the optimizer,
// the devices and both backends' kernels.
#pragma once

namespace saturn {

struct AdamWStep {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled; 0 for tensors that are not decayed
  int step = 1;            // 1-based, for bias correction
};

}  // namespace saturn
