examples/alphafold2.nns --config tiny --plan pipeline3f1b --gpus 2
