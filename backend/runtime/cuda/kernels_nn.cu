#include "backend/runtime/cuda/call.h"
namespace nns::backend::NNS_DEV {
void register_nn_kernels(KernelTable&) {}
}
