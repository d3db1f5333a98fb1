examples/01_mlp.nns --config small --gpus 2
