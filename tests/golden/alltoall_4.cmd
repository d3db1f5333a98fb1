tests/plan/plans/collectives.nns --config small --plan alltoall --gpus 4
