examples/gpt.nns --config tiny --plan megatron --gpus 2
