"""The operator layer: the GPU Operator's operands, validator and controller (D-OP-01..04)."""
