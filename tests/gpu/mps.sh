#!/usr/bin/env bash
# Starts or stops NVIDIA's MPS daemon, so that several processes share one GPU concurrently (the
# way to run several "hosts" on one GPU: give each process its own NCCL_HOSTID). Needs root.
#   source tests/gpu/mps.sh start   # exports CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY
#   bash tests/gpu/mps.sh stop
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/oxccl-mps}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/oxccl-mps-log}
case "${1:-}" in
  start)
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && echo "MPS started ($CUDA_MPS_PIPE_DIRECTORY)"
    ;;
  stop)
    echo quit | nvidia-cuda-mps-control && echo "MPS stopped"
    ;;
  *)
    echo "usage: source tests/gpu/mps.sh start | bash tests/gpu/mps.sh stop" >&2
    ;;
esac
