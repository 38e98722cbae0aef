"""The checks that prove a compiled model: the numpy int8 reference run, and onnxruntime layer by layer."""
