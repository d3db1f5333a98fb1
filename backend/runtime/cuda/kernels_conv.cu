#include "backend/runtime/cuda/call.h"
namespace nns::backend::NNS_DEV {
void register_conv_kernels(KernelTable&) {}
}
