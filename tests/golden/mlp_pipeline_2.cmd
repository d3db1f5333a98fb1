examples/01_mlp.nns --config small --plan pipeline --gpus 2
