"""NPU device network: the device IP plan, the ping matrix and HCCL rank tables."""
