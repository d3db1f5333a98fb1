examples/llama.nns --config tiny --plan megatron --gpus 2
