examples/moe.nns --config tiny --plan ep --gpus 2
