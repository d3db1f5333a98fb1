examples/t5.nns --config tiny --plan interlaced --gpus 2
