// The tensor-parallel model of the memory tests (memory_check_test.cpp,
// bf16_storage_test.cpp): one text, so their line references agree.
#pragma once

namespace nns::test {

// Tensor parallel: linear#0 split on its output columns (line 14-15),
// linear#1 on its reduction dim (16-17), the rest replicated (18).
inline const char* kTensorParallelModel =
    "model M() {\n"
    "  param w1: [16, 8] = normal(0.02)\n"
    "  param w2: [16, 8] = normal(0.02)\n"
    "  fn forward(x) { return gelu(linear(x, w1)) + linear(x, w2) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [4, 8] = randn()\n"
    "  input y: [4, 16] = randn()\n"
    "  loss = mse(model(x), y)\n"
    "  optimizer = adamw(lr = 0.1)\n"
    "}\n"
    "plan tp(ngpus) {\n"                                                    // line 13
    "  let a = trans(select(\"linear#0\")[0], dim = \"n\", num = ngpus)\n"  // 14
    "  for i in 0..ngpus { assign(a[i], i) }\n"                             // 15
    "  let b = trans(select(\"linear#1\")[0], dim = \"k\", num = ngpus)\n"  // 16
    "  for i in 0..ngpus { assign(b[i], i) }\n"                             // 17
    "  replicate(unassigned(), 0..ngpus)\n"                                 // 18
    "}\n";

}  // namespace nns::test
